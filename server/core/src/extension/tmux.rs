//! The built-in `tmux` extension: background processes the agent and the human share (docs/design.md#extensions-and-product-boundaries
//! "tmux for background work": `new-session -d`, `capture-pane -p`, `attach`).
//!
//! tmux and the operating system own the process state; this extension keeps no process
//! registry of its own. It adds:
//! - tools `tmux_start {name, command, cwd?}`, `tmux_capture {name, lines?}`, `tmux_list {}`,
//!   `tmux_kill {name}`. `name` is the model's short name (`[A-Za-z0-9_-]`, at most 50
//!   characters); the tmux session is `pi-<folder>-<hash>-<name>`, prefixed per workspace so two
//!   workspaces (or two servers) never collide. Every result carries the command that attaches
//!   a terminal to the same pane (`tmux [-L socket] attach -t SESSION`).
//! - the command `/tmux` (`/tmux`, `/tmux list`, `/tmux kill [NAME]`, `/tmux share [NAME]`):
//!   lists the sessions as a notification; `kill` without a name asks the user to pick one;
//!   `share` sends the pane's output to the model as a `custom_message` (`customType: "tmux"`,
//!   delivered with the next prompt).
//! - state: the sessions this agent started, written as a `custom` entry
//!   (`customType: "tmux"`, `data: {"sessions": [{name, session, command, cwd, startedAt}]}`)
//!   after every start and kill, and read back when a session is resumed.
//!
//! Panes stay after their process exits (`remain-on-exit on`) so a crashed server's last output
//! can still be read; `tmux_list` says which exited and with what status. Captured output is
//! cut like `bash` output: the last [`MAX_LINES`] lines within [`MAX_BYTES`].
//!
//! Settings (`"builtinExtensions": {"tmux": {…}}`): `socket` (tmux `-L` socket name; default:
//! tmux's default server, so a plain `tmux attach -t …` works) and `bin` (the tmux program;
//! default `tmux`). The processes run with the server's permissions, outside the bash
//! sandbox (extensions are trusted code).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pi_ai::ToolSpec;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{CustomMessage, Extension, ExtensionApi, ExtensionContext, NotifyType};
use crate::agent::{Delivery, Tool, ToolContext, ToolError, ToolOutput};
use crate::tools::{MAX_BYTES, MAX_LINES};

/// The extension's name (settings key and `customType`).
pub const NAME: &str = "tmux";

/// How long one tmux client call may take.
const TMUX_TIMEOUT: Duration = Duration::from_secs(10);

/// The extension's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TmuxSettings {
    /// tmux `-L` socket name.
    #[serde(default)]
    pub socket: Option<String>,
    /// The tmux program.
    #[serde(default)]
    pub bin: Option<String>,
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// The extension (one per session).
pub struct TmuxExtension {
    settings: TmuxSettings,
}

impl TmuxExtension {
    /// With `settings`.
    pub fn new(settings: TmuxSettings) -> Self {
        TmuxExtension { settings }
    }

    /// From the settings object under `builtinExtensions.tmux`.
    pub fn from_settings(v: &Value) -> Result<Self, String> {
        let settings: TmuxSettings =
            serde_json::from_value(v.clone()).map_err(|e| format!("tmux settings: {e}"))?;
        if let Some(s) = &settings.socket {
            if s.is_empty() || s.contains('/') {
                return Err("tmux settings: socket must be a non-empty name without '/'".into());
            }
        }
        Ok(TmuxExtension::new(settings))
    }
}

/// A session this agent started (the `custom` entry's items).
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Started {
    name: String,
    session: String,
    command: String,
    cwd: String,
    started_at: String,
}

/// A pane as `list-panes -a` reports it.
#[derive(Debug, Clone, PartialEq)]
struct Pane {
    session: String,
    dead: bool,
    status: Option<i64>,
    /// The command the pane was started with.
    command: String,
}

/// The shared state of the extension's tools and command.
struct Tmux {
    bin: String,
    socket: Option<String>,
    prefix: String,
    ctx: ExtensionContext,
    started: Mutex<Vec<Started>>,
}

