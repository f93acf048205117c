//! Prompt templates (Pi `docs/prompt-templates.md`, `core/prompt-templates.js`): Markdown
//! files whose name is a command. `/name args` expands to the file's body with `$1`, `$2`, …,
//! `$@` / `$ARGUMENTS` (all arguments joined by spaces), `${@:N}` and `${@:N:L}` substituted.
//!
//! Discovery (as Pi's package manager orders it; the first template of a name wins): the
//! project's `prompts` settings entries, then `<workspace>/.pi/prompts/*.md` (trusted
//! workspaces only), then the global settings entries, then `<agent dir>/prompts/*.md`. The
//! `prompts/` folders are read without recursion; a folder named in settings is read
//! recursively; dot entries and `node_modules` are skipped.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::frontmatter::{parse_frontmatter, Scope};

/// One prompt template.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptTemplate {
    /// The command name: the file name without `.md` (`review.md` → `/review`).
    pub name: String,
    /// Frontmatter `description`, else the first non-empty body line cut to 60 characters
    /// (plus `...`).
    pub description: String,
    /// Frontmatter `argument-hint`, e.g. `<PR-URL>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argument_hint: Option<String>,
    /// The body after the frontmatter (trimmed), before substitution.
    pub content: String,
    /// The file it came from.
    pub file_path: PathBuf,
    /// Whose it is: user (global), project, or a settings path.
    pub scope: Scope,
}

/// Reads one template file; `None` when unreadable.
pub fn load_template(path: &Path, scope: Scope) -> Option<PromptTemplate> {
    let raw = std::fs::read_to_string(path).ok()?;
    let (fm, body) = parse_frontmatter(&raw);
    let name = path.file_name()?.to_string_lossy();
    let name = name.strip_suffix(".md").unwrap_or(&name).to_string();
    let mut description = fm
        .get("description")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string();
    if description.is_empty() {
        if let Some(first) = body.split('\n').find(|l| !l.trim().is_empty()) {
            // Pi slices 60 UTF-16 units; counting characters keeps the cut on a boundary.
            description = first.chars().take(60).collect();
            if first.encode_utf16().count() > 60 {
                description.push_str("...");
            }
        }
    }
    let argument_hint = fm
        .get("argument-hint")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    Some(PromptTemplate {
        name,
        description,
        argument_hint,
        content: body,
        file_path: path.to_path_buf(),
        scope,
    })
}

/// Splits an argument string as Pi's `parseCommandArgs`: spaces and tabs separate, `"…"` and
/// `'…'` group (quotes removed), no escapes.
pub fn parse_command_args(s: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    for c in s.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == ' ' || c == '\t' => {
                if !cur.is_empty() {
                    args.push(std::mem::take(&mut cur));
                }
            }
            None => cur.push(c),
        }
    }
    if !cur.is_empty() {
        args.push(cur);
    }
    args
}

/// Pi's `substituteArgs`: `$N` first, then `${@:N}` / `${@:N:L}`, then `$ARGUMENTS`, then `$@`;
/// each pass works on the template text only, so `$1` inside an argument is not substituted
/// again by a later placeholder of the same pass (later passes do see earlier replacements, as
/// in Pi).
pub fn substitute_args(content: &str, args: &[String]) -> String {
    let positional = replace_all(content, |rest| {
        let digits: String = rest
            .strip_prefix('$')?
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        if digits.is_empty() {
            return None;
        }
        // A number too large to index gives "" as Pi's `args[huge]` does.
        let value = digits
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| args.get(i))
            .cloned()
            .unwrap_or_default();
        Some((1 + digits.len(), value))
    });
    let sliced = replace_all(&positional, |rest| {
        let inner = rest.strip_prefix("${@:")?;
        let end = inner.find('}')?;
        let spec = &inner[..end];
        let (start, len) = match spec.split_once(':') {
            Some((s, l)) => (s, Some(l)),
            None => (spec, None),
        };
        let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
        if !digits(start) || len.is_some_and(|l| !digits(l)) {
            return None;
        }
        let start = start
            .parse::<usize>()
            .unwrap_or(usize::MAX)
            .saturating_sub(1);
        let tail = args.get(start..).unwrap_or(&[]);
        let picked = match len {
            Some(l) => &tail[..l.parse::<usize>().unwrap_or(usize::MAX).min(tail.len())],
            None => tail,
        };
        Some((4 + end + 1, picked.join(" ")))
    });
    let all = args.join(" ");
    sliced.replace("$ARGUMENTS", &all).replace("$@", &all)
}

/// Rewrites `s` left to right: at each position `matcher` may claim `n` bytes and give their
/// replacement.
fn replace_all(s: &str, matcher: impl Fn(&str) -> Option<(usize, String)>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        if rest.starts_with('$') {
            if let Some((n, value)) = matcher(rest) {
                out.push_str(&value);
                i += n;
                continue;
            }
        }
        let c = rest.chars().next().map_or(1, char::len_utf8);
        out.push_str(&rest[..c]);
        i += c;
    }
    out
}

/// Pi's `expandPromptTemplate`: `/name args` with a known `name` becomes the template's body
/// with the arguments substituted; any other text is returned unchanged.
pub fn expand_template(text: &str, templates: &[PromptTemplate]) -> Option<String> {
    let rest = text.strip_prefix('/')?;
    let (name, args) = match rest.find(' ') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    let t = templates.iter().find(|t| t.name == name)?;
    Some(substitute_args(&t.content, &parse_command_args(args)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_quoted_arguments_as_pi() {
        assert_eq!(
            parse_command_args(r#"Button "onClick handler"  'a "b"' x"y z""#),
            args(&["Button", "onClick handler", "a \"b\"", "xy z"])
        );
        assert!(parse_command_args("  \t ").is_empty());
    }

    #[test]
    fn substitutes_like_pi() {
        let a = args(&["one", "two", "three", "$1"]);
        assert_eq!(
            substitute_args("$1|$2|$9|$@|$ARGUMENTS|${@:2}|${@:2:1}|${@:0}|${@:x}|$", &a),
            "one|two||one two three $1|one two three $1|two three $1|two|one two three $1|${@:x}|$"
        );
        assert_eq!(substitute_args("$10 $1€", &args(&["é"])), " é€");
    }

    #[test]
    fn expands_known_names_only() {
        let t = PromptTemplate {
            name: "component".into(),
            description: String::new(),
            argument_hint: None,
            content: "Create $1 with: $@".into(),
            file_path: PathBuf::from("/p/component.md"),
            scope: Scope::User,
        };
        let ts = vec![t];
        assert_eq!(
            expand_template(r#"/component Button "click handler""#, &ts).as_deref(),
            Some("Create Button with: Button click handler")
        );
        assert_eq!(
            expand_template("/component", &ts).as_deref(),
            Some("Create  with: ")
        );
        assert_eq!(expand_template("/other x", &ts), None);
        assert_eq!(expand_template("component x", &ts), None);
    }
}
