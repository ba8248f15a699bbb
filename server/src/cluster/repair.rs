//! `amberdb cluster repair` (`docs/cluster.md`, "`amberdb cluster repair`"): what a store set
//! aside holds that its partition's stream lost, found by comparing its log with the stream,
//! reported with a decision for each lost write, and with `--apply` written back through the
//! partition's owner.
//!
//! Guarantees: the set-aside store is only read (`amberdb::cluster::logged_frames`), never
//! opened, changed or removed; arguments, the directory's name and its store id are checked
//! before its log or the stream is read; a dry run changes nothing anywhere; `--apply` writes
//! only through the owner, as a client would (IMPORT of the lost records, which stores
//! nothing the partition holds already, then DELETE), so a run stopped part way and run
//! again restores nothing twice.

use super::{settings, stream};
use crate::client::{Client, ClientError};
use amberdb::cluster::{Effect, LoggedFrame, frame_effects, logged_frames, store_id_of};
use amberdb::{Entity, ExportedRecord, Memory, MemoryId};
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `amberdb cluster repair` is asked.
#[derive(Debug, Clone)]
pub struct Request {
    /// The node's data directory (the set-aside store is in it).
    pub data: PathBuf,
    /// The partition.
    pub partition: u32,
    /// The set-aside store's directory name, `p-<partition>.diverged-<ms>` (or `.behind-`,
    /// `.aside-`).
    pub from: String,
    /// `--apply`'s work directory (new, absolute: the owner reads the lost records from it);
    /// `None`: a report only.
    pub apply: Option<PathBuf>,
    /// The nodes' shared token, if they want one.
    pub token: Option<String>,
}

/// What repair decides for one effect of a lost frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Decision {
    /// A record or entity no replica holds: imported again.
    Restore,
    /// A delete of a memory of the common history the live history left alone: sent again.
    Apply,
    /// A delete of a memory the partition no longer holds: nothing to do.
    AlreadyGone,
    /// A change to a memory the live history changed since the fork: left to the operator.
    Conflict,
    /// A change repair does not send (docs/cluster.md, "`amberdb cluster repair`"): listed.
    Review,
    /// No client's write, or one undone by a later lost frame.
    NotApplicable,
}

/// One effect of a lost frame, and what repair does with it.
#[derive(Debug, Clone, Serialize)]
struct Entry {
    position: u64,
    effect: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
    decision: Decision,
    reason: String,
    /// With `--apply`: the restored record's id in the partition now.
    #[serde(skip_serializing_if = "Option::is_none")]
    id_now: Option<u64>,
    /// With `--apply`: what the owner answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<String>,
}

impl Entry {
    fn new(position: u64, effect: &'static str, decision: Decision, reason: String) -> Entry {
        Entry {
            position,
            effect,
            memory_id: None,
            user_id: None,
            content: None,
            decision,
            reason,
            id_now: None,
            result: None,
        }
    }

    fn of(mut self, id: MemoryId) -> Entry {
        self.memory_id = Some(id.0);
        self
    }
}

/// Where the set-aside store's log and the stream part.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fork {
    /// The last position whose frame both hold (`None`: none compared agreed).
    agreed: Option<u64>,
    /// The first position whose frame the stream does not hold (`None`: no fork).
    at: Option<u64>,
}

/// The name of a set-aside store of partition `p`: `p-<p>.diverged-<ms>` or `p-<p>.behind-<ms>`
/// (what a node names it, `node::Runner::set_aside`), or `p-<p>.aside-<ms>` (what
/// `amberdb cluster set-aside` names it, [`set_aside`]).
fn is_set_aside_name(name: &str, p: u32) -> bool {
    let Some(rest) = name.strip_prefix(&format!("p-{p}.")) else {
        return false;
    };
    let ms = ["diverged-", "behind-", "aside-"]
        .iter()
        .find_map(|why| rest.strip_prefix(why));
    ms.is_some_and(|ms| !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit()))
}

