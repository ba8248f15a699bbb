//! `amberdb mcp` with the official MCP Python SDK as the client (`mcp` 2.3.0 from PyPI, which
//! `scripts/mcp-venv` installs and `scripts/test` runs first). The script starts the binary
//! over stdio, initializes, lists the tools and calls every one (tests/python/mcp_client.py).

use std::path::PathBuf;

fn sdk_python() -> PathBuf {
    if let Some(p) = std::env::var_os("AMBERDB_MCP_PYTHON") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("AMBERDB_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache")
                })
                .join("amberdb")
        });
    cache.join("mcp-venv/bin/python")
}

#[test]
fn the_official_mcp_sdk_lists_and_calls_every_tool() {
    let python = sdk_python();
    assert!(
        python.exists(),
        "{} is missing: run scripts/mcp-venv (scripts/test does) to install the MCP SDK",
        python.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    crate::support::run_python(
        &python,
        "mcp_client.py",
        &[env!("CARGO_BIN_EXE_amberdb").as_ref(), store.as_os_str()],
        &[("AMBERDB_LOG", "warn")],
        "every tool called; all checks passed",
    );
}

/// Runs `amberdb mcp` with `extra` arguments and environment, sends `lines` of tool calls, and
/// returns each call's structured result.
fn mcp_session(
    store: &std::path::Path,
    extra: &[&str],
    env: &[(&str, &str)],
    calls: &[serde_json::Value],
) -> Vec<serde_json::Value> {
    use std::io::Write;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_amberdb"));
    cmd.args(["mcp", "--embedder", "hashing", "--data-dir"])
        .arg(store)
        .args(extra)
        .env("AMBERDB_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut input = String::new();
    for (i, c) in calls.iter().enumerate() {
        let msg =
            serde_json::json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": c});
        input.push_str(&format!("{msg}\n"));
    }
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["result"]["structuredContent"].clone()
        })
        .collect()
}

#[test]
fn store_wide_hook_defaults_come_from_flags_environment_and_the_config_file() {
    let near = [
        serde_json::json!({"name": "store_memory", "arguments": {"content": "Friday deploys go out from the release branch"}}),
        serde_json::json!({"name": "store_memory", "arguments": {"content": "friday deploys go out from the release branch."}}),
        serde_json::json!({"name": "get_memory_stats", "arguments": {}}),
    ];
    let dir = tempfile::tempdir().unwrap();
    let total = |name: &str, extra: &[&str], env: &[(&str, &str)]| {
        let replies = mcp_session(&dir.path().join(name), extra, env, &near);
        assert_eq!(replies.len(), 3, "{replies:?}");
        replies[2]["total_memories"].as_u64().unwrap()
    };
    // Default: the second is the first one said again.
    assert_eq!(total("default", &[], &[]), 1);
    assert_eq!(total("flag", &["--semantic-dedup", "false"], &[]), 2);
    assert_eq!(total("env", &[], &[("AMBERDB_SEMANTIC_DEDUP", "false")]), 2);
    let config = dir.path().join("amberdb.toml");
    std::fs::write(&config, "semantic_dedup = false\n").unwrap();
    assert_eq!(
        total("file", &["--config", config.to_str().unwrap()], &[]),
        2
    );
    // The flag wins over the file.
    assert_eq!(
        total(
            "both",
            &[
                "--config",
                config.to_str().unwrap(),
                "--semantic-dedup",
                "true"
            ],
            &[]
        ),
        1
    );
}
