//! The write pipeline (`docs/semantics.md`, "Hooks"; `docs/durability.md` steps 1–7): plan
//! every hook, one model call for the content and every text the hooks need, then decide under
//! the writer lock and commit one frame.

use super::space::UserSpace;
use super::{check_vector, model_switched, preview};
use crate::hooks::category;
use crate::hooks::dedup;
use crate::hooks::facts::{Relation, Rule, content_words};
use crate::hooks::tags::{self as tag_rules, TagDecision, TagForm};
use crate::hooks::{Effective, HookOverrides};
use crate::kernel::error::{EngineError, Result};
use crate::kernel::log::Op;
use crate::kernel::record::{
    self, Category, INITIAL_CONFIDENCE, MAX_TAGS, Memory, MemoryId, NewMemory, Timestamp,
};
use crate::kernel::state::State;
use crate::store::{CategoryLabels, Store};
use amberdb_index::kernels;
use std::sync::Arc;

/// A memory to store, with what the caller may add: its vector, and changes to the store's
/// hooks for this request. A `NewMemory` converts into one with neither.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreRequest {
    /// The memory.
    pub memory: NewMemory,
    /// The content's vector, if the caller computed it (of the store's dimension); else the
    /// store's embedder computes it. Hooks that need other texts embedded (new tags, a
    /// category phrase) use the store's embedder either way.
    pub vector: Option<Vec<f32>>,
    /// Changes to the store's hooks for this request.
    pub hooks: HookOverrides,
}

impl StoreRequest {
    /// `memory` with the store's hooks.
    #[must_use]
    pub fn new(memory: NewMemory) -> StoreRequest {
        StoreRequest {
            memory,
            vector: None,
            hooks: HookOverrides::default(),
        }
    }

    /// With the content's vector.
    #[must_use]
    pub fn with_vector(mut self, vector: Vec<f32>) -> StoreRequest {
        self.vector = Some(vector);
        self
    }
}

/// What a memory carries from the store it was first written in, kept by
/// [`Store::import`]: its times, usage and feedback. A store of a new memory sets them to now
/// and zero; an import (`amberdb import`, from an export or another system) keeps them, so
/// recency ranking, retention by age and the access counts go on as they were.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Provenance {
    /// When it was first stored. Not in the future, not before 1970.
    pub created_at: Timestamp,
    /// When it last changed: from `created_at` to now.
    pub updated_at: Timestamp,
    /// When it was last read: from `created_at` to now.
    pub last_accessed_at: Timestamp,
    /// Times it was read.
    pub access_count: u64,
    /// Helpful feedback received.
    pub helpful_count: u32,
    /// Harmful feedback received.
    pub harmful_count: u32,
    /// Its confidence, 0..=1; the initial one when `None`.
    pub confidence: Option<f32>,
    /// The id it had where it came from (an import): it keeps it when it is above every id
    /// the store has used (ids only grow: an import into an empty store, in source-id
    /// order), else it gets the next free id and `Stored::memory_id` says which.
    pub id: Option<MemoryId>,
}

/// The largest source id an import keeps: 2^53, the largest integer every JSON reader holds.
pub const MAX_SOURCE_ID: u64 = 1 << 53;

impl Provenance {
    /// A memory first stored at `created_at`, changed and read then, never since.
    #[must_use]
    pub fn created(created_at: Timestamp) -> Provenance {
        Provenance {
            created_at,
            updated_at: created_at,
            last_accessed_at: created_at,
            access_count: 0,
            helpful_count: 0,
            harmful_count: 0,
            confidence: None,
            id: None,
        }
    }

    fn validate(&self, now: Timestamp) -> Result<()> {
        let invalid = |field: &'static str, reason: String| EngineError::Invalid { field, reason };
        // Ids a JSON number holds exactly, as every interface writes them.
        if let Some(id) = self.id
            && !(1..=MAX_SOURCE_ID).contains(&id.0)
        {
            return Err(invalid(
                "id",
                format!("{} is not a memory id in 1..={MAX_SOURCE_ID}", id.0),
            ));
        }
        if self.created_at.0 < 0 || self.created_at > now {
            return Err(invalid(
                "created_at",
                format!(
                    "{} is not between 1970 and now ({})",
                    self.created_at.to_rfc3339(),
                    now.to_rfc3339()
                ),
            ));
        }
        for (field, t) in [
            ("updated_at", self.updated_at),
            ("last_accessed_at", self.last_accessed_at),
        ] {
            if t < self.created_at || t > now {
                return Err(invalid(
                    field,
                    format!(
                        "{} is not between created_at ({}) and now",
                        t.to_rfc3339(),
                        self.created_at.to_rfc3339()
                    ),
                ));
            }
        }
        if let Some(c) = self.confidence
            && !(0.0..=1.0).contains(&c)
        {
            return Err(invalid("confidence", format!("{c} is not in 0..=1")));
        }
        Ok(())
    }
}

