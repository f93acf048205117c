//! MCP tools as the loop's [`Tool`]s: one per server tool (`mcp__<server>__<tool>`),
//! `tool_search` (loads deferred tools for the next model call) and the resource tools
//! (`list_mcp_resources`, `list_mcp_resource_templates`, `read_mcp_resource`), and
//! [`RunTools`], the tool set of one run (see [`crate::agent::ToolProvider`]).
//!
//! Results (Pi 1.6's `convertMcpResult`): text and images pass as text and image blocks;
//! resource links become a text line naming `read_mcp_resource`; embedded binary resources other
//! than images are saved to a temp file named in the result; no content → the structured
//! content as JSON; `isError` → an error result. Text over 20 KB keeps its first and last
//! 10 KB around `…N chars truncated…`, the whole text saved to a temp file named in the result.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use pi_ai::{ContentBlock, ToolSpec};
use serde_json::{json, Value};

use super::config::Exposure;
use super::manager::{McpManager, Server};
use crate::agent::{Tool, ToolContext, ToolError, ToolKind, ToolOutput};

/// Model-facing text of an MCP result beyond this is cut in the middle (Pi's 20 KB).
pub const MCP_OUTPUT_MAX_BYTES: usize = 20 * 1024;
/// `customType` of the session entry recording the tools `tool_search` loaded:
/// `{"type":"custom","customType":"mcp-tools","data":{"loaded":["mcp__s__t", …]}}`.
pub const LOADED_ENTRY: &str = "mcp-tools";
/// `tool_search`'s name.
pub const TOOL_SEARCH: &str = "tool_search";
/// Pi's `tool_search` description.
pub const TOOL_SEARCH_DESCRIPTION: &str = "# Tool discovery\n\nSearches over deferred tool metadata with BM25 and exposes matching tools for the next model call.\n\nSome of the tools, such as tools of MCP servers, may not have been provided to you upfront, and you should use this tool (`tool_search`) to search for the required tools. For MCP tool discovery, always use `tool_search`.";

/// Keeps the start and the end of `text` (half of `max` bytes each, cut at character
/// boundaries) around `…N chars truncated…`; `None` when it fits. Returns the text, the total
/// bytes and the total lines.
pub fn truncate_middle(text: &str, max: usize) -> Option<(String, usize, usize)> {
    let len = text.len();
    if len <= max {
        return None;
    }
    let mut head = max / 2;
    while head > 0 && !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = len - (max - max / 2);
    while tail < len && !text.is_char_boundary(tail) {
        tail += 1;
    }
    let removed = text[head..tail].chars().count();
    let lines = text.split('\n').count() - usize::from(text.ends_with('\n'));
    Some((
        format!(
            "{}…{removed} chars truncated…{}",
            &text[..head],
            &text[tail..]
        ),
        len,
        lines,
    ))
}

/// Saves `data` to a new temp file `pi-mcp-<uuid><ext>` and returns its path.
fn save_temp(data: &[u8], ext: &str) -> std::io::Result<String> {
    let dir = std::env::temp_dir();
    let path = dir.join(format!("pi-mcp-{}{ext}", uuid::Uuid::new_v4()));
    std::fs::write(&path, data)?;
    Ok(path.display().to_string())
}

fn size_text(n: usize) -> String {
    if n < 1024 {
        format!("{n}B")
    } else if n < 1024 * 1024 {
        format!("{:.1}KB", n as f64 / 1024.0)
    } else {
        format!("{:.1}MB", n as f64 / 1024.0 / 1024.0)
    }
}

fn is_text_mime(m: Option<&str>) -> bool {
    let Some(m) = m else { return false };
    let t = m
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    t.starts_with("text/") || t == "application/json" || t.ends_with("+json") || t.ends_with("+xml")
}

