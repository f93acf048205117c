//! `pi-lsp run`: the same [`AgentSession`] as the editor's, with no editor. Tools use the disk;
//! the settings' extensions are loaded (`/name args` runs an extension command); the final
//! answer, once the run has ended (Pi 1.6's print mode: the last assistant message's text, so a
//! failed attempt's partial text never reaches it), or with `--json` every event as one JSON
//! line, goes to stdout; tool calls, retries and errors go to stderr; the session is
//! written to the sessions folder (`<workspace>/.pi/sessions/` by default). Exit code 0 when the
//! run ends normally, 1 when it ends in an error or abort or its answer was cut at the output
//! limit (Pi's "Response was truncated" on stderr), or a `@path` argument names no file, or a
//! usage error Pi 1.6's print mode has (an unknown `--model`, a `--session` that matches
//! nothing, a bad `--tools` list, …: Pi's words), 0 with no prompt at all (nothing sent, as
//! Pi), 2 for pi-lsp's own configuration errors (a workspace that is not a folder, a session
//! that cannot be opened),
//! 128 + the signal's number on SIGTERM (143), SIGHUP (129) or SIGINT (130), after the same
//! cleanup as the server's ([`Sessions::stop_all`]: the run aborted, its results written,
//! process groups killed, the file synced and unlocked). At the end of every run the process
//! groups its `bash` commands started are killed too, so no background child outlives it.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;
use pi_ai::{Message, StopReason};
use pi_core::agent::{AgentEvent, WeakAgent};
use pi_core::approval::{ApprovalPolicy, Gate};
use pi_core::extension::{ExtensionErrorInfo, ExtensionUi};
use pi_core::fs::{DiskFs, Fs};
use pi_core::harness::{
    untrusted_notice, AgentSession, MessageLevel, Notice, PromptOutcome, SessionListener,
    SessionSetup, Sessions, Tracker,
};
use pi_core::resources::{resolve_prompt_input, RunOverrides, WorkspaceConfig};
use pi_core::settings::Settings;
use pi_core::tools::BeforeBash;

/// Options of the `run` command.
#[derive(Debug, Clone)]
pub struct RunArgs {
    pub workspace: PathBuf,
    pub model: Option<String>,
    pub json: bool,
    /// Pi's `--mode`: `text`, `json` (as `json`), `rpc` (refused); anything else is Pi's
    /// error.
    pub mode: Option<String>,
    /// Pi's `--provider`: the provider of `model` (`--model P/M`); requires `model`.
    pub provider: Option<String>,
    /// Pi's `--session-id`: the folder's session with exactly this id is continued.
    pub session_id: Option<String>,
    /// Pi's `--session-dir`: the sessions folder for this run (relative: to the workspace).
    pub session_dir: Option<String>,
    /// Pi's `-n/--name`: the session's name (a `session_info` entry), trimmed, not empty.
    pub name: Option<String>,
    /// Pi's `--list-models [search]`: list the available models and exit.
    pub list_models: Option<Option<String>>,
    /// Pi's `--api-key`: refused ([`API_KEY_REFUSED`]).
    pub api_key: Option<String>,
    /// Pi's `--fork <path|id>`: the session forked into the sessions folder and continued.
    pub fork: Option<String>,
    /// `--approve` (`Some(true)`) / `--no-approve` (`Some(false)`): the project folder's trust
    /// for this run; `None`: as Pi 1.6 decides ([`pi_core::trust`]: its trust store, then
    /// `defaultProjectTrust`). See [`pi_core::resources`] for what trust covers.
    pub trust: Option<bool>,
    /// `--approve-all`: approve every tool call (`approvalPolicy` `approve-all` for this run).
    pub approve: bool,
    /// `--continue` / `--session`: the session to continue (default: a new one).
    pub resume: Option<Resume>,
    /// `--no-session`: nothing is kept (Pi's in-memory session): the file lives in a private
    /// temporary folder removed when the run ends; `resume` is ignored.
    pub no_session: bool,
    /// `--thinking`: the thinking level for this run (Pi's names, `max` included).
    pub thinking: Option<String>,
    /// `--system-prompt <text|path>` as given (read here when it names a file).
    pub system_prompt: Option<String>,
    /// `--append-system-prompt <text|path>`, each occurrence as given.
    pub append_system_prompt: Vec<String>,
    /// `--tools <list>` as given (comma-separated).
    pub tools: Option<String>,
    /// `--no-tools`: no tool by default (Pi's `noTools: "all"`): the run's tools are only
    /// the ones `tools` names, or adds with `+name` (an empty allowlist without it), and a
    /// resumed session's recorded tools are not restored.
    pub no_tools: bool,
    /// `--no-builtin-tools`: no built-in tool by default (extension, MCP and editor tools
    /// kept; [`RunOverrides::no_builtin_tools`]); `--no-tools` wins over it, as in Pi 1.6.
    pub no_builtin_tools: bool,
    /// `--plan`: start in plan mode (the built-in `plan-mode` extension); the plan/todo list
    /// is printed at the end (with `--json`: one line `{"type": "plan", …state}`).
    pub plan: bool,
    /// The positional arguments as given: `@path` ones are file arguments ([`file_arguments`]),
    /// the first other one is the prompt's text (none: only what stdin and the files give),
    /// and each further one a prompt of its own, run in order once the one before has ended
    /// (Pi 1.6's print mode: only the last answer is printed).
    pub args: Vec<String>,
}

/// Which session `run` continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// The newest session of the workspace folder (`--continue`).
    Latest,
    /// A session file's path, or a session id or the start of one (`--session`).
    Session(String),
}

/// The workspace folder's sessions, newest first: its sessions folder and Pi's own sessions
/// folder for it (`$PI_CODING_AGENT_DIR/sessions/--<cwd>--/`), only files whose header's
/// `cwd` is this folder ([`Sessions::list`], as ACP's `session/list`).
fn folder_sessions(sessions: &Sessions) -> Vec<pi_core::session::SessionSummary> {
    sessions.list().into_iter().map(|l| l.summary).collect()
}

/// The session file a run goes on with ([`resume_path`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// An existing session file.
    Open(PathBuf),
    /// A path where no file is: a new session is kept there (Pi 1.6's `SessionManager.open`
    /// of a missing path).
    Create(PathBuf),
    /// A session of another project (its header's `cwd`), found by id in Pi's sessions
    /// folder: Pi 1.6 asks whether to fork it into this folder; `run` cannot ask, so nothing
    /// runs (Pi's answer "no").
    Elsewhere(String),
}