/// `amberdb cluster set-aside` (`docs/cluster.md`, "A partition no leader can serve"): moves
/// partition `partition`'s store in the stopped node's `data` aside as `p-<p>.aside-<ms>`, so
/// the node makes it again from the shipped checkpoint and the stream when it starts, and
/// `amberdb cluster repair` can write back what only it held. Checked first: the partition is
/// the cluster's, the directory holds its store (by store id), and no process holds the store
/// (a running node is refused). The store is renamed, never changed, and the rename is synced.
/// Returns the report (JSON).
///
/// # Errors
/// A refused argument or directory, a store a process holds, or the rename's failure (then the
/// store is where it was); a failed sync of the rename says the store was moved.
pub async fn set_aside(
    js: &async_nats::jetstream::Context,
    data: &Path,
    partition: u32,
) -> anyhow::Result<String> {
    let p = partition;
    let dir = data.join(format!("p-{p}"));
    partitions_store(js, p, &dir).await?;
    // The store's own lock (`LOCK`, R1): a running node holds it, and keeps holding it while
    // the directory is renamed here, so no node opens the store half moved.
    let lock_path = dir.join("LOCK");
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .open(&lock_path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", lock_path.display()))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "{}: a running process holds the store (stop the node first; nothing was moved)",
            dir.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => {
            anyhow::bail!("{}: {e}", lock_path.display())
        }
    }
    let name = format!("p-{p}.aside-{}", super::lease::now_ms());
    let aside = data.join(&name);
    anyhow::ensure!(!aside.exists(), "{}: it exists", aside.display());
    std::fs::rename(&dir, &aside)
        .map_err(|e| anyhow::anyhow!("moving {} aside: {e}", dir.display()))?;
    // The store is moved already: a failed sync says so, never that nothing changed.
    std::fs::File::open(data)
        .and_then(|d| d.sync_all())
        .map_err(|e| {
            anyhow::anyhow!(
                "{} was moved to {name}, but syncing {} failed ({e}): the move may not survive a \
                 power cut; check the directory before starting the node",
                dir.display(),
                data.display()
            )
        })?;
    drop(lock);
    tracing::warn!(partition = p, aside = %aside.display(), "a store set aside by the operator");
    Ok(serde_json::to_string_pretty(&json!({
        "partition": p,
        "set_aside": name,
        "next": format!(
            "start the node: it makes partition {p}'s store again from the shipped checkpoint \
             and the stream; then `amberdb cluster repair --data {} --partition {p} --from {name}` \
             lists what only this store held",
            data.display()
        ),
    }))? + "\n")
}

/// Compares the set-aside store's frames with the stream's (`stream_frames`, from position
/// `from` on): a `Skip` is the replica's own and is passed over; any other frame agrees when
/// the stream holds the same bytes at its position.
fn find_fork(frames: &[LoggedFrame], from: u64, stream_frames: &BTreeMap<u64, Vec<u8>>) -> Fork {
    let mut agreed = None;
    for f in frames.iter().filter(|f| f.position >= from && !f.is_skip()) {
        if stream_frames.get(&f.position) == Some(&f.bytes) {
            agreed = Some(f.position);
        } else {
            return Fork {
                agreed,
                at: Some(f.position),
            };
        }
    }
    Fork { agreed, at: None }
}

/// The memories the frame `bytes` of the live history changes (updates, tags, archive,
/// deletes, forgets): a lost change to one of them since the fork is a conflict. A message
/// that is no sound frame counted for no replica: none.
fn changed_ids(bytes: &[u8]) -> Vec<u64> {
    let mut ids = Vec::new();
    for effect in frame_effects(bytes).unwrap_or_default() {
        match effect {
            Effect::Updated { record } => ids.push(record.id.0),
            Effect::TagsSet { id, .. } | Effect::Archived { id } | Effect::Deleted { id } => {
                ids.push(id.0);
            }
            Effect::Forgotten { ids: gone } => ids.extend(gone.iter().map(|id| id.0)),
            _ => {}
        }
    }
    ids
}