/// Model-facing blocks of one MCP content block of `server`'s result.
fn block_to_content(server: &str, b: &Value, readable: bool) -> Vec<ContentBlock> {
    let s = |k: &str| b.get(k).and_then(Value::as_str);
    match s("type") {
        Some("text") => vec![ContentBlock::text(s("text").unwrap_or(""))],
        Some("image") => vec![ContentBlock::Image(pi_ai::ImageContent {
            data: s("data").unwrap_or("").into(),
            mime_type: s("mimeType").unwrap_or("image/png").to_string(),
        })],
        Some("audio") => vec![ContentBlock::text(format!(
            "[Audio {}]",
            s("mimeType").unwrap_or("unknown type")
        ))],
        Some("resource_link") => {
            let mut details = Vec::new();
            if let Some(m) = s("mimeType") {
                details.push(m.to_string());
            }
            if let Some(n) = b.get("size").and_then(Value::as_u64) {
                details.push(size_text(n as usize));
            }
            let title = s("title").or(s("name")).unwrap_or("");
            let d = if details.is_empty() {
                String::new()
            } else {
                format!(" ({})", details.join(", "))
            };
            let desc = s("description")
                .map(|x| format!(": {x}"))
                .unwrap_or_default();
            let read = if readable {
                format!(". Read it with read_mcp_resource (server \"{server}\")")
            } else {
                String::new()
            };
            vec![ContentBlock::text(format!(
                "[Resource {} \"{title}\"{d}{desc}{read}]",
                s("uri").unwrap_or("")
            ))]
        }
        Some("resource") => {
            let r = b.get("resource").cloned().unwrap_or(Value::Null);
            resource_contents(&r)
        }
        _ => vec![ContentBlock::text(b.to_string())],
    }
}

