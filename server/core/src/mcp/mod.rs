//! MCP servers as Pi 1.6 reads them (docs/mcp.md): configuration ([`config`]), connections
//! through the official Rust SDK `rmcp` ([`client`]), the servers of a workspace shared by its
//! sessions ([`manager`]), the tools the model sees ([`tools`]) and `mcp.log` ([`log`]).
//!
//! # For a front door
//! - A session's run gets its MCP tools from [`run_tools`] (the editor server and headless
//!   `run` through [`crate::harness`]; nothing to do).
//! - Servers a client hands to one session (ACP `session/new.mcpServers`): convert each with
//!   [`acp_server`] (stdio `{name, command, args, env: [{name, value}]}`, http `{type: "http",
//!   name, url, headers: [{name, value}]}`), start them with [`McpManager::for_session`], and
//!   give the manager to the session with [`set_session_servers`] before its first prompt;
//!   its tools join the workspace's. The manager closes its servers when dropped
//!   ([`forget_session`]) or at [`shutdown_all`].
//! - At process exit: [`shutdown_all`] (stdin closed → SIGTERM → SIGKILL per server's group).
//! - `--no-mcp` / `"extensions": ["-builtin:mcp"]`: [`set_disabled`] / [`config::disabled_by_settings`].
//! - Failures told to the user once: [`set_reporter`] (the editor's `window/showMessage`,
//!   headless stderr).
//! - VS Code's servers: [`vscode::set_options`] (the editor's `initializationOptions`).

pub mod cli;
pub mod client;
pub mod config;
pub mod groups;
pub mod log;
pub mod manager;
pub mod naming;
pub mod tools;
pub mod vscode;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

pub use config::{Exposure, McpConfig, ServerConfig};
pub use groups::kill_all_groups;
pub use manager::{shutdown_all, McpManager, ServerInfo, State};
pub use tools::RunTools;

use crate::resources::WorkspaceConfig;
use crate::session::{EntryData, SessionWriter, StoredMessage, SystemState};

static DISABLED: AtomicBool = AtomicBool::new(false);

/// Switches MCP off for this process (`--no-mcp`).
pub fn set_disabled(off: bool) {
    DISABLED.store(off, Ordering::SeqCst);
}

/// Whether MCP is off for `ws`: `--no-mcp`, or `"extensions": ["-builtin:mcp"]` in settings.
pub fn disabled(ws: &WorkspaceConfig) -> bool {
    DISABLED.load(Ordering::SeqCst) || config::disabled_by_settings(&ws.settings())
}

/// The workspace's manager (connecting its servers on first use), or `None` when MCP is off.
/// With `vscodeMcpServers` on ([`vscode::files`]) it also has VS Code's servers.
pub fn workspace_manager(ws: &WorkspaceConfig) -> Option<Arc<McpManager>> {
    (!disabled(ws)).then(|| {
        McpManager::for_workspace(
            ws.root(),
            ws.agent_dir(),
            ws.trusted(),
            vscode::files(&ws.settings()),
        )
    })
}

/// Where failures and configuration errors are told, once each.
pub type Reporter = Arc<dyn Fn(String) + Send + Sync>;

static REPORTER: parking_lot::RwLock<Option<Reporter>> = parking_lot::RwLock::new(None);

/// Sets where this process tells the user of a server's failure (`MCP server "<name>": …`,
/// with the tail of its stderr) and of configuration errors (`MCP configuration: …`): the
/// editor's `window/showMessage`, headless `run`'s stderr. Each is told once (a server again
/// only after it connected since). Without a reporter they are only logged.
pub fn set_reporter(r: Reporter) {
    *REPORTER.write() = Some(r);
}

/// Tells the user `text` through the [`set_reporter`] reporter (secrets redacted) and logs
/// it: a warning when there is no reporter, else at `info` (so headless stderr and an
/// editor's stderr do not show it twice).
pub(crate) fn report(text: &str) {
    let r = REPORTER.read().clone();
    match r {
        Some(r) => {
            tracing::info!("{text}");
            r(pi_ai::keys::redact(text));
        }
        None => tracing::warn!("{text}"),
    }
}

