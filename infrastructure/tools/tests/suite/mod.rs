mod bash;
mod confine;
mod edit;
mod race;
mod read;
mod search;
mod specs;
