//! `bash` through the client's terminal (`clientCapabilities.terminal`): a
//! [`pi_core::tools::BashExecutor`] that runs each command with `terminal/create`, wrapped in
//! our own launcher, `pi-lsp sandbox-exec` ([`launcher_args`]), which puts itself in a session
//! and process group of its own, writes its pid to a file only this process knows, applies the
//! session's sandbox (the same `pi_core::sandbox` policy and OS backend as a command run here)
//! and then execs the shell.
//!
//! - The call shows the terminal: once created, a `tool_call_update` with content
//!   `{type: "terminal", terminalId}` (sent from here, so it is out before the release); the
//!   call is noted in [`Terminals`], so the sink sends no text for it and finishes it with the
//!   terminal as content.
//! - Output is followed with `terminal/output` every [`POLL`] while `terminal/wait_for_exit`
//!   waits; the model's result is built from it exactly as for a command run here (Pi's
//!   2,000 lines / 50 KB tail, the spill file, redaction, `Command exited with code N`).
//! - Abort (`session/cancel`) and the tool's timeout stop the command twice over: the launcher's
//!   process group gets SIGTERM, then SIGKILL after the grace, from here, and the client is
//!   asked `terminal/kill`. The terminal is always released (`terminal/release`), also when
//!   the tool is dropped mid-command.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol_schema::v1::{SessionUpdate, ToolCallUpdate, ToolCallUpdateFields};
use async_trait::async_trait;
use pi_core::platform::process::{self as tree, ProcessTree};
use pi_core::tools::{BashEnd, BashExecutor, BashRun};
use serde_json::{json, Value};

use crate::rpc::Conn;
use crate::updates::Terminals;

/// How often the terminal's output is read while the command runs.
pub const POLL: Duration = Duration::from_millis(100);

/// The `outputByteLimit` asked of the client: what it keeps of the output (from the end). The
/// output is read every [`POLL`], so only a command writing more than this between two reads
/// loses output to the model (the result then says so).
pub const OUTPUT_LIMIT: u64 = 4 << 20;

/// How long a stopped command's launcher gets to have written its pid file.
const PID_WAIT: Duration = Duration::from_secs(2);

/// The subcommand of the `pi-lsp` binary that launches a command for a client terminal.
pub const SUBCOMMAND: &str = "sandbox-exec";

/// The arguments of `pi-lsp sandbox-exec` for `run`: `sandbox-exec --cwd DIR --pid-file PATH
/// --sandbox MODE --network on|off [--writable DIR]… [--unset-env NAME]… -- PROGRAM ARGS…`
/// (the launcher's own parser: `pi_lsp::sandbox_exec::Args`).
pub fn launcher_args(run: &BashRun, pid_file: &Path) -> Vec<String> {
    let mut a = vec![
        SUBCOMMAND.to_string(),
        "--cwd".into(),
        run.cwd.display().to_string(),
        "--pid-file".into(),
        pid_file.display().to_string(),
        "--sandbox".into(),
        run.policy.mode.as_str().to_string(),
        "--network".into(),
        if run.policy.network { "on" } else { "off" }.into(),
    ];
    for w in &run.policy.writable {
        a.push("--writable".into());
        a.push(w.display().to_string());
    }
    for v in &run.env_remove {
        a.push("--unset-env".into());
        a.push(v.clone());
    }
    a.push("--".into());
    a.push(run.program.clone());
    a.extend(run.args.iter().cloned());
    a
}

/// The new output in `now` (the terminal's output as the client keeps it: the whole output, or
/// its end when `truncated`) after `prev` (what the last read returned). `None` for the new part
/// when the two do not overlap (more than the client keeps was written in between): then all of
/// `now` is new and something before it was lost.
pub fn new_output<'a>(prev: &str, now: &'a str) -> Option<&'a str> {
    if let Some(rest) = now.strip_prefix(prev) {
        return Some(rest);
    }
    if now.is_empty() {
        return Some("");
    }
    // The client dropped the start: `now` begins inside `prev`, or after it. Where `prev`'s
    // last 4 KiB are in `now`, what follows them is new.
    const TAIL: usize = 4096;
    let mut from = prev.len().saturating_sub(TAIL);
    while !prev.is_char_boundary(from) {
        from += 1;
    }
    let tail = &prev[from..];
    if let Some(i) = now.find(tail) {
        return Some(&now[i + tail.len()..]);
    }
    // Less than that of `prev` is left: the longest end of it `now` starts with.
    (from..prev.len())
        .filter(|&j| prev.is_char_boundary(j))
        .find(|&j| now.starts_with(&prev[j..]))
        .map(|j| &now[prev.len() - j..])
}

