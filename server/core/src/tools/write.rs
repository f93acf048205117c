//! `write {path, content}`: creates or overwrites a file, creating parent folders; through the
//! editor when one is attached.

use std::sync::Arc;

use async_trait::async_trait;
use pi_ai::ToolSpec;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{display_path, parse_args, resolve_path};
use crate::agent::{Tool, ToolContext, ToolError, ToolOutput};
use crate::fs::Fs;

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

/// The `write` tool.
pub struct WriteTool {
    fs: Arc<dyn Fs>,
}

impl WriteTool {
    pub fn new(fs: Arc<dyn Fs>) -> Self {
        WriteTool { fs }
    }
}

#[async_trait]
impl Tool for WriteTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "write".into(),
            description: "Write content to a file. Creates the file if it doesn't exist, overwrites if it does. Automatically creates parent directories.".into(),
            parameters: json!({"type":"object","required":["path","content"],"properties":{
                "path":{"type":"string","description":"Path to the file to write (relative or absolute)"},
                "content":{"type":"string","description":"Content to write to the file"}}}),
        }
    }

    /// Mutates the workspace: a batch containing it runs in call order.
    fn sequential(&self) -> bool {
        true
    }

    async fn execute(&self, _ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let a: Args = parse_args("write", args)?;
        let path = resolve_path(self.fs.root(), &a.path)?;
        self.fs
            .write(&path, &a.content)
            .await
            .map_err(|e| ToolError::new(e.to_string()))?;
        Ok(ToolOutput::text(format!(
            "Successfully wrote {} bytes to {}",
            a.content.len(),
            display_path(self.fs.root(), &path)
        )))
    }
}
