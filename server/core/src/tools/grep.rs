//! `grep {pattern, path?, glob?, ignoreCase?, literal?, context?, limit?}` on ripgrep's crates
//! (`ignore` for the walk, `grep-regex` + `grep-searcher` for matching), with Pi 0.73.1's
//! parameters, output format (`path:line: text`, context lines `path-line- text`) and limits:
//! 100 matches, lines cut to 500 chars, 50 KB of output, each with Pi's notice.
//!
//! Like `rg --hidden`: hidden files are searched; `.gitignore` / `.ignore` are respected even
//! outside a git repository (Pi's `rg` needs a repository for that); `.git` is never searched;
//! binary files are skipped. A line longer than 64 MiB gives up its file; matched and context
//! lines are kept only as far as they are shown, and context is read in a stream (issue 19
//! item 5), so memory stays bounded on huge files. Files are visited in name order so results
//! are stable (searched in
//! batches on every core, merged in that order). Open editor buffers are searched as `read`
//! reads them (the editor's view, unsaved changes included), with `read`'s note when the disk
//! differs; other files are read from disk.
//!
//! Pi 1.6's changes: `glob` is relative to `path` (a leading `./` dropped); context lines come
//! as ripgrep gives them (each line once per file, overlapping windows merged); the limit
//! notice appears only when more than `limit` matches exist.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use pi_ai::ToolSpec;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{head_bytes, parse_args, walker, ToolState, MAX_BYTES};
use crate::agent::{Tool, ToolContext, ToolError, ToolOutput};
use crate::fs::Fs;

/// Default match limit (Pi).
pub const GREP_LIMIT: usize = 100;
/// Longest line shown, in chars (Pi's `GREP_MAX_LINE_LENGTH`).
pub const GREP_MAX_LINE_LENGTH: usize = 500;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Args {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    ignore_case: Option<bool>,
    literal: Option<bool>,
    context: Option<f64>,
    limit: Option<f64>,
}

/// The `grep` tool.
pub struct GrepTool {
    root: PathBuf,
    fs: Arc<dyn Fs>,
    state: Arc<ToolState>,
}

impl GrepTool {
    /// A grep tool searching under `fs`'s root (and allowed folders in `state`); open buffers
    /// of `fs` ([`Fs::buffer_paths`]) are searched as `read` reads them.
    pub fn new(fs: Arc<dyn Fs>, state: Arc<ToolState>) -> Self {
        GrepTool {
            root: fs.root().to_path_buf(),
            fs,
            state,
        }
    }
}

/// Pi 1.6's glob clean-up: a leading `./` (after an optional `!`) is dropped, so `./src/*.ts`
/// matches what `src/*.ts` does.
pub(crate) fn strip_dot_slash(glob: &str) -> String {
    let (neg, mut rest) = match glob.strip_prefix('!') {
        Some(r) => ("!", r),
        None => ("", glob),
    };
    while let Some(r) = rest.strip_prefix("./") {
        rest = r;
    }
    format!("{neg}{rest}")
}

/// Pi's `truncateLine`: at most [`GREP_MAX_LINE_LENGTH`] chars, then `... [truncated]`.
pub(crate) fn clip_line(line: &str) -> (String, bool) {
    match line.char_indices().nth(GREP_MAX_LINE_LENGTH) {
        None => (line.to_string(), false),
        Some((i, _)) => (format!("{}... [truncated]", &line[..i]), true),
    }
}

struct Search {
    /// Open editor buffers' texts by path (the editor's view, searched instead of the disk).
    buffers: HashMap<PathBuf, Arc<String>>,
    pattern: String,
    ignore_case: bool,
    literal: bool,
    glob: Option<String>,
    context: usize,
    limit: usize,
}

/// A file's matching lines: `(line number, text)`.
type FileMatches = Vec<(u64, String)>;

/// Most heap one file's search may use for its line buffer (64 MiB): a file whose line is
/// longer is given up with no matches rather than held whole (issue 19 item 5).
const SEARCH_HEAP_LIMIT: usize = 64 * 1024 * 1024;

/// Bytes of a matched or context line kept before it is shown: enough for
/// [`GREP_MAX_LINE_LENGTH`] characters (at most 4 bytes each) after `\r`s are dropped, plus
/// one more character so the cut is still noticed; a 100 MB minified line costs no more.
const LINE_KEEP_BYTES: usize = 4 * (GREP_MAX_LINE_LENGTH + 1) + 64;

