//! Project trust as Pi 1.6 keeps it (`docs/security.md` "Understand project trust",
//! `core/trust-manager.js`, `core/project-trust.js`), shared with Pi: a folder the user
//! trusted or refused in Pi is trusted or refused here.
//!
//! - The store is `<agent dir>/trust.json`: an object whose keys are canonical folder paths and
//!   whose values are `true` (trusted), `false` (refused) or `null` (no decision). The nearest
//!   decision applies: the folder's own, else its parent's, up to the root.
//! - A front door's own answer comes first (`pi-lsp run --approve` / `--no-approve`, the
//!   editor's `workspaceTrusted`, `pi-lsp acp --trust`), then the store's nearest decision,
//!   then the global setting `defaultProjectTrust` (`"always"` trusts; `"ask"`, the default,
//!   and `"never"` do not: nobody can be asked here, as in Pi's print and RPC modes).
//! - One difference: Pi trusts a folder without a decision when it holds nothing trust
//!   protects (its `hasTrustRequiringProjectResources`). Here trust also lets a user save
//!   workspace-wide approval rules into `.pi/settings.json`, which is protected, so such a
//!   folder follows `defaultProjectTrust` like any other (else the rules saved would be
//!   ignored at the next start).
//!
//! What trust gates here: [`crate::resources`] (project settings, models.json, `SYSTEM.md`,
//! `APPEND_SYSTEM.md`, skills, prompt templates) and the project's `.pi/mcp.json`
//! ([`crate::mcp`]). pi-lsp never writes the store: deciding is Pi's `/trust`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::platform::paths::{canonicalize, same_path};
use crate::settings::SettingsCache;
use crate::settings::SettingsFiles;

/// The trust store's file in `agent_dir` (`trust.json`).
pub fn trust_file(agent_dir: &Path) -> PathBuf {
    agent_dir.join("trust.json")
}

/// The real path of `p` (unchanged when it does not exist).
fn real(p: &Path) -> PathBuf {
    canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Reads the store at `path`: `Ok(None)` when there is none; an error (Pi's wording) when it
/// is not JSON, not an object, or holds a value other than `true` / `false` / `null`.
fn read_store(path: &Path) -> Result<Option<serde_json::Map<String, Value>>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "Failed to read trust store {}: {e}",
                path.display()
            ))
        }
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let parsed: Value = serde_json::from_str(text)
        .map_err(|e| format!("Failed to read trust store {}: {e}", path.display()))?;
    let Value::Object(map) = parsed else {
        return Err(format!(
            "Invalid trust store {}: expected an object",
            path.display()
        ));
    };
    if let Some((k, _)) = map.iter().find(|(_, v)| !v.is_boolean() && !v.is_null()) {
        return Err(format!(
            "Invalid trust store {}: value for {} must be true, false, or null",
            path.display(),
            Value::String(k.clone())
        ));
    }
    Ok(Some(map))
}

/// The nearest decision the store at `agent_dir` holds for `cwd` (Pi's
/// `ProjectTrustStore.get`): the folder's own, else the closest ancestor's; `Ok(None)` when
/// none applies. Errors as [`read_store`].
pub fn stored_decision(agent_dir: &Path, cwd: &Path) -> Result<Option<bool>, String> {
    let Some(map) = read_store(&trust_file(agent_dir))? else {
        return Ok(None);
    };
    let cwd = real(cwd);
    for dir in cwd.ancestors() {
        let found = map
            .iter()
            .filter(|(k, _)| same_path(Path::new(k), dir))
            .find_map(|(_, v)| v.as_bool());
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

/// Pi's global `defaultProjectTrust` (from the agent dir's `settings.json` only): `"always"`,
/// `"never"`, or `"ask"` (the default, and for any other value).
pub fn default_project_trust(agent_dir: &Path) -> &'static str {
    // The agent dir's settings alone: an untrusted view reads no project file.
    let settings = SettingsCache::new(SettingsFiles::new(Some(agent_dir), Path::new("/"), false));
    match settings
        .get()
        .raw("defaultProjectTrust")
        .and_then(Value::as_str)
    {
        Some("always") => "always",
        Some("never") => "never",
        _ => "ask",
    }
}

/// Where a trust decision came from (for logs and notices).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustSource {
    /// The front door's own answer (a flag, the editor's workspace trust).
    FrontDoor,
    /// Pi's trust store (`trust.json`).
    Store,
    /// The global `defaultProjectTrust` setting.
    Default,
}

