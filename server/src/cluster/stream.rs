//! A partition's stream on NATS JetStream (`docs/cluster.md`, "Frames on the stream"): the
//! stream itself, the publisher an owner's store hands its frames to, the claim, and the tail
//! a replica applies.
//!
//! Guarantees: the publisher sends messages in the order the store hands them over, each with
//! its headers (`Amberdb-Epoch`, `Amberdb-Prev`, `Amberdb-Chunk`, a per-attempt `Nats-Msg-Id`,
//! and `Nats-Expected-Last-Sequence` as an early refusal), and reports a position held only
//! once JetStream acknowledged every message up to it, each at the position it was published
//! for; the first failure (a refusal, another position, no acknowledgement within
//! `ACK_LIMIT`) is kept and every later wait reports it, so the store poisons itself before
//! reporting the write. The tail applies messages in stream order, each exactly once (one the
//! store holds already, delivered again by a consumer that reset itself, is passed over), through
//! the store's replica path, which judges them.

use amberdb::cluster::{Applied, Outgoing, Publisher, StreamMessage};
use amberdb::{Store, StoreId};
use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer, stream};
use futures_util::StreamExt;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a write waits for JetStream's acknowledgement before the owner gives up.
pub const ACK_LIMIT: Duration = Duration::from_secs(30);
/// Messages published and not yet acknowledged, at most.
pub const WINDOW: usize = 256;
/// JetStream's duplicate window on a partition stream: a publisher's resend of one message
/// within it is dropped.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(600);
/// The largest message a partition stream takes: a 4 MiB chunk and its headers
/// (`nats-server` runs with `max_payload: 8MB`).
pub const MAX_MESSAGE: i32 = 8 << 20;

/// Partition `p`'s stream name.
#[must_use]
pub fn stream_name(partition: u32) -> String {
    format!("AMBERDB_P{partition}")
}

/// Partition `p`'s subject.
#[must_use]
pub fn subject(partition: u32) -> String {
    format!("amberdb.p.{partition}")
}

/// Why a stream operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// JetStream refused or failed a request.
    #[error("{context}: {reason}")]
    Nats {
        /// What was being done.
        context: &'static str,
        /// JetStream's answer.
        reason: String,
    },
    /// The store refused a message or an operation.
    #[error(transparent)]
    Store(#[from] amberdb::EngineError),
    /// The stream no longer holds the position the store needs next: it was trimmed past it
    /// (the store must start again from a shipped checkpoint).
    #[error(
        "the stream begins at position {first}, after {needed}, which this store needs next: it was trimmed below the shipped checkpoints"
    )]
    Trimmed {
        /// The position the store needs next.
        needed: u64,
        /// The stream's first position.
        first: u64,
    },
    /// The stream ends before a position a live replica (or the claimer's own store) applied
    /// (`docs/cluster.md`, "When the stream loses what it acknowledged"): its leader lost
    /// messages. Nothing is claimed on such a stream; its leadership is asked to move.
    #[error(
        "the stream ends at position {end}, before position {held} that node {node} applied: its leader lost messages (nothing is claimed until a leader that holds them leads, or until an operator stops {node} and sets its store aside with `amberdb cluster set-aside`)"
    )]
    ShorterThanReplicas {
        /// The stream's last position.
        end: u64,
        /// The position a live replica registered (or the claimer's own store applied).
        held: u64,
        /// That replica's node.
        node: String,
    },
    /// The stream ends before a position it acknowledged to this node's publisher (a damaged
    /// leader lost acknowledged messages; `docs/cluster.md`, "When the stream loses what it
    /// acknowledged"). Nothing is claimed on such a stream; its leadership is asked to move.
    #[error(
        "the stream ends at position {end}, before position {acknowledged}, which it acknowledged to this node: its leader lost acknowledged messages (nothing is claimed until a leader that holds them leads)"
    )]
    LostAcknowledged {
        /// The stream's last position.
        end: u64,
        /// The highest position it acknowledged to this node.
        acknowledged: u64,
    },
    /// The stream's history is not this replica's: it holds, at a position this replica
    /// passed, a claim this replica did not apply there, or a message that counts whose
    /// publisher's running CRC is not this replica's (the stream lost messages this replica
    /// had applied, and the partition went on from the shorter end; `docs/cluster.md`, "A
    /// replica whose history is not the stream's"). The store is set aside and made again from
    /// the stream.
    #[error("at position {position} (epoch {epoch}) the stream's history is not this replica's")]
    Diverged {
        /// The claim's position.
        position: u64,
        /// Its epoch.
        epoch: u64,
    },
    /// Followed to a position the stream reported, it delivered nothing for `FOLLOW_STALL`
    /// (`docs/cluster.md`, "When the stream loses what it acknowledged"): it says it holds
    /// what it cannot give, as a leader with a damaged replica's files does. Nothing is
    /// claimed on it.
    #[error(
        "the stream reports messages up to position {until} but delivered nothing past {position} for {}s: it cannot give what it says it holds (nothing is claimed on it)",
        FOLLOW_STALL.as_secs()
    )]
    Stalled {
        /// The last position delivered.
        position: u64,
        /// The position it was followed to.
        until: u64,
    },
    /// A partition's stream exists with a configuration that breaks a promise amberdb makes
    /// on it (made by hand, by another program, or edited since): nothing is read from or
    /// written to it until an operator makes it right.
    #[error(
        "stream {stream}: {field} is {found}, and amberdb needs {needed} (docs/cluster.md, \"On JetStream\"); nothing is read from or written to it until it is"
    )]
    Config {
        /// The stream's name.
        stream: String,
        /// The field of its configuration.
        field: &'static str,
        /// What it holds.
        found: String,
        /// What amberdb makes and needs.
        needed: String,
    },
    /// A claim lost: another message took its position.
    #[error(
        "the claim published for position {expected} landed at {landed}: another node wrote or claimed first"
    )]
    ClaimLost {
        /// The position it was published for.
        expected: u64,
        /// Where it landed.
        landed: u64,
    },
}

