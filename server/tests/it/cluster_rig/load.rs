//! The rig's load: four writers, each with its own routing client (`amberdb_server::client`,
//! every node a seed), send STORE, UPDATE, DELETE, PUT_ITEM and ADD_MESSAGES for their own
//! users, and one request in ten that must be refused (too long, an id that does not exist, a
//! value that is not an object, an unknown argument, a role that does not exist). Every
//! acknowledgement and every unknown outcome goes into the `Model`, which the checks hold the
//! nodes to. Writers can be paused (the checks read a quiet cluster) and stopped.

use super::super::kill::Rng;
use amberdb_server::client::{Client, ClientError};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Writers in the load.
pub(crate) const WRITERS: usize = 4;
/// Users per writer.
const USERS: usize = 6;
/// The word every request that must be refused carries, so no stored text may hold it.
pub(crate) const BAD: &str = "badreqmarker";
/// How long a writer's client keeps resending through a failover before it reports the
/// outcome unknown.
const FAILOVER_WAIT: Duration = Duration::from_secs(20);

/// What the clients were told.
#[derive(Default)]
pub(crate) struct Model {
    /// Memories and turns an acknowledged write left live: id → (user, content).
    pub(crate) live: BTreeMap<u64, (String, String)>,
    /// Ids an acknowledged DELETE or UPDATE ended: never live again.
    pub(crate) ended: BTreeSet<u64>,
    /// Ids a write of unknown outcome may have changed: held only to agreement between nodes.
    pub(crate) uncertain: BTreeSet<u64>,
    /// Every id an acknowledged write created, with its content (one id, one content).
    pub(crate) created: BTreeMap<u64, String>,
    /// Items: (user, key) → the acknowledged value, `None` once a put of unknown outcome
    /// followed it.
    pub(crate) items: BTreeMap<(String, String), Option<Value>>,
    /// When each write was acknowledged.
    pub(crate) acked_at: Vec<Instant>,
    pub(crate) acked: u64,
    pub(crate) unknown: u64,
    pub(crate) bad_refused: u64,
    /// Writes refused by a fault (`unavailable` after the failover wait, `busy`): counted with
    /// the unknown ones, since an ambiguous publish may still have landed.
    pub(crate) fault_refused: u64,
    /// Writes acknowledged by a retry that could quote no reply (`applied_at_seq`): applied,
    /// held to agreement only.
    pub(crate) applied_unquoted: u64,
    pub(crate) violations: Vec<String>,
}

impl Model {
    /// An acknowledged write created `id` with `content` for `user`.
    fn created(&mut self, id: u64, user: &str, content: &str) {
        if let Some(before) = self.created.insert(id, content.to_owned())
            && before != content
        {
            self.violations.push(format!(
                "memory {id} acknowledged twice: {before:?} and {content:?}"
            ));
        }
        self.live.insert(id, (user.to_owned(), content.to_owned()));
    }

    /// Every user the writers use.
    pub(crate) fn users() -> Vec<String> {
        (0..WRITERS)
            .flat_map(|w| (0..USERS).map(move |u| user(w, u)))
            .collect()
    }
}

fn user(w: usize, u: usize) -> String {
    format!("w{w}-u{u}")
}

struct Gate {
    paused: bool,
    busy: usize,
}

struct Shared {
    model: Mutex<Model>,
    gate: Mutex<Gate>,
    changed: Condvar,
    stop: AtomicBool,
}

