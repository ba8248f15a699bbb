//! Error replies, on every transport: a protocol error code (`docs/protocol.md`, "Errors"),
//! and a message that says what to do; HTTP's status for each code (`docs/http.md`).

use amberdb::{EngineError, KernelError};
use serde_json::{Map, Value, json};

/// The error codes of `docs/protocol.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// The line is not `COMMAND [JSON object]`.
    BadRequest,
    /// No such command.
    UnknownCommand,
    /// An argument is missing, of the wrong type, unknown or out of range.
    Invalid,
    /// Over a documented limit.
    LimitExceeded,
    /// No such memory, entity or snapshot.
    NotFound,
    /// A duplicate memory or entity.
    AlreadyExists,
    /// Not authenticated, or a wrong token.
    Unauthorized,
    /// A user-bound token naming another user.
    Forbidden,
    /// A line over `max_line_bytes`.
    LineTooLong,
    /// Over `max_connections`.
    TooManyConnections,
    /// Nothing arrived for `idle_timeout`, or a line stayed half-sent for `slow_client_timeout`.
    Timeout,
    /// The store refuses writes, or embeddings are unavailable, or the server is stopping.
    Unavailable,
    /// The disk is full: the write was not stored; retry once space is freed.
    DiskFull,
    /// The server is at capacity: the request was not run; retry after `retry_after_ms`.
    Busy,
    /// A cluster node that does not own the request's partition: nothing ran; send it to the
    /// owner the reply names (`address`, `epoch`; `docs/cluster.md`, "Routing").
    Moved,
    /// Anything else.
    Internal,
}

impl Code {
    /// Every code, for STATS.
    pub const ALL: [Code; 16] = [
        Code::BadRequest,
        Code::UnknownCommand,
        Code::Invalid,
        Code::LimitExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::Unauthorized,
        Code::Forbidden,
        Code::LineTooLong,
        Code::TooManyConnections,
        Code::Timeout,
        Code::Unavailable,
        Code::DiskFull,
        Code::Busy,
        Code::Moved,
        Code::Internal,
    ];

    /// The wire spelling.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Code::BadRequest => "bad_request",
            Code::UnknownCommand => "unknown_command",
            Code::Invalid => "invalid",
            Code::LimitExceeded => "limit_exceeded",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::Unauthorized => "unauthorized",
            Code::Forbidden => "forbidden",
            Code::LineTooLong => "line_too_long",
            Code::TooManyConnections => "too_many_connections",
            Code::Timeout => "timeout",
            Code::Unavailable => "unavailable",
            Code::DiskFull => "disk_full",
            Code::Busy => "busy",
            Code::Moved => "moved",
            Code::Internal => "internal",
        }
    }

    /// The HTTP status of a reply with this code (`docs/http.md`, "Statuses"). A limit is
    /// 422 here: a field or the memory limit; HTTP's own body limit answers 413 itself.
    #[must_use]
    pub fn http_status(self) -> u16 {
        match self {
            Code::BadRequest | Code::Invalid => 400,
            Code::Unauthorized => 401,
            Code::Forbidden => 403,
            Code::NotFound | Code::UnknownCommand => 404,
            Code::Timeout => 408,
            Code::AlreadyExists => 409,
            Code::LineTooLong => 413,
            Code::LimitExceeded => 422,
            Code::Busy => 429,
            // Misdirected Request: the partition's owner is another node.
            Code::Moved => 421,
            Code::Internal => 500,
            Code::Unavailable | Code::TooManyConnections => 503,
            Code::DiskFull => 507,
        }
    }

    /// Position in [`Code::ALL`].
    #[must_use]
    pub fn index(self) -> usize {
        Code::ALL.iter().position(|c| *c == self).unwrap_or(0)
    }
}

/// A failed request: its code and the reply object (`ok: false` is added on the wire).
#[derive(Debug, Clone, PartialEq)]
pub struct Fail {
    /// The protocol code.
    pub code: Code,
    /// The reply: `code`, `error`, `message`, and for library errors the seed's fields.
    pub body: Map<String, Value>,
}

impl Fail {
    /// A protocol-level failure with a message.
    pub fn new(code: Code, message: impl Into<String>) -> Fail {
        let mut body = Map::new();
        body.insert("success".into(), Value::Bool(false));
        body.insert("code".into(), json!(code.as_str()));
        body.insert("error".into(), json!(code.as_str()));
        body.insert("message".into(), json!(message.into()));
        Fail { code, body }
    }