/// `pi-<folder>-<hash>-`: the workspace's session-name prefix (tmux forbids `.` and `:`).
pub fn session_prefix(root: &std::path::Path) -> String {
    let base: String = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(24)
        .collect();
    let hash = xxhash_rust::xxh3::xxh3_64(root.as_os_str().as_encoded_bytes());
    format!("pi-{base}-{:06x}-", hash & 0xff_ffff)
}

/// True for the errors of a tmux server that has no sessions: none runs, or it is exiting
/// after its last session was killed.
fn no_sessions(stderr: &str) -> bool {
    [
        "no server running",
        "error connecting",
        "server exited unexpectedly",
        "no current target",
        "no sessions",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}

fn valid_name(name: &str) -> Result<(), ToolError> {
    if name.is_empty()
        || name.len() > 50
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(ToolError::new(format!(
            "invalid name {name:?}: use 1-50 letters, digits, '-' or '_'"
        )));
    }
    Ok(())
}

/// Pi's `truncateTail`: the last lines of `text` within [`MAX_LINES`] and [`MAX_BYTES`];
/// returns the text and, when cut, `(shown lines, total lines)`.
pub fn tail(text: &str) -> (String, Option<(usize, usize)>) {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut kept = Vec::new();
    let mut bytes = 0;
    for l in lines.iter().rev() {
        let add = l.len() + usize::from(!kept.is_empty());
        if kept.len() >= MAX_LINES || bytes + add > MAX_BYTES {
            break;
        }
        bytes += add;
        kept.push(*l);
    }
    kept.reverse();
    let cut = (kept.len() < lines.len()).then_some((kept.len(), lines.len()));
    (kept.join("\n"), cut)
}

