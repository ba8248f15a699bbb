//! `amberdb check`: verifies a store's files **without changing them** and reports what is
//! wrong and where (file and byte offset).
//!
//! Two passes:
//! 1. **Checksums**, file by file, read-only: the identity; every log file frame by frame (a
//!    torn tail in the newest log is a *warning* — it was never acknowledged and the next open
//!    truncates it — anywhere else it is an error); every checkpoint (its CRCs, every record
//!    decoded); every segment file (header, rows and checksum).
//! 2. **Cross-references**, from what pass 1 decoded: the log files follow each other with no
//!    gap in sequence numbers; the newest checkpoint is covered by the log (its next frame is
//!    there, or nothing follows it); every segment it names exists with the row count it
//!    says; no record id reaches its `next_id`; every live record of the checkpoint names a
//!    user, session and agent the checkpoint's entities hold (or, for stores written before
//!    entities were recorded, at least a consistent user); no segment file is left over.
//!
//! A store another process holds open can be checked (nothing is locked or written); what
//! the writer appends during the check may show up as a torn tail.

use crate::kernel::checkpoint::format as ckpt_format;
use crate::kernel::checkpoint::reader::{self as ckpt_reader, CheckpointError};
use crate::kernel::identity;
use crate::kernel::log::format::{HeaderError, Op};
use crate::kernel::log::reader::{self as log_reader, ScanEnd};
use crate::kernel::log::writer as log_writer;
use crate::kernel::record::{EntityKind, Kind};
use crate::kernel::segment_file;
use crate::kernel::storage::{FsStorage, Storage};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Data is damaged or missing: the store will not open, or opens without it.
    Error,
    /// Harmless, and the next open repairs it (a torn tail, a leftover temporary file).
    Warning,
}

/// One problem, and where it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// How bad.
    pub severity: Severity,
    /// The file, relative to the store directory.
    pub file: String,
    /// The byte offset in it, when one is known.
    pub offset: Option<u64>,
    /// What is wrong.
    pub what: String,
}

/// What `verify` looked at and found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Files read.
    pub files: usize,
    /// Log frames whose checksum and decoding passed.
    pub frames: u64,
    /// Records of the newest checkpoint.
    pub checkpoint_records: usize,
    /// Vector rows in the segment files.
    pub segment_rows: u64,
    /// The `IDENTITY` format version found (1: a store made before store ids, which the next
    /// open gives one; 0: none read).
    pub identity_version: u16,
    /// The store's id (empty before version 2).
    pub store_id: String,
    /// Problems, in the order found.
    pub findings: Vec<Finding>,
}

impl Report {
    /// Errors found.
    #[must_use]
    pub fn errors(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count()
    }

    fn add(
        &mut self,
        severity: Severity,
        file: &str,
        offset: Option<u64>,
        what: impl Into<String>,
    ) {
        self.findings.push(Finding {
            severity,
            file: file.to_owned(),
            offset,
            what: what.into(),
        });
    }
}

/// Verifies the store in `dir` (module doc). Reads only.
///
/// # Errors
/// `Io` if the directory cannot be listed; a file that cannot be read is a finding.
pub fn verify(dir: &Path) -> crate::kernel::error::Result<Report> {
    let io = crate::kernel::error::KernelError::io(dir);
    // Through the storage seam like every other file access of the engine.
    let names = FsStorage.list(dir).map_err(io)?;
    let mut check = Check {
        dir,
        names,
        r: Report::default(),
        log_limits: BTreeMap::new(),
    };
    let identity = check.identity();
    if let Some(identity) = &identity {
        check.owners(identity);
    }
    check.logs();
    let (newest, named_by_any, any_checkpoint) = check.checkpoints();
    check.newest_checkpoint(newest.as_ref(), any_checkpoint);
    check.segments(newest.as_ref(), &named_by_any);
    Ok(check.r)
}

/// The newest checkpoint that decodes, whole (its name and contents).
type Newest = Option<(String, ckpt_reader::Checkpoint)>;

/// One run of `verify`: the directory, its file names, what was found so far.
struct Check<'a> {
    dir: &'a Path,
    names: Vec<String>,
    r: Report,
    /// Log files of an earlier incarnation: the last sequence number of them the store shares.
    log_limits: BTreeMap<u64, u64>,
}