/// The part of a matched line worth keeping (see [`LINE_KEEP_BYTES`]): the whole line when
/// short, else its first [`GREP_MAX_LINE_LENGTH`] + 1 characters that are not `\r`.
fn keep_of_line(line: &str) -> String {
    if line.len() <= LINE_KEEP_BYTES {
        return line.to_string();
    }
    line.chars()
        .filter(|c| *c != '\r')
        .take(GREP_MAX_LINE_LENGTH + 1)
        .collect()
}

/// The lines `wanted` (1-based) of the file at `path`, each cut to [`LINE_KEEP_BYTES`] with
/// its `\r`s dropped and decoded lossily, and the file's line count when the read reached its
/// end. Lines are numbered as the search numbers them (ended by `\n`; a lone `\r` ends no
/// line, case ED-03: a `\r`-split count put the match on the wrong line). The file is read in a
/// stream and only up to the last wanted line, so context lines of a match in a huge file cost
/// a few chunks of memory.
fn context_lines(
    path: &Path,
    buffer: Option<&Arc<String>>,
    wanted: &std::collections::BTreeSet<usize>,
) -> (HashMap<usize, String>, Option<usize>) {
    use std::io::Read as _;
    let mut out: HashMap<usize, String> = HashMap::new();
    let Some(&last_wanted) = wanted.iter().next_back() else {
        return (out, None);
    };
    let mut file: Box<dyn std::io::Read> = match buffer {
        Some(text) => Box::new(std::io::Cursor::new(text.as_bytes())),
        None => match std::fs::File::open(path) {
            Ok(f) => Box::new(f),
            Err(_) => return (out, Some(0)),
        },
    };
    let mut buf = vec![0u8; 256 * 1024];
    let mut line = 1usize;
    let mut cur: Vec<u8> = Vec::new();
    let keep = |line: usize, cur: &mut Vec<u8>, part: &[u8]| {
        if wanted.contains(&line) {
            for &b in part {
                if cur.len() >= LINE_KEEP_BYTES {
                    break;
                }
                if b != b'\r' {
                    cur.push(b);
                }
            }
        }
    };
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let mut rest = &buf[..n];
        while let Some(i) = memchr::memchr(b'\n', rest) {
            keep(line, &mut cur, &rest[..i]);
            if wanted.contains(&line) {
                out.insert(line, String::from_utf8_lossy(&cur).into_owned());
            }
            cur.clear();
            line += 1;
            if line > last_wanted {
                return (out, None);
            }
            rest = &rest[i + 1..];
        }
        keep(line, &mut cur, rest);
    }
    if wanted.contains(&line) {
        out.insert(line, String::from_utf8_lossy(&cur).into_owned());
    }
    (out, Some(line))
}

/// Files searched per batch (see [`run`]).
const SEARCH_BATCH: usize = 256;

/// The matching lines (`(line number, text)`, at most `room` per file) of each of `files`, in
/// their order, searched on up to `threads` threads. Unreadable files have none.
fn search_files(
    files: &[PathBuf],
    buffers: &HashMap<PathBuf, Arc<String>>,
    matcher: &grep_regex::RegexMatcher,
    room: usize,
    threads: usize,
) -> Vec<FileMatches> {
    let search = |searcher: &mut grep_searcher::Searcher, path: &Path| {
        let mut found: FileMatches = Vec::new();
        let sink = Lossy(|n, line| {
            found.push((n, keep_of_line(line)));
            Ok(found.len() < room)
        });
        let _ = match buffers.get(path) {
            Some(text) => searcher.search_slice(matcher, text.as_bytes(), sink),
            None => searcher.search_path(matcher, path, sink),
        };
        found
    };
    let new_searcher = || {
        SearcherBuilder::new()
            .line_number(true)
            .binary_detection(BinaryDetection::quit(0))
            .heap_limit(Some(SEARCH_HEAP_LIMIT))
            .build()
    };
    let threads = threads.min(files.len() / 16).max(1);
    if threads == 1 {
        let mut searcher = new_searcher();
        return files.iter().map(|p| search(&mut searcher, p)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<FileMatches> = vec![Vec::new(); files.len()];
    let parts: Vec<Vec<(usize, FileMatches)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut searcher = new_searcher();
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(path) = files.get(i) else { break };
                        let found = search(&mut searcher, path);
                        if !found.is_empty() {
                            mine.push((i, found));
                        }
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_default())
            .collect()
    });
    for (i, found) in parts.into_iter().flatten() {
        out[i] = found;
    }
    out
}

