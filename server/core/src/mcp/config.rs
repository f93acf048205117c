//! MCP server configuration as Pi 1.6 reads it (`docs/mcp.md` of `@earendil-works/pi-coding-agent`
//! 1.6.0): `<agent dir>/mcp.json` (user) and, in a trusted workspace only, `<project>/.pi/mcp.json`,
//! both `{"mcpServers": {"<name>": {…}}}`.
//!
//! - A project entry replaces the user entry of the same name. A project entry without `command`,
//!   `url` and `type` is an *override*: it may set only `enabled`, `exposure` and `toolExposure` of
//!   the user entry of that name, whose other fields (`env`, `headers`, …) stay.
//! - Stdio entries: `command` (one executable), `args`, `env`, `cwd`; streamable HTTP entries:
//!   `url`, `headers`, `oauth`. Both: `type` (`stdio`, `http`, `streamable-http`; `sse` is
//!   rejected), `timeout` (seconds, default 60, reset by progress), `enabled`, `description`,
//!   `exposure`, `toolExposure`.
//! - Server names are letters, digits, `_` and `-`; names differing only in `-`/`_` clash.
//! - Invalid entries are reported (Pi's wording) and skipped; the others still load.
//! - `env` and `headers` values are resolved when a server connects ([`resolve_value`]):
//!   `!command` (the whole value) or a template with `$VAR` / `${VAR}` (`$$` is `$`, `$!` is `!`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// Default per-request timeout of a server, in seconds (Pi's `DEFAULT_TIMEOUT_SECONDS`).
pub const DEFAULT_TIMEOUT_SECS: f64 = 60.0;

/// How a server's tools reach the model (Pi's `exposure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exposure {
    /// Pi's default: reached from codemode scripts. pi-lsp has no codemode yet and treats it as
    /// [`Exposure::Deferred`] (and says so once).
    Codemode,
    /// Declared after `tool_search` loads it.
    Deferred,
    /// Declared like a built-in tool.
    Direct,
    /// Registered but unreachable.
    Hidden,
}

impl Exposure {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Exposure::Codemode => "codemode",
            Exposure::Deferred => "deferred",
            Exposure::Direct => "direct",
            Exposure::Hidden => "hidden",
        }
    }

    /// Parses a configured value (`codemode-deferred` is Pi's alias of `codemode`).
    pub fn parse(s: &str) -> Option<Exposure> {
        Some(match s {
            "codemode" | "codemode-deferred" => Exposure::Codemode,
            "deferred" => Exposure::Deferred,
            "direct" => Exposure::Direct,
            "hidden" => Exposure::Hidden,
            _ => return None,
        })
    }

    /// What pi-lsp does with it: `codemode` is served as `deferred`.
    pub fn effective(self) -> Exposure {
        match self {
            Exposure::Codemode => Exposure::Deferred,
            e => e,
        }
    }
}

/// How pi-lsp talks to a server.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A child process speaking JSON-RPC lines on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Unresolved values (see [`resolve_value`]).
        env: BTreeMap<String, String>,
        cwd: Option<String>,
    },
    /// MCP's streamable HTTP transport.
    Http {
        url: String,
        /// Unresolved values (see [`resolve_value`]).
        headers: BTreeMap<String, String>,
        /// The entry has an `oauth` object: sign-in, which pi-lsp does not support yet.
        oauth: bool,
    },
}

/// Where an entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// `<agent dir>/mcp.json` (Pi calls this scope `global`).
    #[serde(rename = "global")]
    User,
    /// `<project>/.pi/mcp.json` (trusted workspaces only).
    Project,
    /// Handed over for one session (ACP `session/new.mcpServers`).
    Session,
    /// The user's VS Code `mcp.json` (`vscodeMcpServers`, see [`super::vscode`]).
    #[serde(rename = "vscode-user")]
    VscodeUser,
    /// The workspace's `.vscode/mcp.json` (trusted workspaces only).
    #[serde(rename = "vscode-workspace")]
    VscodeWorkspace,
}

impl Scope {
    /// Whether the entry comes from one of VS Code's files.
    pub fn is_vscode(self) -> bool {
        matches!(self, Scope::VscodeUser | Scope::VscodeWorkspace)
    }
}

