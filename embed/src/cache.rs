//! `CachedEmbedder`: a bounded LRU of query embeddings in front of any embedder.
//!
//! Guarantees: a cached vector is exactly what the inner embedder returned for the same text
//! (embedders are deterministic, so caching never changes a result); at most `capacity`
//! vectors are held; only [`Embedder::embed_query`] consults the cache, so bulk writes through
//! `embed_batch` neither pay for it nor evict the queries agents repeat.

use crate::{EmbedError, Embedder};
use lru::LruCache;
use parking_lot::Mutex;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Default number of cached queries: 2,048 × 384 f32 ≈ 3 MiB.
pub const DEFAULT_QUERY_CACHE: NonZeroUsize = NonZeroUsize::new(2048).expect("non-zero");

/// Hit and miss counts of a [`CachedEmbedder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Queries answered from the cache.
    pub hits: u64,
    /// Queries that ran the model.
    pub misses: u64,
    /// Vectors held now.
    pub entries: usize,
    /// Most vectors held.
    pub capacity: usize,
}

/// An embedder whose `embed_query` remembers the last `capacity` distinct queries.
pub struct CachedEmbedder {
    inner: Arc<dyn Embedder>,
    cache: Mutex<LruCache<String, Arc<[f32]>>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for CachedEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedEmbedder")
            .field("inner", &self.inner.model_id())
            .field("stats", &self.stats())
            .finish()
    }
}

impl CachedEmbedder {
    /// Caches up to `capacity` query vectors of `inner`.
    #[must_use]
    pub fn new(inner: Arc<dyn Embedder>, capacity: NonZeroUsize) -> CachedEmbedder {
        CachedEmbedder {
            inner,
            cache: Mutex::new(LruCache::new(capacity)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Counts so far.
    #[must_use]
    pub fn stats(&self) -> CacheStats {
        let cache = self.cache.lock();
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: cache.len(),
            capacity: cache.cap().get(),
        }
    }
}

impl Embedder for CachedEmbedder {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn dim(&self) -> usize {
        self.inner.dim()
    }

    fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.inner.embed_batch(texts)
    }

    fn count_tokens(&self, text: &str) -> Result<usize, EmbedError> {
        self.inner.count_tokens(text)
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        if let Some(hit) = self.cache.lock().get(text) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit.to_vec());
        }
        // The model runs outside the lock: concurrent misses on one text both compute it.
        self.misses.fetch_add(1, Ordering::Relaxed);
        let vector = self.inner.embed(text)?;
        self.cache
            .lock()
            .put(text.to_owned(), Arc::from(vector.as_slice()));
        Ok(vector)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HashingEmbedder;

    /// Counts the texts that reach the model.
    struct Counting {
        inner: HashingEmbedder,
        calls: AtomicU64,
    }

    impl Embedder for Counting {
        fn model_id(&self) -> &str {
            self.inner.model_id()
        }
        fn dim(&self) -> usize {
            self.inner.dim()
        }
        fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            self.calls.fetch_add(texts.len() as u64, Ordering::Relaxed);
            self.inner.embed_batch(texts)
        }
    }

    fn cached(capacity: usize) -> (Arc<Counting>, CachedEmbedder) {
        let counting = Arc::new(Counting {
            inner: HashingEmbedder::new(),
            calls: AtomicU64::new(0),
        });
        let cache = CachedEmbedder::new(counting.clone(), NonZeroUsize::new(capacity).unwrap());
        (counting, cache)
    }

    #[test]
    fn repeated_queries_skip_the_model_and_return_the_same_vector() {
        let (counting, cache) = cached(8);
        let first = cache.embed_query("where is the deploy runbook").unwrap();
        let again = cache.embed_query("where is the deploy runbook").unwrap();
        assert_eq!(first, again);
        assert_eq!(
            first,
            counting.inner.embed("where is the deploy runbook").unwrap()
        );
        assert_eq!(counting.calls.load(Ordering::Relaxed), 1);
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.entries), (1, 1, 1));
    }

    #[test]
    fn holds_at_most_capacity_and_evicts_the_least_recent() {
        let (counting, cache) = cached(2);
        for text in ["alpha", "beta", "alpha", "gamma"] {
            cache.embed_query(text).unwrap();
        }
        assert_eq!(cache.stats().entries, 2);
        let before = counting.calls.load(Ordering::Relaxed);
        cache.embed_query("alpha").unwrap(); // used after beta: still cached
        assert_eq!(counting.calls.load(Ordering::Relaxed), before);
        cache.embed_query("beta").unwrap(); // evicted by gamma: recomputed
        assert_eq!(counting.calls.load(Ordering::Relaxed), before + 1);
    }

    #[test]
    fn batches_bypass_the_cache() {
        let (counting, cache) = cached(4);
        cache.embed_batch(&["one", "two"]).unwrap();
        cache.embed_batch(&["one", "two"]).unwrap();
        assert_eq!(counting.calls.load(Ordering::Relaxed), 4);
        assert_eq!(cache.stats().entries, 0);
    }
}
