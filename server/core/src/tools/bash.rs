//! `bash {command, timeout?}`: `bash -c` in the workspace, stdin closed, in its own process
//! group, with pagers and editor prompts disabled.
//!
//! - stdout and stderr are merged in arrival order and streamed as tool updates;
//! - a non-zero exit is an error result ending `Command exited with code N` (Pi's text);
//! - abort and timeout send SIGTERM to the whole group, then SIGKILL to whatever of the group is
//!   left after a short grace, even when the leader already exited (case BASH-03);
//! - when the shell exits while a background child still holds the pipes, output is read until
//!   it has been idle for 100 ms (at most 1 s more), then the pipes are closed on our side; the
//!   background process itself is left running in its group (case BASH-01);
//! - the result keeps the tail: 2,000 lines or 50 KB; past 1 MB the whole output is spilled to a
//!   temp file whose path the result names (Pi's notice), so memory stays bounded.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::future::BoxFuture;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use pi_ai::ToolSpec;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{parse_args, MAX_BYTES, MAX_LINES};
use crate::agent::{Tool, ToolContext, ToolError, ToolOutput};

/// Runs before every command; an `Err` text is prepended to the result as a warning.
pub type BeforeBash = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// Grace between SIGTERM and SIGKILL for the process group.
pub const KILL_GRACE: Duration = Duration::from_millis(300);
/// Output kept in memory before spilling to a temp file.
const SPILL_AT: usize = 1024 * 1024;

#[derive(Deserialize)]
struct Args {
    command: String,
    timeout: Option<f64>,
}

/// The `bash` tool.
pub struct BashTool {
    cwd: PathBuf,
    before: Option<BeforeBash>,
}

impl BashTool {
    pub fn new(cwd: PathBuf, before: Option<BeforeBash>) -> Self {
        BashTool { cwd, before }
    }
}

/// Merged output: everything until it grows past [`SPILL_AT`], then a spill file plus a tail.
struct Output {
    buf: Vec<u8>,
    spill_path: Option<PathBuf>,
    spill_file: Option<tokio::fs::File>,
    total_lines: usize,
    total_bytes: usize,
}

impl Output {
    async fn push(&mut self, chunk: &[u8]) {
        self.total_bytes += chunk.len();
        self.total_lines += chunk.iter().filter(|b| **b == b'\n').count();
        if let Some(f) = &mut self.spill_file {
            let _ = f.write_all(chunk).await;
        }
        self.buf.extend_from_slice(chunk);
        if self.buf.len() > SPILL_AT {
            if self.spill_path.is_none() {
                let path = spill_path();
                if let Ok(mut f) = tokio::fs::File::create(&path).await {
                    let _ = f.write_all(&self.buf).await;
                    self.spill_file = Some(f);
                }
                self.spill_path = Some(path);
            }
            // Keep a tail twice the result limit.
            let keep = 2 * MAX_BYTES;
            let cut = self.buf.len() - keep;
            self.buf.drain(..cut);
        }
    }

    /// The tail within Pi's limits, and a notice when anything was cut.
    async fn render(&mut self) -> (String, Option<Value>) {
        let text = String::from_utf8_lossy(&self.buf).into_owned();
        let lines: Vec<&str> = text.split('\n').collect();
        let mut kept: Vec<&str> = Vec::new();
        let mut bytes = 0;
        for l in lines.iter().rev() {
            if kept.len() >= MAX_LINES || bytes + l.len() + 1 > MAX_BYTES {
                break;
            }
            bytes += l.len() + 1;
            kept.push(l);
        }
        kept.reverse();
        let truncated = self.spill_path.is_some() || kept.len() < lines.len();
        let mut out = kept.join("\n");
        if !truncated {
            return (out, None);
        }
        if self.spill_path.is_none() {
            let path = spill_path();
            let _ = tokio::fs::write(&path, &self.buf).await;
            self.spill_path = Some(path);
        }
        if let Some(f) = &mut self.spill_file {
            let _ = f.flush().await;
        }
        let total = self.total_lines + usize::from(!text.ends_with('\n'));
        let first = total.saturating_sub(kept.len()) + 1;
        let path = self
            .spill_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        out.push_str(&format!(
            "\n\n[Showing lines {first}-{total} of {total}. Full output: {path}]"
        ));
        (
            out,
            Some(
                json!({"truncation": {"truncated": true, "totalLines": total, "totalBytes": self.total_bytes}, "fullOutputPath": path}),
            ),
        )
    }
}

fn spill_path() -> PathBuf {
    std::env::temp_dir().join(format!("pi-bash-{}.log", uuid::Uuid::new_v4()))
}

fn signal_group(pgid: i32, sig: Option<Signal>) -> bool {
    killpg(Pid::from_raw(pgid), sig).is_ok()
}

/// True while a live (not zombie) process is in group `pgid`. Reads `/proc` where it exists,
/// since exited members stay visible to `kill(-pgid, 0)` until someone reaps them.
fn group_alive(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return signal_group(pgid, None);
    };
    dir.filter_map(Result::ok).any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        // Fields after the parenthesised command: state ppid pgrp …
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            return false;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("Z");
        let pgrp = f.nth(1).and_then(|p| p.parse::<i32>().ok());
        pgrp == Some(pgid) && state != "Z" && state != "X"
    })
}

