//! Matching an `edit` call's `oldText` against a file's text, with the result always expressed
//! as byte ranges of the *original* text, so everything outside the matched ranges (other lines'
//! tabs, line endings, a BOM, a missing final newline) stays byte-for-byte as it was.
//!
//! Three levels, tried in order per edit; the first level with any match decides (one match:
//! use it; more: a "not unique" error; the next level is tried only on zero matches):
//!
//! 1. **Exact** on a line-ending-normalised view: `\r\n` and lone `\r` read as `\n` (Pi
//!    normalises both the file and `oldText` to LF the same way). The BOM is never part of the
//!    view, so it is kept once and never gained (EDIT-02).
//! 2. **Pi's fuzzy normalisation** (`normalizeForFuzzyMatch` in Pi 0.73.1's `edit-diff.js`):
//!    NFKC, trailing whitespace stripped per line, smart single/double quotes to ASCII, the
//!    dashes U+2010–U+2015 and U+2212 to `-`, special spaces to ` `. Difference from Pi, chosen
//!    on purpose: Pi then rewrites the *whole file* in normalised form (every line loses its
//!    trailing whitespace, every smart quote becomes ASCII); here the match is mapped back to
//!    the original bytes and only that range is replaced. NFKC is applied per segment (a
//!    character with the combining marks after it), the same way on both sides.
//! 3. **Whitespace-tolerant whole lines** (not in Pi; case EDIT-04): every line of `oldText`
//!    must equal a file line after trimming and collapsing whitespace runs; blank lines must
//!    match in number. The replacement covers those whole lines, and `newText` is re-indented
//!    in the file's style (e.g. four spaces → one tab when the matched lines show that
//!    correspondence), so tabs on the other lines are untouched and the edited line keeps a tab.
//!
//! Matches are counted at every start offset, so overlapping repeats count separately (EDIT-03).
//! Matching is substring matching at levels 1 and 2: a partial line is fine when it is unique.
//! Pi has no replace-all mode, and neither does this tool.

use std::ops::Range;

use unicode_normalization::char::{canonical_combining_class, compose};
use unicode_normalization::UnicodeNormalization;

/// Which level matched (see module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Exact,
    Fuzzy,
    Whitespace,
}

/// A found match: the original byte range and the text to put there (line endings and
/// indentation already converted to the file's style).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub range: Range<usize>,
    pub new_text: String,
    pub level: Level,
}

/// Why an `oldText` could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MatchError {
    /// Not found at any level; the closest region of the file, rendered for the model.
    NotFound { closest: Option<String> },
    /// Found more than once; 1-based starting line of each match.
    NotUnique { lines: Vec<usize> },
}

/// A normalised view of a text: `text`, and for each of its bytes the original byte range of
/// the character (or segment) that produced it.
struct View {
    text: String,
    start: Vec<usize>,
    end: Vec<usize>,
}

impl View {
    fn with_capacity(n: usize) -> Self {
        View {
            text: String::with_capacity(n),
            start: Vec::with_capacity(n),
            end: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, s: &str, orig: Range<usize>) {
        self.text.push_str(s);
        for _ in 0..s.len() {
            self.start.push(orig.start);
            self.end.push(orig.end);
        }
    }

    /// The original byte range of view bytes `r` (non-empty, on char boundaries).
    fn original(&self, r: &Range<usize>) -> Range<usize> {
        self.start[r.start]..self.end[r.end - 1]
    }

    /// 1-based line of view offset `at`.
    fn line_of(&self, at: usize) -> usize {
        self.text.as_bytes()[..at]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    }
}

/// The line ending new lines get: the file's first line ending (Pi's `detectLineEnding`).
pub(crate) fn detect_eol(text: &str) -> &'static str {
    match text.find('\n') {
        Some(i) if i > 0 && text.as_bytes()[i - 1] == b'\r' => "\r\n",
        _ => "\n",
    }
}

/// The line ending of the line holding byte `offset` of `text` (Pi 1.6's `getLineEndingAt`):
/// its own `\n` or `\r\n`, or the line before's for an unterminated last line; a lone `\r`
/// counts only in a file without any `\n`.
pub(crate) fn line_ending_at(text: &str, offset: usize) -> &'static str {
    let b = text.as_bytes();
    let lf = memchr::memchr(b'\n', &b[offset.min(b.len())..])
        .map(|i| offset + i)
        .or_else(|| memchr::memrchr(b'\n', &b[..offset.min(b.len())]));
    match lf {
        None if b.contains(&b'\r') => "\r",
        None => "\n",
        Some(i) if i > 0 && b[i - 1] == b'\r' => "\r\n",
        Some(_) => "\n",
    }
}

