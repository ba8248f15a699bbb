//! Where a request runs (`docs/cluster.md`, "Routing"): on a single node, its one store; on a
//! cluster node, the store of the request's partition, if this node may serve it. The rule
//! comes from each command's declared arguments, never from its name: a command that takes a
//! `memory_id` goes to that id's partition (ids carry it); one that takes a `user_id` to the
//! user's (the argument, else the connection's bound user, else `"default"`); a command with
//! neither is the node's own (STATS, PING) or spans every partition (PURGE, BACKUP,
//! LIST_USERS, ...: `crate::everywhere`).
//!
//! Guarantees: a refused route (`moved`, `unavailable`, `invalid`) runs nothing; a read asks
//! for `min_seq` on either kind of node and is served only by a store that has applied that
//! position, so read-your-writes is one argument: every write's reply carries the `partition`
//! and `seq` it was made at.

use crate::args::{Code, Fail};
use crate::commands::{Class, Command, Session};
use amberdb::Store;
use serde_json::{Map, Value, json};
use std::time::{Duration, Instant};

/// The argument a read names the position it needs with (module doc).
pub const MIN_SEQ: &str = "min_seq";

/// How long a read waits for its store to reach `min_seq` before `unavailable`.
pub const MIN_SEQ_WAIT: Duration = Duration::from_secs(2);

/// The user a request names, or its connection is bound to, or `"default"`.
pub const DEFAULT_USER: &str = "default";

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// The partition of this memory id.
    Id(u64),
    /// The partition of this user.
    User(String),
    /// The partition a request names (IMPORT of one partition's export, `amberdb cluster
    /// import`): run by its owner.
    Partition(u32),
    /// The node itself: no store (PING, HELP, AUTH, QUIT) or the node's counters (STATS).
    Node,
    /// Every partition (PURGE, BACKUP, EXPORT, IMPORT, MAINTENANCE, REEMBED, LIST_USERS, ...).
    Everywhere,
}

/// The route of `command` with `args`, from its declaration.
#[must_use]
pub fn route_of(command: &Command, args: &Map<String, Value>, session: &Session) -> Route {
    let takes = |name: &str| command.args.iter().any(|a| a.name == name);
    if takes("memory_id") {
        // A malformed id routes nowhere in particular: the command's own check refuses it.
        return Route::Id(args.get("memory_id").and_then(Value::as_u64).unwrap_or(0));
    }
    if takes("partition")
        && let Some(p) = args.get("partition").and_then(Value::as_u64)
    {
        // Beyond every partition: the owner's route refuses it, naming the range.
        return Route::Partition(u32::try_from(p).unwrap_or(u32::MAX));
    }
    if takes("user_id") {
        let user = args
            .get("user_id")
            .and_then(Value::as_str)
            .or(session.user.as_deref())
            .unwrap_or(DEFAULT_USER);
        return Route::User(user.to_owned());
    }
    match command.class {
        Class::Open | Class::Connection | Class::Status => Route::Node,
        _ => Route::Everywhere,
    }
}

/// The partition `route` names among `partitions` (`None`: the node's own, or every one).
#[must_use]
pub fn partition_of(route: &Route, partitions: u32) -> Option<u32> {
    match route {
        Route::Id(id) => u32::try_from(amberdb::cluster::partition_of_id(*id)).ok(),
        Route::User(user) => Some(amberdb::cluster::partition_of_user(user, partitions)),
        Route::Partition(p) => Some(*p),
        Route::Node | Route::Everywhere => None,
    }
}