/// Blocks of one resource's contents (`{uri, mimeType?, text | blob}`).
fn resource_contents(r: &Value) -> Vec<ContentBlock> {
    let uri = r.get("uri").and_then(Value::as_str).unwrap_or("");
    let mime = r.get("mimeType").and_then(Value::as_str);
    if let Some(t) = r.get("text").and_then(Value::as_str) {
        return vec![ContentBlock::text(t)];
    }
    let Some(blob) = r.get("blob").and_then(Value::as_str) else {
        return vec![ContentBlock::text(r.to_string())];
    };
    if mime.is_some_and(|m| m.starts_with("image/")) {
        return vec![ContentBlock::Image(pi_ai::ImageContent {
            data: blob.into(),
            mime_type: mime.unwrap_or("image/png").to_string(),
        })];
    }
    let data = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .unwrap_or_default();
    if is_text_mime(mime) {
        return vec![ContentBlock::text(String::from_utf8_lossy(&data))];
    }
    let kind = format!(
        "{}, {}",
        mime.unwrap_or("unknown type"),
        size_text(data.len())
    );
    let ext = uri
        .rsplit('/')
        .next()
        .and_then(|f| f.rsplit_once('.'))
        .map(|(_, e)| e)
        .filter(|e| !e.is_empty() && e.len() <= 8 && e.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(|e| format!(".{e}"))
        .unwrap_or_else(|| ".bin".into());
    match save_temp(&data, &ext) {
        Ok(p) => vec![ContentBlock::text(format!(
            "[Binary resource {uri} ({kind}) saved to {p}]"
        ))],
        Err(e) => vec![ContentBlock::text(format!(
            "[Binary resource {uri} ({kind}) could not be saved: {e}]"
        ))],
    }
}

/// Applies the 20 KB limit to `content` (see the module docs); returns the content and the
/// full output's path when it was cut.
pub fn limit_content(content: Vec<ContentBlock>) -> (Vec<ContentBlock>, Option<String>) {
    let combined = content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let Some((cut, bytes, lines)) = truncate_middle(&combined, MCP_OUTPUT_MAX_BYTES) else {
        return (content, None);
    };
    let (path, whr) = match save_temp(combined.as_bytes(), ".txt") {
        Ok(p) => (
            Some(p.clone()),
            format!("\n\n[Full output: {p} (read it with offset/limit)]"),
        ),
        Err(e) => (None, format!("\n\n[Could not save the full output: {e}]")),
    };
    let tokens = bytes.div_ceil(4);
    let text = format!(
        "Warning: truncated output (original token count: {tokens})\nTotal output lines: {lines}\n\n{cut}{whr}"
    );
    let mut out = vec![ContentBlock::text(text)];
    out.extend(
        content
            .into_iter()
            .filter(|b| matches!(b, ContentBlock::Image(_))),
    );
    (out, path)
}

/// A `tools/call` result (JSON) of `server`'s `tool` as the model's result.
pub fn convert_result(
    server: &str,
    tool: &str,
    result: &Value,
    readable: bool,
) -> Result<ToolOutput, ToolError> {
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut content: Vec<ContentBlock> = if blocks.is_empty() {
        match result.get("structuredContent") {
            Some(v) => vec![ContentBlock::text(v.to_string())],
            None => Vec::new(),
        }
    } else {
        blocks
            .iter()
            .flat_map(|b| block_to_content(server, b, readable))
            .collect()
    };
    // A server echoing its configured secrets (`env`, `headers`) does not put them in the
    // session: registered secrets are redacted from the text.
    for b in content.iter_mut() {
        if let ContentBlock::Text(t) = b {
            let r = pi_ai::keys::redact_secrets(&t.text);
            if r != t.text {
                t.text = r;
            }
        }
    }
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    let has_text = content
        .iter()
        .any(|b| matches!(b, ContentBlock::Text(t) if !t.text.is_empty()));
    if is_error && !has_text {
        content.push(ContentBlock::text(format!(
            "MCP tool {server}/{tool} returned an error"
        )));
    }
    let (content, full) = limit_content(content);
    let mut details = json!({"server": server, "tool": tool});
    if let Some(p) = full {
        details["fullOutputPath"] = json!(p);
    }
    if is_error {
        let message = content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        return Err(ToolError {
            message,
            details: Some(details),
            ..Default::default()
        });
    }
    Ok(ToolOutput {
        content,
        details: Some(details),
        terminate: false,
        ..Default::default()
    })
}

/// The input schema as an object schema (Pi's `normalizeMcpInputSchema`).
pub fn normalize_schema(schema: &Value) -> Value {
    let mut s = schema.as_object().cloned().unwrap_or_default();
    s.entry("type").or_insert(json!("object"));
    s.entry("properties").or_insert(json!({}));
    Value::Object(s)
}

const HINTS: [&str; 4] = [
    "readOnlyHint",
    "destructiveHint",
    "idempotentHint",
    "openWorldHint",
];

/// One server tool.
pub struct McpTool {
    server: Arc<Server>,
    /// The server's name of the tool.
    tool: String,
    spec: ToolSpec,
    read_only: bool,
    note: String,
    readable: bool,
}

impl McpTool {
    /// The tool `raw` (a `tools/list` entry) of `server`, named `name` for the model.
    pub fn new(server: Arc<Server>, raw: &Value, name: String, readable: bool) -> McpTool {
        let tool = raw
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let annotations = raw.get("annotations").cloned().unwrap_or(Value::Null);
        let title = raw
            .get("title")
            .and_then(Value::as_str)
            .or_else(|| annotations.get("title").and_then(Value::as_str));
        let description = raw
            .get("description")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .or(title)
            .map(str::to_string)
            .unwrap_or_else(|| format!("MCP tool {tool} from server {}", server.config.name));
        let hints: Vec<String> = HINTS
            .iter()
            .filter_map(|h| {
                annotations
                    .get(*h)
                    .and_then(Value::as_bool)
                    .map(|v| format!("{h}: {v}"))
            })
            .collect();
        let note = if hints.is_empty() {
            format!("MCP server \"{}\" tool \"{tool}\"", server.config.name)
        } else {
            format!(
                "MCP server \"{}\" tool \"{tool}\"; annotations: {}",
                server.config.name,
                hints.join(", ")
            )
        };
        McpTool {
            read_only: annotations.get("readOnlyHint").and_then(Value::as_bool) == Some(true),
            spec: ToolSpec {
                constrained_sampling: None,
                name,
                description,
                parameters: normalize_schema(raw.get("inputSchema").unwrap_or(&Value::Null)),
            },
            server,
            tool,
            note,
            readable,
        }
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed(&self.spec.name)
    }

    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn approval_kind(&self) -> ToolKind {
        if self.read_only {
            ToolKind::ReadOnly
        } else {
            ToolKind::Execute
        }
    }

    fn approval_note(&self) -> Option<String> {
        Some(self.note.clone())
    }

    /// Only tools annotated `readOnlyHint: true` stay on in plan mode.
    fn off_in_plan_mode(&self) -> bool {
        !self.read_only
    }

    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let conn = self.server.connection().await.map_err(ToolError::new)?;
        let result = conn
            .call_tool(&self.tool, args, &ctx.cancel)
            .await
            .map_err(|e| {
                // An abort reads as every aborted tool call does.
                if ctx.cancel.is_cancelled() {
                    return ToolError::new(e);
                }
                ToolError::new(format!(
                    "MCP tool {}/{} failed: {e}",
                    self.server.config.name, self.tool
                ))
            })?;
        convert_result(&self.server.config.name, &self.tool, &result, self.readable)
    }
}