impl From<NewMemory> for StoreRequest {
    fn from(memory: NewMemory) -> StoreRequest {
        StoreRequest::new(memory)
    }
}

/// What a store did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// A new live memory.
    Stored,
    /// Merged with near duplicates into a new record (the sources are archived).
    Merged,
    /// Stored, superseding memories it updates (their validity closed, they are archived).
    Superseded,
    /// An earlier value of a slot whose newer value is stored already (its `valid_from` is
    /// before the newer one's): kept in the archive with its validity closed, in the newer
    /// one's lineage, out of searches of the present.
    History,
    /// The user holds this exact content already (the exact dedup hook): nothing was
    /// stored; `memory_id` is the memory that holds it. An outcome, not an error, on every
    /// interface (`docs/semantics.md`, "Dedup at store time", step 1).
    Duplicate,
}

/// The result of `store_memory`, in the seed's shape.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Stored {
    /// The live memory that now holds the content: the new one, or the merged one.
    pub memory_id: MemoryId,
    /// What happened.
    pub outcome: Outcome,
    /// First 100 characters of the live memory's content.
    pub content_preview: String,
    /// The category chosen.
    pub category: Category,
    /// How it was chosen: `exact`, `dictionary`, `semantic`, `fallback`, or `given`.
    pub category_reason: &'static str,
    /// The tags stored, normalized.
    pub tags: Vec<String>,
    /// Tags this store registered as new canonical tags.
    pub new_canonical_tags: Vec<String>,
    /// When the live memory was created (the oldest source's time after a merge).
    pub created_at: Timestamp,
    /// When the live memory's validity begins (`docs/semantics.md`, "Validity in time").
    pub valid_from: Timestamp,
    /// Ids this store archived (merged or superseded), and for a merge the new memory's own
    /// archived id first.
    pub supersedes: Vec<MemoryId>,
    /// Near neighbours semantic dedup found within its distance (0 when it is off), before the
    /// cohesion check and the fact guard.
    pub dedup_candidates: usize,
    /// What the fact guard decided about each candidate, and why (for audit).
    pub decisions: Vec<DedupDecision>,
    /// Why a merge was not made, when candidates were found but refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For an item: the live item of the same key this store deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced: Option<MemoryId>,
}

/// The fact guard's decision about one near neighbour of a stored memory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DedupDecision {
    /// The neighbour.
    pub memory_id: MemoryId,
    /// What the new memory is to it.
    pub relation: Relation,
    /// The rule that decided (as text on the wire).
    pub reason: Rule,
}

enum CategoryPlan {
    Known(Category, &'static str),
    Embed(String),
}

/// A request after step 1: validated, with the texts its hooks need embedded.
struct Planned {
    m: NewMemory,
    user: String,
    tags: Vec<String>,
    /// For each tag, whether it needs its vector (not an exact canonical tag at plan time).
    tag_needs_vector: Vec<bool>,
    category: CategoryPlan,
    eff: Effective,
    /// An import's times and counts ([`Store::import`]); `None` for a new memory.
    kept: Option<Provenance>,
    /// The content's sha256, taken once for the duplicate checks and the record.
    content_hash: [u8; 32],
}

impl Planned {
    /// The new record this request stores under `id`, with what the decide phase resolved:
    /// its category, tags and agent.
    fn record(
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
        }
    }
}

/// Vectors for one planned request.
struct Embedded {
    content: Vec<f32>,
    tags: Vec<Option<Vec<f32>>>,
    category: Option<Vec<f32>>,
    /// The model epoch of the embedder that computed them (`Store::commit_embedded`).
    epoch: u64,
    /// Its dimension.
    dim: usize,
    /// Whether `content` is the caller's own vector.
    given: bool,
    /// The category labels' vectors by the same embedder, when `category` was embedded:
    /// resolved against these, never against the store's cache, which a re-embedding may
    /// have moved to another epoch meanwhile.
    labels: Option<Arc<Vec<Vec<f32>>>>,
}

impl Store {
    /// Stores a memory through the store's hooks (`docs/semantics.md`): validated, tagged,
    /// categorized, checked against the user's memories for duplicates and older values of
    /// the same fact, then committed as one log frame. `Stored` says what happened and which
    /// live memory holds it (a merged one if it merged).
    ///
    /// # Errors
    /// `Invalid` / `LimitExceeded` for bad input (naming the rule), `DimensionMismatch` for a
    /// given vector of another dimension, `MemoryLimitReached`, `Poisoned`, `DiskFull`, `Io`,
    /// `Embed`. An exact duplicate is not an error: the outcome `Duplicate` with the id of the
    /// memory that holds the content.
    pub fn store(&self, req: impl Into<StoreRequest>) -> Result<Stored> {
        let mut req = req.into();
        let given = req.vector.take();
        let stored = self
            .refuse_known_duplicate(self.plan(req)?)
            .and_then(|planned| {
                let embedded = self.embed_one(&planned, given)?;
                self.decide_and_commit(planned, embedded)
            });
        self.duplicate_as_outcome(stored)
    }

