//! Restoring the vectors a damaged segment held (`docs/durability.md`, "Recovery", R4b): an
//! open that had to leave a segment out keeps its records live but *unindexed*; their texts
//! are embedded again by the store's embedder, a batch at a time, until none is left, and
//! the store then writes the checkpoint that makes it whole.
//!
//! Guarantees: nothing is written to the log (a vector is a function of the text and the
//! model, so a crash only repeats the work); a record deleted or re-embedded meanwhile is
//! skipped; no checkpoint, purge or backup is written while any record is unindexed.

use crate::error::{EngineError, Result};
use crate::kernel::record::MemoryId;
use crate::store::{Inner, Store};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Texts embedded per batch: one `embed_batch` call, then one short hold of the writer lock.
const BATCH: usize = 64;

/// How often the background restoration logs its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// How long the background restoration waits after a failed batch (the embedder, a full
/// disk for the final checkpoint) before it tries again.
const RETRY_AFTER: Duration = Duration::from_secs(1);

impl Store {
    /// Records whose vectors are being restored after a damaged segment (R4b): out of vector
    /// search until then. 0 for a whole store.
    #[must_use]
    pub fn unindexed(&self) -> usize {
        self.inner.db.unindexed()
    }

    /// Restores every unindexed record's vector on the caller's thread, then writes the
    /// checkpoint that makes the store whole (R4b). What the background thread does for a
    /// store opened with a maintenance thread; one opened without calls this. Returns how many
    /// records it restored (0 for a whole store).
    ///
    /// # Errors
    /// `OutOfScope` for a scoped handle; `Embed` when the embedder fails (what was restored
    /// stays restored until the process ends). The purge that ends restoration never fails
    /// the call: a failed one is logged and run again by the maintenance thread.
    pub fn restore_vectors(&self) -> Result<usize> {
        self.every_user("restore_vectors")?;
        let mut restored = 0;
        while let Some(n) = restore_batch(&self.inner)? {
            restored += n;
        }
        Ok(restored)
    }
}

/// Embeds and restores one batch of unindexed records; `None` when none is left.
fn restore_batch(inner: &Inner) -> Result<Option<usize>> {
    let texts: Vec<(MemoryId, String)> = {
        let state = inner.db.read();
        state
            .unindexed()
            .waiting
            .iter()
            .take(BATCH)
            .filter_map(|id| Some((*id, state.content_of(*id)?.to_owned())))
            .collect()
    };
    if texts.is_empty() {
        return Ok(None);
    }
    let embedder = Arc::clone(&inner.embedding.read().embedder);
    let refs: Vec<&str> = texts.iter().map(|(_, t)| t.as_str()).collect();
    let vectors = embedder.embed_batch(&refs)?;
    if vectors.len() != refs.len() {
        return Err(EngineError::Embed(amberdb_embed::EmbedError::Failed {
            model_id: embedder.model_id().to_owned(),
            reason: format!(
                "returned {} vectors for {} texts",
                vectors.len(),
                refs.len()
            ),
        }));
    }
    let pairs = texts.into_iter().map(|(id, _)| id).zip(vectors).collect();
    Ok(Some(inner.db.restore_vectors(pairs)?))
}

/// Starts the thread that restores in the background (`amberdb-restore`); it holds the
/// store only for one batch at a time, and ends when none is left or the store is closed.
pub(crate) fn start(inner: &Arc<Inner>) -> std::io::Result<()> {
    let weak: Weak<Inner> = Arc::downgrade(inner);
    std::thread::Builder::new()
        .name("amberdb-restore".into())
        .spawn(move || {
            let mut restored = 0usize;
            let mut logged = std::time::Instant::now();
            loop {
                let Some(inner) = weak.upgrade() else { return };
                match restore_batch(&inner) {
                    Ok(Some(n)) => {
                        restored += n;
                        // Progress every few seconds: at 1M rows this runs for an hour.
                        if logged.elapsed() >= PROGRESS_EVERY {
                            logged = std::time::Instant::now();
                            let unindexed = inner.db.unindexed();
                            tracing::info!(restored, unindexed, "restoring the vectors of damaged segments: embedded again so far, of the records out of vector search until the last is done");
                        }
                    }
                    Ok(None) => {
                        tracing::info!(restored, "vectors of the damaged segments restored");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "restoring vectors failed; trying again");
                        drop(inner);
                        std::thread::sleep(RETRY_AFTER);
                    }
                }
            }
        })
        .map(drop)
}