impl Tmux {
    fn session(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The command a human runs to see the same pane.
    fn attach(&self, session: &str) -> String {
        match &self.socket {
            Some(s) => format!("tmux -L {s} attach -t {session}"),
            None => format!("tmux attach -t {session}"),
        }
    }

    /// Runs tmux with `args`; `Ok(stdout)` on exit 0, else `Err(stderr)`.
    async fn run(&self, args: &[&str]) -> Result<String, String> {
        let mut cmd = tokio::process::Command::new(&self.bin);
        if let Some(s) = &self.socket {
            cmd.arg("-L").arg(s);
        }
        cmd.args(args)
            .env_remove("TMUX")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        // Provider keys stay with the server (docs/security.md): a tmux server this starts
        // (and the sessions it creates) does not get them.
        for var in pi_ai::keys::secret_env_vars() {
            cmd.env_remove(var);
        }
        let out = match tokio::time::timeout(TMUX_TIMEOUT, cmd.output()).await {
            Err(_) => return Err(format!("tmux did not answer within {TMUX_TIMEOUT:?}")),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!(
                "tmux is not installed (no {:?} on PATH); install tmux to run background processes",
                self.bin
            ))
            }
            Ok(Err(e)) => return Err(format!("cannot run tmux: {e}")),
            Ok(Ok(o)) => o,
        };
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    /// Every pane of this workspace's sessions (none when no tmux server runs).
    async fn panes(&self) -> Result<Vec<Pane>, String> {
        let out = match self
            .run(&[
                "list-panes",
                "-a",
                "-F",
                "#{session_name}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_start_command}",
            ])
            .await
        {
            Ok(o) => o,
            Err(e) if no_sessions(&e) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        Ok(out
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.splitn(4, '\t').collect();
                let session = f.first()?.to_string();
                if !session.starts_with(&self.prefix) {
                    return None;
                }
                Some(Pane {
                    session,
                    dead: f.get(1) == Some(&"1"),
                    status: f.get(2).and_then(|s| s.parse().ok()),
                    command: f
                        .get(3)
                        .map(|c| {
                            c.strip_prefix('"')
                                .and_then(|c| c.strip_suffix('"'))
                                .unwrap_or(c)
                                .to_string()
                        })
                        .unwrap_or_default(),
                })
            })
            .collect())
    }

    async fn exists(&self, session: &str) -> bool {
        self.run(&["has-session", "-t", &format!("={session}")])
            .await
            .is_ok()
    }

    /// Writes the started sessions as a `custom` entry.
    fn save(&self) {
        let sessions = self.started.lock().map(|s| s.clone()).unwrap_or_default();
        if let Err(e) = self.ctx.append_entry(NAME, json!({ "sessions": sessions })) {
            tracing::warn!("tmux state not saved: {e}");
        }
    }

    /// Restores the started sessions from the branch's last `custom` entry.
    fn restore(&self) {
        let last = self.ctx.custom_entries(NAME).pop();
        let sessions: Vec<Started> = last
            .and_then(|d| serde_json::from_value(d["sessions"].clone()).ok())
            .unwrap_or_default();
        if let Ok(mut s) = self.started.lock() {
            *s = sessions;
        }
    }

    fn started_by_agent(&self, session: &str) -> bool {
        self.started
            .lock()
            .map(|s| s.iter().any(|x| x.session == session))
            .unwrap_or(false)
    }

    async fn start(&self, name: &str, command: &str, cwd: PathBuf) -> Result<ToolOutput, String> {
        let session = self.session(name);
        if self.exists(&session).await {
            return Err(format!(
                "a tmux session named {name} already runs ({}); read it with tmux_capture or stop it with tmux_kill",
                self.attach(&session)
            ));
        }
        let cwd_s = cwd.display().to_string();
        let target = format!("={session}:");
        // A plain shell first, then the command respawned in the pane once `remain-on-exit`
        // is set, so even a command that exits at once leaves its output to read.
        self.run(&[
            "new-session",
            "-d",
            "-s",
            &session,
            "-c",
            &cwd_s,
            "-x",
            "200",
            "-y",
            "50",
            ";",
            "set-option",
            "-w",
            "-t",
            &target,
            "remain-on-exit",
            "on",
            ";",
            "respawn-pane",
            "-k",
            "-c",
            &cwd_s,
            "-t",
            &target,
            command,
        ])
        .await?;
        if let Ok(mut s) = self.started.lock() {
            s.retain(|x| x.session != session);
            s.push(Started {
                name: name.into(),
                session: session.clone(),
                command: command.into(),
                cwd: cwd_s.clone(),
                started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            });
        }
        self.save();
        let attach = self.attach(&session);
        Ok(ToolOutput {
            content: vec![pi_ai::ContentBlock::text(format!(
                "Started `{command}` in tmux session {name} (tmux name {session}), in {cwd_s}.\nRead its output with tmux_capture. The user can watch or type in the same pane with: {attach}"
            ))],
            details: Some(json!({"name": name, "session": session, "command": command, "cwd": cwd_s, "attach": attach})),
            terminate: false,
            ..Default::default()
        })
    }

    /// The pane's text: the last `lines` lines of its history and screen, cut like bash output.
    async fn capture(&self, name: &str, lines: usize) -> Result<(String, Value), String> {
        let session = self.session(name);
        let panes = self.panes().await?;
        let gone = || format!("no tmux session {name} in this workspace (tmux_list shows them)");
        let Some(pane) = panes.into_iter().find(|p| p.session == session) else {
            return Err(gone());
        };
        let start = format!("-{}", lines.max(1));
        let raw = self
            .run(&[
                "capture-pane",
                "-p",
                "-J",
                "-t",
                &format!("={session}:"),
                "-S",
                &start,
            ])
            .await
            .map_err(|e| {
                // Killed since it was listed.
                if no_sessions(&e) || e.contains("can't find") {
                    gone()
                } else {
                    e
                }
            })?;
        let trimmed = raw.trim_end_matches(['\n', ' ']);
        let (mut text, cut) = tail(trimmed);
        let attach = self.attach(&session);
        if let Some((shown, total)) = cut {
            text = format!("[Showing the last {shown} of {total} lines]\n{text}");
        }
        if pane.dead {
            text.push_str(&format!(
                "\n\n[The process exited with status {}]",
                pane.status
                    .map(|s| s.to_string())
                    .unwrap_or("unknown".into())
            ));
        }
        let details = json!({
            "name": name, "session": session, "attach": attach, "running": !pane.dead,
            "exitStatus": pane.status.filter(|_| pane.dead),
            "truncated": cut.is_some(),
        });
        Ok((text, details))
    }

    /// `(text, details)` listing this workspace's sessions.
    async fn list(&self) -> Result<(String, Value), String> {
        let panes = self.panes().await?;
        let mut items = Vec::new();
        let mut lines = Vec::new();
        for p in &panes {
            let name = p.session.trim_start_matches(&self.prefix).to_string();
            let attach = self.attach(&p.session);
            let state = if p.dead {
                format!(
                    "exited ({})",
                    p.status.map(|s| s.to_string()).unwrap_or("?".into())
                )
            } else {
                format!("running `{}`", p.command)
            };
            lines.push(format!("{name}: {state}; attach: {attach}"));
            items.push(json!({
                "name": name, "session": p.session, "command": p.command, "running": !p.dead,
                "exitStatus": p.status.filter(|_| p.dead), "attach": attach,
                "startedByAgent": self.started_by_agent(&p.session),
            }));
        }
        let text = if lines.is_empty() {
            "No tmux sessions of this workspace.".to_string()
        } else {
            lines.join("\n")
        };
        Ok((text, json!({ "sessions": items })))
    }

    async fn kill(&self, name: &str) -> Result<String, String> {
        let session = self.session(name);
        if !self.exists(&session).await {
            return Err(format!(
                "no tmux session {name} in this workspace (tmux_list shows them)"
            ));
        }
        self.run(&["kill-session", "-t", &format!("={session}")])
            .await?;
        let had = self
            .started
            .lock()
            .map(|mut s| {
                let n = s.len();
                s.retain(|x| x.session != session);
                n != s.len()
            })
            .unwrap_or(false);
        if had {
            self.save();
        }
        Ok(session)
    }

    /// Names of this workspace's sessions.
    async fn names(&self) -> Vec<String> {
        self.panes()
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.session.trim_start_matches(&self.prefix).to_string())
            .collect()
    }

    /// `/tmux [list | kill [NAME] | share [NAME]]`.
    async fn command(&self, args: &str) -> Result<(), String> {
        let mut words = args.split_whitespace();
        let verb = words.next().unwrap_or("list");
        let arg = words.next().map(str::to_string);
        let pick = |title: &'static str| async move {
            match arg {
                Some(a) => Some(a),
                None => {
                    let names = self.names().await;
                    if names.is_empty() {
                        self.ctx
                            .notify("No tmux sessions of this workspace.", NotifyType::Info)
                            .await;
                        return None;
                    }
                    self.ctx.select(title, names).await
                }
            }
        };
        match verb {
            "list" | "ls" => {
                let (text, _) = self.list().await?;
                self.ctx.notify(&text, NotifyType::Info).await;
            }
            "kill" => {
                let Some(name) = pick("Kill which tmux session?").await else {
                    return Ok(());
                };
                valid_name(&name).map_err(|e| e.message)?;
                self.kill(&name).await?;
                self.ctx
                    .notify(&format!("Killed tmux session {name}."), NotifyType::Info)
                    .await;
            }
            "share" => {
                let Some(name) = pick("Share which tmux session with the model?").await else {
                    return Ok(());
                };
                valid_name(&name).map_err(|e| e.message)?;
                let (text, details) = self.capture(&name, MAX_LINES).await?;
                self.ctx
                    .send_message(CustomMessage {
                        custom_type: NAME.into(),
                        content: json!(format!(
                            "The user shared the output of tmux session {name}:\n\n{text}"
                        )),
                        display: true,
                        details: Some(details),
                        deliver_as: Some(Delivery::NextTurn),
                        trigger_turn: false,
                    })
                    .await?;
                self.ctx
                    .notify(
                        &format!("The output of tmux session {name} goes to the model with your next prompt."),
                        NotifyType::Info,
                    )
                    .await;
            }
            other => {
                return Err(format!(
                    "unknown /tmux action {other:?}: use list, kill [NAME] or share [NAME]"
                ))
            }
        }
        Ok(())
    }
}

