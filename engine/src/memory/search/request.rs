//! What a search asks for and what it answers: the limits, `SearchRequest`, `Mode`, `Strategy`,
//! `Fusion`, `ScanMode`, and the page (`Hits`, `SearchedHit`, `Neighbour`).

use crate::error::{EngineError, Result};
use crate::hooks::HookOverrides;
use crate::kernel::record::{Category, Kind, Memory, MemoryId, Timestamp};
use amberdb_index::Probe;

/// Longest search query, in characters.
pub const MAX_QUERY_CHARS: usize = 1000;

/// Most results one page may hold.
pub const MAX_PAGE: usize = 50;

/// Largest offset.
pub const MAX_OFFSET: usize = 10_000;

/// Largest token budget of one search.
pub const MAX_TOKEN_BUDGET: usize = 1_000_000;

/// The minimum score when none is asked for: every candidate (`docs/search.md`,
/// "Calibration": MiniLM's scores of relevant memories start well below any fixed cut; a
/// caller's own vectors need not be normalized).
pub(crate) const NO_THRESHOLD: f32 = f32::NEG_INFINITY;

/// A search counts a memory it returns as accessed at most once in this many microseconds
/// (15 minutes, as agent-memory-server): a memory that every search returns must not climb
/// the `frequency` ranking by being returned (`docs/search.md`, "Access counting").
pub const SEARCH_ACCESS_INTERVAL_US: i64 = 15 * 60 * 1_000_000;

/// Default fusion weights of the `hybrid` mode for a question or a short query.
pub const HYBRID_WEIGHTS: (f32, f32) = (0.7, 0.3);

/// Default fusion weights of the `hybrid` mode for a statement (`is_statement`): a query that
/// restates what it looks for is matched by meaning more than by its words (`docs/search.md`,
/// "Fusion by query").
pub const STATEMENT_WEIGHTS: (f32, f32) = (0.9, 0.1);

/// Words from which a query that asks no question is read as a statement.
pub const STATEMENT_MIN_WORDS: usize = 5;

/// The k of reciprocal-rank fusion (as MemFuse and the RRF paper).
pub const RRF_K: u32 = 60;

/// Half-life of `freshness` (days since last access) and `novelty` (days since created).
pub const RECENCY_HALF_LIVES_DAYS: (f64, f64) = (7.0, 30.0);

/// Accesses at which `frequency` reaches one half.
pub const FREQUENCY_HALF: f64 = 5.0;

/// Largest boost a matching rare tag adds to a ranking score.
pub const TAG_BOOST: f32 = 0.1;

/// Candidates a reranked search rescores when the request names no number
/// (`docs/search.md`, "Reranking": chosen by measurement).
pub const DEFAULT_RERANK_CANDIDATES: usize = 20;

/// What a search adds to the score of a record whose time (`valid_from`) falls in a window of
/// time the query names (`docs/search.md`, "Dates in questions": chosen on LoCoMo's tuning
/// conversations, confirmed on the held-out ones).
pub const DEFAULT_DATE_BOOST: f32 = 0.1;

/// The share of the best score of another candidate of its session that a record gains
/// (`docs/search.md`, "Sessions": chosen on LoCoMo's tuning conversations, confirmed on the
/// held-out ones).
pub const DEFAULT_SESSION_LEND: f32 = 0.1;

/// Most candidates a search may rerank (a reranked page ends within them).
pub const MAX_RERANK_CANDIDATES: usize = 50;

/// Rows above which the vector scan reads i8 codes and re-ranks exactly.
pub(super) const COMPACT_SCAN_ROWS: usize = 4096;

macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
        #[serde(rename_all = "lowercase")]
        pub enum $name { $($(#[$vm])* $variant),+ }

        impl $name {
            /// Parses the protocol spelling.
            ///
            /// # Errors
            /// `Invalid` naming the allowed values.
            pub fn parse(s: &str) -> Result<$name> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($text => Ok($name::$variant),)+
                    other => Err(EngineError::Invalid {
                        field: stringify!($name),
                        reason: format!("{other:?} is not one of {:?}", [$($text),+]),
                    }),
                }
            }

            /// The protocol spelling.
            #[must_use]
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }
    };
}