/// Every memory the live history changed from position `from` on, of `changed` (the
/// memories each position's frame changes).
fn touched_since(changed: &BTreeMap<u64, Vec<u64>>, from: u64) -> BTreeSet<u64> {
    changed
        .range(from..)
        .flat_map(|(_, ids)| ids.iter().copied())
        .collect()
}

/// The lost frames' effects, each with its decision, and the records and entities to import.
#[derive(Debug, Default)]
struct Plan {
    entries: Vec<Entry>,
    /// The lost records as the lost frames left them, by id.
    records: BTreeMap<u64, ExportedRecord>,
    entities: Vec<Entity>,
    /// Every record a lost frame stored, and the entry that stored it (a later lost delete
    /// takes its restoration back).
    stored_by: BTreeMap<u64, usize>,
}

/// Decides every effect of the lost frames (`docs/cluster.md`, "`amberdb cluster repair`",
/// step 4), in order; `touched`: what the live history changed since the fork.
fn plan(lost: &[(u64, Vec<Effect>)], touched: &BTreeSet<u64>) -> Plan {
    let mut p = Plan::default();
    for (position, effects) in lost {
        for effect in effects {
            let entry = p.decide(*position, effect, touched);
            p.entries.push(entry);
        }
    }
    p
}

impl Plan {
    fn decide(&mut self, position: u64, effect: &Effect, touched: &BTreeSet<u64>) -> Entry {
        match effect {
            Effect::Stored { record, archived } => self.stored(position, record, *archived),
            Effect::Updated { record } => {
                let new = (**record).clone();
                self.changed(position, "updated", record.id, touched, |r| r.memory = new)
            }
            Effect::TagsSet { id, tags, at } => {
                self.changed(position, "tags set", *id, touched, |r| {
                    r.memory.tags.clone_from(tags);
                    r.memory.updated_at = *at;
                })
            }
            Effect::Archived { id } => {
                self.changed(position, "archived", *id, touched, |r| r.archived = true)
            }
            Effect::Deleted { id } => self.deleted(position, *id, touched),
            Effect::Forgotten { ids } => {
                for id in ids {
                    self.records.remove(&id.0);
                }
                Entry::new(
                    position,
                    "forgotten",
                    Decision::NotApplicable,
                    format!(
                        "archive retention forgot {} archived record(s): it does again on its \
                         own schedule",
                        ids.len()
                    ),
                )
            }
            Effect::EntityPut(entity) => {
                self.entities.push((**entity).clone());
                let mut e = Entry::new(
                    position,
                    "entity",
                    Decision::Restore,
                    format!(
                        "{:?} {:?} imported again (one the partition holds is kept)",
                        entity.kind, entity.id
                    ),
                );
                e.user_id = Some(entity.user_id.clone());
                e
            }
            Effect::EntityDeleted { kind, user_id, id } => {
                let mut e = Entry::new(
                    position,
                    "entity deleted",
                    Decision::Review,
                    format!(
                        "{kind:?} {id:?} deleted with everything of it: sent again now it would \
                         also delete what the live history stored for it since; apply it by hand"
                    ),
                );
                e.user_id = Some(user_id.clone());
                e
            }
            Effect::Touched { ids } => Entry::new(
                position,
                "read",
                Decision::NotApplicable,
                format!("{} read(s) counted as accesses", ids.len()),
            ),
            Effect::Internal(what) => Entry::new(
                position,
                "internal",
                Decision::NotApplicable,
                format!("{what}: no client's write"),
            ),
        }
    }

