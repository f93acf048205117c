//! The live session: Pi's `AgentSession`. One conversation and what keeps it — its [`Agent`]
//! (at most one run), its session file's writer, its model and thinking level, its approval
//! [`Gate`], its extensions, and the automatic retry and compaction switches — built from the
//! workspace's configuration ([`setup`]) the same way for every product.
//!
//! The product (the editor server, the headless `run` command) says only what differs with a
//! [`SessionSetup`]: the file system the tools use, who is asked, tools of its own, prompt
//! guidelines, the extensions' host (UI, error reporting) and the event listeners that show
//! and persist the run ([`Recorder`]). Everything else — which tools, which system prompt,
//! which settings apply, what a model or thinking change writes to the file — lives here once.
//!
//! A product keeps its live sessions in [`Sessions`] (open by id, by path or new; list; stop
//! all): see [`sessions`] for how an edge uses it. Underneath, sessions are opened with [`open_file`] (which continues a file another process holds in a
//! fork, case SESS-04) and [`AgentSession::resume`], or started with [`AgentSession::create`].

pub mod branch_summary;
mod events;
pub mod late;
mod live;
pub mod queue;
pub mod recorder;
pub mod resume;
pub mod rewind;
pub mod scope;
pub mod sessions;
pub mod setup;
mod state;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, Weak};

use pi_ai::models::{ModelError, ThinkingLevel};
use pi_ai::{Message, Model};

use crate::agent::{Agent, AgentBusy, AgentConfig, AgentHooks, EventSink, Subscription, WeakAgent};
use crate::approval::{ApprovalPolicy, Gate};
use crate::extension::{ExtensionUi, Extensions};
use crate::fs::Fs;
use crate::resources::WorkspaceConfig;
use crate::sandbox::Approver;
use crate::session::{
    read_tree, EntryData, LoadedSession, SessionError, SessionTree, SessionWriter,
};
use crate::settings::Settings;
use crate::tools::BeforeBash;

pub use events::SessionListener;
pub use live::{
    check_image, entry_text, AbortReport, BashOutcome, BranchOutcome, CustomSent, Error,
    NavigateOptions, PromptOutcome, ABORT_WAIT,
};
pub use queue::{Notice, Tracker};
pub use recorder::Recorder;
pub use sessions::{MessageLevel, OpenOptions, Sessions, WhenHeld};
pub use setup::{
    agent_config, agent_config_with, choose_model, compaction_config, expand_prompt,
    scripted_model, select_cli_tools, sessions_dir, thinking_level_name, tool_list_error,
    untrusted_notice, LateTools, RecordedTools, RunAdditions, BUILTIN_TOOLS, SCRIPTED_NOTICE,
};
pub use state::SessionStatus;

/// What a product adds to each of its sessions.
pub trait SessionSetup: Send + Sync {
    /// The file system the tools of session `session_id` use (the disk headless, the editor's
    /// buffers in the editor; ACP's client file system, whose requests name the session) and
    /// what runs before every `bash` call (the editor refuses while buffers differ from
    /// disk). Called for every run's configuration.
    fn fs(&self, session_id: &str) -> (Arc<dyn Fs>, Option<BeforeBash>);
    /// Guidelines added to the system prompt.
    fn guidelines(&self) -> Vec<String> {
        Vec::new()
    }
    /// Who the bash sandbox asks before a command leaves it (`None`: nobody; it is denied).
    fn sandbox_approver(&self, _session_id: &str) -> Option<Arc<dyn Approver>> {
        None
    }
    /// Where session `session_id`'s `bash` runs its commands (ACP: the client's terminal when
    /// it offers one); `None` (the default): in this process. Asked for every run's
    /// configuration.
    fn bash_executor(&self, _session_id: &str) -> Option<Arc<dyn crate::tools::BashExecutor>> {
        None
    }
    /// The session's approval gate (asked once, when the session is built); `tracker` is
    /// told which calls wait for the user (an abort reports no process for them).
    fn gate(&self, ws: &WorkspaceConfig, session_id: &str, tracker: &Arc<Tracker>) -> Arc<Gate>;
    /// The gate's default policy under `settings` (read again before every run).
    fn default_policy(&self, settings: &Settings) -> ApprovalPolicy;
    /// Tools added after the defaults and the extensions' (the editor's declared tools), given
    /// the names already taken and the settings' `allowedDirs`.
    fn late_tools(
        &self,
        _session_id: &str,
        _taken: &[String],
        _allowed_dirs: &[PathBuf],
    ) -> Vec<Arc<dyn crate::agent::Tool>> {
        Vec::new()
    }
    /// A number that changes whenever what [`SessionSetup::late_tools`] gives `session_id`
    /// may have (a configuration built before lacks the change); a product without late
    /// tools keeps the default 0.
    fn late_tools_generation(&self, _session_id: &str) -> u64 {
        0
    }
    /// The extensions' user interface and where their failures are reported. (Their
    /// entries and messages go to the session itself.)
    fn extension_ui(&self, session_id: &str) -> Arc<dyn ExtensionUi>;
    /// The listeners that show the session's events and notices, called after the session
    /// persisted each event and before the extensions' handlers see it.
    fn listeners(&self, session_id: &str, agent: &WeakAgent) -> Vec<Arc<dyn SessionListener>>;
    /// Tells the user `message` (the editor: `window/showMessage`; headless: stderr). Used by
    /// [`Sessions`] while opening or creating a session: a fork made because another process
    /// holds the file, repairs made while loading, a model chosen instead of the one asked
    /// for. The default logs it.
    fn show_message(&self, level: MessageLevel, message: String) {
        match level {
            MessageLevel::Info => tracing::info!("{message}"),
            MessageLevel::Warning => tracing::warn!("{message}"),
        }
    }
}

/// What changes over a session's life besides its conversation.
struct Live {
    model: Model,
    auto_retry: bool,
    auto_compaction: bool,
    name: Option<String>,
}