named_enum!(
    /// How results are ranked (`docs/search.md`, "Strategies").
    Strategy {
        /// Exact cosine only; no fallback.
        Similarity = "similarity",
        /// Relevance with recency, importance and frequency (the default).
        #[default]
        Composite = "composite",
        /// Mostly how recently it was used and created.
        Recency = "recency",
        /// Mostly how often it was accessed.
        Frequency = "frequency",
        /// Mostly confidence and feedback.
        Importance = "importance",
    }
);

named_enum!(
    /// Where candidates come from (`docs/search.md`, "Modes").
    Mode {
        /// Cosine over the embeddings.
        Vector = "vector",
        /// BM25 over the content.
        Keyword = "keyword",
        /// Both, fused (the default: on long chats it finds what neither finds alone,
        /// `docs/search.md`, "Judged on public data").
        #[default]
        Hybrid = "hybrid",
        /// Case-insensitive substring.
        Text = "text",
    }
);

named_enum!(
    /// What a page lists (`docs/search.md`, "Sessions").
    Group {
        /// Records, each on its own (the default).
        #[default]
        Records = "records",
        /// Sessions: each result is a session's best record, its other records among the
        /// candidates in `session_turns`, ranked by that best record's score; a record without
        /// a session stands alone.
        Session = "session",
    }
);

/// How `hybrid` combines its two lists.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Fusion {
    /// The default: `Weighted` with `STATEMENT_WEIGHTS` for a statement (`is_statement`),
    /// else with `HYBRID_WEIGHTS`.
    #[default]
    ByQuery,
    /// `vector·cos⁺ + keyword·bm25/max(bm25)` (each score normalized to 0..1).
    Weighted {
        /// Weight of the vector score.
        vector: f32,
        /// Weight of the keyword score.
        keyword: f32,
    },
    /// Reciprocal rank: `Σ 1/(k + rank)` over the lists a result is in.
    Rrf {
        /// The rank offset (60 by default).
        k: u32,
    },
}

impl Fusion {
    /// Reciprocal-rank fusion with k = 60.
    #[must_use]
    pub fn rrf() -> Fusion {
        Fusion::Rrf { k: RRF_K }
    }

    /// The fusion that runs for `query`: `ByQuery` resolved to its weights, any other as it
    /// is.
    #[must_use]
    pub fn for_query(self, query: &str) -> Fusion {
        let (vector, keyword) = match self {
            Fusion::ByQuery if is_statement(query) => STATEMENT_WEIGHTS,
            Fusion::ByQuery => HYBRID_WEIGHTS,
            given => return given,
        };
        Fusion::Weighted { vector, keyword }
    }

    /// The weights of a weighted fusion: its own, else (`ByQuery`, or an RRF, which has none)
    /// `HYBRID_WEIGHTS`, a question's.
    #[must_use]
    pub fn weights(self) -> (f32, f32) {
        match self {
            Fusion::Weighted { vector, keyword } => (vector, keyword),
            Fusion::ByQuery | Fusion::Rrf { .. } => HYBRID_WEIGHTS,
        }
    }
}

/// Whether `query` asks a question: it ends with a question mark, or opens with a question
/// word ("what", "who", "which", "where", "when", "how", "does", "is" ...).
#[must_use]
pub fn is_question(query: &str) -> bool {
    const OPENERS: &[&str] = &[
        "what", "which", "who", "whom", "whose", "where", "when", "why", "how", "is", "are", "was",
        "were", "do", "does", "did", "can", "could", "has", "have", "had",
    ];
    let query = query.trim();
    query.ends_with('?')
        || query
            .split(|c: char| !c.is_alphanumeric())
            .next()
            .is_some_and(|w| OPENERS.iter().any(|o| w.eq_ignore_ascii_case(o)))
}

/// Whether `query` is a statement: at least `STATEMENT_MIN_WORDS` words and no question
/// (`is_question`). A shorter query is read as keywords.
#[must_use]
pub fn is_statement(query: &str) -> bool {
    !is_question(query) && query.split_whitespace().count() >= STATEMENT_MIN_WORDS
}

