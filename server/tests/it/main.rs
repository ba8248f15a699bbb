//! Integration tests of the `mnemo` binary.

mod cli;
