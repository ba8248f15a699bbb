//! Steps 1–2 of a write: plan every hook, then one model call for the content and every text
//! the hooks need, outside every lock.

use super::request::*;
use crate::error::{EngineError, Result};
use crate::hooks::Effective;
use crate::hooks::category;
use crate::hooks::tags::{self as tag_rules};
use crate::kernel::record::{
    self, Category, INITIAL_CONFIDENCE, Memory, MemoryId, NewMemory, Timestamp,
};
use crate::store::{CategoryLabels, Store};
use amberdb_index::kernels;
use std::sync::Arc;

pub(super) enum CategoryPlan {
    Known(Category, &'static str),
    Embed(String),
}

/// A request after step 1: validated, with the texts its hooks need embedded.
pub(super) struct Planned {
    pub(super) m: NewMemory,
    pub(super) user: String,
    pub(super) tags: Vec<String>,
    /// For each tag, whether it needs its vector (not an exact canonical tag at plan time).
    pub(super) tag_needs_vector: Vec<bool>,
    pub(super) category: CategoryPlan,
    pub(super) eff: Effective,
    /// An import's times and counts ([`Store::import`]); `None` for a new memory.
    pub(super) kept: Option<Provenance>,
    /// The content's sha256, taken once for the duplicate checks and the record.
    pub(super) content_hash: [u8; 32],
}

impl Planned {
    /// The new record this request stores under `id`, with what the decide phase resolved:
    /// its category, tags and agent.
    pub(super) fn record(
        &self,
        id: MemoryId,
        (category, tags, agent_id): (Category, Vec<String>, Option<String>),
        content_hash: [u8; 32],
        now: Timestamp,
    ) -> Memory {
        let m = &self.m;
        let kept = self.kept.unwrap_or(Provenance::created(now));
        Memory {
            id,
            user_id: self.user.clone(),
            kind: m.kind,
            session_id: m.session_id.clone(),
            agent_id,
            role: m.role,
            content: m.content.clone(),
            content_hash,
            category,
            tags,
            created_at: kept.created_at,
            updated_at: kept.updated_at,
            last_accessed_at: kept.last_accessed_at,
            access_count: kept.access_count,
            helpful_count: kept.helpful_count,
            harmful_count: kept.harmful_count,
            confidence: kept.confidence.unwrap_or(INITIAL_CONFIDENCE),
            supersedes: Vec::new(),
            valid_from: m.valid_from.unwrap_or(kept.created_at),
            valid_to: m.valid_to,
            decision: None,
            item: m.item.clone(),
            source_id: m.source_id.clone(),
        }
    }
}

/// Vectors for one planned request.
pub(super) struct Embedded {
    pub(super) content: Vec<f32>,
    pub(super) tags: Vec<Option<Vec<f32>>>,
    pub(super) category: Option<Vec<f32>>,
    /// The model epoch of the embedder that computed them (`Store::commit_embedded`).
    pub(super) epoch: u64,
    /// That embedder's thresholds: what these vectors are read against.
    pub(super) calibration: &'static crate::hooks::Calibration,
    /// Its dimension.
    pub(super) dim: usize,
    /// Whether `content` is the caller's own vector.
    pub(super) given: bool,
    /// The category labels' vectors by the same embedder, when `category` was embedded:
    /// resolved against these, never against the store's cache, which a re-embedding may
    /// have moved to another epoch meanwhile.
    pub(super) labels: Option<Arc<Vec<Vec<f32>>>>,
}

/// Caches `labels`, computed by the embedder of `epoch`, unless the cache already holds a
/// newer epoch's: a writer that embedded with the old model before a re-embedding switched
/// must not put its labels in place of the new model's.
pub(super) fn keep_newest_labels(
    cache: &mut Option<CategoryLabels>,
    epoch: u64,
    labels: &Arc<Vec<Vec<f32>>>,
) {
    if cache.as_ref().is_none_or(|(at, _)| *at < epoch) {
        *cache = Some((epoch, Arc::clone(labels)));
    }
}

impl Store {
    /// Steps 2–7 for requests planned (or refused) in step 1.
    pub(super) fn store_planned(
        &self,
        planned: Vec<Result<Planned>>,
    ) -> Result<Vec<Result<Stored>>> {
        let planned: Vec<Result<Planned>> = planned
            .into_iter()
            .map(|p| p.and_then(|p| self.refuse_known_duplicate(p)))
            .collect();
        let valid: Vec<&Planned> = planned.iter().flatten().collect();
        // One `Embedded` per valid request, in order (`embed_planned` checks the count).
        let mut embedded = self.embed_planned(&valid, None)?.into_iter();
        Ok(planned
            .into_iter()
            .map(|p| {
                let p = p?;
                let e = embedded.next().unwrap_or_else(|| unreachable!("counted"));
                self.decide_and_commit(p, e)
            })
            .collect())
    }

