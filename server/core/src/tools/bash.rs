//! `bash {command, timeout?}`: the platform's bash (`bash -c`; the shell by Pi 1.6's rules:
//! [`crate::platform::shell`]) in the workspace, stdin closed, in its own process tree (a process
//! group; a job object on Windows: [`crate::platform::process`]), with pagers and editor prompts
//! disabled.
//!
//! - stdout and stderr are merged in arrival order and streamed as tool updates;
//! - a non-zero exit is an error result ending `Command exited with code N` (Pi's text);
//! - abort and timeout send SIGTERM to the whole group, then SIGKILL to whatever of the group is
//!   left after a short grace, even when the leader already exited (case BASH-03; on Windows
//!   the job is terminated at once);
//! - when the shell exits while a background child still holds the pipes, output is read until
//!   it has been idle for 100 ms (at most 1 s more), then the pipes are closed on our side; the
//!   background process itself is left running in its group (case BASH-01);
//!   If the tool is dropped mid-command (the loop stopped waiting), the group gets SIGKILL;
//! - the result keeps the tail: 2,000 lines or 50 KB (Pi's limits and notice texts); lines
//!   longer than 2,000 bytes are cut at a character boundary with `... [line truncated: N
//!   bytes]`; whenever anything is cut, the full raw output is in a temp file
//!   (`$TMPDIR/pi-bash-<uuid>.log`) named in the result. Memory stays bounded (~4 × 50 KB of
//!   tail plus at most 50 KB before the spill file opens) whatever the command prints; the exit
//!   code is kept.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::future::BoxFuture;
use pi_ai::ToolSpec;
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::Write as _;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use super::{parse_args, MAX_BYTES, MAX_LINES};
use crate::agent::{Tool, ToolContext, ToolError, ToolOutput};
use crate::sandbox::{
    likely_denial, Approver, Decision, Enforcement, PermissionRequest, Policy, Sandbox,
    SandboxSettings,
};
use std::sync::atomic::{AtomicBool, Ordering};

/// Runs before every command; an `Err` text is prepended to the result as a warning.
pub type BeforeBash = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// Where a session's `bash` commands run when not in this process (the hook an edge uses to
/// run them elsewhere: ACP's client terminal, `terminal/create`). The tool keeps everything
/// else: the shell lookup, the sandbox policy (and its approvals and denial re-runs), the
/// environment, the timeout, the abort, and the result (output rendered and cut with Pi's
/// limits, the spill file, redaction, `details.exitCode`, Pi's ending texts). Without an
/// executor, or for a shell that takes its command on stdin, commands run here.
#[async_trait]
pub trait BashExecutor: Send + Sync + std::fmt::Debug {
    /// Runs `run` to its end: its output (stdout and stderr merged, raw bytes) sent to
    /// `run.output` as it arrives; when `run.stop` fires (abort or timeout), the command and
    /// everything it started are stopped and [`BashEnd::Stopped`] returned once they are.
    async fn execute(&self, run: BashRun) -> BashEnd;
}

/// One command for a [`BashExecutor`].
pub struct BashRun {
    /// The model's tool call id.
    pub call_id: String,
    /// The command as the model wrote it.
    pub command: String,
    /// The shell to run ([`crate::platform::shell`], as the tool would run it here).
    pub program: String,
    /// The shell's arguments, the command last (`-c`, `<command>`).
    pub args: Vec<String>,
    /// The working directory (the workspace).
    pub cwd: std::path::PathBuf,
    /// Variables to set (pagers and editors disabled, `TMPDIR` = the session's temp folder,
    /// Pi's session variables).
    pub env: Vec<(String, String)>,
    /// Variables to remove from whatever environment the command inherits (provider keys,
    /// stale session variables).
    pub env_remove: Vec<String>,
    /// The sandbox policy the command must run under ([`crate::sandbox::exec`] applies it).
    pub policy: Policy,
    /// Where the output goes, as it arrives.
    pub output: mpsc::Sender<Vec<u8>>,
    /// Fired on abort or timeout: stop the command and everything it started.
    pub stop: tokio_util::sync::CancellationToken,
}

/// How a command run by a [`BashExecutor`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BashEnd {
    /// It exited: its code, or the name or number of the signal that killed it.
    Exited {
        code: Option<i32>,
        signal: Option<String>,
    },
    /// It was stopped after [`BashRun::stop`] fired.
    Stopped,
    /// It could not be run, or its end could not be learnt (the text says why).
    Failed(String),
}

/// Grace between SIGTERM and SIGKILL for the process group.
pub const KILL_GRACE: Duration = crate::platform::process::KILL_GRACE;
/// Longest output line kept, in bytes (cut at a char boundary, then a marker).
pub const MAX_LINE_BYTES: usize = 2000;
/// Rolling tail kept in memory: twice the result limit (Pi's `maxRollingBytes`).
const TAIL_KEEP: usize = 2 * MAX_BYTES;

#[derive(Deserialize)]
struct Args {
    command: String,
    timeout: Option<f64>,
}

