//! Reading a session file for loading: its torn tail, its header, and its entry lines read and
//! parsed in pieces on every core (a piece's bytes are parsed while they are still in the
//! cache, and no core waits for the whole file to be copied first).
//!
//! A piece is the bytes `[a, b)` of the file plus the rest of the line that starts before `b`;
//! it holds the lines that start in `[a, b)`. A thread reads its pieces into one buffer that it
//! reuses; entries keep where their line is in the file (and its hash), not its bytes.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::ParsedLine;

/// The bytes of a piece before its extension (the rest of its last line): small enough that a
/// piece, read, stays in a core's L2 cache while it is parsed (1 MiB pieces did not: more CPU,
/// and 1–2 MiB more peak memory for the buffers and the pieces waiting to be filed;
/// docs/benchmarks.md, round 34).
const PIECE: usize = 256 << 10;

/// How much more is read at a time to finish a line.
const STEP: usize = 64 << 10;

/// One line of a piece: its file offset, length, XXH3 hash, and what it parsed into.
pub(super) struct Line {
    pub offset: u64,
    pub len: usize,
    pub hash: u64,
    pub parsed: ParsedLine,
}

/// Reads `len` bytes at `offset` (fewer when the file ends first).
fn read_at(file: &File, offset: usize, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    read_more(file, &mut buf, offset, len)?;
    Ok(buf)
}

/// Appends up to `len` bytes at file offset `offset` to `buf`; false when nothing was left.
fn read_more(file: &File, buf: &mut Vec<u8>, offset: usize, len: usize) -> io::Result<bool> {
    let old = buf.len();
    buf.resize(old + len, 0);
    let mut done = 0;
    while done < len {
        match crate::platform::fs::read_at(file, &mut buf[old + done..], (offset + done) as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                buf.truncate(old);
                return Err(e);
            }
        }
    }
    buf.truncate(old + done);
    Ok(done > 0)
}

/// The unterminated last line of the first `size` bytes: `(its offset, its bytes)`; `None`
/// when the file is empty or ends with a newline.
pub(super) fn tail(file: &File, size: usize) -> io::Result<Option<(usize, Vec<u8>)>> {
    if size == 0 {
        return Ok(None);
    }
    let mut start = size.saturating_sub(STEP);
    let mut buf = read_at(file, start, size - start)?;
    if buf.len() < size - start {
        // The file shrank while being read: read it as it is now.
        let now = start + buf.len();
        return tail(file, now);
    }
    if buf.last() == Some(&b'\n') {
        return Ok(None);
    }
    loop {
        if let Some(i) = memchr::memrchr(b'\n', &buf) {
            return Ok(Some((start + i + 1, buf.split_off(i + 1))));
        }
        if start == 0 {
            return Ok(Some((0, buf)));
        }
        let from = start.saturating_sub(STEP);
        let mut more = read_at(file, from, start - from)?;
        if more.len() < start - from {
            return tail(file, from + more.len());
        }
        more.extend_from_slice(&buf);
        buf = more;
        start = from;
    }
}

/// The lines of the first `to` bytes from offset 0, one at a time, until `take` returns true
/// for one: `Some(offset after that line)`; `None` when no line was taken.
pub(super) fn scan_lines(
    file: &File,
    to: usize,
    mut take: impl FnMut(&[u8]) -> bool,
) -> io::Result<Option<usize>> {
    let mut buf = Vec::new();
    let mut base = 0; // file offset of buf[0]
    let mut pos = 0; // within buf
    loop {
        match memchr::memchr(b'\n', &buf[pos..]) {
            Some(i) => {
                let line = &buf[pos..pos + i];
                pos += i + 1;
                if take(line) {
                    return Ok(Some(base + pos));
                }
            }
            None => {
                let read_to = base + buf.len();
                if read_to >= to || !read_more(file, &mut buf, read_to, STEP.min(to - read_to))? {
                    // The last line, unterminated.
                    let line = &buf[pos..];
                    return Ok((!line.is_empty() && take(line)).then_some(base + buf.len()));
                }
                if pos > STEP {
                    buf.drain(..pos);
                    base += pos;
                    pos = 0;
                }
            }
        }
    }
}

/// What a thread keeps from piece to piece (so each piece reuses the memory of the last: no
/// fresh pages to fault in per piece): the piece's bytes and its lines' bounds.
#[derive(Default)]
struct Scratch {
    buf: Vec<u8>,
    bounds: Vec<(usize, usize)>,
}