/// One live conversation; see the module doc. Shared as `Arc<AgentSession>`: every method
/// takes `&self`.
pub struct AgentSession {
    id: String,
    ws: Arc<WorkspaceConfig>,
    setup: Arc<dyn SessionSetup>,
    /// The single writer of the session's file. A `std` mutex on purpose: a writer poisoned
    /// by a panic in the middle of an append is reported ([`Recorder`]), not written on.
    writer: Arc<Mutex<SessionWriter>>,
    agent: Agent,
    gate: Arc<Gate>,
    extensions: Arc<Extensions>,
    tracker: Arc<Tracker>,
    listeners: Vec<Arc<dyn SessionListener>>,
    live: parking_lot::Mutex<Live>,
    parent_session: Option<String>,
    /// A rewind is in progress ([`rewind`]): prompts are refused meanwhile.
    rewinding: Arc<AtomicBool>,
    /// Opened without its model context ([`SessionWriter::open_deferred`]): the agent's
    /// messages are empty until [`AgentSession::ensure_context`] builds them.
    deferred: parking_lot::Mutex<bool>,
    /// Held by the session's listener from persisting an event until every product listener
    /// has it ([`AgentSession::events_settled`]).
    settled: Arc<tokio::sync::Mutex<()>>,
    /// Keeps the session's own listener and the extensions' event handlers registered.
    _subscriptions: Vec<Subscription>,
    /// Where change-making calls settling after their run stopped waiting go ([`late`]).
    late: Arc<late::LateEdits>,
    /// What the model read of each file, for every run's tools (case EDIT-08: a read in one
    /// prompt, an edit in the next).
    reads: Arc<crate::tools::ReadTracker>,
    /// The tool loadout the branch recorded, restored when the session was resumed and when
    /// its branch changes, the base of every run's tools before the extensions' filters
    /// ([`setup::RecordedTools`]).
    recorded_tools: parking_lot::Mutex<Option<setup::RecordedTools>>,
    /// What the configuration installed last was built from, until a run starts on it
    /// ([`AgentSession::start`] starts the run on it when nothing changed since); `None`: a run
    /// started on it, or it was made during a run.
    built_from: parking_lot::Mutex<Option<BuiltFrom>>,
    /// How many run configurations were built for the session (creation included).
    config_builds: std::sync::atomic::AtomicU64,
}

/// What a run configuration was built from, as far as it can change without a new one being
/// made: [`AgentSession::start`] builds the configuration again unless each is still the same.
/// Taken before the build, so a change during it counts as a change. Not compared: the
/// contents of skills and prompt templates: read at the build, seen from the next run that
/// builds (every later prompt).
struct BuiltFrom {
    /// [`crate::mcp::session_servers_generation`]: servers an editor handed to a session
    /// after it was created (ACP's `session/new` `mcpServers`) bring tools the configuration
    /// built before lacks.
    mcp_servers: u64,
    /// [`SessionSetup::late_tools_generation`]: the product's own tools (an editor's
    /// declared tools) changed since.
    late_tools: u64,
    /// The configuration's number ([`Agent::config_generation`]): a model, a thinking level or
    /// a switch set since made another.
    generation: u64,
    /// The settings the build read: the loader ([`crate::settings::SettingsCache`]) hands out
    /// the same value until a settings file's modification time, length or existence changes.
    settings: Arc<Settings>,
    /// The context files and `SYSTEM.md` / `APPEND_SYSTEM.md`, found or not
    /// ([`WorkspaceConfig::prompt_files_stamp`]).
    prompt_files: Vec<crate::settings::Stamp>,
    /// The branch's recorded tool loadout (a branch change restores another).
    recorded_tools: Option<setup::RecordedTools>,
    /// The plan/todo board's state (plan mode's tool filter): told of every change.
    plan: Option<tokio::sync::watch::Receiver<crate::extension::plan::PlanState>>,
}

impl BuiltFrom {
    /// Taken now for `session`'s next build; `generation` is set once the build is installed.
    fn now(
        ws: &WorkspaceConfig,
        setup: &Arc<dyn SessionSetup>,
        id: &str,
        extensions: &Extensions,
        recorded_tools: Option<&setup::RecordedTools>,
    ) -> BuiltFrom {
        BuiltFrom {
            mcp_servers: crate::mcp::session_servers_generation(),
            late_tools: setup.late_tools_generation(id),
            generation: 0,
            settings: ws.settings(),
            prompt_files: ws.prompt_files_stamp(),
            recorded_tools: recorded_tools.cloned(),
            plan: extensions.plan().map(|b| b.subscribe()),
        }
    }

    /// Whether `session`'s configuration would be built from the same as now.
    fn is_current(&self, session: &AgentSession) -> bool {
        self.generation == session.agent.config_generation()
            && self.mcp_servers == crate::mcp::session_servers_generation()
            && self.late_tools == session.setup.late_tools_generation(&session.id)
            && Arc::ptr_eq(&self.settings, &session.ws.settings())
            && self.prompt_files == session.ws.prompt_files_stamp()
            && self.recorded_tools == *session.recorded_tools.lock()
            && self
                .plan
                .as_ref()
                .is_none_or(|rx| matches!(rx.has_changed(), Ok(false)))
    }
}

/// A session file opened by [`open_file`].
// Returned once per open and taken apart at once: boxing the large variant buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum Opening {
    /// The file's session is already live here (its id, from the header).
    AlreadyOpen(String),
    /// The file, ready for [`AgentSession::resume`], with what the user should be told
    /// (repairs made while loading; a fork made because another process holds the file).
    Opened {
        writer: SessionWriter,
        loaded: LoadedSession,
        notices: Vec<String>,
    },
}

/// Opens the session file at `path` for writing. `open_here(id)` gives the file of the session
/// with that id live here, if any: the same file is [`Opening::AlreadyOpen`] (a second writer
/// would take over its lock), another file with that id is [`SessionError::IdInUse`]. A file
/// another process appends to is continued in a fork in `ws`'s sessions folder (case SESS-04);
/// damage repaired while loading (a torn last line, damaged lines, a migration) is reported
/// (SESS-01, SESS-02).
pub fn open_file(
    ws: &WorkspaceConfig,
    path: &Path,
    open_here: impl Fn(&str) -> Option<PathBuf>,
) -> Result<Opening, SessionError> {
    open_file_with(ws, path, open_here, true)
}