/// One of the four tools.
struct TmuxTool {
    tmux: Arc<Tmux>,
    kind: Kind,
}

#[derive(Clone, Copy)]
enum Kind {
    Start,
    Capture,
    List,
    Kill,
}

#[derive(Deserialize)]
struct StartArgs {
    name: String,
    command: String,
    cwd: Option<String>,
}

#[derive(Deserialize)]
struct NameArgs {
    name: String,
    lines: Option<f64>,
}

#[async_trait]
impl Tool for TmuxTool {
    fn spec(&self) -> ToolSpec {
        let name_prop = json!({"type": "string", "description": "Short name of the session (letters, digits, '-', '_')"});
        match self.kind {
            Kind::Start => ToolSpec {
 constrained_sampling: None,
                name: "tmux_start".into(),
                description: "Start a long-running command (dev server, watcher, build) in the background, in a named tmux session the user can attach to. Returns at once; read its output later with tmux_capture.".into(),
                parameters: json!({"type": "object", "properties": {
                    "name": name_prop,
                    "command": {"type": "string", "description": "Shell command to run"},
                    "cwd": {"type": "string", "description": "Working directory (default: the workspace)"}},
                    "required": ["name", "command"]}),
            },
            Kind::Capture => ToolSpec {
 constrained_sampling: None,
                name: "tmux_capture".into(),
                description: format!("Read the terminal output of a background tmux session started with tmux_start: the last lines of its pane, truncated to {MAX_LINES} lines or {}KB.", MAX_BYTES / 1024),
                parameters: json!({"type": "object", "properties": {
                    "name": name_prop,
                    "lines": {"type": "number", "description": "How many lines of history to read (default: 200)"}},
                    "required": ["name"]}),
            },
            Kind::List => ToolSpec {
 constrained_sampling: None,
                name: "tmux_list".into(),
                description: "List this workspace's background tmux sessions: running or exited, and how the user attaches.".into(),
                parameters: json!({"type": "object", "properties": {}}),
            },
            Kind::Kill => ToolSpec {
 constrained_sampling: None,
                name: "tmux_kill".into(),
                description: "Stop a background tmux session and its processes.".into(),
                parameters: json!({"type": "object", "properties": {"name": name_prop}, "required": ["name"]}),
            },
        }
    }