/// A folder's project trust and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustDecision {
    pub trusted: bool,
    pub source: TrustSource,
    /// A store that could not be read (the decision then ignores it), to tell the user.
    pub warning: Option<String>,
}

/// Pi 1.6's `resolveProjectTrusted` without a prompt (its print / RPC modes): `front_door`
/// (a flag or the editor's trust) first, else the store's nearest decision, else
/// `defaultProjectTrust` (`always` only; see the module for the one difference from Pi).
/// `agent_dir` `None`: no store and no global setting.
pub fn resolve_project_trust(
    cwd: &Path,
    agent_dir: Option<&Path>,
    front_door: Option<bool>,
) -> TrustDecision {
    let decide = |trusted, source| TrustDecision {
        trusted,
        source,
        warning: None,
    };
    if let Some(t) = front_door {
        return decide(t, TrustSource::FrontDoor);
    }
    let (stored, warning) = match agent_dir.map(|a| stored_decision(a, cwd)) {
        None | Some(Ok(None)) => (None, None),
        Some(Ok(Some(d))) => (Some(d), None),
        Some(Err(e)) => (None, Some(e)),
    };
    let mut d = match stored {
        Some(t) => decide(t, TrustSource::Store),
        None => decide(
            agent_dir.is_some_and(|a| default_project_trust(a) == "always"),
            TrustSource::Default,
        ),
    };
    d.warning = warning;
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_decision_resources_and_default_as_pi() {
        let tmp = tempfile::tempdir().unwrap();
        let root = real(tmp.path());
        let agent = root.join("agent");
        let parent = root.join("work");
        let child = parent.join("proj");
        let refused = parent.join("refused");
        std::fs::create_dir_all(child.join(".pi")).unwrap();
        std::fs::create_dir_all(refused.join(".pi")).unwrap();
        std::fs::create_dir_all(&agent).unwrap();
        let resolve = |dir: &Path, fd| resolve_project_trust(dir, Some(&agent), fd);
        // No decision, default "ask": not trusted.
        assert_eq!(
            (resolve(&child, None).trusted, resolve(&child, None).source),
            (false, TrustSource::Default)
        );
        std::fs::write(
            agent.join("settings.json"),
            r#"{"defaultProjectTrust":"always"}"#,
        )
        .unwrap();
        assert!(resolve(&child, None).trusted);
        // The parent trusted, a sibling refused: the nearest decision wins over the default.
        std::fs::write(
            trust_file(&agent),
            serde_json::json!({
                parent.display().to_string(): true,
                refused.display().to_string(): false,
                child.display().to_string(): null,
            })
            .to_string(),
        )
        .unwrap();
        std::fs::write(
            agent.join("settings.json"),
            r#"{"defaultProjectTrust":"never"}"#,
        )
        .unwrap();
        assert_eq!(
            (resolve(&child, None).trusted, resolve(&child, None).source),
            (true, TrustSource::Store)
        );
        assert_eq!(
            (
                resolve(&refused, None).trusted,
                resolve(&refused, None).source
            ),
            (false, TrustSource::Store)
        );
        // A front door's answer wins.
        assert_eq!(
            resolve(&refused, Some(true)),
            TrustDecision {
                trusted: true,
                source: TrustSource::FrontDoor,
                warning: None
            }
        );
        // A broken store: said, and ignored (the default decides).
        std::fs::write(trust_file(&agent), r#"{"/x": "yes"}"#).unwrap();
        let d = resolve(&child, None);
        assert_eq!((d.trusted, d.source), (false, TrustSource::Default));
        assert_eq!(
            d.warning.as_deref(),
            Some(
                format!(
                    "Invalid trust store {}: value for \"/x\" must be true, false, or null",
                    trust_file(&agent).display()
                )
                .as_str()
            )
        );
    }
}
