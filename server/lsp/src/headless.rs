//! `pi-lsp run`: the same loop with no editor. Tools use the disk; the streamed answer (or, with
//! `--json`, every event as one JSON line) goes to stdout; the session is written to
//! `<workspace>/.pi/sessions/`. Exit code 0 when the run ends normally, 1 when it ends in an
//! error or abort, 2 for bad usage or configuration.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use pi_ai::{AssistantEvent, Message, StopReason};
use pi_core::agent::{AgentEvent, EventSink, RunControl};
use pi_core::fs::DiskFs;
use pi_core::resources::WorkspaceConfig;
use pi_core::session::SessionWriter;

use crate::runner::{choose_model, sessions_dir, Recorder};

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
    failed_save: Mutex<bool>,
    control: RunControl,
    /// The error of the latest assistant message, printed once at the end of the run.
    last_error: Mutex<Option<String>>,
}

#[allow(clippy::print_stdout, clippy::print_stderr)]
#[async_trait]
impl EventSink for PrintSink {
    async fn emit(&self, event: AgentEvent) {
        if let Err(e) = self.recorder.record(&event) {
            eprintln!("pi-lsp: session not saved: {e}");
            *self.failed_save.lock().unwrap_or_else(|p| p.into_inner()) = true;
            self.control.cancel.cancel();
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
    if let Some(n) = crate::runner::untrusted_notice(&ws, "run with --trust to load it") {
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
    let writer = match SessionWriter::create(
        &sessions_dir(&ws),
        &workspace,
        &model.provider,
        &model.id,
        crate::runner::thinking_level_name(&model),
    ) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("pi-lsp: {e}");
            return 2;
        }
    };
    let session_path = writer.path().to_path_buf();
    let fs = Arc::new(DiskFs::new(workspace.clone()));
    let settings = ws.settings();
    // Nobody can answer here: the settings' policy (default approve-all, as Pi's print mode)
    // or --approve; a call the policy would ask about gets CANNOT_ASK as its result.
    let policy = if args.approve {
        pi_core::approval::ApprovalPolicy::ApproveAll
    } else {
        settings
            .approval_policy
            .unwrap_or(pi_core::approval::HEADLESS_DEFAULT)
    };
    let gate = Arc::new(pi_core::approval::Gate::new(
        policy,
        pi_core::approval::rules_from_settings(&settings.merged),
        None,
        None,
        CANNOT_ASK,
    ));
    let mut cfg = crate::runner::agent_config_with(
        &ws,
        model,
        fs,
        None,
        &[],
        None,
        crate::runner::RunAdditions {
            approval: Some(gate),
            ..Default::default()
        },
    );
    let writer = Arc::new(Mutex::new(writer));
    cfg.compaction = Some(crate::runner::compaction_config(&ws, &writer));
    let control = RunControl::default();
    control.set_modes(settings.steering_mode, settings.follow_up_mode);
    let prompt = crate::runner::expand_prompt(&ws, &args.prompt);
    let ctrl_c = control.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            ctrl_c.cancel.cancel();
        }
    });
    let sink = PrintSink {
        json: args.json,
        recorder: Recorder::new(writer),
        failed_save: Mutex::new(false),
        last_error: Mutex::new(None),
        control: control.clone(),
    };
    let outcome = pi_core::run_agent(
        &cfg,
        Vec::new(),
        vec![Message::user_text(prompt)],
        &control,
        &sink,
    )
    .await;
    eprintln!("pi-lsp: session saved to {}", session_path.display());
    let failed_save = *sink.failed_save.lock().unwrap_or_else(|p| p.into_inner());
    match outcome.stop_reason {
        StopReason::Error | StopReason::Aborted => 1,
        _ if failed_save => 1,
        _ => 0,
    }
}
