//! Integration tests of the `amberdb` binary.

mod backup;
mod cli;
mod client;
#[cfg(feature = "cluster")]
mod cluster;
#[cfg(feature = "cluster")]
mod cluster_import;
#[cfg(feature = "cluster")]
mod cluster_node;
mod defects;
mod faults;
mod foreign;
mod http;
mod inspector;
pub(crate) mod kill;
mod mcp;
mod reembed;
mod requests;
mod support;
mod tcp;
mod vmm;
