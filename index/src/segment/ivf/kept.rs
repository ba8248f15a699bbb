//! A purge's rewrite of an IVF segment without some of its rows (`IvfSegment::kept`), handed
//! out in pieces so a 2 GB file is never held in memory.

use super::{BODY_SEED, HEADER_SEED, IvfLayout, IvfSegment, OWNER_VERSION, VERSION, owner_block};
use crate::bitcodes::{self, BLOCK_ROWS, Factors};
use crate::segment::format::{HEADER_LEN, Owner, put, seal_header};
use std::ops::Range;

impl IvfSegment {
    /// This segment's file without the rows `keep` refuses, to write in pieces
    /// (`Kept::write`): the same lists, centroids, nprobe and recall curve (measured at build;
    /// dropping rows does not retrain), and each kept row's key, scale, codes and vector byte
    /// for byte, nothing quantized again. Holds 12 bytes per row, never the file: at 1M rows
    /// the file is 2 GB, and a purge that built it in memory took 5 GB. `None` when fewer rows
    /// than lists are kept (a segment needs a row per list at least): the caller writes those
    /// rows as a flat segment. The file is written at this build's version, as `owner`'s.
    #[must_use]
    pub fn kept(&self, keep: &dyn Fn(u64) -> bool, owner: Owner) -> Option<Kept<'_>> {
        let keys = self.keys();
        let mut rows = Vec::new();
        let mut list_start = Vec::with_capacity(self.nlist + 1);
        list_start.push(0u64);
        for l in 0..self.nlist {
            for row in self.list_rows(l) {
                if keys.get(row).is_some_and(|&k| keep(k)) {
                    rows.push(u32::try_from(row).ok()?);
                }
            }
            list_start.push(rows.len() as u64);
        }
        if rows.len() < self.nlist {
            return None;
        }
        // A kept row's new number is its place in `rows`; `by_key` keeps the old key order.
        let mut renumber = vec![u32::MAX; self.count];
        for (new, &old) in (0u32..).zip(&rows) {
            if let Some(slot) = renumber.get_mut(old as usize) {
                *slot = new;
            }
        }
        let by_key = self
            .by_key()
            .iter()
            .filter_map(|&old| renumber.get(old as usize).copied())
            .filter(|&new| new != u32::MAX)
            .collect();
        // A file with bit codes keeps them; an older one is written at the first version with
        // an owner, never with codes it does not have.
        let version = if self.layout.bits.is_some() {
            VERSION
        } else {
            OWNER_VERSION
        };
        let layout = IvfLayout::new(
            rows.len() as u64,
            u32::try_from(self.dim).ok()?,
            u32::try_from(self.nlist).ok()?,
            version,
        )?;
        let mut kept = Kept {
            segment: self,
            owner,
            rows,
            list_start,
            by_key,
            layout,
            header: [0; HEADER_LEN],
        };
        let mut body = crc32fast::Hasher::new_with_initial(BODY_SEED);
        kept.write_body(&mut |piece| {
            body.update(piece);
            true
        });
        let header = &mut kept.header;
        header.copy_from_slice(self.bytes.as_slice().get(..HEADER_LEN)?);
        put(header, 4, &version.to_le_bytes());
        put(header, 16, &(kept.rows.len() as u64).to_le_bytes());
        put(header, 24, &kept.layout.file_len.to_le_bytes());
        seal_header(header, body.finalize(), HEADER_SEED);
        Some(kept)
    }
}

/// An IVF segment without some of its rows, ready to write (`IvfSegment::kept`).
#[derive(Debug)]
pub struct Kept<'a> {
    segment: &'a IvfSegment,
    owner: Owner,
    /// The kept rows of `segment`, in file order.
    rows: Vec<u32>,
    list_start: Vec<u64>,
    by_key: Vec<u32>,
    layout: IvfLayout,
    header: [u8; HEADER_LEN],
}