    /// An exact duplicate as the outcome `Duplicate` naming the memory that holds the
    /// content, with that memory's fields: what every interface answers for a duplicate
    /// store (`docs/semantics.md`, "Dedup at store time", step 1). Other results pass unchanged.
    fn duplicate_as_outcome(&self, stored: Result<Stored>) -> Result<Stored> {
        let existing = match stored {
            Err(EngineError::AlreadyExists { existing }) => existing,
            other => return other,
        };
        let m = self.get(existing)?;
        Ok(Stored {
            memory_id: existing,
            outcome: Outcome::Duplicate,
            content_preview: preview(&m.content),
            category: m.category,
            category_reason: "existing",
            tags: m.tags,
            new_canonical_tags: Vec::new(),
            created_at: m.created_at,
            valid_from: m.valid_from,
            supersedes: Vec::new(),
            dedup_candidates: 0,
            decisions: Vec::new(),
            reason: Some(format!(
                "memory {existing} holds this content already; nothing was stored"
            )),
            replaced: None,
        })
    }

    /// Stores a memory written elsewhere (an export, another system's store), keeping its
    /// times, access count and feedback ([`Provenance`]) instead of starting them now: the
    /// same hooks and the same one commit as [`Store::store`]. Its validity begins at its
    /// `created_at` unless the memory says otherwise.
    ///
    /// # Errors
    /// As `store`; `Invalid` naming the field for a time in the future, before 1970, or
    /// before `created_at`, or a confidence outside 0..=1 (checked before anything happens).
    pub fn import(&self, req: impl Into<StoreRequest>, kept: Provenance) -> Result<Stored> {
        let mut req = req.into();
        let given = req.vector.take();
        let planned = self.refuse_known_duplicate(self.plan_kept(req, Some(kept))?)?;
        let embedded = self.embed_one(&planned, given)?;
        self.decide_and_commit(planned, embedded)
    }

    /// Stores several memories with **one** model call for all their contents and every text
    /// their hooks need (about 2× the rate of one `store` each with MiniLM,
    /// `docs/benchmarks.md`). Each memory is still its own commit, in input order, so a later
    /// one can be a duplicate of an earlier one; the result for each is what `store` would
    /// have returned for it.
    ///
    /// # Errors
    /// The outer error is the embedder failing, or a request that carries its own vector (a
    /// batch embeds every content); then nothing was stored.
    pub fn store_batch<R: Into<StoreRequest>>(&self, reqs: Vec<R>) -> Result<Vec<Result<Stored>>> {
        let reqs: Vec<StoreRequest> = reqs.into_iter().map(Into::into).collect();
        if reqs.iter().any(|r| r.vector.is_some()) {
            return Err(EngineError::Invalid {
                field: "vector",
                reason: "a batch embeds every content; store a memory with its own vector alone"
                    .into(),
            });
        }
        Ok(self
            .store_requests(reqs)?
            .into_iter()
            .map(|r| self.duplicate_as_outcome(r))
            .collect())
    }

    /// Steps 1–7 for many requests, with one model call.
    pub(crate) fn store_requests(&self, reqs: Vec<StoreRequest>) -> Result<Vec<Result<Stored>>> {
        self.store_planned(reqs.into_iter().map(|r| self.plan(r)).collect())
    }

    /// [`Store::import`] for many memories with **one** model call, as [`Store::store_batch`]
    /// is to [`Store::store`]: each memory is still its own commit, in input order, and the
    /// result for each is what `import` would have returned for it.
    ///
    /// # Errors
    /// As `store_batch`: a request with its own vector refuses the whole batch, and an
    /// embedder failure fails it; each memory's own errors are in its result.
    pub fn import_batch<R: Into<StoreRequest>>(
        &self,
        reqs: Vec<(R, Provenance)>,
    ) -> Result<Vec<Result<Stored>>> {
        let reqs: Vec<(StoreRequest, Provenance)> =
            reqs.into_iter().map(|(r, kept)| (r.into(), kept)).collect();
        if reqs.iter().any(|(r, _)| r.vector.is_some()) {
            return Err(EngineError::Invalid {
                field: "vector",
                reason: "a batch embeds every content; import a memory with its own vector alone"
                    .into(),
            });
        }
        self.store_planned(
            reqs.into_iter()
                .map(|(r, kept)| self.plan_kept(r, Some(kept)))
                .collect(),
        )
    }

