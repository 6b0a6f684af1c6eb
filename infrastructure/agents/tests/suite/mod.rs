mod fixtures;
mod openai;
mod providers;
