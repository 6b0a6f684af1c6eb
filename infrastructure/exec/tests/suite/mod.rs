mod basics;
mod direct;
mod escapes;
mod output;
mod scripts;
mod stopping;