/// The `bash` tool.
pub struct BashTool {
    cwd: PathBuf,
    before: Option<BeforeBash>,
    sandbox: Sandbox,
    approver: Option<Arc<dyn Approver>>,
    /// The first result of this tool set carried the sandbox notice.
    noted: AtomicBool,
    /// Pi 1.6's session variables for the commands ([`SESSION_ENV_VARS`]): set ones exported,
    /// the others removed from the inherited environment.
    session_env: Vec<(String, String)>,
    /// Runs the commands elsewhere ([`BashExecutor`]); `None`: here.
    executor: Option<Arc<dyn BashExecutor>>,
}

/// The variables Pi 1.6's `bash` exports about the session (`core/tools/bash.js`,
/// `resolveSpawnContext`); an inherited value of any of them is never passed on.
pub const SESSION_ENV_VARS: [&str; 5] = [
    "PI_SESSION_ID",
    "PI_SESSION_FILE",
    "PI_PROVIDER",
    "PI_MODEL",
    "PI_REASONING_LEVEL",
];

impl BashTool {
    /// A bash tool running commands in `cwd` under the sandbox policy of `cwd`'s settings
    /// ([`SandboxSettings::for_workspace`]); `before` runs before each command. Without an
    /// approver, nothing leaves the sandbox.
    pub fn new(cwd: PathBuf, before: Option<BeforeBash>) -> Self {
        let sandbox = Sandbox::new(&cwd, &SandboxSettings::for_workspace(&cwd));
        Self::with_sandbox(cwd, before, sandbox, None)
    }

    /// A bash tool with an explicit `sandbox`, and `approver` to ask before a command runs
    /// outside it (after a likely sandbox denial, or when the sandbox cannot be enforced).
    pub fn with_sandbox(
        cwd: PathBuf,
        before: Option<BeforeBash>,
        sandbox: Sandbox,
        approver: Option<Arc<dyn Approver>>,
    ) -> Self {
        BashTool {
            cwd,
            before,
            sandbox,
            approver,
            noted: AtomicBool::new(false),
            session_env: Vec::new(),
            executor: None,
        }
    }

    /// This tool exporting `env` (names of [`SESSION_ENV_VARS`]) to its commands.
    pub fn with_session_env(mut self, env: Vec<(String, String)>) -> Self {
        self.session_env = env;
        self
    }

    /// This tool running its commands through `executor` (`None`: here).
    pub fn with_executor(mut self, executor: Option<Arc<dyn BashExecutor>>) -> Self {
        self.executor = executor;
        self
    }

    /// The session's sandbox.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }
}

/// Says once per process, on stderr, that a sandbox is not enforced.
fn warn_once(text: &str) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| tracing::warn!("{text}"));
}

/// Merged output with bounded memory: the raw bytes go to a spill file once anything would be
/// truncated (more than 50 KB or 2,000 lines, or a line longer than [`MAX_LINE_BYTES`]); in
/// memory only a line-clipped rolling tail of at most ~2 × [`TAIL_KEEP`] bytes is kept.
struct Output {
    /// Raw bytes not yet in a spill file (at most [`MAX_BYTES`] + one chunk).
    raw: Vec<u8>,
    /// Clipped tail, starting at a line boundary.
    tail: Vec<u8>,
    spill_path: Option<PathBuf>,
    spill_file: Option<std::io::BufWriter<std::fs::File>>,
    total_lines: usize,
    total_bytes: usize,
    /// Bytes of the current line so far (raw).
    line_bytes: usize,
    /// The current line passed [`MAX_LINE_BYTES`] and is being dropped.
    clipping: bool,
    clipped_lines: usize,
    /// When the command started (Pi 1.6's `wall_time_seconds`).
    started: Instant,
}

/// Pi 1.6's `STRUCTURED_OUTPUT_MAX_BYTES` (`core/tools/bash.js`): the most of a command's
/// output `structuredContent.output` holds; past it, the first and last halves around Pi's
/// omission marker.
const STRUCTURED_MAX_BYTES: u64 = 1024 * 1024;

