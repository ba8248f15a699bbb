//! The memory model (`docs/semantics.md`): one record type for agent notes, chat messages and knowledge,
//! its validation, and its byte encoding (`docs/format/log.md`, "Memory record encoding").

use crate::kernel::codec::{DecodeError, Decoder, Encoder};
use crate::kernel::error::{KernelError, Result};
pub use crate::kernel::ids::MemoryId;
pub use crate::kernel::time::Timestamp;
use sha2::{Digest, Sha256};
use std::fmt;

/// Most characters (Unicode scalar values) a memory's content may have.
pub const MAX_CONTENT_CHARS: usize = 10_000;
/// Most tags on one memory.
pub const MAX_TAGS: usize = 10;
/// Most characters in one tag.
pub const MAX_TAG_CHARS: usize = 100;
/// Confidence of a new memory: a prior that feedback can move either way.
pub const INITIAL_CONFIDENCE: f32 = 0.5;
/// Most characters in a user, session or agent id.
pub const MAX_ID_CHARS: usize = 256;
/// The user a request belongs to when it names none.
pub const DEFAULT_USER: &str = "default";
/// Most characters in an item's key.
pub const MAX_ITEM_KEY_CHARS: usize = 512;
/// Most bytes in an item's value (its JSON text).
pub const MAX_ITEM_VALUE_BYTES: usize = 256 * 1024;

macro_rules! closed_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $code:literal / $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $variant),+ }

        impl $name {
            /// Every value, in code order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The value's name as the protocol spells it.
            #[must_use]
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Parses the protocol spelling.
            ///
            /// # Errors
            /// `Invalid` naming the allowed values.
            pub fn parse(s: &str) -> Result<$name> {
                match s { $($text => Ok($name::$variant),)+ _ => Err(KernelError::Invalid {
                    field: stringify!($name),
                    reason: format!("{s:?} is not one of {:?}", [$($text),+]),
                }) }
            }

            fn code(self) -> u8 {
                match self { $($name::$variant => $code),+ }
            }

            fn from_code(c: u8) -> Option<$name> {
                match c { $($code => Some($name::$variant),)+ _ => None }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}

closed_enum!(
    /// What a record is.
    Kind {
        /// An agent's note.
        Memory = 0 / "memory",
        /// A chat turn: has a session and a role.
        Message = 1 / "message",
        /// A user-level fact.
        Knowledge = 2 / "knowledge",
        /// A JSON value under a key (`docs/semantics.md`, "Items"): a LangGraph store's item.
        Item = 3 / "item",
    }
);

closed_enum!(
    /// Who spoke a message.
    Role {
        /// The user.
        User = 1 / "user",
        /// The assistant.
        Assistant = 2 / "assistant",
        /// The system prompt.
        System = 3 / "system",
        /// A tool's output, as an agent framework passes it back (format v8 of the log, v9
        /// of checkpoints).
        Tool = 4 / "tool",
    }
);

closed_enum!(
    /// The nine categories of the seed.
    Category {
        /// A solution in code.
        CodeSolution = 0 / "code-solution",
        /// A bug and its fix.
        BugFix = 1 / "bug-fix",
        /// A design decision.
        Architecture = 2 / "architecture",
        /// Something learned.
        Learning = 3 / "learning",
        /// How to use a tool.
        ToolUsage = 4 / "tool-usage",
        /// A debugging session.
        Debugging = 5 / "debugging",
        /// A performance finding.
        Performance = 6 / "performance",
        /// A security finding.
        Security = 7 / "security",
        /// Anything else.
        Other = 8 / "other",
    }
);

fn hex<S: serde::Serializer>(h: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&h.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// A stored memory (`docs/format/log.md`, "Memory record encoding"). Its JSON is the seed's memory shape.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Memory {
    /// Assigned by the store.
    pub id: MemoryId,
    /// Tenant namespace; nothing ever crosses it.
    pub user_id: String,
    /// Note, message or knowledge.
    pub kind: Kind,
    /// The conversation a message belongs to.
    pub session_id: Option<String>,
    /// The agent that wrote it.
    pub agent_id: Option<String>,
    /// Who spoke (messages only).
    pub role: Option<Role>,
    /// The text.
    pub content: String,
    /// sha256 of the content, for exact dedup per user.
    #[serde(serialize_with = "hex")]
    pub content_hash: [u8; 32],
    /// One of the nine categories.
    pub category: Category,
    /// Canonical tags (trimmed, lowercase, unique, in the order given).
    pub tags: Vec<String>,
    /// When stored.
    pub created_at: Timestamp,
    /// When last changed.
    pub updated_at: Timestamp,
    /// When last returned by a read that counts as an access.
    pub last_accessed_at: Timestamp,
    /// Reads that counted as an access.
    pub access_count: u64,
    /// "Helpful" feedback received.
    pub helpful_count: u32,
    /// "Harmful" feedback received.
    pub harmful_count: u32,
    /// Confidence in [0, 1]: 0.5 for a new memory; feedback and merges move it
    /// (`docs/semantics.md`).
    pub confidence: f32,
    /// Ids this record replaced through a merge.
    pub supersedes: Vec<MemoryId>,
    /// From when the statement holds (`docs/semantics.md`, "Validity in time"): given by the
    /// caller, else the time it was stored.
    pub valid_from: Timestamp,
    /// Until when it holds: `None` while nothing has replaced it; set by a newer statement of
    /// the same slot, or by the caller.
    pub valid_to: Option<Timestamp>,
    /// Why the fact guard archived it (a newer value of its slot, or the same statement said
    /// again), for audit; `None` for a record no guard decision archived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<crate::kernel::rule::Rule>,
    /// The key and value of an item: `Some` exactly when `kind` is `item`.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub item: Option<Item>,
    /// The caller's own id for the record (a chat message's id in LangChain or OpenAI), by
    /// which a turn sent again is known (`docs/semantics.md`, "Chat turns sent again").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_id: Option<String>,
}

/// What an item holds beside its text (`docs/semantics.md`, "Items").
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Item {
    /// Unique among its user's live items: 1..=512 characters, no control characters.
    pub key: String,
    /// A JSON object, as the caller wrote it (at most 256 KiB); its JSON is the object itself.
    #[serde(serialize_with = "raw_json")]
    pub value: String,
}

impl Item {
    /// Checks a key and a value against the limits of the memory model.
    ///
    /// # Errors
    /// `Invalid` or `LimitExceeded`, naming `key` or `value`.
    pub fn validate(&self) -> Result<()> {
        validate_item_key(&self.key)?;
        if self.value.len() > MAX_ITEM_VALUE_BYTES {
            return Err(KernelError::LimitExceeded {
                what: "item value size (bytes)",
                limit: MAX_ITEM_VALUE_BYTES,
                got: self.value.len(),
            });
        }
        if let Err(e) =
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&self.value)
        {
            return Err(KernelError::Invalid {
                field: "value",
                reason: format!("must be a JSON object: {e}"),
            });
        }
        Ok(())
    }
}