/// The session file `resume` names (`None`: `--continue` with no session of the folder, which
/// starts a new one as Pi's `continueRecent`), or why there is none. `--continue` takes the
/// file written last (its modification time, Pi 1.6's `findMostRecentSession`). A `--session`
/// argument that looks like a path (a `/` or `\` in it, or a `.jsonl` end) is one, `~`
/// expanded and a relative one taken from the `workspace` folder, as Pi 1.6's
/// `resolveSessionPath` takes it from the folder it runs in (its project folder, which
/// `--workspace` names here); where no file is, a new session is kept there, as Pi 1.6 does.
/// Any other argument is a session id or its start: this folder's sessions, else (Pi 1.6's
/// global match) any project's in Pi's sessions folder — another project's is
/// [`Target::Elsewhere`].
fn resume_path(
    sessions: &Sessions,
    workspace: &std::path::Path,
    resume: &Resume,
) -> Result<Option<Target>, String> {
    let found = folder_sessions(sessions);
    match resume {
        Resume::Latest => Ok(found
            .into_iter()
            .max_by_key(|s| s.modified_ms)
            .map(|s| Target::Open(s.path))),
        Resume::Session(s) => {
            let path_like = s.contains('/') || s.contains('\\') || s.ends_with(".jsonl");
            let p = absolute(workspace, s);
            if path_like {
                return Ok(Some(if p.exists() {
                    Target::Open(p)
                } else {
                    Target::Create(p)
                }));
            }
            // Pi 1.6's `resolveSessionPath`: an exact id first, else the newest session whose
            // id starts with it (the list is newest first, as Pi's `SessionManager.list`).
            let found: Vec<_> = match found.iter().position(|x| x.id == *s) {
                Some(i) => vec![found[i].clone()],
                None => found
                    .into_iter()
                    .filter(|x| x.id.starts_with(s.as_str()))
                    .take(1)
                    .collect(),
            };
            let elsewhere = || {
                let root = pi_ai::models::agent_dir()?.join("sessions");
                pi_core::session::find_in_all_projects(&root, s)
            };
            if found.is_empty() {
                if let Some(other) = elsewhere() {
                    let whose =
                        pi_core::session::ownership(&other.path, other.cwd.as_deref(), workspace);
                    return Ok(Some(match whose {
                        pi_core::session::Ownership::Workspace => Target::Open(other.path),
                        _ => Target::Elsewhere(other.cwd.unwrap_or_default()),
                    }));
                }
            }
            match found.first() {
                Some(one) => Ok(Some(Target::Open(one.path.clone()))),
                None => Err(not_found(s)),
            }
        }
    }
}

/// Pi 1.6's words (`createSessionManager`) for a `--session` / `--fork` id that names no
/// session.
fn not_found(arg: &str) -> String {
    format!("No session found matching '{arg}'")
}

/// Pi 1.6's `assertValidSessionId` (`--session-id`): letters, digits, `.`, `_`, `-`, starting
/// and ending with a letter or digit; its error otherwise.
fn check_session_id(id: &str) -> Result<(), String> {
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if ends(id.chars().next()) && ends(id.chars().last()) && id.chars().all(inner) {
        Ok(())
    } else {
        Err("Session id must be non-empty, contain only alphanumeric characters, '-', '_', and '.', and start and end with an alphanumeric character".into())
    }
}

/// `run`'s answer to Pi's `--api-key`.
pub const API_KEY_REFUSED: &str = "Error: --api-key is not supported by `pi-lsp run`; put the key in models.json (`apiKey`) or in the provider's environment variable";

/// `run`'s answer to Pi's `--mode rpc`.
pub const RPC_REFUSED: &str = "Error: --mode rpc is not served by `pi-lsp run`; `pi-lsp` serves the editor protocol (LSP) and `pi-lsp acp` the Agent Client Protocol";

/// Pi 1.6's `formatTokenCount` (`dist/cli/list-models.js`): `200K`, `1M`, `1.5M`, `950`.
fn token_count(n: u64) -> String {
    let short = |v: f64, unit: &str| {
        if v.fract() == 0.0 {
            format!("{v}{unit}")
        } else {
            format!("{v:.1}{unit}")
        }
    };
    match n {
        1_000_000.. => short(n as f64 / 1_000_000.0, "M"),
        1_000.. => short(n as f64 / 1_000.0, "K"),
        _ => n.to_string(),
    }
}

/// Whether every word of `search` (split at white space and `/`) is found in `text` in order,
/// letters compared without case: the match of Pi's `fuzzyFilter` (pi-tui), whose scores only
/// order what `--list-models` sorts again by provider and id.
fn fuzzy_matches(search: &str, text: &str) -> bool {
    let text = text.to_lowercase();
    search
        .split(|c: char| c.is_whitespace() || c == '/')
        .filter(|t| !t.is_empty())
        .all(|token| {
            let mut rest = text.chars();
            token
                .to_lowercase()
                .chars()
                .all(|c| rest.by_ref().any(|t| t == c))
        })
}

/// Pi 1.6's `--list-models [search]` (`listModels`, `dist/cli/list-models.js`): the models
/// with a key, those matching `search` ([`fuzzy_matches`] on `provider id`), sorted by provider
/// then id, as a table of columns two spaces apart: provider, model, context, max-out,
/// thinking, images.
fn model_table(models: &[pi_ai::Model], search: Option<&str>) -> String {
    let mut rows: Vec<[String; 6]> = models
        .iter()
        .filter(|m| m.api_key.is_some())
        .filter(|m| search.is_none_or(|s| fuzzy_matches(s, &format!("{} {}", m.provider, m.id))))
        .map(|m| {
            let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
            [
                m.provider.clone(),
                m.id.clone(),
                token_count(m.context_window),
                token_count(m.max_tokens),
                yes(m.reasoning),
                yes(m.input.iter().any(|i| i == "image")),
            ]
        })
        .collect();
    if rows.is_empty() {
        return match search {
            Some(s) => format!("No models matching \"{s}\"\n"),
            None => "No models available. Set a provider's API key (such as ANTHROPIC_API_KEY or OPENAI_API_KEY) or add a provider to models.json.\n".into(),
        };
    }
    rows.sort_by(|a, b| {
        let key = |r: &[String; 6]| (r[0].to_lowercase(), r[1].to_lowercase());
        key(a)
            .cmp(&key(b))
            .then_with(|| (&a[0], &a[1]).cmp(&(&b[0], &b[1])))
    });
    let header = [
        "provider", "model", "context", "max-out", "thinking", "images",
    ]
    .map(String::from);
    let widths: Vec<usize> = (0..6)
        .map(|i| {
            rows.iter()
                .chain(std::iter::once(&header))
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    std::iter::once(&header)
        .chain(rows.iter())
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            format!("{}\n", cells.join("  "))
        })
        .collect()
}