/// `b` without an incomplete UTF-8 sequence at its end (as a streaming decoder holds it back).
fn without_cut_char(b: &[u8]) -> &[u8] {
    for back in 1..=b.len().min(3) {
        let i = b.len() - back;
        let lead = b[i];
        if lead & 0xC0 == 0x80 {
            continue;
        }
        let width = match lead {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if back < width { &b[..i] } else { b };
    }
    b
}

impl Output {
    fn new() -> Self {
        Output {
            started: Instant::now(),
            raw: Vec::new(),
            tail: Vec::new(),
            spill_path: None,
            spill_file: None,
            total_lines: 0,
            total_bytes: 0,
            line_bytes: 0,
            clipping: false,
            clipped_lines: 0,
        }
    }

    /// The whole output for `structuredContent.output` and whether it was cut, as Pi 1.6's
    /// `OutputAccumulator.readFullOutput(1 MiB)`: the raw bytes (colours and carriage
    /// returns kept) decoded as lossy UTF-8; more than [`STRUCTURED_MAX_BYTES`] in the spill
    /// file: its first and last halves (cut at character boundaries) around `[... N bytes
    /// omitted ...]`. Secrets redacted (docs/security.md). Call after [`Output::render`],
    /// which wrote and redacted the spill file.
    fn full(&self) -> (String, bool) {
        let Some(path) = &self.spill_path else {
            let text = String::from_utf8_lossy(&self.raw);
            return (pi_ai::keys::redact_secrets(&text), false);
        };
        let read = || -> std::io::Result<(String, bool)> {
            let file = std::fs::File::open(path)?;
            let size = file.metadata()?.len();
            if size <= STRUCTURED_MAX_BYTES {
                let bytes = std::fs::read(path)?;
                return Ok((String::from_utf8_lossy(&bytes).into_owned(), false));
            }
            let head_len = STRUCTURED_MAX_BYTES / 2;
            let tail_len = STRUCTURED_MAX_BYTES - head_len;
            let (mut head, mut tail) = (vec![0; head_len as usize], vec![0; tail_len as usize]);
            crate::platform::fs::read_exact_at(&file, &mut head, 0)?;
            crate::platform::fs::read_exact_at(&file, &mut tail, size - tail_len)?;
            let from = tail.iter().take_while(|b| (**b & 0xC0) == 0x80).count();
            Ok((
                format!(
                    "{}\n\n[... {} bytes omitted ...]\n\n{}",
                    String::from_utf8_lossy(without_cut_char(&head)),
                    size - head_len - tail_len,
                    String::from_utf8_lossy(&tail[from..])
                ),
                true,
            ))
        };
        read().unwrap_or_else(|e| {
            tracing::warn!("bash: cannot read the full output {}: {e}", path.display());
            (String::new(), true)
        })
    }

    fn needs_spill(&self) -> bool {
        self.total_bytes > MAX_BYTES || self.lines_total() > MAX_LINES || self.clipped_lines > 0
    }

    fn ensure_spill(&mut self) {
        if self.spill_path.is_some() {
            return;
        }
        let path = spill_path();
        if let Ok(f) = std::fs::File::create(&path) {
            let mut w = std::io::BufWriter::with_capacity(256 * 1024, f);
            let _ = w.write_all(&self.raw);
            self.spill_file = Some(w);
        }
        self.raw = Vec::new();
        self.spill_path = Some(path);
    }

    fn end_clip(&mut self) {
        if self.clipping {
            let marker = format!("... [line truncated: {} bytes]", self.line_bytes);
            self.tail.extend_from_slice(marker.as_bytes());
            self.clipping = false;
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        self.total_bytes += chunk.len();
        for &b in chunk {
            if b == b'\n' {
                self.end_clip();
                self.total_lines += 1;
                self.line_bytes = 0;
                self.tail.push(b);
                continue;
            }
            self.line_bytes += 1;
            if self.clipping {
                continue;
            }
            // Past the limit, stop at the next char start (continuation bytes finish a char).
            if self.line_bytes > MAX_LINE_BYTES && (b & 0xC0) != 0x80 {
                self.clipping = true;
                self.clipped_lines += 1;
                continue;
            }
            self.tail.push(b);
        }
        if let Some(f) = &mut self.spill_file {
            let _ = f.write_all(chunk);
        } else {
            self.raw.extend_from_slice(chunk);
            if self.needs_spill() {
                self.ensure_spill();
            }
        }
        if self.tail.len() > 2 * TAIL_KEEP {
            let cut = self.tail.len() - TAIL_KEEP;
            // Start at a line boundary (lines are clipped, so one is near).
            let at = self.tail[cut..]
                .iter()
                .position(|b| *b == b'\n')
                .map(|p| cut + p + 1)
                .unwrap_or(cut);
            self.tail.drain(..at);
        }
    }

    /// Whether the output so far ends a line (a final `\n`, or nothing yet).
    fn ends_line(&self) -> bool {
        self.line_bytes == 0
    }

    /// Lines counted the way Pi 1.6 counts them (truncate.js `splitLinesForCounting`: the
    /// `\n`-separated pieces, a final `\n` ending the last line rather than starting one).
    fn lines_total(&self) -> usize {
        self.total_lines + usize::from(!self.ends_line())
    }

    /// The tail within Pi's limits and, when anything was cut, Pi's notice and details.
    fn render(&mut self) -> (String, Option<Value>) {
        self.end_clip();
        if self.needs_spill() {
            self.ensure_spill();
        }
        if let Some(f) = &mut self.spill_file {
            let _ = f.flush();
        }
        // The spill file is written by the server; keys never stay in it (docs/security.md).
        if let Some(p) = &self.spill_path {
            if let Err(e) = pi_ai::keys::redact_file(p) {
                tracing::warn!("cannot redact {}: {e}", p.display());
            }
        }
        let text = plain_text(&self.tail);
        // Pi's lines: a final newline ends the last line (it is kept when nothing is cut).
        let body = match text.strip_suffix('\n') {
            Some(body) if self.ends_line() => body,
            _ => text.as_str(),
        };
        let lines: Vec<&str> = body.split('\n').collect();
        let mut kept: Vec<&str> = Vec::new();
        let mut bytes = 0;
        let mut by_bytes = false;
        for l in lines.iter().rev() {
            if kept.len() >= MAX_LINES {
                break;
            }
            let add = l.len() + usize::from(!kept.is_empty());
            if bytes + add > MAX_BYTES {
                by_bytes = true;
                break;
            }
            bytes += add;
            kept.push(l);
        }
        kept.reverse();
        let total = self.lines_total();
        let mut out = if kept.len() >= total {
            text.clone()
        } else {
            kept.join("\n")
        };
        let Some(path) = self.spill_path.as_ref().map(|p| p.display().to_string()) else {
            return (out, None);
        };
        let first = total.saturating_sub(kept.len()) + 1;
        let mut notice = if kept.len() < total {
            if by_bytes {
                format!("Showing lines {first}-{total} of {total} (50.0KB limit).")
            } else {
                format!("Showing lines {first}-{total} of {total}.")
            }
        } else {
            String::new()
        };
        if self.clipped_lines > 0 {
            if !notice.is_empty() {
                notice.push(' ');
            }
            notice.push_str(&format!(
                "{} line(s) longer than {MAX_LINE_BYTES} bytes were cut.",
                self.clipped_lines
            ));
        }
        out.push_str(&format!("\n\n[{notice} Full output: {path}]"));
        let truncation = json!({
            "truncated": true,
            "truncatedBy": if by_bytes { "bytes" } else { "lines" },
            "totalLines": total,
            "totalBytes": self.total_bytes,
            "outputLines": kept.len(),
            "outputBytes": bytes,
            "clippedLines": self.clipped_lines,
            "maxLines": MAX_LINES,
            "maxBytes": MAX_BYTES,
        });
        (
            out,
            Some(json!({"truncation": truncation, "fullOutputPath": path})),
        )
    }

    /// The last [`MAX_BYTES`] of the tail, for progress updates.
    fn preview(&self) -> String {
        let from = self.tail.len().saturating_sub(MAX_BYTES);
        let mut s = &self.tail[from..];
        while let Some((b, rest)) = s.split_first() {
            if (b & 0xC0) == 0x80 {
                s = rest;
            } else {
                break;
            }
        }
        String::from_utf8_lossy(s).into_owned()
    }
}

/// `text` (a bash result's text, its status line put aside) without the truncation notice
/// [`Output`] puts after the tail when it cut the output to its file `full_output_path`:
/// `\n\n[… Full output: PATH]`. What is left is the plain tail Pi 1.6's `executeBash` keeps for
/// a user's own command (bash-executor.js: `truncateTail(…).content`, no notice). A text
/// without the notice is returned whole.
pub fn without_truncation_notice<'a>(text: &'a str, full_output_path: &str) -> &'a str {
    let end = format!(" Full output: {full_output_path}]");
    match text
        .strip_suffix(end.as_str())
        .and_then(|t| t.rsplit_once("\n\n["))
    {
        Some((tail, _)) => tail,
        None => text,
    }
}

