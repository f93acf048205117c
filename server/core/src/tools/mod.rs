//! The coding tools: `read`, `write`, `edit`, `bash`, `ls`, with Pi 0.73.1's names, parameter
//! schemas and result texts. File tools go through [`crate::fs::Fs`]; only `bash` spawns
//! processes.

mod bash;
mod edit;
mod ls;
mod read;
mod write;

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

pub use bash::{BashTool, BeforeBash};
pub use edit::EditTool;
pub use ls::LsTool;
pub use read::ReadTool;
pub use write::WriteTool;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::agent::{Tool, ToolError};
use crate::fs::Fs;

/// Pi's output limits: 2,000 lines or 50 KB, whichever is hit first.
pub const MAX_LINES: usize = 2000;
/// Pi's output byte limit (50 KB).
pub const MAX_BYTES: usize = 50 * 1024;

/// The default tool set over `fs`; `before_bash` runs before every command (the editor uses it to
/// bring the disk up to date with buffers the agent edited).
pub fn default_tools(fs: Arc<dyn Fs>, before_bash: Option<BeforeBash>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadTool::new(fs.clone())),
        Arc::new(BashTool::new(fs.root().to_path_buf(), before_bash)),
        Arc::new(EditTool::new(fs.clone())),
        Arc::new(WriteTool::new(fs.clone())),
        Arc::new(LsTool::new(fs)),
    ]
}

/// Parses tool arguments into `T`; failures read like Pi's validation errors.
pub(crate) fn parse_args<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args.clone()).map_err(|e| {
        ToolError::new(format!(
            "Validation failed for tool \"{tool}\":\n  - {e}\n\nReceived arguments:\n{}",
            serde_json::to_string_pretty(&args).unwrap_or_default()
        ))
    })
}

/// Removes `.` and resolves `..` lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Resolves a tool's `path` argument: `~` expanded, relative to `root`, symlinks of existing
/// ancestors followed, and refused when the result lies outside the workspace.
pub fn resolve_path(root: &Path, input: &str) -> Result<PathBuf, ToolError> {
    let expanded = if input == "~" || input.starts_with("~/") {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        home.join(input.trim_start_matches('~').trim_start_matches('/'))
    } else {
        PathBuf::from(input)
    };
    let joined = normalize(&root.join(expanded));
    let root_real = root.canonicalize().unwrap_or_else(|_| normalize(root));
    // Canonicalize the longest existing ancestor so symlinks cannot lead outside.
    let mut existing = joined.clone();
    let mut rest = Vec::new();
    let real = loop {
        match existing.canonicalize() {
            Ok(r) => {
                break rest
                    .iter()
                    .rev()
                    .fold(r, |acc: PathBuf, c: &std::ffi::OsString| acc.join(c))
            }
            Err(_) => match (
                existing.file_name().map(|n| n.to_os_string()),
                existing.parent(),
            ) {
                (Some(name), Some(parent)) => {
                    rest.push(name);
                    existing = parent.to_path_buf();
                }
                _ => break joined.clone(),
            },
        }
    };
    if real.starts_with(&root_real) {
        // Keep the caller's spelling under the root so editor URIs match what it opened.
        Ok(if joined.starts_with(root) {
            joined
        } else {
            real
        })
    } else {
        Err(ToolError::new(format!(
            "Path {input} is outside the workspace {}; only files inside it can be used.",
            root.display()
        )))
    }
}

/// The path as the model should see it: relative to `root` when inside it.
pub(crate) fn display_path(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_confined() {
        let root = std::env::temp_dir().join(format!("pi-core-paths-{}", std::process::id()));
        std::fs::create_dir_all(root.join("sub")).unwrap();
        assert_eq!(
            resolve_path(&root, "sub/../a.txt").unwrap(),
            root.join("a.txt")
        );
        assert_eq!(
            resolve_path(&root, "new/dir/f.txt").unwrap(),
            root.join("new/dir/f.txt")
        );
        assert!(resolve_path(&root, "../outside.txt").is_err());
        assert!(resolve_path(&root, "/etc/passwd").is_err());
        std::os::unix::fs::symlink("/etc", root.join("link")).unwrap();
        assert!(resolve_path(&root, "link/passwd").is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
