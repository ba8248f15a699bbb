//! Integration tests of amberdb, one module per area.

mod api;
mod archive;
mod backup;
mod corruption;
mod crash;
mod decoders;
mod dedup;
mod delta;
mod faults;
mod fixtures;
mod format_docs;
mod hooked_model;
mod index;
mod items;
mod kill;
mod maintenance;
mod minilm;
mod model;
mod operations;
mod ownership;
mod reembed;
mod search;
mod search_minilm;
mod semantics;
mod support;
mod turns;