fn nats(context: &'static str) -> impl FnOnce(String) -> StreamError {
    move |reason| StreamError::Nats { context, reason }
}

/// How long one read of JetStream's state (a lease, the KV bucket's keys, a registration, a
/// stream's last position) may wait for its answer before it is given up, to be tried again.
/// A request that went to a server just cut off without a word is never answered, and the
/// client's own limit is seconds long: a standby stuck on one saw no lease lapse and took
/// nothing (docs/cluster.md, "What a host cut waits for").
pub const READ_LIMIT: Duration = Duration::from_secs(1);

/// How long the making of an ordered consumer (a replica's tail, a catch-up) may wait. It goes
/// through JetStream's meta group and the server placed to serve it: one placed on a server
/// just cut off is never made, and the client's own limit is 10 s (seen: a claim retried four
/// times over 40 s). Made again at the next tick, it is placed again.
pub const CONSUMER_LIMIT: Duration = Duration::from_secs(2);

/// `read`, given up after [`READ_LIMIT`].
pub(crate) async fn bounded<T, E: std::fmt::Display>(
    context: &'static str,
    read: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, StreamError> {
    within(READ_LIMIT, context, read).await
}

/// `request`, given up after `limit`.
async fn within<T, E: std::fmt::Display>(
    limit: Duration,
    context: &'static str,
    request: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, StreamError> {
    match tokio::time::timeout(limit, request).await {
        Ok(done) => done.map_err(|e| nats(context)(e.to_string())),
        Err(_) => Err(nats(context)(format!(
            "no answer within {} ms",
            limit.as_millis()
        ))),
    }
}

/// Partition `p`'s stream as amberdb makes it: file storage, `replicas` copies, the duplicate
/// window, 8 MiB messages, no deletes by clients (purges stay possible: trimming below the
/// shipped checkpoints, which NATS permissions keep to the nodes).
fn stream_config(partition: u32, replicas: usize) -> stream::Config {
    stream::Config {
        name: stream_name(partition),
        subjects: vec![subject(partition)],
        storage: stream::StorageType::File,
        num_replicas: replicas,
        duplicate_window: DUPLICATE_WINDOW,
        max_message_size: MAX_MESSAGE,
        deny_delete: true,
        // Trimmed below the shipped checkpoints (docs/cluster.md, "Trimmed streams"): a
        // stream made with deny_purge can never be trimmed, so NATS permissions keep the
        // purge API to the nodes instead.
        deny_purge: false,
        allow_direct: true,
        ..Default::default()
    }
}

/// Whether a partition stream's configuration keeps amberdb's promises: the first field that
/// does not, as `(field, found, needed)`. Checked: what would lose or drop messages (memory
/// storage, fewer copies, a retention other than limits, any message, byte or age limit,
/// deletes, rollups), let a resend through twice (another duplicate window), refuse a
/// chunk (smaller messages), or deliver another stream's messages (other subjects, a
/// mirror or sources).
fn unkept_promise(
    config: &stream::Config,
    partition: u32,
    replicas: usize,
) -> Option<(&'static str, String, String)> {
    let unlimited = |v: i64| v <= 0;
    let checks: [(&'static str, bool, String, String); 14] = [
        (
            "subjects",
            config.subjects == [subject(partition)],
            format!("{:?}", config.subjects),
            format!("[{:?}]", subject(partition)),
        ),
        (
            "storage",
            config.storage == stream::StorageType::File,
            format!("{:?}", config.storage),
            "File".into(),
        ),
        (
            "num_replicas",
            config.num_replicas == replicas,
            config.num_replicas.to_string(),
            format!("{replicas} (the cluster's settings)"),
        ),
        (
            "retention",
            config.retention == stream::RetentionPolicy::Limits,
            format!("{:?}", config.retention),
            "Limits".into(),
        ),
        (
            "max_messages",
            unlimited(config.max_messages),
            config.max_messages.to_string(),
            "no limit".into(),
        ),
        (
            "max_bytes",
            unlimited(config.max_bytes),
            config.max_bytes.to_string(),
            "no limit".into(),
        ),
        (
            "max_messages_per_subject",
            unlimited(config.max_messages_per_subject),
            config.max_messages_per_subject.to_string(),
            "no limit".into(),
        ),
        (
            "max_age",
            config.max_age.is_zero(),
            format!("{:?}", config.max_age),
            "no limit".into(),
        ),
        (
            "duplicate_window",
            config.duplicate_window == DUPLICATE_WINDOW,
            format!("{:?}", config.duplicate_window),
            format!("{DUPLICATE_WINDOW:?}"),
        ),
        (
            "max_message_size",
            config.max_message_size == MAX_MESSAGE,
            config.max_message_size.to_string(),
            MAX_MESSAGE.to_string(),
        ),
        (
            "deny_delete",
            config.deny_delete,
            "false".into(),
            "true".into(),
        ),
        (
            "allow_rollup",
            !config.allow_rollup,
            "true".into(),
            "false".into(),
        ),
        ("no_ack", !config.no_ack, "true".into(), "false".into()),
        (
            "mirror or sources",
            config.mirror.is_none() && config.sources.as_ref().is_none_or(Vec::is_empty),
            "set".into(),
            "none".into(),
        ),
    ];
    checks
        .into_iter()
        .find(|(_, kept, _, _)| !kept)
        .map(|(field, _, found, needed)| (field, found, needed))
}

/// Creates partition `p`'s stream, or checks the one there (`unkept_promise`).
///
/// # Errors
/// `Config` for a stream there whose configuration breaks a promise; JetStream's refusal.
pub async fn ensure_stream(
    js: &jetstream::Context,
    partition: u32,
    replicas: usize,
) -> Result<stream::Stream, StreamError> {
    let made = js
        .get_or_create_stream(stream_config(partition, replicas))
        .await
        .map_err(|e| nats("creating the partition stream")(e.to_string()))?;
    checked(made, partition, replicas)
}

/// Partition `partition`'s stream as it is, checked as [`ensure_stream`] checks it, and never
/// made: what a node opens. A stream that vanished (JetStream's snapshot corruption can delete
/// one) made again empty by a node would let a node without the partition's history claim it
/// while the replicas that hold it are down; `amberdb cluster init` makes it again, an
/// operator's command (docs/cluster.md, "Why JetStream, and what it must not do").
///
/// # Errors
/// The stream missing (naming the command that makes it), JetStream's refusal, or a
/// configuration that breaks a promise.
pub async fn existing_stream(
    js: &jetstream::Context,
    partition: u32,
    replicas: usize,
) -> Result<stream::Stream, StreamError> {
    let name = stream_name(partition);
    let found = js.get_stream(&name).await.map_err(|e| {
        let missing = matches!(
            e.kind(),
            jetstream::context::GetStreamErrorKind::JetStream(j)
                if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
        );
        let reason = if missing {
            format!("{name} is missing (a node never makes it: `amberdb cluster init` does, once an operator decides to)")
        } else {
            e.to_string()
        };
        nats("opening the partition stream")(reason)
    })?;
    checked(found, partition, replicas)
}

/// `stream` if its configuration keeps every promise of [`stream_config`].
fn checked(
    made: stream::Stream,
    partition: u32,
    replicas: usize,
) -> Result<stream::Stream, StreamError> {
    // The configuration JetStream answered the get or the create with: no second request.
    let config = &made.cached_info().config;
    if let Some((field, found, needed)) = unkept_promise(config, partition, replicas) {
        return Err(StreamError::Config {
            stream: stream_name(partition),
            field,
            found,
            needed,
        });
    }
    Ok(made)
}

/// The headers of a message `m` of the store `store`.
fn headers(store: StoreId, m: &Outgoing) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("Amberdb-Epoch", m.epoch.to_string());
    h.insert("Amberdb-Prev", m.prev.to_string());
    if let Some((i, n)) = m.chunk {
        h.insert("Amberdb-Chunk", format!("{i}/{n}"));
    }
    if let Some(crc) = m.crc {
        h.insert("Amberdb-Crc", format!("{crc:08x}"));
    }
    h.insert("Nats-Msg-Id", format!("{store}-{}-{}", m.epoch, m.position));
    h.insert("Nats-Expected-Last-Sequence", m.prev.to_string());
    h
}

/// What the publisher knows of its messages.
#[derive(Debug, Default)]
struct Acks {
    /// Every message up to here is held at its position.
    held: u64,
    /// The first failure: every wait from then on reports it.
    failed: Option<String>,
}

/// An owner's publisher to its partition's stream (`amberdb::cluster::Publisher`).
#[derive(Debug)]
pub struct JetStreamPublisher {
    queue: tokio::sync::mpsc::UnboundedSender<Outgoing>,
    acks: Arc<(Mutex<Acks>, Condvar)>,
}

impl JetStreamPublisher {
    /// Starts the publisher of partition `partition` (whose store is `store`) on `runtime`:
    /// one task sends messages in order, another awaits their acknowledgements in order.
    /// `held` is the position the stream holds when the owner begins (its claim's).
    #[must_use]
    pub fn start(
        runtime: &tokio::runtime::Handle,
        js: jetstream::Context,
        partition: u32,
        store: StoreId,
        held: u64,
    ) -> Arc<JetStreamPublisher> {
        let (queue, mut outgoing) = tokio::sync::mpsc::unbounded_channel::<Outgoing>();
        let (sent, mut unacked) = tokio::sync::mpsc::channel(WINDOW);
        let acks = Arc::new((Mutex::new(Acks { held, failed: None }), Condvar::new()));
        let fail = {
            let acks = Arc::clone(&acks);
            move |why: String| {
                let (state, cond) = &*acks;
                state.lock().failed.get_or_insert(why);
                cond.notify_all();
            }
        };
        let fail_send = fail.clone();
        let subject = subject(partition);
        runtime.spawn(async move {
            while let Some(m) = outgoing.recv().await {
                let h = headers(store, &m);
                match js
                    .publish_with_headers(subject.clone(), h, m.body.into())
                    .await
                {
                    Ok(ack) => {
                        if sent.send((m.position, ack)).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        fail_send(format!("publishing position {}: {e}", m.position));
                        return;
                    }
                }
            }
        });
        let acker = Arc::clone(&acks);
        runtime.spawn(async move {
            while let Some((position, ack)) = unacked.recv().await {
                match tokio::time::timeout(ACK_LIMIT, ack).await {
                    Ok(Ok(ack)) if ack.sequence == position => {
                        let (state, cond) = &*acker;
                        let mut s = state.lock();
                        s.held = s.held.max(position);
                        cond.notify_all();
                    }
                    Ok(Ok(ack)) => {
                        fail(format!(
                            "the message for position {position} landed at {}{}",
                            ack.sequence,
                            if ack.duplicate { " (a duplicate)" } else { "" }
                        ));
                        return;
                    }
                    Ok(Err(e)) => {
                        fail(format!("position {position} not acknowledged: {e}"));
                        return;
                    }
                    Err(_) => {
                        fail(format!(
                            "no acknowledgement for position {position} within {} s",
                            ACK_LIMIT.as_secs()
                        ));
                        return;
                    }
                }
            }
        });
        Arc::new(JetStreamPublisher { queue, acks })
    }

    /// The highest position JetStream acknowledged at the position it was published for,
    /// every one before it too (the claim's position at the start).
    #[must_use]
    pub fn acknowledged(&self) -> u64 {
        self.acks.0.lock().held
    }
}

impl Publisher for JetStreamPublisher {
    fn publish(&self, message: Outgoing) {
        let position = message.position;
        if self.queue.send(message).is_err() {
            let (state, cond) = &*self.acks;
            state
                .lock()
                .failed
                .get_or_insert_with(|| format!("the publisher stopped before position {position}"));
            cond.notify_all();
        }
    }

    fn wait(&self, position: u64) -> Result<(), String> {
        let (state, cond) = &*self.acks;
        let deadline = Instant::now() + ACK_LIMIT;
        let mut s = state.lock();
        loop {
            if let Some(why) = &s.failed {
                return Err(why.clone());
            }
            if s.held >= position {
                return Ok(());
            }
            if cond.wait_until(&mut s, deadline).timed_out() {
                return Err(format!(
                    "the stream did not hold position {position} within {} s",
                    ACK_LIMIT.as_secs()
                ));
            }
        }
    }
}

/// A stream message as the store's replica path takes it. A message without valid amberdb
/// headers is no publisher's: it is judged as a chunk no publisher writes (`Skip`), without
/// reading its body.
fn judged_as<'b>(position: u64, headers: Option<&HeaderMap>, body: &'b [u8]) -> StreamMessage<'b> {
    let number = |name: &str| -> Option<u64> { headers?.get(name)?.as_str().parse().ok() };
    let chunk = match headers.and_then(|h| h.get("Amberdb-Chunk")) {
        None => Ok(None),
        Some(v) => v
            .as_str()
            .split_once('/')
            .and_then(|(i, n)| Some((i.parse().ok()?, n.parse().ok()?)))
            .map(Some)
            .ok_or(()),
    };
    // Absent: a publisher that sends none (an older build); present, it must parse.
    let crc = match headers.and_then(|h| h.get("Amberdb-Crc")) {
        None => Ok(None),
        Some(v) => u32::from_str_radix(v.as_str(), 16)
            .ok()
            .filter(|_| v.as_str().len() == 8 && v.as_str().bytes().all(|b| b.is_ascii_hexdigit()))
            .map(Some)
            .ok_or(()),
    };
    match (number("Amberdb-Epoch"), number("Amberdb-Prev"), chunk, crc) {
        (Some(epoch), Some(prev), Ok(chunk), Ok(crc)) => StreamMessage {
            position,
            epoch,
            prev,
            chunk,
            crc,
            body,
        },
        _ => StreamMessage {
            position,
            epoch: 0,
            prev: 0,
            chunk: Some((0, 0)),
            crc: None,
            body,
        },
    }
}