/// Text piped on stdin, trimmed as Pi 1.6's `readPipedStdin` trims it (nothing when stdin is a
/// terminal or the text is blank).
fn piped_stdin() -> Option<String> {
    use std::io::{IsTerminal, Read};
    let mut stdin = std::io::stdin();
    if stdin.is_terminal() {
        return None;
    }
    let mut text = String::new();
    stdin.read_to_string(&mut text).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The prompt as Pi 1.6's print mode builds it (`buildInitialMessage`,
/// `dist/cli/initial-message.js`): the piped input, then the file arguments' text, then the
/// argument, joined with nothing between them (`None` when all are missing or empty).
fn prompt_text(piped: Option<String>, files: &str, arg: Option<String>) -> Option<String> {
    let parts: Vec<String> = [piped, (!files.is_empty()).then(|| files.to_string()), arg]
        .into_iter()
        .flatten()
        .collect();
    (!parts.is_empty()).then(|| parts.concat())
}

/// What `@path` arguments give the prompt (Pi 1.6's `processFileArguments`,
/// `dist/cli/file-processor.js`): text, and image blocks in argument order.
#[derive(Debug, Default, PartialEq)]
struct FileArguments {
    /// Per file, in argument order: `<file name="ABS">\nTEXT\n</file>\n` for a text file
    /// (a leading byte-order mark dropped; bytes that are not UTF-8 read as U+FFFD, as
    /// Node's `readFile(…, "utf-8")`), `<file name="ABS"></file>\n` for an image; nothing for
    /// an empty file.
    text: String,
    images: Vec<pi_ai::ImageContent>,
}

/// Reads Pi's `@path` arguments (the `@` already removed): each path with `~` expanded and
/// made absolute against `cwd`, the workspace folder (Node's `path.resolve`: `.` and `..` removed, symlinks kept),
/// then read as an image when its first bytes are one ([`pi_core::tools::sniff_image`], as
/// `read` detects them: the file's bytes, base64, as Pi's print mode reads them with
/// `autoResizeImages: false`; the session fits them as every prompt's images, Pi's
/// `_normalizePromptImages`),
/// else as text. A path that does not exist is Pi's error, word for word:
/// `Error: File not found: ABS`; one that cannot be read: `Error: Could not read file ABS:
/// WHY`.
fn file_arguments(paths: &[&str], cwd: &std::path::Path) -> Result<FileArguments, String> {
    use base64::Engine as _;
    let mut out = FileArguments::default();
    for p in paths {
        let abs = absolute(cwd, p);
        let shown = abs.display().to_string();
        let meta =
            std::fs::metadata(&abs).map_err(|_| format!("Error: File not found: {shown}"))?;
        if meta.len() == 0 {
            continue;
        }
        let bytes =
            std::fs::read(&abs).map_err(|e| format!("Error: Could not read file {shown}: {e}"))?;
        match pi_core::tools::sniff_image(&bytes) {
            Some(mime) => {
                out.images.push(pi_ai::ImageContent {
                    data: base64::engine::general_purpose::STANDARD
                        .encode(&bytes)
                        .into(),
                    mime_type: mime.to_string(),
                });
                out.text
                    .push_str(&format!("<file name=\"{shown}\"></file>\n"));
            }
            None => {
                let text = String::from_utf8_lossy(&bytes);
                let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
                out.text
                    .push_str(&format!("<file name=\"{shown}\">\n{text}\n</file>\n"));
            }
        }
    }
    Ok(out)
}

/// `path` with a leading `~` / `~/` expanded and made absolute against `cwd`, `.` and `..`
/// removed without reading the disk (Node's `path.resolve`).
fn absolute(cwd: &std::path::Path, path: &str) -> PathBuf {
    use std::path::Component;
    let home = || std::env::var_os("HOME").map(PathBuf::from);
    let joined = match (path, home()) {
        ("~", Some(h)) => h,
        (p, Some(h)) if p.starts_with("~/") => h.join(&p[2..]),
        (p, _) => cwd.join(p),
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// `pi-lsp sessions`: prints the workspace folder's sessions; returns the exit code.
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub fn list(workspace: &std::path::Path, json: bool) -> i32 {
    let Ok(root) = workspace.canonicalize() else {
        eprintln!("pi-lsp: workspace {} is not a folder", workspace.display());
        return 2;
    };
    let ws = WorkspaceConfig::with_default_agent_dir(root.clone(), false);
    let setup = Arc::new(HeadlessSetup {
        root,
        json,
        approve: false,
        failed_save: Arc::new(AtomicBool::new(false)),
        later_prompts: Arc::default(),
        left_out: Arc::default(),
        closing: Arc::default(),
    });
    let sessions = Sessions::new(ws, setup, None);
    let mut out = std::io::stdout().lock();
    for s in folder_sessions(&sessions) {
        let title = s
            .name
            .clone()
            .or(s.first_prompt.clone())
            .unwrap_or_default();
        let when = chrono::DateTime::from_timestamp_millis(s.last_activity_ms)
            .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_default();
        let _ = if json {
            writeln!(
                out,
                "{}",
                serde_json::json!({"id": s.id, "path": s.path, "lastActivity": when,
                    "entries": s.entry_count, "messages": s.message_count, "name": s.name,
                    "firstPrompt": s.first_prompt})
            )
        } else {
            writeln!(
                out,
                "{}  {when}  {:>5}  {}",
                s.id,
                s.message_count,
                title.lines().next().unwrap_or("")
            )
        };
    }
    0
}

/// The model's text for a call the policy would ask about: `run` cannot ask.
pub const CANNOT_ASK: &str = "Not run: the approval policy asks the user before this tool call, and `pi-lsp run` cannot ask. Run it again with --approve-all (or set approvalPolicy to \"approve-all\" or \"auto-edit\") to allow it.";

/// Prints the session's events (the session has saved them).
struct PrintSink {
    json: bool,
    /// Set when the session could not be saved (the session then stopped the run; exit code 1).
    failed_save: Arc<AtomicBool>,
    /// The error of the latest assistant message, printed once at the end of the run.
    last_error: Mutex<Option<String>>,
    /// The latest assistant message that did not fail, printed to stdout at the end of the
    /// run.
    last_answer: Mutex<Option<Answer>>,
    /// How many of the command line's prompts are still to run after this one: the answer is
    /// printed only at the end of the last one's run (Pi 1.6's print mode prints the last
    /// message once every prompt has run).
    later_prompts: Arc<AtomicUsize>,
    /// Set when the last answer was left out of the context (a recovery's `context_edit`,
    /// Pi 1.6's `entry_appended`) and no answer came after it: Pi 1.6's print mode, which
    /// reads the context's last message, then prints nothing and exits 0.
    left_out: Arc<AtomicBool>,
    /// Pi 1.6's print-mode lines for stderr once the last prompt's run settled (its error,
    /// or the "truncated" line), printed last, after pi-lsp's own notes.
    closing: Arc<Mutex<Vec<String>>>,
}

/// What print mode prints of an answer.
struct Answer {
    /// Its text blocks, in order.
    texts: Vec<String>,
    /// It stopped at its output limit (`length`).
    truncated: bool,
}

/// Pi 1.6's stderr line after an answer cut at the model's output limit (`stopReason`
/// `length`); the run's exit code is then 1.
pub const TRUNCATED: &str = "Response was truncated: the model reached its output token limit.";

#[allow(clippy::print_stdout, clippy::print_stderr)]
#[async_trait]
impl SessionListener for PrintSink {
    async fn notice(&self, _notice: Notice) {}

    async fn event(&self, event: AgentEvent, notices: Vec<Notice>) {
        for n in notices {
            // Told once: every later append fails the same way until the run stops, and
            // the run's end says what the file lacks.
            if let Notice::SaveFailed { error } = n {
                if !self.failed_save.swap(true, Ordering::SeqCst) {
                    eprintln!("pi-lsp: session not saved: {error}");
                }
            }
        }
        let mut out = std::io::stdout().lock();
        if self.json {
            let _ = writeln!(out, "{}", serde_json::to_string(&event).unwrap_or_default());
        } else {
            match &event {
                AgentEvent::MessageEnd { message } => {
                    if let Message::Assistant(a) = &**message {
                        // Failed attempts are reported by the retry events; the last error is
                        // printed when the run ends, and a failed attempt's text is never the
                        // answer.
                        // Pi 1.6's words: the message's error, else `Request <stopReason>`.
                        *self.last_error.lock() = match a.stop_reason {
                            StopReason::Error => Some(
                                a.error_message.clone().unwrap_or_else(|| "Request error".into()),
                            ),
                            StopReason::Aborted => Some(
                                a.error_message
                                    .clone()
                                    .unwrap_or_else(|| "Request aborted".into()),
                            ),
                            _ => None,
                        };
                        self.left_out.store(false, Ordering::SeqCst);
                        *self.last_answer.lock() =
                            (!matches!(a.stop_reason, StopReason::Error | StopReason::Aborted)).then(
                                || Answer {
                                    texts: a
                                        .content
                                        .iter()
                                        .filter_map(|b| match b {
                                            pi_ai::ContentBlock::Text(t) => Some(t.text.clone()),
                                            _ => None,
                                        })
                                        .collect(),
                                    truncated: a.stop_reason == StopReason::Length,
                                },
                            );
                    }
                }
                AgentEvent::AutoRetryStart {
                    attempt,
                    max_attempts,
                    delay_ms,
                    error_message,
                } => {
                    eprintln!(
                        "{}",
                        retry_line("", error_message, *attempt, *max_attempts, *delay_ms)
                    );
                }
                AgentEvent::SummarizationRetryScheduled {
                    attempt,
                    max_attempts,
                    delay_ms,
                    error_message,
                } => {
                    eprintln!(
                        "{}",
                        retry_line(
                            "summary request failed: ",
                            error_message,
                            *attempt,
                            *max_attempts,
                            *delay_ms
                        )
                    );
                }
                AgentEvent::EntryAppended { entry }
                    if entry["type"] == "context_edit" && entry["replacement"].is_null() =>
                {
                    // The last answer (an overflow error, a recoverable `length` stop) left
                    // the context: Pi 1.6's print mode never prints it, nor its error (only a
                    // retried answer, or nothing when no retry follows).
                    *self.last_answer.lock() = None;
                    *self.last_error.lock() = None;
                    self.left_out.store(true, Ordering::SeqCst);
                }
                AgentEvent::CompactionStart { reason } => {
                    eprintln!("pi-lsp: compacting the conversation ({reason:?})…");
                }
                AgentEvent::CompactionEnd {
                    result,
                    error_message,
                    ..
                } => match (result, error_message) {
                    (Some(r), _) => eprintln!(
                        "pi-lsp: compacted {} tokens into a summary; raw context kept from entry {}",
                        r.tokens_before, r.first_kept_entry_id
                    ),
                    (None, Some(e)) => eprintln!("pi-lsp: {e}"),
                    (None, None) => eprintln!("pi-lsp: compaction cancelled"),
                },
                // Pi 1.6's print mode prints once the prompt's session settled: a recovery
                // after a run's `agent_end` may leave its answer out or retry it.
                AgentEvent::AgentSettled { .. } => {
                    let last = self.later_prompts.load(Ordering::SeqCst) == 0;
                    let error = self.last_error.lock().take();
                    // Pi 1.6's print mode says only the last prompt's failure, after every
                    // prompt ran, as its last line (`closing`); an earlier one is a note.
                    if let Some(e) = &error {
                        if last {
                            self.closing.lock().push(e.clone());
                        } else {
                            eprintln!("pi-lsp: {e}");
                        }
                    }
                    // Pi 1.6's print mode (`dist/modes/print-mode.js`): each text block on a
                    // line of its own; a truncated answer is said so on stderr. Only the
                    // last prompt's answer is printed.
                    let answer = self.last_answer.lock().take();
                    if let Some(answer) = answer.filter(|_| last) {
                        for text in &answer.texts {
                            let _ = writeln!(out, "{text}");
                        }
                        if answer.truncated {
                            self.closing.lock().push(TRUNCATED.into());
                        }
                    }
                }
                AgentEvent::ToolExecutionStart {
                    tool_name, args, ..
                } => {
                    eprintln!("→ {tool_name} {args}");
                }
                AgentEvent::ToolExecutionEnd {
                    is_error: true,
                    result,
                    ..
                } => {
                    let text = pi_ai::join_text(&result.content);
                    eprintln!("  ✗ {}", text.lines().last().unwrap_or(""));
                }
                _ => {}
            }
        }
        let _ = out.flush();
    }
}

/// `pi-lsp run`'s part of its session ([`SessionSetup`]): the disk, nobody to ask, the
/// printer.
struct HeadlessSetup {
    root: PathBuf,
    json: bool,
    /// `--approve`.
    approve: bool,
    failed_save: Arc<AtomicBool>,
    /// See [`PrintSink::later_prompts`].
    later_prompts: Arc<AtomicUsize>,
    /// See [`PrintSink::left_out`].
    left_out: Arc<AtomicBool>,
    /// See [`PrintSink::closing`].
    closing: Arc<Mutex<Vec<String>>>,
}

impl SessionSetup for HeadlessSetup {
    fn fs(&self, _session_id: &str) -> (Arc<dyn Fs>, Option<BeforeBash>) {
        (Arc::new(DiskFs::new(self.root.clone())), None)
    }

    fn gate(&self, ws: &WorkspaceConfig, _session_id: &str, _tracker: &Arc<Tracker>) -> Arc<Gate> {
        let settings = ws.settings();
        Arc::new(Gate::new(
            self.default_policy(&settings),
            pi_core::approval::rules_from_settings(&settings.merged),
            None,
            None,
            CANNOT_ASK,
        ))
    }

    /// Nobody can answer here: --approve, else the settings' policy (default approve-all, as
    /// Pi's print mode); a call the policy would ask about gets [`CANNOT_ASK`] as its result.
    fn default_policy(&self, settings: &Settings) -> ApprovalPolicy {
        if self.approve {
            ApprovalPolicy::ApproveAll
        } else {
            settings
                .approval_policy
                .unwrap_or(pi_core::approval::HEADLESS_DEFAULT)
        }
    }

    fn extension_ui(&self, _session_id: &str) -> Arc<dyn ExtensionUi> {
        Arc::new(HeadlessUi)
    }

    /// On stderr (the model chosen instead of the one asked for, a fork, repairs).
    #[allow(clippy::print_stderr)]
    /// On stderr; a warning as Pi 1.6's print mode writes its diagnostics (`Warning: …`,
    /// `writeDiagnosticsToStderr`).
    fn show_message(&self, level: MessageLevel, message: String) {
        match level {
            MessageLevel::Warning => eprintln!("Warning: {message}"),
            MessageLevel::Info => eprintln!("{message}"),
        }
    }

    fn listeners(&self, _session_id: &str, _agent: &WeakAgent) -> Vec<Arc<dyn SessionListener>> {
        vec![Arc::new(PrintSink {
            json: self.json,
            failed_save: self.failed_save.clone(),
            last_error: Mutex::new(None),
            last_answer: Mutex::new(None),
            later_prompts: self.later_prompts.clone(),
            left_out: self.left_out.clone(),
            closing: self.closing.clone(),
        })]
    }
}

/// The extensions' UI without an editor: no dialogs (cancelled, as in Pi's print mode),
/// failures on stderr.
struct HeadlessUi;

#[async_trait]
impl ExtensionUi for HeadlessUi {
    #[allow(clippy::print_stderr)]
    async fn extension_error(&self, e: ExtensionErrorInfo) {
        eprintln!(
            "pi-lsp: extension {} failed ({}): {}",
            e.extension_path, e.event, e.error
        );
    }
}

/// Prints the session's plan/todo list when it has one: `Plan (done/total):` and one line per
/// item (`[x]` done, `[>]` in progress, `[ ]` open), or with `json` one line
/// `{"type": "plan", …}` (the `agent/plan` state).
#[allow(clippy::print_stdout)]
fn print_plan(session: &AgentSession, json: bool) {
    let Some(state) = session.plan().map(|b| b.state()) else {
        return;
    };
    if state.todos.is_empty() {
        return;
    }
    if json {
        let mut v = serde_json::to_value(&state).unwrap_or_default();
        v["type"] = serde_json::json!("plan");
        println!("{v}");
        return;
    }
    println!("\nPlan ({}/{}):", state.completed, state.total);
    for t in &state.todos {
        let mark = match t.status {
            pi_core::extension::plan::TodoStatus::Completed => "x",
            pi_core::extension::plan::TodoStatus::InProgress => ">",
            pi_core::extension::plan::TodoStatus::Pending => " ",
        };
        println!("[{mark}] {}. {}", t.id, t.text);
    }
}

/// The command line's prompt and tool flags as Pi 1.6 reads them: `--system-prompt` and
/// each `--append-system-prompt` read when they name a file (relative: in the workspace
/// folder; Pi's `resolvePromptInput`, a file
/// that cannot be read warned about and taken as text), `--tools` split at commas (empty
/// entries dropped) and refused when it mixes names with `+name` / `-name`.
#[allow(clippy::print_stderr)]
fn run_overrides(args: &RunArgs) -> Result<RunOverrides, String> {
    // A file named relative to the workspace folder, as every path argument of `run` (Pi reads
    // it from the folder it runs in, its project folder).
    let read = |input: &str| {
        let at = args.workspace.join(input);
        let (text, warning) = if !input.is_empty() && at.exists() {
            resolve_prompt_input(&at.to_string_lossy())
        } else {
            (input.to_string(), None)
        };
        if let Some(w) = warning {
            eprintln!("pi-lsp: warning: {w}");
        }
        text
    };
    let tools = match &args.tools {
        None => None,
        Some(list) => {
            let entries: Vec<String> = list
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_string)
                .collect();
            if let Some(e) = pi_core::harness::tool_list_error(&entries) {
                return Err(format!("--tools: {e}"));
            }
            Some(entries)
        }
    };
    // Pi 1.6's `--no-tools`: the default selection is empty, so `+name` entries are the
    // allowlist (`-name` ones remove nothing), and plain names select as they always do.
    let tools = match tools {
        Some(entries) if args.no_tools && entries.iter().any(|e| e.starts_with(['+', '-'])) => {
            Some(
                entries
                    .iter()
                    .filter_map(|e| e.strip_prefix('+'))
                    .map(str::to_string)
                    .collect(),
            )
        }
        None if args.no_tools => Some(Vec::new()),
        other => other,
    };
    Ok(RunOverrides {
        system_prompt: args.system_prompt.as_deref().map(read),
        append_system_prompt: args.append_system_prompt.iter().map(|a| read(a)).collect(),
        tools,
        no_builtin_tools: args.no_builtin_tools && !args.no_tools,
        session_dir: None,
    })
}

/// Pi 1.6's usage checks of print mode (`parseArgs`'s diagnostics, `validateForkFlags`,
/// `validateSessionIdFlags`, `--name`, `--provider`, `--api-key`), each in Pi's words, before
/// anything is read or written: `Err(line)` ends the run with exit code 1. A `--thinking` that
/// is no level is Pi's warning, printed here, and the run goes on at the default level.
#[allow(clippy::print_stderr)]
fn check_pi_flags(args: &RunArgs) -> Result<Option<pi_ai::models::ThinkingLevel>, String> {
    let thinking = match &args.thinking {
        None => None,
        Some(t) => {
            let level = pi_ai::models::ThinkingLevel::parse(t);
            if level.is_none() {
                eprintln!("Warning: Invalid thinking level \"{t}\". Valid values: off, minimal, low, medium, high, xhigh, max");
            }
            level
        }
    };
    match args.mode.as_deref() {
        None | Some("text" | "json") => {}
        Some("rpc") => return Err(RPC_REFUSED.into()),
        Some(m) => {
            return Err(format!(
                "Error: Invalid mode \"{m}\". Valid values: text, json, rpc"
            ))
        }
    }
    if args.fork.is_some() {
        refuse_with(args, "--fork", args.no_session)?;
    }
    if let Some(id) = &args.session_id {
        refuse_with(args, "--session-id", false)?;
        check_session_id(id).map_err(|e| format!("Error: {e}"))?;
    }
    if args.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
        return Err("Error: --name requires a non-empty value".into());
    }
    if let (Some(p), None) = (&args.provider, &args.model) {
        return Err(format!(
            "Error: --provider requires --model (for example: --provider {p} --model <pattern>)"
        ));
    }
    if args.api_key.is_some() {
        return Err(API_KEY_REFUSED.into());
    }
    Ok(thinking)
}

/// Pi 1.6's refusal of `flag` beside the flags that choose another session (`--session`,
/// `--continue`, and `--no-session` when `no_session_too`): `Error: FLAG cannot be combined
/// with A, B`, naming those given.
fn refuse_with(args: &RunArgs, flag: &str, no_session_too: bool) -> Result<(), String> {
    let with: Vec<&str> = [
        (matches!(args.resume, Some(Resume::Session(_))), "--session"),
        (args.resume == Some(Resume::Latest), "--continue"),
        (no_session_too && args.no_session, "--no-session"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    match with.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "Error: {flag} cannot be combined with {}",
            with.join(", ")
        )),
    }
}