/// Runs session commands in the client's terminal; see the module doc.
pub struct TerminalExecutor {
    conn: Arc<Conn>,
    session_id: String,
    terminals: Terminals,
    launcher: PathBuf,
    /// A private folder (mode 0700, outside every sandbox's writable folders) for the
    /// launchers' pid files.
    pid_dir: PathBuf,
}

impl std::fmt::Debug for TerminalExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalExecutor")
            .field("session_id", &self.session_id)
            .field("launcher", &self.launcher)
            .finish_non_exhaustive()
    }
}

impl Drop for TerminalExecutor {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.pid_dir);
    }
}

impl TerminalExecutor {
    /// An executor for session `session_id` over `conn`, launching through `launcher` (the
    /// `pi-lsp` binary), noting its calls in `terminals`. `None` (logged) when its pid folder
    /// cannot be made.
    pub fn new(
        conn: Arc<Conn>,
        session_id: String,
        launcher: PathBuf,
        terminals: Terminals,
    ) -> Option<TerminalExecutor> {
        // Named like the session temp folders, so a server that dies leaves it to the next
        // one's sweep.
        let pid_dir = std::env::temp_dir().join(format!(
            "pi-lsp-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        if let Err(e) = pi_core::platform::fs::create_private_dir(&pid_dir) {
            tracing::warn!(
                "terminal: cannot make {}: {e}; bash runs here",
                pid_dir.display()
            );
            return None;
        }
        Some(TerminalExecutor {
            conn,
            session_id,
            terminals,
            launcher,
            pid_dir,
        })
    }

    async fn request(&self, method: &str, terminal: &str) -> Result<Value, String> {
        self.conn
            .request(
                method,
                json!({"sessionId": self.session_id, "terminalId": terminal}),
            )
            .await
            .map_err(|e| format!("{method}: {}", e.message))
    }
}

/// The launcher's process group, read from its pid file (waiting up to `wait` for it); `None`
/// when there is none (yet) or it names no plausible group (a pid of 0 or 1, or this
/// process's own).
async fn launched_group(pid_file: &Path, wait: Duration) -> Option<ProcessTree> {
    let until = tokio::time::Instant::now() + wait;
    loop {
        let pid = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok());
        if let Some(p) = pid {
            if p > 1 && p != std::process::id() {
                return ProcessTree::adopt(p).ok();
            }
            return None;
        }
        if tokio::time::Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Releases the terminal (and kills the launcher's group first when the command was not seen
/// to end) if the run is dropped before it released it itself.
struct Release {
    conn: Arc<Conn>,
    session_id: String,
    terminal: String,
    pid_file: PathBuf,
    armed: bool,
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.pid_file);
        if !self.armed {
            return;
        }
        tracing::debug!("terminal {}: dropped mid-command", self.terminal);
        let (conn, params) = (
            self.conn.clone(),
            json!({"sessionId": self.session_id, "terminalId": self.terminal}),
        );
        let pid_file = self.pid_file.clone();
        if let Ok(text) = std::fs::read_to_string(&pid_file) {
            if let Some(t) = text
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|p| *p > 1 && *p != std::process::id())
                .and_then(|p| ProcessTree::adopt(p).ok())
            {
                t.kill();
            }
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = conn.request("terminal/kill", params.clone()).await;
                let _ = conn.request("terminal/release", params).await;
            });
        }
    }
}

/// The exit status of `terminal/wait_for_exit` (or `terminal/output`'s `exitStatus`).
fn exited(v: &Value) -> BashEnd {
    BashEnd::Exited {
        code: v["exitCode"].as_i64().and_then(|c| i32::try_from(c).ok()),
        signal: v["signal"].as_str().map(str::to_string),
    }
}

