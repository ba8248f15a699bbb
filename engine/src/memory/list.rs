//! Listing a user's records page by page (`docs/semantics.md`, "Listing"): newest first, by
//! the filters a person browsing a store asks for (kind, category, tags, session, whether it
//! holds now, archived or live). A listing is a plain read: nothing counts as an access.

use super::in_range;
use super::search::{MAX_PAGE, RecordFilter};
use crate::error::{EngineError, Result};
use crate::kernel::record::{Category, Kind, Memory, canonical_tag};
use crate::store::Store;

/// Which records a listing reads: the live ones (the default), the archived ones (merged,
/// superseded, updated or compacted away: `docs/semantics.md`, "Lineage and the archive"),
/// or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Shelf {
    /// Live records only.
    #[default]
    Live,
    /// Archived records only.
    Archived,
    /// Both.
    All,
}

impl Shelf {
    /// `live`, `archived` or `all`.
    ///
    /// # Errors
    /// `Invalid` naming the three for anything else.
    pub fn parse(s: &str) -> Result<Shelf> {
        match s {
            "live" => Ok(Shelf::Live),
            "archived" => Ok(Shelf::Archived),
            "all" => Ok(Shelf::All),
            other => Err(EngineError::Invalid {
                field: "archived",
                reason: format!("{other:?} is not one of [\"live\", \"archived\", \"all\"]"),
            }),
        }
    }
}

/// What a listing keeps; the default keeps every live record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListFilter {
    /// Only this kind.
    pub kind: Option<Kind>,
    /// Only this category.
    pub category: Option<Category>,
    /// Only records with any of these tags (canonicalized as stored tags are).
    pub tags: Vec<String>,
    /// Only this session's records.
    pub session_id: Option<String>,
    /// `Some(true)`: only statements that hold now; `Some(false)`: only those that do not
    /// (their validity ended or has not begun).
    pub valid_now: Option<bool>,
    /// Live, archived or both.
    pub shelf: Shelf,
}

/// One record of a listing.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Listed {
    /// The record.
    #[serde(flatten)]
    pub memory: Memory,
    /// It is archived (said only then, so a live listing keeps the seed's shape).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub archived: bool,
}

impl Store {
    /// The `limit` (1..=50) most recently created memories of the user, newest first. Not
    /// an access.
    ///
    /// # Errors
    /// `Invalid` / `LimitExceeded` for a bad limit or user.
    pub fn list_recent(&self, user_id: Option<&str>, limit: usize) -> Result<Vec<Memory>> {
        let (page, _) = self.list_page(user_id, &ListFilter::default(), 0, limit)?;
        Ok(page.into_iter().map(|l| l.memory).collect())
    }

    /// A page of the user's records that pass `filter`, newest first (created, then id: a
    /// stable order, so paging by `offset` meets each record once while nothing is stored),
    /// and how many pass. Not an access.
    ///
    /// # Errors
    /// `Invalid` / `LimitExceeded` for a bad limit or user.
    pub fn list_page(
        &self,
        user_id: Option<&str>,
        filter: &ListFilter,
        offset: usize,
        limit: usize,
    ) -> Result<(Vec<Listed>, usize)> {
        in_range("limit", limit, 1, MAX_PAGE)?;
        let user = self.user_for(user_id)?;
        let user = user.as_str();
        let now = self.now();
        // The record filters are a search's (one rule for what "tags: any of" means); the
        // validity filter says "does not hold now" too, which a search never asks.
        let records = RecordFilter {
            category: filter.category,
            tags: filter.tags.iter().map(|t| canonical_tag(t)).collect(),
            kinds: filter.kind.map(|k| vec![k]),
            session: filter.session_id.clone(),
            ..RecordFilter::default()
        };
        let keep = |m: &Memory| {
            records.matches(m) && filter.valid_now.is_none_or(|v| m.valid_at(now) == v)
        };
        let state = self.read();
        let mut mine: Vec<(&Memory, bool)> = Vec::new();
        if filter.shelf != Shelf::Archived {
            mine.extend(
                state
                    .iter()
                    .filter(|m| m.user_id == user && keep(m))
                    .map(|m| (m, false)),
            );
        }
        if filter.shelf != Shelf::Live {
            mine.extend(
                state
                    .archived_of(user)
                    .filter(|a| keep(&a.record))
                    .map(|a| (&a.record, true)),
            );
        }
        mine.sort_by(|(a, _), (b, _)| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        let total = mine.len();
        let page = mine
            .into_iter()
            .skip(offset)
            .take(limit)
            .map(|(m, archived)| Listed {
                memory: m.clone(),
                archived,
            })
            .collect();
        Ok((page, total))
    }
}