/// The parser [`lines`] is given: a piece's bytes and its non-blank lines' `(start, end)`;
/// it hands one parsed line each to the callback, in order.
pub(super) trait Parse:
    Fn(&[u8], &[(usize, usize)], &mut dyn FnMut(ParsedLine)) + Sync
{
}
impl<F: Fn(&[u8], &[(usize, usize)], &mut dyn FnMut(ParsedLine)) + Sync> Parse for F {}

/// Reads up to `len` bytes at file offset `offset` into `buf[filled..]` and returns the new
/// fill (`filled` when nothing was left). `buf` only grows (its new bytes zeroed once) and is
/// not cleared from piece to piece: a piece's bytes are written once, by the read.
fn fill(
    file: &File,
    buf: &mut Vec<u8>,
    filled: usize,
    offset: usize,
    len: usize,
) -> io::Result<usize> {
    if buf.len() < filled + len {
        buf.resize(filled + len, 0);
    }
    let mut done = 0;
    while done < len {
        match crate::platform::fs::read_at(
            file,
            &mut buf[filled + done..filled + len],
            (offset + done) as u64,
        ) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled + done)
}

/// Reads the piece `[a, b)` of the lines region `[from, to)` of `file` into `scratch` (reused
/// from piece to piece, so it stays in the cache), parses its non-blank lines with `parse` and
/// pushes each, made what the caller wants by `finish`, onto `out` (in order).
///
/// A line longer than the piece is read on to its end; `covered(offset)` is told, as it is,
/// how far that line is known to go on (no newline before `offset`), so the pieces wholly
/// inside it, which no line starts in, can be left unread (a file of multi-megabyte image
/// lines is read once, not twice: case SESS-05).
#[allow(clippy::too_many_arguments)]
fn piece<T>(
    file: &File,
    (from, to): (usize, usize),
    (a, b): (usize, usize),
    scratch: &mut Scratch,
    parse: &impl Parse,
    finish: &impl Fn(Line) -> T,
    out: &mut Vec<T>,
    covered: &mut dyn FnMut(usize),
) -> io::Result<()> {
    let Scratch { buf, bounds } = scratch;
    // From the byte before `a`, to see whether a line starts at `a`.
    let base = if a > from { a - 1 } else { a };
    bounds.clear();
    let mut filled = fill(file, buf, 0, base, b - base)?;
    let mut pos = if a > from {
        match memchr::memchr(b'\n', &buf[..filled]) {
            Some(i) => i + 1,
            None => filled,
        }
    } else {
        0
    };
    let own_end = b - base; // lines starting at or after this belong to the next piece
    while pos < own_end && pos < filled {
        let mut scanned = pos;
        let end = loop {
            if let Some(i) = memchr::memchr(b'\n', &buf[scanned..filled]) {
                break scanned + i;
            }
            scanned = filled;
            let read_to = base + filled;
            if read_to >= to {
                break filled;
            }
            if filled > own_end {
                covered(read_to);
            }
            let now = fill(file, buf, filled, read_to, STEP.min(to - read_to))?;
            if now == filled {
                break filled;
            }
            filled = now;
        };
        if !buf[pos..end].iter().all(u8::is_ascii_whitespace) {
            bounds.push((pos, end));
        }
        pos = end + 1;
    }
    let buf = &buf[..filled];
    out.reserve(bounds.len());
    let mut at = 0;
    parse(buf, bounds, &mut |parsed| {
        let Some(&(start, end)) = bounds.get(at) else {
            return;
        };
        at += 1;
        out.push(finish(Line {
            offset: (base + start) as u64,
            len: end - start,
            hash: xxhash_rust::xxh3::xxh3_64(&buf[start..end]),
            parsed,
        }));
    });
    Ok(())
}

/// Reads and parses the lines of `file[from..to]` in pieces of [`PIECE`] bytes, on every core
/// (up to 8) for large ranges, and hands each piece's lines to `take` in file order, on the
/// calling thread, as soon as that piece and all before it are parsed (while later pieces are
/// still being read). `parse` is given a piece's bytes and its non-blank lines' `(start, end)`
/// and hands one parsed line each to its callback, in order; `finish` makes each [`Line`] what
/// `take` wants, on the thread that parsed it (what it drops is freed where it was made);
/// `take` is given the piece's index, the number of pieces and its lines, which it drains
/// (what it leaves is dropped; the emptied vector is handed to a later piece, so a load
/// allocates a few of them, not one per piece).
pub(super) fn lines<T: Send>(
    file: &File,
    from: usize,
    to: usize,
    parse: impl Parse,
    finish: impl Fn(Line) -> T + Sync,
    take: impl FnMut(usize, usize, &mut Vec<T>),
) -> io::Result<()> {
    pieces(file, (from, to), (PIECE, 8), parse, finish, take)
}