/// Checks an item's key (or a key prefix): 1..=512 characters, no control characters.
///
/// # Errors
/// `Invalid` or `LimitExceeded`, naming `key`.
pub fn validate_item_key(key: &str) -> Result<()> {
    let chars = key.chars().count();
    if key.is_empty() {
        return Err(KernelError::Invalid {
            field: "key",
            reason: "must not be empty".into(),
        });
    }
    if chars > MAX_ITEM_KEY_CHARS {
        return Err(KernelError::LimitExceeded {
            what: "item key length (characters)",
            limit: MAX_ITEM_KEY_CHARS,
            got: chars,
        });
    }
    if key.chars().any(char::is_control) {
        return Err(KernelError::Invalid {
            field: "key",
            reason: "must not contain control characters".into(),
        });
    }
    Ok(())
}

fn raw_json<S: serde::Serializer>(v: &str, s: S) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    match serde_json::value::RawValue::from_string(v.to_owned()) {
        Ok(raw) => raw.serialize(s),
        Err(_) => s.serialize_str(v),
    }
}

impl Memory {
    /// Whether the statement holds at `t`: `valid_from <= t < valid_to`.
    #[must_use]
    pub fn valid_at(&self, t: Timestamp) -> bool {
        self.valid_from <= t && self.valid_to.is_none_or(|end| t < end)
    }

    /// Whether its validity is anything but "from when it was stored, still open": such
    /// records are checked one by one by a search of the present.
    #[must_use]
    pub(crate) fn has_timed_validity(&self) -> bool {
        self.valid_to.is_some() || self.valid_from > self.created_at
    }
}

