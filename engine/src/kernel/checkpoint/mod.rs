//! Checkpoints: the metadata table and the sealed-segment list as of one log sequence number.
//!
//! Guarantees: a checkpoint is decoded only after its header and body checksums match and
//! every count is bounded by the bytes present; a bad one is a typed error and recovery falls
//! back to an older checkpoint or a full log replay. Not done here: writing the file (the
//! store does, `docs/durability.md` steps C3–C4).

pub mod format;
pub mod reader;
pub mod writer;