/// [`open_file`], where `fork_if_held: false` refuses a file another process appends to with
/// [`SessionError::Locked`] (naming that process) instead of continuing it in a fork: for an
/// edge whose client addresses sessions by id and cannot follow a fork's new id (ACP).
pub fn open_file_with(
    ws: &WorkspaceConfig,
    path: &Path,
    open_here: impl Fn(&str) -> Option<PathBuf>,
    fork_if_held: bool,
) -> Result<Opening, SessionError> {
    let same = |a: &Path, b: &Path| {
        a == b
            || matches!((crate::platform::paths::canonicalize(a), crate::platform::paths::canonicalize(b)), (Ok(x), Ok(y)) if crate::platform::paths::same_path(&x, &y))
    };
    let is_open = |id: &str| -> Result<bool, SessionError> {
        match open_here(id) {
            Some(other) if same(&other, path) => Ok(true),
            Some(other) => Err(SessionError::IdInUse {
                id: id.to_string(),
                path: path.to_path_buf(),
                other,
            }),
            None => Ok(false),
        }
    };
    if let Some(id) = header_id(path) {
        if is_open(&id)? {
            return Ok(Opening::AlreadyOpen(id));
        }
    }
    let mut notices = Vec::new();
    let images = image_options(ws);
    let (writer, loaded) = match SessionWriter::open_deferred(path, images) {
        Ok(w) => w,
        Err(SessionError::Locked { pid, .. }) if fork_if_held => {
            let (tree, _) = read_tree(path, false)?;
            let id = tree.header["id"].as_str().unwrap_or_default().to_string();
            if is_open(&id)? {
                return Ok(Opening::AlreadyOpen(id));
            }
            // The fork opened as a plain open is (the tree only, the context built when it
            // is needed), the held file's tree gone first: it costs what an open costs.
            let forked = SessionWriter::write_fork(path, &tree, &sessions_dir(ws), None, images)?;
            drop(tree);
            let fork = SessionWriter::open_deferred(&forked, images)?;
            notices.push(format!(
                "pi-lsp: session {id} is open in another process ({pid}); continuing in a fork, session {}",
                fork.1.id
            ));
            fork
        }
        Err(e) => return Err(e),
    };
    if !loaded.warnings.is_empty() {
        notices.push(format!(
            "pi-lsp: session {} was repaired while opening: {}",
            loaded.id,
            loaded.warnings.join("; ")
        ));
    }
    Ok(Opening::Opened {
        writer,
        loaded,
        notices,
    })
}

/// `sessions.imageStorage` / `sessions.imageTurns` of `ws`'s settings (a wrong value is
/// logged and keeps its default).
fn image_options(ws: &WorkspaceConfig) -> crate::session::ImageOptions {
    let (o, warnings) = crate::session::ImageOptions::from_settings(&ws.settings().merged);
    for w in warnings {
        tracing::warn!("{w}");
    }
    o
}

/// The model-context image window as a loop hook: before every request, images older than
/// the last `keep_turns` user messages are replaced by a note ([`crate::session::image_window`]),
/// so a long session neither sends nor keeps in memory every image it ever saw (case SESS-05).
struct ImageWindow {
    keep_turns: Option<usize>,
}

#[async_trait::async_trait]
impl AgentHooks for ImageWindow {
    async fn prepare_next_turn(&self, next: &mut crate::agent::NextTurn) {
        // A context without images is left as it is (and not marked changed: the run keeps
        // what it counted of it).
        if next.messages().iter().any(has_image) {
            crate::session::image_window(next.messages_mut(), self.keep_turns);
        }
    }
}

/// True when `m` holds an image block (what [`crate::session::image_window`] may replace).
fn has_image(m: &Message) -> bool {
    let blocks = match m {
        Message::User(u) => match &u.content {
            pi_ai::UserContent::Blocks(b) => b,
            pi_ai::UserContent::Text(_) => return false,
        },
        Message::ToolResult(r) => &r.content,
        Message::Assistant(_) | Message::System(_) => return false,
    };
    blocks
        .iter()
        .any(|b| matches!(b, pi_ai::ContentBlock::Image(_)))
}

/// The `id` of a session file's header line.
fn header_id(path: &Path) -> Option<String> {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(std::fs::File::open(path).ok()?)
        .read_line(&mut line)
        .ok()?;
    let v: serde_json::Value = serde_json::from_str(&line).ok()?;
    v["id"].as_str().map(str::to_string)
}

impl AgentSession {
    /// A new session and file in `ws`'s sessions folder with `model` (its thinking level as
    /// set) and `name`.
    pub fn create(
        ws: Arc<WorkspaceConfig>,
        setup: Arc<dyn SessionSetup>,
        model: Model,
        name: Option<&str>,
    ) -> Result<Arc<AgentSession>, SessionError> {
        Self::create_in(ws, setup, model, name, None)
    }

    /// [`AgentSession::create`] with its file at `at` (which must not exist; `None`: a new
    /// file in the sessions folder), as Pi 1.6 keeps a new session at the path `--session`
    /// names.
    pub fn create_in(
        ws: Arc<WorkspaceConfig>,
        setup: Arc<dyn SessionSetup>,
        model: Model,
        name: Option<&str>,
        at: Option<&std::path::Path>,
    ) -> Result<Arc<AgentSession>, SessionError> {
        let level = thinking_level_name(&model);
        let mut writer = match at {
            None => SessionWriter::create(
                &sessions_dir(&ws),
                ws.root(),
                &model.provider,
                &model.id,
                level,
            )?,
            Some(path) => {
                SessionWriter::create_at(path, ws.root(), &model.provider, &model.id, level)?
            }
        };
        writer.set_image_options(image_options(&ws));
        if let Some(n) = name {
            writer.set_name(n)?;
        }
        let s = AgentSession::new(
            ws,
            setup,
            writer,
            model,
            Vec::new(),
            queue::UsageTotals::default(),
            (name.map(str::to_string), None),
            false,
        );
        Ok(s)
    }