    /// A record no replica holds.
    fn stored(&mut self, position: u64, record: &Memory, archived: bool) -> Entry {
        self.stored_by.insert(record.id.0, self.entries.len());
        self.records.insert(
            record.id.0,
            ExportedRecord {
                memory: record.clone(),
                archived,
            },
        );
        let mut e = Entry::new(
            position,
            if archived {
                "stored archived"
            } else {
                "stored"
            },
            Decision::Restore,
            "a record no replica holds: imported again (its id kept if the partition never gave \
             it out, else a new one; one the partition holds already is not stored twice)"
                .into(),
        )
        .of(record.id);
        e.user_id = Some(record.user_id.clone());
        e.content = Some(record.content.clone());
        e
    }

    /// A change to record `id`: a lost record's goes with its restoration (`change` applied to
    /// it); a common one is a conflict when the live history touched it, else for review.
    fn changed(
        &mut self,
        position: u64,
        effect: &'static str,
        id: MemoryId,
        touched: &BTreeSet<u64>,
        change: impl FnOnce(&mut ExportedRecord),
    ) -> Entry {
        if let Some(r) = self.records.get_mut(&id.0) {
            change(r);
            return Entry::new(
                position,
                effect,
                Decision::Restore,
                format!("restored with memory {id}, as this change left it"),
            )
            .of(id);
        }
        let (decision, reason) = if touched.contains(&id.0) {
            (
                Decision::Conflict,
                format!("the live history changed memory {id} since the fork: not applied"),
            )
        } else {
            (
                Decision::Review,
                format!(
                    "a change to memory {id} of the common history: repair sends only new \
                     records and deletes; apply it by hand (UPDATE, FEEDBACK) if it still holds"
                ),
            )
        };
        Entry::new(position, effect, decision, reason).of(id)
    }

    /// A delete: of a lost record, it takes that record's restoration back; of a common one,
    /// it is sent again unless the live history touched the record.
    fn deleted(&mut self, position: u64, id: MemoryId, touched: &BTreeSet<u64>) -> Entry {
        if let Some(&i) = self.stored_by.get(&id.0) {
            self.records.remove(&id.0);
            if let Some(e) = self.entries.get_mut(i) {
                e.decision = Decision::NotApplicable;
                e.reason = format!("deleted again by the lost frame at position {position}");
            }
            return Entry::new(
                position,
                "deleted",
                Decision::NotApplicable,
                format!("memory {id} was stored by a lost frame too: nothing to restore"),
            )
            .of(id);
        }
        if touched.contains(&id.0) {
            return self.changed(position, "deleted", id, touched, |_| {});
        }
        Entry::new(
            position,
            "deleted",
            Decision::Apply,
            format!("a delete of memory {id}, which the live history left alone: sent again"),
        )
        .of(id)
    }
}

/// `req` checked before anything is read (`docs/cluster.md`, "`amberdb cluster repair`",
/// step 1): the cluster's settings and the set-aside store's directory.
async fn checked(
    js: &async_nats::jetstream::Context,
    req: &Request,
) -> anyhow::Result<(settings::Settings, PathBuf)> {
    let p = req.partition;
    anyhow::ensure!(
        is_set_aside_name(&req.from, p),
        "--from {:?} is not a set-aside store of partition {p} (a directory named \
         p-{p}.diverged-<ms>, p-{p}.behind-<ms> or p-{p}.aside-<ms> in --data, as STATS' \
         set_aside or `amberdb cluster set-aside` shows)",
        req.from
    );
    if let Some(work) = &req.apply {
        anyhow::ensure!(
            work.is_absolute(),
            "--work {:?} must be an absolute path (the owner reads the lost records from it)",
            work.display()
        );
        anyhow::ensure!(
            !work.exists(),
            "--work {}: it exists (repair writes into a new directory)",
            work.display()
        );
    }
    let dir = req.data.join(&req.from);
    let held = partitions_store(js, p, &dir).await?;
    Ok((held, dir))
}

