//! Integration tests of the `mnemo` binary.

mod cli;
mod kill;
mod mcp;
mod support;
mod tcp;