    /// Steps 2–7 for requests planned (or refused) in step 1.
    fn store_planned(&self, planned: Vec<Result<Planned>>) -> Result<Vec<Result<Stored>>> {
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
    fn refuse_known_duplicate(&self, p: Planned) -> Result<Planned> {
        if p.eff.exact_dedup
            && p.m.kind != record::Kind::Message
            && let Some(existing) = self.read().table.find_hash(&p.user, &p.content_hash)
        {
            return Err(EngineError::AlreadyExists { existing });
        }
        Ok(p)
    }

    /// Step 2 for one request.
    fn embed_one(&self, planned: &Planned, given: Option<Vec<f32>>) -> Result<Embedded> {
        self.embed_planned(&[planned], given)?
            .pop()
            .ok_or_else(|| self.embed_failed("returned no vectors"))
    }

    fn embed_failed(&self, reason: &str) -> EngineError {
        EngineError::Embed(amberdb_embed::EmbedError::Failed {
            model_id: self.embedding().embedder.model_id().to_owned(),
            reason: reason.to_owned(),
        })
    }

    /// Step 1 and the plan phase of the hooks.
    fn plan(&self, req: StoreRequest) -> Result<Planned> {
        self.plan_kept(req, None)
    }

    /// Step 1: validates the request (and an import's provenance) before anything happens.
    fn plan_kept(&self, req: StoreRequest, kept: Option<Provenance>) -> Result<Planned> {
        let mut eff = Effective::of(&self.inner.options.hooks, &req.hooks)?;
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
            let known = state.table.canonical(&user);
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
    fn embed_planned(
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
    fn category_labels(&self, epoch: u64) -> Option<Arc<Vec<Vec<f32>>>> {
        match &*self.inner.category_labels.lock() {
            Some((at, labels)) if *at == epoch => Some(Arc::clone(labels)),
            _ => None,
        }
    }

    /// The decide phase of the category hook: the planned category, or the label closest to
    /// the category text's vector, with how it was chosen.
    fn resolve_category(&self, plan: &CategoryPlan, e: &Embedded) -> (Category, &'static str) {
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
                let (c, reason) = category::by_similarity(&sims);
                (c, reason.as_str())
            }
        }
    }

    /// Stores every request as a plain record, all in one frame or none (`add_messages`):
    /// for requests whose hooks are off (no dedup, no tag or category resolution). Any error
    /// means nothing was stored.
    ///
    /// # Errors
    /// As `store_memory`, naming no position (the caller validated each request first);
    /// `LimitExceeded` when the whole list is over one frame (16 MiB).
    pub(crate) fn store_all_or_none(&self, reqs: Vec<StoreRequest>) -> Result<Vec<MemoryId>> {
        let planned: Vec<Planned> = reqs
            .into_iter()
            .map(|r| self.plan(r))
            .collect::<Result<_>>()?;
        loop {
            if let Some(ids) = self.store_all_or_none_embedded(&planned)? {
                return Ok(ids);
            }
        }
    }

    /// `store_all_or_none` with one embedder; `None` if a re-embedding switched it meanwhile.
    fn store_all_or_none_embedded(&self, planned: &[Planned]) -> Result<Option<Vec<MemoryId>>> {
        let refs: Vec<&Planned> = planned.iter().collect();
        let embedded = self.embed_planned(&refs, None)?;
        // One model call, so one epoch; with nothing embedded, any epoch is the right one.
        let epoch = embedded
            .first()
            .map_or_else(|| self.embedding().epoch, |e| e.epoch);
        let mut categories = Vec::with_capacity(planned.len());
        for (p, e) in planned.iter().zip(&embedded) {
            check_vector(e.dim, &e.content)?;
            categories.push(self.resolve_category(&p.category, e).0);
        }
        let limit = self.inner.options.memory_limit;
        let now = self.now();
        self.commit_embedded(epoch, |next, state| {
            if state.table.len() + planned.len() > limit {
                return Err(EngineError::MemoryLimitReached {
                    limit,
                    held: state.table.len(),
                    adding: planned.len(),
                });
            }
            let mut ops = Vec::with_capacity(planned.len());
            let mut ids = Vec::with_capacity(planned.len());
            for (i, ((p, e), category)) in
                planned.iter().zip(&embedded).zip(&categories).enumerate()
            {
                // Chat turns create their session (the table makes its entity from the first
                // record that names it): only one that exists is checked.
                let session = p.m.session_id.as_deref().filter(|s| {
                    state
                        .table
                        .has_entity(record::EntityKind::Session, &p.user, s)
                });
                let agent_id =
                    super::scope::check_scope(state, &p.user, session, p.m.agent_id.as_deref())?;
                let id = next.nth(i as u64);
                let record = p.record(
                    id,
                    (*category, p.tags.clone(), agent_id),
                    p.content_hash,
                    now,
                );
                ops.push(Op::Store {
                    record: Box::new(record),
                    vector: e.content.clone(),
                });
                ids.push(id);
            }
            Ok((super::one_frame(ops), ids))
        })
    }

    /// Steps 3–7: the decide phase of every hook under the writer lock, then one commit. When
    /// a re-embedding switched the store's embedder after `e` was computed, the request is
    /// embedded again by the new one; a caller's own vector is refused then.
    fn decide_and_commit(&self, p: Planned, mut e: Embedded) -> Result<Stored> {
        loop {
            if let Some(stored) = self.decide_and_commit_embedded(&p, &e)? {
                return Ok(stored);
            }
            if e.given {
                return Err(model_switched());
            }
            e = self.embed_one(&p, None)?;
        }
    }

    fn decide_and_commit_embedded(&self, p: &Planned, e: &Embedded) -> Result<Option<Stored>> {
        check_vector(e.dim, &e.content)?;
        let (category, category_reason) = self.resolve_category(&p.category, e);
        let limit = self.inner.options.memory_limit;
        let content_hash = p.content_hash;
        let now = self.now();
        self.commit_embedded(e.epoch, |ids, state| {
            let (tags, mut ops, new_canonical) =
                resolve_tags(state, &p.user, &p.tags, &e.tags, p.eff.tags);
            let m = &p.m;
            let agent_id = super::scope::check_scope(
                state,
                &p.user,
                m.session_id.as_deref(),
                m.agent_id.as_deref(),
            )?;
            if p.eff.exact_dedup
                && m.kind != record::Kind::Message
                && let Some(existing) = state.table.find_hash(&p.user, &content_hash)
            {
                return Err(EngineError::AlreadyExists { existing });
            }
            // An import keeps its source id when no id at or above it is used yet.
            let id = p
                .kept
                .and_then(|k| k.id)
                .filter(|id| *id >= ids.nth(0))
                .unwrap_or(ids.nth(0));
            let mut new = p.record(id, (category, tags, agent_id), content_hash, now);
            let replaced = replace_item(state, &p.user, &mut new, p.kept.is_none(), &mut ops);
            let plan = if p.eff.semantic_dedup && m.kind != record::Kind::Message {
                let space = UserSpace {
                    state,
                    user: &p.user,
                    kind: m.kind,
                };
                dedup::plan(
                    &space,
                    &e.content,
                    &m.content,
                    1.0 - p.eff.dedup_distance,
                    None,
                    p.eff.merge,
                )
            } else {
                dedup::Plan::default()
            };
            let mut reason = plan.refused.map(str::to_owned);
            // Updated statements that became valid before the new one (or at the same moment:
            // the later said wins) are its older values; any other is a newer value of the
            // slot, which makes the new one history
            // (`docs/semantics.md`, "Validity in time").
            let (older, later): (Vec<MemoryId>, Vec<MemoryId>) =
                plan.updated.iter().partition(|id| {
                    state
                        .table
                        .get(**id)
                        .is_some_and(|o| o.valid_from <= new.valid_from)
                });
            let mut archived: Vec<MemoryId> = Vec::new();
            let mut merged_record = None;
            if !plan.duplicates.is_empty() {
                let sources: Vec<(&Memory, &[f32])> = plan
                    .duplicates
                    .iter()
                    .filter_map(|id| Some((state.table.get(*id)?, state.vectors.vector(id.0)?)))
                    .collect();
                let merged_id = MemoryId(new.id.0.saturating_add(1)).max(ids.nth(1));
                match merge(merged_id, &new, &e.content, &sources, &older, now) {
                    Ok((merged, vector)) => {
                        // The new saying goes straight to the archive, merged for the rule
                        // that found its first duplicate.
                        let mut said = new.clone();
                        said.decision = plan.duplicates.first().and_then(|d| plan.rule_of(*d));
                        ops.push(Op::StoreArchived {
                            record: Box::new(said),
                            vector: e.content.clone(),
                        });
                        archived.push(new.id);
                        archive_decided(state, &plan.duplicates, None, &plan, &mut ops);
                        archived.extend(&plan.duplicates);
                        archive_decided(state, &older, Some(new.valid_from), &plan, &mut ops);
                        archived.extend(&older);
                        merged_record = Some(merged.clone());
                        ops.push(Op::Store {
                            record: Box::new(merged),
                            vector,
                        });
                    }
                    Err(why) => reason = Some(why.to_owned()),
                }
            }
            let (outcome, live) = match merged_record {
                Some(merged) => (Outcome::Merged, merged),
                None if !later.is_empty() => {
                    // The earliest newer value closes this one and names it in its lineage.
                    let successor = later
                        .iter()
                        .filter_map(|id| state.table.get(*id))
                        .min_by_key(|m| (m.valid_from, m.id))
                        .ok_or_else(|| EngineError::Internal {
                            context: "store",
                            reason: "a newer value of the slot is not live".into(),
                        })?;
                    archive_decided(state, &older, Some(new.valid_from), &plan, &mut ops);
                    archived.extend(&older);
                    new.supersedes.clone_from(&older);
                    new.decision = plan.rule_of(successor.id);
                    // It holds until the next value of the slot: the successor, or a
                    // replaced value in its lineage that began after this one.
                    let next_from = state
                        .table
                        .lineage(successor.id)
                        .iter()
                        .map(|a| &a.record)
                        .filter(|r| r.valid_to.is_some() && r.valid_from > new.valid_from)
                        .map(|r| r.valid_from)
                        .fold(successor.valid_from, Timestamp::min);
                    new.valid_to = Some(new.valid_to.map_or(next_from, |t| t.min(next_from)));
                    ops.push(Op::StoreArchived {
                        record: Box::new(new.clone()),
                        vector: e.content.clone(),
                    });
                    let mut linked = successor.clone();
                    linked.supersedes.push(new.id);
                    ops.push(Op::Update {
                        record: Box::new(linked.clone()),
                    });
                    archived.push(new.id);
                    (Outcome::History, linked)
                }
                None => {
                    let mut outcome = Outcome::Stored;
                    if !older.is_empty() {
                        archive_decided(state, &older, Some(new.valid_from), &plan, &mut ops);
                        archived.extend(&older);
                        new.supersedes.clone_from(&older);
                        outcome = Outcome::Superseded;
                    }
                    ops.push(Op::Store {
                        record: Box::new(new.clone()),
                        vector: e.content.clone(),
                    });
                    (outcome, new)
                }
            };
            // A merge or a supersede archives at least as many live memories as it adds.
            if archived.is_empty() && replaced.is_none() && state.table.len() >= limit {
                return Err(EngineError::MemoryLimitReached {
                    limit,
                    held: state.table.len(),
                    adding: 1,
                });
            }
            let stored = Stored {
                memory_id: live.id,
                outcome,
                content_preview: preview(&live.content),
                category: live.category,
                category_reason,
                tags: live.tags.clone(),
                new_canonical_tags: new_canonical,
                created_at: live.created_at,
                valid_from: live.valid_from,
                supersedes: archived,
                dedup_candidates: plan.candidates,
                decisions: plan
                    .decisions
                    .iter()
                    .map(|(id, d)| DedupDecision {
                        memory_id: *id,
                        relation: d.relation,
                        reason: d.rule,
                    })
                    .collect(),
                reason,
                replaced,
            };
            Ok((super::one_frame(ops), stored))
        })
    }
}

/// For an item: deletes the user's live item of the same key in the frame that stores `new`
/// (`docs/semantics.md`, "Items"), and returns its id. A new put keeps when the key was first
/// written (an import keeps its own times).
fn replace_item(
    state: &State,
    user: &str,
    new: &mut Memory,
    keep_created: bool,
    ops: &mut Vec<Op>,
) -> Option<MemoryId> {
    let key = &new.item.as_ref()?.key;
    let old = state.table.get(state.table.find_item(user, key)?)?;
    if keep_created {
        if new.valid_from == new.created_at {
            new.valid_from = old.created_at;
        }
        new.created_at = old.created_at;
    }
    ops.push(Op::Delete { id: old.id });
    Some(old.id)
}

/// Archives each live record of `ids` with the rule that decided it (`Memory::decision`,
/// for audit) and, when `close_at` is given, its validity closed then (unless it ended
/// earlier): one `Update` and one `Archive` each.
fn archive_decided(
    state: &State,
    ids: &[MemoryId],
    close_at: Option<Timestamp>,
    plan: &dedup::Plan,
    ops: &mut Vec<Op>,
) {
    for id in ids {
        if let Some(old) = state.table.get(*id) {
            let mut decided = old.clone();
            if let Some(at) = close_at {
                // A value replaced at the moment it began held for the shortest time a
                // record can say (validity must end after it starts, docs/format/log.md).
                let end = old.valid_to.map_or(at, |t| t.min(at));
                decided.valid_to = Some(end.max(Timestamp(old.valid_from.0.saturating_add(1))));
            }
            decided.decision = plan.rule_of(*id);
            ops.push(Op::Update {
                record: Box::new(decided),
            });
        }
        ops.push(Op::Archive { id: *id });
    }
}

/// Lowest raw similarity that can still merge (the related threshold minus the boost): the
/// merge decision is skipped below it.
const TAG_PREFILTER: f32 = tag_rules::TAG_RELATED_THRESHOLD - tag_rules::TAG_SUBSTRING_BOOST;

/// The decide phase of the tags hook: each tag → an exact canonical tag, the best canonical
/// tag the merge decision accepts, or a new canonical tag (one `CanonicalTag` op each).
/// Returns the stored tags (unique, in input order), the ops and the new canonical names.
pub(crate) fn resolve_tags(
    state: &State,
    user: &str,
    tags: &[String],
    vectors: &[Option<Vec<f32>>],
    on: bool,
) -> (Vec<String>, Vec<Op>, Vec<String>) {
    if !on {
        return (tags.to_vec(), Vec::new(), Vec::new());
    }
    let canonical = state.table.canonical(user);
    let mut added: Vec<(String, TagForm, Vec<f32>)> = Vec::new();
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    let mut ops = Vec::new();
    for (tag, vector) in tags.iter().zip(vectors) {
        let exact = canonical.is_some_and(|c| c.contains(tag)) || added.iter().any(|a| &a.0 == tag);
        let chosen = if exact {
            tag.clone()
        } else if let Some(v) = vector {
            let form = TagForm::of(tag);
            let mut best: Option<(f32, String)> = None;
            let mut consider = |name: &str, cform: &TagForm, sim: f32| {
                if sim >= TAG_PREFILTER
                    && best.as_ref().is_none_or(|(b, _)| sim > *b)
                    && tag_rules::decide(&form, cform, sim) == TagDecision::Merge
                {
                    best = Some((sim, name.to_owned()));
                }
            };
            if let Some(c) = canonical {
                // One kernel call over every canonical vector; the form and the decision only
                // for the few that can pass.
                let sims = kernels::dot_rows(v, c.vectors()).unwrap_or_default();
                for (name, sim) in c.names().iter().zip(sims) {
                    if sim >= TAG_PREFILTER {
                        consider(name, &TagForm::of(name), sim);
                    }
                }
            }
            for (name, cform, cv) in &added {
                consider(name, cform, kernels::dot(v, cv).unwrap_or(0.0));
            }
            match best {
                Some((_, name)) => name,
                None => {
                    ops.push(Op::CanonicalTag {
                        user_id: user.to_owned(),
                        tag: tag.clone(),
                        vector: v.clone(),
                    });
                    added.push((tag.clone(), form, v.clone()));
                    tag.clone()
                }
            }
        } else {
            tag.clone()
        };
        if !out.contains(&chosen) {
            out.push(chosen);
        }
    }
    let names = added.into_iter().map(|a| a.0).collect();
    (out, ops, names)
}

/// The deterministic merge (`docs/semantics.md`, "Dedup at store time", step 5) of `new` (not
/// stored yet, with `new_vector`) and the live `sources`; `updated` are superseded as well.
/// Returns the merged record (id `id`) and its vector, or why the merge is refused.
pub(crate) fn merge(
    id: MemoryId,
    new: &Memory,
    new_vector: &[f32],
    sources: &[(&Memory, &[f32])],
    updated: &[MemoryId],
    now: Timestamp,
) -> Result<(Memory, Vec<f32>), &'static str> {
    let all: Vec<(&Memory, &[f32])> = std::iter::once((new, new_vector))
        .chain(sources.iter().copied())
        .collect();
    let kept = all
        .iter()
        .max_by(|a, b| completeness(a.0).cmp(&completeness(b.0)))
        .copied()
        .ok_or("nothing to merge")?;
    let mut tags: Vec<String> = Vec::new();
    for (m, _) in &all {
        for t in &m.tags {
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
    }
    if tags.len() > MAX_TAGS {
        return Err("merge refused: the union of the tags is over 10; stored on its own");
    }
    let max_conf = all.iter().map(|(m, _)| m.confidence).fold(0.0f32, f32::max);
    let mut supersedes: Vec<MemoryId> = all.iter().map(|(m, _)| m.id).collect();
    supersedes.extend_from_slice(updated);
    let k = kept.0;
    Ok((
        Memory {
            id,
            user_id: k.user_id.clone(),
            kind: k.kind,
            session_id: k.session_id.clone(),
            agent_id: k.agent_id.clone(),
            role: k.role,
            content: k.content.clone(),
            content_hash: k.content_hash,
            category: k.category,
            tags,
            created_at: all.iter().map(|(m, _)| m.created_at).min().unwrap_or(now),
            updated_at: now,
            last_accessed_at: all
                .iter()
                .map(|(m, _)| m.last_accessed_at)
                .max()
                .unwrap_or(now),
            access_count: all.iter().map(|(m, _)| m.access_count).sum(),
            helpful_count: all.iter().map(|(m, _)| m.helpful_count).sum(),
            harmful_count: all.iter().map(|(m, _)| m.harmful_count).sum(),
            confidence: max_conf + 0.1 * (1.0 - max_conf),
            supersedes,
            // One statement, however often said: it holds from its first saying, until the
            // latest end any saying gave (open if one is open).
            valid_from: all.iter().map(|(m, _)| m.valid_from).min().unwrap_or(now),
            valid_to: all
                .iter()
                .map(|(m, _)| m.valid_to)
                .try_fold(Timestamp(i64::MIN), |acc, t| t.map(|t| acc.max(t))),
            decision: None,
            item: k.item.clone(),
        },
        kept.1.to_vec(),
    ))
}

/// How complete a text is: distinct content words, then characters, then recency.
fn completeness(m: &Memory) -> (usize, usize, Timestamp, MemoryId) {
    (
        content_words(&m.content).len(),
        m.content.chars().count(),
        m.created_at,
        m.id,
    )
}

/// An `update_memory` request: the fields to change (`None` keeps the current value).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UpdateRequest {
    /// The live memory to update.
    pub memory_id: Option<MemoryId>,
    /// New content: re-embedded, and the memory gets a new id that supersedes the old one.
    pub content: Option<String>,
    /// New category, as text (normalized by the category hook).
    pub category: Option<String>,
    /// New tags (normalized by the tags hook).
    pub tags: Option<Vec<String>>,
    /// Per-request hook changes.
    pub hooks: HookOverrides,
}

