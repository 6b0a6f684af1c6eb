mod common;
mod concurrency;
mod state_store;