/// What a terminal would leave on screen, as plain text for the model (issue "clients, round
/// 2", item 12): escape sequences (colours, cursor moves, OSC titles/links) removed by
/// `strip-ansi-escapes` (a VT parser), and each line's carriage-return rewrites collapsed to
/// what was written last (`50%\r100%` → `100%`; a CRLF ending is only an ending). Progress
/// updates stream the raw bytes, so an editor can still render colours while a command runs;
/// the spill file keeps the raw output.
fn plain_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut collapsed = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            collapsed.push('\n');
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        collapsed.push_str(line.rsplit('\r').find(|seg| !seg.is_empty()).unwrap_or(""));
    }
    strip_ansi_escapes::strip_str(&collapsed)
}

fn spill_path() -> PathBuf {
    std::env::temp_dir().join(format!("pi-bash-{}.log", uuid::Uuid::new_v4()))
}

use crate::platform::process::{self as tree, ProcessTree};

/// Stops a command's process tree: SIGTERM to the group, then SIGKILL to what is left after
/// [`KILL_GRACE`] (Windows: the job terminated).
pub async fn kill_group(t: &ProcessTree) {
    tree::stop(t, KILL_GRACE).await;
}

/// Stops every process tree a `bash` command of this process was started in and that still
/// has a live member (the running commands and what finished ones left in the background,
/// BASH-01), all at once ([`crate::platform::process::stop_all`]). Returns how many there
/// were. Used when the process goes away (the server's shutdown path); a run's own abort stops
/// its command's tree through [`kill_group`].
pub async fn kill_all_groups() -> usize {
    tree::stop_all().await
}

/// Kills every tracked process tree that still has a live member, at once (no grace): for an
/// exit that cannot wait. Returns how many there were.
pub fn kill_all_groups_now() -> usize {
    tree::kill_all_now()
}

/// Kills the whole tree if the tool's future is dropped while the command runs (the loop gave
/// up on it); disarmed once the command ended or was killed the normal way.
struct GroupGuard {
    tree: Option<ProcessTree>,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let (true, Some(t)) = (self.armed, &self.tree) {
            t.kill();
        }
    }
}

