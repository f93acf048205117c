//! `read {path, offset?, limit?}`: the file's text (an open buffer's unsaved text included),
//! head-truncated to 2,000 lines or 50 KB with Pi's continuation notice; images as image blocks.

use std::sync::Arc;

use async_trait::async_trait;
use pi_ai::{ContentBlock, ImageContent, ToolSpec};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, resolve_path, MAX_BYTES, MAX_LINES};
use crate::agent::{Tool, ToolContext, ToolError, ToolOutput};
use crate::fs::Fs;

#[derive(Deserialize)]
struct Args {
    path: String,
    offset: Option<f64>,
    limit: Option<f64>,
}

/// The `read` tool.
pub struct ReadTool {
    fs: Arc<dyn Fs>,
}

impl ReadTool {
    pub fn new(fs: Arc<dyn Fs>) -> Self {
        ReadTool { fs }
    }
}

fn image_mime(path: &str) -> Option<&'static str> {
    let lower = path.to_ascii_lowercase();
    [
        (".png", "image/png"),
        (".jpg", "image/jpeg"),
        (".jpeg", "image/jpeg"),
        (".gif", "image/gif"),
        (".webp", "image/webp"),
    ]
    .iter()
    .find(|(ext, _)| lower.ends_with(ext))
    .map(|(_, m)| *m)
}

/// Selects lines `offset..offset+limit` (1-based) of `text`, truncated to Pi's limits, with the
/// continuation notice Pi appends.
pub(crate) fn read_window(
    text: &str,
    offset: usize,
    limit: Option<usize>,
) -> Result<String, String> {
    let lines: Vec<&str> = text.split('\n').collect();
    let total = lines.len();
    let start = offset.max(1) - 1;
    if start >= total {
        return Err(format!(
            "Offset {offset} is beyond end of file ({total} lines total)"
        ));
    }
    let wanted_end = limit.map(|l| (start + l).min(total)).unwrap_or(total);
    let mut out = String::new();
    let mut end = start;
    for (i, line) in lines[start..wanted_end].iter().enumerate() {
        let add = line.len() + usize::from(i > 0);
        if i >= MAX_LINES || out.len() + add > MAX_BYTES {
            break;
        }
        if i > 0 {
            out.push('\n');
        }
        out.push_str(line);
        end = start + i + 1;
    }
    if end == start && start < wanted_end {
        let kb = lines[start].len() as f64 / 1024.0;
        return Ok(format!(
            "[Line {} is {kb:.1}KB, exceeds 50.0KB limit. Use bash: sed -n '{}p' FILE | head -c {MAX_BYTES}]",
            start + 1,
            start + 1
        ));
    }
    if end < wanted_end {
        let by_bytes = end - start < MAX_LINES;
        let limit_note = if by_bytes { " (50.0KB limit)" } else { "" };
        out.push_str(&format!(
            "\n\n[Showing lines {}-{end} of {total}{limit_note}. Use offset={} to continue.]",
            start + 1,
            end + 1
        ));
    } else if end < total {
        out.push_str(&format!(
            "\n\n[{} more lines in file. Use offset={} to continue.]",
            total - end,
            end + 1
        ));
    }
    Ok(out)
}

#[async_trait]
impl Tool for ReadTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read".into(),
            description: format!("Read the contents of a file. Supports text files and images (jpg, png, gif, webp). Images are sent as attachments. For text files, output is truncated to {MAX_LINES} lines or 50KB (whichever is hit first). Use offset/limit for large files. When you need the full file, continue with offset until complete. Open editor buffers are read with their unsaved changes."),
            parameters: json!({"type":"object","required":["path"],"properties":{
                "path":{"type":"string","description":"Path to the file to read (relative or absolute)"},
                "offset":{"type":"number","description":"Line number to start reading from (1-indexed)"},
                "limit":{"type":"number","description":"Maximum number of lines to read"}}}),
        }
    }

    async fn execute(&self, _ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let a: Args = parse_args("read", args)?;
        let path = resolve_path(self.fs.root(), &a.path)?;
        if let Some(mime) = image_mime(&a.path) {
            let bytes = self
                .fs
                .read_bytes(&path)
                .await
                .map_err(|e| ToolError::new(e.to_string()))?;
            use base64::Engine as _;
            return Ok(ToolOutput {
                terminate: false,
                content: vec![
                    ContentBlock::text(format!("Read image file [{mime}]")),
                    ContentBlock::Image(ImageContent {
                        data: base64::engine::general_purpose::STANDARD.encode(&bytes),
                        mime_type: mime.into(),
                    }),
                ],
                details: None,
            });
        }
        let snap = self
            .fs
            .read(&path)
            .await
            .map_err(|e| ToolError::new(e.to_string()))?;
        let offset = a.offset.map(|o| o.max(1.0) as usize).unwrap_or(1);
        let limit = a.limit.map(|l| l.max(1.0) as usize);
        let text = read_window(&snap.text, offset, limit).map_err(ToolError::new)?;
        Ok(ToolOutput::text(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_and_notices_match_pi() {
        assert_eq!(read_window("a\nb\n", 1, None).unwrap(), "a\nb\n");
        assert_eq!(
            read_window("alpha\nBETA\nc\nd", 2, Some(1)).unwrap(),
            "BETA\n\n[2 more lines in file. Use offset=3 to continue.]"
        );
        let big: String = (1..=2501).map(|i| format!("line {i}\n")).collect();
        let out = read_window(big.trim_end(), 1, None).unwrap();
        assert!(
            out.ends_with(
                "line 2000\n\n[Showing lines 1-2000 of 2501. Use offset=2001 to continue.]"
            ),
            "{}",
            &out[out.len() - 80..]
        );
        assert_eq!(
            read_window("x", 5, None).unwrap_err(),
            "Offset 5 is beyond end of file (1 lines total)"
        );
    }
}
