mod basics;
mod direct;
mod escapes;
mod linger;
mod output;
mod scripts;
mod stopping;