/// One validated server entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    pub name: String,
    pub transport: Transport,
    pub enabled: bool,
    pub description: Option<String>,
    /// Per-request timeout in seconds.
    pub timeout: f64,
    /// The server's exposure (Pi's default `codemode` when unset).
    pub exposure: Exposure,
    /// `toolExposure` in file order: exact tool names or `*` patterns.
    pub tool_exposure: Vec<(String, Exposure)>,
    /// The file that defines the entry (`None` for session servers).
    pub source: Option<PathBuf>,
    pub scope: Scope,
    /// The Pi file whose override entry applies to this entry: the trusted project's file for
    /// a user entry it overrides; for a VS Code entry, the Pi file its changes are saved to
    /// (set whether or not it holds an override yet).
    pub override_path: Option<PathBuf>,
}

impl ServerConfig {
    /// Exposure of one tool: its exact `toolExposure` entry, else the first matching `*`
    /// pattern, else the server's (Pi's `getMcpToolExposure`).
    pub fn tool_exposure(&self, tool: &str) -> Exposure {
        if let Some((_, e)) = self.tool_exposure.iter().find(|(k, _)| k == tool) {
            return *e;
        }
        self.tool_exposure
            .iter()
            .find(|(k, _)| k.contains('*') && pattern_matches(k, tool))
            .map(|(_, e)| *e)
            .unwrap_or(self.exposure)
    }

    /// The file enable/disable/exposure changes are saved to: the override when there is one,
    /// else the defining file.
    pub fn edit_path(&self) -> Option<&Path> {
        self.override_path.as_deref().or(self.source.as_deref())
    }

    /// The per-request timeout.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.timeout.clamp(0.001, 1.0e9))
    }
}

/// Whether `name` matches `pattern`, where `*` matches any characters.
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// The loaded configuration: the servers (disabled ones included), the errors to report once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpConfig {
    pub servers: Vec<ServerConfig>,
    /// Pi's messages, each prefixed with the file.
    pub errors: Vec<String>,
    /// `<project>/.pi/mcp.json` when the workspace is trusted (read or not).
    pub project_config: Option<PathBuf>,
}

impl McpConfig {
    /// The server named `name`.
    pub fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.servers.iter().find(|s| s.name == name)
    }
}

/// The namespace of a server's tools (`-` as `_`), which two servers may not share.
pub fn namespace(server: &str) -> String {
    format!("mcp__{}", server.replace('-', "_"))
}

const OVERRIDE_KEYS: [&str; 3] = ["enabled", "exposure", "toolExposure"];

/// Loads the user file of `agent_dir` and, when `trusted`, the project file of `root`
/// (VS Code's servers first: [`super::vscode::load_all`]).
pub fn load(agent_dir: Option<&Path>, root: &Path, trusted: bool) -> McpConfig {
    let mut cfg = McpConfig::default();
    let mut raw: BTreeMap<String, Value> = BTreeMap::new();
    load_pi_files(agent_dir, root, trusted, &mut cfg, &mut raw);
    cfg
}

/// Reads Pi's own files into `cfg` (after whatever `cfg` and `raw` hold): the user file of
/// `agent_dir`, then, when `trusted`, the project file of `root`, whose entries replace or
/// override entries of the same name.
pub(crate) fn load_pi_files(
    agent_dir: Option<&Path>,
    root: &Path,
    trusted: bool,
    cfg: &mut McpConfig,
    raw: &mut BTreeMap<String, Value>,
) {
    if let Some(a) = agent_dir {
        read_file(&a.join("mcp.json"), Scope::User, cfg, raw);
    }
    if trusted {
        let p = root.join(".pi").join("mcp.json");
        read_file(&p, Scope::Project, cfg, raw);
        cfg.project_config = Some(p);
    }
}

fn strip_bom(s: &str) -> &str {
    s.strip_prefix('\u{feff}').unwrap_or(s)
}

