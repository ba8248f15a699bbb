//! `search_memories`: strategies, modes, fusion, filters, pagination and the read hooks
//! (`docs/search.md`).
//!
//! Guarantees: every filter is applied while candidates are gathered (never to a finished
//! top-k), so a selective filter still fills its page; `similarity` ranks by exact cosine and
//! never falls back to anything else; a fallback of any other strategy or mode is reported in
//! `Hits::fallback`; nothing outside the user is ever read.

mod candidates;
pub mod dates;
mod page;
mod rank;
mod request;
mod run;

pub(crate) use candidates::*;
pub use rank::*;
pub use request::*;
