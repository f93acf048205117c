//! Loading a session file: torn tail, damaged lines, v1/v2 migration, assets written inline again.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pi_ai::Message;
use serde_json::{json, Value};

use super::*;

/// Reads and parses a session file. With `repair`, an unterminated last line that does not
/// parse is moved to a `.corrupt` sidecar and cut off (SESS-01), and a complete last line
/// without its newline gets one; damaged middle lines are skipped and counted (SESS-02).
pub fn read_tree(path: &Path, repair: bool) -> Result<(SessionTree, Vec<String>), SessionError> {
    let l = load_file(path, repair, true)?;
    Ok((l.tree, l.warnings))
}

/// A loaded session file.
pub(super) struct Loaded {
    pub(super) tree: SessionTree,
    /// The model-visible messages of the `message` entries, by entry index, as parsed while
    /// loading (`None` for older files, whose entries are migrated first).
    pub(super) messages: Option<Vec<Option<Message>>>,
    pub(super) warnings: Vec<String>,
    /// Indices of the entries of `messages` whose large images' bytes were left out
    /// ([`strip_image_data`]); [`restore_images`] reads back the ones a context needs.
    pub(super) stripped: Vec<usize>,
    /// Entry lines naming images in `assets/` (the older pi-lsp form) whose bytes were all
    /// read back; 0 when one was missing.
    pub(super) assets_read: usize,
}

/// A line made ready for the tree where it was parsed ([`read::lines`]'s `finish`).
pub(super) enum Placed {
    /// A v3 entry with its model-visible message (none when deferred; boxed, so a deferred
    /// load does not move a message's worth of empty bytes with each entry), and whether that
    /// message's large image bytes were left out.
    Entry(Entry, Option<Box<Message>>, bool),
    /// A v3 line without id or type.
    NoEntry,
    /// Any other line, placed on the loading thread.
    Line(read::Line),
}

/// One line of a file, parsed.
pub(super) enum ParsedLine {
    /// A version 3 entry line.
    Parts(Box<line::LineParts>),
    /// A line read as a whole value: older files (migrated), lines naming assets.
    Value(Value),
    /// Not a JSON object, NUL-filled, not UTF-8.
    Damaged,
}