/// The result of `update_memory`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Updated {
    /// The live memory now: the same id, or a new one when the content changed.
    pub memory_id: MemoryId,
    /// The id the new one supersedes (when the content changed).
    pub supersedes: Vec<MemoryId>,
    /// Tags after the update.
    pub tags: Vec<String>,
    /// Category after the update.
    pub category: Category,
}

impl Store {
    /// Updates a memory (`update`): new tags or category keep its id; new content is
    /// re-embedded into a new record that supersedes the old one, which stays in lineage with
    /// its text and vector. Counts, feedback and `created_at` carry over.
    ///
    /// # Errors
    /// `NotFound` / `Archived`; `Invalid` if nothing is to change or a field is invalid;
    /// `AlreadyExists` if the new content is another memory's; `Embed`, `Poisoned`, `DiskFull`, `Io`.
    pub fn update(&self, req: UpdateRequest) -> Result<Updated> {
        let id = req.memory_id.ok_or_else(|| EngineError::Invalid {
            field: "memory_id",
            reason: "must be given".into(),
        })?;
        if req.content.is_none() && req.category.is_none() && req.tags.is_none() {
            return Err(EngineError::Invalid {
                field: "update",
                reason: "give at least one of content, category, tags".into(),
            });
        }
        let old = self.get(id)?;
        let new_content = req.content.as_ref().is_some_and(|c| *c != old.content);
        let mut m = NewMemory::new(req.content.clone().unwrap_or_else(|| old.content.clone()))
            .category(old.category)
            .tags(req.tags.clone().unwrap_or_else(|| old.tags.clone()))
            .kind(old.kind);
        m.user_id = Some(old.user_id.clone());
        m.session_id.clone_from(&old.session_id);
        m.agent_id.clone_from(&old.agent_id);
        m.role = old.role;
        m.category_text.clone_from(&req.category);
        let p = self.plan(StoreRequest {
            memory: m,
            vector: None,
            hooks: req.hooks.clone(),
        })?;
        // A re-embedding that switches the embedder between here and the commit makes it
        // refuse; the update is then embedded again by the new one.
        loop {
            let given = if new_content {
                None
            } else {
                Some(self.vector(id)?)
            };
            let e = self.embed_one(&p, given)?;
            if let Some(updated) = self.update_embedded(id, new_content, &p, &e)? {
                return Ok(updated);
            }
        }
    }

