//! Editor-side tools (issue 7 §6b): tools the client declares and runs itself, and the built-in
//! `diagnostics` tool that asks the editor for the diagnostics its other language servers
//! publish. Documented in docs/protocol.md ("Editor-side tools").
//!
//! - Declaring: `initializationOptions.editorTools` (server-wide) and the request
//!   `agent/tools/register {sessionId?, tools}` (server-wide, or one session's when `sessionId`
//!   is given); `agent/tools/unregister {sessionId?, names}` removes them. A declaration is
//!   [`EditorToolDecl`] `{name, description, parameters, sequential?, promptSnippet?,
//!   promptGuidelines?}`. Names are 1–64 of `[A-Za-z0-9_-]` (what the providers accept), must
//!   not name a built-in tool ([`BUILTIN_TOOLS`]), and `parameters` must be a JSON Schema
//!   object (`"type": "object"`) that compiles; a bad list is refused as a whole with
//!   InvalidParams naming the field (`tools[2].name: …`). Declared tools join the tool set of
//!   the next run (tool sets are rebuilt for every prompt).
//! - Running: the loop validates the model's arguments against the declared schema exactly as
//!   for built-in tools (`pi_core::validate`, the trust boundary in `pi_core::agent::run`),
//!   then [`EditorTool`] sends the server → client request `agent/runTool` ([`RunToolParams`]
//!   `{sessionId, toolCallId, name, arguments}`). The answer [`RunToolResult`]
//!   `{content: [text | image blocks], details?, isError?}` becomes the tool result. A
//!   JSON-RPC error answer, or an answer of another shape, becomes an error result naming what
//!   went wrong (the model can repair it). On abort the server sends `$/cancelRequest` with that
//!   request's id, the call gets the loop's aborted result, and an answer arriving later is
//!   dropped. There is no timeout: a pending editor tool waits until it answers or the run is
//!   aborted.
//! - `diagnostics`: present when the client advertises `experimental.agent.diagnostics: true`.
//!   Its request `agent/diagnostics` ([`DiagnosticsParams`] `{sessionId, uris?}`) is answered
//!   with [`DiagnosticsResult`] `{items: [{uri, diagnostics: Diagnostic[]}]}` (LSP
//!   `Diagnostic`s, ranges in the negotiated position encoding); [`format_diagnostics`] writes
//!   them for the model.
//!
//! The request id: `tower_lsp_server::Client::send_request` hides the id it allocates, so the
//! request is built here with [`Client::next_request_id`] and sent through the client's
//! `tower::Service` implementation, which routes the answer by that id. Dropping the wait after
//! `$/cancelRequest` leaves the client's waiter unanswered; a late answer finds it and is
//! discarded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use async_trait::async_trait;
use pi_ai::{ContentBlock, ToolSpec};
use pi_core::agent::{Tool, ToolContext, ToolError, ToolOutput, ABORTED_TEXT};
use ropey::Rope;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tower_lsp_server::jsonrpc::Error;
use tower_lsp_server::ls_types::{Diagnostic, DiagnosticSeverity, NumberOrString, Uri};
use tower_lsp_server::Client;

use crate::client::{request, Reply};
use crate::documents::{uri_path, Documents};
use crate::positions::{position_to_char, Encoding};

/// The server → client request that runs an editor tool.
pub const RUN_TOOL_METHOD: &str = "agent/runTool";
/// The server → client request for the editor's diagnostics.
pub const DIAGNOSTICS_METHOD: &str = "agent/diagnostics";
/// The name of the built-in diagnostics tool.
pub const DIAGNOSTICS_TOOL: &str = "diagnostics";
/// Names an editor tool may not take: Pi's built-in tools and [`DIAGNOSTICS_TOOL`].
pub const BUILTIN_TOOLS: &[&str] = &[
    "read",
    "bash",
    "edit",
    "write",
    "grep",
    "find",
    "ls",
    DIAGNOSTICS_TOOL,
];
/// Most diagnostics one `diagnostics` result lists (errors first); the rest are counted.
pub const MAX_DIAGNOSTICS: usize = 100;