impl Check<'_> {
    /// Reads a whole file, counted; a file that cannot be read is a finding.
    fn read(&mut self, name: &str) -> Option<Vec<u8>> {
        match FsStorage.read(&self.dir.join(name)) {
            Ok(b) => {
                self.r.files += 1;
                Some(b)
            }
            Err(e) => {
                self.r
                    .add(Severity::Error, name, None, format!("cannot be read: {e}"));
                None
            }
        }
    }

    /// `IDENTITY`, and the leftovers of interrupted atomic writes. Returns the identity when
    /// it reads.
    fn identity(&mut self) -> Option<identity::Identity> {
        let mut read = None;
        if self.names.iter().any(|n| n == identity::FILE_NAME) {
            if let Some(b) = self.read(identity::FILE_NAME) {
                self.r.identity_version = b
                    .get(4..6)
                    .and_then(|v| v.try_into().ok())
                    .map_or(0, u16::from_le_bytes);
                match identity::decode(&b) {
                    Ok(id) => read = Some(id),
                    Err(_) => self.r.add(
                        Severity::Error,
                        identity::FILE_NAME,
                        None,
                        "damaged: the embedder the store was made with is unknown",
                    ),
                }
            }
        } else if !self.names.is_empty() {
            self.r
                .add(Severity::Error, identity::FILE_NAME, None, "missing");
        }
        if let Some(id) = read.as_ref().filter(|id| !id.is_legacy()) {
            self.r.store_id = id.store.to_string();
        }
        for n in self.names.iter().filter(|n| n.ends_with(".tmp")) {
            self.r.add(
                Severity::Warning,
                n,
                None,
                "an interrupted atomic write; the next open removes it",
            );
        }
        read
    }

    /// Every log, checkpoint and segment file's owner against `identity` (`docs/durability.md`,
    /// "File identity"); a foreign file is named with both stores and checked no further. The
    /// quarantine folder's files are named too.
    fn owners(&mut self, identity: &identity::Identity) {
        let mut foreign = Vec::new();
        for name in &self.names {
            let judged = crate::kernel::ownership::judge_file(&FsStorage, self.dir, identity, name);
            let Some(judged) = judged else { continue };
            if let (Some(first), Some(limit)) =
                (log_writer::parse_file_name(name), judged.log_limit)
            {
                self.log_limits.insert(first, limit);
            }
            if let Some(why) = judged.foreign {
                let next = if judged.is_log {
                    "the store does not open until it is moved out"
                } else {
                    "the next open moves it into quarantine/ and opens without it"
                };
                self.r.add(
                    Severity::Error,
                    name,
                    None,
                    format!("not this store's file: {why}; {next}"),
                );
                foreign.push(name.clone());
            }
        }
        self.names.retain(|n| !foreign.contains(n));
        for name in crate::kernel::ownership::quarantined_files(&FsStorage, self.dir) {
            self.r.add(
                Severity::Warning,
                &format!("{}/{name}", crate::kernel::ownership::QUARANTINE_DIR),
                None,
                "a file of another store an open moved aside; never read or removed by the store: delete it or take it back to its store",
            );
        }
    }

    /// The log files, oldest first: each one's frames, and no sequence numbers missing
    /// between them.
    fn logs(&mut self) {
        // Logs, oldest first: (name, first_seq, next seq after its last valid frame).
        let mut logs: Vec<(String, u64)> = self
            .names
            .iter()
            .filter_map(|n| Some((n.clone(), log_writer::parse_file_name(n)?)))
            .collect();
        logs.sort_by_key(|l| l.1);
        let mut spans: Vec<(String, u64, u64)> = Vec::new();
        for (i, (name, named)) in logs.iter().enumerate() {
            let Some(bytes) = self.read(name) else {
                continue;
            };
            let newest = i + 1 == logs.len();
            match log_reader::scan::<()>(&bytes, |_, _, _| Ok(())) {
                Err(Ok(HeaderError::Corrupted(why))) => {
                    self.r
                        .add(Severity::Error, name, Some(0), format!("bad header: {why}"))
                }
                Err(Ok(HeaderError::Unsupported(v))) => self.r.add(
                    Severity::Error,
                    name,
                    Some(0),
                    format!("format version {v} is newer than this build reads"),
                ),
                Err(Err(())) => {}
                Ok(scan) if scan.first_seq != *named => self.r.add(
                    Severity::Error,
                    name,
                    Some(8),
                    misnamed(*named, scan.first_seq),
                ),
                Ok(scan) => {
                    self.r.frames += scan.frames;
                    if let Some(&limit) = self.log_limits.get(named)
                        && scan.first_seq + scan.frames > limit + 1
                    {
                        self.r.add(
                            Severity::Error,
                            name,
                            None,
                            format!("not this store's file: a log of an earlier incarnation of this store whose frames run past its restore point (sequence number {limit}): a diverged copy's; the store does not open until it is moved out"),
                        );
                    }
                    spans.push((name.clone(), scan.first_seq, scan.first_seq + scan.frames));
                    match scan.end {
                    ScanEnd::Clean => {}
                    ScanEnd::TornTail { offset } if newest => self.r.add(
                        Severity::Warning,
                        name,
                        Some(offset),
                        format!("torn tail of {} bytes (a write that was never acknowledged); the next open truncates it", bytes.len() as u64 - offset),
                    ),
                    ScanEnd::TornTail { offset } => self.r.add(Severity::Error, name, Some(offset), "bad bytes at the end of a log that is not the newest"),
                    ScanEnd::Corrupted { offset, reason } => self.r.add(Severity::Error, name, Some(offset), format!("damaged frame: {reason} (valid frames follow it)")),
                }
                }
            }
        }
        for pair in spans.windows(2) {
            let [(a, _, a_end), (b, b_first, _)] = pair else {
                continue;
            };
            if *b_first > *a_end {
                self.r.add(
                    Severity::Error,
                    b,
                    Some(0),
                    format!(
                        "frames {a_end}–{} are missing between {a} and it",
                        b_first - 1
                    ),
                );
            }
        }
    }

    /// The checkpoints, newest first. Returns the newest that decodes, the segments every
    /// checkpoint that decodes names, and whether there is any checkpoint file.
    fn checkpoints(&mut self) -> (Newest, BTreeMap<u64, segment_file::SegmentEntry>, bool) {
        // Checkpoints, newest first (mapped, not read: a full one at 1M is ~250 MB and its records
        // ~0.5 GB): the first that decodes is kept whole for the cross-checks, and the older ones
        // are only verified, keeping their heads.
        let mut ckpts: Vec<(String, u64)> = self
            .names
            .iter()
            .filter_map(|n| Some((n.clone(), ckpt_format::parse_file_name(n)?)))
            .collect();
        ckpts.sort_by_key(|c| c.1);
        // The segments of every checkpoint that decodes: an older one (the fallback, or a delta's
        // base) names segments the newest may not.
        let mut named_by_any: BTreeMap<u64, segment_file::SegmentEntry> = BTreeMap::new();
        let mut newest: Option<(String, ckpt_reader::Checkpoint)> = None;
        let findings_before = self.r.findings.len();
        for (name, named) in ckpts.iter().rev() {
            let bytes = match FsStorage.map(&self.dir.join(name)) {
                Ok(b) => b,
                Err(e) => {
                    self.r
                        .add(Severity::Error, name, None, format!("cannot be read: {e}"));
                    continue;
                }
            };
            self.r.files += 1;
            // A checkpoint under another's name is not read further: its segments and records
            // would be checked against the wrong log.
            if let Ok(head) = ckpt_reader::decode_head(bytes.as_slice())
                && head.seq != *named
            {
                self.r
                    .add(Severity::Error, name, Some(8), misnamed(*named, head.seq));
                continue;
            }
            let checked = if newest.is_none() {
                ckpt_reader::decode(bytes.as_slice()).map(|c| {
                    named_by_any.extend(c.segments.iter().map(|e| (e.id, *e)));
                    newest = Some((name.clone(), c));
                })
            } else {
                ckpt_reader::verify(bytes.as_slice())
                    .map(|head| named_by_any.extend(head.segments.iter().map(|e| (e.id, *e))))
            };
            match checked {
                Ok(()) => {}
                Err(CheckpointError::Corrupted(e)) => self.r.add(
                    Severity::Error,
                    name,
                    Some(e.offset as u64),
                    format!("damaged: {} (derived data, never the only copy: an open removes it when it loads a newer checkpoint, else the next checkpoint or PURGE does, with the segments only it names)", e.reason),
                ),
                Err(CheckpointError::Unsupported(v)) => self.r.add(
                    Severity::Error,
                    name,
                    Some(0),
                    format!("format version {v} is newer than this build reads"),
                ),
            }
        }
        // At most one finding per checkpoint: reversed, they are in the files' order, oldest first.
        self.r.findings[findings_before..].reverse();
        // A delta is checked as what it opens as: its records merged into its base's.
        if let Some((name, c)) = &mut newest
            && let Some(delta) = c.delta.clone()
        {
            let base_name = ckpt_format::file_name(delta.base_seq);
            match merged_with_base(&FsStorage, &self.dir.join(&base_name), &delta, c) {
            Ok(records) => c.records = records,
            Err(what) => self.r.add(
                Severity::Error,
                name,
                None,
                format!(
                    "a delta on {base_name}, which {what}: it opens only with its base (an open falls back to the base itself or an older full checkpoint)"
                ),
            ),
        }
        }
        (newest, named_by_any, !ckpts.is_empty())
    }

    /// The newest checkpoint against the other files: the log after it, its segments, its
    /// records' ids, entities and item keys. A store without one has its first log file.
    fn newest_checkpoint(
        &mut self,
        newest: Option<&(String, ckpt_reader::Checkpoint)>,
        any_checkpoint: bool,
    ) {
        let mut named_segments = HashSet::new();
        if let Some((name, c)) = &newest {
            self.r.checkpoint_records = c.records.len();
            // The log file after the checkpoint was durable before it (durability.md C2, R5).
            let next = log_writer::file_name(c.seq + 1);
            if !self.names.contains(&next) {
                self.r.add(
                Severity::Error,
                &next,
                None,
                format!(
                    "missing: {name} was written after it was created, so the acknowledged writes after sequence number {} are lost",
                    c.seq
                ),
            );
            }
            for entry in &c.segments {
                named_segments.insert(entry.id);
                let seg = entry.file_name();
                if !self.names.contains(&seg) {
                    self.r.add(
                        Severity::Error,
                        &seg,
                        None,
                        format!("missing: {name} names it with {} rows", entry.rows),
                    );
                }
            }
            for m in &c.records {
                if m.id.0 >= c.next_id {
                    self.r.add(
                        Severity::Error,
                        name,
                        None,
                        format!("record {} is at or past next_id {}", m.id, c.next_id),
                    );
                }
            }
            check_entities(&mut self.r, name, c);
            check_item_keys(&mut self.r, name, c);
        }
        // A store with no checkpoint has its first log file from creation on (R3a).
        if newest.is_none()
            && !any_checkpoint
            && self.names.iter().any(|n| n == identity::FILE_NAME)
        {
            let first = log_writer::file_name(1);
            if !self.names.contains(&first) {
                self.r.add(
                    Severity::Error,
                    &first,
                    None,
                    "missing: the store has no checkpoint, so every acknowledged write was in it",
                );
            }
        }
    }

    /// Every segment file's checksum; row counts against the newest checkpoint.
    fn segments(
        &mut self,
        newest: Option<&(String, ckpt_reader::Checkpoint)>,
        named_by_any: &BTreeMap<u64, segment_file::SegmentEntry>,
    ) {
        // Segments: every file's checksum; row counts against the newest checkpoint.
        let entry_of: BTreeMap<u64, segment_file::SegmentEntry> = newest
            .as_ref()
            .map(|(_, c)| c.segments.iter().map(|e| (e.id, *e)).collect())
            .unwrap_or_default();
        for name in &self.names {
            let Some((id, kind)) = segment_file::parse_file_name(name) else {
                continue;
            };
            self.r.files += 1;
            let in_newest = entry_of.get(&id).filter(|e| e.kind == kind);
            let Some(entry) =
                in_newest.or_else(|| named_by_any.get(&id).filter(|e| e.kind == kind))
            else {
                self.r.add(
                Severity::Warning,
                name,
                None,
                "no checkpoint names it (left over by an interrupted checkpoint; the next open removes it)",
            );
                continue;
            };
            match segment_file::open(&FsStorage, self.dir, entry) {
                // Rows count against the newest checkpoint; an older one's segments are checked.
                Ok(_) if in_newest.is_some() => self.r.segment_rows += entry.rows,
                Ok(_) => {}
                Err(crate::kernel::error::KernelError::Corrupted { offset, reason, .. }) => {
                    self.r.add(
                        Severity::Error,
                        name,
                        Some(offset),
                        format!("damaged: {reason}"),
                    )
                }
                Err(e) => self.r.add(Severity::Error, name, None, e.to_string()),
            }
        }
    }
}