/// A `search_memories` request.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    /// The text: 1..=1,000 characters. May be empty with a `vector` in the vector mode.
    pub query: String,
    /// A query vector of the store's dimension, used instead of embedding `query` (vector
    /// and hybrid modes).
    pub vector: Option<Vec<f32>>,
    /// The user; `"default"` when `None`.
    pub user_id: Option<String>,
    /// Results per page, 1..=50 (default 10).
    pub limit: usize,
    /// Results to skip, 0..=10,000.
    pub offset: usize,
    /// Ranking.
    pub strategy: Strategy,
    /// Candidate source. `similarity` allows only `vector`.
    pub mode: Mode,
    /// Minimum cosine of a vector candidate, in [-1, 1]; none by default, so a search returns
    /// `limit` results whenever the selection holds that many (`docs/search.md`,
    /// "Calibration").
    pub threshold: Option<f32>,
    /// Fusion of the `hybrid` mode.
    pub fusion: Fusion,
    /// Only this category.
    pub category: Option<Category>,
    /// Only memories with at least one of these tags.
    pub tags: Vec<String>,
    /// Only this kind.
    pub kind: Option<Kind>,
    /// Only this session (of this user).
    pub session_id: Option<String>,
    /// Only this agent (of this user).
    pub agent_id: Option<String>,
    /// Only created at or after.
    pub created_after: Option<Timestamp>,
    /// Only created before.
    pub created_before: Option<Timestamp>,
    /// Only about a moment at or after: a record's `valid_from` (a chat turn's own time, a
    /// fact's start), not when it was stored.
    pub valid_after: Option<Timestamp>,
    /// Only about a moment before (`valid_from`).
    pub valid_before: Option<Timestamp>,
    /// The moment asked about: statements valid then, replaced ones included
    /// (`docs/semantics.md`, "Validity in time"). `None`: what is valid now.
    pub as_of: Option<Timestamp>,
    /// A token budget for a prompt (`docs/search.md`, "Packed for a prompt"): the page holds
    /// the best results whose contents fit in this many tokens of the embedder's tokenizer,
    /// in ranking order (a newer value of a slot before an older one), at most `limit`.
    pub max_tokens: Option<usize>,
    /// Which representation the vector scan reads.
    pub scan: ScanMode,
    /// Per-request hook changes (`deduplicate`, `dedup_threshold`, `count_access`).
    pub hooks: HookOverrides,
    /// How many lists of each IVF segment the compact scan probes (`docs/ivf.md`): the
    /// segment's built nprobe, a number of lists, or a recall target.
    pub probe: Probe,
    /// Each result in a session carries up to this many records before and as many after it
    /// in its session (`SearchedHit::context`), 0..=`MAX_NEIGHBOURS` (default 0): a short
    /// reply ("It's a mix of drama and romance!") is often answered by the turn before it
    /// (`docs/search.md`, "Session neighbours").
    pub neighbours: usize,
    /// Rescores the first this many candidates (at least the page's end) with the store's
    /// cross-encoder and orders them by its score (`docs/search.md`, "Reranking"), 1..=50;
    /// `None` (the default): the strategy's order.
    pub rerank: Option<usize>,
    /// Records, or sessions (`Group::Session`): `limit` then counts sessions.
    pub group: Group,
    /// Added to the score of a record whose `valid_from` falls in a window of time the query
    /// names ("on 13 October, 2023", "last year", relative to `as_of` or now), 0..=1;
    /// `None`: [`DEFAULT_DATE_BOOST`]. A boost, never a filter.
    pub date_boost: Option<f32>,
    /// Each turn's score gains this share of the best score of another candidate of its
    /// session, 0..=1 (default [`DEFAULT_SESSION_LEND`]; 0 turns it off): a session's turns
    /// lend each other score
    /// (`docs/search.md`, "Sessions").
    pub session_lend: f32,
}

/// Most session neighbours a search result carries on each side.
pub const MAX_NEIGHBOURS: usize = 5;