/// Lowercased words of `text` with identifier boundaries, stop words dropped and a naive
/// singular (Pi's tool-search `tokenize`, ASCII).
pub fn tokenize(text: &str) -> Vec<String> {
    const STOP: [&str; 21] = [
        "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is", "it", "of",
        "on", "or", "that", "the", "this", "to", "with",
    ];
    let mut spaced = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if i > 0
            && c.is_uppercase()
            && (chars[i - 1].is_lowercase() || chars[i - 1].is_ascii_digit())
        {
            spaced.push(' ');
        }
        spaced.push(*c);
    }
    spaced
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && !STOP.contains(w))
        .map(|w| {
            if w.len() > 4 && w.ends_with("ies") {
                format!("{}y", &w[..w.len() - 3])
            } else if w.len() > 4
                && ["ches", "shes", "sses", "xes", "zes"]
                    .iter()
                    .any(|s| w.ends_with(s))
            {
                w[..w.len() - 2].to_string()
            } else if w.len() > 3 && w.ends_with('s') && !w.ends_with("ss") {
                w[..w.len() - 1].to_string()
            } else {
                w.to_string()
            }
        })
        .collect()
}

/// Ranks `docs` (`(name, text)`) for `query` with BM25 over the text, a name match worth three
/// times a term's IDF, tools matching more query terms first, an exact name first (Pi's ranker,
/// without the namespace field). Returns the names, best first, at most `limit`.
pub fn rank(query: &str, docs: &[(String, String)], limit: usize) -> Vec<String> {
    let terms: BTreeSet<String> = tokenize(query).into_iter().collect();
    if terms.is_empty() || docs.is_empty() || limit == 0 {
        return Vec::new();
    }
    let indexed: Vec<(
        BTreeSet<String>,
        std::collections::HashMap<String, usize>,
        usize,
    )> = docs
        .iter()
        .map(|(n, t)| {
            let mut counts = std::collections::HashMap::new();
            let words = tokenize(t);
            for w in &words {
                *counts.entry(w.clone()).or_insert(0) += 1;
            }
            (tokenize(n).into_iter().collect(), counts, words.len())
        })
        .collect();
    let n = indexed.len() as f64;
    let avg = (indexed.iter().map(|d| d.2).sum::<usize>() as f64 / n).max(1.0);
    let idf = |t: &String| {
        let f = indexed
            .iter()
            .filter(|d| d.0.contains(t) || d.1.contains_key(t))
            .count() as f64;
        (1.0 + (n - f + 0.5) / (f + 0.5)).ln()
    };
    let exact = super::naming::sanitize(&query.trim().to_lowercase());
    let (k1, b) = (1.2, 0.75);
    let mut scored: Vec<(bool, usize, f64, usize)> = Vec::new();
    for (i, d) in indexed.iter().enumerate() {
        let norm = k1 * (1.0 - b + b * d.2 as f64 / avg);
        let (mut score, mut covered) = (0.0, 0);
        for t in &terms {
            let c = *d.1.get(t).unwrap_or(&0) as f64;
            let w = if d.0.contains(t) { 3.0 } else { 0.0 } + c * (k1 + 1.0) / (c + norm);
            if w > 0.0 {
                covered += 1;
            }
            score += idf(t) * w;
        }
        if score == 0.0 {
            continue;
        }
        let name = docs[i].0.to_lowercase();
        let is_exact = name == exact || name.ends_with(&format!("__{exact}"));
        scored.push((is_exact, covered, score, i));
    }
    scored.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(b.1.cmp(&a.1))
            .then(b.2.partial_cmp(&a.2).unwrap_or(std::cmp::Ordering::Equal))
            .then(a.3.cmp(&b.3))
    });
    scored
        .into_iter()
        .take(limit)
        .map(|s| docs[s.3].0.clone())
        .collect()
}

/// Where a run records what `tool_search` loaded (the session's writer, [`super::run_tools`]).
pub trait RecordLoaded: Send + Sync {
    /// Writes the whole set loaded on the branch (the `mcp-tools` custom entry), at the load.
    fn loaded(&self, loaded: &BTreeSet<String>);
    /// Declares `tools` (loaded and declared for the next model request) in the branch's
    /// stored system messages, as Pi 1.6 records a load: a system message whose `toolsAdded`
    /// holds those the branch does not declare yet. Called before a model request, so the
    /// message follows the `tool_search` result.
    fn declare(&self, tools: &[ToolSpec]);
}

/// The tool set of one run: the MCP tools declared now, and what `tool_search` loaded (on the
/// session's branch, and during the run). The loop asks for it before every model request.
pub struct RunTools {
    manager: Arc<McpManager>,
    /// Servers handed to this session (ACP).
    session: Option<Arc<McpManager>>,
    loaded: parking_lot::Mutex<BTreeSet<String>>,
    /// Records loads in the session.
    record: Box<dyn RecordLoaded>,
    /// The loaded tools already handed to [`RecordLoaded::declare`] in this run.
    declared: parking_lot::Mutex<BTreeSet<String>>,
    waited: std::sync::atomic::AtomicBool,
    /// Said that codemode is deferred.
    notice: parking_lot::Mutex<Option<String>>,
}