/// The context of the error [`publish_claim`] returns when the stream's leader refused the
/// claim (its last position was not the one this node saw: another publish came first).
pub const CLAIM_REFUSED: &str = "a claim refused";

/// Publishes the claim of `epoch` by `node` for the position after the store's last
/// (`docs/cluster.md`, "Ownership", step 3). Returns its position once JetStream holds it
/// there; the claim counts once the tail applies it.
///
/// # Errors
/// `ClaimLost` if another message took the position; the store's or JetStream's refusal.
pub async fn publish_claim(
    js: &jetstream::Context,
    partition: u32,
    store: &Store,
    epoch: u64,
    node: &str,
    store_id: StoreId,
) -> Result<u64, StreamError> {
    let claim = store.claim_message(epoch, node)?;
    let position = claim.position;
    let ack = js
        .publish_with_headers(
            subject(partition),
            headers(store_id, &claim),
            claim.body.into(),
        )
        .await
        .map_err(|e| nats("publishing a claim")(e.to_string()))?
        .await;
    match ack {
        Ok(ack) if ack.sequence == position => Ok(position),
        Ok(ack) => Err(StreamError::ClaimLost {
            expected: position,
            landed: ack.sequence,
        }),
        // The leader refused it: the stream's last position is not the one this node saw.
        Err(e) => Err(nats(CLAIM_REFUSED)(e.to_string())),
    }
}