impl Kept<'_> {
    /// The file's length.
    #[must_use]
    pub fn file_len(&self) -> u64 {
        self.layout.file_len
    }

    /// Hands the file to `out` in pieces, in order, until it answers `false`; returns whether
    /// every piece was taken. The bytes are those `encode` writes for the kept rows.
    pub fn write(&self, out: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        out(&self.header) && self.write_body(out)
    }

    fn write_body(&self, out: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        let seg = self.segment;
        let src = seg.bytes.as_slice();
        let from = &seg.layout;
        let source = |range: &Range<u64>| -> &[u8] {
            let (Ok(start), Ok(end)) = (usize::try_from(range.start), usize::try_from(range.end))
            else {
                return &[];
            };
            src.get(start..end).unwrap_or_default()
        };
        let rows_of = |p: &mut Pieces<'_>, block: &[u8], width: usize| {
            for &r in &self.rows {
                p.put(row_bytes(block, r, width));
            }
        };
        let to = &self.layout;
        let mut p = Pieces {
            at: HEADER_LEN as u64,
            out,
            going: true,
        };
        p.pad_to(to.curve.start);
        p.put(source(&from.curve));
        p.pad_to(to.centroids.start);
        p.put(source(&from.centroids));
        p.pad_to(to.list_start.start);
        p.put(bytemuck::cast_slice(&self.list_start));
        p.pad_to(to.keys.start);
        rows_of(&mut p, source(&from.keys), 8);
        p.pad_to(to.scales.start);
        rows_of(&mut p, source(&from.scales), 4);
        p.pad_to(to.codes.start);
        rows_of(&mut p, source(&from.codes), seg.dim);
        p.pad_to(to.vectors.start);
        rows_of(&mut p, source(&from.vectors), 4 * seg.dim);
        p.pad_to(to.by_key.start);
        p.put(bytemuck::cast_slice(&self.by_key));
        if let Some(at) = &to.owner {
            p.pad_to(at.start);
            p.put(&owner_block(self.owner));
        }
        if let (Some(from_bits), Some(to_bits), Some(codes)) =
            (&from.bits, &to.bits, seg.bit_codes())
        {
            p.pad_to(to_bits.rotation.start);
            p.put(source(&from_bits.rotation));
            p.pad_to(to_bits.factors.start);
            rows_of(&mut p, source(&from_bits.factors), 4 * Factors::WIDTH);
            p.pad_to(to_bits.codes.start);
            // Kept rows move up: each block of 32 is gathered from their old blocks.
            let (words, width) = (bitcodes::words(seg.dim), bitcodes::block_bytes(seg.dim));
            let mut block = vec![0u8; width];
            for rows in self.rows.chunks(BLOCK_ROWS) {
                block.fill(0);
                for (lane, &old) in rows.iter().enumerate() {
                    let old = old as usize;
                    let from = codes
                        .codes
                        .get(old / BLOCK_ROWS * width..(old / BLOCK_ROWS + 1) * width)
                        .unwrap_or_default();
                    bitcodes::put_row(
                        &mut block,
                        lane,
                        &bitcodes::row_of(from, old % BLOCK_ROWS, words),
                    );
                }
                p.put(&block);
            }
        }
        p.pad_to(to.file_len);
        p.going && p.at == to.file_len
    }
}

/// Row `row` of a block of rows `width` bytes wide.
fn row_bytes(block: &[u8], row: u32, width: usize) -> &[u8] {
    let at = row as usize * width;
    block.get(at..at + width).unwrap_or_default()
}

/// A file handed out in pieces, in order, with zeros up to each block's start.
struct Pieces<'o> {
    at: u64,
    out: &'o mut dyn FnMut(&[u8]) -> bool,
    going: bool,
}

impl Pieces<'_> {
    fn put(&mut self, piece: &[u8]) {
        if self.going {
            self.going = (self.out)(piece);
            self.at += piece.len() as u64;
        }
    }

    fn pad_to(&mut self, at: u64) {
        const ZEROS: [u8; 64] = [0; 64];
        while self.going && self.at < at {
            let n = usize::try_from(at - self.at).map_or(ZEROS.len(), |n| n.min(ZEROS.len()));
            self.put(ZEROS.get(..n).unwrap_or_default());
        }
    }
}