fn read_file(path: &Path, scope: Scope, cfg: &mut McpConfig, raw: &mut BTreeMap<String, Value>) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let shown = path.display();
    let parsed: Value = match serde_json::from_str(strip_bom(&text)) {
        Ok(v) => v,
        Err(e) => {
            cfg.errors.push(format!("{shown}: {e}"));
            return;
        }
    };
    let servers = match parsed.as_object().map(|o| o.get("mcpServers")) {
        Some(None) => return,
        Some(Some(Value::Object(m))) => m.clone(),
        _ => {
            cfg.errors.push(format!(
                "{shown}: expected an object with an \"mcpServers\" object"
            ));
            return;
        }
    };
    for (name, value) in servers {
        let over_vscode = cfg
            .servers
            .iter()
            .any(|s| s.name == name && s.scope.is_vscode());
        if (scope == Scope::Project || over_vscode) && value.as_object().is_some_and(is_override) {
            let obj = value.as_object().cloned().unwrap_or_default();
            let base = cfg.servers.iter().position(|s| s.name == name);
            let extra = obj.keys().any(|k| !OVERRIDE_KEYS.contains(&k.as_str()));
            match base {
                None => cfg.errors.push(format!(
                    "{shown}: server \"{name}\" needs \"command\" or \"url\", or a global server to override"
                )),
                Some(_) if extra => cfg.errors.push(format!(
                    "{shown}: server \"{name}\": an override can only set enabled, exposure, toolExposure"
                )),
                Some(i) => {
                    let mut merged = raw.get(&name).cloned().unwrap_or(Value::Null);
                    if let Some(m) = merged.as_object_mut() {
                        for (k, v) in obj {
                            m.insert(k, v);
                        }
                    }
                    match validate(&name, &merged) {
                        Ok(mut s) => {
                            let old = &cfg.servers[i];
                            s.source = old.source.clone();
                            s.scope = old.scope;
                            s.override_path = Some(path.to_path_buf());
                            cfg.servers[i] = s;
                            raw.insert(name.clone(), merged);
                        }
                        Err(e) => cfg.errors.push(format!("{shown}: {e}")),
                    }
                }
            }
            continue;
        }
        let mut s = match validate(&name, &value) {
            Ok(s) => s,
            Err(e) => {
                cfg.errors.push(format!("{shown}: {e}"));
                continue;
            }
        };
        if let Some(clash) = cfg
            .servers
            .iter()
            .find(|o| o.name != name && namespace(&o.name) == namespace(&name))
        {
            cfg.errors.push(format!(
                "{shown}: server \"{name}\" conflicts with \"{}\"",
                clash.name
            ));
            continue;
        }
        s.source = Some(path.to_path_buf());
        s.scope = scope;
        raw.insert(name.clone(), value);
        match cfg.servers.iter().position(|o| o.name == name) {
            Some(i) => cfg.servers[i] = s,
            None => cfg.servers.push(s),
        }
    }
}

/// Pi's `isMcpServerOverride`: no `command`, `url` or `type`.
fn is_override(o: &Map<String, Value>) -> bool {
    !o.contains_key("command") && !o.contains_key("url") && !o.contains_key("type")
}

