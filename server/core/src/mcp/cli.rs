//! `pi-lsp mcp list` (Pi's `pi mcp list`): connects to every enabled server, prints its state,
//! transport, tools (with their exposure when it differs from the server's) and errors, then
//! closes them. Exit status 1 when an entry is invalid or an enabled server did not connect.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};

use super::config::{self, Exposure, Transport};
use super::manager::{McpManager, State};

/// Runs the listing for the workspace `root`; returns the text (or JSON with `json`) to print
/// and the exit status.
pub async fn list(
    root: &Path,
    agent_dir: Option<&Path>,
    trusted: bool,
    json_out: bool,
) -> (String, i32) {
    let cfg = config::load(agent_dir, root, trusted);
    let errors = cfg.errors.clone();
    let listed = McpManager::standalone(root, agent_dir, cfg.servers.clone());
    for s in listed.servers() {
        if s.config.enabled {
            let _ = s.connection().await;
        }
    }
    let mut reports: Vec<Value> = Vec::new();
    let mut failed = !errors.is_empty();
    let mut text = String::new();
    for s in listed.servers() {
        let c = &s.config;
        let (state, error) = s.status();
        let state = if c.enabled { state } else { State::Disabled };
        if c.enabled && state != State::Connected {
            failed = true;
        }
        let tools: Vec<String> = s
            .tools()
            .iter()
            .filter_map(|t| t.get("name").and_then(Value::as_str).map(str::to_string))
            .collect();
        let differing: Vec<(String, Exposure)> = tools
            .iter()
            .filter_map(|t| {
                let e = c.tool_exposure(t);
                (e != c.exposure).then(|| (t.clone(), e))
            })
            .collect();
        let transport = match &c.transport {
            Transport::Stdio { command, args, .. } => std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            Transport::Http { url, .. } => url.clone(),
        };
        let scope = serde_json::to_value(c.scope)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let state_name = serde_json::to_value(state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let mut r = json!({
            "name": c.name, "scope": scope, "source": c.source, "enabled": c.enabled,
            "exposure": c.exposure, "transport": transport, "state": state_name, "tools": tools,
        });
        if let Some(o) = &c.override_path {
            r["override"] = json!(o);
        }
        if !differing.is_empty() {
            r["toolExposure"] = Value::Object(
                differing
                    .iter()
                    .map(|(t, e)| (t.clone(), json!(e)))
                    .collect(),
            );
        }
        if s.has_resources() {
            r["resources"] = json!(true);
        }
        let error = error.filter(|_| state != State::Connected);
        if let Some(e) = &error {
            r["error"] = json!(e);
        }
        let shown = match state {
            State::Connected => format!(
                "connected, {} tool{}",
                tools.len(),
                if tools.len() == 1 { "" } else { "s" }
            ),
            State::NeedsAuth => "needs sign-in".into(),
            _ => state_name.clone(),
        };
        let _ = writeln!(
            text,
            "{}: {shown} ({}, {scope})",
            c.name,
            c.exposure.as_str()
        );
        let _ = writeln!(text, "  {transport}");
        if let Some(o) = &c.override_path {
            let _ = writeln!(text, "  project override: {}", o.display());
        }
        if state == State::NeedsAuth {
            let _ = writeln!(text, "  sign-in is not supported yet");
        }
        if !tools.is_empty() {
            let shown: Vec<String> = tools
                .iter()
                .map(|t| match differing.iter().find(|(d, _)| d == t) {
                    Some((_, e)) => format!("{t} [{}]", e.as_str()),
                    None => t.clone(),
                })
                .collect();
            let _ = writeln!(text, "  tools: {}", shown.join(", "));
        }
        if s.has_resources() {
            let _ = writeln!(text, "  offers resources");
        }
        if let Some(e) = &error {
            let _ = writeln!(text, "  {}", e.split('\n').collect::<Vec<_>>().join("\n  "));
        }
        reports.push(r);
    }
    listed.shutdown().await;
    if reports.is_empty() && errors.is_empty() {
        let where_ = agent_dir
            .map(|a| a.join("mcp.json").display().to_string())
            .unwrap_or_else(|| "mcp.json".into());
        let _ = writeln!(
            text,
            "No MCP servers configured. Add them to {where_} or .pi/mcp.json."
        );
    }
    for e in &errors {
        let _ = writeln!(text, "config error: {e}");
    }
    let note = (!trusted && root.join(".pi").join("mcp.json").exists()).then(|| {
        format!(
            "{} is ignored: the workspace is not trusted (pass --trust)",
            root.join(".pi").join("mcp.json").display()
        )
    });
    if let Some(n) = &note {
        let _ = writeln!(text, "{n}");
    }
    let code = i32::from(failed);
    if json_out {
        let mut v = json!({"servers": reports, "errors": errors});
        if let Some(n) = note {
            v["note"] = json!(n);
        }
        return (
            format!("{}\n", serde_json::to_string_pretty(&v).unwrap_or_default()),
            code,
        );
    }
    (text, code)
}