/// `\r\n` and lone `\r` as `\n` (Pi's `normalizeToLF`).
pub(crate) fn to_lf(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\r', "\n")
}

/// The text after a leading BOM, and the BOM's length in bytes (0 or 3).
fn body_start(text: &str) -> usize {
    if text.starts_with('\u{FEFF}') {
        3
    } else {
        0
    }
}

/// Level-1 view: the text after any BOM with line endings read as `\n`.
fn lf_view(text: &str) -> View {
    let mut v = View::with_capacity(text.len());
    let base = body_start(text);
    let body = &text[base..];
    let mut it = body.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        let at = base + i;
        if c == '\r' {
            if let Some((_, '\n')) = it.peek() {
                it.next();
                v.push("\n", at..at + 2);
            } else {
                v.push("\n", at..at + 1);
            }
        } else {
            let mut buf = [0u8; 4];
            v.push(c.encode_utf8(&mut buf), at..at + c.len_utf8());
        }
    }
    v
}

/// Pi's per-character replacements after NFKC (quotes, dashes, special spaces).
fn fuzzy_char(c: char) -> char {
    match c {
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' => '\'',
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' => '"',
        '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
        '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        other => other,
    }
}

/// Level-2 view: Pi's `normalizeForFuzzyMatch` applied to the level-1 view, mapped back.
fn fuzzy_view(text: &str) -> View {
    let lf = lf_view(text);
    let mut v = View::with_capacity(lf.text.len());
    // Pending trailing whitespace of the current line: dropped at a line end.
    let mut pending: Vec<(String, Range<usize>)> = Vec::new();
    let emit =
        |v: &mut View, s: &str, r: Range<usize>, pending: &mut Vec<(String, Range<usize>)>| {
            if s.chars().all(char::is_whitespace) && s != "\n" {
                pending.push((s.to_string(), r));
                return;
            }
            if s == "\n" {
                pending.clear();
            } else {
                for (p, pr) in pending.drain(..) {
                    v.push(&p, pr);
                }
            }
            v.push(s, r);
        };
    // Segments: a character and the combining marks / composing characters after it.
    let chars: Vec<(usize, char)> = lf.text.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let mut j = i + 1;
        while j < chars.len() {
            let c = chars[j].1;
            if c == '\n' {
                break;
            }
            if canonical_combining_class(c) != 0 || compose(chars[j - 1].1, c).is_some() {
                j += 1;
            } else {
                break;
            }
        }
        let seg_start = chars[i].0;
        let seg_end = chars.get(j).map(|(o, _)| *o).unwrap_or(lf.text.len());
        let orig = lf.start[seg_start]..lf.end[seg_end - 1];
        let seg = &lf.text[seg_start..seg_end];
        if seg == "\n" {
            emit(&mut v, "\n", orig, &mut pending);
        } else {
            for c in seg.nfkc() {
                let c = fuzzy_char(c);
                let mut buf = [0u8; 4];
                emit(&mut v, c.encode_utf8(&mut buf), orig.clone(), &mut pending);
            }
        }
        i = j;
    }
    v
}

/// Byte offsets of every match of `needle` in `hay`, overlapping ones included (SIMD substring
/// search, `memchr::memmem`; a UTF-8 needle only matches at char boundaries).
pub(crate) fn find_all(hay: &str, needle: &str) -> Vec<usize> {
    let mut out = Vec::new();
    if needle.is_empty() {
        return out;
    }
    let finder = memchr::memmem::Finder::new(needle.as_bytes());
    let mut from = 0;
    while let Some(i) = finder.find(&hay.as_bytes()[from..]) {
        let at = from + i;
        out.push(at);
        // Advance one char, not one match, so overlapping repeats count.
        from = at + hay[at..].chars().next().map(char::len_utf8).unwrap_or(1);
        if from > hay.len() {
            break;
        }
    }
    out
}