/// [`read_tree`], keeping the messages parsed on the way; `deferred`: keeping only their
/// summaries ([`line::MessageSummary`]: the context is built later, from the file).
pub(super) fn load_file(path: &Path, repair: bool, deferred: bool) -> Result<Loaded, SessionError> {
    let file = std::fs::File::open(path).map_err(io(path))?;
    let size = file.metadata().map_err(io(path))?.len() as usize;
    let mut warnings = Vec::new();
    let mut good_len = size;
    if let Some((start, tail)) = read::tail(&file, size).map_err(io(path))? {
        good_len = start + tail.len();
        if serde_json::from_slice::<Value>(&tail).is_err() {
            good_len = start;
            if repair {
                let sidecar = path.with_extension("jsonl.corrupt");
                std::fs::write(&sidecar, &tail).map_err(io(&sidecar))?;
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(io(path))?;
                f.set_len(start as u64).map_err(io(path))?;
                warnings.push(format!(
                    "cut an unterminated last line ({} bytes) off {}; it was saved to {}",
                    tail.len(),
                    path.display(),
                    sidecar.display()
                ));
            }
        } else if repair {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(io(path))?;
            f.write_all(b"\n").map_err(io(path))?;
        }
    }
    // The header: the first line that is an object (damaged lines before it are skipped).
    let mut skipped = 0;
    let mut header = None;
    let pos = read::scan_lines(&file, good_len, |text| {
        if text.iter().all(u8::is_ascii_whitespace) {
            return false;
        }
        match serde_json::from_slice::<Value>(text) {
            Ok(v) if v.is_object() => {
                header = Some(v);
                true
            }
            _ => {
                skipped += 1;
                false
            }
        }
    })
    .map_err(io(path))?
    .unwrap_or(good_len);
    let Some(header) = header.filter(|h| h["type"] == "session") else {
        return Err(SessionError::NoHeader(path.to_path_buf()));
    };
    let version = header["version"].as_u64().unwrap_or(1);
    let v3 = version >= 3;
    let dir = path.parent();
    let mut image_warnings = Vec::new();
    let mut asset_lines = 0;
    let src = Arc::new(tree::FileText::new(file, path));
    let mut tree = SessionTree::new(header);
    let mut values = Vec::new();
    let mut messages: Vec<Option<Message>> = Vec::new();
    let mut stripped = Vec::new();
    // A v3 line parsed into its parts becomes its entry on the thread that parsed it (what
    // it drops is freed there): its message summarized (deferred) or its image bytes left out.
    let finish = |l: read::Line| match l.parsed {
        ParsedLine::Parts(parts) => match Entry::from_file(&src, l.offset, l.len, l.hash, *parts) {
            Some((mut entry, message)) if deferred => {
                entry.summarize(message.as_deref());
                Placed::Entry(entry, None, false)
            }
            Some((entry, mut message)) => {
                let stripped = message.as_deref_mut().is_some_and(strip_image_data);
                Placed::Entry(entry, message, stripped)
            }
            None => Placed::NoEntry,
        },
        _ => Placed::Line(l),
    };
    // Each piece's lines as soon as they are parsed, in file order.
    let mut take = |k: usize, n: usize, lines: &mut Vec<Placed>| {
        if k == 0 {
            // As many lines in every piece as in the first.
            let guess = lines.len().saturating_mul(n).saturating_add(16);
            if v3 {
                tree.reserve(guess);
                if !deferred {
                    messages.reserve(guess);
                }
            } else {
                values.reserve(guess);
            }
        }
        for placed in lines.drain(..) {
            let (entry, message, strip) = match placed {
                Placed::Entry(entry, message, strip) => (entry, message, strip),
                Placed::NoEntry => {
                    tree.warnings
                        .push("skipped an entry without id or type".into());
                    continue;
                }
                Placed::Line(read::Line {
                    offset,
                    len,
                    hash,
                    parsed,
                }) => {
                    let entry = match parsed {
                        // Older files are migrated as values first.
                        ParsedLine::Value(mut v) if !v3 => {
                            if let Some(dir) = dir {
                                load_images(&mut v, dir, &mut image_warnings);
                            }
                            values.push(v);
                            continue;
                        }
                        ParsedLine::Parts(parts) => {
                            Entry::from_file(&src, offset, len, hash, *parts)
                        }
                        ParsedLine::Value(mut v) => {
                            let changed =
                                dir.is_some_and(|d| load_images(&mut v, d, &mut image_warnings));
                            if changed {
                                asset_lines += 1;
                                Entry::from_value_converted(&v)
                            } else {
                                // Unchanged: the entry keeps its line as stored.
                                let parts = line::line_from_value(&v, true);
                                Entry::from_file(&src, offset, len, hash, parts)
                            }
                        }
                        ParsedLine::Damaged => {
                            skipped += 1;
                            continue;
                        }
                    };
                    let Some((mut entry, mut message)) = entry else {
                        tree.warnings
                            .push("skipped an entry without id or type".into());
                        continue;
                    };
                    if deferred {
                        entry.summarize(message.take().as_deref());
                    }
                    // Image bytes are not kept while loading (SESS-05); the context reads
                    // back those it sends.
                    let strip = message.as_deref_mut().is_some_and(strip_image_data);
                    (entry, message, strip)
                }
            };
            if deferred {
                tree.push_entry(entry);
                continue;
            }
            let i = tree.push_entry(entry);
            if strip {
                stripped.push(i);
            }
            let message = message.map(|m| *m);
            match messages.get_mut(i) {
                Some(slot) => *slot = message,
                None => messages.push(message),
            }
        }
    };
    read::lines(
        &src.file,
        pos.min(good_len),
        good_len,
        |buf, lines, emit| parse_lines_each(buf, lines, v3, deferred, emit),
        finish,
        &mut take,
    )
    .map_err(io(path))?;
    let (tree, messages) = if v3 {
        (tree, (!deferred).then_some(messages))
    } else {
        (
            SessionTree::from_values(tree.header, values, Vec::new()),
            None,
        )
    };
    if skipped > 0 {
        warnings.push(format!(
            "skipped {skipped} damaged line(s) in {}",
            path.display()
        ));
    }
    // Every image it names read back: the file could be written inline.
    let assets_read = if image_warnings.is_empty() {
        asset_lines
    } else {
        0
    };
    warnings.extend(image_warnings);
    warnings.extend(tree.warnings.iter().cloned());
    Ok(Loaded {
        tree,
        messages,
        warnings,
        stripped,
        assets_read,
    })
}