/// A tool the editor declares (Pi's `ToolDefinition` fields that make sense over the wire).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EditorToolDecl {
    /// 1–64 characters of `[A-Za-z0-9_-]`; not a built-in tool's name.
    pub name: String,
    /// What the model reads to decide when to call it.
    pub description: String,
    /// JSON Schema of the arguments (`"type": "object"`).
    pub parameters: Value,
    /// True when a batch containing this tool must run in call order, one call at a time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sequential: bool,
    /// One line for the system prompt's "Available tools" (absent: not listed there, as Pi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_snippet: Option<String>,
    /// Lines added to the system prompt's guidelines.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompt_guidelines: Vec<String>,
}

/// `agent/tools/register` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolsRegisterParams {
    /// Register for this session only; absent: for every session of the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Added, or replacing the declaration of the same name in that scope.
    pub tools: Vec<EditorToolDecl>,
}

/// `agent/tools/unregister` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolsUnregisterParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Names to remove from that scope (unknown names are ignored).
    pub names: Vec<String>,
}

/// `agent/tools/register` / `agent/tools/unregister` result: the names declared in the scope
/// afterwards, in declaration order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsResult {
    pub tools: Vec<String>,
}

/// `agent/runTool` params (server → client).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunToolParams {
    pub session_id: String,
    /// The model's tool call id (also in the `tool_execution_*` events).
    pub tool_call_id: String,
    pub name: String,
    /// The arguments after coercion and validation against the declared schema.
    pub arguments: Value,
}

/// A block of an editor tool's result: Pi's text or image content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum ResultBlock {
    Text {
        text: String,
    },
    Image {
        /// Base64 without a `data:` prefix.
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
}

/// `agent/runTool` result (client → server).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunToolResult {
    pub content: Vec<ResultBlock>,
    /// Kept in the session for the UI; not sent to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// The tool failed: the text blocks become the error result.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

/// `agent/diagnostics` params (server → client).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticsParams {
    pub session_id: String,
    /// The files asked about; absent: every file the editor has diagnostics for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uris: Option<Vec<Uri>>,
}

/// One file's diagnostics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticsItem {
    pub uri: Uri,
    pub diagnostics: Vec<Diagnostic>,
}

/// `agent/diagnostics` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiagnosticsResult {
    pub items: Vec<DiagnosticsItem>,
}

/// The declared tools of a server: server-wide ones and per-session ones, plus whether the
/// client answers `agent/diagnostics`.
#[derive(Debug, Default)]
pub struct EditorTools {
    global: Mutex<Vec<EditorToolDecl>>,
    sessions: Mutex<HashMap<String, Vec<EditorToolDecl>>>,
    diagnostics: AtomicBool,
    /// How many times the declarations or the diagnostics switch changed ([`EditorTools::generation`]).
    changes: std::sync::atomic::AtomicU64,
}

/// True when `name` is 1–64 of `[A-Za-z0-9_-]`.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks declarations (see the module docs); `field` names the list in errors
/// (`tools`, `initializationOptions.editorTools`).
pub fn check_decls(decls: &[EditorToolDecl], field: &str) -> Result<(), Error> {
    let bad = |i: usize, sub: &str, why: String| {
        Error::invalid_params(format!("{field}[{i}].{sub}: {why}"))
    };
    let mut seen: Vec<&str> = Vec::new();
    for (i, d) in decls.iter().enumerate() {
        if !valid_name(&d.name) {
            return Err(bad(
                i,
                "name",
                format!(
                    "{:?} is not a valid tool name (1 to 64 letters, digits, '_' or '-')",
                    d.name
                ),
            ));
        }
        if BUILTIN_TOOLS.contains(&d.name.as_str()) {
            return Err(bad(
                i,
                "name",
                format!(
                    "\"{}\" is a built-in tool; an editor tool cannot replace it (choose another name)",
                    d.name
                ),
            ));
        }
        if seen.contains(&d.name.as_str()) {
            return Err(bad(
                i,
                "name",
                format!("\"{}\" is declared twice in this list", d.name),
            ));
        }
        seen.push(&d.name);
        if d.description.trim().is_empty() {
            return Err(bad(
                i,
                "description",
                "must not be empty (the model reads it)".into(),
            ));
        }
        if d.parameters.get("type").and_then(Value::as_str) != Some("object") {
            return Err(bad(
                i,
                "parameters",
                "must be a JSON Schema with \"type\": \"object\"".into(),
            ));
        }
        if let Err(e) = jsonschema::validator_for(&d.parameters) {
            return Err(bad(i, "parameters", format!("invalid JSON Schema: {e}")));
        }
    }
    Ok(())
}

