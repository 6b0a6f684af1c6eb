//! awf engine: see crate docs.
