mod bash;
mod confine;
mod edit;
mod read;
mod search;
mod specs;