/// Which representation a vector scan reads (`docs/search.md`, "The vector scan").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScanMode {
    /// Exact f32 scores over small selections; over 4,096 rows the compact scan.
    #[default]
    Auto,
    /// Exact f32 scores always.
    Exact,
    /// i8 codes first, exact re-rank of the candidates: a quarter of the bytes, recall@10
    /// >= 0.99 (`docs/benchmarks.md`).
    Compact,
}

impl SearchRequest {
    /// The first 10 results for `query`, composite strategy, hybrid mode.
    #[must_use]
    pub fn new(query: impl Into<String>) -> SearchRequest {
        SearchRequest {
            query: query.into(),
            vector: None,
            user_id: None,
            limit: 10,
            offset: 0,
            strategy: Strategy::default(),
            mode: Mode::default(),
            threshold: None,
            fusion: Fusion::default(),
            category: None,
            tags: Vec::new(),
            kind: None,
            session_id: None,
            agent_id: None,
            created_after: None,
            created_before: None,
            valid_after: None,
            valid_before: None,
            as_of: None,
            max_tokens: None,
            scan: ScanMode::Auto,
            hooks: HookOverrides::default(),
            probe: Probe::Built,
            neighbours: 0,
            rerank: None,
            group: Group::Records,
            date_boost: None,
            session_lend: DEFAULT_SESSION_LEND,
        }
    }

    /// The first 10 nearest to `vector` by cosine (the `similarity` strategy, vector mode).
    #[must_use]
    pub fn by_vector(vector: Vec<f32>) -> SearchRequest {
        SearchRequest {
            vector: Some(vector),
            strategy: Strategy::Similarity,
            mode: Mode::Vector,
            ..SearchRequest::new("")
        }
    }

    /// Sets the page size (1..=50).
    #[must_use]
    pub fn limit(mut self, limit: usize) -> SearchRequest {
        self.limit = limit;
        self
    }

    /// Sets the scan mode.
    #[must_use]
    pub fn scan(mut self, scan: ScanMode) -> SearchRequest {
        self.scan = scan;
        self
    }

    /// Sets how many lists of each IVF segment the compact scan probes.
    #[must_use]
    pub fn probe(mut self, probe: Probe) -> SearchRequest {
        self.probe = probe;
        self
    }

    /// Only memories with at least one of `tags`.
    #[must_use]
    pub fn tags<I, T>(mut self, tags: I) -> SearchRequest
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// The plain engine search: no load-time folding and no access counted.
    #[must_use]
    pub fn without_hooks(mut self) -> SearchRequest {
        self.hooks.deduplicate = Some(false);
        self.hooks.count_access = Some(false);
        self
    }

    /// Sets the strategy.
    #[must_use]
    pub fn strategy(mut self, strategy: Strategy) -> SearchRequest {
        self.strategy = strategy;
        if strategy == Strategy::Similarity {
            // The one mode the pure cosine ranking has.
            self.mode = Mode::Vector;
        }
        self
    }

    /// Sets the mode.
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> SearchRequest {
        self.mode = mode;
        self
    }

    /// Sets the user.
    #[must_use]
    pub fn user(mut self, user: impl Into<String>) -> SearchRequest {
        self.user_id = Some(user.into());
        self
    }
}

/// Where a result came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The vector search.
    Vector,
    /// The keyword index.
    Keyword,
    /// Both lists of a hybrid search.
    Hybrid,
    /// A substring match.
    Text,
    /// A neighbour of a vector hit (MemFuse `graph` retrieval).
    Graph,
}

