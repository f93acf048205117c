//! The MCP servers the user configured for VS Code (docs/mcp.md "VS Code servers"): the
//! workspace's `.vscode/mcp.json` and the user's VS Code `mcp.json`, both VS Code's shape
//! `{"servers": {"<name>": {type, command, args, env, cwd, url, headers}}, "inputs": […]}`,
//! offered when `vscodeMcpServers` is on (settings.json, or the editor's
//! `initializationOptions.vscodeMcpServers`, which wins).
//!
//! Each entry becomes a Pi `mcp.json` entry before [`super::config::validate`]:
//! `${env:NAME}` in `env` / `headers` values becomes Pi's `${NAME}` (resolved when the server
//! connects, kept secret), elsewhere it is the variable's value (empty when unset, as VS Code);
//! `${workspaceFolder}` and `${userHome}` are paths; `${input:…}` (a prompt to the VS Code user)
//! and any other variable report the entry, which is skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parking_lot::RwLock;
use serde_json::{Map, Value};

use super::config::{McpConfig, Scope};

/// What the editor said about VS Code's servers (`initializationOptions.vscodeMcpServers` and
/// `.vscodeMcpUserConfig`); `None` fields fall back to settings.json's keys of the same name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VscodeOptions {
    /// `vscodeMcpServers`.
    pub enabled: Option<bool>,
    /// `vscodeMcpUserConfig`: the user's VS Code `mcp.json`.
    pub user_config: Option<PathBuf>,
}

static OPTIONS: RwLock<VscodeOptions> = RwLock::new(VscodeOptions {
    enabled: None,
    user_config: None,
});

/// Sets the editor's options for this process (the LSP server's `initialize`).
pub fn set_options(o: VscodeOptions) {
    *OPTIONS.write() = o;
}

/// The VS Code files to read for a workspace with `settings`, or `None` when the feature is
/// off (the default).
pub fn files(settings: &crate::settings::Settings) -> Option<VscodeFiles> {
    let o = OPTIONS.read().clone();
    let enabled = o.enabled.unwrap_or_else(|| {
        settings
            .raw("vscodeMcpServers")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    });
    enabled.then(|| VscodeFiles {
        user: o.user_config.or_else(|| {
            settings
                .raw("vscodeMcpUserConfig")
                .and_then(Value::as_str)
                .map(PathBuf::from)
        }),
    })
}

/// VS Code's files to read (the workspace's `.vscode/mcp.json` is implied, trusted only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct VscodeFiles {
    /// The user's VS Code `mcp.json`.
    pub user: Option<PathBuf>,
}

/// Reads the VS Code file `path` (`scope` `VscodeUser` or `VscodeWorkspace`) into `cfg` (a
/// later entry of the same name replaces an earlier one) and its converted entries into
/// `raw` (for Pi files' overrides). A missing file is nothing; errors are reported as Pi's are,
/// prefixed with the file.
pub(crate) fn read(
    path: &Path,
    scope: Scope,
    root: &Path,
    cfg: &mut McpConfig,
    raw: &mut BTreeMap<String, Value>,
) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let shown = path.display();
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    // VS Code's files are JSON with comments and trailing commas.
    let parsed: Value = match jsonc_parser::parse_to_serde_value::<Value>(text, &Default::default())
    {
        Ok(v) => v,
        Err(e) => {
            cfg.errors.push(format!("{shown}: {e}"));
            return;
        }
    };
    let servers = match parsed.as_object().map(|o| o.get("servers")) {
        Some(None) => return,
        Some(Some(Value::Object(m))) => m.clone(),
        _ => {
            cfg.errors.push(format!(
                "{shown}: expected an object with a \"servers\" object"
            ));
            return;
        }
    };
    for (name, value) in servers {
        let converted = convert(&name, &value, root);
        let mut s = match converted.and_then(|v| super::config::validate(&name, &v).map(|s| (s, v)))
        {
            Ok((s, v)) => {
                raw.insert(name.clone(), v);
                s
            }
            Err(e) => {
                cfg.errors.push(format!("{shown}: {e}"));
                continue;
            }
        };
        s.source = Some(path.to_path_buf());
        s.scope = scope;
        match cfg.servers.iter().position(|o| o.name == name) {
            Some(i) => cfg.servers[i] = s,
            None => cfg.servers.push(s),
        }
    }
}

/// One VS Code entry as a Pi entry (see the module docs).
fn convert(name: &str, v: &Value, root: &Path) -> Result<Value, String> {
    let Some(o) = v.as_object() else {
        return Err(format!("server \"{name}\" must be an object"));
    };
    if o.contains_key("envFile") {
        return Err(format!(
            "server \"{name}\": envFile is not supported; put the variables in env"
        ));
    }
    let plain = |s: &str| substitute(name, s, root, false);
    let template = |s: &str| substitute(name, s, root, true);
    let mut out = Map::new();
    for (k, val) in o {
        let converted = match (k.as_str(), val) {
            ("type", v) => v.clone(),
            ("command" | "cwd" | "url", Value::String(s)) => Value::String(plain(s)?),
            ("args", Value::Array(a)) => Value::Array(
                a.iter()
                    .map(|x| match x {
                        Value::String(s) => plain(s).map(Value::String),
                        other => Ok(other.clone()),
                    })
                    .collect::<Result<_, _>>()?,
            ),
            ("env" | "headers", Value::Object(m)) => {
                let mut mm = Map::new();
                for (mk, mv) in m {
                    let mv = match mv {
                        Value::String(s) => Value::String(template(s)?),
                        // VS Code accepts numbers and null in `env`.
                        Value::Number(n) => Value::String(n.to_string()),
                        Value::Null => continue,
                        other => other.clone(),
                    };
                    mm.insert(mk.clone(), mv);
                }
                Value::Object(mm)
            }
            ("command" | "cwd" | "url" | "args" | "env" | "headers", other) => other.clone(),
            // VS Code's own keys (`dev`, `gallery`, `version`, …) mean nothing here.
            _ => continue,
        };
        out.insert(k.clone(), converted);
    }
    Ok(Value::Object(out))
}

