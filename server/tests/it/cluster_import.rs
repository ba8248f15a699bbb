//! `amberdb cluster import` as a user runs it (`docs/cluster.md`, "From one node to a
//! cluster"): a single node's export, taken while it serves, goes into a cluster of two nodes
//! split by partition; every record is then found on the cluster under the new id `ids.tsv`
//! gives it, in its user's partition, with its text, lineage and kind; the export is not
//! changed; an import run again stores nothing twice; a part sent to the wrong partition, and
//! IMPORT with a partition on one node, are refused and change nothing.

use super::cluster_node::{PARTITIONS, all_owned, cluster_command, cluster_of, user_in};
use crate::support::Server;
use amberdb_server::client::Client;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

#[test]
fn a_single_nodes_export_moves_into_a_cluster_split_by_user_with_every_id_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("single.jsonl");
    // One node, with notes, a superseded fact, a chat and an item for users of every partition.
    let users: Vec<String> = (0..PARTITIONS)
        .flat_map(|p| [user_in(p, "a"), user_in(p, "b")])
        .collect();
    let mut texts: BTreeMap<u64, String> = BTreeMap::new();
    let mut seen: BTreeMap<u64, Result<(serde_json::Value, serde_json::Value), u64>> =
        BTreeMap::new();
    {
        let single = Server::start(&dir.path().join("single"), &[]);
        let mut c = single.client();
        for (i, user) in users.iter().enumerate() {
            for j in 0..3 {
                let r = c.ok(
                    "STORE",
                    json!({"user_id": user, "content": format!("{user} keeps fact {j} of {i}")}),
                );
                texts.insert(
                    r["memory_id"].as_u64().unwrap(),
                    format!("{user} keeps fact {j} of {i}"),
                );
            }
        }
        let first = texts.keys().next().copied().unwrap();
        let r = c.ok(
            "UPDATE",
            json!({"memory_id": first, "content": "the first fact, corrected"}),
        );
        let corrected = r["memory_id"].as_u64().unwrap_or(first);
        texts.insert(corrected, "the first fact, corrected".into());
        c.ok("ADD_MESSAGES", json!({"user_id": users[3], "session_id": "s1", "messages": [
            {"role": "user", "content": "we ship on friday"}, {"role": "assistant", "content": "noted: friday"}]}));
        c.ok("PUT_ITEM", json!({"user_id": users[5], "key": "k1", "value": {"likes": "tea"}, "text": "likes tea"}));
        // IMPORT naming a partition is a cluster node's: one node refuses it.
        let refused = c.fails(
            "IMPORT",
            json!({"source": export.display().to_string(), "partition": 0}),
            "invalid",
        );
        assert!(
            refused["message"].as_str().unwrap().contains("cluster"),
            "{refused}"
        );
        c.ok("EXPORT", json!({"dest": export.display().to_string()}));
        // What the single node answers for every id it gave: the record, or its successor.
        for id in 1..200u64 {
            let r = c.call("GET", json!({"memory_id": id}));
            if r["ok"] == true {
                let m = &r["memory"];
                seen.insert(id, Ok((m["content"].clone(), m["user_id"].clone())));
            } else if let Some(successor) = r["memory_id"].as_u64() {
                seen.insert(id, Err(successor));
            }
        }
        single.terminate();
    }
    let before = std::fs::read(&export).unwrap();
    let exported_records = String::from_utf8(before.clone())
        .unwrap()
        .lines()
        .filter(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["type"] == "record")
        .count();

    let (nats, _cluster_dir, nodes) = cluster_of(2);
    all_owned(&nodes[0]);
    let import = |work: &std::path::Path| {
        let (from, work) = (export.display().to_string(), work.display().to_string());
        cluster_command(&nats, &["import", "--from", &from, "--work", &work])
    };
    let work = dir.path().join("work");
    let (ok, out, err) = import(&work);
    assert!(ok, "{out}{err}");
    assert!(out.contains(&format!("{exported_records} stored")), "{out}");
    assert_eq!(
        std::fs::read(&export).unwrap(),
        before,
        "the export is only read"
    );

    // Every record, under its new id, in its user's partition, with its text.
    let ids = std::fs::read_to_string(work.join("ids.tsv")).unwrap();
    let rows: Vec<(u64, u64, u32, String)> = ids
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].to_owned(),
            )
        })
        .collect();
    assert_eq!(rows.len(), exported_records, "{ids}");
    let seeds: Vec<String> = nodes.iter().map(|s| s.addr.to_string()).collect();
    let mut client = Client::connect(&seeds, None, Some(Duration::from_secs(20))).unwrap();
    let mut news = std::collections::BTreeSet::new();
    let mut superseded = 0;
    let mapped: BTreeMap<u64, u64> = rows.iter().map(|r| (r.0, r.1)).collect();
    for (old, new, p, user) in &rows {
        assert_eq!(amberdb::cluster::partition_of_user(user, PARTITIONS), *p);
        assert_eq!(
            amberdb::cluster::partition_of_id(*new),
            u64::from(*p),
            "{old} -> {new}"
        );
        assert!(news.insert(*new), "{new} given twice");
        let mut got = client.call("GET", &json!({"memory_id": new}));
        match (&mut got, &seen[old]) {
            (Ok(got), Ok((content, owner))) => {
                assert_eq!(
                    (&got["memory"]["content"], &got["memory"]["user_id"]),
                    (content, owner),
                    "{old} -> {new}"
                );
                assert_eq!(owner, &json!(user));
            }
            // Archived as it was, and its successor's id is the successor's new id.
            (
                Err(amberdb_server::client::ClientError::Refused { code, reply, .. }),
                Err(successor),
            ) => {
                assert_eq!(code, "not_found");
                assert_eq!(
                    reply["memory_id"].as_u64(),
                    mapped.get(successor).copied(),
                    "{old} -> {new}"
                );
                superseded += 1;
            }
            (got, was) => panic!("{old} -> {new}: {got:?}, on the single node {was:?}"),
        }
    }
    assert!(superseded >= 1, "the corrected fact is archived");
    let corrected = rows
        .iter()
        .find(|r| texts.get(&r.0).map(String::as_str) == Some("the first fact, corrected"))
        .unwrap();
    assert!(seen[&corrected.0].is_ok());
    let item = client
        .call("GET_ITEM", &json!({"user_id": users[5], "key": "k1"}))
        .unwrap();
    assert_eq!(
        serde_json::Value::Object(item)["item"]["value"],
        json!({"likes": "tea"})
    );

    // Again: everything is held already, nothing is stored twice.
    let (ok, out, err) = import(&dir.path().join("again"));
    assert!(ok, "{out}{err}");
    assert!(
        out.contains(&format!("0 stored, {exported_records} held already")),
        "{out}"
    );
    // The same --work: refused before anything is sent.
    let (ok, _, err) = import(&work);
    assert!(!ok && err.contains("new directory"), "{err}");

    // A part sent to another partition is refused whole.
    let part = work.join("p-0.jsonl");
    let r = client.call(
        "IMPORT",
        &json!({"source": part.display().to_string(), "partition": 1}),
    );
    let e = r.expect_err("another partition's part");
    assert!(e.to_string().contains("belongs to partition 0"), "{e}");
    for beyond in [json!(99), json!(-1), json!("0")] {
        let r = client.call(
            "IMPORT",
            &json!({"source": part.display().to_string(), "partition": beyond}),
        );
        let e = r.expect_err("no such partition");
        assert!(e.to_string().contains("partition"), "{beyond}: {e}");
    }
    let listed = client.call("LIST_USERS", &json!({})).unwrap();
    assert_eq!(
        listed["users"].as_array().map(Vec::len),
        Some(users.len()),
        "{listed:?}"
    );
}
