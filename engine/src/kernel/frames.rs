//! A store's local log read as it lies on disk, without opening the store, and what each of
//! its frames did in a client's terms: what `amberdb cluster repair` compares with a
//! partition's stream (`docs/cluster.md`, "`amberdb cluster repair`").
//!
//! Guarantees: nothing in the directory is written, renamed, locked or removed; a frame is
//! returned only whole, with a valid checksum and a payload that decodes; a torn tail ends
//! its file's frames (as recovery would cut it), while a damaged frame, or log files whose
//! positions do not run on, is an error, never a silent gap. The frames returned are the
//! longest run of consecutive positions that ends with the newest log file (older files a
//! checkpoint's retention removed leave no hole inside it).

#![deny(clippy::unwrap_used, clippy::indexing_slicing)]

use crate::kernel::identity::StoreId;
use crate::kernel::ids::MemoryId;
use crate::kernel::log::format::{Op, check_frame, decode_op, stored_crc};
use crate::kernel::log::reader::{ScanEnd, scan};
use crate::kernel::log::writer::parse_file_name;
use crate::kernel::record::{Entity, EntityKind, Memory};
use crate::kernel::time::Timestamp;
use std::io;
use std::path::Path;

/// One frame of a store's local log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedFrame {
    /// Its sequence number: on a partition replica, its stream position.
    pub position: u64,
    /// The frame's bytes as the log holds them (prefix, type, sequence, payload): on a
    /// partition replica, the body of the stream message it applied (a chunked frame's
    /// chunks joined), unless it is a `Skip`.
    pub bytes: Vec<u8>,
}

impl LoggedFrame {
    /// Whether it is a `Skip`: a stream message that did not count (or a chunk held until
    /// its group is whole), written by the replica itself rather than taken from the stream.
    #[must_use]
    pub fn is_skip(&self) -> bool {
        check_frame(&self.bytes)
            .is_ok_and(|f| f.frame_type == crate::kernel::log::format::TYPE_SKIP)
    }
}

/// The store id of the store in `dir`, from its `IDENTITY` (read only).
///
/// # Errors
/// No `IDENTITY`, or one that does not decode.
pub fn store_id_of(dir: &Path) -> io::Result<StoreId> {
    let name = crate::kernel::identity::FILE_NAME;
    let bytes = std::fs::read(dir.join(name)).map_err(|e| damaged(name, e))?;
    crate::kernel::identity::decode(&bytes)
        .map(|identity| identity.store)
        .map_err(|e| damaged(name, format!("{e:?}")))
}

fn damaged(file: &str, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{file}: {why}"))
}

/// Every frame the log files of the store in `dir` hold (module doc), in position order.
///
/// # Errors
/// The directory or a log file cannot be read, a log file is damaged (its header, or a bad
/// frame with a valid one after it), or two files' positions overlap.
pub fn logged_frames(dir: &Path) -> io::Result<Vec<LoggedFrame>> {
    let mut runs: Vec<Vec<LoggedFrame>> = Vec::new();
    for (first, name) in log_files(dir)? {
        runs.push(frames_of(dir, first, &name)?);
    }
    // The run of consecutive positions that ends with the newest file.
    let mut kept: Vec<Vec<LoggedFrame>> = Vec::new();
    for run in runs.into_iter().rev() {
        if let (Some(next), Some(last)) = (
            kept.last().and_then(|r| r.first()),
            run.last().map(|f| f.position),
        ) && last + 1 != next.position
        {
            if last >= next.position {
                return Err(damaged(
                    &dir.display().to_string(),
                    format!(
                        "log files overlap: one runs to position {last}, the next starts at {}",
                        next.position
                    ),
                ));
            }
            break;
        }
        if !run.is_empty() {
            kept.push(run);
        }
    }
    Ok(kept.into_iter().rev().flatten().collect())
}

/// The log files of the store in `dir`: (first position, name), oldest first.
fn log_files(dir: &Path) -> io::Result<Vec<(u64, String)>> {
    let mut files: Vec<(u64, String)> = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let name = e?.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if let Some(first) = parse_file_name(name) {
            files.push((first, name.to_owned()));
        }
    }
    files.sort();
    Ok(files)
}