/// The running writers.
pub(crate) struct Load {
    shared: Arc<Shared>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    /// Starts the writers against `seeds`, seeded with `seed` (each writer its own stream).
    pub(crate) fn start(seeds: &[String], token: &str, seed: u64) -> Load {
        let shared = Arc::new(Shared {
            model: Mutex::new(Model::default()),
            gate: Mutex::new(Gate {
                paused: false,
                busy: 0,
            }),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let handles = (0..WRITERS)
            .map(|w| {
                let (shared, seeds, token) = (shared.clone(), seeds.to_vec(), token.to_owned());
                std::thread::spawn(move || {
                    Writer::new(
                        w,
                        seed ^ (w as u64 + 1).wrapping_mul(0x9E37),
                        &seeds,
                        &token,
                    )
                    .run(&shared);
                })
            })
            .collect();
        Load { shared, handles }
    }

    /// Stops new operations and waits until none is in flight.
    pub(crate) fn pause(&self) {
        let mut g = self.shared.gate.lock().unwrap();
        g.paused = true;
        while g.busy > 0 {
            g = self.shared.changed.wait(g).unwrap();
        }
    }

    /// Lets the writers go on.
    pub(crate) fn resume(&self) {
        self.shared.gate.lock().unwrap().paused = false;
        self.shared.changed.notify_all();
    }

    /// The model as it stands.
    pub(crate) fn model(&self) -> MutexGuard<'_, Model> {
        self.shared.model.lock().unwrap()
    }

    /// Stops the writers and waits for them.
    pub(crate) fn stop(self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.resume();
        for h in self.handles {
            h.join().expect("a writer panicked");
        }
    }
}

/// One writer: its client, its random stream, and the ids it may update or delete.
struct Writer {
    w: usize,
    rng: Rng,
    client: Option<Client>,
    seeds: Vec<String>,
    token: String,
    /// Acknowledged live memories of this writer's users: (id, user).
    mine: Vec<(u64, String)>,
    n: u64,
}

/// How one write ended.
enum Ended {
    Acked(Value),
    /// Refused with a code that says nothing ran (`invalid`, `not_found`, ...).
    Refused(String),
    /// Unknown, or refused by a fault (it may have run).
    Uncertain,
    /// No node could be reached: nothing was sent.
    NotSent,
}

impl Writer {
    fn new(w: usize, seed: u64, seeds: &[String], token: &str) -> Writer {
        Writer {
            w,
            rng: Rng(seed),
            client: None,
            seeds: seeds.to_vec(),
            token: token.to_owned(),
            mine: Vec::new(),
            n: 0,
        }
    }

    fn run(&mut self, shared: &Shared) {
        loop {
            {
                let mut g = shared.gate.lock().unwrap();
                while g.paused && !shared.stop.load(Ordering::SeqCst) {
                    g = shared.changed.wait(g).unwrap();
                }
                if shared.stop.load(Ordering::SeqCst) {
                    return;
                }
                g.busy += 1;
            }
            let one = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.one(shared)));
            shared
                .gate
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .busy -= 1;
            shared.changed.notify_all();
            if let Err(panic) = one {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()));
                let mut m = shared
                    .model
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                m.violations
                    .push(format!("writer {} panicked: {what:?}", self.w));
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn words(&mut self, n: usize) -> String {
        self.n += 1;
        let mut out = format!("w{}x{}", self.w, self.n);
        for _ in 0..n {
            out.push(' ');
            let len = 4 + self.rng.next() % 5;
            for _ in 0..len {
                out.push(char::from(b'a' + (self.rng.next() % 26) as u8));
            }
        }
        out
    }