/// The live records of the delta `c` applied to its base at `base_path`, or what is wrong
/// with the base.
fn merged_with_base(
    storage: &dyn Storage,
    base_path: &Path,
    delta: &ckpt_format::Delta,
    c: &ckpt_reader::Checkpoint,
) -> Result<Vec<crate::kernel::record::Memory>, String> {
    let bytes = storage
        .read(base_path)
        .map_err(|e| format!("cannot be read ({e})"))?;
    let damaged = |e: CheckpointError| match e {
        CheckpointError::Corrupted(d) => format!("is damaged at offset {}: {}", d.offset, d.reason),
        CheckpointError::Unsupported(v) => format!("has format version {v}"),
    };
    let head = ckpt_reader::decode_head(&bytes).map_err(damaged)?;
    ckpt_reader::check_base(delta, c.next_id, &head).map_err(damaged)?;
    let mut records = Vec::new();
    // Where each record lies is not needed here: offsets and lengths 0.
    let changed = c.records.iter().map(|m| {
        Ok(ckpt_reader::Located {
            record: m.clone(),
            at: 0,
            len: 0,
            in_delta: true,
        })
    });
    ckpt_reader::decode_merged_into(&bytes, &head, &delta.deleted, changed, 16_384, |b| {
        records.extend(b.into_iter().map(|l| l.record));
        true
    })
    .map_err(|e| match e {
        // The delta was decoded whole before: only its base can fail here.
        ckpt_reader::MergeError::Base(e) | ckpt_reader::MergeError::Delta(e) => damaged(e),
    })?;
    Ok(records)
}