impl RunTools {
    /// The tool set over `manager` (and `session`'s servers), with `loaded` restored from the
    /// branch; `record` writes the loaded set to the session.
    pub fn new(
        manager: Arc<McpManager>,
        session: Option<Arc<McpManager>>,
        loaded: BTreeSet<String>,
        record: Box<dyn RecordLoaded>,
    ) -> Arc<RunTools> {
        let notice = manager.take_codemode_notice();
        if let Some(n) = &notice {
            tracing::warn!("{n}");
        }
        Arc::new(RunTools {
            manager,
            session,
            loaded: parking_lot::Mutex::new(loaded),
            record,
            declared: Default::default(),
            waited: Default::default(),
            notice: parking_lot::Mutex::new(notice),
        })
    }

    fn managers(&self) -> Vec<Arc<McpManager>> {
        let mut v = vec![self.manager.clone()];
        v.extend(self.session.clone());
        v
    }

    /// Every reachable (non-hidden) tool of every server, with its effective exposure.
    fn all(&self) -> Vec<(Arc<dyn Tool>, Exposure, String)> {
        let mut out: Vec<(Arc<dyn Tool>, Exposure, String)> = Vec::new();
        for m in self.managers() {
            let names = m.names();
            for s in m.servers() {
                if !s.config.enabled {
                    continue;
                }
                let readable = s.has_resources();
                for raw in s.tools() {
                    let Some(t) = raw.get("name").and_then(Value::as_str) else {
                        continue;
                    };
                    let e = s.config.tool_exposure(t).effective();
                    if e == Exposure::Hidden {
                        continue;
                    }
                    let Some(name) = names.get(&(s.config.name.clone(), t.to_string())) else {
                        continue;
                    };
                    if out.iter().any(|(x, _, _)| x.spec().name == *name) {
                        continue;
                    }
                    let tool = McpTool::new(s.clone(), &raw, name.clone(), readable);
                    let text = format!(
                        "{} {}",
                        tool.spec.description,
                        s.config.description.clone().unwrap_or_default()
                    );
                    out.push((Arc::new(tool), e, text));
                }
            }
        }
        out
    }

    fn any_searchable_config(&self) -> bool {
        self.managers().iter().flat_map(|m| m.servers()).any(|s| {
            s.config.enabled
                && (s.config.exposure.effective() == Exposure::Deferred
                    || s.config
                        .tool_exposure
                        .iter()
                        .any(|(_, e)| e.effective() == Exposure::Deferred))
        })
    }

    fn resource_servers(&self) -> Vec<Arc<Server>> {
        self.managers()
            .iter()
            .flat_map(|m| m.servers())
            .filter(|s| {
                s.config.enabled && s.config.exposure != Exposure::Hidden && s.has_resources()
            })
            .collect()
    }

    /// Loads the best matches of `query` among the tools not loaded yet; returns them.
    async fn search(&self, query: &str, limit: usize) -> Vec<(String, String)> {
        for m in self.managers() {
            m.wait_all(super::manager::STARTUP_WAIT).await;
        }
        let loaded = self.loaded.lock().clone();
        let candidates: Vec<(String, String, String)> = self
            .all()
            .into_iter()
            .filter(|(t, e, _)| *e == Exposure::Deferred && !loaded.contains(&t.spec().name))
            .map(|(t, _, text)| (t.spec().name, text, t.spec().description))
            .collect();
        let docs: Vec<(String, String)> = candidates
            .iter()
            .map(|(n, t, _)| (n.clone(), t.clone()))
            .collect();
        let hits = rank(query, &docs, limit);
        if !hits.is_empty() {
            let mut l = self.loaded.lock();
            l.extend(hits.iter().cloned());
            self.record.loaded(&l);
        }
        hits.into_iter()
            .map(|h| {
                let d = candidates
                    .iter()
                    .find(|c| c.0 == h)
                    .map(|c| c.2.clone())
                    .unwrap_or_default();
                (h, d)
            })
            .collect()
    }

    /// The codemode notice, once (for the product to show).
    pub fn take_notice(&self) -> Option<String> {
        self.notice.lock().take()
    }
}

