//! Pi 1.6.0 (`$PI16_REF_BIN`; or the reference 0.73.1) driven in its RPC mode (`pi --mode rpc`, Pi's `docs/rpc.md`):
//! commands in as JSON lines, every event and response out as one JSON value a line, on the
//! loopback model of a test's `models.json` (provider `mock`).

use std::ffi::OsStr;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::headless::{pi_bare_command, pi_command};

/// A running `pi --mode rpc` (Pi 1.6.0, or the reference 0.73.1 for the older comparisons).
/// Extension dialogs it opens (`extension_ui_request` select / confirm / input / editor) are
/// answered `cancelled`. Killed when dropped; [`PiRpc::close`] ends it as a user would.
pub struct PiRpc {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    out: std::sync::mpsc::Receiver<Value>,
    next_id: u64,
}

impl PiRpc {
    /// Starts Pi at `pi` in `ws` on `mock/mock-1` with `PI_CODING_AGENT_DIR=agent` (`HOME` its
    /// parent, `PI_OFFLINE=1`) and further `args` (e.g. `-e extension.ts`).
    pub fn start(pi: &Path, ws: &Path, agent: &Path, args: &[&OsStr]) -> PiRpc {
        let home = agent.parent().unwrap();
        PiRpc::spawn(pi_command(pi, ws, agent, home, args))
    }

    /// Pi on the session file `file` (`--session`), at the model its branch restores (no
    /// `--model`).
    pub fn open(pi: &Path, ws: &Path, agent: &Path, file: &Path) -> PiRpc {
        let mut cmd = pi_bare_command(pi, ws, agent, agent.parent().unwrap());
        cmd.arg("--session").arg(file);
        PiRpc::spawn(cmd)
    }

    /// Starts `cmd` (a [`pi_command`] or [`pi_bare_command`] with what the test adds: its
    /// arguments, environment) in RPC mode (`--mode rpc` is added), its stdin and stdout piped
    /// to this handle, its stderr dropped.
    pub fn spawn(mut cmd: Command) -> PiRpc {
        let mut child = cmd
            .args(["--mode", "rpc"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
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

    /// Writes the command `v` as one line, not waiting for anything.
    pub fn send(&mut self, v: &Value) {
        let stdin = self.stdin.as_mut().expect("Pi's stdin is closed");
        writeln!(stdin, "{v}").unwrap();
    }

    /// Reads every value up to and including the first `until` accepts (panics after 60 s
    /// without one, or when Pi's output ends), answering extension dialogs on the way.
    pub fn read_until(&mut self, until: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let v = self
                .out
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| {
                    panic!("Pi gave no awaited value; after {} values", seen.len())
                });
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

    /// Ends Pi as a user's client does, by closing its stdin, and returns its exit status
    /// (panics after 60 s).
    pub fn close(mut self) -> ExitStatus {
        drop(self.stdin.take());
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "Pi (pid {}) did not exit",
                self.child.id()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends `cmd`; returns every value up to and including the first `until` accepts
    /// ([`PiRpc::read_until`]).
    pub fn call(&mut self, cmd: Value, until: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.send(&cmd);
        self.read_until(until)
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