    /// The session of an opened file ([`open_file`]): the model recorded on its path (else the
    /// usual choice with `init_model`), with the thinking level recorded there.
    pub fn resume(
        ws: Arc<WorkspaceConfig>,
        setup: Arc<dyn SessionSetup>,
        writer: SessionWriter,
        loaded: LoadedSession,
        init_model: Option<&str>,
    ) -> Result<Arc<AgentSession>, ModelError> {
        let wanted = loaded.model.as_ref().map(|(p, m)| format!("{p}/{m}"));
        let mut model = match choose_model(&ws, wanted.as_deref(), None) {
            Ok((m, _)) => m,
            Err(e) => {
                let m = choose_model(&ws, None, init_model)?.0;
                // Pi 1.6's `createAgentSession` → `modelFallbackMessage`, a warning in every
                // mode: the recorded model is gone from models.json (or its provider).
                if let Some(w) = &wanted {
                    tracing::debug!("restoring {w}: {e}");
                    setup.show_message(
                        MessageLevel::Warning,
                        format!("Could not restore model {w}. Using {}/{}", m.provider, m.id),
                    );
                }
                m
            }
        };
        // Pi 1.6: the level recorded on the path, else `defaultThinkingLevel` or `medium`.
        model.thinking_level = Some(
            match loaded
                .thinking_level
                .as_deref()
                .and_then(ThinkingLevel::parse)
            {
                Some(level) => model.clamp_thinking_level(level),
                None => setup::resumed_thinking_level(&ws.settings(), &model),
            },
        );
        let parent = loaded.tree.header["parentSession"]
            .as_str()
            .map(str::to_string);
        let usage = file_usage(&loaded.tree);
        Ok(AgentSession::new(
            ws,
            setup,
            writer,
            model,
            loaded.messages,
            usage,
            (loaded.name, parent),
            loaded.deferred,
        ))
    }

    /// A session around `writer` with an agent on `messages`; `usage`: the responses already
    /// in the file; `(name, parent session)` from its file; `deferred`: `messages` are to be
    /// built from the writer on first use.
    #[allow(clippy::too_many_arguments)]
    fn new(
        ws: Arc<WorkspaceConfig>,
        setup: Arc<dyn SessionSetup>,
        writer: SessionWriter,
        model: Model,
        messages: Vec<Message>,
        usage: queue::UsageTotals,
        (name, parent_session): (Option<String>, Option<String>),
        deferred: bool,
    ) -> Arc<AgentSession> {
        let mut writer = writer;
        writer.set_pi073_format(!crate::session::writes_pi16(&ws.settings().merged));
        let recorded_tools = setup::RecordedTools::of_writer(&writer);
        // Usage from before the branch's latest compaction or context edit (Pi 1.6).
        let usage_from = if deferred {
            0
        } else {
            writer.tree().usage_from(writer.leaf())
        };
        Arc::new_cyclic(|me: &Weak<AgentSession>| {
            let id = writer.id().to_string();
            let writer = Arc::new(Mutex::new(writer));
            let tracker = Arc::new(Tracker::new(usage));
            let gate = setup.gate(&ws, &id, &tracker);
            let host = Arc::new(events::SessionHost::new(
                me.clone(),
                writer.clone(),
                ws.root().to_path_buf(),
                id.clone(),
                setup.extension_ui(&id),
            ));
            let extensions = load_extensions(&ws, host);
            let settings = ws.settings();
            let reads = Arc::new(crate::tools::ReadTracker::default());
            let mut built_from =
                BuiltFrom::now(&ws, &setup, &id, &extensions, recorded_tools.as_ref());
            let mut cfg = build_config(
                &ws,
                &setup,
                &id,
                &model,
                &writer,
                &gate,
                &extensions,
                &reads,
                recorded_tools.as_ref(),
            );
            let file = writer
                .lock()
                .map(|w| w.path().to_path_buf())
                .unwrap_or_default();
            let late = Arc::new(late::LateEdits::new(file, &writer, &tracker));
            cfg.late_results = Some(late.clone());
            let auto_retry = cfg.retry.enabled;
            let auto_compaction = cfg.compaction.as_ref().is_some_and(|c| c.settings.enabled);
            reads.seed(ws.root(), &messages);
            tracing::debug!(session = %id, builds = 1, "run configuration built");
            let agent = Agent::new(cfg, Vec::new());
            built_from.generation = agent.config_generation();
            let _ = agent.set_context(messages, usage_from);
            agent.set_queue_modes(settings.steering_mode, settings.follow_up_mode);
            let weak = agent.downgrade();
            let listeners = setup.listeners(&id, &weak);
            late.set_listeners(listeners.clone());
            let settled = Arc::new(tokio::sync::Mutex::new(()));
            // Pi's order (`_handleAgentEvent`: "Emit to extensions first, then notify public
            // listeners"): an extension's handler has run before the file and the listeners get
            // the event, so a client that sees `agent_end` sees the state the handler left
            // (plan mode's finished plan, its entries).
            let mut subscriptions = Vec::with_capacity(2);
            if extensions.has_event_handlers() {
                let ext: Arc<dyn EventSink> = extensions.clone();
                subscriptions.push(agent.subscribe(ext));
            }
            subscriptions.push(agent.subscribe(Arc::new(events::SessionEvents::new(
                weak,
                Recorder::with_format(
                    writer.clone(),
                    crate::session::writes_pi16(&settings.merged),
                ),
                tracker.clone(),
                listeners.clone(),
                settled.clone(),
            ))));
            if let (Some(board), Ok(rt)) =
                (extensions.plan(), tokio::runtime::Handle::try_current())
            {
                // Every change of the plan/todo state to the listeners, until the board goes.
                let mut rx = board.subscribe();
                let listeners = listeners.clone();
                rt.spawn(async move {
                    while rx.changed().await.is_ok() {
                        let state = rx.borrow_and_update().clone();
                        for l in &listeners {
                            l.notice(Notice::Plan(state.clone())).await;
                        }
                    }
                });
            }
            AgentSession {
                id,
                ws,
                setup,
                writer,
                agent,
                gate,
                extensions,
                tracker,
                listeners,
                live: parking_lot::Mutex::new(Live {
                    model,
                    auto_retry,
                    auto_compaction,
                    name,
                }),
                parent_session,
                rewinding: Arc::default(),
                deferred: parking_lot::Mutex::new(deferred),
                settled,
                _subscriptions: subscriptions,
                late,
                reads,
                recorded_tools: parking_lot::Mutex::new(recorded_tools),
                built_from: parking_lot::Mutex::new(Some(built_from)),
                config_builds: std::sync::atomic::AtomicU64::new(1),
            }
        })
    }