/// The cluster's settings, once `p` is one of its partitions and `dir` holds partition `p`'s
/// store (by the store id the KV bucket keeps for it; another partition's or cluster's store
/// is refused).
async fn partitions_store(
    js: &async_nats::jetstream::Context,
    p: u32,
    dir: &Path,
) -> anyhow::Result<settings::Settings> {
    let held = settings::load(js).await?;
    anyhow::ensure!(
        p < held.partitions,
        "--partition {p}: the cluster has {} partitions",
        held.partitions
    );
    let store_id = held.store(p)?;
    anyhow::ensure!(dir.is_dir(), "{}: no such directory", dir.display());
    let theirs = store_id_of(dir)?;
    anyhow::ensure!(
        theirs == store_id,
        "{} is store {theirs}, not partition {p}'s ({store_id}): another partition's or cluster's",
        dir.display()
    );
    Ok(held)
}

/// Runs `amberdb cluster repair` for `req` on the cluster of `js`. Returns the report (JSON).
///
/// # Errors
/// A refused argument or directory (before anything is read), a log or stream that cannot be
/// read, a fork this store's log cannot show whole, or a write the owner did not answer (the
/// report so far is in the message).
pub async fn run(js: &async_nats::jetstream::Context, req: Request) -> anyhow::Result<String> {
    let p = req.partition;
    let (held, dir) = checked(js, &req).await?;
    let frames = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || logged_frames(&dir)
    })
    .await??;
    let s = js
        .get_stream(stream::stream_name(p))
        .await
        .map_err(|e| anyhow::anyhow!("partition {p}'s stream: {e}"))?;
    let first = stream::first_position(&s).await?;
    let last = stream::last_position(&s).await?;
    let log_first = frames.first().map_or(0, |f| f.position);
    let from = first.max(log_first);
    // The stream's frames where the log has some, to compare; past them, only what each
    // frame changed (the live history can be far longer than the log).
    let log_last = frames.last().map_or(0, |f| f.position);
    let mut stream_frames: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut changed: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    stream::for_each_frame(&s, from, last, |position, bytes| {
        if position <= log_last {
            stream_frames.insert(position, bytes.to_vec());
        }
        let ids = changed_ids(bytes);
        if !ids.is_empty() {
            changed.insert(position, ids);
        }
    })
    .await?;
    let fork = find_fork(&frames, from, &stream_frames);
    let mut report = json!({
        "partition": p,
        "set_aside": dir.display().to_string(),
        "log": {"first": log_first, "last": log_last},
        "stream": {"first": first, "last": last},
        "agreed_through": fork.agreed,
        "fork": fork.at,
    });
    let Some(at) = fork.at else {
        report["complete"] = json!(fork.agreed.is_some());
        report["entries"] = json!([]);
        // Nothing compared: no frame of the log is one the stream can show.
        anyhow::ensure!(
            fork.agreed.is_some(),
            "{}\nno frame of the set-aside store's log (positions {log_first} to {log_last}) is \
             one the stream (positions {first} to {last}) can show: its log is empty (all of it \
             in its checkpoint) or the stream begins past it, and nothing can be compared",
            serde_json::to_string_pretty(&report)?
        );
        report["summary"] = json!(
            "no fork: every frame of the set-aside store's log that the stream can show is the stream's; nothing to repair"
        );
        return Ok(serde_json::to_string_pretty(&report)?);
    };
    // The first frame compared differs: the fork may lie before what both can show.
    let whole = fork.agreed.is_some() || from == 1;
    let window = fork.agreed.map_or(from, |a| a + 1);
    let touched = touched_since(&changed, window);
    let lost: Vec<(u64, Vec<Effect>)> = frames
        .iter()
        .filter(|f| f.position >= at && !f.is_skip())
        .map(|f| {
            frame_effects(&f.bytes)
                .map(|e| (f.position, e))
                .map_err(|why| {
                    anyhow::anyhow!("the set-aside log's frame at {}: {why}", f.position)
                })
        })
        .collect::<anyhow::Result<_>>()?;
    let plan = plan(&lost, &touched);
    // Nothing is written from a report that may miss lost writes (an error changes nothing).
    anyhow::ensure!(
        whole || req.apply.is_none(),
        "--apply refused: the first frame both the set-aside log (from position {log_first}) \
         and the stream (from {first}) hold differs, so the fork may be earlier and writes lost \
         there would not be listed; run without --apply to read what can be listed"
    );
    let (plan, imported) = through_owner(js, plan, last, &req, &held).await?;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for e in &plan.entries {
        *counts
            .entry(
                serde_json::to_value(e.decision)?
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
            .or_default() += 1;
    }
    report["complete"] = json!(whole);
    report["lost_frames"] = json!(lost.len());
    report["counts"] = json!(counts);
    report["applied"] = json!(req.apply.is_some());
    if let Some(imported) = imported {
        report["import"] = json!(imported);
    }
    report["entries"] = serde_json::to_value(&plan.entries)?;
    let text = serde_json::to_string_pretty(&report)?;
    anyhow::ensure!(
        whole,
        "{text}\nthe first frame both the set-aside log (from position {log_first}) and the \
         stream (from {first}) hold differs: the fork may be earlier, in the set-aside store's \
         checkpoint or below the stream's beginning, and writes lost there are not listed"
    );
    Ok(text)
}