/// The stream's messages from position `start` on, in order, through an ordered consumer
/// (ephemeral, read only: what a replica's tail and `amberdb cluster repair` read).
/// Its making is given up after [`CONSUMER_LIMIT`].
async fn messages_from(
    stream: &stream::Stream,
    start: u64,
) -> Result<consumer::pull::Ordered, StreamError> {
    within(
        CONSUMER_LIMIT,
        "creating an ordered consumer",
        stream.create_consumer(consumer::pull::OrderedConfig {
            deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                start_sequence: start,
            },
            ..Default::default()
        }),
    )
    .await?
    .messages()
    .await
    .map_err(|e| nats("reading the stream")(e.to_string()))
}

/// A message an ordered consumer delivered, and its position in the stream.
fn positioned<E: std::fmt::Display>(
    message: Result<jetstream::Message, E>,
) -> Result<(jetstream::Message, u64), StreamError> {
    let message = message.map_err(|e| nats("reading the stream")(e.to_string()))?;
    let sequence = message
        .info()
        .map_err(|e| nats("a message's position")(e.to_string()))?
        .stream_sequence;
    Ok((message, sequence))
}

/// How long `follow` waits for the next message of a stream followed to a position it
/// reported before it gives up (`StreamError::Stalled`): a stream delivers a message it holds
/// in milliseconds, so seconds without one mean it cannot.
pub const FOLLOW_STALL: Duration = Duration::from_secs(5);