/// What a caller gives to store a memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMemory {
    /// The text: 1..=10,000 characters, not only whitespace.
    pub content: String,
    /// Defaults to `other`.
    pub category: Category,
    /// Free text to normalize into a category (`auth`, `a speed-up`); overrides `category`
    /// when set (`docs/semantics.md`, "Categories").
    pub category_text: Option<String>,
    /// At most 10, each 1..=100 characters after trimming.
    pub tags: Vec<String>,
    /// Defaults to `"default"`.
    pub user_id: Option<String>,
    /// Required for messages.
    pub session_id: Option<String>,
    /// Optional.
    pub agent_id: Option<String>,
    /// Defaults to `memory`.
    pub kind: Kind,
    /// Required for messages, refused otherwise.
    pub role: Option<Role>,
    /// From when it holds; the store time when `None`.
    pub valid_from: Option<Timestamp>,
    /// Until when it holds (after `valid_from`); open when `None`.
    pub valid_to: Option<Timestamp>,
    /// An item's key and value: given exactly when `kind` is `item` ([`NewMemory::item`]).
    pub item: Option<Item>,
    /// The caller's own id for it (a chat message's id); 1..=256 characters.
    pub source_id: Option<String>,
}

impl NewMemory {
    /// A `memory` of category `other`, no tags, for the default user.
    #[must_use]
    pub fn new(content: impl Into<String>) -> NewMemory {
        NewMemory {
            content: content.into(),
            category: Category::Other,
            category_text: None,
            tags: Vec::new(),
            user_id: None,
            session_id: None,
            agent_id: None,
            kind: Kind::Memory,
            role: None,
            valid_from: None,
            valid_to: None,
            item: None,
            source_id: None,
        }
    }

    /// An item (`docs/semantics.md`, "Items"): `value` (a JSON object) under `key`, found by
    /// the meaning of `text`. Storing it replaces the user's live item of the same key.
    #[must_use]
    pub fn item(
        key: impl Into<String>,
        value: impl Into<String>,
        text: impl Into<String>,
    ) -> NewMemory {
        NewMemory {
            kind: Kind::Item,
            item: Some(Item {
                key: key.into(),
                value: value.into(),
            }),
            ..NewMemory::new(text)
        }
    }

    /// Sets when the statement starts to hold.
    #[must_use]
    pub fn valid_from(mut self, t: Timestamp) -> NewMemory {
        self.valid_from = Some(t);
        self
    }

    /// Sets when the statement stops holding.
    #[must_use]
    pub fn valid_to(mut self, t: Timestamp) -> NewMemory {
        self.valid_to = Some(t);
        self
    }

    /// Sets the category.
    #[must_use]
    pub fn category(mut self, category: Category) -> NewMemory {
        self.category = category;
        self
    }

    /// Sets the category as free text, to be normalized by the category hook.
    #[must_use]
    pub fn category_text(mut self, text: impl Into<String>) -> NewMemory {
        self.category_text = Some(text.into());
        self
    }