/// Parses and checks `initializationOptions.editorTools` (absent: none).
pub fn decls_from_init(options: Option<&Value>) -> Result<Vec<EditorToolDecl>, Error> {
    let Some(v) = options.and_then(|o| o.get("editorTools")) else {
        return Ok(Vec::new());
    };
    let field = "initializationOptions.editorTools";
    let decls: Vec<EditorToolDecl> = serde_path_to_error::deserialize(v.clone()).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            Error::invalid_params(format!("{field}: {inner}"))
        } else {
            Error::invalid_params(format!("{field}{}: {inner}", path_suffix(&path)))
        }
    })?;
    check_decls(&decls, field)?;
    Ok(decls)
}

/// `[0].name` for serde's `[0].name`, `.x` for `x`.
fn path_suffix(path: &str) -> String {
    if path.starts_with('[') {
        path.to_string()
    } else {
        format!(".{path}")
    }
}

impl EditorTools {
    /// Records whether the client answers `agent/diagnostics`.
    pub fn set_diagnostics(&self, on: bool) {
        self.diagnostics.store(on, Ordering::Relaxed);
        self.changed();
    }

    /// A number that changes with every registration, withdrawal and diagnostics switch: a
    /// run configuration built before lacks the change (the session setup's
    /// `late_tools_generation`).
    pub fn generation(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether the `diagnostics` tool is offered.
    pub fn diagnostics(&self) -> bool {
        self.diagnostics.load(Ordering::Relaxed)
    }

    /// Adds `decls` (already checked) to the scope, replacing same-named ones; returns the
    /// scope's names.
    pub fn register(&self, session: Option<&str>, decls: Vec<EditorToolDecl>) -> Vec<String> {
        let merge = |list: &mut Vec<EditorToolDecl>| {
            for d in decls {
                match list.iter_mut().find(|x| x.name == d.name) {
                    Some(slot) => *slot = d,
                    None => list.push(d),
                }
            }
            list.iter().map(|d| d.name.clone()).collect()
        };
        let names = match session {
            None => merge(&mut self.global.lock()),
            Some(id) => merge(self.sessions.lock().entry(id.to_string()).or_default()),
        };
        self.changed();
        names
    }

    /// Removes `names` from the scope; returns the scope's names.
    pub fn unregister(&self, session: Option<&str>, names: &[String]) -> Vec<String> {
        let remove = |list: &mut Vec<EditorToolDecl>| {
            list.retain(|d| !names.contains(&d.name));
            list.iter().map(|d| d.name.clone()).collect()
        };
        let names = match session {
            None => remove(&mut self.global.lock()),
            Some(id) => remove(self.sessions.lock().entry(id.to_string()).or_default()),
        };
        self.changed();
        names
    }

    /// The declarations a run of `session` sees: server-wide ones, then the session's own (a
    /// session declaration replaces a server-wide one of the same name).
    pub fn decls_for(&self, session: &str) -> Vec<EditorToolDecl> {
        let mut out = self.global.lock().clone();
        if let Some(own) = self.sessions.lock().get(session) {
            for d in own {
                match out.iter_mut().find(|x| x.name == d.name) {
                    Some(slot) => *slot = d.clone(),
                    None => out.push(d.clone()),
                }
            }
        }
        out
    }

    /// Forgets a closed session's declarations.
    pub fn forget_session(&self, session: &str) {
        self.sessions.lock().remove(session);
        self.changed();
    }
}

/// What the editor needs to give the `diagnostics` tool: the workspace, the allowed folders,
/// the open documents and the negotiated encoding.
#[derive(Clone)]
pub struct DiagnosticsContext {
    pub root: PathBuf,
    pub allowed_dirs: Vec<PathBuf>,
    pub docs: Arc<Documents>,
    pub encoding: Encoding,
}

/// The tools for one run of `session_id`: the declared editor tools whose names are not in
/// `taken` (names of the tools already in the set; a clash is logged and the editor tool left
/// out), and `diagnostics` when the client offers it.
pub fn session_tools(
    registry: &EditorTools,
    client: &Client,
    session_id: &str,
    taken: &[String],
    diagnostics: DiagnosticsContext,
) -> Vec<Arc<dyn Tool>> {
    let mut out: Vec<Arc<dyn Tool>> = Vec::new();
    if registry.diagnostics() && !taken.iter().any(|t| t == DIAGNOSTICS_TOOL) {
        out.push(Arc::new(DiagnosticsTool {
            client: client.clone(),
            session_id: session_id.to_string(),
            cx: diagnostics,
        }));
    }
    for decl in registry.decls_for(session_id) {
        if taken.contains(&decl.name) {
            tracing::warn!(
                "editor tool {} left out: a tool of that name is already in the set",
                decl.name
            );
            continue;
        }
        out.push(Arc::new(EditorTool {
            client: client.clone(),
            session_id: session_id.to_string(),
            decl,
        }));
    }
    out
}

/// The `agent/runTool` request (server → client); the answer is parsed by
/// [`run_tool_output`], naming the field that does not fit.
#[derive(Debug)]
pub enum RunToolRequest {}

impl tower_lsp_server::ls_types::request::Request for RunToolRequest {
    type Params = RunToolParams;
    type Result = Value;
    const METHOD: &'static str = RUN_TOOL_METHOD;
}

/// The `agent/diagnostics` request (server → client).
#[derive(Debug)]
pub enum DiagnosticsRequest {}

impl tower_lsp_server::ls_types::request::Request for DiagnosticsRequest {
    type Params = DiagnosticsParams;
    type Result = Value;
    const METHOD: &'static str = DIAGNOSTICS_METHOD;
}

/// Parses a client answer into `T`, naming the field that does not fit.
fn parse_answer<T: for<'de> Deserialize<'de>>(v: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            inner.to_string()
        } else {
            format!("{path}: {inner}")
        }
    })
}