/// Applies the stream to the store from its next position until the store has applied
/// `until` (or, with `None`, for as long as the stream delivers). Returns the last position
/// applied.
///
/// # Errors
/// The store's refusal (a halted partition: `Halted`) or JetStream's; `Stalled` when the
/// stream stops delivering before `until`.
pub async fn follow(
    store: &Store,
    stream: &stream::Stream,
    until: Option<u64>,
) -> Result<u64, StreamError> {
    let mut position = store.partition_log().position;
    if until.is_some_and(|u| position >= u) {
        return Ok(position);
    }
    // A few messages behind (a standby's catch-up before its claim, the claim itself): read
    // one by one from the stream's leader, which needs no consumer (docs/cluster.md, "What a
    // host cut waits for"). Anything the reads cannot give is left to the consumer below.
    if let Some(until) = until.filter(|u| u - position <= GET_AT_MOST) {
        while position < until {
            let Ok(there) =
                bounded("reading a message", stream.get_raw_message(position + 1)).await
            else {
                break;
            };
            apply_one(
                store,
                stream,
                position + 1,
                Some(&there.headers),
                &there.payload,
            )
            .await?;
            position += 1;
        }
        if position >= until {
            return Ok(position);
        }
    }
    let mut messages = messages_from(stream, position + 1).await?;
    loop {
        // Followed to a known position, the stream must keep delivering; followed without
        // one (a standby's tail), it may be quiet for as long as no one writes.
        let next = match until {
            Some(until) => tokio::time::timeout(FOLLOW_STALL, messages.next())
                .await
                .map_err(|_| StreamError::Stalled { position, until })?,
            None => messages.next().await,
        };
        let Some(message) = next else {
            break;
        };
        let (message, sequence) = positioned(message)?;
        // An ordered consumer that resets itself (a missed heartbeat, a reconnect) may
        // deliver again from before where it began: a position the store holds is the same
        // message of the same stream, applied already.
        let held = store.partition_log().position;
        if sequence <= held {
            continue;
        }
        if sequence > held + 1 {
            return Err(StreamError::Trimmed {
                needed: held + 1,
                first: sequence,
            });
        }
        apply_one(
            store,
            stream,
            sequence,
            message.headers.as_ref(),
            &message.payload,
        )
        .await?;
        position = sequence;
        if until.is_some_and(|u| position >= u) {
            break;
        }
    }
    Ok(position)
}