    /// Starting and killing change what the other calls see: a batch with them runs in call
    /// order.
    fn sequential(&self) -> bool {
        matches!(self.kind, Kind::Start | Kind::Kill)
    }

    /// Capturing and listing only read; starting and killing run commands and ask like bash
    /// under `ask` / `auto-edit`.
    fn approval_kind(&self) -> crate::approval::ToolKind {
        match self.kind {
            Kind::Capture | Kind::List => crate::approval::ToolKind::ReadOnly,
            Kind::Start | Kind::Kill => crate::approval::ToolKind::Execute,
        }
    }

    fn prompt_snippet(&self) -> Option<String> {
        Some(
            match self.kind {
                Kind::Start => "Start a long-running command in a background tmux session",
                Kind::Capture => "Read a background tmux session's output",
                Kind::List => "List background tmux sessions",
                Kind::Kill => "Stop a background tmux session",
            }
            .into(),
        )
    }

    fn prompt_guidelines(&self) -> Vec<String> {
        match self.kind {
            Kind::Start => vec!["Use tmux_start instead of bash for commands that keep running (servers, watchers); check them with tmux_capture and stop them with tmux_kill when done".into()],
            _ => Vec::new(),
        }
    }

    async fn execute(&self, _ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let t = &self.tmux;
        match self.kind {
            Kind::Start => {
                let a: StartArgs = crate::tools::parse_args("tmux_start", args)?;
                valid_name(&a.name)?;
                if a.command.trim().is_empty() {
                    return Err(ToolError::new("command must not be empty"));
                }
                let root = t.ctx.cwd();
                let cwd = crate::tools::resolve_path(&root, a.cwd.as_deref().unwrap_or("."))?;
                if !cwd.is_dir() {
                    return Err(ToolError::new(format!(
                        "cwd {} is not a folder",
                        cwd.display()
                    )));
                }
                t.start(&a.name, &a.command, cwd)
                    .await
                    .map_err(ToolError::new)
            }
            Kind::Capture => {
                let a: NameArgs = crate::tools::parse_args("tmux_capture", args)?;
                valid_name(&a.name)?;
                let lines = a.lines.map(|l| l.max(1.0) as usize).unwrap_or(200);
                let (text, details) = t.capture(&a.name, lines).await.map_err(ToolError::new)?;
                Ok(ToolOutput {
                    content: vec![pi_ai::ContentBlock::text(if text.is_empty() {
                        "(no output yet)".to_string()
                    } else {
                        text
                    })],
                    details: Some(details),
                    terminate: false,
                    ..Default::default()
                })
            }
            Kind::List => {
                let (text, details) = t.list().await.map_err(ToolError::new)?;
                Ok(ToolOutput {
                    content: vec![pi_ai::ContentBlock::text(text)],
                    details: Some(details),
                    terminate: false,
                    ..Default::default()
                })
            }
            Kind::Kill => {
                let a: NameArgs = crate::tools::parse_args("tmux_kill", args)?;
                valid_name(&a.name)?;
                let session = t.kill(&a.name).await.map_err(ToolError::new)?;
                Ok(ToolOutput {
                    content: vec![pi_ai::ContentBlock::text(format!(
                        "Killed tmux session {} ({session}).",
                        a.name
                    ))],
                    details: Some(json!({"name": a.name, "session": session})),
                    terminate: false,
                    ..Default::default()
                })
            }
        }
    }
}