/// A tool the editor runs (see the module docs).
pub struct EditorTool {
    client: Client,
    session_id: String,
    decl: EditorToolDecl,
}

#[async_trait]
impl Tool for EditorTool {
    fn name(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed(&self.decl.name)
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            constrained_sampling: None,
            name: self.decl.name.clone(),
            description: self.decl.description.clone(),
            parameters: self.decl.parameters.clone(),
        }
    }

    fn sequential(&self) -> bool {
        self.decl.sequential
    }

    fn prompt_snippet(&self) -> Option<String> {
        self.decl.prompt_snippet.clone()
    }

    fn prompt_guidelines(&self) -> Vec<String> {
        self.decl.prompt_guidelines.clone()
    }

    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let name = &self.decl.name;
        let params = RunToolParams {
            session_id: self.session_id.clone(),
            tool_call_id: ctx.call_id.clone(),
            name: name.clone(),
            arguments: args,
        };
        match request::<RunToolRequest>(&self.client, params, Some(&ctx.cancel)).await {
            Reply::Result(v) => run_tool_output(name, v),
            Reply::Error(e) => Err(ToolError::new(format!(
                "The editor tool {name} failed: {} (JSON-RPC error {})",
                e.message,
                e.code.code()
            ))),
            Reply::Cancelled | Reply::TimedOut => Err(ToolError::new(ABORTED_TEXT)),
            Reply::Gone => Err(ToolError::new(format!(
                "The editor tool {name} got no answer: the editor connection is closed"
            ))),
        }
    }
}