enum End {
    Exited(Exit),
    Aborted,
    TimedOut(f64),
    Failed(String),
}

/// How a command that ran to its end exited: its code, or the signal that killed it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Exit {
    code: Option<i32>,
    signal: Option<String>,
}

impl Exit {
    fn of(s: &std::process::ExitStatus) -> Exit {
        Exit {
            code: s.code(),
            signal: tree::exit_signal(s).map(|n| n.to_string()),
        }
    }

    fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// One finished run of a command: how it ended, its rendered output and its details (Pi's
/// truncation keys when it was cut, and `exitCode`).
struct Ran {
    end: End,
    /// The output as the result shows it; `None` when there was none (a command that exited
    /// says `(no output)`, an aborted or timed-out one says only its status, as Pi 1.6's
    /// `formatOutput(snapshot, "")` on those paths).
    body: Option<String>,
    details: Option<Value>,
    /// Pi 1.6's `structuredContent` of a command that exited with a code: `{output,
    /// truncated, full_output_path?, exit_code, wall_time_seconds}` ([`Output::full`]).
    structured: Option<Value>,
}

/// The `details` of a bash result: Pi's (`truncation`, `fullOutputPath`, when the output was
/// cut) plus `exitCode`, the process's exit status as a number, `null` when it did not exit on
/// its own (killed by a signal, aborted, timed out, or never waited for). Taken from the
/// process status, never from the text.
fn with_exit_code(details: Option<Value>, end: &End) -> Value {
    let code = match end {
        End::Exited(s) => s.code,
        End::Aborted | End::TimedOut(_) | End::Failed(_) => None,
    };
    let mut details = match details {
        Some(Value::Object(o)) => o,
        _ => serde_json::Map::new(),
    };
    details.insert("exitCode".into(), json!(code));
    Value::Object(details)
}

impl Ran {
    /// The run that ended as `end` with the output `out` collected: Pi's tail (spill file
    /// named when cut), secrets redacted, `(no output)` for none, `details.exitCode` from
    /// `end`. The one way both paths (here and a client's terminal) build it.
    fn new(end: End, out: &mut Output) -> Ran {
        let (text, details) = out.render();
        let body = (!text.is_empty()).then(|| pi_ai::keys::redact_secrets(&text));
        let details = Some(with_exit_code(details, &end));
        let structured = match &end {
            End::Exited(Exit {
                code: Some(code), ..
            }) => {
                let (output, truncated) = out.full();
                let mut v = json!({"output": output, "truncated": truncated});
                if let (true, Some(p)) = (truncated, &out.spill_path) {
                    v["full_output_path"] = json!(p.display().to_string());
                }
                v["exit_code"] = json!(code);
                // Pi's `Math.round(ms / 100) / 10`: tenths of a second.
                // A whole number of seconds is written as JavaScript writes it (`0`, not `0.0`).
                let tenths = (out.started.elapsed().as_secs_f64() * 10.0).round();
                v["wall_time_seconds"] = if tenths % 10.0 == 0.0 {
                    json!((tenths / 10.0) as u64)
                } else {
                    json!(tenths / 10.0)
                };
                Some(v)
            }
            _ => None,
        };
        Ran {
            end,
            body,
            details,
            structured,
        }
    }

    fn failed_by_exit(&self) -> bool {
        matches!(&self.end, End::Exited(s) if !s.success())
    }

