//! Pi 1.6.0 (`$PI16_REF_BIN`) driven in its RPC mode (`pi --mode rpc`, Pi's `docs/rpc.md`):
//! commands in as JSON lines, every event and response out as one JSON value a line, on the
//! loopback model of a test's `models.json` (provider `mock`).

use std::ffi::OsStr;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

/// A running `pi --mode rpc` in a workspace, with its agent dir. Extension dialogs it opens (`extension_ui_request` select / confirm / input /
/// editor) are answered `cancelled`. Killed when dropped.
pub struct PiRpc {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    out: std::sync::mpsc::Receiver<Value>,
    next_id: u64,
}

impl PiRpc {
    /// Starts Pi at `pi` in `ws` on `mock/mock-1` with `PI_CODING_AGENT_DIR=agent` (`HOME` its
    /// parent, `PI_OFFLINE=1`) and further `args` (e.g. `-e extension.ts`).
    pub fn start(pi: &Path, ws: &Path, agent: &Path, args: &[&OsStr]) -> PiRpc {
        let mut all: Vec<&OsStr> = ["--provider", "mock", "--model", "mock-1"]
            .iter()
            .map(OsStr::new)
            .collect();
        all.extend_from_slice(args);
        PiRpc::spawn(pi, ws, agent, &all)
    }

    /// Pi on the session file `file` (`--session`), at the model its branch restores (no
    /// `--model`).
    pub fn open(pi: &Path, ws: &Path, agent: &Path, file: &Path) -> PiRpc {
        PiRpc::spawn(pi, ws, agent, &["--session".as_ref(), file.as_os_str()])
    }

    fn spawn(pi: &Path, ws: &Path, agent: &Path, args: &[&OsStr]) -> PiRpc {
        let mut child = Command::new(pi)
            .args(["--mode", "rpc"])
            .args(args)
            .current_dir(ws)
            .env("PI_OFFLINE", "1")
            .env("PI_CODING_AGENT_DIR", agent)
            .env("HOME", agent.parent().unwrap())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, out) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
            }
        });
        PiRpc {
            child,
            stdin,
            out,
            next_id: 0,
        }
    }

    fn send(&mut self, v: &Value) {
        writeln!(self.stdin, "{v}").unwrap();
    }

    /// Sends `cmd`; returns every value up to and including the first `until` accepts
    /// (panics after 60 s without one).
    pub fn call(&mut self, cmd: Value, until: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.send(&cmd);
        let mut seen = Vec::new();
        loop {
            let v = self
                .out
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("Pi did not answer {cmd}"));
            if v["type"] == "extension_ui_request"
                && ["select", "confirm", "input", "editor"]
                    .contains(&v["method"].as_str().unwrap_or(""))
            {
                let answer =
                    json!({"type": "extension_ui_response", "id": v["id"], "cancelled": true});
                self.send(&answer);
            }
            let done = until(&v);
            seen.push(v);
            if done {
                return seen;
            }
        }
    }

    /// Sends `cmd` (an object without `id`: one is added) and returns its response's `data`;
    /// panics unless it succeeded.
    pub fn request(&mut self, mut cmd: Value) -> Value {
        self.next_id += 1;
        let id = format!("req-{}", self.next_id);
        cmd["id"] = json!(id);
        let r = self
            .call(cmd, |v| v["type"] == "response" && v["id"] == id.as_str())
            .pop()
            .unwrap();
        assert_eq!(r["success"], true, "{r}");
        r["data"].clone()
    }

    /// A prompt (`{"type": "prompt", "message": text}` and `extra` fields, e.g. `images`) run
    /// to its end: every value up to `agent_settled`, Pi 1.6's last event of a run.
    pub fn prompt_with(&mut self, text: &str, extra: Value) -> Vec<Value> {
        let mut cmd = json!({"type": "prompt", "message": text});
        if let Value::Object(fields) = extra {
            for (k, v) in fields {
                cmd[k] = v;
            }
        }
        self.call(cmd, |v| v["type"] == "agent_settled")
    }

    /// [`PiRpc::prompt_with`] with nothing more.
    pub fn prompt(&mut self, text: &str) -> Vec<Value> {
        self.prompt_with(text, Value::Null)
    }

    /// An extension command (`/name args`, sent as a prompt; no run follows it): waits for
    /// its response.
    pub fn command(&mut self, text: &str) {
        self.request(json!({"type": "prompt", "message": text}));
    }
}

impl Drop for PiRpc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