/// How many messages behind `follow` reads one by one instead of through a consumer.
const GET_AT_MOST: u64 = 64;

/// Applies the stream's message at `sequence`, the store's next position.
async fn apply_one(
    store: &Store,
    stream: &stream::Stream,
    sequence: u64,
    headers: Option<&HeaderMap>,
    payload: &[u8],
) -> Result<(), StreamError> {
    let m = judged_as(sequence, headers, payload);
    let applied: Applied = match store.apply_replicated(&m) {
        Ok(applied) => applied,
        // A message that counts, from a publisher whose history up to it is not this
        // store's: the stream's history is the partition's, so this store is made again
        // from it (the store halted before writing anything of the message).
        Err(amberdb::EngineError::Kernel(amberdb::KernelError::Halted { position, reason }))
            if reason == amberdb::cluster::HISTORY_DIFFERS =>
        {
            return Err(StreamError::Diverged {
                position,
                epoch: m.epoch,
            });
        }
        Err(e) => return Err(e.into()),
    };
    tracing::trace!(position = sequence, ?applied, "applied");
    if applied == Applied::Skip(amberdb::cluster::SkipReason::Epoch) {
        diverged_before(store, stream, &m).await?;
    }
    Ok(())
}

/// Calls `on_frame(position, frame)` for every frame partition's stream holds from position
/// `from` through `to`, in order, each at the position of the message that completes it: a
/// message that is one whole frame, or the last chunk of a group whose other chunks are the
/// messages just before it (one epoch, in order). A message that completes no frame (a chunk
/// of a group left incomplete, a message without amberdb headers) holds none. Whether a frame
/// counted is not judged here: `amberdb cluster repair` compares these bytes with a set-aside
/// store's log, where a frame that counted is the message's body. Streams: no more than one
/// frame is held at a time.
///
/// # Errors
/// JetStream's refusal, or `Stalled` when the stream stops delivering before `to`.
pub async fn for_each_frame(
    stream: &stream::Stream,
    from: u64,
    to: u64,
    mut on_frame: impl FnMut(u64, &[u8]),
) -> Result<(), StreamError> {
    if from > to {
        return Ok(());
    }
    // A group that completes at `from` began up to `MAX_CHUNKS - 1` messages before it.
    let start = from
        .saturating_sub(u64::from(amberdb::cluster::MAX_CHUNKS) - 1)
        .max(1);
    let mut messages = messages_from(stream, start).await?;
    // The open group: (position, epoch, index, count) of each chunk held, and their bytes.
    let mut group: Vec<(u64, u64, u32, u32)> = Vec::new();
    let mut bytes: Vec<u8> = Vec::new();
    let mut position = start.saturating_sub(1);
    while position < to {
        let next = tokio::time::timeout(FOLLOW_STALL, messages.next())
            .await
            .map_err(|_| StreamError::Stalled {
                position,
                until: to,
            })?;
        let Some(message) = next else {
            break;
        };
        let (message, sequence) = positioned(message)?;
        if sequence <= position {
            continue;
        }
        position = sequence;
        let m = judged_as(sequence, message.headers.as_ref(), &message.payload);
        match m.chunk {
            None => {
                group.clear();
                if sequence >= from {
                    on_frame(sequence, m.body);
                }
            }
            Some((i, n)) if i >= 1 && i <= n => {
                let follows = group.last().is_some_and(|&(p, e, j, c)| {
                    p + 1 == sequence && e == m.epoch && j + 1 == i && c == n
                });
                if i == 1 || !follows {
                    group.clear();
                    bytes.clear();
                }
                if i == 1 || follows {
                    group.push((sequence, m.epoch, i, n));
                    bytes.extend_from_slice(m.body);
                }
                if i == n && group.len() == n as usize {
                    if sequence >= from {
                        on_frame(sequence, &bytes);
                    }
                    group.clear();
                    bytes.clear();
                }
            }
            Some(_) => {
                group.clear();
                bytes.clear();
            }
        }
    }
    Ok(())
}

