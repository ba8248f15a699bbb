//! Integration tests of amberdb-index.

mod decoders;
mod ivf;
mod search;