    /// Before step 2 of a new memory: an exact duplicate is answered before its content is
    /// embedded (a re-import of the same file would otherwise pay the model for every row).
    /// The check at commit stays the one that decides, for a content stored meanwhile. Not
    /// for an update, whose own record holds the content.
    pub(super) fn refuse_known_duplicate(&self, p: Planned) -> Result<Planned> {
        if p.eff.exact_dedup
            && p.m.kind != record::Kind::Message
            && let Some(existing) = self.read().find_hash(&p.user, &p.content_hash)
        {
            return Err(EngineError::AlreadyExists { existing });
        }
        Ok(p)
    }

    /// Step 2 for one request.
    pub(super) fn embed_one(&self, planned: &Planned, given: Option<Vec<f32>>) -> Result<Embedded> {
        self.embed_planned(&[planned], given)?
            .pop()
            .ok_or_else(|| self.embed_failed("returned no vectors"))
    }

    pub(crate) fn embed_failed(&self, reason: &str) -> EngineError {
        EngineError::Embed(amberdb_embed::EmbedError::Failed {
            model_id: self.embedding().embedder.model_id().to_owned(),
            reason: reason.to_owned(),
        })
    }

    /// Step 1 and the plan phase of the hooks.
    pub(super) fn plan(&self, req: StoreRequest) -> Result<Planned> {
        self.plan_kept(req, None)
    }

    /// Step 1: validates the request (and an import's provenance) before anything happens.
    pub(super) fn plan_kept(&self, req: StoreRequest, kept: Option<Provenance>) -> Result<Planned> {
        let mut eff = Effective::of(&self.inner.options.hooks, &req.hooks, self.calibration())?;
        let m = req.memory;
        if m.kind == record::Kind::Item {
            // An item is the caller's value under the caller's key: no write hook changes,
            // merges or refuses it (`docs/semantics.md`, "Items").
            eff.tags = false;
            eff.category = false;
            eff.exact_dedup = false;
            eff.semantic_dedup = false;
        }
        let canonical = record::validate_new(&m)?;
        if let Some(k) = &kept {
            k.validate(self.now())?;
        }
        if let Some(to) = m.valid_to
            && to
                <= m.valid_from
                    .or(kept.map(|k| k.created_at))
                    .unwrap_or_else(|| self.now())
        {
            return Err(EngineError::Invalid {
                field: "valid_to",
                reason: "must be later than valid_from (or than its creation, when valid_from is not given)"
                    .into(),
            });
        }
        let tags = if eff.tags {
            let mut out: Vec<String> = Vec::with_capacity(m.tags.len());
            for t in &m.tags {
                let v = tag_rules::validate_tag(t)?;
                if !out.contains(&v) {
                    out.push(v);
                }
            }
            out
        } else {
            canonical
        };
        let user = self.user_for(m.user_id.as_deref())?;
        let tag_needs_vector = if eff.tags {
            let state = self.read();
            let known = state.canonical(&user);
            tags.iter()
                .map(|t| !known.is_some_and(|c| c.contains(t)))
                .collect()
        } else {
            vec![false; tags.len()]
        };
        let category = match &m.category_text {
            None => CategoryPlan::Known(m.category, "given"),
            Some(text) if eff.category => match category::without_model(text) {
                Some((c, reason)) => CategoryPlan::Known(c, reason.as_str()),
                None => CategoryPlan::Embed(category::clean(text)),
            },
            Some(text) => CategoryPlan::Known(Category::parse(&category::clean(text))?, "exact"),
        };
        Ok(Planned {
            content_hash: record::content_hash(&m.content),
            m,
            user,
            tags,
            tag_needs_vector,
            category,
            eff,
            kept,
        })
    }

