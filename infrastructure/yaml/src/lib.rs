//! YAML repository.
