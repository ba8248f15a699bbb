//! What the rig demands after every healed fault (docs/reliability.md, "The cluster fault
//! rig"), within 60 s: every node answers, no partition is halted anywhere, every partition has
//! one owner, every replica of a partition is at the same position with the same running CRC;
//! and, with the writers paused, every node holds the same memories, turns and items, which
//! hold every acknowledged write (none lost, no acknowledged delete undone, no id acknowledged
//! twice, no refused request's text anywhere), so a write of unknown outcome is on all replicas
//! or none.

use super::load::{BAD, Model};
use super::world::{PartView, World};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long a healed cluster may take to agree.
pub(crate) const WITHIN: Duration = Duration::from_secs(60);

/// What one node holds of the writers' users.
#[derive(Debug, PartialEq)]
pub(crate) struct Held {
    /// Live memories and turns: id → content.
    memories: BTreeMap<u64, String>,
    /// Items: (user, key) → value.
    items: BTreeMap<(String, String), Value>,
}

/// Waits until every node agrees on every partition (module doc); how long it took, or why it
/// did not within `WITHIN`.
pub(crate) fn converge(world: &World) -> Result<Duration, String> {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < WITHIN {
        match agreement(world) {
            Ok(()) => return Ok(start.elapsed()),
            Err(why) => last = why,
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Err(format!("no agreement within {WITHIN:?}: {last}"))
}

fn agreement(world: &World) -> Result<(), String> {
    let views: Vec<Vec<PartView>> = (0..3)
        .map(|i| world.view(i).ok_or(format!("n{i} does not answer STATS")))
        .collect::<Result<_, _>>()?;
    for (p, first) in views[0].iter().enumerate() {
        let parts: Vec<&PartView> = views.iter().map(|v| &v[p]).collect();
        if let Some((i, part)) = parts.iter().enumerate().find(|(_, v)| v.halted.is_some()) {
            return Err(format!("partition {p} halted on n{i}: {:?}", part.halted));
        }
        let owners = parts.iter().filter(|v| v.role == "owner").count();
        if owners != 1 {
            return Err(format!("partition {p} has {owners} owners: {parts:?}"));
        }
        // A store made by a build before the running CRC never knows it (docs/cluster.md,
        // "Running CRC"): its replicas agree on the position, and the model check on the rest.
        let crc_due = !world.began_old();
        if (crc_due && first.crc.is_none())
            || parts
                .iter()
                .any(|v| (v.position, &v.crc) != (first.position, &first.crc))
        {
            return Err(format!("partition {p}'s replicas differ: {parts:?}"));
        }
    }
    Ok(())
}

/// Everything node `i` holds of `users` (read from its own stores).
pub(crate) fn held(world: &World, i: usize, users: &[String]) -> Result<Held, String> {
    let mut client = world.client_of(i).ok_or(format!("n{i} does not answer"))?;
    // A read refused as `unavailable` (a store reopening: "retry in a moment") changed
    // nothing and is asked again for up to 30 s, as a client would; wrong data never is.
    let mut read = |command: &str, args: Value| {
        let mut refused = 0;
        loop {
            match client.call(command, &args) {
                Err(e) if e.to_string().contains("(unavailable)") && refused < 60 => {
                    refused += 1;
                    std::thread::sleep(std::time::Duration::from_millis(500));
                }
                r => break r.map_err(|e| format!("n{i}: {command} {args}: {e}")),
            }
        }
    };
    let mut held = Held {
        memories: BTreeMap::new(),
        items: BTreeMap::new(),
    };
    for user in users {
        for offset in (0..).step_by(50) {
            let page = read(
                "RECENT",
                json!({"user_id": user, "limit": 50, "offset": offset}),
            )?;
            for m in page["memories"].as_array().unwrap() {
                let id = m["id"]
                    .as_u64()
                    .or_else(|| m["memory_id"].as_u64())
                    .unwrap();
                held.memories
                    .insert(id, m["content"].as_str().unwrap().to_owned());
            }
            if page["has_more"] != true {
                break;
            }
        }
        for offset in (0..).step_by(50) {
            let page = read(
                "LIST_ITEMS",
                json!({"user_id": user, "limit": 50, "offset": offset}),
            )?;
            let items = page["items"].as_array().unwrap();
            for item in items {
                let key = item["key"].as_str().unwrap().to_owned();
                held.items
                    .insert((user.clone(), key), item["value"].clone());
            }
            if items.len() < 50 {
                break;
            }
        }
    }
    Ok(held)
}

/// Holds the nodes to the model (module doc): the violations found, none if all is well.
pub(crate) fn against_model(world: &World, model: &Model, probe_users: &[String]) -> Vec<String> {
    let mut users = Model::users();
    users.extend_from_slice(probe_users);
    let mut bad = Vec::new();
    let helds: Vec<Held> = match (0..3).map(|i| held(world, i, &users)).collect() {
        Ok(h) => h,
        Err(e) => return vec![e],
    };
    for (i, h) in helds.iter().enumerate().skip(1) {
        if *h != helds[0] {
            let only = |a: &Held, b: &Held| {
                a.memories
                    .keys()
                    .filter(|k| !b.memories.contains_key(k))
                    .count()
            };
            bad.push(format!(
                "n{i} holds other records than n0 ({} only on n{i}, {} only on n0; items equal: {})",
                only(h, &helds[0]),
                only(&helds[0], h),
                h.items == helds[0].items
            ));
        }
    }
    let h = &helds[0];
    for (id, (user, content)) in &model.live {
        if model.uncertain.contains(id) {
            continue;
        }
        match h.memories.get(id) {
            Some(c) if c == content => {}
            Some(c) => bad.push(format!(
                "memory {id} of {user} reads {c:?}, acknowledged as {content:?}"
            )),
            None => bad.push(format!("acknowledged memory {id} of {user} is lost")),
        }
    }
    for id in &model.ended {
        if h.memories.contains_key(id) {
            bad.push(format!(
                "memory {id} is live again after an acknowledged delete or update"
            ));
        }
    }
    for ((user, key), value) in &model.items {
        if let Some(v) = value
            && h.items.get(&(user.clone(), key.clone())) != Some(v)
        {
            bad.push(format!(
                "item {key} of {user} is not its acknowledged value {v}"
            ));
        }
    }
    if let Some((id, c)) = h.memories.iter().find(|(_, c)| c.contains(BAD)) {
        bad.push(format!("memory {id} holds a refused request's text: {c:?}"));
    }
    bad
}