/// Whether the stream's message at `position` carries whole the frame whose stored checksum
/// is `crc` (a replica's last frame, `Store::last_frame_crc`): `Some(false)` when the
/// stream holds another message there (the replica's history is not the stream's), `None` when
/// it cannot say (the message is a chunk, or the stream cannot give it).
pub async fn holds_frame(stream: &stream::Stream, position: u64, crc: u32) -> Option<bool> {
    let there = stream.get_raw_message(position).await.ok()?;
    let m = judged_as(position, Some(&there.headers), &there.payload);
    if m.chunk.is_some() {
        return None;
    }
    Some(amberdb::cluster::frame_crc(m.body) == Some(crc))
}

/// How far back `diverged_before` walks an epoch's run to its claim.
const DIVERGENCE_WALK: u64 = 4_096;

/// A message of an epoch above every claim this store applied, after positions this store
/// passed: the stream's messages before it are walked back while they are that epoch's run
/// (its epoch, each in place), to its claim. A claim of that epoch in place there counts in
/// the stream's history, and this store, which passed it with a lower epoch, did not apply
/// it: its history is not the stream's (`StreamError::Diverged`). A rogue cannot make a
/// healthy replica say so: a claim in place at a position it passed would have counted there.
/// Costs one read for a message whose previous position is not of its epoch (a rogue's).
async fn diverged_before(
    store: &Store,
    stream: &stream::Stream,
    m: &StreamMessage<'_>,
) -> Result<(), StreamError> {
    let epoch = store.partition_log().claim.map_or(0, |c| c.epoch);
    if m.epoch <= epoch || m.prev >= m.position {
        return Ok(());
    }
    let mut q = m.prev;
    while q > 0 && m.prev - q < DIVERGENCE_WALK {
        // A position trimmed away or a refusal: nothing to compare with.
        let Ok(there) = stream.get_raw_message(q).await else {
            return Ok(());
        };
        let before = judged_as(q, Some(&there.headers), &there.payload);
        if before.claim_in_place() == Some(m.epoch) {
            return Err(StreamError::Diverged {
                position: q,
                epoch: m.epoch,
            });
        }
        if before.epoch != m.epoch || before.prev + 1 != q {
            return Ok(());
        }
        q -= 1;
    }
    Ok(())
}

/// The stream's first position (1 until it is trimmed; one past the last when empty).
///
/// # Errors
/// JetStream's refusal.
pub async fn first_position(stream: &stream::Stream) -> Result<u64, StreamError> {
    Ok(stream
        .get_info()
        .await
        .map_err(|e| nats("reading the stream's state")(e.to_string()))?
        .state
        .first_sequence)
}

/// Removes the stream's messages below position `keep_from`. Returns how many went.
///
/// # Errors
/// JetStream's refusal (a stream made with `deny_purge`).
pub async fn trim(stream: &stream::Stream, keep_from: u64) -> Result<u64, StreamError> {
    let purged = stream
        .purge()
        .sequence(keep_from)
        .await
        .map_err(|e| nats("trimming the stream")(e.to_string()))?;
    Ok(purged.purged)
}

/// How often at most a node asks for a stream's leadership to move.
pub const LEADER_CHANGE_EVERY: Duration = Duration::from_secs(10);

/// Asks JetStream to move partition `p`'s stream leadership to another server, at most once
/// per [`LEADER_CHANGE_EVERY`] per partition in this process: the answer to a leader whose
/// copy lacks what the others hold (Jepsen's minority `.blk` damage made leader;
/// `docs/cluster.md`, "When the stream loses what it acknowledged").
pub async fn ask_leader_change(js: &jetstream::Context, p: u32, why: &str) {
    static ASKED: std::sync::Mutex<Vec<(u32, std::time::Instant)>> =
        std::sync::Mutex::new(Vec::new());
    {
        let mut asked = ASKED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        asked.retain(|(_, at)| at.elapsed() < LEADER_CHANGE_EVERY);
        if asked.iter().any(|(q, _)| *q == p) {
            return;
        }
        asked.push((p, std::time::Instant::now()));
    }
    tracing::warn!(
        partition = p,
        why,
        "asking JetStream for another leader of the stream"
    );
    let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{}", stream_name(p));
    if let Err(e) = tokio::time::timeout(
        Duration::from_secs(5),
        js.client().request(subject, "".into()),
    )
    .await
    {
        tracing::warn!(partition = p, error = %e, "the stream's leader change went unanswered");
    }
}