    /// The tool result: Pi's texts for each ending, `prefix` lines first.
    fn finish(self, prefix: &[String]) -> Result<ToolOutput, ToolError> {
        let exited = matches!(self.end, End::Exited(_));
        let mut body = match self.body {
            Some(b) => b,
            None if exited => "(no output)".to_string(),
            None => String::new(),
        };
        if !prefix.is_empty() {
            body = match body.is_empty() {
                true => prefix.join("\n"),
                false => format!("{}\n{body}", prefix.join("\n")),
            };
        }
        // Pi's `appendStatus`: the status after a blank line, alone when there is no text.
        let status = |s: String| match body.is_empty() {
            true => s,
            false => format!("{body}\n\n{s}"),
        };
        let details = self.details;
        match self.end {
            End::Exited(s) if s.success() => Ok(ToolOutput {
                content: vec![pi_ai::ContentBlock::text(body)],
                details,
                structured_content: self.structured,
                ..Default::default()
            }),
            // With its structured content when it exited with a code: Pi 1.6 returns that as
            // a result marked `isError`, not as a thrown error.
            End::Exited(s) => Err(ToolError {
                message: status(exit_text(&s)),
                details,
                structured_content: self.structured.map(Box::new),
            }),
            End::Aborted => Err(ToolError {
                message: status("Command aborted".into()),
                details,
                ..Default::default()
            }),
            End::TimedOut(t) => Err(ToolError {
                message: status(format!("Command timed out after {t} seconds")),
                details,
                ..Default::default()
            }),
            End::Failed(e) => Err(ToolError {
                message: status(format!("Command failed: {e}")),
                details,
                ..Default::default()
            }),
        }
    }
}

/// Pi's status line for a command that did not exit with 0 (the texts of
/// [`crate::platform::process::exit_text`]): `Command exited with code N`, `Command was killed
/// by signal N`, else `Command failed`.
fn exit_text(s: &Exit) -> String {
    match (s.code, &s.signal) {
        (Some(c), _) => format!("Command exited with code {c}"),
        (None, Some(sig)) => format!("Command was killed by signal {sig}"),
        _ => "Command failed".to_string(),
    }
}

impl BashTool {
    /// The environment of a command: the variables to remove from what it inherits (provider
    /// keys stay with the server, docs/security.md; stale session variables), then the ones to
    /// set (pagers and editor prompts off, `TMPDIR` = the session's temp folder, Pi's session
    /// variables).
    fn command_env(&self) -> (Vec<(String, String)>, Vec<String>) {
        let mut remove = pi_ai::keys::secret_env_vars();
        remove.extend(SESSION_ENV_VARS.iter().map(|v| v.to_string()));
        let mut set: Vec<(String, String)> = [
            ("PAGER", "cat"),
            ("GIT_PAGER", "cat"),
            ("GIT_EDITOR", "true"),
            ("EDITOR", "true"),
            ("VISUAL", "true"),
            ("GIT_TERMINAL_PROMPT", "0"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        set.push((
            "TMPDIR".into(),
            self.sandbox.tmp_dir().to_string_lossy().into_owned(),
        ));
        set.extend(self.session_env.iter().cloned());
        remove.retain(|r| !set.iter().any(|(k, _)| k == r));
        (set, remove)
    }

    /// Runs the command through `executor` (`run` filled in with the environment, the output
    /// channel and the stop token here): the same timeout, abort, progress updates and
    /// rendering as a command run here.
    async fn run_elsewhere(
        &self,
        executor: &dyn BashExecutor,
        ctx: &ToolContext,
        a: &Args,
        mut run: BashRun,
    ) -> Ran {
        let (set, remove) = self.command_env();
        run.env = set;
        run.env_remove = remove;
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
        run.output = tx;
        let stop = run.stop.clone();
        // Stops the command if this future is dropped (the loop gave up on it).
        let _stop_on_drop = stop.clone().drop_guard();
        let timeout = a.timeout.filter(|t| *t > 0.0);
        let deadline = timeout.map(|t| tokio::time::Instant::now() + Duration::from_secs_f64(t));
        let fut = executor.execute(run);
        tokio::pin!(fut);
        let mut out = Output::new();
        let mut progress = Progress::new();
        let mut why: Option<End> = None;
        let mut ended = None;
        while ended.is_none() {
            tokio::select! {
                biased;
                _ = ctx.cancel.cancelled(), if why.is_none() => {
                    why = Some(End::Aborted);
                    stop.cancel();
                }
                _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } }, if why.is_none() => {
                    why = Some(End::TimedOut(timeout.unwrap_or(0.0)));
                    stop.cancel();
                }
                Some(c) = rx.recv() => {
                    out.push(&c);
                    progress.output(ctx, &out);
                }
                _ = progress.trailing_edge() => progress.send(ctx, &out),
                e = &mut fut => ended = Some(e),
            }
        }
        while let Ok(c) = rx.try_recv() {
            out.push(&c);
        }
        let end = match (why, ended) {
            (Some(w), _) => w,
            (None, Some(BashEnd::Exited { code, signal })) => End::Exited(Exit { code, signal }),
            (None, Some(BashEnd::Failed(e))) => End::Failed(e),
            (None, _) => End::Aborted,
        };
        Ran::new(end, &mut out)
    }

    /// Asks the approver (if any) while watching for abort; `None` = aborted.
    async fn ask(&self, ctx: &ToolContext, a: &Args, reason: String) -> Option<Decision> {
        let Some(approver) = &self.approver else {
            return Some(Decision::Reject {
                reason: Some("no client can be asked for approval here".into()),
            });
        };
        let mut arguments = json!({"command": a.command});
        if let Some(t) = a.timeout {
            arguments["timeout"] = json!(t);
        }
        let request = PermissionRequest {
            tool: "bash".into(),
            tool_call_id: ctx.call_id.clone(),
            arguments,
            reason,
        };
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => None,
            d = approver.ask(request) => Some(d),
        }
    }