/// Pi 1.6's words for a `--model` no provider configures (`resolveCliModel`).
fn model_not_found(model: &str) -> String {
    format!("Error: Model \"{model}\" not found. Use --list-models to see available models.")
}

/// Runs one prompt headless; returns the process exit code.
#[allow(clippy::print_stderr)]
pub async fn run(args: RunArgs) -> i32 {
    // Pi's usage checks first, each in its words (exit code 1).
    let thinking = match check_pi_flags(&args) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let workspace = match args.workspace.canonicalize() {
        Ok(w) if w.is_dir() => w,
        _ => {
            eprintln!(
                "pi-lsp: workspace {} is not a folder",
                args.workspace.display()
            );
            return 2;
        }
    };
    // Every flag is checked before anything is read or written (Pi: a bad flag runs nothing).
    let mut overrides = match run_overrides(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("Error: {e}");
            return 1;
        }
    };
    let json = args.json || args.mode.as_deref() == Some("json");
    // `--provider P --model M` is the model `P/M` (Pi's `--provider` names the provider
    // `--model` is looked for in).
    let model = match (&args.provider, &args.model) {
        (Some(p), Some(m)) => Some(format!("{p}/{m}")),
        (_, m) => m.clone(),
    };
    // `--no-session` (Pi's in-memory session): the file goes to a private folder removed at the
    // end, so nothing is created in the workspace or Pi's folders; `-c`/`--session` are
    // ignored, as Pi's `--no-session` does.
    let scratch = args.no_session.then(|| {
        std::env::temp_dir().join(format!(
            "pi-lsp-no-session-{}-{}",
            std::process::id(),
            chrono::Utc::now().timestamp_micros()
        ))
    });
    overrides.session_dir = scratch
        .clone()
        .or_else(|| args.session_dir.as_deref().map(|d| absolute(&workspace, d)));
    let agent_dir = pi_ai::models::agent_dir();
    let trust = pi_core::trust::resolve_project_trust(&workspace, agent_dir.as_deref(), args.trust);
    if let Some(w) = &trust.warning {
        eprintln!("pi-lsp: {w}");
    }
    let ws = Arc::new(
        WorkspaceConfig::new(workspace.clone(), agent_dir, trust.trusted).with_overrides(overrides),
    );
    // Pi 1.6's `--list-models`: the table, then exit 0, nothing else read or written.
    if let Some(search) = &args.list_models {
        let reg = pi_ai::models::Registry::load_files(&ws.models_files());
        for w in &reg.warnings {
            eprintln!("Warning: {w}");
        }
        print_out(&model_table(&reg.models, search.as_deref()));
        return 0;
    }
    if let Some(n) = untrusted_notice(
        &ws,
        "run with --approve, or trust the folder in Pi, to load it",
    ) {
        eprintln!("{n}");
    }
    let failed_save = Arc::new(AtomicBool::new(false));
    let left_out = Arc::new(AtomicBool::new(false));
    let root = workspace.clone();
    let closing = Arc::new(Mutex::new(Vec::new()));
    let later_prompts = Arc::new(AtomicUsize::new(0));
    let setup = Arc::new(HeadlessSetup {
        root: workspace.clone(),
        json,
        approve: args.approve,
        failed_save: failed_save.clone(),
        later_prompts: later_prompts.clone(),
        left_out: left_out.clone(),
        closing: closing.clone(),
    });
    // The one registry every front door uses: the session, and the stop on a signal.
    let sessions = Sessions::new(ws.clone(), setup, None);
    // Which session, as Pi 1.6's `createSessionManager` decides it (before the model and the
    // prompt are looked at): `--fork`, `--session`, `--continue`, `--session-id`.
    let resume = if args.no_session {
        Ok(None)
    } else if let Some(f) = &args.fork {
        match &args.session_id {
            Some(id) => Err(format!("Error: --session-id {id}: `pi-lsp run` cannot start a session with an id of your choosing")),
            None => fork_target(&sessions, &ws, &root, f),
        }
    } else if let Some(r) = &args.resume {
        resume_path(&sessions, &root, r)
    } else if let Some(id) = &args.session_id {
        match folder_sessions(&sessions).into_iter().find(|s| s.id == *id) {
            Some(s) => Ok(Some(Target::Open(s.path))),
            None => Err(format!("Error: --session-id: no session of this folder has id '{id}', and `pi-lsp run` cannot start a session with an id of your choosing")),
        }
    } else {
        Ok(None)
    };
    let resume = match resume {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    // `@path` arguments are files wherever they stand; the first other argument is the prompt,
    // each later one a prompt of its own (Pi 1.6's `parseArgs` and `buildInitialMessage`).
    let (files, messages): (Vec<&str>, Vec<&str>) = args
        .args
        .iter()
        .map(String::as_str)
        .partition(|a| a.starts_with('@'));
    let further = messages.get(1..).unwrap_or_default();
    later_prompts.store(further.len(), Ordering::SeqCst);
    let files: Vec<&str> = files.iter().map(|f| &f[1..]).collect();
    // Pi reads the files against the folder it runs in, its project folder, which
    // `--workspace` names here: a relative `@path` is taken from the workspace folder, as a
    // relative `--session` path is (one rule for every path argument; the README's `run`).
    // A missing file ends the run with Pi's words and exit code 1, before anything is written.
    let attached = match file_arguments(&files, &workspace) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    // An empty or blank prompt, from the argument, the files or stdin, is no prompt: Pi 1.6's
    // print mode then sends nothing and prints the session's last answer, if it has one.
    let prompt = prompt_text(
        piped_stdin(),
        &attached.text,
        messages.first().map(|m| m.to_string()),
    )
    .filter(|p| !p.trim().is_empty() || !attached.images.is_empty());
    let resume = match (prompt.is_some(), resume) {
        (false, None | Some(Target::Create(_))) => {
            // Nothing is written (Pi 1.6 writes a new session's file with its first answer);
            // only the model is checked, as Pi resolves it before reading the prompt.
            if let Some(m) = &model {
                if pi_core::harness::setup::choose_model(&ws, Some(m), None).is_err() {
                    eprintln!("{}", model_not_found(args.model.as_deref().unwrap_or(m)));
                    return 1;
                }
            }
            return 0;
        }
        (_, r) => r,
    };
    // `--thinking` is the level a new session starts at, and the one a resumed file that
    // records none gets recorded (Pi 1.6's `createAgentSession`: one `thinking_level_change`,
    // never the default first); a file that records another level gets it appended below, as
    // Pi 1.6.0's `setThinkingLevel` after `createAgentSession` does. `--model` on a resumed
    // file is the model the run uses, recorded nowhere (Pi 1.6.0 appends no `model_change`).
    let name = args.name.as_deref().map(str::trim);
    let session = match &resume {
        None => sessions.create(model.as_deref(), thinking, name),
        Some(Target::Create(path)) => {
            sessions.create_in(model.as_deref(), thinking, name, Some(path))
        }
        Some(Target::Open(path)) => sessions.open_file_for_run(path, model.as_deref(), thinking),
        // Pi 1.6's print mode says where it is and asks to fork it; nobody can answer here,
        // so it ends as Pi's "no" does: nothing run or written, exit code 0.
        Some(Target::Elsewhere(cwd)) => {
            eprintln!("Session found in different project: {cwd}");
            eprintln!("pi-lsp: not run: Pi asks whether to fork it into this folder, and `pi-lsp run` cannot ask; run in that folder, give the session file's path to --session, or fork it with --fork");
            return 0;
        }
    };
    let session = match session {
        Ok(s) => s,
        // A `--model` no provider configures: Pi 1.6's words and exit code.
        Err(pi_core::harness::sessions::Error::Model(_)) if model.is_some() => {
            eprintln!(
                "{}",
                model_not_found(args.model.as_deref().unwrap_or_default())
            );
            if let Some(d) = &scratch {
                let _ = std::fs::remove_dir_all(d);
            }
            return 1;
        }
        Err(e) => {
            eprintln!("pi-lsp: {e}");
            if let Some(d) = &scratch {
                let _ = std::fs::remove_dir_all(d);
            }
            return 2;
        }
    };
    // Pi 1.6 names a resumed session too (`appendSessionInfo` after opening it).
    if let (Some(n), Some(Target::Open(_))) = (name, &resume) {
        if let Err(e) = session.set_name(n) {
            eprintln!("pi-lsp: {e}");
            return 2;
        }
    }
    if let Some(level) = thinking {
        if let Err(e) = session.set_thinking_level(level) {
            eprintln!("pi-lsp: {e}");
            return 2;
        }
    }
    let Some(prompt) = prompt else {
        // No prompt on a resumed session: Pi 1.6's print mode prints its last answer.
        return print_last_answer(&session, json);
    };
    let code = run_session(
        &sessions,
        &session,
        (&prompt, attached.images, further),
        (&failed_save, &later_prompts, &left_out),
        args.plan,
        json,
        scratch.is_none(),
    )
    .await;
    // Pi 1.6's own lines last (its print mode prints nothing before them).
    for line in closing.lock().drain(..) {
        eprintln!("{line}");
    }
    // Background children a `bash` command left (`sleep 30 &`) do not outlive the run: every
    // process group its commands started is stopped, as the ACP and LSP servers do at exit.
    let killed = pi_core::tools::kill_all_groups().await;
    if killed > 0 {
        tracing::debug!("stopped {killed} process group(s) left by bash commands");
    }
    if let Some(d) = &scratch {
        session.close().await;
        let _ = std::fs::remove_dir_all(d);
    }
    code
}