#[async_trait]
impl crate::agent::ToolProvider for RunTools {
    async fn tools(self: Arc<Self>) -> Vec<Arc<dyn Tool>> {
        if !self.waited.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let loaded = self.loaded.lock().clone();
            for m in self.managers() {
                m.wait_for_direct(&loaded).await;
            }
        }
        let loaded = self.loaded.lock().clone();
        let mut out: Vec<Arc<dyn Tool>> = Vec::new();
        if self.any_searchable_config() {
            out.push(Arc::new(ToolSearch(Arc::downgrade(&self))));
        }
        let res = self.resource_servers();
        if !res.is_empty() {
            for kind in [
                ResourceKind::List,
                ResourceKind::Templates,
                ResourceKind::Read,
            ] {
                out.push(Arc::new(ResourceTool {
                    kind,
                    tools: Arc::downgrade(&self),
                }));
            }
        }
        let mut undeclared = Vec::new();
        {
            let mut declared = self.declared.lock();
            for (t, e, _) in self.all() {
                let name = t.spec().name;
                if e == Exposure::Direct {
                    out.push(t);
                } else if loaded.contains(&name) {
                    if declared.insert(name) {
                        undeclared.push(t.spec());
                    }
                    out.push(t);
                }
            }
        }
        if !undeclared.is_empty() {
            self.record.declare(&undeclared);
        }
        out
    }
}

/// `tool_search`.
struct ToolSearch(std::sync::Weak<RunTools>);

#[async_trait]
impl Tool for ToolSearch {
    fn name(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed(TOOL_SEARCH)
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            constrained_sampling: None,
            name: TOOL_SEARCH.into(),
            description: TOOL_SEARCH_DESCRIPTION.into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Search query for deferred tools."},
                    "limit": {"type": "number", "description": "Maximum number of tools to return. Defaults to 8."}
                },
                "required": ["query"]
            }),
        }
    }
    fn approval_kind(&self) -> ToolKind {
        ToolKind::ReadOnly
    }
    fn prompt_snippet(&self) -> Option<String> {
        Some("Search for tools that are not loaded yet and load the matches".into())
    }
    async fn execute(&self, _ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let query = args.get("query").and_then(Value::as_str).unwrap_or("");
        if query.trim().is_empty() {
            return Err(ToolError::new("query must not be empty"));
        }
        let limit = match args.get("limit") {
            None | Some(Value::Null) => 8,
            Some(v) => match v.as_f64() {
                Some(f) if f.fract() == 0.0 && f > 0.0 => f as usize,
                _ => return Err(ToolError::new("limit must be a positive integer")),
            },
        };
        let Some(tools) = self.0.upgrade() else {
            return Err(ToolError::new("the run ended"));
        };
        let hits = tools.search(query, limit).await;
        let text = if hits.is_empty() {
            "No matching tools found.".to_string()
        } else {
            format!(
                "Loaded {} tool{}. They are available from your next call:\n{}",
                hits.len(),
                if hits.len() == 1 { "" } else { "s" },
                hits.iter()
                    .map(|(n, d)| format!("- {n}: {}", d.trim().lines().next().unwrap_or("")))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        };
        Ok(ToolOutput {
            content: vec![ContentBlock::text(text)],
            details: Some(json!({"loaded": hits.iter().map(|h| &h.0).collect::<Vec<_>>()})),
            terminate: false,
            ..Default::default()
        })
    }
}

#[derive(Clone, Copy, PartialEq)]
enum ResourceKind {
    List,
    Templates,
    Read,
}

/// `list_mcp_resources`, `list_mcp_resource_templates`, `read_mcp_resource`.
struct ResourceTool {
    kind: ResourceKind,
    tools: std::sync::Weak<RunTools>,
}

