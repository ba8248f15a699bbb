//! Integration tests of amberdb-index.

mod decoders;
mod search;