/// Pi 1.6's `--fork <path|id>` (`createSessionManager`, `SessionManager.forkFrom`): the
/// session `arg` names (a path, else an id or its start, this folder's then any project's in
/// Pi's sessions folder) copied into the sessions folder as a new session whose header's
/// `parentSession` names it: the entries of its current branch, lines as stored. Pi's words
/// when nothing matches or the file cannot be read.
fn fork_target(
    sessions: &Sessions,
    ws: &WorkspaceConfig,
    workspace: &std::path::Path,
    arg: &str,
) -> Result<Option<Target>, String> {
    let source = match resume_path(sessions, workspace, &Resume::Session(arg.to_string())) {
        Ok(Some(Target::Open(p))) => p,
        Ok(Some(Target::Create(p))) => {
            return Err(format!(
                "Error: Cannot fork: source session file is empty or invalid: {}",
                p.display()
            ))
        }
        Ok(Some(Target::Elsewhere(_))) => {
            let root = pi_ai::models::agent_dir()
                .map(|a| a.join("sessions"))
                .unwrap_or_default();
            pi_core::session::find_in_all_projects(&root, arg)
                .map(|s| s.path)
                .ok_or_else(|| not_found(arg))?
        }
        Ok(None) => return Err(not_found(arg)),
        Err(e) => return Err(e),
    };
    let (tree, _) = pi_core::session::read_tree(&source, false).map_err(|e| {
        format!(
            "Error: Cannot fork: source session file is empty or invalid: {}: {e}",
            source.display()
        )
    })?;
    let (images, _) = pi_core::session::ImageOptions::from_settings(&ws.settings().merged);
    let dir = pi_core::harness::setup::sessions_dir(ws);
    pi_core::session::SessionWriter::write_fork(&source, &tree, &dir, None, images)
        .map(|p| Some(Target::Open(p)))
        .map_err(|e| format!("Error: {e}"))
}

