//! `find {pattern, path?, limit?}`: files (and folders, shown with a trailing `/`) whose path
//! matches a glob, on ripgrep's `ignore` walk and `globset`, with Pi 0.73.1's parameters, texts
//! and limits (1,000 results, 50 KB of output).
//!
//! Pattern rule (Pi 1.6 passes it to `fd --glob`): a pattern without `/` matches the file name
//! at any depth; one with `/` matches the path relative to the search folder (`src/*.ts` finds
//! `src/a.ts` but not `pkg/src/a.ts`; `**/src/*.ts` finds both), an absolute one the absolute
//! path; a leading `./` is dropped; an all-lowercase pattern ignores case (fd's smart case). Hidden files are
//! included, `.gitignore` is respected even outside a git repository (`fd --no-require-git`),
//! `.git` is skipped; results come in name order.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use globset::GlobBuilder;
use pi_ai::ToolSpec;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{head_bytes, parse_args, walker, ToolState};
use crate::agent::{Tool, ToolContext, ToolError, ToolOutput};

/// Default result limit (Pi).
pub const FIND_LIMIT: usize = 1000;

#[derive(Deserialize)]
struct Args {
    pattern: String,
    path: Option<String>,
    limit: Option<f64>,
}

/// The `find` tool.
pub struct FindTool {
    root: PathBuf,
    state: Arc<ToolState>,
}

impl FindTool {
    /// A find tool searching under `root` (and allowed folders in `state`).
    pub fn new(root: PathBuf, state: Arc<ToolState>) -> Self {
        FindTool { root, state }
    }
}

fn run(
    search_path: &Path,
    pattern: &str,
    limit: usize,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<ToolOutput, ToolError> {
    if !search_path.exists() {
        return Err(ToolError::new(format!(
            "Path not found: {}",
            search_path.display()
        )));
    }
    // Pi 1.6 (#12066): a leading `./` is dropped; a pattern with `/` is relative to the search
    // folder (`src/*.ts` finds `src/a.ts`, not `pkg/src/a.ts`), an absolute one is matched
    // against the absolute path; smart case (an all-lowercase pattern ignores case).
    let mut pattern = pattern;
    while let Some(rest) = pattern.strip_prefix("./") {
        pattern = rest;
    }
    let full_path = pattern.contains('/');
    let absolute = Path::new(pattern).is_absolute();
    let glob = GlobBuilder::new(pattern)
        .literal_separator(full_path)
        .case_insensitive(pattern == pattern.to_lowercase())
        .build()
        .map_err(|e| ToolError::new(format!("Invalid pattern {pattern}: {e}")))?
        .compile_matcher();
    let mut found: Vec<String> = Vec::new();
    let mut limit_reached = false;
    for entry in walker(search_path, None)?.build() {
        if cancel.is_cancelled() {
            return Err(ToolError::new("Operation aborted"));
        }
        let Ok(entry) = entry else { continue };
        if entry.depth() == 0 {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(search_path) else {
            continue;
        };
        let rel_s = rel.to_string_lossy().replace('\\', "/");
        let hit = if absolute {
            glob.is_match(entry.path())
        } else if full_path {
            glob.is_match(&rel_s)
        } else {
            glob.is_match(entry.file_name())
        };
        if hit {
            // One result past the limit tells "exactly `limit`" from "more" (Pi 1.6, #7121).
            if found.len() == limit {
                limit_reached = true;
                break;
            }
            let dir = entry.file_type().is_some_and(|t| t.is_dir());
            found.push(if dir { format!("{rel_s}/") } else { rel_s });
        }
    }
    if found.is_empty() {
        return Ok(ToolOutput::text("No files found matching pattern"));
    }
    let (text, cut) = head_bytes(&found.join("\n"));
    let mut details = Map::new();
    let mut notices = Vec::new();
    if limit_reached {
        notices.push(format!(
            "{limit} results limit reached. Use limit={} for more, or refine pattern",
            limit * 2
        ));
        details.insert("resultLimitReached".into(), json!(limit));
    }
    if cut {
        notices.push("50.0KB limit reached".to_string());
        details.insert(
            "truncation".into(),
            json!({"truncated": true, "truncatedBy": "bytes"}),
        );
    }
    Ok(super::search_output(text, &notices, details))
}

#[async_trait]
impl Tool for FindTool {
    /// Pi's `promptSnippet` of `find` (`core/tools/find.js`, 1.6).
    fn prompt_snippet(&self) -> Option<String> {
        Some("Find files by glob pattern (respects .gitignore)".into())
    }

    /// For the approval policy: reads only.
    fn approval_kind(&self) -> crate::approval::ToolKind {
        crate::approval::ToolKind::ReadOnly
    }

    fn name(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed("find")
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
 constrained_sampling: None,
            name: "find".into(),
            description: format!("Search for files by glob pattern. Returns matching file paths relative to the search directory. Respects .gitignore. Output is truncated to {FIND_LIMIT} results or 50KB (whichever is hit first)."),
            parameters: json!({"type":"object","required":["pattern"],"properties":{
                "pattern":{"type":"string","description":"Glob pattern relative to the search directory, e.g. 'src/**/*.ts'. Without '/', e.g. '*.ts', it matches file names at any depth"},
                "path":{"type":"string","description":"Directory to search in (default: current directory)"},
                "limit":{"type":"number","description":"Maximum number of results (default: 1000)"}}}),
        }
    }

    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let a: Args = parse_args("find", args)?;
        let path = self.state.resolve(
            &self.root,
            a.path.as_deref().filter(|p| !p.is_empty()).unwrap_or("."),
        )?;
        let limit = a.limit.map(|l| l.max(1.0) as usize).unwrap_or(FIND_LIMIT);
        let cancel = ctx.cancel.clone();
        let pattern = a.pattern;
        tokio::task::spawn_blocking(move || run(&path, &pattern, limit, &cancel))
            .await
            .map_err(|e| ToolError::new(format!("find failed: {e}")))?
    }
}
