//! Tool-call approval: which calls need the user's permission (the `approvalPolicy` setting,
//! per session overridable), the rules the user's "allow always" answers leave behind (per
//! session, or per workspace in `.pi/settings.json`), and the question itself.
//!
//! The loop asks [`Gate::check_call`] for every call after its before hook and before the abort
//! check (see [`crate::agent`]). Tools of kind [`ToolKind::Edit`] (`edit`, `write`) are not
//! asked there: they compute their proposed change first and call [`Gate::approve_change`]
//! with the diff and the hashes of the old and the proposed full text; after an approval they
//! re-read the file and apply only when its hash still equals the approved old hash (what was
//! approved is what lands).
//!
//! | policy        | read, grep, find, ls | edit, write | bash and other tools |
//! |---------------|----------------------|-------------|-----------------------|
//! | `ask`         | asks                 | asks (diff) | asks                  |
//! | `auto-edit`   | runs                 | runs        | asks                  |
//! | `approve-all` | runs                 | runs        | runs                  |
//!
//! The bash sandbox's escalation question ([`crate::sandbox::Approver`]) is separate: it asks
//! under every policy. A call covered by a rule runs without asking. Rules: a tool name (every
//! call of the tool), or for `bash` a command prefix of whole words (the first word, plus the
//! second when it looks like a subcommand: `cargo test`, `git status`, `ls`); a command holding
//! shell control characters (`;`, `&`, `|`, `<`, `>`, `` ` ``, `$(`, newlines) is never covered
//! by a rule and offers none. Hashes are XXH3-64 of the UTF-8 text, written `xxh3:<16 hex>`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use crate::config::types::{ApprovalPolicy, ToolKind};

/// The policy of an editor session when no setting names one: file edits apply (they land in
/// the editor's buffers, where the user reviews and undoes them like any change), commands and
/// other tools ask (their effects cannot be undone) — what VS Code's, Cursor's and Zed's agents
/// do by default.
pub const EDITOR_DEFAULT: ApprovalPolicy = ApprovalPolicy::AutoEdit;

/// The policy of `pi-lsp run` when no setting names one: nothing asks, as Pi's print mode
/// (nobody could answer); the bash sandbox still applies.
pub const HEADLESS_DEFAULT: ApprovalPolicy = ApprovalPolicy::ApproveAll;

/// Settings key of the workspace's "allow always" rules: `{"approvals": {"tools": ["edit"],
/// "bash": ["cargo test"]}}`.
pub const SETTINGS_KEY: &str = "approvals";

/// True when `policy` asks before a call of `kind`.
pub fn policy_asks(policy: ApprovalPolicy, kind: ToolKind) -> bool {
    match policy {
        ApprovalPolicy::Ask => true,
        ApprovalPolicy::AutoEdit => kind == ToolKind::Execute,
        ApprovalPolicy::ApproveAll => false,
    }
}

/// The hash of a file's full text sent with an edit question: `xxh3:` and 16 hex digits of
/// XXH3-64 over the UTF-8 bytes.
pub fn content_hash(text: &str) -> String {
    format!("xxh3:{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// What an "allow always" answer remembers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ts", derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// The tool, e.g. `edit` or `bash`.
    pub tool: String,
    /// For `bash`: the command prefix (whole words) the rule allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_prefix: Option<String>,
}

const SHELL_CONTROL: &[&str] = &[";", "&", "|", "<", ">", "`", "$(", "\n", "\r"];

fn command_of(args: &Value) -> Option<&str> {
    args.get("command").and_then(Value::as_str)
}

fn plain_command(c: &str) -> bool {
    !SHELL_CONTROL.iter().any(|m| c.contains(m))
}

impl Rule {
    /// The rule an "allow always" answer to this call would leave; `None` when no rule can
    /// cover it (a bash command with shell control characters or no words).
    pub fn for_call(tool: &str, args: &Value) -> Option<Rule> {
        if tool != "bash" {
            return Some(Rule {
                tool: tool.to_string(),
                command_prefix: None,
            });
        }
        let c = command_of(args)?;
        if !plain_command(c) {
            return None;
        }
        let mut words = c.split_whitespace();
        let first = words.next()?;
        let mut prefix = first.to_string();
        if let Some(second) = words.next() {
            let sub = second.starts_with(|ch: char| ch.is_ascii_lowercase())
                && second
                    .chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '-');
            if sub {
                prefix.push(' ');
                prefix.push_str(second);
            }
        }
        Some(Rule {
            tool: "bash".into(),
            command_prefix: Some(prefix),
        })
    }

    /// True when this rule allows a call of `tool` with `args` without asking.
    pub fn covers(&self, tool: &str, args: &Value) -> bool {
        if self.tool != tool {
            return false;
        }
        let Some(prefix) = &self.command_prefix else {
            return tool != "bash";
        };
        let Some(c) = command_of(args) else {
            return false;
        };
        if !plain_command(c) {
            return false;
        }
        let want: Vec<&str> = prefix.split_whitespace().collect();
        let have: Vec<&str> = c.split_whitespace().take(want.len()).collect();
        !want.is_empty() && want == have
    }
}