/// Pi 1.6's print mode with no prompt (`runPrintMode`): nothing is sent; in text mode the
/// context's last message, when it is an answer, is printed as after a run (its text blocks on
/// stdout, exit code 0; an error or abort's message on stderr, a cut answer's "truncated" line,
/// exit code 1); otherwise nothing. With `json` the header alone was printed: exit code 0.
#[allow(clippy::print_stderr, clippy::print_stdout)]
fn print_last_answer(session: &AgentSession, json: bool) -> i32 {
    if json {
        if let Ok((tree, _)) = session.tree() {
            println!("{}", tree.header);
        }
        return 0;
    }
    let messages = session.messages();
    let Some(Message::Assistant(a)) = messages.last() else {
        return 0;
    };
    match a.stop_reason {
        StopReason::Error | StopReason::Aborted => {
            let what = if a.stop_reason == StopReason::Error {
                "error"
            } else {
                "aborted"
            };
            eprintln!(
                "{}",
                a.error_message
                    .clone()
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| format!("Request {what}"))
            );
            1
        }
        _ => {
            for b in &a.content {
                if let pi_ai::ContentBlock::Text(t) = b {
                    println!("{}", t.text);
                }
            }
            if a.stop_reason == StopReason::Length {
                eprintln!("{TRUNCATED}");
                return 1;
            }
            0
        }
    }
}