/// Every live record of a checkpoint names entities the checkpoint holds.
fn check_entities(r: &mut Report, name: &str, c: &ckpt_reader::Checkpoint) {
    let mut entities: HashSet<(EntityKind, String, String)> = HashSet::new();
    for op in &c.aux {
        if let Op::Entity(e) = op {
            entities.insert((e.kind, e.user_id.clone(), e.id.clone()));
        }
    }
    if entities.is_empty() {
        return; // written before entities were recorded (format v1/v2): nothing to cross-check
    }
    let mut reported = 0;
    for m in &c.records {
        let mut missing = Vec::new();
        if !entities.contains(&(EntityKind::User, m.user_id.clone(), m.user_id.clone())) {
            missing.push(format!("user {:?}", m.user_id));
        }
        if let Some(s) = &m.session_id
            && !entities.contains(&(EntityKind::Session, m.user_id.clone(), s.clone()))
        {
            missing.push(format!("session {s:?}"));
        }
        if let Some(a) = &m.agent_id
            && !entities.contains(&(EntityKind::Agent, m.user_id.clone(), a.clone()))
        {
            missing.push(format!("agent {a:?}"));
        }
        if m.kind == Kind::Message && m.session_id.is_none() {
            missing.push("a session (it is a message)".to_owned());
        }
        if !missing.is_empty() {
            reported += 1;
            if reported <= 20 {
                r.add(
                    Severity::Error,
                    name,
                    None,
                    format!(
                        "record {} names {} that the checkpoint does not hold",
                        m.id,
                        missing.join(", ")
                    ),
                );
            }
        }
    }
    if reported > 20 {
        r.add(
            Severity::Error,
            name,
            None,
            format!("... and {} more records like that", reported - 20),
        );
    }
}

/// No two live items of a user share a key (`docs/semantics.md`, "Items": a put replaces).
fn check_item_keys(r: &mut Report, name: &str, c: &ckpt_reader::Checkpoint) {
    let mut seen: HashSet<(&str, &str)> = HashSet::new();
    for m in &c.records {
        if let Some(item) = &m.item
            && !seen.insert((m.user_id.as_str(), item.key.as_str()))
        {
            r.add(
                Severity::Error,
                name,
                None,
                format!(
                    "record {} is a second live item of key {:?} for user {:?}",
                    m.id, item.key, m.user_id
                ),
            );
        }
    }
}

/// The finding for a log or checkpoint whose header names another sequence number than its
/// file name (`docs/durability.md`, "File identity").
fn misnamed(named: u64, header: u64) -> String {
    format!(
        "its name says sequence {named}, its header says {header}: the file was renamed, swapped or copied; an open refuses it"
    )
}