/// Replaces VS Code's `${…}` variables in `s`. In a `template` (an `env` / `headers` value,
/// resolved later by [`super::config::resolve_value`]) literal `$` becomes `$$`, a leading `!`
/// `$!`, and `${env:NAME}` stays a variable (`${NAME}`).
fn substitute(server: &str, s: &str, root: &Path, template: bool) -> Result<String, String> {
    let escape = |t: &str| {
        if template {
            t.replace('$', "$$")
        } else {
            t.to_string()
        }
    };
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&escape(&rest[..i]));
        let Some(end) = rest[i..].find('}') else {
            out.push_str(&escape(&rest[i..]));
            rest = "";
            break;
        };
        let var = &rest[i + 2..i + end];
        rest = &rest[i + end + 1..];
        if let Some(env) = var.strip_prefix("env:") {
            if template {
                out.push_str(&format!("${{{env}}}"));
            } else {
                out.push_str(&std::env::var(env).unwrap_or_default());
            }
        } else if var == "workspaceFolder" {
            out.push_str(&escape(&root.display().to_string()));
        } else if var == "userHome" {
            let home = std::env::var("HOME").unwrap_or_default();
            out.push_str(&escape(&home));
        } else if var.starts_with("input:") {
            return Err(format!(
                "server \"{server}\": ${{{var}}} asks VS Code for a value, which pi-lsp cannot do; put the value in an environment variable and write ${{env:NAME}}"
            ));
        } else {
            return Err(format!(
                "server \"{server}\": ${{{var}}} is not supported (use ${{env:NAME}}, ${{workspaceFolder}} or ${{userHome}})"
            ));
        }
    }
    out.push_str(&escape(rest));
    if template && out.starts_with('!') {
        out.insert(0, '$');
    }
    Ok(out)
}

/// Pi's [`super::config::load`] with VS Code's servers first when `vscode` is given (the
/// user's VS Code `mcp.json`, then, when `trusted`, `<root>/.vscode/mcp.json`; Pi's files then
/// replace or override entries of the same name).
pub fn load_all(
    agent_dir: Option<&Path>,
    root: &Path,
    trusted: bool,
    vscode: Option<&VscodeFiles>,
) -> McpConfig {
    let mut cfg = McpConfig::default();
    let mut raw: BTreeMap<String, Value> = BTreeMap::new();
    if let Some(v) = vscode {
        if let Some(user) = &v.user {
            read(user, Scope::VscodeUser, root, &mut cfg, &mut raw);
        }
        if trusted {
            let p = root.join(".vscode").join("mcp.json");
            read(&p, Scope::VscodeWorkspace, root, &mut cfg, &mut raw);
        }
        let project = trusted.then(|| root.join(".pi").join("mcp.json"));
        let user = agent_dir.map(|a| a.join("mcp.json"));
        for s in &mut cfg.servers {
            s.override_path = match s.scope {
                Scope::VscodeWorkspace => project.clone().or_else(|| user.clone()),
                _ => user.clone().or_else(|| project.clone()),
            };
        }
    }
    super::config::load_pi_files(agent_dir, root, trusted, &mut cfg, &mut raw);
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_convert_to_pi_entries() {
        let root = Path::new("/w/p");
        let v = json!({"type": "stdio", "command": "${workspaceFolder}/bin/srv", "args": ["--x", "${env:PI_VSCODE_TEST_UNSET_VAR}"],
            "env": {"TOKEN": "${env:MY_TOKEN}", "LIT": "a$b", "CMD": "!not-a-command"}, "gallery": true});
        assert_eq!(
            convert("s", &v, root).unwrap(),
            json!({"type": "stdio", "command": "/w/p/bin/srv", "args": ["--x", ""],
                "env": {"TOKEN": "${MY_TOKEN}", "LIT": "a$$b", "CMD": "$!not-a-command"}})
        );
        let h = json!({"type": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer ${input:api-key}"}});
        assert_eq!(
            convert("gh", &h, root).unwrap_err(),
            "server \"gh\": ${input:api-key} asks VS Code for a value, which pi-lsp cannot do; put the value in an environment variable and write ${env:NAME}"
        );
        assert_eq!(
            convert("x", &json!({"command": "${config:foo}"}), root).unwrap_err(),
            "server \"x\": ${config:foo} is not supported (use ${env:NAME}, ${workspaceFolder} or ${userHome})"
        );
        assert_eq!(
            convert("y", &json!({"command": "c", "envFile": ".env"}), root).unwrap_err(),
            "server \"y\": envFile is not supported; put the variables in env"
        );
    }
}