/// Runs `prompt` in `session` to its end, then each of `further` the same way (Pi 1.6's print
/// mode: one after the other, each once the run before has ended, whatever its outcome;
/// `later`, shared with the printer, counts down the ones still to run); returns the exit
/// code, from the last run (with `json` 0 unless the session could not be saved, as Pi 1.6's
/// `--mode json`).
#[allow(clippy::print_stderr)]
async fn run_session(
    sessions: &Sessions,
    session: &Arc<AgentSession>,
    (prompt, images, further): (&str, Vec<pi_ai::ImageContent>, &[&str]),
    (failed_save, later, left_out): (&AtomicBool, &AtomicUsize, &AtomicBool),
    plan: bool,
    json: bool,
    keep: bool,
) -> i32 {
    let session_path = session.file();
    // Where the session was saved, unless it is not kept (`--no-session`); after a failed
    // append (a full disk, the file-size limit) that it was not, whole.
    let saved = || {
        if keep && failed_save.load(Ordering::SeqCst) {
            eprintln!(
                "pi-lsp: the session's last entries could not be saved to {} (the run was stopped)",
                session_path.display()
            );
        } else if keep {
            eprintln!("pi-lsp: session saved to {}", session_path.display());
        }
    };
    // Pi 1.6's `--mode json` prints the session's header first (its docs/json.md: "The first
    // JSON-mode record is the current session header"; print-mode.js `getHeader()`): the
    // header as the file holds it (a v1/v2 file's as migrated), also for `--no-session`.
    if json {
        if let Ok((tree, _)) = session.tree() {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", tree.header);
        }
    }
    // SIGTERM, SIGHUP, SIGINT: the server's own way of going away (`crate::shutdown`).
    let mut signals = crate::shutdown::Signals::listen();
    if plan {
        let on = match session.plan() {
            Some(board) => board.set_plan_mode(true).await,
            None => Err("plan mode is off in this workspace (builtinExtensions)".into()),
        };
        if let Err(e) = on {
            eprintln!("pi-lsp: --plan: {e}");
            return 2;
        }
    }
    let mut ran = false;
    let prompts = std::iter::once((prompt, images)).chain(further.iter().map(|p| (*p, Vec::new())));
    for (i, (prompt, images)) in prompts.enumerate() {
        if i > 0 {
            later.fetch_sub(1, Ordering::SeqCst);
        }
        match session.prompt(prompt, images, None, None).await {
            // Extension commands come first (Pi: before templates and skills).
            Ok(PromptOutcome::Command(name)) => {
                eprintln!("pi-lsp: ran extension command /{name}");
                continue;
            }
            Ok(_) => ran = true,
            Err(e) => {
                eprintln!("pi-lsp: {e}");
                return 2;
            }
        }
        tokio::select! {
            _ = session.wait_for_idle() => {}
            n = signals.next() => {
                eprintln!("pi-lsp: signal {n}: stopping the run");
                tokio::select! {
                    _ = sessions.stop_all() => {}
                    n = signals.next() => crate::shutdown::exit_now(128 + n),
                }
                saved();
                return 128 + n;
            }
        }
    }
    if !ran {
        saved();
        return 0;
    }
    print_plan(session, json);
    saved();
    // Pi 1.6's `--mode json` (`runPrintMode`) exits 0 however the run ended: its events say
    // it (a provider error, a cut answer). A session that could not be saved still fails.
    if json {
        return i32::from(failed_save.load(Ordering::SeqCst));
    }
    let stop = session.last_outcome().map(|o| o.stop_reason);
    match stop {
        // Pi 1.6's print mode reads the context's last message: an answer a recovery left
        // out (an overflow error or a cut answer whose compaction found nothing to do, or
        // failed) is not there, so nothing was printed and the exit code is 0.
        Some(StopReason::Error | StopReason::Stop)
            if left_out.load(Ordering::SeqCst) && !failed_save.load(Ordering::SeqCst) =>
        {
            0
        }
        // Pi 1.6's print mode: a truncated answer (`length`) is printed, and fails.
        Some(StopReason::Error | StopReason::Aborted | StopReason::Length) | None => 1,
        _ if failed_save.load(Ordering::SeqCst) => 1,
        _ => 0,
    }
}