/// Reads what the lost deletes name, and with `--apply` writes back, through the partition's
/// owner (a client of the nodes registered in the cluster). Returns the plan as decided then,
/// and the import's report.
async fn through_owner(
    js: &async_nats::jetstream::Context,
    mut plan: Plan,
    last: u64,
    req: &Request,
    held: &settings::Settings,
) -> anyhow::Result<(Plan, Option<String>)> {
    let seeds =
        settings::seeds(js, "repair reads and writes through the partition's owner").await?;
    let apply = req.apply.clone();
    let token = req.token.clone();
    let partitions = held.partitions;
    let model = held.model_id.clone();
    tokio::task::spawn_blocking(move || {
        let mut client = Client::connect(&seeds, token.as_deref(), None)?;
        client.set_failover_wait(Duration::from_secs(60));
        check_deletes(&mut client, &mut plan, last)?;
        let imported = match &apply {
            Some(work) => Some(write_back(
                &mut client,
                &mut plan,
                work,
                (partitions, &model),
                (&seeds, token.as_deref()),
            )?),
            None => None,
        };
        Ok((plan, imported))
    })
    .await?
}

/// Asks the partition for every memory a lost delete names (at the stream's end, `min_seq`):
/// one it no longer holds is `AlreadyGone`, whether or not the live history touched it (a
/// repair run again finds its own delete there).
fn check_deletes(client: &mut Client, plan: &mut Plan, min_seq: u64) -> anyhow::Result<()> {
    for e in plan.entries.iter_mut().filter(|e| {
        e.effect == "deleted" && matches!(e.decision, Decision::Apply | Decision::Conflict)
    }) {
        let id = e.memory_id.unwrap_or(0);
        match client.call("GET", &json!({"memory_id": id, "min_seq": min_seq})) {
            Ok(_) => {}
            Err(ClientError::Refused { code, .. }) if code == "not_found" => {
                e.decision = Decision::AlreadyGone;
                e.reason = format!("the partition no longer holds memory {id}: nothing to send");
            }
            Err(err) => anyhow::bail!("reading memory {id} from the partition: {err}"),
        }
    }
    Ok(())
}

