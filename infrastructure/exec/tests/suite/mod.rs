mod basics;
mod direct;
mod output;
mod scripts;
mod stopping;