    /// Forgets what the installed configuration was built from: the next start configures
    /// afresh (a `/command` may change what the configuration reads).
    pub(crate) fn forget_kept_config(&self) {
        *self.built_from.lock() = None;
    }

    /// How many run configurations were built for the session, its creation's included (a
    /// figure for tests and diagnostics).
    pub fn config_builds(&self) -> u64 {
        self.config_builds
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The configuration of the session's next run: tools, system prompt and settings read
    /// afresh from the workspace (see [`setup::agent_config_with`]), the session's model,
    /// compaction into its file, its extensions' tools and hooks, its switches.
    pub fn config(&self) -> AgentConfig {
        self.build().0
    }

    /// [`AgentSession::config`], and what it was built from.
    fn build(&self) -> (AgentConfig, BuiltFrom) {
        let recorded_tools = self.recorded_tools.lock().clone();
        let from = BuiltFrom::now(
            &self.ws,
            &self.setup,
            &self.id,
            &self.extensions,
            recorded_tools.as_ref(),
        );
        let (model, auto_retry, auto_compaction) = {
            let l = self.live.lock();
            (l.model.clone(), l.auto_retry, l.auto_compaction)
        };
        let mut cfg = build_config(
            &self.ws,
            &self.setup,
            &self.id,
            &model,
            &self.writer,
            &self.gate,
            &self.extensions,
            &self.reads,
            recorded_tools.as_ref(),
        );
        cfg.retry.enabled = auto_retry;
        cfg.late_results = Some(self.late.clone());
        if let Some(c) = cfg.compaction.as_mut() {
            c.settings.enabled = auto_compaction;
        }
        let builds = 1 + self
            .config_builds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(session = %self.id, builds, "run configuration built");
        (cfg, from)
    }

    /// Builds the configuration and makes it the agent's, for its next run; remembers what it
    /// was built from unless a run is active (what that run does may change it).
    fn install_config(&self) {
        let (cfg, mut from) = self.build();
        self.agent.set_config(cfg);
        from.generation = self.agent.config_generation();
        *self.built_from.lock() = (!self.agent.is_streaming()).then_some(from);
    }

    /// Configures the next run afresh (tools, caps and project instructions are re-read) when
    /// no run is active; a run keeps the configuration it started with.
    pub fn reconfigure(&self) {
        if !self.agent.is_streaming() {
            self.install_config();
        }
    }

    /// Starts a run on `messages` (already expanded); returns its run id. While a run is
    /// finishing (its `agent_end` sent), this starts the next one. Refused while a run is
    /// active or a rewind is in progress ([`rewind`]).
    pub fn start(&self, messages: Vec<Message>) -> Result<String, Error> {
        if self.is_rewinding() {
            return Err(Error::Busy(format!(
                "session {} is rewinding (agent/session/rewind); send the prompt when it has answered",
                self.id
            )));
        }
        self.ensure_context();
        // The configuration installed last (at the session's creation, a model or level set)
        // when no run started on it and nothing it was built from changed since ([`BuiltFrom`]:
        // its number, the settings files, the context files and `SYSTEM.md`, the branch's
        // loadout, the plan board); else built now. A run started on it uses it up: a run may change what it reads (the files its
        // tools write, an extension's state), so the next start builds afresh.
        let from = self.built_from.lock().take();
        if !from.is_some_and(|f| f.is_current(self)) {
            self.reconfigure();
        }
        *self.built_from.lock() = None;
        // Pi 1.6 stores the system message a run starts with after the compaction its
        // prompt may be preceded by: then the run's `agent_start` stores it.
        if !self.agent.is_streaming() && !self.agent.compacts_before_prompt() {
            self.store_system_message();
        }
        self.agent
            .prompt(messages)
            .map(|(run_id, _)| run_id)
            .map_err(|_| self.busy_error())
    }

    /// Pi 1.6: stores the system message the next run's prompt and tools call for (nothing
    /// when the branch replays to them already, or with `sessions.format: "pi-0.73"`), before
    /// the run starts, so every view of the file taken after a prompt holds it (the run's
    /// `agent_start` checks again, for runs started otherwise). A failed write is logged: the
    /// run's own appends report it.
    fn store_system_message(&self) {
        if !crate::session::writes_pi16(&self.ws.settings().merged) {
            return;
        }
        let stored = recorder::store_system(&self.writer, &self.agent);
        if let Err(e) = stored {
            tracing::error!("session not saved: {e}");
        }
    }

    /// The error of a prompt without a queueing behaviour during a run.
    fn busy_error(&self) -> Error {
        Error::Busy(format!(
            "session {} is running {}; send streamingBehavior \"steer\" or \"followUp\" to queue this prompt, or agent/abort first",
            self.id,
            self.agent.run_id().unwrap_or_default()
        ))
    }

    /// What the user typed, expanded as Pi does (`/skill:name args`, `/template args`).
    pub fn expand(&self, text: &str) -> String {
        expand_prompt(&self.ws, text)
    }

    /// Makes `model` the session's model at Pi 1.6's level for a switch (settings'
    /// `modelThinkingLevels` for it, else `defaultThinkingLevel`, else the session's level;
    /// clamped): writes a `model_change` (and a `thinking_level_change` when the level
    /// changed) and configures later runs. On a write error nothing changes.
    pub fn set_model(&self, model: Model) -> Result<(), SessionError> {
        self.set_model_at(model, None)
    }

    /// [`AgentSession::set_model`] at Pi 1.6's level for a model switch
    /// (`_getThinkingLevelForModelSwitch`): `explicit` (a scope pattern's `:level`), else
    /// settings' `modelThinkingLevels` for the model, else `defaultThinkingLevel`, else the
    /// session's level; clamped to the model.
    fn set_model_at(
        &self,
        mut model: Model,
        explicit: Option<ThinkingLevel>,
    ) -> Result<(), SessionError> {
        let before = self.live.lock().model.thinking_level;
        let settings = self.ws.settings();
        let level = explicit
            .or_else(|| setup::model_thinking_level(&settings, &model))
            .or(settings.default_thinking_level)
            .or(before)
            .or(model.thinking_level);
        if let Some(level) = level {
            model.thinking_level = Some(model.clamp_thinking_level(level));
        }
        {
            let mut w = self.lock_writer()?;
            w.append(EntryData::ModelChange {
                provider: model.provider.clone(),
                model_id: model.id.clone(),
            })?;
            if model.thinking_level != before {
                w.append(EntryData::ThinkingLevelChange {
                    thinking_level: thinking_level_name(&model).to_string(),
                })?;
            }
        }
        self.live.lock().model = model;
        self.install_config();
        Ok(())
    }

    /// Pi 1.6's `cycleModel`: the session switches to the model after its own (`backward`:
    /// before it) among settings' `enabledModels` when they name any ([`scope`]), else among
    /// every usable model, at Pi's level for a switch (the pattern's `:level` first); the
    /// session's model not among them goes to the first (backward: the last). Returns whether
    /// the scope was used, `None` (nothing changed) when there is no other model to go to.
    pub fn cycle_model(&self, backward: bool) -> Result<Option<bool>, SessionError> {
        let scope = scope::workspace_scope(&self.ws).filter(|s| !s.models.is_empty());
        let scoped = scope.is_some();
        let candidates: Vec<(Model, Option<ThinkingLevel>)> = match scope {
            Some(s) => s
                .models
                .into_iter()
                .map(|m| (m.model, m.thinking_level))
                .collect(),
            None => scope::usable_models(&self.ws)
                .into_iter()
                .map(|m| (m, None))
                .collect(),
        };
        let current = self.model();
        let at = candidates
            .iter()
            .position(|(m, _)| m.provider == current.provider && m.id == current.id);
        let Some(next) = scope::next_cycle_index(at, candidates.len(), backward) else {
            return Ok(None);
        };
        let Some((model, level)) = candidates.into_iter().nth(next) else {
            return Ok(None);
        };
        self.set_model_at(model, level)?;
        Ok(Some(scoped))
    }

    /// Makes the model `provider/id` of the workspace the session's model (see
    /// [`AgentSession::set_model`]); an unknown model changes nothing.
    pub fn set_model_by_id(&self, full_id: &str) -> Result<(), Error> {
        let (model, _) = choose_model(&self.ws, Some(full_id), None)
            .map_err(|e| Error::Model(format!("model: {e}")))?;
        self.set_model(model).map_err(Error::Session)
    }

    /// Sets the thinking level (clamped to the model), writing `thinking_level_change` when
    /// it changes; returns the level in effect.
    pub fn set_thinking_level(&self, level: ThinkingLevel) -> Result<ThinkingLevel, SessionError> {
        let (level, changed) = {
            let l = self.live.lock();
            let level = l.model.clamp_thinking_level(level);
            (level, l.model.thinking_level != Some(level))
        };
        if changed {
            self.lock_writer()?.append(EntryData::ThinkingLevelChange {
                thinking_level: level.as_str().to_string(),
            })?;
            self.live.lock().model.thinking_level = Some(level);
            self.install_config();
        }
        Ok(level)
    }

    /// Names the session (`session_info`).
    pub fn set_name(&self, name: &str) -> Result<(), SessionError> {
        self.lock_writer()?.set_name(name)?;
        self.live.lock().name = Some(name.to_string());
        Ok(())
    }

    /// Automatic retry of transient provider failures, from the next run.
    pub fn set_auto_retry(&self, on: bool) {
        self.live.lock().auto_retry = on;
        self.reconfigure();
    }

    /// Automatic compaction (threshold and overflow), from the next run.
    pub fn set_auto_compaction(&self, on: bool) {
        self.live.lock().auto_compaction = on;
        self.reconfigure();
    }

    /// The writer, or an error when another thread panicked holding it (the one policy:
    /// [`crate::session::lock_writer`]).
    fn lock_writer(&self) -> Result<std::sync::MutexGuard<'_, SessionWriter>, SessionError> {
        crate::session::lock_writer(&self.writer)
    }