/// The frames of the log file `name` (whose name says it starts at `first`).
fn frames_of(dir: &Path, first: u64, name: &str) -> io::Result<Vec<LoggedFrame>> {
    let bytes = std::fs::read(dir.join(name)).map_err(|e| damaged(name, e))?;
    let mut frames = Vec::new();
    let scanned = scan(&bytes, |seq, offset, _op| {
        let at = usize::try_from(offset).unwrap_or(usize::MAX);
        let rest = bytes.get(at..).unwrap_or(&[]);
        let frame = check_frame(rest).map_err(|why| damaged(name, why))?;
        frames.push(LoggedFrame {
            position: seq,
            bytes: rest.get(..frame.total_len).unwrap_or(&[]).to_vec(),
        });
        Ok::<(), io::Error>(())
    });
    match scanned {
        Ok(s) => {
            if let ScanEnd::Corrupted { offset, reason } = s.end {
                return Err(damaged(name, format!("damaged at byte {offset}: {reason}")));
            }
            if s.first_seq != first {
                return Err(damaged(
                    name,
                    format!("its header starts at position {}", s.first_seq),
                ));
            }
            Ok(frames)
        }
        Err(Ok(header)) => Err(damaged(name, format!("its header: {header:?}"))),
        Err(Err(e)) => Err(e),
    }
}

/// The stored checksum of `bytes` when they are one sound frame (a stream message's body):
/// what a replica compares with `Store::last_frame_crc`.
#[must_use]
pub fn frame_crc(bytes: &[u8]) -> Option<u32> {
    check_frame(bytes)
        .ok()
        .filter(|f| f.total_len == bytes.len())
        .map(|_| stored_crc(bytes))
}

/// What one operation of a frame did, as a client would name it.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// A new record: a STORE, a chat turn, an item, an import's, a merge's (`archived`: it
    /// went straight to the archive).
    Stored {
        /// The record as written.
        record: Box<Memory>,
        /// Whether it went straight to the archive.
        archived: bool,
    },
    /// New field values of a record (an UPDATE that kept the content, FEEDBACK, a valid-to).
    Updated {
        /// The record as it is after the change.
        record: Box<Memory>,
    },
    /// New tags of a record.
    TagsSet {
        /// The record.
        id: MemoryId,
        /// Its tags from then on.
        tags: Vec<String>,
        /// When.
        at: Timestamp,
    },
    /// A record left the live set for the archive (superseded or merged).
    Archived {
        /// The record.
        id: MemoryId,
    },
    /// A record deleted (DELETE).
    Deleted {
        /// The record.
        id: MemoryId,
    },
    /// Archived records forgotten by archive retention.
    Forgotten {
        /// The records.
        ids: Vec<MemoryId>,
    },
    /// A user, agent or session made or replaced.
    EntityPut(Box<Entity>),
    /// A user, agent or session deleted with everything of it.
    EntityDeleted {
        /// User, agent or session.
        kind: EntityKind,
        /// Its user.
        user_id: String,
        /// Its id.
        id: String,
    },
    /// Reads counted as accesses.
    Touched {
        /// The records read.
        ids: Vec<MemoryId>,
    },
    /// No client's write: a claim, a skip, a canonical tag, a tag snapshot, a re-embedding's
    /// vectors, the embedder's name, a request id's reply. Names which.
    Internal(&'static str),
}

/// What the frame `bytes` (one whole log frame) did, a batch's operations in order.
///
/// # Errors
/// Bytes that are not one sound frame (length, checksum, payload).
pub fn frame_effects(bytes: &[u8]) -> Result<Vec<Effect>, String> {
    let frame = check_frame(bytes).map_err(str::to_owned)?;
    if frame.total_len != bytes.len() {
        return Err(format!(
            "{} bytes after the frame",
            bytes.len().saturating_sub(frame.total_len)
        ));
    }
    let op = decode_op(&frame).map_err(|e| e.reason.to_owned())?;
    let mut effects = Vec::new();
    push_effects(op, &mut effects);
    Ok(effects)
}