fn is_string_map(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|m| m.values().all(|x| x.is_string()))
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Validates one `mcpServers` entry (Pi's `validateMcpServerConfig`, its wording). The result's
/// `source`/`scope` are the caller's to set (it says [`Scope::User`], no source).
pub fn validate(name: &str, raw: &Value) -> Result<ServerConfig, String> {
    if !valid_name(name) {
        return Err(format!(
            "invalid server name \"{name}\" (use letters, digits, \"_\" and \"-\")"
        ));
    }
    let Some(o) = raw.as_object() else {
        return Err(format!("server \"{name}\" must be an object"));
    };
    let field = |e: &str| format!("server \"{name}\": {e}");
    let enabled = match o.get("enabled") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(field("enabled must be a boolean")),
    };
    let description = match o.get("description") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(field("description must be a string")),
    };
    let timeout = match o.get("timeout") {
        None => DEFAULT_TIMEOUT_SECS,
        Some(v) => match v.as_f64() {
            Some(t) if t > 0.0 => t,
            _ => return Err(field("timeout must be a positive number of seconds")),
        },
    };
    let ty = o.get("type");
    let ty_str = ty.and_then(Value::as_str);
    if ty_str == Some("sse") {
        return Err(field(
            "legacy SSE transport is not supported; use the streamable HTTP URL",
        ));
    }
    let url = o.get("url").and_then(Value::as_str);
    let command = o.get("command").and_then(Value::as_str);
    let transport = if let (Some(url), true) = (
        url,
        ty.is_none() || matches!(ty_str, Some("http" | "streamable-http")),
    ) {
        let ok =
            reqwest::Url::parse(url).is_ok_and(|u| u.scheme() == "http" || u.scheme() == "https");
        if !ok {
            return Err(field("url must be an http or https URL"));
        }
        if o.get("headers").is_some_and(|h| !is_string_map(h)) {
            return Err(field("headers must map names to strings"));
        }
        if o.get("oauth").is_some_and(|v| !v.is_object()) {
            return Err(field("oauth must be an object"));
        }
        Transport::Http {
            url: url.to_string(),
            headers: string_map(o.get("headers")),
            oauth: o.contains_key("oauth"),
        }
    } else if let (Some(command), true) = (command, ty.is_none() || ty_str == Some("stdio")) {
        let args = match o.get("args") {
            None => Vec::new(),
            Some(Value::Array(a)) if a.iter().all(Value::is_string) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            Some(_) => return Err(field("args must be an array of strings")),
        };
        if o.get("env").is_some_and(|h| !is_string_map(h)) {
            return Err(field("env must map names to strings"));
        }
        let cwd = match o.get("cwd") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(field("cwd must be a string")),
        };
        Transport::Stdio {
            command: command.to_string(),
            args,
            env: string_map(o.get("env")),
            cwd,
        }
    } else {
        return Err(format!(
            "server \"{name}\" needs either \"command\" (stdio) or \"url\" (streamable HTTP)"
        ));
    };
    let exposures = "\"codemode\", \"deferred\", \"direct\", \"hidden\"";
    let exposure = match o.get("exposure") {
        None => Exposure::Codemode,
        Some(v) => match v.as_str().and_then(Exposure::parse) {
            Some(e) => e,
            None => return Err(field(&format!("exposure must be one of {exposures}"))),
        },
    };
    let tool_exposure = match o.get("toolExposure") {
        None => Vec::new(),
        Some(Value::Object(m)) => {
            let mut v = Vec::new();
            for (tool, e) in m {
                match e.as_str().and_then(Exposure::parse) {
                    Some(e) => v.push((tool.clone(), e)),
                    None => {
                        return Err(field(&format!(
                            "toolExposure \"{tool}\" must be one of {exposures}"
                        )))
                    }
                }
            }
            v
        }
        Some(_) => return Err(field("toolExposure must map tool names to exposures")),
    };
    Ok(ServerConfig {
        name: name.to_string(),
        transport,
        enabled,
        description,
        timeout,
        exposure,
        tool_exposure,
        source: None,
        scope: Scope::User,
        override_path: None,
    })
}

/// A change to a server entry saved to its file (Pi's `updateMcpServerConfig`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Patch {
    pub enabled: Option<bool>,
    pub exposure: Option<Exposure>,
}