    /// Sets the tags.
    #[must_use]
    pub fn tags<S: Into<String>>(mut self, tags: impl IntoIterator<Item = S>) -> NewMemory {
        self.tags = tags.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the user.
    #[must_use]
    pub fn user(mut self, user_id: impl Into<String>) -> NewMemory {
        self.user_id = Some(user_id.into());
        self
    }

    /// Makes it a message of `role` in `session_id`.
    #[must_use]
    pub fn message(mut self, session_id: impl Into<String>, role: Role) -> NewMemory {
        self.kind = Kind::Message;
        self.session_id = Some(session_id.into());
        self.role = Some(role);
        self
    }

    /// Sets the session.
    #[must_use]
    pub fn session(mut self, session_id: impl Into<String>) -> NewMemory {
        self.session_id = Some(session_id.into());
        self
    }

    /// Sets the agent.
    #[must_use]
    pub fn agent(mut self, agent_id: impl Into<String>) -> NewMemory {
        self.agent_id = Some(agent_id.into());
        self
    }

    /// Sets the kind.
    #[must_use]
    pub fn kind(mut self, kind: Kind) -> NewMemory {
        self.kind = kind;
        self
    }
}

/// Checks a user, session or agent id: 1..=256 characters, no control characters.
///
/// # Errors
/// `Invalid` or `LimitExceeded`.
pub fn validate_id(field: &'static str, id: &str) -> Result<()> {
    let chars = id.chars().count();
    if id.trim().is_empty() {
        return Err(KernelError::Invalid {
            field,
            reason: "must not be empty".into(),
        });
    }
    if chars > MAX_ID_CHARS {
        return Err(KernelError::LimitExceeded {
            what: field,
            limit: MAX_ID_CHARS,
            got: chars,
        });
    }
    if id.chars().any(char::is_control) {
        return Err(KernelError::Invalid {
            field,
            reason: "must not contain control characters".into(),
        });
    }
    Ok(())
}

/// Canonical form of a tag: trimmed and lowercase.
#[must_use]
pub fn canonical_tag(tag: &str) -> String {
    tag.trim().to_lowercase()
}

/// Validates a request and returns the canonical tags. Nothing is truncated: every limit is
/// an error that names it.
///
/// # Errors
/// `Invalid` or `LimitExceeded`.
pub fn validate_new(m: &NewMemory) -> Result<Vec<String>> {
    let chars = m.content.chars().count();
    if m.content.trim().is_empty() {
        return Err(KernelError::Invalid {
            field: "content",
            reason: "must not be empty".into(),
        });
    }
    if chars > MAX_CONTENT_CHARS {
        return Err(KernelError::LimitExceeded {
            what: "content length (characters)",
            limit: MAX_CONTENT_CHARS,
            got: chars,
        });
    }
    if m.tags.len() > MAX_TAGS {
        return Err(KernelError::LimitExceeded {
            what: "number of tags",
            limit: MAX_TAGS,
            got: m.tags.len(),
        });
    }
    let mut tags: Vec<String> = Vec::with_capacity(m.tags.len());
    for t in &m.tags {
        let c = canonical_tag(t);
        let n = c.chars().count();
        if c.is_empty() {
            return Err(KernelError::Invalid {
                field: "tags",
                reason: "a tag must not be empty".into(),
            });
        }
        if n > MAX_TAG_CHARS {
            return Err(KernelError::LimitExceeded {
                what: "tag length (characters)",
                limit: MAX_TAG_CHARS,
                got: n,
            });
        }
        if c.chars().any(char::is_control) {
            return Err(KernelError::Invalid {
                field: "tags",
                reason: "a tag must not contain control characters".into(),
            });
        }
        if !tags.contains(&c) {
            tags.push(c);
        }
    }
    if let Some(u) = &m.user_id {
        validate_id("user_id", u)?;
    }
    if let Some(s) = &m.session_id {
        validate_id("session_id", s)?;
    }
    if let Some(a) = &m.agent_id {
        validate_id("agent_id", a)?;
    }
    if let Some(source) = &m.source_id {
        validate_id("source_id", source)?;
    }
    match (m.kind, m.role, &m.session_id) {
        (Kind::Message, None, _) => Err(KernelError::Invalid {
            field: "role",
            reason: "a message needs a role (user, assistant or system)".into(),
        }),
        (Kind::Message, _, None) => Err(KernelError::Invalid {
            field: "session_id",
            reason: "a message needs a session".into(),
        }),
        (Kind::Memory | Kind::Knowledge | Kind::Item, Some(_), _) => Err(KernelError::Invalid {
            field: "role",
            reason: "only messages have a role".into(),
        }),
        _ => match (&m.item, m.kind) {
            (Some(item), Kind::Item) => item.validate().map(|()| tags),
            (None, Kind::Item) => Err(KernelError::Invalid {
                field: "kind",
                reason: "an item has a key and a value: PUT_ITEM (`NewMemory::item`) writes it, \
                         and replaces it"
                    .into(),
            }),
            (Some(_), _) => Err(KernelError::Invalid {
                field: "key",
                reason: "only an item has a key and a value".into(),
            }),
            (None, _) => Ok(tags),
        },
    }
}

closed_enum!(
    /// What an entity is (`docs/search.md`, "Users, agents, sessions").
    EntityKind {
        /// A tenant: every record belongs to exactly one.
        User = 1 / "user",
        /// An agent of a user.
        Agent = 2 / "agent",
        /// A conversation of a user (optionally with one agent).
        Session = 3 / "session",
    }
);

/// Most characters in an entity's name.
pub const MAX_NAME_CHARS: usize = 256;

/// A user, agent or session. Agents and sessions belong to one user: two users may each have
/// an agent or session of the same id, and they are different entities.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Entity {
    /// User, agent or session.
    pub kind: EntityKind,
    /// The owner (for a user, its own id).
    pub user_id: String,
    /// The id, unique per user and kind.
    pub id: String,
    /// A name for people; the id when none was given.
    pub name: String,
    /// A session's agent.
    pub agent_id: Option<String>,
    /// When created (for a user or session that existed before entities were recorded, the
    /// creation time of its first record).
    pub created_at: Timestamp,
}

