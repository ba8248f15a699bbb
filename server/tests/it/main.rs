//! Integration tests of the `mnemo` binary.

mod cli;
mod kill;
mod support;
mod tcp;