/// One search result.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SearchedHit {
    /// The memory (as stored after this search's access was counted).
    #[serde(flatten)]
    pub memory: Memory,
    /// The ranking score (the strategy's formula; exact cosine for `similarity`).
    pub score: f32,
    /// Cosine similarity to the query, when the query was embedded.
    pub similarity: Option<f32>,
    /// `1 - similarity`.
    pub distance: Option<f32>,
    /// Raw BM25 score, when the keyword index scored it.
    pub keyword_score: Option<f32>,
    /// Which search found it.
    pub source: Source,
    /// Results within the cluster distance of this one that load-time dedup folded into it.
    pub folded: usize,
    /// Those results, best first: each one click away (`GET` its id), none lost from the
    /// page (`docs/search.md`, "Pages without crowding").
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<Also>,
    /// With `group: session`: the session's other records among the candidates, best first
    /// (this result is the session's best).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub session_turns: Vec<Also>,
    /// The strategy's own score of this record, when `score` shows another: in a reranked
    /// search (`score` is then the reranker's), and for a newer value of a slot moved in
    /// front of the older one (`score` is then the older one's: `docs/search.md`, "Changed
    /// facts").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_score: Option<f32>,
    /// With `neighbours`: the records of its session right before and after it, in session
    /// order, itself left out (whatever the search's filters; live records only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<Neighbour>,
}

/// A result folded into a higher one: near enough to it to say the same thing.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Also {
    /// Its id.
    pub memory_id: MemoryId,
    /// Its score, as the page's results are scored.
    pub score: f32,
}

/// Which score orders a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScoredBy {
    /// The strategy's formula (`docs/search.md`, "Strategies").
    Strategy,
    /// The cross-encoder's score of the query with the text (`rerank`).
    Reranker,
}

/// A record next to a search result in its session.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Neighbour {
    /// Its id.
    pub memory_id: MemoryId,
    /// Where it stands from the result: -1 the record right before, 1 right after.
    pub position: i64,
    /// Its role, for a chat turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<crate::kernel::record::Role>,
    /// Its text.
    pub content: String,
    /// When it holds from (a chat turn's own time).
    pub valid_from: Timestamp,
}

/// The result of `search_memories`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Hits {
    /// The page.
    pub results: Vec<SearchedHit>,
    /// Results on this page.
    pub count: usize,
    /// Memories of the user that match the filters (whatever their score): the set searched.
    pub total: usize,
    /// Results folded by load-time dedup into the results up to the end of this page.
    pub folded_total: usize,
    /// With a token budget: the tokens the page's contents take.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<usize>,
    /// With a token budget: results that ranked on the page but did not fit in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_budget: Option<usize>,
    /// The strategy used.
    pub strategy: Strategy,
    /// The mode used.
    pub mode: Mode,
    /// Which score `score` is, and orders the page by.
    pub scored_by: ScoredBy,
    /// Why the search did something other than the mode asked (text supplement, a keyword
    /// query with no terms, embeddings unavailable); `None` when it did not.
    pub fallback: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_are_told_from_statements() {
        for q in [
            "What is the capital of Kenya?",
            "which company makes it",
            "Does Alice still live in Paris",
            "the deploy port?",
        ] {
            assert!(is_question(q), "{q}");
        }
        for q in [
            "A man is playing the guitar",
            "user's favourite colour",
            "Whatever works",
            "",
        ] {
            assert!(!is_question(q), "{q}");
        }
    }

    #[test]
    fn the_default_fusion_weighs_a_statement_by_meaning_and_anything_else_as_before() {
        let weighted = |(vector, keyword): (f32, f32)| Fusion::Weighted { vector, keyword };
        let fusion = Fusion::default();
        assert_eq!(fusion, Fusion::ByQuery);
        assert_eq!(
            fusion.for_query("A man is playing the guitar"),
            weighted(STATEMENT_WEIGHTS)
        );
        assert_eq!(
            fusion.for_query("Who is playing the guitar?"),
            weighted(HYBRID_WEIGHTS)
        );
        assert_eq!(fusion.for_query("guitar lessons"), weighted(HYBRID_WEIGHTS));
        // Given weights and RRF run as given.
        let given = weighted((0.5, 0.5));
        assert_eq!(given.for_query("A man is playing the guitar"), given);
        assert_eq!(Fusion::rrf().for_query("a b c d e"), Fusion::rrf());
    }

    #[test]
    fn statements_are_sentences_that_ask_nothing() {
        assert!(is_statement("A man is playing the guitar"));
        assert!(is_statement("The nightly backup runs at two"));
        for q in [
            "What does the nightly backup run at?",
            "user's favourite colour",
            "deploy port for staging",
            "",
        ] {
            assert!(!is_statement(q), "{q}");
        }
    }
}