/// A cluster node's partition stores, as the dispatch sees them (the `cluster` feature's node
/// implements it; `docs/cluster.md`, "The node").
pub trait Partitions: Send + Sync {
    /// The cluster's partition count.
    fn count(&self) -> u32;
    /// The store partition `p`'s request runs on here: for a write only the owner's (else
    /// `moved`, naming the owner's address and epoch, or `unavailable` while no node owns it);
    /// for a read any replica's that has applied `min_seq` (waiting at most
    /// [`MIN_SEQ_WAIT`]).
    ///
    /// # Errors
    /// `moved`, `unavailable` or `invalid` (no such partition); nothing ran.
    fn route(&self, p: u32, writes: bool, min_seq: Option<u64>) -> Result<Store, Fail>;
    /// What STATS says of the node: its name and every partition's role, owner, epoch and
    /// position, with its store's counters.
    fn status(&self) -> Value;
    /// Every partition store open on this node (readiness, metrics).
    fn stores(&self) -> Vec<Store>;
    /// Stops the node: its owned partitions released, every store checkpointed and closed.
    fn stop(&self) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// `min_seq`, taken out of a request's arguments (every command may carry it; the dispatch
/// answers it, so no command declares it).
///
/// # Errors
/// `invalid` naming `min_seq` when it is not a non-negative integer.
pub fn take_min_seq(args: &mut Map<String, Value>) -> Result<Option<u64>, Fail> {
    match args.shift_remove(MIN_SEQ) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            Fail::invalid(
                MIN_SEQ,
                "a log position: a write reply's seq (an integer ≥ 0)",
            )
        }),
    }
}

/// Waits, at most [`MIN_SEQ_WAIT`], until `store` has applied `min_seq`.
///
/// # Errors
/// `unavailable` with the position it has reached.
pub fn reach(store: &Store, partition: u32, min_seq: u64) -> Result<(), Fail> {
    let deadline = Instant::now() + MIN_SEQ_WAIT;
    loop {
        let at = store.partition_log().position;
        if at >= min_seq {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let mut f = Fail::new(
                Code::Unavailable,
                format!(
                    "this replica of partition {partition} has applied position {at}, not yet \
                     min_seq {min_seq}: retry, or ask the partition's owner"
                ),
            );
            f.body.insert("partition".into(), json!(partition));
            f.body.insert("applied_seq".into(), json!(at));
            return Err(f);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(line: &str, session: &Session) -> Route {
        let r = crate::protocol::parse(line.as_bytes()).unwrap().unwrap();
        route_of(crate::commands::find(&r.command).unwrap(), &r.args, session)
    }

    #[test]
    fn a_request_routes_by_the_arguments_its_command_declares() {
        let trusted = Session::trusted();
        assert_eq!(
            route(r#"GET_BY_MEMORY_ID {"memory_id": 42}"#, &trusted),
            Route::Id(42)
        );
        assert_eq!(
            route(r#"STORE {"content": "x", "user_id": "u1"}"#, &trusted),
            Route::User("u1".into())
        );
        assert_eq!(
            route(r#"SEARCH {"query": "x"}"#, &trusted),
            Route::User(DEFAULT_USER.into())
        );
        let bound = Session {
            user: Some("alice".into()),
            ..Session::trusted()
        };
        assert_eq!(
            route(r#"LIST_RECENT_MEMORIES {}"#, &bound),
            Route::User("alice".into())
        );
        assert_eq!(route("STATS", &trusted), Route::Node);
        assert_eq!(route("PING", &trusted), Route::Node);
        assert_eq!(route("PURGE", &trusted), Route::Everywhere);
        assert_eq!(route("LIST_USERS", &trusted), Route::Everywhere);
        // An id carries its partition.
        let id = amberdb::cluster::partition_base(5) | 7;
        assert_eq!(partition_of(&Route::Id(id), 16), Some(5));
        assert_eq!(partition_of(&Route::Node, 16), None);
    }

    #[test]
    fn min_seq_is_an_integer_or_refused_by_name() {
        let mut args: Map<String, Value> =
            serde_json::from_str(r#"{"min_seq": 12, "query": "x"}"#).unwrap();
        assert_eq!(take_min_seq(&mut args).unwrap(), Some(12));
        assert!(!args.contains_key("min_seq"));
        let mut bad: Map<String, Value> = serde_json::from_str(r#"{"min_seq": -1}"#).unwrap();
        assert_eq!(take_min_seq(&mut bad).unwrap_err().body["field"], "min_seq");
    }
}