/// The tool result of an `agent/runTool` answer.
pub fn run_tool_output(name: &str, answer: Value) -> Result<ToolOutput, ToolError> {
    let r: RunToolResult = parse_answer(answer).map_err(|e| {
        ToolError::new(format!(
            "The editor answered {RUN_TOOL_METHOD} for {name} with an invalid result ({e}); expected {{content: [{{type: \"text\", text}} | {{type: \"image\", data, mimeType}}], details?, isError?}}"
        ))
    })?;
    let content: Vec<ContentBlock> = r
        .content
        .into_iter()
        .map(|b| match b {
            ResultBlock::Text { text } => ContentBlock::text(text),
            ResultBlock::Image { data, mime_type } => {
                ContentBlock::Image(pi_ai::types::ImageContent {
                    data: data.into(),
                    mime_type,
                })
            }
        })
        .collect();
    if r.is_error {
        let text: Vec<&str> = content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect();
        let message = if text.is_empty() {
            format!("The editor tool {name} failed")
        } else {
            text.join("\n")
        };
        return Err(ToolError {
            message,
            details: r.details,
            ..Default::default()
        });
    }
    Ok(ToolOutput {
        content,
        details: r.details,
        terminate: false,
        ..Default::default()
    })
}

/// The built-in `diagnostics` tool (see the module docs).
pub struct DiagnosticsTool {
    client: Client,
    session_id: String,
    cx: DiagnosticsContext,
}

/// Arguments of `diagnostics`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiagnosticsArgs {
    #[serde(default)]
    paths: Option<Vec<String>>,
}

#[async_trait]
impl Tool for DiagnosticsTool {
    /// Reading the editor's diagnostics changes nothing: never asked about under `auto-edit`.
    fn approval_kind(&self) -> pi_core::approval::ToolKind {
        pi_core::approval::ToolKind::ReadOnly
    }

    fn name(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed(DIAGNOSTICS_TOOL)
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
 constrained_sampling: None,
            name: DIAGNOSTICS_TOOL.into(),
            description: format!(
                "Get the diagnostics (errors, warnings, hints) the user's editor currently shows, from its language servers and linters. Without paths: every file the editor has diagnostics for. One line each: path:line:column severity source(code): message (1-based lines and columns), errors first, at most {MAX_DIAGNOSTICS}."
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "paths": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Files to get diagnostics for (relative to the workspace or absolute); omit for all files"
                    }
                }
            }),
        }
    }

    fn prompt_snippet(&self) -> Option<String> {
        Some("Get the editor's current diagnostics (compiler errors, warnings) for files".into())
    }

    fn prompt_guidelines(&self) -> Vec<String> {
        vec!["Use diagnostics after editing to see the compiler errors and warnings the editor shows, instead of running a full build".into()]
    }

    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let a: DiagnosticsArgs = serde_json::from_value(args)
            .map_err(|e| ToolError::new(format!("Invalid arguments for diagnostics: {e}")))?;
        let uris = match &a.paths {
            None => None,
            Some(paths) => {
                let mut uris = Vec::new();
                for p in paths {
                    let resolved =
                        pi_core::tools::resolve_path_in(&self.cx.root, &self.cx.allowed_dirs, p)?;
                    let uri = Uri::from_file_path(&resolved).ok_or_else(|| {
                        ToolError::new(format!("Path {p} cannot be expressed as a file URI"))
                    })?;
                    uris.push(uri);
                }
                Some(uris)
            }
        };
        let params = DiagnosticsParams {
            session_id: self.session_id.clone(),
            uris,
        };
        let answer =
            match request::<DiagnosticsRequest>(&self.client, params, Some(&ctx.cancel)).await {
                Reply::Result(v) => v,
                Reply::Error(e) => {
                    return Err(ToolError::new(format!(
                        "The editor could not give its diagnostics: {} (JSON-RPC error {})",
                        e.message,
                        e.code.code()
                    )))
                }
                Reply::Cancelled | Reply::TimedOut => return Err(ToolError::new(ABORTED_TEXT)),
                Reply::Gone => {
                    return Err(ToolError::new(
                        "The editor gave no diagnostics: the editor connection is closed",
                    ))
                }
            };
        let result: DiagnosticsResult = parse_answer(answer).map_err(|e| {
            ToolError::new(format!(
                "The editor answered {DIAGNOSTICS_METHOD} with an invalid result ({e})"
            ))
        })?;
        let (text, details) = format_diagnostics(&self.cx, &result, a.paths.as_deref());
        Ok(ToolOutput {
            content: vec![ContentBlock::text(text)],
            details: Some(details),
            terminate: false,
            ..Default::default()
        })
    }
}

