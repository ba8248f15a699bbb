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
#[cfg(feature = "cluster")]
mod cluster_rig;
mod defects;
mod faults;
mod foreign;
mod http;
mod inspector;
pub(crate) mod kill;
mod mcp;
#[cfg(feature = "cluster")]
mod netns;
mod reembed;
mod requests;
mod support;
mod tcp;
mod vmm;
