//! The log: every change to a store, as CRC-framed, sequence-numbered frames.
//!
//! Guarantees: a frame is accepted only if its length is in bounds and its seeded CRC matches
//! (zeroed bytes never validate); a bad frame with nothing valid after it is a torn tail, a bad
//! frame followed by a valid one is corruption (`reader::ScanEnd`). Not done here: deciding
//! what to do about either (`crate::kernel::recovery`), or when to fsync (`crate::kernel::commit`).

pub mod format;
pub mod reader;
pub mod writer;

pub use format::{Op, Reembed};
