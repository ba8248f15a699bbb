//! The benches crate's integration tests: the quality check on the committed public slice.

mod quality;