/// The stream's last position.
///
/// # Errors
/// JetStream's refusal.
pub async fn last_position(stream: &stream::Stream) -> Result<u64, StreamError> {
    Ok(bounded("reading the stream's state", stream.get_info())
        .await?
        .state
        .last_sequence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_made_otherwise_is_refused_naming_the_field() {
        let ours = stream_config(3, 3);
        assert_eq!(unkept_promise(&ours, 3, 3), None);
        // As the server reports limits it was not given: -1.
        let reported = stream::Config {
            max_messages: -1,
            max_bytes: -1,
            max_messages_per_subject: -1,
            ..ours.clone()
        };
        assert_eq!(unkept_promise(&reported, 3, 3), None);
        let field = |c: stream::Config| unkept_promise(&c, 3, 3).map(|(f, _, _)| f);
        let cases: Vec<(stream::Config, &str)> = vec![
            (stream_config(4, 3), "subjects"),
            (
                stream::Config {
                    storage: stream::StorageType::Memory,
                    ..ours.clone()
                },
                "storage",
            ),
            (stream_config(3, 1), "num_replicas"),
            (
                stream::Config {
                    retention: stream::RetentionPolicy::WorkQueue,
                    ..ours.clone()
                },
                "retention",
            ),
            (
                stream::Config {
                    max_messages: 1000,
                    ..ours.clone()
                },
                "max_messages",
            ),
            (
                stream::Config {
                    max_bytes: 1 << 30,
                    ..ours.clone()
                },
                "max_bytes",
            ),
            (
                stream::Config {
                    max_messages_per_subject: 1,
                    ..ours.clone()
                },
                "max_messages_per_subject",
            ),
            (
                stream::Config {
                    max_age: Duration::from_secs(3600),
                    ..ours.clone()
                },
                "max_age",
            ),
            (
                stream::Config {
                    duplicate_window: Duration::from_secs(120),
                    ..ours.clone()
                },
                "duplicate_window",
            ),
            (
                stream::Config {
                    max_message_size: 1 << 20,
                    ..ours.clone()
                },
                "max_message_size",
            ),
            (
                stream::Config {
                    deny_delete: false,
                    ..ours.clone()
                },
                "deny_delete",
            ),
            (
                stream::Config {
                    allow_rollup: true,
                    ..ours.clone()
                },
                "allow_rollup",
            ),
            (
                stream::Config {
                    no_ack: true,
                    ..ours.clone()
                },
                "no_ack",
            ),
            (
                stream::Config {
                    sources: Some(vec![stream::Source {
                        name: "OTHER".into(),
                        ..Default::default()
                    }]),
                    ..ours.clone()
                },
                "mirror or sources",
            ),
        ];
        for (config, expected) in cases {
            assert_eq!(field(config), Some(expected));
        }
    }

    #[test]
    fn a_message_without_amberdb_headers_is_judged_as_no_publishers_chunk() {
        let mut h = HeaderMap::new();
        h.insert("Amberdb-Epoch", "3");
        h.insert("Amberdb-Prev", "9");
        let m = judged_as(10, Some(&h), b"x");
        assert_eq!((m.epoch, m.prev, m.chunk, m.crc), (3, 9, None, None));
        h.insert("Amberdb-Crc", "0000abcd");
        assert_eq!(judged_as(10, Some(&h), b"x").crc, Some(0xabcd));
        for bad in ["abcd", "xyz00000", "0000abcd0", "+000abcd"] {
            h.insert("Amberdb-Crc", bad);
            assert_eq!(judged_as(10, Some(&h), b"x").chunk, Some((0, 0)), "{bad}");
        }
        h.insert("Amberdb-Crc", "0000abcd");
        h.insert("Amberdb-Chunk", "2/4");
        assert_eq!(judged_as(10, Some(&h), b"x").chunk, Some((2, 4)));
        for bad in ["2", "a/b", "2/"] {
            h.insert("Amberdb-Chunk", bad);
            assert_eq!(judged_as(10, Some(&h), b"x").chunk, Some((0, 0)), "{bad}");
        }
        assert_eq!(judged_as(10, None, b"x").chunk, Some((0, 0)));
        let mut h = HeaderMap::new();
        h.insert("Amberdb-Epoch", "not a number");
        h.insert("Amberdb-Prev", "9");
        assert_eq!(judged_as(10, Some(&h), b"x").epoch, 0);
    }

    #[test]
    fn every_message_names_its_epoch_place_and_attempt() {
        let id = StoreId([1; 16]);
        let h = headers(
            id,
            &Outgoing {
                position: 12,
                epoch: 4,
                prev: 11,
                chunk: Some((1, 2)),
                crc: Some(0xdead_beef),
                body: Vec::new(),
            },
        );
        let get = |k: &str| h.get(k).map(|v| v.as_str().to_owned());
        assert_eq!(get("Amberdb-Epoch").as_deref(), Some("4"));
        assert_eq!(get("Amberdb-Prev").as_deref(), Some("11"));
        assert_eq!(get("Amberdb-Chunk").as_deref(), Some("1/2"));
        assert_eq!(get("Amberdb-Crc").as_deref(), Some("deadbeef"));
        assert_eq!(get("Nats-Expected-Last-Sequence").as_deref(), Some("11"));
        assert_eq!(get("Nats-Msg-Id"), Some(format!("{id}-4-12")));
    }
}