    /// `invalid`, naming the argument.
    pub fn invalid(field: &str, reason: impl std::fmt::Display) -> Fail {
        let mut f = Fail::new(Code::Invalid, format!("{field}: {reason}"));
        f.body.insert("field".into(), json!(field));
        f
    }

    /// The reply object with `ok: false` first.
    #[must_use]
    pub fn into_reply(self) -> Map<String, Value> {
        let mut reply = Map::new();
        reply.insert("ok".into(), Value::Bool(false));
        reply.extend(self.body);
        reply
    }
}

/// The seed's error shape of a library error: `{"success": false, "error": <kind>, "message":
/// <what to do>}`, plus `memory_id` where one helps (the existing memory of a duplicate, the
/// successor of an archived one).
fn seed_reply(e: &EngineError) -> Map<String, Value> {
    let (error, message) = match e {
        EngineError::Invalid { .. } => ("Invalid input", e.to_string()),
        EngineError::LimitExceeded { .. } => ("Limit exceeded", e.to_string()),
        EngineError::AlreadyExists { existing } => (
            "Memory already exists",
            format!("Memory already exists with id {existing}; nothing was stored"),
        ),
        EngineError::NotFound { .. } => ("Not found", e.to_string()),
        EngineError::Archived { .. } => (
            "Not found",
            format!("{e}; the successor holds its content, and its lineage lists this one"),
        ),
        EngineError::EntityNotFound { .. } => ("Not found", e.to_string()),
        EngineError::EntityExists { .. } => ("Already exists", e.to_string()),
        EngineError::SnapshotNotFound { .. } => ("Snapshot not found", e.to_string()),
        EngineError::PreviewMismatch { .. } => (
            "Preview ID mismatch",
            format!("{e}; run the preview again and apply its id"),
        ),
        EngineError::MemoryLimitReached {
            limit,
            held,
            adding,
        } => (
            "Memory limit reached",
            format!(
                "Memory limit reached ({held}/{limit}; adding {adding} would pass it). Use clear_old_memories to free space, or raise the limit (--memory-limit / AMBERDB_MEMORY_LIMIT for the server, memory_limit= for Python's Store)."
            ),
        ),
        EngineError::DimensionMismatch { .. } => ("Invalid input", e.to_string()),
        EngineError::OutOfScope { .. } => ("Forbidden", e.to_string()),
        EngineError::EmbedderMismatch { .. } => ("Embedder mismatch", e.to_string()),
        EngineError::Kernel(KernelError::Locked { .. }) => ("Store locked", e.to_string()),
        EngineError::Kernel(KernelError::Poisoned) => ("Store poisoned", e.to_string()),
        EngineError::Kernel(KernelError::DiskFull { .. }) => ("Disk full", e.to_string()),
        EngineError::Kernel(KernelError::OutOfDescriptors { .. }) => {
            ("Out of file descriptors", e.to_string())
        }
        EngineError::Kernel(KernelError::Restoring { .. }) => ("Restoring", e.to_string()),
        EngineError::Kernel(KernelError::Internal { .. }) => ("Internal error", e.to_string()),
        EngineError::Kernel(KernelError::Io { .. }) => ("I/O error", e.to_string()),
        EngineError::Kernel(KernelError::Corrupted { .. })
        | EngineError::Kernel(KernelError::Misnamed { .. })
        | EngineError::Kernel(KernelError::Foreign { .. })
        | EngineError::Kernel(KernelError::UnsupportedVersion { .. }) => {
            ("Data error", e.to_string())
        }
        EngineError::Embed(_) => ("Embedding failed", e.to_string()),
        // Variants added after this server was written.
        _ => ("Internal error", e.to_string()),
    };
    let mut reply = Map::new();
    reply.insert("success".into(), json!(false));
    reply.insert("error".into(), json!(error));
    reply.insert("message".into(), json!(message));
    let id = match e {
        EngineError::AlreadyExists { existing } => Some(*existing),
        EngineError::Archived { superseded_by, .. } => *superseded_by,
        _ => None,
    };
    if let Some(id) = id {
        reply.insert("memory_id".into(), json!(id.0));
    }
    reply
}

impl From<KernelError> for Fail {
    /// The store's own failure (a batch's fsync), as the library reports it.
    fn from(e: KernelError) -> Fail {
        Fail::from(EngineError::from(e))
    }
}