    /// The session's id (its file header's `id`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Waits until no event of the session is between being persisted and being handed to
    /// the [`SessionListener`]s, and keeps it so while the guard lives: what the file holds
    /// and what the listeners were given then agree (a listener's view of the streaming
    /// message and the entries, read together). Events wait meanwhile: hold it briefly.
    pub async fn events_settled(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.settled.lock().await
    }

    /// The workspace the session runs in.
    pub fn workspace(&self) -> &Arc<WorkspaceConfig> {
        &self.ws
    }

    /// The session's agent, its messages the branch's model context (a session opened
    /// without it has it built first: [`AgentSession::ensure_context`]). Not handed to
    /// products: what they need is a method of the session ([`state`]).
    pub(crate) fn agent(&self) -> &Agent {
        self.ensure_context();
        &self.agent
    }

    /// The session's agent for what does not read its messages (streaming, run id, queue
    /// modes, abort, waiting): a session opened without its context stays without it.
    pub(crate) fn agent_handle(&self) -> &Agent {
        &self.agent
    }

    /// How many messages the agent holds as Pi 1.6 counts them: the model context
    /// ([`Agent::message_count`]; counted from the file's tree while the context is not built,
    /// [`SessionTree::message_count`]) and the stored system messages of the branch.
    pub fn message_count(&self) -> usize {
        let deferred = self.deferred.lock();
        let Ok(w) = self.lock_writer() else {
            return self.agent.message_count();
        };
        // Pi 1.6 counts the stored system messages its agent replays too.
        if *deferred {
            return w.tree().agent_message_count(w.leaf());
        }
        self.agent.message_count() + w.tree().system_message_count(w.leaf())
    }

    /// Builds the model context of a session opened without it (the branch at the writer's
    /// leaf) into the agent, once; later calls return at once. A poisoned writer leaves the
    /// agent without context (its appends are refused too).
    pub(crate) fn ensure_context(&self) {
        let mut deferred = self.deferred.lock();
        if !*deferred {
            return;
        }
        let Ok(context) = self.lock_writer().map(|w| w.agent_context()) else {
            return;
        };
        self.reads.seed(self.ws.root(), &context.messages);
        if self
            .agent
            .set_context(context.messages, context.usage_from)
            .is_ok()
        {
            *deferred = false;
        }
    }