/// Rules of a settings object's `approvals` key (`tools`: names, `bash`: command prefixes);
/// entries of the wrong type are skipped.
pub fn rules_from_settings(merged: &serde_json::Map<String, Value>) -> Vec<Rule> {
    let mut out = Vec::new();
    let Some(a) = merged.get(SETTINGS_KEY) else {
        return out;
    };
    let strings = |k: &str| -> Vec<String> {
        a.get(k)
            .and_then(Value::as_array)
            .map(|v| {
                v.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    for t in strings("tools") {
        if t != "bash" {
            out.push(Rule {
                tool: t,
                command_prefix: None,
            });
        }
    }
    for p in strings("bash") {
        if !p.trim().is_empty() {
            out.push(Rule {
                tool: "bash".into(),
                command_prefix: Some(p.split_whitespace().collect::<Vec<_>>().join(" ")),
            });
        }
    }
    out
}

/// A file change proposed by `edit` / `write`, shown to the user before it is applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProposedChange {
    /// The file as the tools show it (relative to the workspace when inside it).
    pub path: String,
    /// Unified diff of the old and the proposed text.
    pub diff: String,
    /// [`content_hash`] of the current full text; `None` for a file that does not exist yet.
    pub old_hash: Option<String>,
    /// [`content_hash`] of the proposed full text.
    pub new_hash: String,
}

/// Where an "allow always" answer is remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Scope {
    /// For the rest of this session (in memory).
    Session,
    /// In the project's `.pi/settings.json` (trusted workspaces only).
    Workspace,
}

/// One question to the user.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// The tool, e.g. `bash`.
    pub tool: String,
    /// The model's tool call id.
    pub tool_call_id: String,
    /// The call's validated arguments.
    pub arguments: Value,
    /// Why the user is asked, e.g. `approvalPolicy "auto-edit": bash asks`.
    pub reason: String,
    /// What "allow always" would remember; `None`: only once or reject.
    pub rule: Option<Rule>,
    /// The scopes "allow always" may name (empty without a rule; `workspace` only in a
    /// trusted workspace).
    pub always_scopes: Vec<Scope>,
    /// For `edit` / `write`: the proposed change.
    pub change: Option<ProposedChange>,
}

impl Question {
    /// The question for a sandbox escalation ([`crate::sandbox::Approver`]): may the call run
    /// outside the sandbox although `request.reason`? Allow once or reject; no rule is offered
    /// (every front door asks it the same way).
    pub fn escalation(request: crate::sandbox::PermissionRequest) -> Question {
        Question {
            tool: request.tool,
            tool_call_id: request.tool_call_id,
            arguments: request.arguments,
            reason: request.reason,
            rule: None,
            always_scopes: Vec::new(),
            change: None,
        }
    }
}

/// The user's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Run this call.
    Once,
    /// Run this call and the ones the question's rule covers, in `Scope`.
    Always(Scope),
    /// Do not run it; the reason goes to the model.
    Reject {
        /// The user's reason, when given.
        reason: Option<String>,
    },
}

impl Answer {
    /// The sandbox's decision this answer stands for: any allow is [`Decision::Allow`] (an
    /// escalation offers no rule to remember), a reject keeps its reason.
    ///
    /// [`Decision::Allow`]: crate::sandbox::Decision::Allow
    pub fn decision(self) -> crate::sandbox::Decision {
        match self {
            Answer::Once | Answer::Always(_) => crate::sandbox::Decision::Allow,
            Answer::Reject { reason } => crate::sandbox::Decision::Reject { reason },
        }
    }
}