    /// Step 2: one `embed_batch` for every content and every text the hooks asked for; one
    /// `Embedded` per request, in order. `given` replaces the first request's content vector.
    pub(super) fn embed_planned(
        &self,
        planned: &[&Planned],
        given: Option<Vec<f32>>,
    ) -> Result<Vec<Embedded>> {
        let embedding = self.embedding();
        let embedder = &embedding.embedder;
        let mut texts: Vec<String> = Vec::new();
        let any_category = planned
            .iter()
            .any(|p| matches!(p.category, CategoryPlan::Embed(_)));
        let cached = self.category_labels(embedding.epoch);
        let need_labels = any_category && cached.is_none();
        if need_labels {
            texts.extend(
                Category::ALL
                    .iter()
                    .map(|c| category::label_text(*c).to_owned()),
            );
        }
        for (i, p) in planned.iter().enumerate() {
            if i > 0 || given.is_none() {
                texts.push(p.m.content.clone());
            }
            for (t, need) in p.tags.iter().zip(&p.tag_needs_vector) {
                if *need {
                    texts.push(tag_rules::embedding_form(t));
                }
            }
            if let CategoryPlan::Embed(text) = &p.category {
                texts.push(text.clone());
            }
        }
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = if refs.is_empty() {
            Vec::new()
        } else {
            embedder.embed_batch(&refs)?
        };
        if vectors.len() != refs.len() {
            return Err(self.embed_failed(&format!(
                "returned {} vectors for {} texts",
                vectors.len(),
                refs.len()
            )));
        }
        let mut it = vectors.into_iter();
        let labels = if need_labels {
            let labels = Arc::new(it.by_ref().take(Category::ALL.len()).collect());
            keep_newest_labels(
                &mut self.inner.category_labels.lock(),
                embedding.epoch,
                &labels,
            );
            Some(labels)
        } else {
            cached
        };
        let mut given = given;
        let mut out = Vec::new();
        for p in planned {
            let (content, given) = match given.take() {
                Some(v) => (v, true),
                None => (it.next().unwrap_or_default(), false),
            };
            let tags = p
                .tag_needs_vector
                .iter()
                .map(|need| if *need { it.next() } else { None })
                .collect();
            let embeds_category = matches!(p.category, CategoryPlan::Embed(_));
            let category = embeds_category.then(|| it.next()).flatten();
            out.push(Embedded {
                content,
                tags,
                category,
                epoch: embedding.epoch,
                calibration: crate::hooks::Calibration::of_model(embedder.model_id()),
                dim: embedder.dim(),
                given,
                labels: if embeds_category {
                    labels.clone()
                } else {
                    None
                },
            });
        }
        Ok(out)
    }

    /// The category labels' vectors by the embedder of `epoch`, if computed.
    pub(super) fn category_labels(&self, epoch: u64) -> Option<Arc<Vec<Vec<f32>>>> {
        match &*self.inner.category_labels.lock() {
            Some((at, labels)) if *at == epoch => Some(Arc::clone(labels)),
            _ => None,
        }
    }

    /// The decide phase of the category hook: the planned category, or the label closest to
    /// the category text's vector, with how it was chosen.
    pub(super) fn resolve_category(
        &self,
        plan: &CategoryPlan,
        e: &Embedded,
    ) -> (Category, &'static str) {
        let vector = e.category.as_deref();
        match plan {
            CategoryPlan::Known(c, reason) => (*c, reason),
            CategoryPlan::Embed(_) => {
                let sims: Vec<f32> = e
                    .labels
                    .as_deref()
                    .map(|labels| {
                        labels
                            .iter()
                            .map(|l| {
                                vector
                                    .and_then(|v| kernels::cosine(l, v).ok())
                                    .unwrap_or(0.0)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let (c, reason) = category::by_similarity(&sims, e.calibration);
                (c, reason.as_str())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_epochs_labels_never_replace_a_newer_ones() {
        let old = Arc::new(vec![vec![1.0_f32]]);
        let new = Arc::new(vec![vec![2.0_f32]]);
        let mut cache = None;
        keep_newest_labels(&mut cache, 1, &old);
        assert_eq!(cache.as_ref().map(|(at, _)| *at), Some(1));
        keep_newest_labels(&mut cache, 2, &new);
        // The writer still on epoch 1 finishes after the switch.
        keep_newest_labels(&mut cache, 1, &old);
        let (at, labels) = cache.expect("labels cached");
        assert_eq!((at, labels[0][0]), (2, 2.0));
    }
}