/// Trims and collapses whitespace runs to one space.
fn ws_norm(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn indent_of(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

/// Re-indents `new` (LF) from the model's indentation to the file's, learning the mapping from
/// the matched (old line, file line) pairs.
fn reindent(new: &str, pairs: &[(String, String)]) -> String {
    // A consistent "w spaces = 1 tab" correspondence, if the pairs show one.
    let mut width: Option<usize> = None;
    let mut consistent = true;
    for (o, f) in pairs {
        let (s, t) = (o.len(), f.len());
        let all_sp = o.chars().all(|c| c == ' ');
        let all_tab = f.chars().all(|c| c == '\t');
        if s == 0 && t == 0 {
            continue;
        }
        if all_sp && all_tab && t > 0 && s > 0 && s % t == 0 {
            let w = s / t;
            if width.is_some_and(|x| x != w) {
                consistent = false;
            }
            width = Some(w);
        } else {
            consistent = false;
        }
    }
    let width = width.filter(|_| consistent);
    new.split('\n')
        .map(|line| {
            if line.trim().is_empty() {
                return line.to_string();
            }
            let ind = indent_of(line);
            let rest = &line[ind.len()..];
            if let Some((_, f)) = pairs.iter().find(|(o, _)| o == ind) {
                return format!("{f}{rest}");
            }
            if let Some(w) = width {
                let cols: usize = ind.chars().map(|c| if c == '\t' { w } else { 1 }).sum();
                return format!("{}{}{rest}", "\t".repeat(cols / w), " ".repeat(cols % w));
            }
            if let Some((o, f)) = pairs.first() {
                if let Some(tail) = ind.strip_prefix(o.as_str()) {
                    return format!("{f}{tail}{rest}");
                }
            }
            line.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Level 3 (see module docs): whole lines equal after whitespace normalisation.
fn whitespace_match(
    lf: &View,
    old: &str,
    new: &str,
) -> Result<Option<(Range<usize>, String)>, MatchError> {
    let ends_nl = old.ends_with('\n');
    let old_lines: Vec<&str> = old.strip_suffix('\n').unwrap_or(old).split('\n').collect();
    if old_lines.iter().all(|l| l.trim().is_empty()) {
        return Ok(None);
    }
    let want: Vec<String> = old_lines.iter().map(|l| ws_norm(l)).collect();
    // Line start offsets in the view.
    let mut starts = vec![0usize];
    starts.extend(lf.text.match_indices('\n').map(|(i, _)| i + 1));
    let lines: Vec<&str> = lf.text.split('\n').collect();
    let k = want.len();
    if lines.len() < k {
        return Ok(None);
    }
    let mut hits = Vec::new();
    for j in 0..=lines.len() - k {
        if (0..k).all(|i| ws_norm(lines[j + i]) == want[i]) {
            hits.push(j);
        }
    }
    match hits.as_slice() {
        [] => Ok(None),
        [j] => {
            let j = *j;
            let start = starts[j];
            let mut end = starts[j + k - 1] + lines[j + k - 1].len();
            if ends_nl && end < lf.text.len() {
                end += 1;
            }
            let pairs: Vec<(String, String)> = (0..k)
                .filter(|i| !old_lines[*i].trim().is_empty())
                .map(|i| {
                    (
                        indent_of(old_lines[i]).to_string(),
                        indent_of(lines[j + i]).to_string(),
                    )
                })
                .collect();
            let new_text = reindent(new, &pairs);
            let range = if end > start {
                lf.original(&(start..end))
            } else {
                let at = lf
                    .start
                    .get(start)
                    .copied()
                    .unwrap_or(lf.end.last().copied().unwrap_or(0));
                at..at
            };
            Ok(Some((range, new_text)))
        }
        many => Err(MatchError::NotUnique {
            lines: many.iter().map(|j| j + 1).collect(),
        }),
    }
}

/// Finds `old` (one edit's `oldText`) in `text`; `new` is its `newText`. See module docs.
///
/// A file with a BOM: an `oldText` starting with U+FEFF (the model copied it from what `read`
/// showed) starts at the body, and a U+FEFF at the start of its `newText` goes too: the BOM is
/// the file's, kept once (case EDIT-02; Pi 1.6's edit fails to match such an `oldText`).
pub(crate) fn find(text: &str, old: &str, new: &str) -> Result<Found, MatchError> {
    let (old, new) = match old.strip_prefix('\u{FEFF}') {
        Some(rest) if body_start(text) > 0 => (rest, new.strip_prefix('\u{FEFF}').unwrap_or(new)),
        _ => (old, new),
    };
    let eol = detect_eol(text);
    let old_lf = to_lf(old);
    let new_lf = to_lf(new);
    let with_eol = |s: &str| {
        if eol == "\n" {
            s.to_string()
        } else {
            s.replace('\n', eol)
        }
    };
    let base = body_start(text);
    let body = &text[base..];
    // Level 1, fastest path: an `oldText` of one line (no line ending) matches the same ranges
    // of the body as of the view, whatever the line endings (a range without `\r` or `\n`
    // reads the same in both), so a single match needs no look at the line endings. No match or
    // several go on below (the view's line numbers differ where a lone `\r` ends a line).
    if !old_lf.contains('\n') {
        if let [at] = find_all(body, &old_lf).as_slice() {
            let ending = line_ending_at(text, base + *at);
            return Ok(Found {
                range: base + *at..base + *at + old_lf.len(),
                new_text: if ending == "\n" {
                    new_lf
                } else {
                    new_lf.replace('\n', ending)
                },
                level: Level::Exact,
            });
        }
    }
    // Level 1, fast path: when the body (after any BOM) ends every line the same way, all
    // `\n` or all `\r\n`, the view is the body itself with `\n` written as that ending, so
    // the match is a plain search for `oldText` in that form (no view of the whole text is
    // built). A needle never starts or ends inside a `\r\n`, so matches and their count are
    // the same as in the view.
    let crs = memchr::memchr_iter(b'\r', body.as_bytes()).count();
    let uniform = crs == 0 || {
        let lfs = memchr::memchr_iter(b'\n', body.as_bytes()).count();
        lfs == crs && memchr::memmem::find_iter(body.as_bytes(), b"\r\n").count() == crs
    };
    if uniform {
        let needle = if crs == 0 {
            old_lf.clone()
        } else {
            old_lf.replace('\n', "\r\n")
        };
        match find_all(body, &needle).as_slice() {
            [] => {}
            [at] => {
                return Ok(Found {
                    range: base + *at..base + *at + needle.len(),
                    new_text: with_eol(&new_lf),
                    level: Level::Exact,
                })
            }
            many => {
                return Err(MatchError::NotUnique {
                    lines: many
                        .iter()
                        .map(|h| memchr::memchr_iter(b'\n', &body.as_bytes()[..*h]).count() + 1)
                        .collect(),
                })
            }
        }
    }
    let lf = lf_view(text);
    for level in [Level::Exact, Level::Fuzzy] {
        // The fuzzy view is built only when the exact level found nothing.
        let fuzzy;
        let (view, needle) = if level == Level::Exact {
            (&lf, old_lf.clone())
        } else {
            fuzzy = fuzzy_view(text);
            (&fuzzy, fuzzy_view(&old_lf).text)
        };
        let hits = find_all(&view.text, &needle);
        match hits.as_slice() {
            [] => continue,
            [at] => {
                let range = view.original(&(*at..*at + needle.len()));
                return Ok(Found {
                    new_text: keep_endings(
                        &text[range.clone()],
                        &new_lf,
                        line_ending_at(text, range.start),
                    ),
                    range,
                    level,
                });
            }
            many => {
                return Err(MatchError::NotUnique {
                    lines: many.iter().map(|h| view.line_of(*h)).collect(),
                })
            }
        }
    }
    if let Some((range, new_text)) = whitespace_match(&lf, &old_lf, &new_lf)? {
        return Ok(Found {
            new_text: keep_endings(
                &text[range.clone()],
                &new_text,
                line_ending_at(text, range.start),
            ),
            range,
            level: Level::Whitespace,
        });
    }
    Err(MatchError::NotFound {
        closest: closest_region(text, old),
    })
}

/// `new_lf` (line ends as `\n`) written with the line endings of `original`, the matched text
/// of a file whose lines do not all end the same way (case ED-03: a lone `\r` of a progress
/// line, CRLF and LF mixed): the k-th line end of the new text is the k-th one of the matched
/// text, and line ends beyond those are `eol` (the ending of the line where the match starts,
/// as Pi 1.6 writes every `\n` of the new text). So a replacement that
/// keeps the lines' structure keeps every ending byte for byte.
fn keep_endings(original: &str, new_lf: &str, eol: &str) -> String {
    let b = original.as_bytes();
    let mut ends: Vec<&str> = Vec::new();
    let mut i = 0;
    while let Some(k) = memchr::memchr2(b'\r', b'\n', &b[i..]) {
        let at = i + k;
        if b[at] == b'\r' && b.get(at + 1) == Some(&b'\n') {
            ends.push("\r\n");
            i = at + 2;
        } else {
            ends.push(if b[at] == b'\r' { "\r" } else { "\n" });
            i = at + 1;
        }
    }
    let mut out = String::with_capacity(new_lf.len() + ends.len());
    for (k, line) in new_lf.split('\n').enumerate() {
        if k > 0 {
            out.push_str(ends.get(k - 1).copied().unwrap_or(eol));
        }
        out.push_str(line);
    }
    out
}

/// Tabs as `→`, spaces as `·` (EDIT-04's failure display).
pub(crate) fn visible(s: &str) -> String {
    s.replace('\t', "→").replace(' ', "·")
}

/// Character-bigram similarity in 0..=1 (Dice coefficient) of two normalised lines.
fn similarity(a: &str, b: &str) -> f64 {
    if a == b {
        return 1.0;
    }
    if a.is_empty() || b.is_empty() || a.len() > 400 || b.len() > 400 {
        return 0.0;
    }
    let grams = |s: &str| -> Vec<(char, char)> {
        let cs: Vec<char> = s.chars().collect();
        let mut g: Vec<(char, char)> = cs.windows(2).map(|w| (w[0], w[1])).collect();
        g.sort_unstable();
        g
    };
    let (ga, gb) = (grams(a), grams(b));
    if ga.is_empty() || gb.is_empty() {
        return 0.0;
    }
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < ga.len() && j < gb.len() {
        match ga[i].cmp(&gb[j]) {
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
        }
    }
    2.0 * common as f64 / (ga.len() + gb.len()) as f64
}

/// Most lines shown of a closest region.
const CLOSEST_MAX_LINES: usize = 20;

/// The region of `text` most similar to `old`, as numbered lines with whitespace made visible,
/// or `None` when nothing is similar. Work is bounded for huge files (then only windows with a
/// line equal after whitespace normalisation are scored).
pub(crate) fn closest_region(text: &str, old: &str) -> Option<String> {
    let lf = lf_view(text);
    let lines: Vec<&str> = lf.text.split('\n').collect();
    let old_lf = to_lf(old);
    let old_lines: Vec<&str> = old_lf
        .strip_suffix('\n')
        .unwrap_or(&old_lf)
        .split('\n')
        .collect();
    let k = old_lines.len().clamp(1, lines.len().max(1));
    let want: Vec<String> = old_lines.iter().take(k).map(|l| ws_norm(l)).collect();
    let norm: Vec<String> = lines.iter().map(|l| ws_norm(l)).collect();
    let cheap = lines.len().saturating_mul(k) > 2_000_000;
    let mut best: Option<(f64, usize)> = None;
    for j in 0..=lines.len().saturating_sub(k) {
        let mut score = 0.0;
        for (line, w) in norm.iter().skip(j).zip(&want) {
            score += if cheap {
                f64::from(u8::from(line == w))
            } else {
                similarity(line, w)
            };
        }
        if score > 0.0 && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, j));
        }
    }
    let (score, j) = best?;
    if score / (k as f64) < 0.3 {
        return None;
    }
    let shown = k.min(CLOSEST_MAX_LINES);
    let mut out = format!(
        "Closest text in the file, lines {}-{} (→ is a tab, · a space):",
        j + 1,
        j + shown
    );
    for (i, l) in lines.iter().enumerate().skip(j).take(shown) {
        out.push_str(&format!("\n{:>5}  {}", i + 1, visible(l)));
    }
    out.push_str("\nYour oldText:");
    for l in old_lines.iter().take(CLOSEST_MAX_LINES) {
        out.push_str(&format!("\n       {}", visible(l)));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Level 1 through the view, as the fast path must behave.
    fn exact_in_view(text: &str, old: &str) -> Result<Range<usize>, Vec<usize>> {
        let lf = lf_view(text);
        // A BOM copied into `oldText` is the file's (see `find`).
        let old = match old.strip_prefix('\u{FEFF}') {
            Some(rest) if body_start(text) > 0 => rest,
            _ => old,
        };
        let needle = to_lf(old);
        match find_all(&lf.text, &needle).as_slice() {
            [at] => Ok(lf.original(&(*at..*at + needle.len()))),
            many => Err(many.iter().map(|h| lf.line_of(*h)).collect()),
        }
    }

    /// Case EDIT-02: `read` shows a UTF-8 BOM as U+FEFF; a model that copies it into
    /// `oldText` and `newText` edits the body, and the file keeps exactly one BOM.
    #[test]
    fn a_bom_copied_from_read_into_old_text_is_the_files_and_stays_once() {
        let text = "\u{FEFF}name,age\r\nbob,3\r\n";
        let found = find(text, "\u{FEFF}name,age", "\u{FEFF}name,years").unwrap();
        let mut out = text.to_string();
        out.replace_range(found.range.clone(), &found.new_text);
        assert_eq!(
            (out.as_str(), found.level),
            ("\u{FEFF}name,years\r\nbob,3\r\n", Level::Exact)
        );
        // Only the BOM's own copy goes: a newText without it is taken as written.
        let found = find(text, "\u{FEFF}name,age", "id,name,age").unwrap();
        assert_eq!(
            (found.range, found.new_text.as_str()),
            (3..11, "id,name,age")
        );
    }

    #[test]
    fn fast_paths_agree_with_the_view() {
        let texts = [
            "a\r\nfoo\r\nfoo\r\nfoo\r\nb",
            "\u{FEFF}name\r\nfoo\r\nbar\r\n",
            "\u{FEFF}x\nfoo\nfoo\ny",
            "plain\nfoo\n",
            // Mixed and lone-`\r` endings: one-line needles take the body search, others the
            // view; line numbers of repeats count a lone `\r` as a line end.
            "a\rfoo\rfoo\r\nbar\nb",
            "\u{FEFF}mixed\r\nname\rbar\nfoo\r",
        ];
        let needles = [
            "foo\nfoo",
            "\nfoo",
            "foo\n",
            "name",
            "bar\n",
            "b",
            "x\nfoo",
            "foo",
            "\u{FEFF}x",
        ];
        for t in texts {
            for n in needles {
                let want = exact_in_view(t, n);
                let got = find(t, n, "N");
                match (&want, &got) {
                    (Ok(r), Ok(f)) => {
                        assert_eq!((&f.range, f.level), (r, Level::Exact), "{t:?} {n:?}")
                    }
                    (Err(lines), Err(MatchError::NotUnique { lines: l })) if lines.len() > 1 => {
                        assert_eq!(l, lines, "{t:?} {n:?}")
                    }
                    (Err(lines), Ok(f)) if lines.is_empty() => {
                        assert_ne!(f.level, Level::Exact, "{t:?} {n:?}")
                    }
                    (Err(lines), Err(_)) if lines.is_empty() => {}
                    _ => panic!("{t:?} {n:?}: view {want:?}, find {got:?}"),
                }
            }
        }
    }

    #[test]
    fn fuzzy_maps_back_to_original_bytes() {
        let text = "say \u{201C}hi\u{201D}  \nnext\u{00A0}line\n";
        let f = find(text, "say \"hi\"\nnext line", "X").unwrap();
        assert_eq!(f.level, Level::Fuzzy);
        assert_eq!(
            &text[f.range.clone()],
            "say \u{201C}hi\u{201D}  \nnext\u{00A0}line"
        );
    }

    #[test]
    fn combining_marks_match_precomposed() {
        let text = "caf\u{0065}\u{0301} = 1\n";
        let f = find(text, "caf\u{00E9} = 1", "x").unwrap();
        assert_eq!(f.range, 0..text.len() - 1);
    }

    #[test]
    fn reindents_spaces_to_tabs() {
        let text = "func f() {\n\treturn 1\n}\n";
        let f = find(text, "    return 1", "    return 2").unwrap();
        assert_eq!(f.level, Level::Whitespace);
        assert_eq!(f.new_text, "\treturn 2");
        assert_eq!(&text[f.range], "\treturn 1");
    }
}
