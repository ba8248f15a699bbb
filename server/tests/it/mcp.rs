//! `mnemo mcp` with the official MCP Python SDK as the client (`mcp` 2.3.0 from PyPI, which
//! `scripts/mcp-venv` installs and `scripts/test` runs first). The script starts the binary
//! over stdio, initializes, lists the tools and calls every one (tests/python/mcp_client.py).

use std::path::PathBuf;

fn sdk_python() -> PathBuf {
    if let Some(p) = std::env::var_os("MNEMO_MCP_PYTHON") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("MNEMO_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache")
                })
                .join("mnemo")
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
        &[env!("CARGO_BIN_EXE_mnemo").as_ref(), store.as_os_str()],
        &[("MNEMO_LOG", "warn")],
        "every tool called; all checks passed",
    );
}