/// Writes `text` to stdout as it is (`pi-lsp mcp list`).
#[allow(clippy::print_stdout)]
pub fn print_out(text: &str) {
    print!("{text}");
}

/// The stderr line of a scheduled retry (an answer's `auto_retry_start`, a summary's
/// `summarization_retry_scheduled`): `pi-lsp: {what}{error}; retrying ({attempt}/{max}) in
/// {seconds, one decimal} s`; `what` names the request when it is not the answer (empty for it).
fn retry_line(what: &str, error: &str, attempt: u32, max_attempts: u32, delay_ms: u64) -> String {
    format!(
        "pi-lsp: {what}{error}; retrying ({attempt}/{max_attempts}) in {:.1} s",
        delay_ms as f64 / 1000.0
    )
}

#[cfg(test)]
mod retry_line_tests {
    use super::retry_line;

    #[test]
    fn both_retry_lines_share_one_shape() {
        assert_eq!(
            retry_line("", "500: boom", 1, 3, 2_000),
            "pi-lsp: 500: boom; retrying (1/3) in 2.0 s"
        );
        assert_eq!(
            retry_line("summary request failed: ", "500: boom", 2, 3, 4_300),
            "pi-lsp: summary request failed: 500: boom; retrying (2/3) in 4.3 s"
        );
    }
}

#[cfg(test)]
mod list_models_tests {
    use super::{fuzzy_matches, model_table, token_count};

    /// Pi 1.6's `formatTokenCount`.
    #[test]
    fn token_counts_are_pi_s() {
        let shown: Vec<String> = [950, 4096, 128_000, 1_000_000, 1_048_576]
            .into_iter()
            .map(token_count)
            .collect();
        assert_eq!(shown, ["950", "4.1K", "128K", "1M", "1.0M"]);
    }

    /// Every word in order, case ignored; `/` splits words as white space does.
    #[test]
    fn search_words_match_in_order() {
        assert!(fuzzy_matches("ant", "mockant mock-ant-1"));
        assert!(fuzzy_matches("Mock/ANT", "mockant mock-ant-1"));
        assert!(!fuzzy_matches("ant", "mock mock-1"));
        assert!(!fuzzy_matches("1k", "mock mock-1"));
    }

    /// Only models with a key, sorted by provider then id, columns two spaces apart; none:
    /// Pi's line.
    #[test]
    fn the_table_is_pi_s() {
        let model = |p: &str, id: &str, key: bool| pi_ai::Model {
            api_key: key.then(|| "k".to_string()),
            context_window: 200_000,
            max_tokens: 8192,
            reasoning: id.starts_with('r'),
            input: vec!["text".into(), "image".into()],
            ..pi_ai::Model::new(pi_ai::models::SCRIPTED_API, p, id, "")
        };
        let models = [
            model("b", "r1", true),
            model("a", "x", true),
            model("c", "y", false),
        ];
        assert_eq!(
            model_table(&models, None),
            "provider  model  context  max-out  thinking  images\na         x      200K     8.2K     no        yes   \nb         r1     200K     8.2K     yes       yes   \n"
        );
        assert_eq!(
            model_table(&models, Some("zz")),
            "No models matching \"zz\"\n"
        );
    }
}