    fn update_embedded(
        &self,
        id: MemoryId,
        new_content: bool,
        p: &Planned,
        e: &Embedded,
    ) -> Result<Option<Updated>> {
        check_vector(e.dim, &e.content)?;
        let (category, _) = self.resolve_category(&p.category, e);
        let now = self.now();
        self.commit_embedded(e.epoch, |ids, state| {
            let current = state
                .table
                .get(id)
                .ok_or_else(|| super::missing(state, id))?;
            let (tags, mut ops, _) = resolve_tags(state, &p.user, &p.tags, &e.tags, p.eff.tags);
            let mut record = current.clone();
            record.tags.clone_from(&tags);
            record.category = category;
            record.updated_at = now;
            let mut supersedes = Vec::new();
            if new_content {
                let hash = p.content_hash;
                if let Some(existing) = state.table.find_hash(&p.user, &hash) {
                    return Err(EngineError::AlreadyExists { existing });
                }
                record.id = ids.nth(0);
                record.content.clone_from(&p.m.content);
                record.content_hash = hash;
                record.supersedes = vec![id];
                supersedes.push(id);
                ops.push(Op::Archive { id });
                ops.push(Op::Store {
                    record: Box::new(record.clone()),
                    vector: e.content.clone(),
                });
            } else {
                ops.push(Op::Update {
                    record: Box::new(record.clone()),
                });
            }
            let updated = Updated {
                memory_id: record.id,
                supersedes,
                tags,
                category,
            };
            Ok((super::one_frame(ops), updated))
        })
    }
}

/// Caches `labels`, computed by the embedder of `epoch`, unless the cache already holds a
/// newer epoch's: a writer that embedded with the old model before a re-embedding switched
/// must not put its labels in place of the new model's.
fn keep_newest_labels(cache: &mut Option<CategoryLabels>, epoch: u64, labels: &Arc<Vec<Vec<f32>>>) {
    if cache.as_ref().is_none_or(|(at, _)| *at < epoch) {
        *cache = Some((epoch, Arc::clone(labels)));
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