fn session_servers() -> &'static parking_lot::Mutex<HashMap<String, Arc<McpManager>>> {
    static S: OnceLock<parking_lot::Mutex<HashMap<String, Arc<McpManager>>>> = OnceLock::new();
    S.get_or_init(Default::default)
}

/// Gives the session `session_id` the servers of `manager` (see the module docs).
pub fn set_session_servers(session_id: &str, manager: Arc<McpManager>) {
    session_servers()
        .lock()
        .insert(session_id.to_string(), manager);
    SESSION_SERVERS_CHANGES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// How many times servers were handed to a session or dropped ([`set_session_servers`],
/// [`forget_session`]).
static SESSION_SERVERS_CHANGES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A number that changes whenever a session's handed-over servers do: a run configuration
/// built before such a change lacks their tools (what
/// [`crate::harness::AgentSession::start`] compares before reusing one).
pub fn session_servers_generation() -> u64 {
    SESSION_SERVERS_CHANGES.load(std::sync::atomic::Ordering::SeqCst)
}

/// Drops the servers handed to `session_id` (they close).
pub fn forget_session(session_id: &str) {
    SESSION_SERVERS_CHANGES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let m = session_servers().lock().remove(session_id);
    if let Some(m) = m {
        tokio::spawn(async move { m.shutdown().await });
    }
}

/// One ACP `McpServer` (`session/new.mcpServers[i]`) as a server entry: stdio `{name, command,
/// args, env: [{name, value}]}`, `{type: "http", name, url, headers: [{name, value}]}`; `sse`
/// is refused as in mcp.json. Errors are Pi's validation messages.
pub fn acp_server(v: &Value) -> Result<ServerConfig, String> {
    acp_server_with(v, None)
}

/// [`acp_server`] for a server handed over to a session of `ws`: exposure `direct`, unless an
/// `mcp.json` entry of the same name (the user's file, then the trusted project's, overrides
/// merged as Pi merges them) sets `exposure` or `toolExposure`, which then apply (issue "ACP
/// mode": "with exposure direct unless an mcp.json entry of the same name says otherwise").
/// How the server is reached stays the client's.
pub fn acp_server_in(ws: &WorkspaceConfig, v: &Value) -> Result<ServerConfig, String> {
    let mut cfg = config::McpConfig::default();
    let mut raw = std::collections::BTreeMap::new();
    config::load_pi_files(ws.agent_dir(), ws.root(), ws.trusted(), &mut cfg, &mut raw);
    let name = v.get("name").and_then(Value::as_str).unwrap_or("");
    acp_server_with(v, raw.get(name))
}

fn acp_server_with(v: &Value, file_entry: Option<&Value>) -> Result<ServerConfig, String> {
    let name = v.get("name").and_then(Value::as_str).unwrap_or("");
    let pairs = |k: &str| -> Value {
        let mut m = serde_json::Map::new();
        for p in v.get(k).and_then(Value::as_array).into_iter().flatten() {
            if let (Some(n), Some(val)) = (
                p.get("name").and_then(Value::as_str),
                p.get("value").and_then(Value::as_str),
            ) {
                m.insert(n.to_string(), Value::String(val.to_string()));
            }
        }
        Value::Object(m)
    };
    let mut entry = serde_json::Map::new();
    match v.get("type").and_then(Value::as_str) {
        Some("http") => {
            entry.insert("url".into(), v.get("url").cloned().unwrap_or(Value::Null));
            entry.insert("headers".into(), pairs("headers"));
        }
        Some("sse") => {
            entry.insert("type".into(), "sse".into());
        }
        _ => {
            entry.insert(
                "command".into(),
                v.get("command").cloned().unwrap_or(Value::Null),
            );
            entry.insert(
                "args".into(),
                v.get("args").cloned().unwrap_or(Value::Array(vec![])),
            );
            entry.insert("env".into(), pairs("env"));
        }
    }
    // Handed over to be used: declared like built-in tools.
    entry.insert("exposure".into(), "direct".into());
    for key in ["exposure", "toolExposure"] {
        if let Some(x) = file_entry.and_then(|e| e.get(key)) {
            entry.insert(key.into(), x.clone());
        }
    }
    let mut s = config::validate(name, &Value::Object(entry))?;
    s.scope = config::Scope::Session;
    Ok(s)
}

/// Whether `name` is an MCP server tool's name (`mcp__<server>__<tool>`).
pub fn is_mcp_tool(name: &str) -> bool {
    name.starts_with(naming::PREFIX)
}

/// The tools `tool_search` loaded on the session's current branch: the last `mcp-tools` custom
/// entry's `data.loaded`, and every MCP tool the branch's stored system messages declare (Pi
/// 1.6 records a load as a system message's `toolsAdded`, so a file Pi 1.6 wrote keeps its
/// loads here too).
pub fn loaded_on_branch(writer: &SessionWriter) -> BTreeSet<String> {
    let mut out = last_loaded_entry(writer);
    out.extend(
        writer
            .tree()
            .system_state(writer.leaf())
            .tools
            .keys()
            .filter(|n| is_mcp_tool(n))
            .cloned(),
    );
    out
}

fn last_loaded_entry(writer: &SessionWriter) -> BTreeSet<String> {
    // Only the branch's custom entries (none in most files: then no walk at all, as every
    // open asks this).
    let custom = match writer.leaf() {
        Some(leaf) => writer.tree().path_where(leaf, |s| s.may_be_kind("custom")),
        None => Vec::new(),
    };
    for e in custom.into_iter().rev() {
        if e.kind != "custom" {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(&e.text()) else {
            continue;
        };
        if v.get("customType").and_then(Value::as_str) == Some(tools::LOADED_ENTRY) {
            return v
                .pointer("/data/loaded")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
        }
    }
    BTreeSet::new()
}

/// Keeps the MCP tools `have` (what the branch's stored system messages declare) holds in
/// `want` (a run's prompt and built-in tools, [`crate::session::SystemState::of_run`]): a
/// run's MCP tools are not part of its configuration, and a run-start patch must not remove
/// the loads Pi 1.6 and [`RecordLoaded::declare`](tools::RecordLoaded::declare) stored.
pub fn keep_declared(have: &SystemState, want: &mut SystemState) {
    for (name, decl) in &have.tools {
        if is_mcp_tool(name) && !want.tools.contains_key(name) {
            want.tools.insert(name.clone(), decl.clone());
        }
    }
}

/// A tool declaration as a stored system message holds it (as
/// [`crate::session::SystemState::of_run`] writes one).
fn declaration(t: &pi_ai::ToolSpec) -> Value {
    serde_json::json!({"name": t.name, "description": t.description, "parameters": t.parameters})
}

/// Records a run's `tool_search` loads in its session's file.
struct SessionRecord(Arc<Mutex<SessionWriter>>);

impl tools::RecordLoaded for SessionRecord {
    fn loaded(&self, loaded: &BTreeSet<String>) {
        let Ok(mut w) = self.0.lock() else {
            return;
        };
        let data = serde_json::json!({ "loaded": loaded });
        if let Err(e) = w.append(EntryData::Custom {
            custom_type: tools::LOADED_ENTRY.into(),
            data,
        }) {
            tracing::warn!("could not record the tools tool_search loaded: {e}");
        }
    }

    fn declare(&self, tools: &[pi_ai::ToolSpec]) {
        let Ok(mut w) = self.0.lock() else {
            return;
        };
        if !w.writes_pi16() {
            return;
        }
        let have = w.tree().system_state(w.leaf());
        // Before the session's first system message (a run not started by the harness) there
        // is nothing to patch; the run's start stores the whole loadout.
        if !have.seen {
            return;
        }
        let mut want = have.clone();
        for t in tools {
            want.tools.insert(t.name.clone(), declaration(t));
        }
        if let Some(m) = have.patch_to(&want, pi_ai::types::now_millis()) {
            if let Err(e) = w.append(EntryData::Message {
                message: StoredMessage::Json(m),
            }) {
                tracing::warn!("could not record the tools tool_search loaded: {e}");
            }
        }
    }
}

/// The MCP tool set of one run of the session `session_id` written by `writer`, or `None` when
/// MCP is off. `tool_search` loads are appended to `writer` as `mcp-tools` entries and, before
/// the next model request, as a stored system message declaring them (Pi 1.6), so the branch
/// keeps them.
pub fn run_tools(
    ws: &WorkspaceConfig,
    session_id: &str,
    writer: &Arc<Mutex<SessionWriter>>,
) -> Option<Arc<RunTools>> {
    let manager = workspace_manager(ws)?;
    let loaded = writer
        .lock()
        .map(|w| loaded_on_branch(&w))
        .unwrap_or_default();
    let session = session_servers().lock().get(session_id).cloned();
    Some(RunTools::new(
        manager,
        session,
        loaded,
        Box::new(SessionRecord(writer.clone())),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The tools loaded on the branch are the last `mcp-tools` entry's on the path to the
    /// leaf (another custom entry, a later load on an abandoned branch, and a file with no
    /// custom entry at all, where nothing is walked, do not count).
    #[test]
    fn the_last_load_on_the_branch_is_the_one_read() {
        use crate::session::{EntryData, SessionWriter};
        let tmp = tempfile::tempdir().unwrap();
        let mut w = SessionWriter::create(tmp.path(), tmp.path(), "p", "m", "off").unwrap();
        let load = |names: &[&str]| EntryData::Custom {
            custom_type: tools::LOADED_ENTRY.into(),
            data: json!({ "loaded": names }),
        };
        let other = EntryData::Custom {
            custom_type: "other".into(),
            data: json!({ "loaded": ["mcp__x__no"] }),
        };
        assert!(last_loaded_entry(&w).is_empty());
        w.append(load(&["mcp__s__a"])).unwrap();
        let fork = w.append(other).unwrap();
        assert_eq!(
            last_loaded_entry(&w),
            BTreeSet::from(["mcp__s__a".to_string()])
        );
        w.append(load(&["mcp__s__b", "mcp__s__c"])).unwrap();
        let want: BTreeSet<String> = ["mcp__s__b", "mcp__s__c"].map(String::from).into();
        assert_eq!(last_loaded_entry(&w), want);
        let tree = w.tree().clone();
        w.branch(&tree, Some(&fork)).unwrap();
        assert_eq!(
            last_loaded_entry(&w),
            BTreeSet::from(["mcp__s__a".to_string()])
        );
    }

    /// A server an ACP client hands over is `direct`, unless an `mcp.json` entry of the same
    /// name sets `exposure` / `toolExposure` (the user's, overridden by a trusted project's);
    /// the untrusted project's file is not read, and how to reach the server stays the
    /// client's.
    #[test]
    fn handed_servers_are_direct_unless_an_entry_of_the_name_says_otherwise() {
        let tmp = tempfile::tempdir().unwrap();
        let (agent, root) = (tmp.path().join("agent"), tmp.path().join("ws"));
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::create_dir_all(root.join(".pi")).unwrap();
        std::fs::write(
            agent.join("mcp.json"),
            json!({"mcpServers": {
                "docs": {"command": "user-docs", "exposure": "deferred"},
                "db": {"command": "user-db", "toolExposure": {"drop_*": "hidden"}}
            }})
            .to_string(),
        )
        .unwrap();
        std::fs::write(
            root.join(".pi/mcp.json"),
            json!({"mcpServers": {"docs": {"exposure": "hidden"}}}).to_string(),
        )
        .unwrap();
        let handed =
            |name: &str| json!({"name": name, "command": "from-client", "args": ["-v"], "env": []});
        let seen = |trusted: bool, name: &str| {
            let ws = WorkspaceConfig::new(root.clone(), Some(agent.clone()), trusted);
            let s = acp_server_in(&ws, &handed(name)).unwrap();
            (
                s.exposure,
                s.tool_exposure.clone(),
                s.transport.clone(),
                s.scope,
            )
        };
        let client = acp_server(&handed("x")).unwrap().transport;
        assert_eq!(
            seen(true, "docs"),
            (
                Exposure::Hidden,
                vec![],
                client.clone(),
                config::Scope::Session
            )
        );
        assert_eq!(seen(false, "docs").0, Exposure::Deferred);
        assert_eq!(
            seen(false, "db"),
            (
                Exposure::Direct,
                vec![("drop_*".to_string(), Exposure::Hidden)],
                client.clone(),
                config::Scope::Session
            )
        );
        assert_eq!(
            seen(true, "other"),
            (Exposure::Direct, vec![], client, config::Scope::Session)
        );
    }
}
