//! Listings Pi's RPC mode has and editors need: `agent/commands` (Pi's `get_commands`: prompt
//! templates and skills a prompt can invoke with `/name`), `agent/session/forkMessages` (Pi's
//! `get_fork_messages`) and `agent/lastAssistantText` (Pi's `get_last_assistant_text`).

use pi_core::resources::Scope;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower_lsp_server::jsonrpc::Result;

use crate::ctx::Ctx;
use crate::protocol::{ExtensionCommandsResult, SessionParams};

/// `agent/commands` params: none are needed (the listing is the workspace's); `sessionId`, when
/// given, must name a session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandsParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// What kind of command (Pi's `source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum CommandSource {
    /// A prompt template (`<name>.md` in a prompts folder).
    Prompt,
    /// A skill; the command name is `skill:<name>`.
    Skill,
}

/// Where a command was loaded from (Pi's `location`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub enum CommandLocation {
    /// The user's agent folder (`~/.pi/agent/`, `~/.agents/skills/`).
    User,
    /// The workspace (trusted workspaces only).
    Project,
    /// A path named in a settings file.
    Path,
}

/// One command (Pi's `get_commands` entry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct CommandInfo {
    /// Invoke with `/<name>` at the start of a prompt.
    pub name: String,
    pub description: String,
    pub source: CommandSource,
    pub location: CommandLocation,
    /// The template or `SKILL.md` file (absolute).
    pub path: String,
    /// A template's `argument-hint` frontmatter, e.g. `<PR-URL>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument_hint: Option<String>,
}

/// `agent/commands` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct CommandsResult {
    pub commands: Vec<CommandInfo>,
}

/// A user message the session can be forked at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ForkMessage {
    pub entry_id: String,
    pub text: String,
}

/// `agent/session/forkMessages` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ForkMessagesResult {
    pub messages: Vec<ForkMessage>,
}

/// `agent/lastAssistantText` result: `text` is `null` when there is no assistant text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct LastAssistantTextResult {
    pub text: Option<String>,
}

fn location(scope: Scope) -> CommandLocation {
    match scope {
        Scope::User => CommandLocation::User,
        Scope::Project => CommandLocation::Project,
        Scope::Path => CommandLocation::Path,
    }
}

/// `agent/commands {sessionId?}` → `{commands}`: the prompt templates, then the skills
/// (as `skill:<name>`, left out when settings turn `enableSkillCommands` off, since `/skill:`
/// is then not expanded), read afresh, in Pi's precedence; project ones only in a trusted
/// workspace.
pub(crate) async fn commands(cx: Ctx, p: CommandsParams) -> Result<CommandsResult> {
    if let Some(id) = &p.session_id {
        cx.session(id).await?;
    }
    let ws = cx.workspace();
    let resources = ws.resources();
    let mut commands: Vec<CommandInfo> = resources
        .prompt_templates
        .iter()
        .map(|t| CommandInfo {
            name: t.name.clone(),
            description: t.description.clone(),
            source: CommandSource::Prompt,
            location: location(t.scope),
            path: t.file_path.display().to_string(),
            argument_hint: t.argument_hint.clone(),
        })
        .collect();
    if ws.settings().enable_skill_commands {
        commands.extend(resources.skills.iter().map(|s| CommandInfo {
            name: format!("skill:{}", s.name),
            description: s.description.clone(),
            source: CommandSource::Skill,
            location: location(s.scope),
            path: s.file_path.display().to_string(),
            argument_hint: None,
        }));
    }
    Ok(CommandsResult { commands })
}

/// `agent/session/forkMessages {sessionId}` → the user messages of the session file (every
/// branch, file order) with their text blocks joined, empty ones left out (Pi's
/// `getUserMessagesForForking`); each `entryId` is a valid `agent/session/fork` target.
pub(crate) async fn fork_messages(cx: Ctx, p: SessionParams) -> Result<ForkMessagesResult> {
    let session = cx.session(&p.session_id).await?;
    let (tree, _) = super::tree(&session)?;
    let messages = tree
        .entries
        .iter()
        .filter(|e| e.kind == "message" && e.role() == Some("user"))
        .filter_map(|e| {
            let raw = e.raw();
            let text = match &raw["message"]["content"] {
                Value::String(s) => s.clone(),
                Value::Array(blocks) => blocks
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .collect::<String>(),
                _ => String::new(),
            };
            (!text.is_empty()).then(|| ForkMessage {
                entry_id: e.id.to_string(),
                text,
            })
        })
        .collect();
    Ok(ForkMessagesResult { messages })
}

/// `agent/lastAssistantText {sessionId}` → the text blocks of the agent's last assistant
/// message (an aborted one without content skipped), joined and trimmed; `null` when there
/// is none or it is empty (Pi's `getLastAssistantText`).
pub(crate) async fn last_assistant_text(
    cx: Ctx,
    p: SessionParams,
) -> Result<LastAssistantTextResult> {
    let session = cx.session(&p.session_id).await?;
    let messages = session.messages();
    let last = messages.iter().rev().find_map(|m| match m {
        pi_ai::Message::Assistant(a)
            if !(a.stop_reason == pi_ai::StopReason::Aborted && a.content.is_empty()) =>
        {
            Some(a)
        }
        _ => None,
    });
    let text = last
        .map(|a| {
            a.content
                .iter()
                .filter_map(|b| match b {
                    pi_ai::ContentBlock::Text(t) => Some(t.text.as_str()),
                    _ => None,
                })
                .collect::<String>()
        })
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    Ok(LastAssistantTextResult { text })
}

/// `agent/extension/commands {sessionId}` → `{commands: [{name, description?, source:
/// "extension", path}]}` (Pi's `get_commands` entries of extensions; invoke one with
/// `agent/prompt` and the text `/name args`).
pub(crate) async fn extension_commands(
    cx: Ctx,
    p: SessionParams,
) -> Result<ExtensionCommandsResult> {
    let session = cx.session(&p.session_id).await?;
    let commands: Vec<pi_core::extension::CommandInfo> = session.extension_commands();
    Ok(ExtensionCommandsResult { commands })
}
