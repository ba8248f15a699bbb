//! amberdb's MCP with the official MCP Python SDK as the client (`mcp` 2.3.0 from PyPI, which
//! `scripts/sdk-venv` installs and `scripts/test` runs first): over stdio it starts the binary,
//! over Streamable HTTP it connects to `serve --http`'s /mcp; either way it initializes, lists
//! the tools and calls every one (tests/python/mcp_client.py).

#[test]
fn the_official_mcp_sdk_lists_and_calls_every_tool() {
    let python = crate::support::sdk_python();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    crate::support::run_python(
        &python,
        "mcp_client.py",
        &[
            "stdio".as_ref(),
            env!("CARGO_BIN_EXE_amberdb").as_ref(),
            store.as_os_str(),
        ],
        &[("AMBERDB_LOG", "warn")],
        "every tool called; all checks passed",
    );
}

/// The same script, the same checks, over Streamable HTTP at `amberdb serve --http`'s /mcp.
#[test]
fn the_official_mcp_sdk_calls_every_tool_over_streamable_http() {
    let python = crate::support::sdk_python();
    let dir = tempfile::tempdir().unwrap();
    let server = crate::support::Server::start(&dir.path().join("store"), &[]);
    let url = format!("http://{}/mcp", server.http.unwrap());
    crate::support::run_python(
        &python,
        "mcp_client.py",
        &["http".as_ref(), url.as_ref()],
        &[],
        "every tool called; all checks passed",
    );
}

/// Two agents on one server, each with a user-bound token, over MCP's HTTP transport: neither
/// sees, gets, deletes or names the other's memories.
#[test]
fn two_agents_with_user_bound_tokens_never_see_each_other() {
    let python = crate::support::sdk_python();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "ada ada-s3cret\nbob bob-s3cret\n").unwrap();
    let server = crate::support::Server::start(
        &dir.path().join("store"),
        &["--token-file", tokens.to_str().unwrap()],
    );
    let url = format!("http://{}/mcp", server.http.unwrap());
    crate::support::run_python(
        &python,
        "mcp_two_agents.py",
        &[url.as_ref(), "ada-s3cret".as_ref(), "bob-s3cret".as_ref()],
        &[],
        "isolated; all checks passed",
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
