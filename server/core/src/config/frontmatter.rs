//! Pi-style Markdown frontmatter and whose a skill or template is. A leaf: skills, templates
//! and resources read it without depending on each other.

use serde::Serialize;
use serde_json::{Map, Value};

/// Whose a skill or template is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The user's global agent dir (or `~/.agents/skills`).
    User,
    /// The workspace (trusted workspaces only).
    Project,
    /// A path named in a settings file.
    Path,
}

/// Splits Pi-style YAML frontmatter (`---\n…\n---`) from a Markdown file, as Pi's
/// `parseFrontmatter`: line ends normalised to `\n`; the frontmatter parsed as YAML into JSON
/// (a mapping; anything else, or invalid YAML, gives an empty map); the body after it trimmed.
/// Without frontmatter the whole (normalised) text is the body, untrimmed.
pub fn parse_frontmatter(content: &str) -> (Map<String, Value>, String) {
    let normalized = content.replace("\r\n", "\n").replace('\r', "\n");
    if !normalized.starts_with("---") {
        return (Map::new(), normalized);
    }
    let Some(end) = normalized
        .get(3..)
        .and_then(|s| s.find("\n---"))
        .map(|i| i + 3)
    else {
        return (Map::new(), normalized);
    };
    let yaml = normalized.get(4..end).unwrap_or("");
    let body = normalized.get(end + 4..).unwrap_or("").trim().to_string();
    let fm = match serde_yaml_ng::from_str::<Value>(yaml) {
        Ok(Value::Object(m)) => m,
        Ok(_) => Map::new(),
        Err(e) => {
            tracing::warn!("invalid frontmatter: {e}");
            Map::new()
        }
    };
    (fm, body)
}