/// Asks the user (the editor). Implementations answer [`Answer::Reject`] when the question
/// cannot be delivered; the caller drops the future on abort (an implementation should then
/// withdraw the question, e.g. with `$/cancelRequest`).
#[async_trait]
pub trait Asker: Send + Sync {
    /// Asks once.
    async fn ask(&self, question: Question) -> Answer;
}

/// The per-session approval state: the effective policy, the rules, and the asker.
pub struct Gate {
    /// `approvalPolicy` from settings (or the client), refreshed by the server for every run.
    default_policy: Mutex<ApprovalPolicy>,
    /// Set for this session (`agent/permissions/set`); wins over the default.
    session_policy: Mutex<Option<ApprovalPolicy>>,
    session_rules: Mutex<Vec<Rule>>,
    workspace_rules: Mutex<Vec<Rule>>,
    /// The project whose `.pi/settings.json` takes workspace rules; `None` when the workspace
    /// is not trusted (workspace answers then stay in the session).
    workspace: Option<PathBuf>,
    asker: Option<Arc<dyn Asker>>,
    /// The model's text when a call needs a question and there is no asker.
    no_asker: String,
    /// Calls of [`ToolKind::Edit`] tools that ask with their change: call id → arguments.
    deferred: Mutex<HashMap<String, Value>>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("policy", &self.policy())
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

/// The text of a rejected call (the model reads it).
pub fn rejected_text(tool: &str, reason: Option<&str>) -> String {
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(r) => format!("The user rejected this {tool} call: {r}"),
        None => format!("The user rejected this {tool} call."),
    }
}

impl Gate {
    /// A gate with `policy` (until [`Gate::set_default_policy`]), the workspace rules of
    /// `rules`, `asker` to ask (`None`: every question is answered by rejecting with
    /// `no_asker` as the text) and `workspace` = the trusted project's root for workspace rules.
    pub fn new(
        policy: ApprovalPolicy,
        rules: Vec<Rule>,
        asker: Option<Arc<dyn Asker>>,
        workspace: Option<PathBuf>,
        no_asker: impl Into<String>,
    ) -> Gate {
        Gate {
            default_policy: Mutex::new(policy),
            session_policy: Mutex::new(None),
            session_rules: Mutex::new(Vec::new()),
            workspace_rules: Mutex::new(rules),
            workspace,
            asker,
            no_asker: no_asker.into(),
            deferred: Mutex::new(HashMap::new()),
        }
    }

    /// The policy in force: the session's, else the default.
    pub fn policy(&self) -> ApprovalPolicy {
        self.session_policy
            .lock()
            .unwrap_or(*self.default_policy.lock())
    }

    /// Sets the session's own policy (`None`: back to the default).
    pub fn set_session_policy(&self, policy: Option<ApprovalPolicy>) {
        *self.session_policy.lock() = policy;
    }

    /// Sets the default policy and the workspace rules (from freshly loaded settings).
    pub fn refresh(&self, policy: ApprovalPolicy, workspace_rules: Vec<Rule>) {
        *self.default_policy.lock() = policy;
        *self.workspace_rules.lock() = workspace_rules;
    }

    /// The session's "allow always" rules so far.
    pub fn session_rules(&self) -> Vec<Rule> {
        self.session_rules.lock().clone()
    }

    fn covered(&self, tool: &str, args: &Value) -> bool {
        self.session_rules
            .lock()
            .iter()
            .chain(self.workspace_rules.lock().iter())
            .any(|r| r.covers(tool, args))
    }

    /// The loop's check of one call, after validation and the before hook. `Ok` = go on
    /// (also for [`ToolKind::Edit`] calls that will ask with their change); `Err(text)` = the
    /// call's error result (rejected, nobody to ask, or aborted while asking:
    /// [`crate::config::types::ABORTED_TEXT`]).
    pub async fn check_call(
        &self,
        tool: &str,
        kind: ToolKind,
        call_id: &str,
        args: &Value,
        cancel: &CancellationToken,
    ) -> Result<(), String> {
        self.check_call_noted(tool, kind, call_id, args, None, cancel)
            .await
    }

