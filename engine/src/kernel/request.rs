//! Request ids: retries that are always safe (`docs/semantics.md`, "Retries and request ids";
//! `docs/format/log.md`, type 16).
//!
//! A write may carry a request id, a UUID version 7 its client made when the request was first
//! sent. The write's frame carries a *mark* (the id, a fingerprint of the request, when and at
//! which position), so the write and the memory of it commit together: a retry never applies
//! twice, across crashes and restarts. A second frame keeps the reply, which a retry is
//! answered with (once the first attempt's write is durable); run on a batch's handle, as the
//! server runs every request, both frames share the batch's fsync. The table of marks holds the last
//! [`REQUEST_WINDOW`] twice over (the id's own time decides what counts as a retry, so a
//! retry whose id is older than the window is refused, never applied again), and is kept in
//! every checkpoint.
//!
//! Guarantees: the table is a pure function of the frames applied in order (pruning is by the
//! frames' own times), so every replica of a store holds the same one.

use crate::kernel::record::Timestamp;
use std::collections::{HashMap, VecDeque};
use std::fmt;

/// How long a request id is answered from the table: ten minutes from when its client made
/// it (at least JetStream's duplicate window, `docs/cluster.md`).
pub const REQUEST_WINDOW_MICROS: i64 = 10 * 60 * 1_000_000;

/// Most bytes of a reply the table keeps; a longer reply is kept as a note that says so.
pub const MAX_KEPT_REPLY: usize = 1 << 20;

/// A request id: a UUID version 7 (RFC 9562), whose first 48 bits are the Unix time in
/// milliseconds when its client made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub [u8; 16]);

impl RequestId {
    /// Parses the text form (`0190b3a2-…`, hyphenated, either case).
    ///
    /// # Errors
    /// Why it is not a version-7 UUID.
    pub fn parse(text: &str) -> Result<RequestId, &'static str> {
        let uuid = uuid::Uuid::try_parse(text)
            .map_err(|_| "a request id is a UUID (xxxxxxxx-xxxx-7xxx-xxxx-xxxxxxxxxxxx)")?;
        if uuid.get_version_num() != 7 {
            return Err(
                "a request id is a UUID of version 7 (its first 48 bits say when it was made)",
            );
        }
        Ok(RequestId(*uuid.as_bytes()))
    }

    /// A new id made at `now`, with 74 random bits.
    ///
    /// # Errors
    /// The OS's random source failed.
    pub fn new(now: Timestamp) -> Result<RequestId, getrandom::Error> {
        let mut random = [0u8; 10];
        getrandom::fill(&mut random)?;
        let millis = u64::try_from(now.0 / 1_000).unwrap_or(0);
        let uuid = uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid();
        Ok(RequestId(*uuid.as_bytes()))
    }

    /// When its client made it.
    #[must_use]
    pub fn made_at(&self) -> Timestamp {
        let (secs, nanos) = uuid::Uuid::from_bytes(self.0)
            .get_timestamp()
            .map_or((0, 0), |t| t.to_unix());
        let micros = i128::from(secs) * 1_000_000 + i128::from(nanos / 1_000);
        Timestamp(i64::try_from(micros).unwrap_or(i64::MAX))
    }

    /// Whether a request with this id may run or be answered at `now`: made at most the
    /// window ago, and at most the window ahead (a client clock that far off would outlive
    /// the table's memory of it).
    ///
    /// # Errors
    /// Why not, naming the window.
    pub fn check_window(&self, now: Timestamp) -> Result<(), String> {
        let age = now.0.saturating_sub(self.made_at().0);
        if age > REQUEST_WINDOW_MICROS {
            return Err(format!(
                "request id {self} was made {} s ago: ids are remembered for {} s; a retry \
                 after that is refused so that it is never applied twice (send it with a new id \
                 once you know the first attempt did not apply)",
                age / 1_000_000,
                REQUEST_WINDOW_MICROS / 1_000_000
            ));
        }
        if -age > REQUEST_WINDOW_MICROS {
            return Err(format!(
                "request id {self} was made {} s in the future by this server's clock: ids \
                 must be made within {} s of now",
                -age / 1_000_000,
                REQUEST_WINDOW_MICROS / 1_000_000
            ));
        }
        Ok(())
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        uuid::Uuid::from_bytes(self.0).hyphenated().fmt(f)
    }
}

/// What a request frame says (`Op::Request`): a mark, in the write's own frame, or the reply
/// of a marked request, in a frame after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// The id.
    pub id: RequestId,
    /// A hash of the request (command and arguments): a retry must be the same request.
    pub fingerprint: u64,
    /// When the write ran, by the store's clock.
    pub at: Timestamp,
    /// The position of the write's frame.
    pub seq: u64,
    /// The reply (JSON text, at most `MAX_KEPT_REPLY` bytes); `None` in a mark.
    pub reply: Option<String>,
}

/// What the table holds of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestEntry {
    /// The request's fingerprint.
    pub fingerprint: u64,
    /// When it ran.
    pub at: Timestamp,
    /// Its write's position.
    pub seq: u64,
    /// Its reply, once the frame that keeps it is applied.
    pub reply: Option<String>,
}

/// The requests of the last two windows, in the order their marks were applied.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    entries: HashMap<RequestId, RequestEntry>,
    order: VecDeque<RequestId>,
}