/// The result and the files whose lines it shows.
fn run(
    search_path: &Path,
    s: &Search,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<(ToolOutput, Vec<PathBuf>), ToolError> {
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(s.ignore_case)
        .fixed_strings(s.literal)
        .build(&s.pattern)
        .map_err(|e| ToolError::new(format!("Invalid pattern: {e}")))?;
    let is_dir = search_path.is_dir();
    if !is_dir && !search_path.is_file() {
        return Err(ToolError::new(format!(
            "Path not found: {}",
            search_path.display()
        )));
    }
    let format_path = |p: &Path| -> String {
        if is_dir {
            if let Ok(rel) = p.strip_prefix(search_path) {
                if !rel.as_os_str().is_empty() {
                    return rel.to_string_lossy().replace('\\', "/");
                }
            }
        }
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let mut matches: Vec<(PathBuf, u64, String)> = Vec::new();
    let mut limit_reached = false;
    let mut walk = walker(search_path, s.glob.as_deref())?.build();
    // Files are taken from the walk (name order) in batches searched on every core; results
    // are merged in walk order, so output and the limit's cut are the same as a one-thread
    // search, and the walk stops at the batch where the limit is reached.
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8);
    'walk: loop {
        if cancel.is_cancelled() {
            return Err(ToolError::new("Operation aborted"));
        }
        let batch: Vec<PathBuf> = walk
            .by_ref()
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
            .map(ignore::DirEntry::into_path)
            .take(SEARCH_BATCH)
            .collect();
        if batch.is_empty() {
            break;
        }
        // One match past the limit tells "exactly `limit` matches" from "more" (Pi 1.6).
        let room = s.limit + 1 - matches.len();
        let found = search_files(&batch, &s.buffers, &matcher, room, threads);
        for (path, lines) in batch.iter().zip(found) {
            for (n, line) in lines {
                if matches.len() == s.limit {
                    limit_reached = true;
                    break 'walk;
                }
                matches.push((path.clone(), n, line));
            }
        }
    }
    if matches.is_empty() {
        return Ok((ToolOutput::text("No matches found"), Vec::new()));
    }
    let mut hit_files: Vec<PathBuf> = matches.iter().map(|(p, _, _)| p.clone()).collect();
    hit_files.dedup();
    let mut lines_truncated = false;
    let mut out: Vec<String> = Vec::new();
    if s.context == 0 {
        for (path, n, text) in &matches {
            let clean = text
                .trim_end_matches('\n')
                .trim_end_matches('\r')
                .replace('\r', "");
            let (t, cut) = clip_line(&clean);
            lines_truncated |= cut;
            out.push(format!("{}:{n}: {t}", format_path(path)));
        }
    } else {
        // Context as ripgrep gives it (Pi 1.6 takes it from `rg --context`): per file, each line
        // of the matches' windows once, in order; a match inside another's window is a match
        // line. After the limit, the last match's trailing window is still shown, a further
        // match in it as a context line.
        let mut files: Vec<(&Path, Vec<usize>)> = Vec::new();
        for (path, n, _) in &matches {
            match files.last_mut() {
                Some((p, ns)) if *p == path.as_path() => ns.push(*n as usize),
                _ => files.push((path.as_path(), vec![*n as usize])),
            }
        }
        for (path, hits) in &files {
            let wanted: std::collections::BTreeSet<usize> = hits
                .iter()
                .flat_map(|&n| n.saturating_sub(s.context).max(1)..=n + s.context)
                .collect();
            let (lines, total) = context_lines(path, s.buffers.get(*path), &wanted);
            let shown = format_path(path);
            let hit_set: std::collections::HashSet<usize> = hits.iter().copied().collect();
            for cur in wanted {
                if total.is_some_and(|t| cur > t) {
                    break;
                }
                let (t, cut) = clip_line(lines.get(&cur).map(String::as_str).unwrap_or(""));
                lines_truncated |= cut;
                out.push(if hit_set.contains(&cur) {
                    format!("{shown}:{cur}: {t}")
                } else {
                    format!("{shown}-{cur}- {t}")
                });
            }
        }
    }
    let (text, bytes_cut) = head_bytes(&out.join("\n"));
    let mut details = Map::new();
    let mut notices = Vec::new();
    if limit_reached {
        notices.push(format!(
            "{} matches limit reached. Use limit={} for more, or refine pattern",
            s.limit,
            s.limit * 2
        ));
        details.insert("matchLimitReached".into(), json!(s.limit));
    }
    if bytes_cut {
        notices.push("50.0KB limit reached".to_string());
        details.insert(
            "truncation".into(),
            json!({"truncated": true, "truncatedBy": "bytes"}),
        );
    }
    if lines_truncated {
        notices.push(format!(
            "Some lines truncated to {GREP_MAX_LINE_LENGTH} chars. Use read tool to see full lines"
        ));
        details.insert("linesTruncated".into(), json!(true));
    }
    Ok((super::search_output(text, &notices, details), hit_files))
}