    /// [`Gate::check_call`] with what the question adds about the tool (an MCP tool's server
    /// and annotations, [`crate::agent::Tool::approval_note`]), after the reason.
    pub async fn check_call_noted(
        &self,
        tool: &str,
        kind: ToolKind,
        call_id: &str,
        args: &Value,
        note: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<(), String> {
        let policy = self.policy();
        if !policy_asks(policy, kind) || self.covered(tool, args) {
            return Ok(());
        }
        if kind == ToolKind::Edit {
            self.deferred
                .lock()
                .insert(call_id.to_string(), args.clone());
            return Ok(());
        }
        self.ask_noted(tool, call_id, args.clone(), policy, None, note, cancel)
            .await
            .map(|_| ())
    }

    /// Forgets a deferred question of `call_id` the tool never asked (it failed before
    /// proposing a change); the loop calls it when the call settles.
    pub fn settle(&self, call_id: &str) {
        self.deferred.lock().remove(call_id);
    }

    /// True when the loop deferred the question of `call_id` to its tool's proposed change.
    pub fn is_deferred(&self, call_id: &str) -> bool {
        self.deferred.lock().contains_key(call_id)
    }

    /// Called by an edit tool between computing its change and applying it: asks with the
    /// change when the loop deferred this call's question. `Ok(false)`: no question was needed;
    /// `Ok(true)`: the user allowed it, and the tool must re-check that the file's hash still
    /// equals `old_hash` before applying; `Err(text)`: the call's error result.
    pub async fn approve_change(
        &self,
        tool: &str,
        call_id: &str,
        cancel: &CancellationToken,
        change: impl FnOnce() -> ProposedChange,
    ) -> Result<bool, String> {
        let Some(args) = self.deferred.lock().remove(call_id) else {
            return Ok(false);
        };
        let policy = self.policy();
        self.ask(tool, call_id, args, policy, Some(change()), cancel)
            .await
            .map(|_| true)
    }

    /// Asks before a `write` replaces a buffer holding the user's unsaved text, whatever the
    /// policy and the "allow always" rules (the user's unsaved text is theirs): `reason` says
    /// what is lost, `change` shows it; `arguments` are the call's. Only once or reject are
    /// offered, and nothing is remembered. `Ok(())`: allowed (the tool must re-check the text
    /// as after [`Gate::approve_change`]); `Err(text)`: the call's error result.
    pub async fn approve_overwrite(
        &self,
        tool: &str,
        call_id: &str,
        arguments: Value,
        cancel: &CancellationToken,
        reason: String,
        change: ProposedChange,
    ) -> Result<(), String> {
        self.deferred.lock().remove(call_id);
        self.ask_with(
            tool,
            call_id,
            arguments,
            reason,
            false,
            Some(change),
            cancel,
        )
        .await
    }

    async fn ask(
        &self,
        tool: &str,
        call_id: &str,
        arguments: Value,
        policy: ApprovalPolicy,
        change: Option<ProposedChange>,
        cancel: &CancellationToken,
    ) -> Result<(), String> {
        self.ask_noted(tool, call_id, arguments, policy, change, None, cancel)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn ask_noted(
        &self,
        tool: &str,
        call_id: &str,
        arguments: Value,
        policy: ApprovalPolicy,
        change: Option<ProposedChange>,
        note: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<(), String> {
        let name = serde_json::to_value(policy)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let mut reason = match policy {
            ApprovalPolicy::Ask => format!("approvalPolicy \"{name}\": every tool call asks"),
            _ => format!("approvalPolicy \"{name}\": {tool} asks"),
        };
        if let Some(n) = note {
            reason.push_str(" (");
            reason.push_str(n);
            reason.push(')');
        }
        self.ask_with(tool, call_id, arguments, reason, true, change, cancel)
            .await
    }

    /// Asks the user about one call with `reason`; `offer_always`: "allow always" with the
    /// call's rule is offered (else only once or reject).
    #[allow(clippy::too_many_arguments)]
    async fn ask_with(
        &self,
        tool: &str,
        call_id: &str,
        arguments: Value,
        reason: String,
        offer_always: bool,
        change: Option<ProposedChange>,
        cancel: &CancellationToken,
    ) -> Result<(), String> {
        let Some(asker) = &self.asker else {
            return Err(self.no_asker.clone());
        };
        let rule = if offer_always {
            Rule::for_call(tool, &arguments)
        } else {
            None
        };
        let always_scopes = match (&rule, &self.workspace) {
            (None, _) => Vec::new(),
            (Some(_), None) => vec![Scope::Session],
            (Some(_), Some(_)) => vec![Scope::Session, Scope::Workspace],
        };
        let question = Question {
            tool: tool.to_string(),
            tool_call_id: call_id.to_string(),
            arguments,
            reason,
            rule: rule.clone(),
            always_scopes,
            change,
        };
        let answer = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(crate::config::types::ABORTED_TEXT.to_string()),
            a = asker.ask(question) => a,
        };
        match answer {
            Answer::Once => Ok(()),
            Answer::Always(scope) => {
                if let Some(rule) = rule {
                    self.remember(rule, scope);
                }
                Ok(())
            }
            Answer::Reject { reason } => Err(rejected_text(tool, reason.as_deref())),
        }
    }

    /// Keeps `rule` for the session and, for [`Scope::Workspace`] in a trusted workspace,
    /// appends it to the project's `.pi/settings.json` (`approvals.tools` / `approvals.bash`).
    /// A failed write is logged; the rule still holds for the session.
    fn remember(&self, rule: Rule, scope: Scope) {
        self.session_rules.lock().push(rule.clone());
        if scope != Scope::Workspace {
            return;
        }
        let Some(root) = &self.workspace else {
            tracing::warn!(
                "workspace not trusted: the \"allow always\" rule for {} stays in this session",
                rule.tool
            );
            return;
        };
        self.workspace_rules.lock().push(rule.clone());
        if let Err(e) = persist_rule(root, &rule) {
            tracing::warn!("cannot save the \"allow always\" rule: {e}");
        }
    }
}

/// Appends `rule` to `<root>/.pi/settings.json`'s `approvals` (without duplicates), keeping
/// every other key.
pub fn persist_rule(root: &std::path::Path, rule: &Rule) -> Result<(), String> {
    let file = root.join(".pi").join("settings.json");
    let current: Value = match std::fs::read_to_string(&file) {
        Ok(t) => serde_json::from_str(&t).map_err(|e| format!("{}: {e}", file.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Value::Null,
        Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
    };
    let (key, value) = match &rule.command_prefix {
        Some(p) => ("bash", p.clone()),
        None => ("tools", rule.tool.clone()),
    };
    let mut list: Vec<Value> = current
        .pointer(&format!("/{SETTINGS_KEY}/{key}"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if list.iter().any(|v| v.as_str() == Some(value.as_str())) {
        return Ok(());
    }
    list.push(Value::String(value));
    crate::settings::write_project_setting(root, &[SETTINGS_KEY, key], Value::Array(list))
}

/// The apply step's check after an approved question: reads `path` again and returns its
/// snapshot when its hash equals the approved old text's (`approved_old: None`: the file must
/// still not exist); otherwise the error text for the model (nothing was changed).
pub async fn recheck(
    fs: &dyn crate::fs::Fs,
    path: &std::path::Path,
    shown: &str,
    approved_old: Option<&str>,
) -> Result<Option<crate::fs::FileSnapshot>, String> {
    let now = fs.read(path).await.ok();
    let approved = approved_old.map(content_hash);
    let current = now.as_ref().map(|s| content_hash(&s.text));
    if approved == current {
        return Ok(now);
    }
    let what = match (approved_old, now.as_ref()) {
        (Some(_), None) => "it was deleted".to_string(),
        (None, Some(_)) => "it was created".to_string(),
        (Some(old), Some(n)) => changed_lines(old, &n.text),
        (None, None) => "it changed".to_string(),
    };
    Err(format!(
        "{shown} changed while the user was deciding ({what}); nothing was changed. What was approved is not what would land: read the file again and redo the change."
    ))
}

/// Which lines of `new` differ from `old`, in words for a person (`"line 3 differs"`,
/// `"lines 3–4 and 9 differ"`; a removal is named by the line it was before). Never a hash.
pub fn changed_lines(old: &str, new: &str) -> String {
    use similar::{DiffOp, TextDiff};
    let diff = TextDiff::from_lines(old, new);
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for op in diff.ops() {
        let (start, len) = match *op {
            DiffOp::Equal { .. } => continue,
            DiffOp::Delete { new_index, .. } => (new_index, 1),
            DiffOp::Insert {
                new_index, new_len, ..
            }
            | DiffOp::Replace {
                new_index, new_len, ..
            } => (new_index, new_len.max(1)),
        };
        let (first, last) = (start + 1, start + len);
        match spans.last_mut() {
            Some(s) if first <= s.1 + 1 => s.1 = s.1.max(last),
            _ => spans.push((first, last)),
        }
    }
    if spans.is_empty() {
        return "only its line endings or encoding differ".to_string();
    }
    let many = spans.len() > 1 || spans[0].0 != spans[0].1;
    let mut parts: Vec<String> = spans
        .iter()
        .take(5)
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}–{b}")
            }
        })
        .collect();
    if spans.len() > 5 {
        parts.push(format!("{} more places", spans.len() - 5));
    }
    let list = match parts.len() {
        1 => parts.remove(0),
        _ => {
            let last = parts.pop().unwrap_or_default();
            format!("{} and {last}", parts.join(", "))
        }
    };
    if many {
        format!("lines {list} differ")
    } else {
        format!("line {list} differs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changed_lines_name_lines_not_hashes() {
        assert_eq!(changed_lines("a\nb\nc\n", "a\nB\nc\n"), "line 2 differs");
        assert_eq!(
            changed_lines("a\nb\nc\nd\n", "a\nB\nC\nd\ne\n"),
            "lines 2–3 and 5 differ"
        );
        assert_eq!(changed_lines("a\nb\n", "a\n"), "line 2 differs");
    }

    #[test]
    fn bash_rules_are_word_prefixes_of_plain_commands() {
        let r = Rule::for_call("bash", &json!({"command": "cargo test -p pi-core"})).unwrap();
        assert_eq!(r.command_prefix.as_deref(), Some("cargo test"));
        assert!(r.covers("bash", &json!({"command": "cargo  test --workspace"})));
        assert!(!r.covers("bash", &json!({"command": "cargo testx"})));
        assert!(!r.covers("bash", &json!({"command": "cargo test && rm -rf x"})));
        assert!(!r.covers("edit", &json!({"command": "cargo test"})));
        let ls = Rule::for_call("bash", &json!({"command": "ls -la src"})).unwrap();
        assert_eq!(ls.command_prefix.as_deref(), Some("ls"));
        assert_eq!(
            Rule::for_call("bash", &json!({"command": "echo $(id)"})),
            None
        );
        let edit = Rule::for_call("edit", &json!({"path": "a"})).unwrap();
        assert!(edit.covers("edit", &json!({"path": "b"})));
        assert!(!edit.covers("bash", &json!({"command": "x"})));
        let merged =
            json!({"approvals": {"tools": ["write", "bash", 3], "bash": ["git  status", ""]}});
        assert_eq!(
            rules_from_settings(merged.as_object().unwrap()),
            vec![
                Rule {
                    tool: "write".into(),
                    command_prefix: None
                },
                Rule {
                    tool: "bash".into(),
                    command_prefix: Some("git status".into())
                }
            ]
        );
    }

    #[test]
    fn policies_and_hashes() {
        assert!(policy_asks(ApprovalPolicy::Ask, ToolKind::ReadOnly));
        assert!(!policy_asks(ApprovalPolicy::AutoEdit, ToolKind::Edit));
        assert!(policy_asks(ApprovalPolicy::AutoEdit, ToolKind::Execute));
        assert!(!policy_asks(ApprovalPolicy::ApproveAll, ToolKind::Execute));
        assert_eq!(content_hash(""), "xxh3:2d06800538d394c2");
    }

    /// Answers from a list and records the questions; `None` never answers.
    struct Scripted {
        answers: Mutex<Vec<Option<Answer>>>,
        asked: Mutex<Vec<Question>>,
    }

    #[async_trait]
    impl Asker for Scripted {
        async fn ask(&self, q: Question) -> Answer {
            self.asked.lock().push(q);
            let next = self.answers.lock().remove(0);
            match next {
                Some(a) => a,
                None => std::future::pending().await,
            }
        }
    }

    fn gate(policy: ApprovalPolicy, answers: Vec<Option<Answer>>) -> (Gate, Arc<Scripted>) {
        let asker = Arc::new(Scripted {
            answers: Mutex::new(answers),
            asked: Mutex::new(Vec::new()),
        });
        let g = Gate::new(policy, Vec::new(), Some(asker.clone()), None, "unused");
        (g, asker)
    }

    #[tokio::test]
    async fn gate_asks_remembers_rejects_and_withdraws() {
        let cancel = CancellationToken::new();
        let ls = |c: &str| json!({ "command": c });
        let (g, asker) = gate(
            ApprovalPolicy::AutoEdit,
            vec![
                Some(Answer::Always(Scope::Session)),
                Some(Answer::Reject {
                    reason: Some(" no ".into()),
                }),
            ],
        );
        let bash = |c: &'static str, id: &'static str| {
            let g = &g;
            let cancel = &cancel;
            async move {
                g.check_call("bash", ToolKind::Execute, id, &ls(c), cancel)
                    .await
            }
        };
        assert_eq!(bash("ls -a", "c1").await, Ok(()));
        assert_eq!(bash("ls -l", "c2").await, Ok(()), "covered by the rule");
        assert_eq!(
            bash("rm x", "c3").await,
            Err("The user rejected this bash call: no".into())
        );
        assert_eq!(
            g.check_call("read", ToolKind::ReadOnly, "c4", &json!({}), &cancel)
                .await,
            Ok(())
        );
        let asked = asker.asked.lock().clone();
        assert_eq!(asked.len(), 2);
        assert_eq!(asked[0].reason, "approvalPolicy \"auto-edit\": bash asks");
        assert_eq!(asked[0].always_scopes, vec![Scope::Session]);
        assert_eq!(g.session_rules(), vec![asked[0].rule.clone().unwrap()]);
        // The session's own policy wins; null returns to the default.
        g.set_session_policy(Some(ApprovalPolicy::ApproveAll));
        assert_eq!(bash("rm x", "c5").await, Ok(()));
        g.set_session_policy(None);
        assert_eq!(g.policy(), ApprovalPolicy::AutoEdit);

        // Edits are deferred to the tool, which asks with its change; abort withdraws it.
        let (g, asker) = gate(ApprovalPolicy::Ask, vec![None]);
        let args = json!({"path": "a"});
        assert_eq!(
            g.check_call("edit", ToolKind::Edit, "e1", &args, &cancel)
                .await,
            Ok(())
        );
        assert!(asker.asked.lock().is_empty());
        assert!(g.is_deferred("e1"));
        let abort = CancellationToken::new();
        let pending = g.approve_change("edit", "e1", &abort, || ProposedChange {
            path: "a".into(),
            diff: String::new(),
            old_hash: Some(content_hash("x")),
            new_hash: content_hash("y"),
        });
        let canceller = abort.clone();
        let (res, ()) = tokio::join!(pending, async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            canceller.cancel();
        });
        assert_eq!(res, Err(crate::config::types::ABORTED_TEXT.to_string()));
        assert_eq!(asker.asked.lock()[0].arguments, args);
        // A call the tool never asked about is forgotten when it settles.
        g.check_call("write", ToolKind::Edit, "w1", &args, &cancel)
            .await
            .unwrap();
        g.settle("w1");
        assert!(!g.is_deferred("w1"));
        // Nobody to ask: the configured text.
        let headless = Gate::new(ApprovalPolicy::Ask, Vec::new(), None, None, "cannot ask");
        assert_eq!(
            headless
                .check_call("ls", ToolKind::ReadOnly, "h", &json!({}), &cancel)
                .await,
            Err("cannot ask".into())
        );
    }

    #[test]
    fn workspace_rules_are_appended_once() {
        let ws_tmp = tempfile::tempdir().unwrap();
        let ws = ws_tmp.path().to_path_buf();
        std::fs::create_dir_all(ws.join(".pi")).unwrap();
        std::fs::write(ws.join(".pi/settings.json"), r#"{"theme": "dark"}"#).unwrap();
        let rule = Rule::for_call("bash", &json!({"command": "cargo test"})).unwrap();
        persist_rule(&ws, &rule).unwrap();
        persist_rule(&ws, &rule).unwrap();
        persist_rule(&ws, &Rule::for_call("edit", &json!({})).unwrap()).unwrap();
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(ws.join(".pi/settings.json")).unwrap())
                .unwrap();
        assert_eq!(
            v,
            json!({"theme": "dark", "approvals": {"bash": ["cargo test"], "tools": ["edit"]}})
        );
        std::fs::remove_dir_all(&ws).unwrap();
    }
}