/// Saves `patch` to the entry `name` of the `mcp.json` at `path`, keeping the rest of the file
/// and its indentation. With `as_override`, a missing entry is added as an override (`{}`).
/// An entry that defines a server drops default values (`enabled: true`, `exposure:
/// "codemode"`); an override keeps them (they replace the user entry's).
pub fn update(path: &Path, name: &str, patch: Patch, as_override: bool) -> Result<(), String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut parsed: Value = match &text {
        Some(t) => {
            serde_json::from_str(strip_bom(t)).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => Value::Object(Map::new()),
    };
    let bad = || {
        format!(
            "{}: expected an object with an \"mcpServers\" object",
            path.display()
        )
    };
    let root = parsed.as_object_mut().ok_or_else(bad)?;
    let servers = root
        .entry("mcpServers")
        .or_insert_with(|| Value::Object(Map::new()));
    let servers = servers.as_object_mut().ok_or_else(bad)?;
    if !servers.contains_key(name) && as_override {
        servers.insert(name.to_string(), Value::Object(Map::new()));
    }
    let Some(server) = servers.get_mut(name).and_then(Value::as_object_mut) else {
        return Err(format!(
            "{} does not define MCP server \"{name}\"",
            path.display()
        ));
    };
    let keep_defaults = is_override(server);
    if let Some(enabled) = patch.enabled {
        if enabled && !keep_defaults {
            server.remove("enabled");
        } else {
            server.insert("enabled".into(), Value::Bool(enabled));
        }
    }
    if let Some(e) = patch.exposure {
        if e == Exposure::Codemode && !keep_defaults {
            server.remove("exposure");
        } else {
            server.insert("exposure".into(), Value::String(e.as_str().into()));
        }
    }
    let indent = text
        .as_deref()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let ws: String = l.chars().take_while(|c| *c == ' ' || *c == '\t').collect();
                (!ws.is_empty() && l.len() > ws.len()).then_some(ws)
            })
        })
        .unwrap_or_else(|| "  ".into());
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    serde::Serialize::serialize(&parsed, &mut ser).map_err(|e| e.to_string())?;
    out.push(b'\n');
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, &out)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Resolves one `env` / `headers` value as Pi 1.6 does: `!command` runs the command (its
/// trimmed output; cached per command for the process's life); otherwise `$VAR` / `${VAR}`
/// are replaced by the variable, `$$` is `$` and `$!` is `!`. A missing variable or a failed
/// command is an error naming `what` (e.g. `MCP server "docs" env "TOKEN"`). Values from a
/// variable or command are registered as secrets ([`pi_ai::keys::register_secret`]) so logs
/// and the session never hold them.
pub fn resolve_value(spec: &str, what: &str) -> Result<String, String> {
    if let Some(cmd) = spec.strip_prefix('!') {
        return match pi_ai::keys::resolve_config_value(spec) {
            Some((v, _)) => {
                pi_ai::keys::register_secret(&v);
                Ok(v)
            }
            None => Err(format!(
                "Failed to resolve {what} from shell command: {cmd}"
            )),
        };
    }
    let mut out = String::new();
    let mut missing: Vec<String> = Vec::new();
    let mut from_env = false;
    let b = spec.as_bytes();
    let mut i = 0;
    let is_start = |c: u8| c.is_ascii_alphabetic() || c == b'_';
    let is_cont = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        let Some(off) = spec[i..].find('$') else {
            out.push_str(&spec[i..]);
            break;
        };
        out.push_str(&spec[i..i + off]);
        let d = i + off;
        let next = b.get(d + 1).copied();
        match next {
            Some(b'$') | Some(b'!') => {
                out.push(next.map(char::from).unwrap_or('$'));
                i = d + 2;
            }
            Some(b'{') => match spec[d + 2..].find('}') {
                None => {
                    out.push('$');
                    i = d + 1;
                }
                Some(e) => {
                    let name = &spec[d + 2..d + 2 + e];
                    let ok = !name.is_empty()
                        && is_start(name.as_bytes()[0])
                        && name.bytes().all(is_cont);
                    if ok {
                        from_env = true;
                        match std::env::var(name).ok().filter(|v| !v.is_empty()) {
                            Some(v) => out.push_str(&v),
                            None => {
                                if !missing.iter().any(|m| m == name) {
                                    missing.push(name.to_string());
                                }
                            }
                        }
                    } else {
                        out.push_str(&spec[d..d + 3 + e]);
                    }
                    i = d + 3 + e;
                }
            },
            Some(c) if is_start(c) => {
                let len = spec[d + 1..].bytes().take_while(|c| is_cont(*c)).count();
                let name = &spec[d + 1..d + 1 + len];
                from_env = true;
                match std::env::var(name).ok().filter(|v| !v.is_empty()) {
                    Some(v) => out.push_str(&v),
                    None => {
                        if !missing.iter().any(|m| m == name) {
                            missing.push(name.to_string());
                        }
                    }
                }
                i = d + 1 + len;
            }
            _ => {
                out.push('$');
                i = d + 1;
            }
        }
    }
    match missing.len() {
        0 => {
            if from_env {
                pi_ai::keys::register_secret(&out);
                if let Some(bare) = out.strip_prefix("Bearer ") {
                    pi_ai::keys::register_secret(bare);
                }
            }
            Ok(out)
        }
        1 => Err(format!(
            "Failed to resolve {what} from environment variable: {}",
            missing[0]
        )),
        _ => Err(format!(
            "Failed to resolve {what} from environment variables: {}",
            missing.join(", ")
        )),
    }
}