    /// Sets the agent's messages to a branch's context (a branch, a rewind; `usage_from`: its
    /// [`crate::session::SessionContext::usage_from`]): a deferred context is not built then.
    pub(crate) fn set_messages(
        &self,
        messages: Vec<Message>,
        usage_from: usize,
    ) -> Result<(), AgentBusy> {
        {
            let mut deferred = self.deferred.lock();
            self.agent.set_context(messages, usage_from)?;
            *deferred = false;
        }
        // The leaf moved: the new branch's recorded tools are the base again (Pi 1.6's
        // navigateTree restores them), then extensions rebuild their state of it.
        if let Ok(w) = self.lock_writer() {
            *self.recorded_tools.lock() = setup::RecordedTools::of_writer(&w);
        }
        // The leaf moved: extensions rebuild their state of the branch (Pi's session_tree).
        self.extensions.session_tree();
        Ok(())
    }

    /// The session file's path.
    pub fn file(&self) -> PathBuf {
        crate::session::lock_writer_for_close(&self.writer)
            .path()
            .to_path_buf()
    }

    /// Every entry of the session file as written so far: the writer's own tree (it holds the
    /// file's lock, so nothing else appends), and the leaf.
    pub fn tree(&self) -> Result<(Arc<SessionTree>, Option<String>), SessionError> {
        let w = self.lock_writer()?;
        Ok((w.tree_snapshot(), w.leaf().map(str::to_string)))
    }

    /// The model of the next run (with its thinking level).
    pub fn model(&self) -> Model {
        self.live.lock().model.clone()
    }

    /// The session's plan/todo state (the built-in `todo` / `plan-mode` extensions' board;
    /// `None` when both are off): read it with `state()`, follow it with `subscribe()`, switch
    /// plan mode with `set_plan_mode()`. Every change is also told to the session's
    /// listeners as [`Notice::Plan`].
    pub fn plan(&self) -> Option<&Arc<crate::extension::plan::PlanBoard>> {
        self.extensions.plan()
    }

    /// The session's name (`session_info`).
    pub fn name(&self) -> Option<String> {
        self.live.lock().name.clone()
    }

    /// The file this session was forked from (header `parentSession`).
    pub fn parent_session(&self) -> Option<&str> {
        self.parent_session.as_deref()
    }

    /// Whether automatic retry is on.
    pub fn auto_retry(&self) -> bool {
        self.live.lock().auto_retry
    }

    /// Whether automatic compaction is on.
    pub fn auto_compaction(&self) -> bool {
        self.live.lock().auto_compaction
    }

    /// Listens to the session's agent events (Pi's `subscribe`); dropping the subscription
    /// ends it.
    pub fn subscribe(&self, sink: Arc<dyn EventSink>) -> Subscription {
        self.agent.subscribe(sink)
    }

    /// Tells every listener `notice`.
    async fn tell(&self, notice: Notice) {
        for l in &self.listeners {
            l.notice(notice.clone()).await;
        }
    }
}

/// Usage of every assistant message in the file (all branches), with Pi 1.6's `usage` entries
/// and the usage of compaction and branch summaries.
pub fn file_usage(tree: &SessionTree) -> queue::UsageTotals {
    let mut t = queue::UsageTotals::default();
    // Only the entries that can hold usage are read (an assistant message, the kinds below).
    let maybe = |s: crate::session::EntryShape| {
        (s.may_be_kind("message") && s.may_have_role("assistant"))
            || ["usage", "compaction", "branch_summary"]
                .iter()
                .any(|k| s.may_be_kind(k))
    };
    for e in tree.entries_where(maybe) {
        if let Some(u) = e.assistant().and_then(|a| a.usage()) {
            queue::add_usage(&mut t, &u);
        } else if matches!(e.kind.as_str(), "usage" | "compaction" | "branch_summary") {
            // Pi 1.6: `usage` entries (any `kind`) and the summaries' own usage.
            let raw = e.raw();
            if let Ok(u) = serde_json::from_value::<pi_ai::Usage>(raw["usage"].clone()) {
                if raw.get("usage").is_some() {
                    queue::add_usage(&mut t, &u);
                }
            }
        }
    }
    t
}