/// Parses the entry lines `buf[start..end]` of `lines` (after the header), in order, handing
/// each to `emit` as soon as it is parsed (one call per line of `lines`; nothing collected in
/// between): v3 lines in one pass over the buffer ([`line::parse_each`]), any line it does not
/// take one by one. `deferred`: the messages are summarized ([`line::LineParts::summarize`])
/// where they were parsed (the thread that reads the piece).
pub(super) fn parse_lines_each(
    buf: &[u8],
    lines: &[(usize, usize)],
    v3: bool,
    deferred: bool,
    emit: &mut dyn FnMut(ParsedLine),
) {
    if !v3 {
        for &(s, e) in lines {
            emit(parse_line(&buf[s..e], false));
        }
        return;
    }
    let mut at = 0;
    line::parse_each(buf, lines, deferred, &mut |parts| {
        let (s, e) = lines[at];
        at += 1;
        let mut line = match parts {
            Some(parts) => ParsedLine::Parts(Box::new(parts)),
            None => parse_line(&buf[s..e], true),
        };
        if let (true, ParsedLine::Parts(parts)) = (deferred, &mut line) {
            parts.summarize();
        }
        emit(line);
    });
}

/// Parses one entry line (after the header). `v3` lines are parsed straight into entries and
/// messages; older ones into values (they are migrated). Lines the fast path does not take
/// (images kept in assets among them) are read as values.
pub(super) fn parse_line(line: &[u8], v3: bool) -> ParsedLine {
    let object = |v: Value| {
        if v.is_object() {
            ParsedLine::Value(v)
        } else {
            ParsedLine::Damaged
        }
    };
    let Ok(text) = std::str::from_utf8(line) else {
        return ParsedLine::Damaged;
    };
    match v3.then(|| line::parse_fast(text)).flatten() {
        Some(parts) => ParsedLine::Parts(Box::new(parts)),
        None => serde_json::from_str(text).map_or(ParsedLine::Damaged, object),
    }
}

/// Writes the v3 session file `path` again from its loaded `tree` (whose entries hold the
/// images an older pi-lsp kept in `assets/` inline): the original is copied to
/// `<file>.assets.bak` first, the new text goes to a temporary file renamed over the
/// original. Lines are the entries' text as loaded (unchanged ones byte for byte). Returns
/// the backup's path.
pub(super) fn write_inline(path: &Path, tree: &SessionTree) -> Result<PathBuf, SessionError> {
    let backup = path.with_extension("jsonl.assets.bak");
    std::fs::copy(path, &backup).map_err(io(&backup))?;
    let tmp = path.with_extension("jsonl.inline");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(io(&tmp))?);
    let header = tree.header.to_string();
    for line in std::iter::once(header.as_str().into()).chain(tree.entries.iter().map(|e| e.text()))
    {
        let line = line
            .replace('\u{2028}', "\\u2028")
            .replace('\u{2029}', "\\u2029");
        out.write_all(line.as_bytes())
            .and_then(|()| out.write_all(b"\n"))
            .map_err(io(&tmp))?;
    }
    out.into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    Ok(backup)
}

/// Rewrites an older (v1/v2) session file as v3 from its migrated `tree`: the original is
/// copied to `<file>.v<N>.bak` first, the new text is written to a temporary file and renamed
/// over the original. Returns the backup's path.
pub(super) fn migrate_file(path: &Path, tree: &mut SessionTree) -> Result<PathBuf, SessionError> {
    let version = tree.header["version"].as_u64().unwrap_or(1);
    let backup = path.with_extension(format!("jsonl.v{version}.bak"));
    std::fs::copy(path, &backup).map_err(io(&backup))?;
    tree.header["version"] = json!(SESSION_VERSION);
    let mut text = String::new();
    let header = tree.header.to_string();
    for line in std::iter::once(header.as_str().into()).chain(tree.entries.iter().map(|e| e.text()))
    {
        text.push_str(
            &line
                .replace('\u{2028}', "\\u2028")
                .replace('\u{2029}', "\\u2029"),
        );
        text.push('\n');
    }
    let tmp = path.with_extension("jsonl.migrating");
    std::fs::write(&tmp, text).map_err(io(&tmp))?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    Ok(backup)
}