impl From<EngineError> for Fail {
    /// A library error keeps the seed's reply (`success`, `error`, `message`, `memory_id`)
    /// and gains the protocol code.
    fn from(e: EngineError) -> Fail {
        let code = match &e {
            EngineError::Invalid { .. }
            | EngineError::DimensionMismatch { .. }
            | EngineError::PreviewMismatch { .. }
            | EngineError::EmbedderMismatch { .. } => Code::Invalid,
            EngineError::LimitExceeded { .. } | EngineError::MemoryLimitReached { .. } => {
                Code::LimitExceeded
            }
            EngineError::AlreadyExists { .. } | EngineError::EntityExists { .. } => {
                Code::AlreadyExists
            }
            EngineError::NotFound { .. }
            | EngineError::Archived { .. }
            | EngineError::EntityNotFound { .. }
            | EngineError::SnapshotNotFound { .. } => Code::NotFound,
            EngineError::Kernel(KernelError::Poisoned)
            | EngineError::Embed(_)
            | EngineError::Kernel(KernelError::Locked { .. })
            | EngineError::Kernel(KernelError::Restoring { .. }) => Code::Unavailable,
            EngineError::Kernel(KernelError::DiskFull { .. }) => Code::DiskFull,
            // Transient: nothing changed, and the same request works once descriptors free.
            EngineError::Kernel(KernelError::OutOfDescriptors { .. }) => Code::Busy,
            EngineError::OutOfScope { .. } => Code::Forbidden,
            // I/O, corruption, and variants added after this server was written.
            _ => Code::Internal,
        };
        let mut body = Map::new();
        body.insert("code".into(), json!(code.as_str()));
        body.extend(seed_reply(&e));
        if let EngineError::Invalid { field, .. }
        | EngineError::EntityNotFound { field, .. }
        | EngineError::EntityExists { field, .. }
        | EngineError::OutOfScope { field, .. } = &e
        {
            body.insert("field".into(), json!(field));
        }
        if let EngineError::LimitExceeded { what, .. } = &e {
            body.insert("field".into(), json!(what));
        }
        Fail { code, body }
    }
}

/// Results of a command: a reply object, or a failure.
pub type Outcome = Result<Value, Fail>;

#[cfg(test)]
mod tests {
    use super::*;
    use amberdb::MemoryId;

    #[test]
    fn faults_of_the_engine_and_the_disk_are_not_the_callers() {
        let internal = EngineError::Kernel(KernelError::Internal {
            context: "encoding the growing rows as a segment",
            reason: "x".into(),
        });
        assert_eq!(internal.kind(), amberdb::ErrorKind::Internal);
        assert_eq!(Fail::from(internal).code, Code::Internal);
        let full = EngineError::Kernel(KernelError::DiskFull {
            path: "wal".into(),
            source: std::io::ErrorKind::StorageFull.into(),
        });
        assert_eq!(full.kind(), amberdb::ErrorKind::Environment);
        let f = Fail::from(full);
        assert_eq!(f.code, Code::DiskFull);
        assert_eq!(f.into_reply()["code"], "disk_full");
    }

    #[test]
    fn library_errors_keep_the_seed_fields_and_gain_a_code() {
        let f = Fail::from(EngineError::AlreadyExists {
            existing: MemoryId(7),
        });
        assert_eq!(f.code, Code::AlreadyExists);
        let reply = f.into_reply();
        assert_eq!(reply["ok"], false);
        assert_eq!(reply["success"], false);
        assert_eq!(reply["memory_id"], 7);
        assert_eq!(reply["code"], "already_exists");
        assert_eq!(reply["error"], "Memory already exists");
        let full = Fail::from(EngineError::MemoryLimitReached {
            limit: 3,
            held: 5,
            adding: 1,
        })
        .into_reply();
        assert_eq!(full["error"], "Memory limit reached");
        assert!(
            full["message"]
                .as_str()
                .unwrap()
                .starts_with("Memory limit reached (5/3; adding 1 would pass it)"),
            "{full:?}"
        );
        assert!(
            full["message"]
                .as_str()
                .unwrap()
                .contains("clear_old_memories")
        );
        let missing = Fail::from(EngineError::NotFound { id: MemoryId(99) }).into_reply();
        assert_eq!(
            (&missing["error"], &missing["code"]),
            (&json!("Not found"), &json!("not_found"))
        );
        let scoped = Fail::from(EngineError::OutOfScope {
            field: "user_id",
            user: "bob".into(),
            scope: "ada".into(),
        });
        assert_eq!(scoped.code, Code::Forbidden);
        assert_eq!(scoped.into_reply()["field"], "user_id");
    }
}