impl Requests {
    pub(crate) fn get(&self, id: &RequestId) -> Option<&RequestEntry> {
        self.entries.get(id)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether `r` applies: a mark of an id not held, or the reply of a held mark with the
    /// same fingerprint and position that has none yet.
    pub(crate) fn check(&self, r: &RequestRecord) -> Result<(), &'static str> {
        match (&r.reply, self.entries.get(&r.id)) {
            (None, None) => Ok(()),
            (None, Some(_)) => Err("a request id marked twice"),
            (Some(_), None) => Err("the reply of a request that is not marked"),
            (Some(_), Some(e)) if e.fingerprint != r.fingerprint || e.seq != r.seq => {
                Err("the reply of another request than the one marked")
            }
            (Some(_), Some(e)) if e.reply.is_some() => Err("a request's reply kept twice"),
            (Some(_), Some(_)) => Ok(()),
        }
    }

    /// Applies a checked record; a mark first forgets every request older than two windows
    /// before its own time.
    pub(crate) fn apply(&mut self, r: RequestRecord) -> Result<(), &'static str> {
        self.check(&r)?;
        match r.reply {
            None => {
                let horizon = r.at.0.saturating_sub(2 * REQUEST_WINDOW_MICROS);
                while let Some(oldest) = self.order.front() {
                    match self.entries.get(oldest) {
                        Some(e) if e.at.0 >= horizon => break,
                        _ => {
                            if let Some(old) = self.order.pop_front() {
                                self.entries.remove(&old);
                            }
                        }
                    }
                }
                self.remember(r);
            }
            Some(reply) => {
                if let Some(e) = self.entries.get_mut(&r.id) {
                    e.reply = Some(reply);
                }
            }
        }
        Ok(())
    }

    /// The records that rebuild the table (a checkpoint's aux section), in its order: each
    /// entry's mark, with its reply when it has one.
    pub(crate) fn records(&self) -> Vec<RequestRecord> {
        self.order
            .iter()
            .filter_map(|id| {
                self.entries.get(id).map(|e| RequestRecord {
                    id: *id,
                    fingerprint: e.fingerprint,
                    at: e.at,
                    seq: e.seq,
                    reply: e.reply.clone(),
                })
            })
            .collect()
    }

    /// Loads one entry of a checkpoint (mark and reply at once).
    pub(crate) fn load(&mut self, r: RequestRecord) -> Result<(), &'static str> {
        if self.entries.contains_key(&r.id) {
            return Err("a request id twice in a checkpoint");
        }
        self.remember(r);
        Ok(())
    }

    /// Appends one entry at the young end of the table.
    fn remember(&mut self, r: RequestRecord) {
        self.order.push_back(r.id);
        let entry = RequestEntry {
            fingerprint: r.fingerprint,
            at: r.at,
            seq: r.seq,
            reply: r.reply,
        };
        self.entries.insert(r.id, entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64, n: u8) -> RequestId {
        let uuid = uuid::Builder::from_unix_timestamp_millis(ms, &[n; 10]).into_uuid();
        RequestId(*uuid.as_bytes())
    }

    fn mark(id: RequestId, at: i64, seq: u64) -> RequestRecord {
        RequestRecord {
            id,
            fingerprint: 7,
            at: Timestamp(at),
            seq,
            reply: None,
        }
    }

    #[test]
    fn ids_round_trip_as_text_and_say_when_they_were_made() {
        let now = Timestamp(1_764_000_000_123_000);
        let a = RequestId::new(now).expect("random");
        let b = RequestId::new(now).expect("random");
        assert_ne!(a, b);
        assert_eq!(RequestId::parse(&a.to_string()), Ok(a));
        assert_eq!(
            RequestId::parse(&a.to_string().to_uppercase()),
            Ok(a),
            "either case"
        );
        assert_eq!(a.made_at(), now, "to the millisecond");
        assert!(RequestId::parse("not-a-uuid").is_err());
        assert!(
            RequestId::parse("6ba7b810-9dad-41d1-80b4-00c04fd430c8")
                .expect_err("a version-4 UUID")
                .contains("version 7")
        );
    }

    #[test]
    fn the_window_refuses_ids_too_old_or_too_far_ahead() {
        let made = Timestamp(1_764_000_000_000_000);
        let a = RequestId::new(made).expect("random");
        assert!(a.check_window(made).is_ok());
        assert!(
            a.check_window(Timestamp(made.0 + REQUEST_WINDOW_MICROS))
                .is_ok()
        );
        let late = a
            .check_window(Timestamp(made.0 + REQUEST_WINDOW_MICROS + 1_000_000))
            .expect_err("past the window");
        assert!(late.contains("600 s"), "{late}");
        assert!(
            a.check_window(Timestamp(made.0 - REQUEST_WINDOW_MICROS - 1_000_000))
                .is_err()
        );
    }

    #[test]
    fn a_mark_then_its_reply_apply_once_and_old_marks_are_forgotten_by_the_frames_times() {
        let mut t = Requests::default();
        let (a, b) = (id(1, 1), id(2, 2));
        t.apply(mark(a, 0, 5)).expect("mark");
        assert!(t.apply(mark(a, 1, 6)).is_err(), "marked twice");
        let mut reply = mark(a, 2, 5);
        reply.reply = Some("{\"ok\":1}".into());
        let mut wrong = reply.clone();
        wrong.seq = 9;
        assert!(t.check(&wrong).is_err(), "another request's reply");
        t.apply(reply.clone()).expect("reply");
        assert!(t.apply(reply).is_err(), "kept twice");
        assert_eq!(
            t.get(&a).and_then(|e| e.reply.as_deref()),
            Some("{\"ok\":1}")
        );
        // Two windows later, the next mark forgets `a`.
        t.apply(mark(b, 2 * REQUEST_WINDOW_MICROS + 1, 7))
            .expect("mark");
        assert!(t.get(&a).is_none());
        assert_eq!(t.len(), 1);
        let mut loaded = Requests::default();
        for r in t.records() {
            loaded.load(r).expect("load");
        }
        assert_eq!(loaded.records(), t.records());
    }
}