#[async_trait]
impl Tool for ResourceTool {
    fn spec(&self) -> ToolSpec {
        let server = json!({"type": "string", "description": "MCP server name"});
        let cursor =
            json!({"type": "string", "description": "Cursor from a previous page (with server)"});
        match self.kind {
            ResourceKind::List => ToolSpec {
 constrained_sampling: None,
                name: "list_mcp_resources".into(),
                description: "Lists resources offered by MCP servers as JSON. With `server`, lists one page of that server; `cursor` continues with the next page. Without `server`, lists every resource of every server.".into(),
                parameters: json!({"type": "object", "properties": {"server": server, "cursor": cursor}}),
            },
            ResourceKind::Templates => ToolSpec {
 constrained_sampling: None,
                name: "list_mcp_resource_templates".into(),
                description: "Lists URI templates of resources MCP servers do not list directly, as JSON. With `server`, one page of that server; `cursor` continues.".into(),
                parameters: json!({"type": "object", "properties": {"server": server, "cursor": cursor}}),
            },
            ResourceKind::Read => ToolSpec {
 constrained_sampling: None,
                name: "read_mcp_resource".into(),
                description: "Reads a resource of an MCP server by server name and URI.".into(),
                parameters: json!({"type": "object", "properties": {"server": server, "uri": {"type": "string", "description": "Resource URI"}}, "required": ["server", "uri"]}),
            },
        }
    }
    fn approval_kind(&self) -> ToolKind {
        ToolKind::ReadOnly
    }
    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let Some(tools) = self.tools.upgrade() else {
            return Err(ToolError::new("the run ended"));
        };
        for m in tools.managers() {
            m.wait_all(super::manager::STARTUP_WAIT).await;
        }
        let servers = tools.resource_servers();
        let wanted = args.get("server").and_then(Value::as_str);
        let cursor = args
            .get("cursor")
            .and_then(Value::as_str)
            .map(str::to_string);
        let pick: Vec<Arc<Server>> = match wanted {
            Some(w) => {
                let s = servers
                    .iter()
                    .find(|s| s.config.name == w)
                    .cloned()
                    .ok_or_else(|| {
                        ToolError::new(format!(
                            "MCP server \"{w}\" has no resources or is not connected"
                        ))
                    })?;
                vec![s]
            }
            None => servers,
        };
        use rmcp::model::{ClientRequest, PaginatedRequestParams, ReadResourceRequestParams};
        if self.kind == ResourceKind::Read {
            let uri = args
                .get("uri")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let s = pick
                .first()
                .ok_or_else(|| ToolError::new("server is required"))?;
            let c = s.connection().await.map_err(ToolError::new)?;
            let req = ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(
                ReadResourceRequestParams::new(uri.clone()),
            ));
            let r = c.request(req, &ctx.cancel).await.map_err(ToolError::new)?;
            let content: Vec<ContentBlock> = r
                .get("contents")
                .and_then(Value::as_array)
                .map(|a| a.iter().flat_map(resource_contents).collect())
                .unwrap_or_default();
            let (content, full) = limit_content(content);
            let mut details = json!({"server": s.config.name, "uri": uri});
            if let Some(p) = full {
                details["fullOutputPath"] = json!(p);
            }
            return Ok(ToolOutput {
                content,
                details: Some(details),
                terminate: false,
                ..Default::default()
            });
        }
        let (key, method_list) = match self.kind {
            ResourceKind::List => ("resources", true),
            _ => ("resourceTemplates", false),
        };
        let mut all: Vec<Value> = Vec::new();
        let mut next: Option<String> = None;
        for s in &pick {
            let c = s.connection().await.map_err(ToolError::new)?;
            let mut cur = if wanted.is_some() {
                cursor.clone()
            } else {
                None
            };
            loop {
                let mut params = PaginatedRequestParams::default();
                params.cursor = cur.clone();
                let req = if method_list {
                    ClientRequest::ListResourcesRequest(
                        rmcp::model::ListResourcesRequest::with_param(params),
                    )
                } else {
                    ClientRequest::ListResourceTemplatesRequest(
                        rmcp::model::ListResourceTemplatesRequest::with_param(params),
                    )
                };
                let r = match c.request(req, &ctx.cancel).await {
                    Ok(r) => r,
                    Err(e) if !method_list && e.contains("-32601") => break,
                    Err(e) => return Err(ToolError::new(e)),
                };
                for item in r
                    .get(key)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
                {
                    let uri = item
                        .get("uri")
                        .or(item.get("uriTemplate"))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let mime = item.get("mimeType").and_then(Value::as_str).unwrap_or("");
                    if uri.starts_with("ui://") || mime == "text/html;profile=mcp-app" {
                        continue;
                    }
                    let mut o = item.as_object().cloned().unwrap_or_default();
                    o.remove("icons");
                    let mut v = serde_json::Map::new();
                    v.insert("server".into(), json!(s.config.name));
                    v.extend(o);
                    all.push(Value::Object(v));
                }
                cur = r
                    .get("nextCursor")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                if wanted.is_some() {
                    next = cur.clone();
                    break;
                }
                if cur.is_none() {
                    break;
                }
            }
        }
        let mut out = serde_json::Map::new();
        if let Some(w) = wanted {
            out.insert("server".into(), json!(w));
        }
        out.insert(key.into(), Value::Array(all));
        if let Some(n) = next {
            out.insert("nextCursor".into(), json!(n));
        }
        let (content, _) = limit_content(vec![ContentBlock::text(Value::Object(out).to_string())]);
        Ok(ToolOutput {
            content,
            details: None,
            terminate: false,
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn middle_cut_as_pi() {
        assert_eq!(truncate_middle("short", 10), None);
        let t = format!("{}{}", "a".repeat(15_000), "é".repeat(10_000));
        let (cut, bytes, lines) = truncate_middle(&t, MCP_OUTPUT_MAX_BYTES).unwrap();
        assert_eq!(bytes, 35_000);
        assert_eq!(lines, 1);
        let head = "a".repeat(10_240);
        let tail = "é".repeat(5_120);
        assert_eq!(
            cut,
            format!("{head}…{} chars truncated…{tail}", 4_760 + 4_880)
        );
    }

    #[test]
    fn results_convert() {
        let r = json!({"content": [{"type": "text", "text": "hi"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}]});
        let out = convert_result("s", "t", &r, false).unwrap();
        assert_eq!(
            out.content,
            vec![
                ContentBlock::text("hi"),
                ContentBlock::Image(pi_ai::ImageContent {
                    data: "AAAA".into(),
                    mime_type: "image/png".into()
                })
            ]
        );
        let e =
            convert_result("s", "t", &json!({"content": [], "isError": true}), false).unwrap_err();
        assert_eq!(e.message, "MCP tool s/t returned an error");
        let big = "x".repeat(30_000);
        let out = convert_result(
            "s",
            "t",
            &json!({"content": [{"type": "text", "text": big}]}),
            false,
        )
        .unwrap();
        let path = out.details.as_ref().unwrap()["fullOutputPath"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), big);
        let ContentBlock::Text(t) = &out.content[0] else {
            panic!()
        };
        assert!(t.text.starts_with(
            "Warning: truncated output (original token count: 7500)\nTotal output lines: 1\n\n"
        ));
        assert!(t.text.contains("…9520 chars truncated…"));
        assert!(t.text.ends_with(&format!(
            "\n\n[Full output: {path} (read it with offset/limit)]"
        )));
        std::fs::remove_file(path).unwrap();
        let out = convert_result(
            "s",
            "t",
            &json!({"content": [], "structuredContent": {"a": 1}}),
            false,
        )
        .unwrap();
        assert_eq!(out.content, vec![ContentBlock::text("{\"a\":1}")]);
    }

    #[test]
    fn ranking() {
        let docs = vec![
            (
                "mcp__e__echo".to_string(),
                "Echoes back the input".to_string(),
            ),
            (
                "mcp__e__get_sum".to_string(),
                "Returns the sum of two numbers".to_string(),
            ),
            (
                "mcp__e__get_tiny_image".to_string(),
                "Returns a tiny image".to_string(),
            ),
        ];
        assert_eq!(rank("sum numbers", &docs, 8), vec!["mcp__e__get_sum"]);
        assert_eq!(rank("echo", &docs, 8), vec!["mcp__e__echo"]);
        assert_eq!(rank("images", &docs, 1), vec!["mcp__e__get_tiny_image"]);
        assert!(rank("the", &docs, 8).is_empty());
    }

    #[test]
    fn read_only_hint_makes_a_read_only_tool_kept_in_plan_mode() {
        let cfg = crate::mcp::config::validate(
            "srv",
            &json!({"command": "true", "enabled": false, "exposure": "direct"}),
        )
        .unwrap();
        let m = McpManager::standalone(std::path::Path::new("/"), None, vec![cfg]);
        let server = m.server("srv").unwrap();
        let tool = |annotations: Value| -> Arc<dyn Tool> {
            let raw =
                json!({"name": "t", "inputSchema": {"type": "object"}, "annotations": annotations});
            Arc::new(McpTool::new(
                server.clone(),
                &raw,
                "mcp__srv__t".into(),
                false,
            ))
        };
        let ro = tool(json!({"readOnlyHint": true}));
        let rw = tool(json!({"readOnlyHint": false}));
        let none = tool(Value::Null);
        let kinds: Vec<ToolKind> = [&ro, &rw, &none]
            .iter()
            .map(|t| t.approval_kind())
            .collect();
        assert_eq!(
            kinds,
            vec![ToolKind::ReadOnly, ToolKind::Execute, ToolKind::Execute]
        );
        // Plan mode keeps only the one annotated read-only (Pi 1.6.0's example would keep
        // every active tool but `edit` and `write`; plan mode here is read-only).
        let kept: Vec<bool> = [&ro, &rw, &none]
            .iter()
            .map(|t| crate::extension::plan_mode::allowed_in_plan_mode(t))
            .collect();
        assert_eq!(kept, vec![true, false, false]);
        // Named as its spec names it, without building the spec (Tool::name).
        assert_eq!(
            (ro.name().into_owned(), ro.spec().name),
            ("mcp__srv__t".to_string(), "mcp__srv__t".to_string())
        );
    }
}