    /// Runs the command once under `policy`: spawn, stream, end, render (secrets redacted).
    async fn run_once(
        &self,
        ctx: &ToolContext,
        a: &Args,
        policy: &Policy,
    ) -> Result<Ran, ToolError> {
        let shell = crate::platform::shell::find().map_err(ToolError::new)?;
        let mut args: Vec<std::ffi::OsString> = shell.args.iter().map(Into::into).collect();
        if !shell.command_on_stdin {
            args.push(a.command.clone().into());
        }
        if let (Some(executor), false) = (&self.executor, shell.command_on_stdin) {
            let run = BashRun {
                call_id: ctx.call_id.clone(),
                command: a.command.clone(),
                program: shell.program.to_string_lossy().into_owned(),
                args: args
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
                cwd: self.cwd.clone(),
                env: Vec::new(),
                env_remove: Vec::new(),
                policy: policy.clone(),
                output: mpsc::channel(1).0,
                stop: tokio_util::sync::CancellationToken::new(),
            };
            return Ok(self.run_elsewhere(executor.as_ref(), ctx, a, run).await);
        }
        let mut cmd = crate::sandbox::command(shell.program.clone(), args, policy);
        cmd.current_dir(&self.cwd)
            .stdin(if shell.command_on_stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        tree::prepare(&mut cmd);
        let (set, remove) = self.command_env();
        for var in remove {
            cmd.env_remove(var);
        }
        for (k, v) in set {
            cmd.env(k, v);
        }
        let mut child = crate::sandbox::spawn(cmd, policy)
            .await
            .map_err(|e| ToolError::new(format!("Could not start bash: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            // The legacy WSL launcher reads the command from stdin (Pi's `commandTransport`).
            use tokio::io::AsyncWriteExt;
            let _ = stdin.write_all(a.command.as_bytes()).await;
        }
        let pt = match child.id().map(ProcessTree::adopt) {
            Some(Ok(t)) => {
                tree::track(&t);
                Some(t)
            }
            Some(Err(e)) => {
                tracing::warn!("bash: the command's process tree cannot be tracked: {e}");
                None
            }
            None => None,
        };
        let mut guard = GroupGuard {
            tree: pt.clone(),
            armed: true,
        };
        let stop_tree = || async {
            if let Some(t) = &pt {
                kill_group(t).await;
            }
        };
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
                let mut buf = vec![0u8; 64 * 1024];
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
        let mut out = Output::new();
        let timeout = a.timeout.filter(|t| *t > 0.0);
        let deadline = timeout.map(|t| tokio::time::Instant::now() + Duration::from_secs_f64(t));
        let mut progress = Progress::new();
        let mut pipes_open = true;
        let end = loop {
            tokio::select! {
                biased;
                _ = ctx.cancel.cancelled() => { stop_tree().await; let _ = child.start_kill(); let _ = child.wait().await; break End::Aborted; }
                _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                    stop_tree().await; let _ = child.start_kill(); let _ = child.wait().await; break End::TimedOut(timeout.unwrap_or(0.0));
                }
                chunk = rx.recv(), if pipes_open => match chunk {
                    Some(c) => {
                        out.push(&c);
                        progress.output(ctx, &out);
                    }
                    None => pipes_open = false,
                },
                _ = progress.trailing_edge() => progress.send(ctx, &out),
                status = child.wait() => match status {
                    Ok(s) => break End::Exited(Exit::of(&s)),
                    Err(e) => break End::Failed(e.to_string()),
                },
            }
        };
        // Collect what is still in flight: idle grace 100 ms, hard cap 1 s (BASH-01).
        let cap = Instant::now() + Duration::from_secs(1);
        while pipes_open && Instant::now() < cap {
            match tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
                Ok(Some(c)) => out.push(&c),
                _ => break,
            }
        }
        for r in readers {
            r.abort();
        }
        // Ended normally or killed through `kill_group`: background children of a command that
        // exited are left running in their group (BASH-01).
        guard.armed = false;
        Ok(Ran::new(end, &mut out))
    }
}

/// Gap between two progress updates of a running command (`on_update`), 100 ms.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// Throttles a running command's progress updates to one per [`PROGRESS_EVERY`], with a
/// trailing edge: output that arrived inside the gap is sent when the gap ends, so the last
/// write of a command that then waits (a prompt, a `sleep`) is shown while it waits, not only
/// when it ends.
struct Progress {
    /// When the last update was sent.
    last: tokio::time::Instant,
    /// Output arrived since the last update.
    pending: bool,
}

impl Progress {
    fn new() -> Self {
        Self {
            last: tokio::time::Instant::now(),
            pending: false,
        }
    }

    /// New output: sends an update now if the gap has passed, else leaves it to the trailing edge.
    fn output(&mut self, ctx: &ToolContext, out: &Output) {
        if self.last.elapsed() >= PROGRESS_EVERY {
            self.send(ctx, out);
        } else {
            self.pending = true;
        }
    }

    /// Sends the output so far as an update.
    fn send(&mut self, ctx: &ToolContext, out: &Output) {
        self.last = tokio::time::Instant::now();
        self.pending = false;
        (ctx.on_update)(ToolOutput::text(out.preview()));
    }

    /// Resolves when held-back output is due (the gap after the last update has passed); never
    /// while nothing is held back.
    async fn trailing_edge(&self) {
        if self.pending {
            tokio::time::sleep_until(self.last + PROGRESS_EVERY).await;
        } else {
            std::future::pending::<()>().await;
        }
    }
}

/// Pi 1.6's guideline of `bash` (`core/tools/bash.js`), for sessions whose bash exports the
/// `PI_*` variables.
pub const BASH_GUIDELINE: &str =
    "You can inspect PI_* environment variables for current model and session details.";

#[async_trait]
impl Tool for BashTool {
    /// Pi's `promptSnippet` of `bash` (`core/tools/bash.js`, 1.6).
    fn prompt_snippet(&self) -> Option<String> {
        Some("Execute bash commands (ls, grep, find, etc.)".into())
    }