fn severity_name(s: Option<DiagnosticSeverity>) -> &'static str {
    match s {
        Some(DiagnosticSeverity::WARNING) => "warning",
        Some(DiagnosticSeverity::INFORMATION) => "info",
        Some(DiagnosticSeverity::HINT) => "hint",
        // LSP leaves an absent severity to the client; editors show it as an error.
        _ => "error",
    }
}

fn severity_rank(s: Option<DiagnosticSeverity>) -> u8 {
    match s {
        Some(DiagnosticSeverity::WARNING) => 2,
        Some(DiagnosticSeverity::INFORMATION) => 3,
        Some(DiagnosticSeverity::HINT) => 4,
        _ => 1,
    }
}

/// The text of the file at `path`: the open buffer, else the disk.
fn file_text(cx: &DiagnosticsContext, path: &Path) -> Option<Rope> {
    if let Some(d) = cx.docs.get(path) {
        return Some(d.text);
    }
    std::fs::read_to_string(path)
        .ok()
        .map(|t| Rope::from_str(&t))
}

/// 1-based line and column (in characters) of an LSP position given in `cx.encoding`; when
/// the text is unknown the column is the LSP one plus one.
fn one_based(
    text: Option<&Rope>,
    pos: tower_lsp_server::ls_types::Position,
    enc: Encoding,
) -> (u32, u32) {
    let line = pos.line + 1;
    let Some(rope) = text else {
        return (line, pos.character + 1);
    };
    if (pos.line as usize) >= rope.len_lines() {
        return (line, pos.character + 1);
    }
    let start = rope.line_to_char(pos.line as usize);
    let at = position_to_char(rope, pos, enc);
    (line, (at - start) as u32 + 1)
}

