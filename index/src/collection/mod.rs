//! `Collection`: the sealed segments and the growing rows of one vector space, with
//! tombstones, searched exactly and in parallel.
//!
//! Guarantees: an f32 search returns exactly the brute-force top-k over live, accepted rows,
//! ordered by score then key (the scan order and thread count never change the answer). The
//! filter and the tombstones are applied inside the scan, so a selective filter still fills
//! its k. An i8 search scans the compact codes, keeps `candidates` rows by approximate score,
//! and re-ranks them with exact f32 scores: its results carry exact scores, and equal the f32
//! top-k whenever the true neighbours are among the candidates (`recall@10 >= 0.99` measured).
//!
//! IVF segments (`docs/ivf.md`) are read whole by the f32 scan (so it stays exact) and probed
//! by the i8 scan: their nearest lists first ([`Probe`]), then further lists, doubling, while a
//! segment has yielded fewer accepted rows than the scan keeps candidates — so a filter or the
//! tombstones can cost recall but never results: a search returns `min(k, rows that pass)`
//! hits whatever the index. A range query (`Probe::Range`, store-time dedup) promises no count:
//! it skips rows far below its floor and stops probing a segment whose first lists hold nothing
//! at or near it.

mod params;
mod rows;
mod search;

pub use params::{KeyFilter, Probe, RANGE_SLACK, Scan, SearchParams};
pub use rows::{Collection, GrowingRows, validate_vector};
pub(crate) use search::centroid_scores;
pub use search::{RangeQuery, ScanCounts};
