//! `ls {path?, limit?}`: entries sorted case-insensitively, `/` after folders, dotfiles
//! included, at most 500 by default (Pi's limit).

use std::sync::Arc;

use async_trait::async_trait;
use pi_ai::ToolSpec;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, ToolState};
use crate::agent::{Tool, ToolContext, ToolError, ToolOutput};
use crate::fs::Fs;

/// Default entry limit.
pub const LS_LIMIT: usize = 500;

#[derive(Deserialize)]
struct Args {
    path: Option<String>,
    limit: Option<f64>,
}

/// The `ls` tool.
pub struct LsTool {
    fs: Arc<dyn Fs>,
    state: Arc<ToolState>,
}

impl LsTool {
    /// An ls tool over `fs` (paths confined as in `state`).
    pub fn new(fs: Arc<dyn Fs>, state: Arc<ToolState>) -> Self {
        LsTool { fs, state }
    }
}

#[async_trait]
impl Tool for LsTool {
    /// Pi's `promptSnippet` of `ls` (`core/tools/ls.js`, 1.6).
    fn prompt_snippet(&self) -> Option<String> {
        Some("List directory contents".into())
    }

    /// For the approval policy: reads only.
    fn approval_kind(&self) -> crate::approval::ToolKind {
        crate::approval::ToolKind::ReadOnly
    }

    fn name(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed("ls")
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
 constrained_sampling: None,
            name: "ls".into(),
            description: "List directory contents. Returns entries sorted alphabetically, with '/' suffix for directories. Includes dotfiles. Output is truncated to 500 entries or 50KB (whichever is hit first).".into(),
            parameters: json!({"type":"object","properties":{
                "path":{"type":"string","description":"Directory to list (default: current directory)"},
                "limit":{"type":"number","description":"Maximum number of entries to return (default: 500)"}}}),
        }
    }

    async fn execute(&self, _ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let a: Args = parse_args("ls", if args.is_null() { json!({}) } else { args })?;
        let path = self
            .state
            .resolve(self.fs.root(), a.path.as_deref().unwrap_or("."))?;
        let mut entries = self
            .fs
            .list_dir(&path)
            .await
            .map_err(|e| ToolError::new(format!("Cannot read directory: {e}")))?;
        if entries.is_empty() {
            return Ok(ToolOutput::text("(empty directory)"));
        }
        entries.sort_by_key(|(n, _)| n.to_lowercase());
        let limit = a.limit.map(|l| l.max(1.0) as usize).unwrap_or(LS_LIMIT);
        let shown: Vec<String> = entries
            .iter()
            .take(limit)
            .map(|(n, d)| if *d { format!("{n}/") } else { n.clone() })
            .collect();
        let mut text = shown.join("\n");
        let mut details = None;
        if entries.len() > limit {
            text.push_str(&format!(
                "\n\n[{limit} entries limit reached. Use limit={} for more]",
                limit * 2
            ));
            details = Some(json!({"entryLimitReached": limit}));
        }
        Ok(ToolOutput {
            terminate: false,
            content: vec![pi_ai::ContentBlock::text(text)],
            details,
            ..Default::default()
        })
    }
}