/// Encodes an entity (`docs/format/log.md`, "Entity payload").
pub(crate) fn encode_entity(x: &Entity, e: &mut Encoder<'_>) {
    e.u8(x.kind.code());
    e.str(&x.user_id);
    e.str(&x.id);
    e.str(&x.name);
    e.str(x.agent_id.as_deref().unwrap_or(""));
    e.i64(x.created_at.0);
}

/// Decodes an entity.
pub(crate) fn decode_entity(d: &mut Decoder<'_>) -> Result<Entity, DecodeError> {
    let kind = decode_entity_kind(d)?;
    let user_id = d.str(MAX_ID_CHARS * 4)?;
    let id = d.str(MAX_ID_CHARS * 4)?;
    let name = d.str(MAX_NAME_CHARS * 4)?;
    let agent = d.str(MAX_ID_CHARS * 4)?;
    let created_at = Timestamp(d.i64()?);
    Ok(Entity {
        kind,
        user_id,
        id,
        name,
        agent_id: (!agent.is_empty()).then_some(agent),
        created_at,
    })
}

/// Encodes the key of an entity (a deletion).
pub(crate) fn encode_entity_key(kind: EntityKind, user_id: &str, id: &str, e: &mut Encoder<'_>) {
    e.u8(kind.code());
    e.str(user_id);
    e.str(id);
}

/// Decodes the kind byte of an entity.
pub(crate) fn decode_entity_kind(d: &mut Decoder<'_>) -> Result<EntityKind, DecodeError> {
    let code = d.u8()?;
    match EntityKind::from_code(code) {
        Some(k) => Ok(k),
        None => d.fail("unknown entity kind"),
    }
}

/// Every memory's tags of one user at one moment (`snapshot_create`), so a tag rewrite can be
/// undone (`snapshot_restore`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagSnapshot {
    /// The user whose memories it covers.
    pub user_id: String,
    /// First 16 hex digits of the sha256 of the entries (`docs/semantics.md`).
    pub snapshot_id: String,
    /// What the caller said it is for.
    pub description: String,
    /// When taken.
    pub created_at: Timestamp,
    /// Each live memory and its tags, in id order.
    pub entries: Vec<(MemoryId, Vec<String>)>,
}

/// Most characters of a snapshot description.
pub const MAX_DESCRIPTION_CHARS: usize = 1000;

/// Encodes a snapshot (`docs/format/log.md`, "Snapshot payload").
pub(crate) fn encode_snapshot(s: &TagSnapshot, e: &mut Encoder<'_>) {
    e.str(&s.user_id);
    e.str(&s.snapshot_id);
    e.str(&s.description);
    e.i64(s.created_at.0);
    e.u32(u32::try_from(s.entries.len()).unwrap_or(u32::MAX));
    for (id, tags) in &s.entries {
        e.u64(id.0);
        e.u8(u8::try_from(tags.len()).unwrap_or(u8::MAX));
        for t in tags {
            e.str(t);
        }
    }
}

/// Decodes a snapshot.
pub(crate) fn decode_snapshot(d: &mut Decoder<'_>) -> Result<TagSnapshot, DecodeError> {
    let user_id = d.str(MAX_ID_CHARS * 4)?;
    let snapshot_id = d.str(64)?;
    let description = d.str(MAX_DESCRIPTION_CHARS * 4)?;
    let created_at = Timestamp(d.i64()?);
    let n = d.u32()? as usize;
    // Each entry takes at least its id and tag count.
    if n > d.remaining() / 9 {
        return d.fail("snapshot entry count out of bounds");
    }
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        let id = MemoryId(d.u64()?);
        let count = usize::from(d.u8()?);
        if count > MAX_TAGS {
            return d.fail("too many tags");
        }
        let mut tags = Vec::with_capacity(count);
        for _ in 0..count {
            tags.push(d.str(MAX_TAG_CHARS * 4)?);
        }
        entries.push((id, tags));
    }
    Ok(TagSnapshot {
        user_id,
        snapshot_id,
        description,
        created_at,
        entries,
    })
}

/// sha256 of `content`.
#[must_use]
pub fn content_hash(content: &str) -> [u8; 32] {
    Sha256::digest(content.as_bytes()).into()
}

