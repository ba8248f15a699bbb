//! Integration tests of the `mnemo` binary.

mod cli;
mod faults;
mod kill;
mod mcp;
mod support;
mod tcp;
