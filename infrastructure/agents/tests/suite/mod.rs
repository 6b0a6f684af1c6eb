mod fixtures;
mod openai;
mod openai_tools;
mod providers;