impl Extension for TmuxExtension {
    fn name(&self) -> &str {
        NAME
    }

    fn register(&self, api: &mut ExtensionApi) -> Result<(), String> {
        let ctx = api.context();
        let tmux = Arc::new(Tmux {
            bin: self.settings.bin.clone().unwrap_or_else(|| "tmux".into()),
            socket: self.settings.socket.clone(),
            prefix: session_prefix(&ctx.cwd()),
            ctx,
            started: Mutex::new(Vec::new()),
        });
        for kind in [Kind::Start, Kind::Capture, Kind::List, Kind::Kill] {
            api.register_tool(Arc::new(TmuxTool {
                tmux: tmux.clone(),
                kind,
            }));
        }
        let t = tmux.clone();
        api.on_session_start(move |_| {
            t.restore();
            Ok(())
        });
        let t = tmux;
        api.register_command(
            NAME,
            Some("Background tmux sessions: /tmux [list | kill [NAME] | share [NAME]]"),
            move |args, _ctx| {
                let t = t.clone();
                async move { t.command(&args).await }
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        let text: String = (1..=2500).map(|i| format!("line {i}\n")).collect();
        let (t, cut) = tail(text.trim_end());
        assert_eq!(cut, Some((2000, 2500)));
        assert!(t.starts_with("line 501\n"));
        assert!(t.ends_with("line 2500"));
        assert_eq!(tail("a\nb"), ("a\nb".to_string(), None));
    }

    #[test]
    fn prefix_is_per_workspace_and_tmux_safe() {
        let a = session_prefix(std::path::Path::new("/home/u/my.app"));
        let b = session_prefix(std::path::Path::new("/srv/my.app"));
        assert!(a.starts_with("pi-my_app-"), "{a}");
        assert_ne!(a, b);
        assert!(!a.contains('.') && !a.contains(':'));
        assert!(valid_name("web-1").is_ok());
        assert!(valid_name("a:b").is_err());
        assert!(valid_name("").is_err());
    }
}