fn push_effects(op: Op, out: &mut Vec<Effect>) {
    out.push(match op {
        Op::Store { record, .. } => Effect::Stored {
            record,
            archived: false,
        },
        Op::StoreArchived { record, .. } => Effect::Stored {
            record,
            archived: true,
        },
        Op::Update { record } => Effect::Updated { record },
        Op::SetTags { id, tags, at } => Effect::TagsSet { id, tags, at },
        Op::Archive { id } => Effect::Archived { id },
        Op::Delete { id } => Effect::Deleted { id },
        Op::ForgetArchived { ids } => Effect::Forgotten { ids },
        Op::Entity(e) => Effect::EntityPut(e),
        Op::DeleteEntity { kind, user_id, id } => Effect::EntityDeleted { kind, user_id, id },
        Op::Touch { ids, .. } => Effect::Touched { ids },
        Op::Batch(ops) => {
            for op in ops {
                push_effects(op, out);
            }
            return;
        }
        Op::CanonicalTag { .. } => Effect::Internal("a canonical tag"),
        Op::Snapshot(_) => Effect::Internal("a tag snapshot"),
        Op::Reembed(_) => Effect::Internal("a re-embedding's vectors"),
        Op::Model { .. } => Effect::Internal("the embedder's name"),
        Op::Request(_) => Effect::Internal("a request id's reply"),
        Op::Claim(_) => Effect::Internal("a claim"),
        Op::Skip(_) => Effect::Internal("a skip"),
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;
    use crate::kernel::log::format::{encode_frame, encode_header};
    use amberdb_index::Owner;

    fn delete(seq: u64, id: u64) -> Vec<u8> {
        encode_frame(seq, &Op::Delete { id: MemoryId(id) })
    }

    fn write_log(dir: &Path, first: u64, frames: &[Vec<u8>]) {
        let mut bytes = encode_header(first, Owner::NONE);
        for f in frames {
            bytes.extend_from_slice(f);
        }
        std::fs::write(
            dir.join(crate::kernel::log::writer::file_name(first)),
            bytes,
        )
        .unwrap();
    }

    #[test]
    fn frames_run_across_files_from_the_newest_back_to_a_gap() {
        let dir = tempfile::tempdir().unwrap();
        // 1..=2, a gap (3 went with its file), 4..=5, 6..=7 (a torn tail after 7).
        write_log(dir.path(), 1, &[delete(1, 1), delete(2, 2)]);
        write_log(dir.path(), 4, &[delete(4, 4), delete(5, 5)]);
        let mut torn = delete(7, 7);
        let cut = delete(8, 8);
        torn.extend_from_slice(cut.get(..cut.len() - 3).unwrap());
        write_log(dir.path(), 6, &[delete(6, 6), torn]);
        let frames = logged_frames(dir.path()).unwrap();
        let positions: Vec<u64> = frames.iter().map(|f| f.position).collect();
        assert_eq!(positions, vec![4, 5, 6, 7]);
        assert_eq!(frames.first().unwrap().bytes, delete(4, 4));
        assert!(!frames.first().unwrap().is_skip());
        assert_eq!(
            frame_effects(&frames.first().unwrap().bytes).unwrap(),
            vec![Effect::Deleted { id: MemoryId(4) }]
        );
        // A newest file of its header alone (a rotation): the frames end where they did.
        write_log(dir.path(), 8, &[]);
        assert_eq!(
            logged_frames(dir.path()).unwrap().last().unwrap().position,
            7
        );
    }

    #[test]
    fn damage_and_overlap_are_errors_not_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let mut bad = delete(2, 2);
        let last = bad.len() - 1;
        *bad.get_mut(last).unwrap() ^= 0xff;
        write_log(dir.path(), 1, &[delete(1, 1), bad, delete(3, 3)]);
        let err = logged_frames(dir.path()).unwrap_err();
        assert!(err.to_string().contains("damaged"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        write_log(dir.path(), 1, &[delete(1, 1), delete(2, 2)]);
        write_log(dir.path(), 2, &[delete(2, 2)]);
        let err = logged_frames(dir.path()).unwrap_err();
        assert!(err.to_string().contains("overlap"), "{err}");
    }

    #[test]
    fn a_batch_is_its_operations_in_order_and_trailing_bytes_are_refused() {
        let frame = encode_frame(
            9,
            &Op::Batch(vec![
                Op::Archive { id: MemoryId(3) },
                Op::Delete { id: MemoryId(4) },
            ]),
        );
        assert_eq!(
            frame_effects(&frame).unwrap(),
            vec![
                Effect::Archived { id: MemoryId(3) },
                Effect::Deleted { id: MemoryId(4) }
            ]
        );
        let mut longer = frame.clone();
        longer.push(0);
        assert!(
            frame_effects(&longer)
                .unwrap_err()
                .contains("after the frame")
        );
        assert!(frame_effects(&frame[..frame.len() - 1]).is_err());
    }
}
