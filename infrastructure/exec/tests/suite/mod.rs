mod basics;
mod output;
mod scripts;
mod stopping;