/// `--apply`: the lost records and entities go to the owner as one IMPORT (through `work`),
/// then every delete to send again as DELETE. Returns the import's report.
fn write_back(
    client: &mut Client,
    plan: &mut Plan,
    work: &Path,
    (partitions, model): (u32, &str),
    (seeds, token): (&[String], Option<&str>),
) -> anyhow::Result<String> {
    let mut imported = String::new();
    if !plan.records.is_empty() || !plan.entities.is_empty() {
        std::fs::create_dir(work).map_err(|e| anyhow::anyhow!("--work {}: {e}", work.display()))?;
        let lost = work.join("lost.jsonl");
        let records: Vec<ExportedRecord> = plan.records.values().cloned().collect();
        let next = MemoryId(records.last().map_or(1, |r| r.memory.id.0 + 1));
        let mut out = std::io::BufWriter::new(std::fs::File::create_new(&lost)?);
        crate::dump::write_export(&mut out, next, model, &plan.entities, &records)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        let parts = work.join("import");
        imported = super::import::import(&lost, &parts, partitions, seeds, token)?;
        let ids = std::fs::read_to_string(parts.join("ids.tsv"))?;
        let now: BTreeMap<u64, u64> = ids
            .lines()
            .skip(1)
            .filter_map(|l| {
                let mut f = l.split('\t');
                Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
            })
            .collect();
        for e in plan
            .entries
            .iter_mut()
            .filter(|e| e.decision == Decision::Restore)
        {
            e.id_now = e.memory_id.and_then(|id| now.get(&id).copied());
            e.result = Some("imported".into());
        }
    }
    for e in plan
        .entries
        .iter_mut()
        .filter(|e| e.decision == Decision::Apply)
    {
        let id = e.memory_id.unwrap_or(0);
        match client.call("DELETE", &json!({"memory_id": id})) {
            Ok(_) => e.result = Some("deleted".into()),
            Err(ClientError::Refused { code, .. }) if code == "not_found" => {
                e.decision = Decision::AlreadyGone;
                e.result = Some("not found: gone meanwhile".into());
            }
            Err(err) => anyhow::bail!(
                "deleting memory {id}: {err} (the lost records are imported; run repair again \
                 with a new --work: nothing is stored twice)"
            ),
        }
    }
    Ok(imported)
}

#[cfg(test)]
mod tests {
    use super::*;
    use amberdb::{NewMemory, Store, StoreOptions};

