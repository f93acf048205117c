//! `pi-lsp run`: the same [`AgentSession`] as the editor's, with no editor. Tools use the disk;
//! the settings' extensions are loaded (`/name args` runs an extension command); the streamed
//! answer (or, with `--json`, every event as one JSON line) goes to stdout; the session is
//! written to the sessions folder (`<workspace>/.pi/sessions/` by default). Exit code 0 when the
//! run ends normally, 1 when it ends in an error or abort, 2 for bad usage or configuration,
//! 128 + the signal's number on SIGTERM (143), SIGHUP (129) or SIGINT (130), after the same
//! cleanup as the server's ([`crate::shutdown::stop`]: the run aborted, its results written,
//! process groups killed, the file synced and unlocked).

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use pi_ai::{AssistantEvent, Message, StopReason};
use pi_core::agent::{AgentEvent, Delivery, EventSink, WeakAgent};
use pi_core::approval::{ApprovalPolicy, Gate};
use pi_core::extension::{CustomMessage, ExtensionErrorInfo, ExtensionHost};
use pi_core::fs::{DiskFs, Fs};
use pi_core::harness::{choose_model, untrusted_notice, AgentSession, Recorder, SessionSetup};
use pi_core::resources::WorkspaceConfig;
use pi_core::session::SessionWriter;
use pi_core::settings::Settings;
use pi_core::tools::BeforeBash;
use serde_json::{json, Value};

/// Options of the `run` command.
#[derive(Debug, Clone)]
pub struct RunArgs {
    pub workspace: PathBuf,
    pub model: Option<String>,
    pub json: bool,
    /// Load the workspace's project configuration (`--trust`); see
    /// [`pi_core::resources`] for what that covers.
    pub trust: bool,
    /// `--approve`: approve every tool call (`approvalPolicy` `approve-all` for this run).
    pub approve: bool,
    pub prompt: String,
}

/// The model's text for a call the policy would ask about: `run` cannot ask.
pub const CANNOT_ASK: &str = "Not run: the approval policy asks the user before this tool call, and `pi-lsp run` cannot ask. Run it again with --approve (or set approvalPolicy to \"approve-all\" or \"auto-edit\") to allow it.";

struct PrintSink {
    json: bool,
    recorder: Recorder,
    /// Set when the session could not be saved (the run is then stopped; exit code 1).
    failed_save: Arc<AtomicBool>,
    agent: WeakAgent,
    /// The error of the latest assistant message, printed once at the end of the run.
    last_error: Mutex<Option<String>>,
}

