//! Integration tests of mnemo-index.

mod decoders;
mod search;