#[async_trait]
impl Tool for GrepTool {
    /// Pi's `promptSnippet` of `grep` (`core/tools/grep.js`, 1.6).
    fn prompt_snippet(&self) -> Option<String> {
        Some("Search file contents for patterns (respects .gitignore)".into())
    }

    /// For the approval policy: reads only.
    fn approval_kind(&self) -> crate::approval::ToolKind {
        crate::approval::ToolKind::ReadOnly
    }

    fn name(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed("grep")
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
 constrained_sampling: None,
            name: "grep".into(),
            description: format!("Search file contents for a pattern. Returns matching lines with file paths and line numbers. Respects .gitignore. Output is truncated to {GREP_LIMIT} matches or {}KB (whichever is hit first). Long lines are truncated to {GREP_MAX_LINE_LENGTH} chars.", MAX_BYTES / 1024),
            parameters: json!({"type":"object","required":["pattern"],"properties":{
                "pattern":{"type":"string","description":"Search pattern (regex or literal string)"},
                "path":{"type":"string","description":"Directory or file to search (default: current directory)"},
                "glob":{"type":"string","description":"Filter files by glob pattern relative to path, e.g. 'src/**/*.ts'. Without '/', e.g. '*.ts', it matches file names at any depth"},
                "ignoreCase":{"type":"boolean","description":"Case-insensitive search (default: false)"},
                "literal":{"type":"boolean","description":"Treat pattern as literal string instead of regex (default: false)"},
                "context":{"type":"number","description":"Number of lines to show before and after each match (default: 0)"},
                "limit":{"type":"number","description":"Maximum number of matches to return (default: 100)"}}}),
        }
    }

    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let a: Args = parse_args("grep", args)?;
        let path = self.state.resolve(
            &self.root,
            a.path.as_deref().filter(|p| !p.is_empty()).unwrap_or("."),
        )?;
        // The editor's view: open buffers under the search path are searched as `read` reads
        // them; a note says where the disk differs by the user's unsaved changes.
        let mut buffers = HashMap::new();
        let mut notes: Vec<(PathBuf, String)> = Vec::new();
        for buffered in self.fs.buffer_paths() {
            if !buffered.starts_with(&path) {
                continue;
            }
            if let Ok(snap) = self.fs.read(&buffered).await {
                buffers.insert(buffered.clone(), snap.text.clone());
                if let Some(note) = self.fs.unsaved_note(&buffered).await {
                    notes.push((buffered, note));
                }
            }
        }
        let search = Search {
            buffers,
            pattern: a.pattern,
            ignore_case: a.ignore_case.unwrap_or(false),
            literal: a.literal.unwrap_or(false),
            glob: a
                .glob
                .map(|g| strip_dot_slash(&g))
                .filter(|g| !g.is_empty()),
            context: a
                .context
                .filter(|c| *c > 0.0)
                .map(|c| c as usize)
                .unwrap_or(0),
            limit: a.limit.map(|l| l.max(1.0) as usize).unwrap_or(GREP_LIMIT),
        };
        let cancel = ctx.cancel.clone();
        let (mut out, hit_files) =
            tokio::task::spawn_blocking(move || run(&path, &search, &cancel))
                .await
                .map_err(|e| ToolError::new(format!("grep failed: {e}")))??;
        // Notes of the buffers whose lines are in the result.
        let shown: Vec<String> = notes
            .into_iter()
            .filter(|(p, _)| hit_files.contains(p))
            .map(|(_, n)| n)
            .collect();
        if !shown.is_empty() {
            if let Some(pi_ai::ContentBlock::Text(t)) = out.content.first_mut() {
                t.text.push_str("\n\n");
                t.text.push_str(&shown.join("\n"));
            }
        }
        Ok(out)
    }
}