    /// A store's log after three stores and a delete of the first, and its records.
    fn a_log() -> (tempfile::TempDir, Vec<LoggedFrame>, Vec<Memory>) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::hashing()).unwrap();
        let ids: Vec<MemoryId> = ["the cat sleeps", "the dog barks", "rain is wet"]
            .into_iter()
            .map(|c| store.store(NewMemory::new(c).user("u")).unwrap().memory_id)
            .collect();
        let memories = ids.iter().map(|&id| store.get(id).unwrap()).collect();
        store.delete(ids[0]).unwrap();
        store.close().unwrap();
        let frames = logged_frames(dir.path()).unwrap();
        (dir, frames, memories)
    }

    #[test]
    fn the_fork_is_the_first_frame_the_stream_holds_otherwise() {
        let (_dir, frames, _) = a_log();
        let all: BTreeMap<u64, Vec<u8>> = frames
            .iter()
            .map(|f| (f.position, f.bytes.clone()))
            .collect();
        let last = frames.last().unwrap().position;
        let first = frames.first().unwrap().position;
        assert_eq!(
            find_fork(&frames, first, &all),
            Fork {
                agreed: Some(last),
                at: None
            },
            "the stream holds every frame: no fork"
        );
        // The stream lost the last two frames and holds another at the first of them.
        let mut other = all.clone();
        other.remove(&last);
        other.insert(last - 1, b"another frame".to_vec());
        assert_eq!(
            find_fork(&frames, first, &other),
            Fork {
                agreed: Some(last - 2),
                at: Some(last - 1)
            }
        );
        // Nothing compared agrees: the fork has no agreed position before it.
        assert_eq!(
            find_fork(&frames, first, &BTreeMap::new()),
            Fork {
                agreed: None,
                at: Some(first)
            }
        );
    }

    #[test]
    fn lost_stores_are_restored_lost_deletes_sent_again_and_changes_the_live_history_made_conflict()
    {
        let (_dir, frames, memories) = a_log();
        let effects = |f: &LoggedFrame| (f.position, frame_effects(&f.bytes).unwrap());
        let lost: Vec<(u64, Vec<Effect>)> = frames.iter().map(effects).collect();
        let stored: Vec<&(u64, Vec<Effect>)> = lost
            .iter()
            .filter(|(_, e)| matches!(e.first(), Some(Effect::Stored { .. })))
            .collect();
        assert_eq!(stored.len(), 3, "{lost:?}");
        // All of it lost: the first record was stored and deleted there, the others come back.
        let p = plan(&lost, &BTreeSet::new());
        let restored: Vec<u64> = p.records.keys().copied().collect();
        assert_eq!(restored, vec![memories[1].id.0, memories[2].id.0]);
        let first = memories[0].id.0;
        let about_first: Vec<Decision> = p
            .entries
            .iter()
            .filter(|e| e.memory_id == Some(first))
            .map(|e| e.decision)
            .collect();
        assert_eq!(
            about_first,
            vec![Decision::NotApplicable, Decision::NotApplicable]
        );
        assert!(p.entries.iter().all(|e| e.decision != Decision::Apply));
        // Only the delete lost: the first record is the common history's, so it is sent again,
        // unless the live history changed it since the fork.
        let delete: Vec<(u64, Vec<Effect>)> = lost
            .iter()
            .filter(|(_, e)| matches!(e.first(), Some(Effect::Deleted { .. })))
            .cloned()
            .collect();
        assert_eq!(delete.len(), 1);
        let p = plan(&delete, &BTreeSet::new());
        assert_eq!(p.entries.len(), 1);
        assert_eq!(p.entries[0].decision, Decision::Apply);
        assert_eq!(p.entries[0].memory_id, Some(first));
        assert!(p.records.is_empty());
        let p = plan(&delete, &BTreeSet::from([first]));
        assert_eq!(p.entries[0].decision, Decision::Conflict);
        // A change to a common memory the live history left alone is listed for review.
        let archive = vec![(9, vec![Effect::Archived { id: memories[1].id }])];
        assert_eq!(
            plan(&archive, &BTreeSet::new()).entries[0].decision,
            Decision::Review
        );
        let internal = vec![(9, vec![Effect::Internal("a claim")])];
        assert_eq!(
            plan(&internal, &BTreeSet::new()).entries[0].decision,
            Decision::NotApplicable
        );
    }

    #[test]
    fn what_the_live_history_changed_since_the_fork_is_touched() {
        let (_dir, frames, memories) = a_log();
        let changed: BTreeMap<u64, Vec<u64>> = frames
            .iter()
            .map(|f| (f.position, changed_ids(&f.bytes)))
            .filter(|(_, ids)| !ids.is_empty())
            .collect();
        let last = frames.last().unwrap().position;
        assert_eq!(
            changed.len(),
            1,
            "the delete alone changes a memory: {changed:?}"
        );
        assert_eq!(
            touched_since(&changed, 1),
            BTreeSet::from([memories[0].id.0])
        );
        assert!(touched_since(&changed, last + 1).is_empty());
        assert!(changed_ids(b"no frame").is_empty());
    }

    #[test]
    fn only_a_set_aside_store_of_the_partition_is_taken() {
        assert!(is_set_aside_name("p-3.diverged-1765000000000", 3));
        assert!(is_set_aside_name("p-3.behind-17", 3));
        assert!(is_set_aside_name("p-3.aside-17", 3));
        assert!(!is_set_aside_name("p-3.aside-", 3));
        for name in [
            "p-3",
            "p-4.diverged-17",
            "p-3.diverged-",
            "p-3.diverged-17x",
            "p-3.diverged-../x",
            "p-3.other-17",
            "../p-3.diverged-17",
        ] {
            assert!(!is_set_aside_name(name, 3), "{name}");
        }
    }
}