/// [`lines`] with pieces of `size` bytes, on up to `most` threads.
fn pieces<T: Send>(
    file: &File,
    (from, to): (usize, usize),
    (size, most): (usize, usize),
    parse: impl Parse,
    finish: impl Fn(Line) -> T + Sync,
    mut take: impl FnMut(usize, usize, &mut Vec<T>),
) -> io::Result<()> {
    if from >= to {
        return Ok(());
    }
    let n = (to - from).div_ceil(size.max(1));
    let bound = |k: usize| if k >= n { to } else { from + k * size };
    let threads = std::thread::available_parallelism()
        .map(|t| t.get())
        .unwrap_or(1)
        .min(most)
        .min(n);
    if threads < 2 {
        let mut scratch = Scratch::default();
        let mut lines = Vec::new();
        let mut k = 0;
        while k < n {
            // The pieces after `k` that its last line covers whole: no line starts there.
            let mut inside = k + 1;
            piece(
                file,
                (from, to),
                (bound(k), bound(k + 1)),
                &mut scratch,
                &parse,
                &finish,
                &mut lines,
                &mut |covered| {
                    while inside < n && bound(inside + 1) <= covered {
                        inside += 1;
                    }
                },
            )?;
            take(k, n, &mut lines);
            lines.clear();
            for j in k + 1..inside {
                take(j, n, &mut lines);
            }
            k = inside;
        }
        return Ok(());
    }
    // Threads take the next piece as they finish one; a failed piece stops them. The vectors
    // `take` has emptied come back through `spare`.
    let next = AtomicUsize::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let spare: std::sync::Mutex<Vec<Vec<T>>> = Default::default();
    let (tx, rx) = std::sync::mpsc::channel::<(usize, io::Result<Vec<T>>)>();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let tx = tx.clone();
                let (next, stop, spare, bound) = (&next, &stop, &spare, &bound);
                let (parse, finish) = (&parse, &finish);
                s.spawn(move || {
                    let mut scratch = Scratch::default();
                    while !stop.load(Ordering::Relaxed) {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= n {
                            return;
                        }
                        let mut lines = spare
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .pop()
                            .unwrap_or_default();
                        // Pieces no other thread has taken yet that this piece's last line
                        // covers whole are taken here, empty (no line starts in them).
                        let read = piece(
                            file,
                            (from, to),
                            (bound(k), bound(k + 1)),
                            &mut scratch,
                            parse,
                            finish,
                            &mut lines,
                            &mut |covered| loop {
                                let j = next.load(Ordering::Relaxed);
                                if j >= n || bound(j + 1) > covered {
                                    return;
                                }
                                if next
                                    .compare_exchange(
                                        j,
                                        j + 1,
                                        Ordering::Relaxed,
                                        Ordering::Relaxed,
                                    )
                                    .is_ok()
                                    && tx.send((j, Ok(Vec::new()))).is_err()
                                {
                                    return;
                                }
                            },
                        );
                        if tx.send((k, read.map(|()| lines))).is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        let mut waiting: std::collections::BTreeMap<usize, Vec<T>> = Default::default();
        let mut want = 0;
        let mut failed = None;
        for (k, lines) in rx.iter() {
            match lines {
                Ok(lines) => {
                    waiting.insert(k, lines);
                }
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    failed.get_or_insert(e);
                }
            }
            while failed.is_none() {
                let Some(mut lines) = waiting.remove(&want) else {
                    break;
                };
                take(want, n, &mut lines);
                lines.clear();
                spare
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(lines);
                want += 1;
            }
        }
        let panicked = handles.into_iter().any(|h| h.join().is_err());
        match failed {
            Some(e) => Err(e),
            None if panicked || want < n => Err(io::Error::other("a reader thread failed")),
            None => Ok(()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// An unnamed temporary file holding `bytes` (gone once closed), read from its start.
    fn file(_name: &str, bytes: &[u8]) -> File {
        use std::io::Seek;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f.rewind().unwrap();
        f
    }

    /// `(offset, text)` of every non-blank line, split the plain way.
    fn plain(bytes: &[u8], from: usize, to: usize) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut pos = from;
        for l in bytes[from..to].split(|b| *b == b'\n') {
            if !l.iter().all(u8::is_ascii_whitespace) {
                out.push((pos as u64, l.to_vec()));
            }
            pos += l.len() + 1;
        }
        out
    }

    #[test]
    fn pieces_of_any_size_give_every_line_once_in_order() {
        // Lines longer than a piece, a NUL block across several pieces, blank lines, and an
        // unterminated last line.
        let mut bytes = b"{\"h\":1}\n".to_vec();
        bytes.extend_from_slice(b"{\"a\":\"short\"}\n\n  \n");
        bytes.extend_from_slice(format!("{{\"b\":\"{}\"}}\n", "x".repeat(300)).as_bytes());
        bytes.extend_from_slice(&[0u8; 200]);
        bytes.extend_from_slice(b"\n{\"c\":3}\n{\"d\":4}");
        let f = file("pieces", &bytes);
        let from = 8;
        let want = plain(&bytes, from, bytes.len());
        assert_eq!(want.len(), 5);
        for size in [1, 2, 3, 7, 8, 13, 64, 100, 250, 1000, 1 << 20] {
            let got = read_in_pieces(&f, &bytes, (from, bytes.len()), (size, 8));
            assert_eq!(got, want, "pieces of {size} bytes");
        }
    }

    /// The lines [`pieces`] gives for `range` of `f` (whose bytes are `bytes`) in pieces of
    /// `size` on up to `most` threads, as `(offset, text)`; asserts every piece was handed over
    /// once, in order, and each line's hash.
    fn read_in_pieces(
        f: &File,
        bytes: &[u8],
        (from, to): (usize, usize),
        (size, most): (usize, usize),
    ) -> Vec<(u64, Vec<u8>)> {
        let mut all = Vec::new();
        let mut order = Vec::new();
        pieces(
            f,
            (from, to),
            (size, most),
            |b, l, emit| super::super::parse_lines_each(b, l, true, false, emit),
            |line| line,
            |k, n, lines| {
                order.push((k, n));
                all.append(lines);
            },
        )
        .unwrap();
        let n = (to - from).div_ceil(size);
        assert_eq!(order, (0..n).map(|k| (k, n)).collect::<Vec<_>>());
        all.into_iter()
            .map(|l| {
                let text = bytes[l.offset as usize..l.offset as usize + l.len].to_vec();
                assert_eq!(l.hash, xxhash_rust::xxh3::xxh3_64(&text));
                (l.offset, text)
            })
            .collect()
    }

    #[test]
    fn pieces_inside_a_line_longer_than_a_read_step_give_nothing_and_the_line_once() {
        // Lines of several read steps (the pieces wholly inside them are taken empty, without
        // reading them, while the line's own piece reads it to its end), short lines between.
        let mut bytes = b"{\"h\":1}\n".to_vec();
        for (k, len) in [3 * STEP + 17, 10, STEP + 1, 5 * STEP]
            .into_iter()
            .enumerate()
        {
            bytes.extend_from_slice(format!("{{\"{k}\":\"{}\"}}\n", "y".repeat(len)).as_bytes());
        }
        bytes.extend_from_slice(b"{\"end\":1}");
        let f = file("long", &bytes);
        let want = plain(&bytes, 8, bytes.len());
        assert_eq!(want.len(), 5);
        for size in [1000, 4096, STEP, STEP + 3] {
            for most in [1, 2, 8] {
                let got = read_in_pieces(&f, &bytes, (8, bytes.len()), (size, most));
                assert_eq!(got, want, "pieces of {size} bytes on {most} threads");
            }
        }
    }

    #[test]
    fn the_unterminated_tail_and_the_first_lines_are_found() {
        let long = "y".repeat(3 * STEP);
        let bytes = format!("\n[1]\n{{\"type\":\"session\"}}\n{{\"a\":1}}\n{long}");
        let f = file("tail", bytes.as_bytes());
        let (at, last) = tail(&f, bytes.len()).unwrap().unwrap();
        assert_eq!(
            (at, last),
            (bytes.len() - long.len(), long.clone().into_bytes())
        );
        assert!(super::tail(&f, bytes.len() - long.len()).unwrap().is_none());
        assert!(super::tail(&f, 0).unwrap().is_none());
        let mut seen = Vec::new();
        let after = scan_lines(&f, bytes.len(), |l| {
            seen.push(String::from_utf8(l.to_vec()).unwrap());
            l.starts_with(b"{")
        })
        .unwrap();
        assert_eq!(seen, ["", "[1]", "{\"type\":\"session\"}"]);
        assert_eq!(after, Some(24));
        let only = file("tail-only", long.as_bytes());
        assert_eq!(tail(&only, long.len()).unwrap().unwrap().0, 0);
        assert_eq!(scan_lines(&only, long.len(), |_| false).unwrap(), None);
    }
}