#[allow(clippy::print_stdout, clippy::print_stderr)]
#[async_trait]
impl EventSink for PrintSink {
    async fn emit(&self, event: AgentEvent) {
        if let Err(e) = self.recorder.record(&event) {
            eprintln!("pi-lsp: session not saved: {e}");
            self.failed_save.store(true, Ordering::SeqCst);
            if let Some(a) = self.agent.upgrade() {
                a.abort();
            }
        }
        let mut out = std::io::stdout().lock();
        if self.json {
            let _ = writeln!(out, "{}", serde_json::to_string(&event).unwrap_or_default());
        } else {
            match &event {
                AgentEvent::MessageUpdate {
                    assistant_message_event: AssistantEvent::TextDelta { delta, .. },
                } => {
                    let _ = write!(out, "{delta}");
                }
                AgentEvent::MessageEnd {
                    message: Message::Assistant(a),
                } => {
                    if !a.text().is_empty() {
                        let _ = writeln!(out);
                    }
                    // Failed attempts are reported by the retry events; the last error is
                    // printed when the run ends.
                    *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) =
                        a.error_message.clone();
                }
                AgentEvent::AutoRetryStart {
                    attempt,
                    max_attempts,
                    delay_ms,
                    error_message,
                } => {
                    eprintln!(
                        "pi-lsp: {error_message}; retrying ({attempt}/{max_attempts}) in {:.1} s",
                        *delay_ms as f64 / 1000.0
                    );
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
                AgentEvent::AgentEnd { .. } => {
                    if let Some(e) = self
                        .last_error
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .take()
                    {
                        eprintln!("pi-lsp: {e}");
                    }
                }
                AgentEvent::ToolExecutionStart {
                    tool_name, args, ..
                } => {
                    let _ = writeln!(out, "→ {tool_name} {args}");
                }
                AgentEvent::ToolExecutionEnd {
                    is_error: true,
                    result,
                    ..
                } => {
                    let text = pi_ai::join_text(&result.content);
                    let _ = writeln!(out, "  ✗ {}", text.lines().last().unwrap_or(""));
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
    /// The session's agent, for the extensions' custom messages (set with the listeners).
    agent: Arc<OnceLock<WeakAgent>>,
}

impl SessionSetup for HeadlessSetup {
    fn fs(&self) -> (Arc<dyn Fs>, Option<BeforeBash>) {
        (Arc::new(DiskFs::new(self.root.clone())), None)
    }

    fn gate(&self, ws: &WorkspaceConfig, _session_id: &str) -> Arc<Gate> {
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

    fn extension_host(
        &self,
        session_id: &str,
        writer: &Arc<std::sync::Mutex<SessionWriter>>,
    ) -> Arc<dyn ExtensionHost> {
        Arc::new(HeadlessHost {
            cwd: self.root.clone(),
            session_id: session_id.to_string(),
            writer: writer.clone(),
            agent: self.agent.clone(),
        })
    }

    fn listeners(
        &self,
        _session_id: &str,
        agent: &WeakAgent,
        writer: &Arc<std::sync::Mutex<SessionWriter>>,
    ) -> Vec<Arc<dyn EventSink>> {
        let _ = self.agent.set(agent.clone());
        vec![Arc::new(PrintSink {
            json: self.json,
            recorder: Recorder::new(writer.clone()),
            failed_save: self.failed_save.clone(),
            agent: agent.clone(),
            last_error: Mutex::new(None),
        })]
    }
}

/// The extensions' host without an editor: custom entries in the session file, custom
/// messages into the conversation, no UI (dialogs are cancelled, as Pi's print mode), failures
/// on stderr.
struct HeadlessHost {
    cwd: PathBuf,
    session_id: String,
    writer: Arc<std::sync::Mutex<SessionWriter>>,
    agent: Arc<OnceLock<WeakAgent>>,
}

#[async_trait]
impl ExtensionHost for HeadlessHost {
    fn cwd(&self) -> PathBuf {
        self.cwd.clone()
    }

    fn session_id(&self) -> String {
        self.session_id.clone()
    }

    fn append_entry(&self, custom_type: &str, data: Value) -> Result<String, String> {
        pi_core::extension::append_custom_entry(&self.writer, custom_type, data)
    }

    fn custom_entries(&self, custom_type: &str) -> Vec<Value> {
        pi_core::extension::custom_entries_of(&self.writer, custom_type)
    }

    /// During the run: queued (steering unless the extension asks for a follow-up); the one
    /// prompt of `run` has no next turn, so a next-turn message is appended now, as is one
    /// sent while idle (`triggerTurn` cannot start another run here).
    async fn send_message(&self, m: CustomMessage) -> Result<(), String> {
        let agent = self
            .agent
            .get()
            .and_then(WeakAgent::upgrade)
            .ok_or("the session has ended")?;
        let mut fields =
            json!({"customType": m.custom_type, "content": m.content, "display": m.display});
        if let Some(d) = &m.details {
            fields["details"] = d.clone();
        }
        let mut as_message = fields.clone();
        as_message["role"] = json!("custom");
        as_message["timestamp"] = json!(pi_ai::types::now_millis());
        let message = pi_core::session::convert_message(&as_message)
            .ok_or("content: expected a string or text/image blocks")?;
        if agent.is_streaming() && m.deliver_as != Some(Delivery::NextTurn) {
            agent.enqueue(message, m.deliver_as.unwrap_or(Delivery::Steer));
            return Ok(());
        }
        let mut w = self
            .writer
            .lock()
            .map_err(|_| "the session writer failed".to_string())?;
        w.append_entry("custom_message", fields)
            .map_err(|e| e.to_string())?;
        if !agent.is_streaming() {
            let mut messages = agent.messages();
            messages.push(message);
            let _ = agent.set_messages(messages);
        }
        Ok(())
    }

    #[allow(clippy::print_stderr)]
    async fn extension_error(&self, e: ExtensionErrorInfo) {
        eprintln!(
            "pi-lsp: extension {} failed ({}): {}",
            e.extension_path, e.event, e.error
        );
    }
}

/// Runs one prompt headless; returns the process exit code.
#[allow(clippy::print_stderr)]
pub async fn run(args: RunArgs) -> i32 {
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
    let ws = WorkspaceConfig::with_default_agent_dir(workspace.clone(), args.trust);
    if let Some(n) = untrusted_notice(&ws, "run with --trust to load it") {
        eprintln!("{n}");
    }
    let (model, notice) = match choose_model(&ws, args.model.as_deref(), None) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("pi-lsp: {e}");
            return 2;
        }
    };
    if let Some(n) = notice {
        eprintln!("{n}");
    }
    let failed_save = Arc::new(AtomicBool::new(false));
    let setup = Arc::new(HeadlessSetup {
        root: workspace,
        json: args.json,
        approve: args.approve,
        failed_save: failed_save.clone(),
        agent: Arc::new(OnceLock::new()),
    });
    let session = match AgentSession::create(ws, setup, model, None) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pi-lsp: {e}");
            return 2;
        }
    };
    let session_path = match session.writer().lock() {
        Ok(w) => w.path().to_path_buf(),
        Err(p) => p.into_inner().path().to_path_buf(),
    };
    // Extension commands come first (Pi: before templates and skills).
    if args.prompt.starts_with('/') {
        if let Some(name) = session.extensions().run_command(&args.prompt).await {
            eprintln!("pi-lsp: ran extension command /{name}");
            eprintln!("pi-lsp: session saved to {}", session_path.display());
            return 0;
        }
    }
    let agent = session.agent().clone();
    // SIGTERM, SIGHUP, SIGINT: the server's own way of going away (`crate::shutdown`).
    let mut signals = crate::shutdown::Signals::listen();
    let prompt = session.expand(&args.prompt);
    if session.prompt(vec![Message::user_text(prompt)]).is_err() {
        eprintln!("pi-lsp: the session is busy");
        return 2;
    }
    tokio::select! {
        _ = agent.wait_for_idle() => {}
        n = signals.next() => {
            eprintln!("pi-lsp: signal {n}: stopping the run");
            let targets = [crate::shutdown::Target::of(&session, None)];
            tokio::select! {
                _ = crate::shutdown::stop(&targets) => {}
                n = signals.next() => crate::shutdown::exit_now(128 + n),
            }
            eprintln!("pi-lsp: session saved to {}", session_path.display());
            return 128 + n;
        }
    }
    eprintln!("pi-lsp: session saved to {}", session_path.display());
    let stop = agent.last_outcome().map(|o| o.stop_reason);
    match stop {
        Some(StopReason::Error | StopReason::Aborted) | None => 1,
        _ if failed_save.load(Ordering::SeqCst) => 1,
        _ => 0,
    }
}
