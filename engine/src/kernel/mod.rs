//! The database kernel: everything that makes a store durable and consistent, and nothing
//! about what a memory means. The memory semantics (`crate::hooks`, `crate::memory`) sit on
//! top and reach the kernel only through what this module exports.
//!
//! - `storage`: the one seam for all file I/O (real files, or faults and crash images in tests),
//!   and the atomic-file helper.
//! - `log`, `checkpoint`, `identity`, `segment_file`: the on-disk formats (`docs/format/`);
//!   `ownership`: which store each file belongs to, and the quarantine of foreign ones.
//! - `recovery`: open a directory: find the newest usable checkpoint (`recovery/checkpoint.rs`),
//!   have the journal replay the log after it.
//! - `journal`: the log behind one interface, the trait `Journal` (append, acknowledge,
//!   rotate, replay: `docs/cluster.md`, "The journal seam"); `journal/local.rs` is the local
//!   log files and group commit, `journal/replay.rs` their replay at the open.
//! - `db`: one open database, the API the layers above use: `read` the state, `commit` an
//!   operation, `touch`, `checkpoint`, `flush`, batches. Split by job: `db/core.rs` (what every
//!   job shares: the `Db` and `Writer` structs, accessors), `db/mod.rs` (the open and the
//!   orchestration of background work), `db/write.rs` (the commit path), `db/checkpoint.rs`,
//!   `db/retention.rs` (retired files, archive retention), `db/indexing.rs` (IVF builds),
//!   `db/purge.rs`, `db/replica.rs` (a partition replica's stream); the backup's file choice
//!   is in `backup.rs`. Background threads (`maintenance`, `lexical`) get a closure, not the
//!   `Db`.
//! - `cluster`: what a partition's replicated log adds to the frames (the `Claim` and `Skip`
//!   frames, the chunks of a split frame) and what the state keeps of them; the replica path
//!   that applies a stream is `db/replica.rs`, its validity rule `journal/fence.rs`.
//! - `commit`: group commit and poisoning (`docs/durability.md`), the local journal's
//!   acknowledgement.
//! - `config`: what a store's options tell the kernel (`DbConfig`, `SyncPolicy`, `Clock`,
//!   `IndexOptions`, `ArchiveRetention`); `crate::options` re-exports the public ones and the
//!   kernel imports nothing from it.
//! - `state`: the in-memory state (the table and the vector collection) and `apply`, the one
//!   way an operation changes it; `read`: what the layers above may read of it (the table and
//!   the collection themselves are the kernel's).
//! - `table`, `keyword`, `text_column`: the metadata table (`table/user.rs` what it keeps per
//!   user, `table/archive.rs` the archive) and its indexes.
//! - `record`, `ids`, `rule`, `codec`, `error`: the data model, its ids, the decision codes it
//!   keeps, its byte encoding, and errors.
//! - `verify`: the offline check of a store's files; `frames`: a store's log read without
//!   opening it, and what each frame did (`amberdb cluster repair`).
//! - `backup`: online backup (which files, under the writer mutex, then the copy) and offline
//!   restore.

pub mod backup;
pub mod checkpoint;
pub mod cluster;
pub mod codec;
pub(crate) mod commit;
pub(crate) mod config;
pub(crate) mod db;
pub mod error;
pub mod frames;
pub mod identity;
pub mod ids;
pub(crate) mod journal;
pub(crate) mod keyword;
pub(crate) mod lexical;
pub mod log;
pub mod maintenance;
pub mod ownership;
pub(crate) mod read;
pub mod record;
pub(crate) mod recovery;
pub mod request;
pub mod rule;
pub mod segment_file;
pub(crate) mod shipping;
pub(crate) mod slots;
pub(crate) mod state;
pub mod storage;
pub(crate) mod table;
pub(crate) mod text_column;
pub(crate) mod time;
pub mod verify;