/// Whether MCP is switched off by settings: `"extensions": ["-builtin:mcp"]` (Pi's way to
/// disable the built-in MCP support).
pub fn disabled_by_settings(settings: &crate::settings::Settings) -> bool {
    settings
        .raw("extensions")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v.as_str() == Some("-builtin:mcp")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn write(p: &Path, v: &Value) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, serde_json::to_string_pretty(v).unwrap()).unwrap();
    }

    #[test]
    fn user_and_project_files_merge_as_pi() {
        let agent = tmp();
        let root = tmp();
        write(
            &agent.path().join("mcp.json"),
            &json!({"mcpServers": {
                "a": {"command": "a-bin", "args": ["x"], "env": {"K": "${SECRET}"}},
                "b": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
                "c": {"command": "c-bin"}
            }}),
        );
        let project = root.path().join(".pi/mcp.json");
        write(
            &project,
            &json!({"mcpServers": {
                "a": {"enabled": false, "exposure": "direct", "toolExposure": {"echo": "hidden"}},
                "b": {"command": "project-b"},
                "c": {"enabled": false, "env": {"X": "1"}},
                "d": {"enabled": false}
            }}),
        );
        let cfg = load(Some(agent.path()), root.path(), true);
        let a = cfg.server("a").unwrap();
        assert!(!a.enabled);
        assert_eq!(a.exposure, Exposure::Direct);
        assert_eq!(
            a.tool_exposure,
            vec![("echo".to_string(), Exposure::Hidden)]
        );
        assert_eq!(
            a.transport,
            Transport::Stdio {
                command: "a-bin".into(),
                args: vec!["x".into()],
                env: [("K".to_string(), "${SECRET}".to_string())].into(),
                cwd: None
            }
        );
        assert_eq!(
            a.source.as_deref(),
            Some(agent.path().join("mcp.json").as_path())
        );
        assert_eq!(a.override_path.as_deref(), Some(project.as_path()));
        assert_eq!(a.edit_path(), Some(project.as_path()));
        let b = cfg.server("b").unwrap();
        assert_eq!(b.scope, Scope::Project);
        assert!(matches!(&b.transport, Transport::Stdio { command, .. } if command == "project-b"));
        // `c`'s override sets a key an override may not: reported, the user entry stays.
        assert!(cfg.server("c").unwrap().enabled);
        let p = project.display();
        assert_eq!(
            cfg.errors,
            vec![
                format!("{p}: server \"c\": an override can only set enabled, exposure, toolExposure"),
                format!("{p}: server \"d\" needs \"command\" or \"url\", or a global server to override"),
            ]
        );
        // Untrusted: the project file is not read.
        let cfg = load(Some(agent.path()), root.path(), false);
        assert!(cfg.server("a").unwrap().enabled);
        assert!(cfg.errors.is_empty());
        assert_eq!(cfg.project_config, None);
    }

    #[test]
    fn invalid_entries_are_reported_and_skipped() {
        let agent = tmp();
        let f = agent.path().join("mcp.json");
        write(
            &f,
            &json!({"mcpServers": {
                "bad name": {"command": "x"},
                "sse": {"type": "sse", "url": "https://example.com/sse"},
                "neither": {"args": []},
                "args": {"command": "x", "args": "y"},
                "timeout": {"command": "x", "timeout": 0},
                "exp": {"command": "x", "exposure": "loud"},
                "texp": {"command": "x", "toolExposure": {"a": 1}},
                "url": {"url": "ftp://x"},
                "ok": {"url": "http://127.0.0.1:1/mcp", "exposure": "codemode-deferred", "timeout": 2.5},
                "o_k": {"command": "y"},
                "o-k": {"command": "z"}
            }}),
        );
        let cfg = load(Some(agent.path()), Path::new("/nonexistent"), false);
        let p = f.display();
        let names: Vec<&str> = cfg.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, vec!["ok", "o_k"]);
        assert_eq!(cfg.servers[0].exposure, Exposure::Codemode);
        assert_eq!(cfg.servers[0].timeout, 2.5);
        let mut errors = cfg.errors.clone();
        errors.sort();
        let mut want = vec![
            format!("{p}: invalid server name \"bad name\" (use letters, digits, \"_\" and \"-\")"),
            format!("{p}: server \"sse\": legacy SSE transport is not supported; use the streamable HTTP URL"),
            format!("{p}: server \"neither\" needs either \"command\" (stdio) or \"url\" (streamable HTTP)"),
            format!("{p}: server \"args\": args must be an array of strings"),
            format!("{p}: server \"timeout\": timeout must be a positive number of seconds"),
            format!("{p}: server \"exp\": exposure must be one of \"codemode\", \"deferred\", \"direct\", \"hidden\""),
            format!("{p}: server \"texp\": toolExposure \"a\" must be one of \"codemode\", \"deferred\", \"direct\", \"hidden\""),
            format!("{p}: server \"url\": url must be an http or https URL"),
            format!("{p}: server \"o-k\" conflicts with \"o_k\""),
        ];
        want.sort();
        assert_eq!(errors, want);
        // A file that is not JSON is one error.
        std::fs::write(&f, "{ nope").unwrap();
        let cfg = load(Some(agent.path()), Path::new("/nonexistent"), false);
        assert!(cfg.servers.is_empty());
        assert_eq!(cfg.errors.len(), 1);
        assert!(
            cfg.errors[0].starts_with(&format!("{p}: ")),
            "{:?}",
            cfg.errors
        );
    }

    #[test]
    fn tool_exposure_exact_wins_then_first_pattern() {
        let s = validate(
            "gh",
            &json!({"command": "x", "exposure": "deferred",
                "toolExposure": {"get_*": "codemode", "g*": "hidden", "get_me": "direct"}}),
        )
        .unwrap();
        assert_eq!(s.tool_exposure("get_me"), Exposure::Direct);
        assert_eq!(s.tool_exposure("get_issue"), Exposure::Codemode);
        assert_eq!(s.tool_exposure("gone"), Exposure::Hidden);
        assert_eq!(s.tool_exposure("search"), Exposure::Deferred);
        assert!(pattern_matches("*", ""));
        assert!(pattern_matches("a*b*c", "axxbyyc"));
        assert!(!pattern_matches("a*b*c", "acb"));
        assert!(!pattern_matches("ab*ba", "aba"));
    }

    #[test]
    fn values_resolve_like_pi() {
        std::env::set_var("PI_MCP_TEST_TOKEN", "tok-123456789");
        std::env::remove_var("PI_MCP_TEST_MISSING");
        assert_eq!(
            resolve_value("Bearer ${PI_MCP_TEST_TOKEN}", "x").unwrap(),
            "Bearer tok-123456789"
        );
        assert_eq!(
            resolve_value("$PI_MCP_TEST_TOKEN/a", "x").unwrap(),
            "tok-123456789/a"
        );
        assert_eq!(
            resolve_value("a$$b$!c ${not-a-name} $", "x").unwrap(),
            "a$b!c ${not-a-name} $"
        );
        assert_eq!(resolve_value("!echo hi there", "x").unwrap(), "hi there");
        assert_eq!(
            resolve_value("${PI_MCP_TEST_MISSING}", "MCP server \"a\" env \"K\"").unwrap_err(),
            "Failed to resolve MCP server \"a\" env \"K\" from environment variable: PI_MCP_TEST_MISSING"
        );
        assert_eq!(
            resolve_value("!exit 3", "MCP server \"a\" env \"K\"").unwrap_err(),
            "Failed to resolve MCP server \"a\" env \"K\" from shell command: exit 3"
        );
        assert!(pi_ai::keys::is_secret("tok-123456789"));
    }

    #[test]
    fn update_saves_to_the_file_keeping_the_rest() {
        let d = tmp();
        let f = d.path().join("mcp.json");
        std::fs::write(
            &f,
            "{\n    \"other\": 1,\n    \"mcpServers\": {\n        \"a\": {\"command\": \"x\", \"enabled\": false}\n    }\n}\n",
        )
        .unwrap();
        update(
            &f,
            "a",
            Patch {
                enabled: Some(true),
                exposure: Some(Exposure::Direct),
            },
            false,
        )
        .unwrap();
        assert_eq!(
            std::fs::read_to_string(&f).unwrap(),
            "{\n    \"other\": 1,\n    \"mcpServers\": {\n        \"a\": {\n            \"command\": \"x\",\n            \"exposure\": \"direct\"\n        }\n    }\n}\n"
        );
        let p = d.path().join("proj/mcp.json");
        update(
            &p,
            "a",
            Patch {
                enabled: Some(true),
                exposure: None,
            },
            true,
        )
        .unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&std::fs::read_to_string(&p).unwrap()).unwrap(),
            json!({"mcpServers": {"a": {"enabled": true}}})
        );
        assert_eq!(
            update(&f, "zzz", Patch::default(), false).unwrap_err(),
            format!("{} does not define MCP server \"zzz\"", f.display())
        );
    }
}
