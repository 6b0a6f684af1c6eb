mod common;
mod fixtures;
mod parse;
mod repo;
mod validate;
