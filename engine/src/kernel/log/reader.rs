//! Reads a log file image frame by frame and classifies the first bad frame (if any) as a
//! torn tail or as corruption (`docs/format/log.md`, "Rules for bad data").

#![deny(clippy::unwrap_used, clippy::indexing_slicing)]

use super::format::{HeaderError, Op, RawFrame, check_frame, decode_header, decode_op};

/// How a scan ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte after the header is a valid frame.
    Clean,
    /// The bytes from `offset` on are not a frame and no valid frame follows: a torn write.
    TornTail {
        /// Where the valid frames end.
        offset: u64,
    },
    /// A bad or undecodable frame at `offset` with a valid frame after it, or a valid frame
    /// that makes no sense: the file is damaged.
    Corrupted {
        /// Where.
        offset: u64,
        /// What.
        reason: &'static str,
    },
}

/// What a scan found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// The header's first sequence number.
    pub first_seq: u64,
    /// The store the header names (`Owner::NONE` before v9).
    pub owner: amberdb_index::Owner,
    /// Offset just past the last valid frame.
    pub valid_end: u64,
    /// Frames delivered to the callback.
    pub frames: u64,
    /// How it ended.
    pub end: ScanEnd,
}

/// Whether any valid frame starts anywhere in `b`.
fn any_valid_frame(b: &[u8]) -> bool {
    (0..b.len()).any(|i| b.get(i..).is_some_and(|rest| check_frame(rest).is_ok()))
}

/// Scans `bytes` (a whole log file), calling `on_frame(seq, offset, op)` for each valid frame in
/// order (`offset`: where the frame starts in the file).
/// Sequence numbers must run `first_seq, first_seq + 1, ...`; a frame that breaks the run is
/// corruption. The callback's error stops the scan and is returned as is.
///
/// # Errors
/// `Err(Ok(header_error))` for a bad header; `Err(Err(e))` for the callback's error.
pub fn scan<E>(
    bytes: &[u8],
    mut on_frame: impl FnMut(u64, u64, Op) -> Result<(), E>,
) -> Result<Scan, Result<HeaderError, E>> {
    let header = decode_header(bytes).map_err(Ok)?;
    let first_seq = header.first_seq;
    let mut pos = header.len;
    let mut expected = first_seq;
    let mut frames = 0;
    let end = loop {
        let Some(rest) = bytes.get(pos..).filter(|r| !r.is_empty()) else {
            break ScanEnd::Clean;
        };
        let frame: RawFrame<'_> = match check_frame(rest) {
            Ok(f) => f,
            Err(reason) => {
                let after = rest.get(1..).unwrap_or(&[]);
                break if any_valid_frame(after) {
                    ScanEnd::Corrupted {
                        offset: pos as u64,
                        reason,
                    }
                } else {
                    ScanEnd::TornTail { offset: pos as u64 }
                };
            }
        };
        if frame.seq != expected {
            break ScanEnd::Corrupted {
                offset: pos as u64,
                reason: "sequence number out of order",
            };
        }
        let op = match decode_op(&frame) {
            Ok(op) => op,
            Err(e) => {
                break ScanEnd::Corrupted {
                    offset: (pos + 17 + e.offset) as u64,
                    reason: e.reason,
                };
            }
        };
        on_frame(frame.seq, pos as u64, op).map_err(Err)?;
        frames += 1;
        expected += 1;
        pos += frame.total_len;
    };
    let valid_end = match &end {
        ScanEnd::Clean => bytes.len() as u64,
        ScanEnd::TornTail { offset } | ScanEnd::Corrupted { offset, .. } => *offset,
    };
    Ok(Scan {
        first_seq,
        owner: header.owner,
        valid_end,
        frames,
        end,
    })
}