    /// Pi 1.6's `promptGuidelines` of `bash` (`bashToolSystemPromptContribution`), given when
    /// the tool exports the session's `PI_*` variables (Pi: `exposeSessionEnvironment`).
    fn prompt_guidelines(&self) -> Vec<String> {
        if self.session_env.is_empty() {
            return Vec::new();
        }
        vec![BASH_GUIDELINE.into()]
    }

    /// For the approval policy: runs commands.
    fn approval_kind(&self) -> crate::approval::ToolKind {
        crate::approval::ToolKind::Execute
    }

    fn name(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed("bash")
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
 // Pi 1.6: `constrainedSampling: { type: "json_schema", strict: "prefer" }`.
 constrained_sampling: Some(pi_ai::ConstrainedSampling::PREFER_JSON_SCHEMA),
            name: "bash".into(),
            description: format!("Execute a bash command in the current working directory. Returns stdout and stderr. Output is truncated to last {MAX_LINES} lines or 50KB (whichever is hit first). If truncated, full output is saved to a temp file. Optionally provide a timeout in seconds."),
            parameters: json!({"type":"object","required":["command"],"properties":{
                "command":{"type":"string","description":"Shell command to execute"},
                "timeout":{"type":"number","description":"Timeout in seconds (optional, no default timeout)"}}}),
        }
    }

    /// Mutates the workspace: a batch containing it runs in call order.
    fn sequential(&self) -> bool {
        true
    }

    /// Runs the command in the session's sandbox. A command that failed with a likely
    /// sandbox denial is re-run outside the sandbox only after the approver allows it; where
    /// the sandbox cannot be enforced although settings ask for it, every command needs that
    /// approval first.
    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let a: Args = parse_args("bash", args)?;
        let mut prefix = Vec::new();
        if let Some(before) = &self.before {
            if let Err(w) = before().await {
                prefix.push(format!("[warning: {w}]"));
            }
        }
        let first = !self.noted.swap(true, Ordering::SeqCst);
        let sandboxed = self.sandbox.policy();
        let policy = match self.sandbox.enforcement() {
            Enforcement::Enforced => sandboxed.clone(),
            Enforcement::NotNeeded => Policy::unrestricted(),
            Enforcement::Unavailable(why) => {
                warn_once(why);
                if first {
                    prefix.push(format!("[note: {why}]"));
                }
                Policy::unrestricted()
            }
            Enforcement::NeedsApproval(why) => {
                warn_once(why);
                match self
                    .ask(&ctx, &a, format!("sandbox unavailable: {why}"))
                    .await
                {
                    None => return Err(ToolError::new("Command aborted".to_string())),
                    Some(Decision::Allow) => {
                        prefix.push(format!(
                            "[note: {why}; this command ran outside it with the user's approval]"
                        ));
                        Policy::unrestricted()
                    }
                    Some(Decision::Reject { reason }) => {
                        return Err(ToolError::new(format!(
                            "Command not run: {why}, and running it unsandboxed was not approved{}.",
                            reason.map(|r| format!(" ({r})")).unwrap_or_default()
                        )));
                    }
                }
            }
        };
        let ran = self.run_once(&ctx, &a, &policy).await?;
        let sandbox_active = !policy.is_off();
        let denial = if sandbox_active && ran.failed_by_exit() {
            likely_denial(ran.body.as_deref().unwrap_or_default(), &policy)
        } else {
            None
        };
        let Some(line) = denial else {
            return ran.finish(&prefix);
        };
        let label = policy.label();
        match self.ask(&ctx, &a, format!("sandbox denied: {line}")).await {
            None => {
                let mut r = ran;
                r.end = End::Aborted;
                r.finish(&prefix)
            }
            Some(Decision::Allow) => {
                let again = self.run_once(&ctx, &a, &Policy::unrestricted()).await?;
                prefix.push(format!(
                    "[the sandbox ({label}) denied this command ({line}); it was re-run outside the sandbox with the user's approval]"
                ));
                again.finish(&prefix)
            }
            Some(Decision::Reject { reason }) => {
                let why = match (&self.approver, reason) {
                    (None, _) => "Re-running it outside the sandbox needs the user's approval, and no client can be asked here".to_string(),
                    (Some(_), Some(r)) => format!("The user did not approve re-running it outside the sandbox: {r}"),
                    (Some(_), None) => "The user did not approve re-running it outside the sandbox".to_string(),
                };
                let exit = match &ran.end {
                    End::Exited(s) => exit_text(s),
                    _ => "Command failed".into(),
                };
                Err(ToolError {
                    message: format!(
                        "{}\n\n{exit}\n\nThe sandbox ({label}) likely caused this failure: {line}\n{why}.",
                        ran.body.as_deref().unwrap_or("(no output)")
                    ),
                    details: ran.details,
                    ..Default::default()
                })
            }
        }
    }
}