#[async_trait]
impl BashExecutor for TerminalExecutor {
    async fn execute(&self, run: BashRun) -> BashEnd {
        let pid_file = self
            .pid_dir
            .join(format!("{}.pid", uuid::Uuid::new_v4().simple()));
        let env: Vec<Value> = run
            .env
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        let params = json!({
            "sessionId": self.session_id,
            "command": self.launcher.display().to_string(),
            "args": launcher_args(&run, &pid_file),
            "env": env,
            "cwd": run.cwd,
            "outputByteLimit": OUTPUT_LIMIT,
        });
        // Not raced with `stop`: a terminal the client creates after we stopped waiting would
        // never be released.
        let created = match self.conn.request("terminal/create", params).await {
            Ok(v) => v,
            Err(e) => return BashEnd::Failed(format!("terminal/create: {}", e.message)),
        };
        let Some(terminal) = created["terminalId"].as_str().map(str::to_string) else {
            return BashEnd::Failed("terminal/create: the answer has no terminalId".into());
        };
        let mut release = Release {
            conn: self.conn.clone(),
            session_id: self.session_id.clone(),
            terminal: terminal.clone(),
            pid_file: pid_file.clone(),
            armed: true,
        };
        self.terminals
            .lock()
            .insert(run.call_id.clone(), terminal.clone());
        crate::updates::send_update(
            &self.conn,
            &self.session_id,
            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                run.call_id.clone(),
                ToolCallUpdateFields::new()
                    .content(vec![crate::tools::terminal_content(terminal.clone())]),
            )),
        );
        let mut seen = String::new();
        let mut group: Option<ProcessTree> = None;
        // Reads the output, sends what is new; the exit status when the output carries one.
        let read = |seen: &mut String, v: &Value| {
            let now = v["output"].as_str().unwrap_or_default();
            let new = match new_output(seen, now) {
                Some(n) => n.to_string(),
                None => format!("\n[... output lost: more than {OUTPUT_LIMIT} bytes were written between two reads]\n{now}"),
            };
            *seen = now.to_string();
            new
        };
        let wait = self.request("terminal/wait_for_exit", &terminal);
        tokio::pin!(wait);
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let end = loop {
            tokio::select! {
                biased;
                _ = run.stop.cancelled() => {
                    // Our own kill of the group and the client's `terminal/kill`, at once.
                    let g = match group.take() {
                        Some(g) => Some(g),
                        None => launched_group(&pid_file, PID_WAIT).await,
                    };
                    let ours = async {
                        if let Some(g) = &g {
                            tree::stop(g, tree::KILL_GRACE).await;
                        }
                    };
                    let theirs = self.request("terminal/kill", &terminal);
                    let (_, killed) = tokio::join!(ours, theirs);
                    if let Err(e) = killed {
                        tracing::warn!("{e}");
                    }
                    // The exit, briefly: the output read below is then complete.
                    let _ = tokio::time::timeout(Duration::from_secs(2), &mut wait).await;
                    break BashEnd::Stopped;
                }
                r = &mut wait => break match r {
                    Ok(v) => exited(&v),
                    Err(e) => BashEnd::Failed(e),
                },
                _ = tick.tick() => {
                    if group.is_none() {
                        group = launched_group(&pid_file, Duration::ZERO).await;
                        if let Some(g) = &group {
                            tree::track(g);
                        }
                    }
                    if let Ok(v) = self.request("terminal/output", &terminal).await {
                        let new = read(&mut seen, &v);
                        if !new.is_empty() && run.output.send(new.into_bytes()).await.is_err() {
                            break BashEnd::Failed("the tool stopped reading".into());
                        }
                    }
                }
            }
        };
        // Whatever was written last.
        match self.request("terminal/output", &terminal).await {
            Ok(v) => {
                let new = read(&mut seen, &v);
                if !new.is_empty() {
                    let _ = run.output.send(new.into_bytes()).await;
                }
            }
            Err(e) => tracing::warn!("{e}"),
        }
        if let Err(e) = self.request("terminal/release", &terminal).await {
            tracing::warn!("{e}");
        }
        release.armed = false;
        drop(release);
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_output_follows_a_growing_and_a_truncated_buffer() {
        assert_eq!(new_output("", "abc"), Some("abc"));
        assert_eq!(new_output("abc", "abcdef"), Some("def"));
        assert_eq!(new_output("abc", "abc"), Some(""));
        // The client dropped the start: "bcdef" is the end of "abcdef".
        assert_eq!(new_output("abcd", "cdef"), Some("ef"));
        // A long output whose first 1,000 lines the client dropped.
        let prev: String = (0..5000).map(|i| format!("{i}\n")).collect();
        let now = format!("{}5000\n5001\n", &prev[prev.find("1000\n").unwrap()..]);
        assert_eq!(new_output(&prev, &now), Some("5000\n5001\n"));
        // No overlap at all: everything is new, something was lost.
        assert_eq!(new_output("abc", "xyz"), None);
    }
}