/// The configuration of a session's run before its switches apply; see
/// [`AgentSession::config`].
#[allow(clippy::too_many_arguments)]
fn build_config(
    ws: &WorkspaceConfig,
    setup: &Arc<dyn SessionSetup>,
    id: &str,
    model: &Model,
    writer: &Arc<Mutex<SessionWriter>>,
    gate: &Arc<Gate>,
    extensions: &Arc<Extensions>,
    reads: &Arc<crate::tools::ReadTracker>,
    recorded_tools: Option<&setup::RecordedTools>,
) -> AgentConfig {
    // The default policy and the workspace rules follow the settings as they are now.
    let settings = ws.settings();
    gate.refresh(
        setup.default_policy(&settings),
        crate::approval::rules_from_settings(&settings.merged),
    );
    let (fs, before_bash) = setup.fs(id);
    let approver = setup.sandbox_approver(id);
    let late = setup.clone();
    let late_id = id.to_string();
    let mut cfg = agent_config_with(
        ws,
        model.clone(),
        fs,
        before_bash,
        &setup.guidelines(),
        approver.map(|a| (a, id)),
        RunAdditions {
            approval: Some(gate.clone()),
            extra_tools: extensions.tools(),
            late_tools: Some(Box::new(move |taken, allowed| {
                late.late_tools(&late_id, taken, allowed)
            })),
            tool_filter: Some(&|registered, tools| extensions.filter_tools(registered, tools)),
            session_env: crate::tools::session_env(
                id,
                Some(crate::session::lock_writer_for_close(writer).path()),
                model,
            ),
            bash_executor: setup.bash_executor(id),
            reads: Some(reads.clone()),
            recorded_tools,
        },
    );
    cfg.session_id = Some(Arc::from(id));
    cfg.compaction = Some(compaction_config(ws, writer, &cfg.model));
    cfg.system_messages = Some(Arc::new(StoredSystemMessages {
        writer: writer.clone(),
    }));
    // MCP servers' tools (the workspace's, and servers handed to this session).
    // `--tools` filters them (Pi 1.6), then the extensions' tool filters apply to them as to
    // the run's own tools.
    // The branch's recorded loadout first: an MCP tool it removed stays off (Pi 1.6).
    let restored = setup::restored_tools(ws, recorded_tools).cloned();
    cfg.dynamic_tools = crate::mcp::run_tools(ws, id, writer).map(|t| {
        let tools = t as Arc<dyn crate::agent::ToolProvider>;
        let tools = match restored {
            Some(recorded) => Arc::new(setup::RecordedToolFilter {
                inner: tools,
                recorded,
                entries: ws.overrides().tools.clone().unwrap_or_default(),
            }) as Arc<dyn crate::agent::ToolProvider>,
            None => tools,
        };
        let tools = match &ws.overrides().tools {
            Some(entries) => Arc::new(setup::CliToolFilter {
                inner: tools,
                entries: entries.clone(),
            }) as Arc<dyn crate::agent::ToolProvider>,
            None => tools,
        };
        Arc::new(FilteredTools {
            inner: tools,
            extensions: extensions.clone(),
        }) as Arc<dyn crate::agent::ToolProvider>
    });
    if !extensions.is_empty() {
        // Extension handlers run as the loop's hooks (after any hooks of the product's own).
        let ext: Arc<dyn AgentHooks> = extensions.clone();
        cfg.hooks = Some(match cfg.hooks.take() {
            Some(own) => Arc::new(crate::extension::ChainedHooks(own, ext)),
            None => ext,
        });
    }
    // The image window last: it sees the context as the request will carry it.
    let window: Arc<dyn AgentHooks> = Arc::new(ImageWindow {
        keep_turns: image_options(ws).keep_turns,
    });
    cfg.hooks = Some(match cfg.hooks.take() {
        Some(own) => Arc::new(crate::extension::ChainedHooks(own, window)),
        None => window,
    });
    cfg
}

/// Dynamic tools (MCP) through the extensions' tool filters
/// ([`crate::extension::Extensions::filter_tools`]), before every model request.
struct FilteredTools {
    inner: Arc<dyn crate::agent::ToolProvider>,
    extensions: Arc<Extensions>,
}

#[async_trait::async_trait]
impl crate::agent::ToolProvider for FilteredTools {
    async fn tools(self: Arc<Self>) -> Vec<Arc<dyn crate::agent::Tool>> {
        let mut tools = self.inner.clone().tools().await;
        let registered = tools.clone();
        self.extensions.filter_tools(&registered, &mut tools);
        tools
    }
}

/// A session's stored system messages as the loop's [`crate::agent::SystemMessages`]: the
/// branch at the writer's leaf ([`crate::session::path_system_layout`]), when it replays to
/// the run's prompt (the run stores the patch that makes it so, [`AgentSession::start`]) and
/// holds a system message after the leading one. Otherwise (a file written as Pi 0.73.1
/// writes them, an extension that changed the prompt for one request, a branch whose context
/// does not match the run's) the run's prompt leads alone.
struct StoredSystemMessages {
    writer: Arc<Mutex<SessionWriter>>,
}

impl crate::agent::SystemMessages for StoredSystemMessages {
    fn layout(
        &self,
        system_prompt: &str,
        messages: usize,
    ) -> Option<(String, Vec<(usize, pi_ai::SystemMessage)>)> {
        let w = crate::session::lock_writer(&self.writer).ok()?;
        let tree = w.tree();
        let path = tree.path(w.leaf()?);
        let state = crate::session::SystemState::of_path(&path);
        if !state.content.is_empty() || !state.renders(system_prompt) {
            return None;
        }
        let layout = crate::session::path_system_layout(&path);
        if layout.later.is_empty() || layout.later.iter().any(|(at, _)| *at > messages) {
            return None;
        }
        Some((layout.leading.unwrap_or_default(), layout.later))
    }

    fn replayed(&self, system_prompt: &str) -> Option<String> {
        let w = crate::session::lock_writer(&self.writer).ok()?;
        w.replayed_prompt()
            .filter(|p| p.len() == system_prompt.len())
            .map(str::to_string)
    }

    /// Walks back from the leaf over the last `after` context messages (a compaction ends
    /// the walk), adding [`crate::compaction::pi_system_message_tokens`] of each stored
    /// system message met before the message they follow.
    fn tokens_after(&self, after: usize) -> u64 {
        let Ok(w) = crate::session::lock_writer(&self.writer) else {
            return 0;
        };
        let Some(leaf) = w.leaf() else {
            return 0;
        };
        let mut seen = 0;
        let mut tokens = 0;
        for e in w.tree().ancestors(leaf) {
            if crate::session::is_system(e) {
                tokens += crate::compaction::pi_system_message_tokens(&e.raw()["message"]);
                continue;
            }
            let message = match e.kind.as_str() {
                "message" => true,
                "compaction" => break,
                "custom_message" | "branch_summary" => e.is_visible(),
                _ => false,
            };
            if message {
                if seen == after {
                    break;
                }
                seen += 1;
            }
        }
        tokens
    }
}

/// The built-in extensions `ws`'s settings enable (`builtinExtensions`; the project's only
/// when trusted), registered over `host`; load failures are reported through the host.
fn load_extensions(
    ws: &WorkspaceConfig,
    host: Arc<dyn crate::extension::ExtensionHost>,
) -> Arc<Extensions> {
    let settings = ws.settings();
    let crate::extension::Builtins {
        extensions: list,
        mut errors,
        plan,
    } = crate::extension::builtins(
        settings.raw(crate::extension::SETTINGS_KEY),
        settings.raw("defaultTools"),
    );
    let (set, more) = Extensions::load(list, host.clone());
    let set = set.with_plan(plan);
    errors.extend(more);
    if !errors.is_empty() {
        tokio::spawn(async move {
            for e in errors {
                tracing::warn!("extension {} failed to load: {}", e.extension_path, e.error);
                host.extension_error(e).await;
            }
        });
    }
    Arc::new(set)
}
