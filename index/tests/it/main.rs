//! Integration tests of amberdb-index.

mod decoders;
mod ivf;
mod ivf_search;
mod search;