/// SIGTERM to the group, then SIGKILL to what is left after [`KILL_GRACE`].
pub async fn kill_group(pgid: i32) {
    if !signal_group(pgid, Some(Signal::SIGTERM)) {
        return;
    }
    let deadline = Instant::now() + KILL_GRACE;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if !group_alive(pgid) {
            return;
        }
    }
    signal_group(pgid, Some(Signal::SIGKILL));
}

enum End {
    Exited(std::process::ExitStatus),
    Aborted,
    TimedOut(f64),
    Failed(String),
}

#[async_trait]
impl Tool for BashTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "bash".into(),
            description: format!("Execute a bash command in the current working directory. Returns stdout and stderr. Output is truncated to last {MAX_LINES} lines or 50KB (whichever is hit first). If truncated, full output is saved to a temp file. Optionally provide a timeout in seconds."),
            parameters: json!({"type":"object","required":["command"],"properties":{
                "command":{"type":"string","description":"Bash command to execute"},
                "timeout":{"type":"number","description":"Timeout in seconds (optional, no default timeout)"}}}),
        }
    }

    /// Mutates the workspace: a batch containing it runs in call order.
    fn sequential(&self) -> bool {
        true
    }

    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let a: Args = parse_args("bash", args)?;
        let mut warning = None;
        if let Some(before) = &self.before {
            if let Err(w) = before().await {
                warning = Some(w);
            }
        }
        let mut cmd = tokio::process::Command::new("bash");
        cmd.arg("-c")
            .arg(&a.command)
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("PAGER", "cat")
            .env("GIT_PAGER", "cat")
            .env("GIT_EDITOR", "true")
            .env("EDITOR", "true")
            .env("VISUAL", "true")
            .env("GIT_TERMINAL_PROMPT", "0")
            .process_group(0)
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| ToolError::new(format!("Could not start bash: {e}")))?;
        let pgid = child.id().map(|p| p as i32).unwrap_or(0);
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
        let mut readers = Vec::new();
        for pipe in [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            readers.push(tokio::spawn(async move {
                let mut pipe = pipe;
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    match pipe.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if tx.send(buf[..n].to_vec()).await.is_err() {
                                break;
                            }
                        }
                    }
                }
            }));
        }
        drop(tx);
        let mut out = Output {
            buf: Vec::new(),
            spill_path: None,
            spill_file: None,
            total_lines: 0,
            total_bytes: 0,
        };
        let timeout = a.timeout.filter(|t| *t > 0.0);
        let deadline = timeout.map(|t| tokio::time::Instant::now() + Duration::from_secs_f64(t));
        let mut last_update = Instant::now();
        let mut pipes_open = true;
        let end = loop {
            tokio::select! {
                biased;
                _ = ctx.cancel.cancelled() => { kill_group(pgid).await; let _ = child.wait().await; break End::Aborted; }
                _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                    kill_group(pgid).await; let _ = child.wait().await; break End::TimedOut(timeout.unwrap_or(0.0));
                }
                chunk = rx.recv(), if pipes_open => match chunk {
                    Some(c) => {
                        out.push(&c).await;
                        if last_update.elapsed() >= Duration::from_millis(100) {
                            last_update = Instant::now();
                            (ctx.on_update)(ToolOutput::text(String::from_utf8_lossy(&out.buf).into_owned()));
                        }
                    }
                    None => pipes_open = false,
                },
                status = child.wait() => match status {
                    Ok(s) => break End::Exited(s),
                    Err(e) => break End::Failed(e.to_string()),
                },
            }
        };
        // Collect what is still in flight: idle grace 100 ms, hard cap 1 s (BASH-01).
        let cap = Instant::now() + Duration::from_secs(1);
        while pipes_open && Instant::now() < cap {
            match tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
                Ok(Some(c)) => out.push(&c).await,
                _ => break,
            }
        }
        for r in readers {
            r.abort();
        }
        let (mut text, details) = out.render().await;
        if let Some(w) = warning {
            text = format!("[warning: {w}]\n{text}");
        }
        let body = if text.is_empty() {
            "(no output)".to_string()
        } else {
            text
        };
        match end {
            End::Exited(s) if s.success() => Ok(ToolOutput {
                terminate: false,
                content: vec![pi_ai::ContentBlock::text(body)],
                details,
            }),
            End::Exited(s) => {
                use std::os::unix::process::ExitStatusExt;
                let why = match (s.code(), s.signal()) {
                    (Some(c), _) => format!("Command exited with code {c}"),
                    (None, Some(sig)) => format!("Command was killed by signal {sig}"),
                    _ => "Command failed".to_string(),
                };
                Err(ToolError {
                    message: format!("{body}\n\n{why}"),
                    details,
                })
            }
            End::Aborted => Err(ToolError {
                message: format!("{body}\n\nCommand aborted"),
                details,
            }),
            End::TimedOut(t) => Err(ToolError {
                message: format!("{body}\n\nCommand timed out after {t} seconds"),
                details,
            }),
            End::Failed(e) => Err(ToolError {
                message: format!("{body}\n\nCommand failed: {e}"),
                details,
            }),
        }
    }
}