/// Encodes a record (`docs/format/log.md`).
pub(crate) fn encode(m: &Memory, e: &mut Encoder<'_>) {
    e.u64(m.id.0);
    e.u8(m.kind.code());
    e.u8(m.role.map_or(0, Role::code));
    e.u8(m.category.code());
    e.u8(FLAG_VALIDITY
        | if m.decision.is_some() {
            FLAG_DECISION
        } else {
            0
        }
        | if m.item.is_some() { FLAG_ITEM } else { 0 }
        | if m.source_id.is_some() {
            FLAG_SOURCE
        } else {
            0
        });
    e.i64(m.created_at.0);
    e.i64(m.updated_at.0);
    e.i64(m.last_accessed_at.0);
    e.u64(m.access_count);
    e.u32(m.helpful_count);
    e.u32(m.harmful_count);
    e.f32(m.confidence);
    e.bytes(&m.content_hash);
    e.str(&m.user_id);
    e.opt_str(m.session_id.as_deref());
    e.opt_str(m.agent_id.as_deref());
    e.str(&m.content);
    e.u8(u8::try_from(m.tags.len()).unwrap_or(u8::MAX));
    for t in &m.tags {
        e.str(t);
    }
    e.u32(u32::try_from(m.supersedes.len()).unwrap_or(u32::MAX));
    for s in &m.supersedes {
        e.u64(s.0);
    }
    e.i64(m.valid_from.0);
    e.i64(m.valid_to.map_or(OPEN_VALIDITY, |t| t.0));
    if let Some(rule) = m.decision {
        e.u8(rule.code());
    }
    if let Some(item) = &m.item {
        e.str(&item.key);
        e.str(&item.value);
    }
    if let Some(source) = &m.source_id {
        e.str(source);
    }
}

/// Record flag: the record ends with the caller's id for it (log v10, checkpoint v11).
const FLAG_SOURCE: u8 = 8;

/// Record flag: the record ends with an item's key and value (log v7, checkpoint v7).
const FLAG_ITEM: u8 = 4;

/// Record flag: the record ends with the code of the fact guard's rule that archived it.
const FLAG_DECISION: u8 = 2;

/// Record flag: the record ends with `valid_from`, `valid_to` (log v4, checkpoint v4).
const FLAG_VALIDITY: u8 = 1;
/// `valid_to` of a statement nothing has replaced.
const OPEN_VALIDITY: i64 = i64::MAX;

/// The end of a record after its decision: an item's key and value, then its source id.
fn decode_item_and_source(
    d: &mut Decoder<'_>,
    flags: u8,
    kind: Kind,
) -> Result<(Option<Item>, Option<String>), DecodeError> {
    if (flags & FLAG_ITEM != 0) != (kind == Kind::Item) {
        return d.fail("the ITEM flag and the item kind disagree");
    }
    let item = if flags & FLAG_ITEM == 0 {
        None
    } else {
        let item = Item {
            key: d.str(MAX_ITEM_KEY_CHARS * 4)?,
            value: d.str(MAX_ITEM_VALUE_BYTES)?,
        };
        if item.validate().is_err() {
            return d.fail("item key or value out of the model's limits");
        }
        Some(item)
    };
    let source_id = if flags & FLAG_SOURCE == 0 {
        None
    } else {
        let source = d.str(MAX_ID_CHARS * 4)?;
        if validate_id("source_id", &source).is_err() {
            return d.fail("source id out of the model's limits");
        }
        Some(source)
    };
    Ok((item, source_id))
}