/// Formats the editor's diagnostics for the model: one line per diagnostic,
/// `path:line:col severity source(code): message` (path relative to the workspace, 1-based
/// line and character column converted from the negotiated encoding against the buffer or
/// file text, continuation lines of a message indented), sorted by severity, path and
/// position, at most [`MAX_DIAGNOSTICS`] with a notice of how many were left out. Files outside
/// the workspace and the allowed folders are left out (and counted). Returns the text and the
/// details `{total, shown, errors, warnings, infos, hints, outside}`.
pub fn format_diagnostics(
    cx: &DiagnosticsContext,
    result: &DiagnosticsResult,
    asked: Option<&[String]>,
) -> (String, Value) {
    let root_real = cx.root.canonicalize().unwrap_or_else(|_| cx.root.clone());
    let mut rows: Vec<(u8, String, u32, u32, String)> = Vec::new();
    let mut outside = 0usize;
    let mut counts = [0usize; 4];
    for item in &result.items {
        let Some(path) = uri_path(&item.uri) else {
            outside += item.diagnostics.len();
            continue;
        };
        let shown_path = if let Ok(rel) = path.strip_prefix(&cx.root) {
            rel.display().to_string()
        } else if let Ok(rel) = path.strip_prefix(&root_real) {
            rel.display().to_string()
        } else if cx.allowed_dirs.iter().any(|d| path.starts_with(d)) {
            path.display().to_string()
        } else {
            outside += item.diagnostics.len();
            continue;
        };
        if item.diagnostics.is_empty() {
            continue;
        }
        let text = file_text(cx, &path);
        for d in &item.diagnostics {
            let rank = severity_rank(d.severity);
            counts[usize::from(rank - 1)] += 1;
            let (line, col) = one_based(text.as_ref(), d.range.start, cx.encoding);
            let mut origin = d.source.clone().unwrap_or_default();
            if let Some(code) = &d.code {
                let code = match code {
                    NumberOrString::Number(n) => n.to_string(),
                    NumberOrString::String(s) => s.clone(),
                };
                origin = format!("{origin}({code})");
            }
            let message = d.message.trim_end().replace('\n', "\n    ");
            let head = format!(
                "{shown_path}:{line}:{col} {}{}{}: {message}",
                severity_name(d.severity),
                if origin.is_empty() { "" } else { " " },
                origin
            );
            rows.push((rank, shown_path.clone(), line, col, head));
        }
    }
    rows.sort_by(|a, b| (a.0, &a.1, a.2, a.3).cmp(&(b.0, &b.1, b.2, b.3)));
    let total = rows.len();
    let shown = total.min(MAX_DIAGNOSTICS);
    let mut text = if total == 0 {
        match asked {
            Some(paths) if !paths.is_empty() => {
                format!("No diagnostics for {}.", paths.join(", "))
            }
            _ => "No diagnostics.".to_string(),
        }
    } else {
        rows.iter()
            .take(shown)
            .map(|r| r.4.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    };
    if total > shown {
        text.push_str(&format!(
            "\n\n[Showing {shown} of {total} diagnostics (errors first). Pass paths to see a file's diagnostics.]"
        ));
    }
    if outside > 0 {
        text.push_str(&format!(
            "\n\n[{outside} diagnostics of files outside the workspace left out.]"
        ));
    }
    let details = json!({
        "total": total,
        "shown": shown,
        "errors": counts[0],
        "warnings": counts[1],
        "infos": counts[2],
        "hints": counts[3],
        "outside": outside,
    });
    (text, details)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(name: &str, parameters: Value) -> EditorToolDecl {
        EditorToolDecl {
            name: name.into(),
            description: "d".into(),
            parameters,
            sequential: false,
            prompt_snippet: None,
            prompt_guidelines: Vec::new(),
        }
    }

    #[test]
    fn declarations_are_checked() {
        let obj = json!({"type": "object"});
        assert!(check_decls(&[decl("open_url", obj.clone())], "tools").is_ok());
        let e = check_decls(
            &[decl("ok", obj.clone()), decl("read", obj.clone())],
            "tools",
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "tools[1].name: \"read\" is a built-in tool; an editor tool cannot replace it (choose another name)"
        );
        let e = check_decls(&[decl("a b", obj.clone())], "tools").unwrap_err();
        assert_eq!(
            e.message,
            "tools[0].name: \"a b\" is not a valid tool name (1 to 64 letters, digits, '_' or '-')"
        );
        let e = check_decls(&[decl("x", json!({"type": "string"}))], "tools").unwrap_err();
        assert_eq!(
            e.message,
            "tools[0].parameters: must be a JSON Schema with \"type\": \"object\""
        );
        let e = check_decls(
            &[decl(
                "x",
                json!({"type": "object", "properties": {"n": {"type": "nope"}}}),
            )],
            "tools",
        )
        .unwrap_err();
        assert!(
            e.message
                .starts_with("tools[0].parameters: invalid JSON Schema: "),
            "{}",
            e.message
        );
        let e = check_decls(&[decl("x", obj.clone()), decl("x", obj)], "tools").unwrap_err();
        assert_eq!(
            e.message,
            "tools[1].name: \"x\" is declared twice in this list"
        );
        let e = decls_from_init(Some(
            &json!({"editorTools": [{"description": "d", "parameters": {"type": "object"}}]}),
        ))
        .unwrap_err();
        assert_eq!(
            e.message,
            "initializationOptions.editorTools[0]: missing field `name`"
        );
        assert_eq!(decls_from_init(Some(&json!({}))).unwrap(), Vec::new());
    }

    #[test]
    fn registry_scopes() {
        let r = EditorTools::default();
        let obj = json!({"type": "object"});
        assert_eq!(
            r.register(None, vec![decl("a", obj.clone()), decl("b", obj.clone())]),
            vec!["a", "b"]
        );
        let mut own = decl("b", json!({"type": "object", "properties": {}}));
        own.description = "session b".into();
        assert_eq!(r.register(Some("s1"), vec![own.clone()]), vec!["b"]);
        assert_eq!(r.decls_for("s1"), vec![decl("a", obj.clone()), own]);
        assert_eq!(
            r.decls_for("s2"),
            vec![decl("a", obj.clone()), decl("b", obj)]
        );
        assert_eq!(r.unregister(None, &["a".into()]), vec!["b"]);
    }

    #[test]
    fn run_tool_answers() {
        let out = run_tool_output(
            "t",
            json!({"content": [{"type": "text", "text": "ok"}], "details": {"n": 1}}),
        )
        .unwrap();
        assert_eq!(out.content, vec![ContentBlock::text("ok")]);
        assert_eq!(out.details, Some(json!({"n": 1})));
        let e = run_tool_output(
            "t",
            json!({"content": [{"type": "text", "text": "no such url"}], "isError": true}),
        )
        .unwrap_err();
        assert_eq!(e.message, "no such url");
        let e = run_tool_output("t", json!({"content": [{"type": "video"}]})).unwrap_err();
        assert!(
            e.message.starts_with(
                "The editor answered agent/runTool for t with an invalid result (content[0].type: unknown variant `video`"
            ),
            "{}",
            e.message
        );
    }

    #[test]
    fn diagnostics_are_formatted_with_character_columns() {
        let dir_tmp = tempfile::tempdir().unwrap();
        let dir = dir_tmp.path().to_path_buf();
        std::fs::create_dir_all(dir.join("src")).unwrap();
        let root = dir.canonicalize().unwrap();
        // "🍋" is 4 UTF-8 bytes, 2 UTF-16 units, 1 character.
        std::fs::write(root.join("src/a.rs"), "let 🍋 = x;\n").unwrap();
        let uri = Uri::from_file_path(root.join("src/a.rs")).unwrap();
        let outside = Uri::from_file_path("/elsewhere/b.rs").unwrap();
        let diag = |line, character, sev: Option<u32>, msg: &str| {
            json!({"range": {"start": {"line": line, "character": character},
                   "end": {"line": line, "character": character}},
                   "severity": sev, "source": "rustc", "code": "E0425", "message": msg})
        };
        let result: DiagnosticsResult = serde_json::from_value(json!({"items": [
            {"uri": uri, "diagnostics": [
                diag(0, 11, Some(2), "unused"),
                diag(0, 11, Some(1), "cannot find value `x`\nhelp: declare it"),
            ]},
            {"uri": outside, "diagnostics": [diag(0, 0, Some(1), "far")]},
        ]}))
        .unwrap();
        let cx = |encoding| DiagnosticsContext {
            root: root.clone(),
            allowed_dirs: Vec::new(),
            docs: Arc::new(Documents::default()),
            encoding,
        };
        let (text, details) = format_diagnostics(&cx(Encoding::Utf8), &result, None);
        assert_eq!(
            text,
            "src/a.rs:1:9 error rustc(E0425): cannot find value `x`\n    help: declare it\nsrc/a.rs:1:9 warning rustc(E0425): unused\n\n[1 diagnostics of files outside the workspace left out.]"
        );
        assert_eq!(
            details,
            json!({"total": 2, "shown": 2, "errors": 1, "warnings": 1, "infos": 0, "hints": 0, "outside": 1})
        );
        // The same character `x` is at UTF-16 unit 9 (byte 11, character 8).
        let result16: DiagnosticsResult = serde_json::from_value(json!({"items": [
            {"uri": Uri::from_file_path(root.join("src/a.rs")).unwrap(), "diagnostics": [diag(0, 9, Some(1), "m")]}]}))
        .unwrap();
        let (text, _) = format_diagnostics(&cx(Encoding::Utf16), &result16, None);
        assert_eq!(text, "src/a.rs:1:9 error rustc(E0425): m");
        let many: Vec<Value> = (0..150)
            .map(|i| diag(0, 0, Some(1), &format!("e{i}")))
            .collect();
        let result: DiagnosticsResult = serde_json::from_value(
            json!({"items": [{"uri": Uri::from_file_path(root.join("src/a.rs")).unwrap(), "diagnostics": many}]}),
        )
        .unwrap();
        let (text, details) = format_diagnostics(&cx(Encoding::Utf8), &result, None);
        assert_eq!(text.lines().count(), 102);
        assert!(text.ends_with("\n\n[Showing 100 of 150 diagnostics (errors first). Pass paths to see a file's diagnostics.]"));
        assert_eq!(details["shown"], 100);
        let empty = DiagnosticsResult { items: vec![] };
        assert_eq!(
            format_diagnostics(&cx(Encoding::Utf8), &empty, Some(&["src/a.rs".into()])).0,
            "No diagnostics for src/a.rs."
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
