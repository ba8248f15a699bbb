//! A real `amberdb serve` process on 127.0.0.1:0, and a plain blocking client for it.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// The binary under test: this build's, or `AMBERDB_BIN`'s (an older build, to show a test
/// fails there).
pub fn amberdb() -> Command {
    Command::new(bin())
}

fn bin() -> PathBuf {
    std::env::var_os("AMBERDB_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_amberdb")),
        PathBuf::from,
    )
}

/// Runs `amberdb ARGS --embedder hashing --data-dir DIR` to its end.
pub fn run_on(args: &[&str], dir: &Path) -> std::process::Output {
    amberdb()
        .args(args)
        .args(["--embedder", "hashing", "--data-dir"])
        .arg(dir)
        .env("AMBERDB_LOG", "warn")
        .output()
        .unwrap()
}

/// Bytes of a child's output as text.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A running server; killed (SIGKILL) when dropped unless stopped.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    /// Where it serves HTTP (`--http 127.0.0.1:0` unless the flags name another).
    pub http: Option<SocketAddr>,
    stderr_path: PathBuf,
}

impl Server {
    /// Starts `amberdb serve` on `dir` with the no-model embedder (unless `extra` names
    /// another) and `extra` flags.
    pub fn start(dir: &Path, extra: &[&str]) -> Server {
        Server::start_with_env(dir, extra, &[])
    }

    /// As `start`, with environment variables.
    pub fn start_with_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::spawn(dir, amberdb(), extra, env)
    }

    /// As `start`, run under `wrapper` (`prlimit --nofile=… --`) with the binary `bin`.
    pub fn start_wrapped(dir: &Path, wrapper: &[&str], bin: &Path, extra: &[&str]) -> Server {
        let mut cmd = Command::new(wrapper[0]);
        cmd.args(&wrapper[1..]).arg(bin);
        Server::spawn(dir, cmd, extra, &[])
    }

    fn spawn(dir: &Path, mut cmd: Command, extra: &[&str], env: &[(&str, &str)]) -> Server {
        let stderr_path = dir.with_extension(format!("stderr-{}", std::process::id()));
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        cmd.arg("serve");
        if !extra.contains(&"--port") {
            cmd.args(["--port", "0"]);
        }
        if !extra.contains(&"--embedder") {
            cmd.args(["--embedder", "hashing"]);
        }
        let with_http = extra.contains(&"--http") || std::env::var_os("AMBERDB_BIN").is_none();
        if !extra.contains(&"--http") && with_http {
            cmd.args(["--http", "127.0.0.1:0"]);
        }
        cmd.arg("--data-dir")
            .arg(dir)
            .args(extra)
            .env_remove("AMBERDB_TOKEN")
            .env("AMBERDB_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(stderr);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let mut http_line = String::new();
        if line.starts_with("listening on ") && with_http {
            stdout.read_line(&mut http_line).unwrap();
        }
        let http = http_line
            .trim()
            .strip_prefix("http on ")
            .and_then(|u| u.split("://").nth(1))
            .map(|a| a.parse().unwrap());
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| {
                panic!(
                    "no address on stdout ({line:?}); stderr:\n{}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                )
            })
            .parse()
            .unwrap();
        Server {
            child,
            addr,
            http,
            stderr_path,
        }
    }

    /// A new connection.
    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// SIGTERM, then waits for the exit.
    pub fn terminate(mut self) -> (ExitStatus, String) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let status = self.child.wait().unwrap();
        let log = self.log();
        (status, log)
    }

    /// SIGKILL (kill -9), then waits for the exit.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.stderr_path);
    }
}

/// A connection, as a user would write one: write a line, read a line.
pub struct Client {
    pub stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Client { stream, reader }
    }

    /// Sends raw bytes.
    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Reads one reply line as JSON (`None` at end of stream).
    pub fn recv(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => Some(
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("reply {line:?} is not JSON: {e}")),
            ),
            Err(e) => panic!("reading a reply: {e}"),
        }
    }

    /// `COMMAND json` → its reply.
    pub fn call(&mut self, command: &str, args: Value) -> Value {
        let line = if args.as_object().is_some_and(|o| o.is_empty()) {
            format!("{command}\n")
        } else {
            format!("{command} {args}\n")
        };
        self.send(line.as_bytes());
        self.recv()
            .unwrap_or_else(|| panic!("connection closed after {command}"))
    }

    /// A call that must succeed.
    pub fn ok(&mut self, command: &str, args: Value) -> Value {
        let r = self.call(command, args.clone());
        assert_eq!(r["ok"], true, "{command} {args} -> {r}");
        r
    }

    /// A call that must fail with `code`.
    pub fn fails(&mut self, command: &str, args: Value, code: &str) -> Value {
        let r = self.call(command, args.clone());
        assert_eq!(r["ok"], false, "{command} {args} -> {r}");
        assert_eq!(r["code"], code, "{command} {args} -> {r}");
        assert!(r["message"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
        r
    }

    /// Half-closes: no more requests; replies still arrive.
    pub fn shutdown_write(&mut self) {
        self.stream.shutdown(Shutdown::Write).unwrap();
    }

    /// Whether the server closed the connection (reads end of stream).
    pub fn closed(&mut self) -> bool {
        let mut rest = Vec::new();
        self.reader.read_to_end(&mut rest).is_ok() && rest.is_empty()
    }
}

/// Where the scripts cache what they install (`AMBERDB_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/amberdb`, else `~/.cache/amberdb`).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("AMBERDB_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache")
                })
                .join("amberdb")
        })
}

/// The Python of the client SDKs' venv (`scripts/sdk-venv`, which `scripts/test` runs first):
/// the MCP SDK and the MemFuse SDK. Missing, the test fails saying how to install it.
pub fn sdk_python() -> PathBuf {
    let python = std::env::var_os("AMBERDB_SDK_PYTHON")
        .map_or_else(|| cache_dir().join("sdk-venv/bin/python"), PathBuf::from);
    assert!(
        python.exists(),
        "{} is missing: run scripts/sdk-venv (scripts/test does) to install the client SDKs",
        python.display()
    );
    python
}

/// Runs `tests/python/<script>` with `python` and `args`; asserts it exits 0 and printed
/// `passed` (its last words when every check held). Returns its stdout.
pub fn run_python(
    python: &Path,
    script: &str,
    args: &[&std::ffi::OsStr],
    env: &[(&str, &str)],
    passed: &str,
) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = Command::new(python)
        .arg(&path)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("running {} {}: {e}", python.display(), path.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(passed), "{stdout}");
    stdout
}

/// The server is alive and answers a new connection.
pub fn still_serving(server: &Server) {
    assert_eq!(server.client().call("PING", json!({}))["reply"], "PONG");
}
