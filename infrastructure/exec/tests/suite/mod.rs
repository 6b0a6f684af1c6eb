mod basics;
mod escapes;
mod output;
mod scripts;
mod stopping;