    /// Sends one write and says how it ended.
    fn send(&mut self, command: &str, args: &Value, shared: &Shared) -> Ended {
        if self.client.is_none() {
            match Client::connect(&self.seeds, Some(&self.token), Some(Duration::from_secs(5))) {
                Ok(mut c) => {
                    c.set_failover_wait(FAILOVER_WAIT);
                    self.client = Some(c);
                }
                // Every node unreachable (a cut, two NATS servers down): nothing was sent.
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(200));
                    return Ended::NotSent;
                }
            }
        }
        let client = self.client.as_mut().unwrap();
        match client.call(command, args) {
            // A retry of a write whose first attempt was applied but whose reply the server
            // could not keep (it stopped in between): applied, with no id to check by
            // (docs/semantics.md, "Retries and request ids").
            Ok(reply) if reply.contains_key("applied_at_seq") => {
                let mut m = shared.model.lock().unwrap();
                m.acked += 1;
                m.acked_at.push(Instant::now());
                m.applied_unquoted += 1;
                Ended::Uncertain
            }
            Ok(reply) => {
                let mut m = shared.model.lock().unwrap();
                m.acked += 1;
                m.acked_at.push(Instant::now());
                Ended::Acked(Value::Object(reply))
            }
            Err(ClientError::Refused { code, .. })
                if matches!(
                    code.as_str(),
                    "invalid" | "not_found" | "limit_exceeded" | "already_exists"
                ) =>
            {
                Ended::Refused(code)
            }
            Err(ClientError::Refused { .. }) => {
                shared.model.lock().unwrap().fault_refused += 1;
                Ended::Uncertain
            }
            Err(ClientError::Request(e)) => {
                (shared.model.lock().unwrap().violations)
                    .push(format!("{command}: the client refused the request: {e}"));
                Ended::Refused("request".into())
            }
            Err(_) => {
                shared.model.lock().unwrap().unknown += 1;
                self.client = None;
                Ended::Uncertain
            }
        }
    }

    fn one(&mut self, shared: &Shared) {
        let u = (self.rng.next() % USERS as u64) as usize;
        let who = user(self.w, u);
        match self.rng.next() % 100 {
            0..=9 => self.bad(&who, shared),
            10..=49 => self.store(&who, shared),
            50..=64 => self.update(&who, shared),
            65..=74 => self.delete(&who, shared),
            75..=89 => self.put_item(&who, shared),
            _ => self.add_messages(&who, shared),
        }
    }

    fn store(&mut self, who: &str, shared: &Shared) {
        let content = self.words(10);
        let args = json!({"user_id": who, "content": content});
        if let Ended::Acked(r) = self.send("STORE", &args, shared) {
            let mut m = shared.model.lock().unwrap();
            match (r["memory_id"].as_u64(), r["outcome"].as_str()) {
                (Some(id), Some("stored")) => {
                    m.created(id, who, &content);
                    self.mine.push((id, who.to_owned()));
                }
                _ => m
                    .violations
                    .push(format!("STORE of unrelated words answered {r}")),
            }
        }
    }

    fn update(&mut self, who: &str, shared: &Shared) {
        let Some(at) = self.pick(who) else {
            return self.store(who, shared);
        };
        let (id, _) = self.mine.swap_remove(at);
        let content = self.words(10);
        let args = json!({"memory_id": id, "content": content});
        let ended = self.send("UPDATE", &args, shared);
        let mut m = shared.model.lock().unwrap();
        match ended {
            Ended::Acked(r) => {
                m.live.remove(&id);
                m.ended.insert(id);
                match r["memory_id"].as_u64() {
                    Some(new) => {
                        m.created(new, who, &content);
                        self.mine.push((new, who.to_owned()));
                    }
                    None => m.violations.push(format!("UPDATE of {id} answered {r}")),
                }
            }
            Ended::Refused(code) => m
                .violations
                .push(format!("UPDATE of live memory {id} refused: {code}")),
            Ended::Uncertain => {
                m.uncertain.insert(id);
            }
            Ended::NotSent => self.mine.push((id, who.to_owned())),
        }
    }

    fn delete(&mut self, who: &str, shared: &Shared) {
        let Some(at) = self.pick(who) else {
            return self.store(who, shared);
        };
        let (id, _) = self.mine.swap_remove(at);
        let ended = self.send("DELETE", &json!({"memory_id": id}), shared);
        let mut m = shared.model.lock().unwrap();
        match ended {
            Ended::Acked(_) => {
                m.live.remove(&id);
                m.ended.insert(id);
            }
            Ended::Refused(code) => m
                .violations
                .push(format!("DELETE of live memory {id} refused: {code}")),
            Ended::Uncertain => {
                m.uncertain.insert(id);
            }
            Ended::NotSent => self.mine.push((id, who.to_owned())),
        }
    }

    fn put_item(&mut self, who: &str, shared: &Shared) {
        let key = format!("k{}", self.rng.next() % 4);
        let value = json!({"writer": self.w, "n": self.n});
        let text = self.words(6);
        let args = json!({"user_id": who, "key": key, "value": value, "text": text});
        let ended = self.send("PUT_ITEM", &args, shared);
        let mut m = shared.model.lock().unwrap();
        let slot = (who.to_owned(), key);
        match ended {
            Ended::Acked(_) => {
                m.items.insert(slot, Some(value));
            }
            Ended::Refused(code) => m.violations.push(format!("PUT_ITEM refused: {code}")),
            Ended::Uncertain => {
                m.items.insert(slot, None);
            }
            Ended::NotSent => {}
        }
    }

    fn add_messages(&mut self, who: &str, shared: &Shared) {
        let turns: Vec<String> = (0..1 + self.rng.next() % 3)
            .map(|_| self.words(8))
            .collect();
        let session = format!("s{}", self.rng.next() % 2);
        let messages: Vec<Value> = (turns.iter().enumerate())
            .map(|(i, t)| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": t}))
            .collect();
        let args = json!({"user_id": who, "session_id": session, "messages": messages});
        let ended = self.send("ADD_MESSAGES", &args, shared);
        let mut m = shared.model.lock().unwrap();
        match ended {
            Ended::Acked(r) => {
                let ids: Vec<u64> = r["memory_ids"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_u64)
                    .collect();
                if ids.len() != turns.len() {
                    m.violations.push(format!(
                        "ADD_MESSAGES stored {} of {} new turns: {r}",
                        ids.len(),
                        turns.len()
                    ));
                }
                for (id, t) in ids.iter().zip(&turns) {
                    m.created(*id, who, t);
                }
            }
            Ended::Refused(code) => m.violations.push(format!("ADD_MESSAGES refused: {code}")),
            Ended::Uncertain | Ended::NotSent => {}
        }
    }

    /// A request that must be refused, and changes nothing.
    fn bad(&mut self, who: &str, shared: &Shared) {
        let p = amberdb::cluster::partition_of_user(who, super::PARTITIONS);
        let missing = (u64::from(p) << 40) | (1 << 39);
        let (command, args) = match self.rng.next() % 5 {
            0 => (
                "STORE",
                json!({"user_id": who, "content": format!("{BAD} {}", "x".repeat(10_001))}),
            ),
            1 => (
                "UPDATE",
                json!({"memory_id": missing, "content": format!("{BAD} update")}),
            ),
            2 => (
                "PUT_ITEM",
                json!({"user_id": who, "key": "bad", "value": format!("{BAD} not an object"), "text": BAD}),
            ),
            3 => (
                "STORE",
                json!({"user_id": who, "content": format!("{BAD} colour"), "colour": "red"}),
            ),
            _ => (
                "ADD_MESSAGES",
                json!({"user_id": who, "session_id": "s0", "messages": [{"role": "narrator", "content": BAD}]}),
            ),
        };
        let ended = self.send(command, &args, shared);
        let mut m = shared.model.lock().unwrap();
        match ended {
            Ended::Acked(r) => m
                .violations
                .push(format!("a bad {command} was acknowledged: {r:?}")),
            Ended::Refused(_) => m.bad_refused += 1,
            Ended::Uncertain | Ended::NotSent => {}
        }
    }

    /// One of `who`'s acknowledged live memories.
    fn pick(&mut self, who: &str) -> Option<usize> {
        let of: Vec<usize> = (0..self.mine.len())
            .filter(|&i| self.mine[i].1 == who)
            .collect();
        (!of.is_empty()).then(|| of[(self.rng.next() % of.len() as u64) as usize])
    }
}
