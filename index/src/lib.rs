//! amberdb-index: vectors in, neighbours out.
//!
//! Guarantees:
//! - Similarity kernels have one safe, length-checked entry each ([`kernels`]), tested against
//!   scalar oracles.
//! - Flat segments ([`segment`]) are validated completely (lengths, checksums, layout, key order)
//!   before a single vector is read; bad bytes are a typed error, never a panic or SIGBUS.
//! - [`Collection::search`] with [`Scan::F32`] equals brute force over the live rows that pass
//!   the filter, ordered by score then key; filters and tombstones apply inside the scan.
//!
//! - IVF segments (`docs/ivf.md`): [`ivf::build`] trains the lists ([`kmeans::train`],
//!   deterministic for a seed whatever the thread count) and measures the nprobe that meets a
//!   recall target on held-out rows; a [`Collection`] holds them beside flat segments, reads
//!   them whole for an exact search and probes them for an i8 one, probing further until a
//!   filter has let enough rows through, so the index never costs results.
//!
//! Not here: anything about memories, text or files on disk (the engine owns I/O and passes
//! [`SealedBytes`] in).
//!
//! ```
//! use amberdb_index::{Collection, SearchParams};
//!
//! let mut c = Collection::new(2);
//! c.insert(1, &[1.0, 0.0])?;
//! c.insert(2, &[0.0, 1.0])?;
//! c.insert(3, &[0.6, 0.8])?;
//! c.delete(2);
//! let hits = c.search(&[0.0, 1.0], &SearchParams::top(2))?;
//! assert_eq!(hits.iter().map(|n| n.key).collect::<Vec<_>>(), vec![3, 1]);
//!
//! let odd_only = |k: u64| k % 2 == 1;
//! let p = SearchParams { k: 1, filter: Some(&odd_only), min_score: 0.5, ..SearchParams::top(1) };
//! assert_eq!(c.search(&[1.0, 0.0], &p)?[0].key, 1);
//! # Ok::<(), amberdb_index::IndexError>(())
//! ```

#[cfg(target_endian = "big")]
compile_error!(
    "amberdb-index reads little-endian files through casts; big-endian targets are not supported"
);

pub mod bitcodes;
pub mod collection;
pub mod error;
pub mod ivf;
pub mod kernels;
pub mod keyset;
pub mod kmeans;
pub mod mmap;
pub mod quantize;
pub mod segment;
pub mod synthetic;
pub mod topk;

pub use collection::{
    Collection, GrowingRows, KeyFilter, Probe, RangeQuery, Scan, SearchParams, validate_vector,
};
pub use error::{IndexError, Result};
pub use keyset::KeySet;
pub use mmap::SealedBytes;
pub use segment::format::Owner;
pub use segment::{FlatSegment, HeaderOwner, IvfSegment, Sealed, header_owner};
pub use topk::{Neighbour, TopK};

/// Runs the IVF segment decoder on arbitrary bytes; the fuzz target `ivf_open` and a proptest
/// call this. Returns whether the bytes were accepted. Never panics.
#[must_use]
pub fn fuzz_ivf_open(data: &[u8]) -> bool {
    match segment::ivf::IvfSegment::open("fuzz", SealedBytes::copy_from(data)) {
        Ok(seg) => {
            // Touch every block the decoder vouched for, and every list.
            let rows: usize = (0..seg.nlist()).map(|l| seg.list_rows(l).len()).sum();
            let first = seg.keys().first().copied().unwrap_or(0);
            let _ = (
                rows,
                seg.centroids().len(),
                seg.scales().len(),
                seg.codes().len(),
                seg.vectors().len(),
                seg.row_of(first),
            );
            true
        }
        Err(_) => false,
    }
}

/// Runs the IVF decoder on arbitrary bytes and, when it accepts them, searches the segment
/// through its 1-bit codes (a version-3 file) and its i8 codes, every list probed: the
/// `ivf_v3_open` fuzz target and a proptest call this. Returns whether the bytes were
/// accepted. Never panics.
#[must_use]
pub fn fuzz_ivf_v3_open(data: &[u8]) -> bool {
    let Ok(seg) = segment::ivf::IvfSegment::open("fuzz", SealedBytes::copy_from(data)) else {
        return false;
    };
    let dim = seg.dim();
    let nlist = seg.nlist();
    let query: Vec<f32> = seg
        .vector(0)
        .map_or_else(|| vec![1.0; dim], <[f32]>::to_vec);
    let mut index = Collection::new(dim);
    if index.push_sealed(segment::Sealed::Ivf(seg)).is_err() {
        return true;
    }
    for bits in [true, false] {
        index.use_bit_codes(bits);
        let p = SearchParams {
            scan: Scan::i8_for(10),
            probe: Probe::Lists(u32::try_from(nlist).unwrap_or(u32::MAX)),
            ..SearchParams::top(10)
        };
        let _ = index.search(&query, &p);
    }
    true
}

/// Runs the segment decoder on arbitrary bytes; the fuzz target and a proptest call this.
/// Returns whether the bytes were accepted. Never panics.
#[must_use]
pub fn fuzz_segment_open(data: &[u8]) -> bool {
    match FlatSegment::open("fuzz", SealedBytes::copy_from(data)) {
        Ok(seg) => {
            // Touch every block the decoder vouched for.
            let _ = (
                seg.keys().len(),
                seg.vectors().len(),
                seg.codes().map(|(c, s)| c.len() + s.len()),
            );
            true
        }
        Err(_) => false,
    }
}