/// Decodes a record, enforcing the limits of the memory model.
pub(crate) fn decode(d: &mut Decoder<'_>) -> Result<Memory, DecodeError> {
    let id = MemoryId(d.u64()?);
    let kind = Kind::from_code(d.u8()?);
    let role = match d.u8()? {
        0 => Some(None),
        c => Role::from_code(c).map(Some),
    };
    let category = Category::from_code(d.u8()?);
    let (Some(kind), Some(role), Some(category)) = (kind, role, category) else {
        return d.fail("unknown kind, role or category");
    };
    let flags = d.u8()?;
    if flags & !(FLAG_VALIDITY | FLAG_DECISION | FLAG_ITEM | FLAG_SOURCE) != 0 {
        return d.fail("unknown record flags");
    }
    let created_at = Timestamp(d.i64()?);
    let updated_at = Timestamp(d.i64()?);
    let last_accessed_at = Timestamp(d.i64()?);
    let access_count = d.u64()?;
    let helpful_count = d.u32()?;
    let harmful_count = d.u32()?;
    let confidence = d.f32()?;
    if !confidence.is_finite() {
        return d.fail("confidence not finite");
    }
    let content_hash = d.hash()?;
    let id_bytes = MAX_ID_CHARS * 4;
    let user_id = d.str(id_bytes)?;
    let session_id = d.opt_str(id_bytes)?;
    let agent_id = d.opt_str(id_bytes)?;
    let content = d.str(MAX_CONTENT_CHARS * 4)?;
    // Characters never outnumber bytes: count them only when the bytes could exceed the limit.
    if content.len() > MAX_CONTENT_CHARS && content.chars().count() > MAX_CONTENT_CHARS {
        return d.fail("content over the limit");
    }
    let ntags = usize::from(d.u8()?);
    if ntags > MAX_TAGS {
        return d.fail("too many tags");
    }
    let mut tags = Vec::with_capacity(ntags);
    for _ in 0..ntags {
        tags.push(d.str(MAX_TAG_CHARS * 4)?);
    }
    let nsup = d.u32()? as usize;
    if nsup > d.remaining() / 8 {
        return d.fail("supersedes count out of bounds");
    }
    let mut supersedes = Vec::with_capacity(nsup);
    for _ in 0..nsup {
        supersedes.push(MemoryId(d.u64()?));
    }
    // Records written before validity existed hold from when they were stored, still open.
    let (valid_from, valid_to) = if flags & FLAG_VALIDITY == 0 {
        (created_at, None)
    } else {
        let from = Timestamp(d.i64()?);
        let to = d.i64()?;
        let to = (to != OPEN_VALIDITY).then_some(Timestamp(to));
        if to.is_some_and(|t| t <= from) {
            return d.fail("validity ends before it starts");
        }
        (from, to)
    };
    let decision = if flags & FLAG_DECISION == 0 {
        None
    } else {
        match crate::kernel::rule::Rule::from_code(d.u8()?) {
            Some(rule) => Some(rule),
            None => return d.fail("unknown decision rule"),
        }
    };
    let (item, source_id) = decode_item_and_source(d, flags, kind)?;
    Ok(Memory {
        id,
        user_id,
        kind,
        session_id,
        agent_id,
        role,
        content,
        content_hash,
        category,
        tags,
        created_at,
        updated_at,
        last_accessed_at,
        access_count,
        helpful_count,
        harmful_count,
        confidence,
        supersedes,
        valid_from,
        valid_to,
        decision,
        item,
        source_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_limit_and_never_truncates() {
        let long = "x".repeat(MAX_CONTENT_CHARS + 1);
        assert!(matches!(
            validate_new(&NewMemory::new(long)),
            Err(KernelError::LimitExceeded {
                limit: 10_000,
                got: 10_001,
                ..
            })
        ));
        assert!(matches!(
            validate_new(&NewMemory::new("  ")),
            Err(KernelError::Invalid {
                field: "content",
                ..
            })
        ));
        let eleven = NewMemory::new("x").tags((0..11).map(|i| format!("t{i}")));
        assert!(matches!(
            validate_new(&eleven),
            Err(KernelError::LimitExceeded {
                limit: 10,
                got: 11,
                ..
            })
        ));
        let long_tag = NewMemory::new("x").tags(["y".repeat(101)]);
        assert!(matches!(
            validate_new(&long_tag),
            Err(KernelError::LimitExceeded { limit: 100, .. })
        ));
        assert!(matches!(
            validate_new(&NewMemory::new("x").kind(Kind::Message)),
            Err(KernelError::Invalid { field: "role", .. })
        ));
        assert_eq!(
            validate_new(&NewMemory::new("x").tags([" Rust ", "rust", "Go"])).unwrap(),
            vec!["rust", "go"]
        );
        assert_eq!(
            validate_new(&NewMemory::new("é".repeat(MAX_CONTENT_CHARS)))
                .map(|_| ())
                .ok(),
            Some(())
        );
    }

    #[test]
    fn enums_round_trip_their_spelling() {
        for c in Category::ALL {
            assert_eq!(Category::parse(c.as_str()).unwrap(), *c);
            assert_eq!(Category::from_code(c.code()), Some(*c));
        }
        assert!(Category::parse("nope").is_err());
    }
}
