//! SSE framing without a copy or an allocation per event: [`Framer`] keeps the bytes received
//! in one buffer and hands out each event borrowed from it ([`Event`]).
//!
//! The framing is the WHATWG one ("interpreting an event stream", as `sse-parse` implements it,
//! which this replaced and which the tests compare it with): lines end at CR, LF or CRLF (a CR
//! at the end of a read decided by the next byte), a leading UTF-8 byte order mark is dropped,
//! `:` lines are comments, a field's value loses one leading space, `data` lines are joined
//! with `\n`, a blank line dispatches the event (nothing when it has no data; type `message`
//! when no `event` line named it), an event not closed by a blank line when the body ends is
//! dropped, and invalid UTF-8 reads as U+FFFD. `id` and `retry` are not kept (no adapter reads
//! them; nothing reconnects). The common event, one `data` line with at most an `event` line,
//! is read in place: no byte is copied, nothing allocated. Several `data` lines, or invalid
//! UTF-8, are joined into a buffer the framer reuses.
//!
//! Every byte is scanned once for a line end (`memchr`), whatever the reads' sizes: one 50 MB
//! line costs its length, not its square.

use std::ops::Range;

/// One dispatched event, borrowed from the [`Framer`] until its next call.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Event<'a> {
    /// The `event` field, `message` when no `event` line named it.
    pub event: &'a str,
    /// The `data` lines joined with `\n`.
    pub data: &'a str,
}

/// Where a dispatched event's text is: in the buffer, in the framer's own strings, or (the
/// type) the default `message`.
#[derive(Debug, Clone, Default)]
enum Text {
    #[default]
    None,
    Buf(Range<usize>),
    Own,
}

/// The incremental framer; see the module doc.
#[derive(Debug, Default)]
pub struct Framer {
    /// Received bytes: `buf[..line]` is read (a block's field lines stay until it dispatches),
    /// `buf[line..]` the line being received.
    buf: Vec<u8>,
    /// Where the line being received starts.
    line: usize,
    /// Where the unread bytes start (`>= line`): the scan for a line end resumes here.
    scan: usize,
    /// The last line ended with a CR at the end of the bytes: a first LF is its CRLF's.
    held_cr: bool,
    /// The byte order mark check is done.
    bom_done: bool,
    /// The block so far: its data lines (ranges of `buf`), its `event` line's value.
    data_lines: Vec<Range<usize>>,
    event_line: Option<Range<usize>>,
    /// The first byte of the block in the buffer (what a compaction keeps).
    block: usize,
    /// The dispatched event, until the next [`Framer::advance`].
    ready_data: Text,
    ready_event: Text,
    own_data: String,
    own_event: String,
}

impl Framer {
    /// An empty framer.
    pub fn new() -> Self {
        Framer::default()
    }

    /// Appends one read's bytes. The bytes before the block being received are dropped first
    /// (they belong to events already handed out).
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.block > 0 {
            let cut = self.block;
            self.buf.drain(..cut);
            self.line -= cut;
            self.scan -= cut;
            self.block = 0;
            for r in &mut self.data_lines {
                *r = r.start - cut..r.end - cut;
            }
            if let Some(r) = &mut self.event_line {
                *r = r.start - cut..r.end - cut;
            }
            self.ready_data = Text::None;
            self.ready_event = Text::None;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes held for the block being received (its field lines and the line being received).
    pub fn block_len(&self) -> usize {
        self.buf.len() - self.block
    }

    /// Reads lines until an event dispatches (true: [`Framer::event`] has it) or the bytes run
    /// out (false: feed more).
    pub fn advance(&mut self) -> bool {
        self.ready_data = Text::None;
        self.ready_event = Text::None;
        if !self.bom_done {
            let n = self.buf.len().min(3);
            if self.buf[..n] != b"\xEF\xBB\xBF"[..n] {
                self.bom_done = true;
            } else if n < 3 {
                return false;
            } else {
                self.bom_done = true;
                self.line = 3;
                self.scan = 3;
                self.block = 3;
            }
        }
        loop {
            if self.held_cr {
                if self.scan >= self.buf.len() {
                    return false;
                }
                self.held_cr = false;
                if self.buf[self.scan] == b'\n' {
                    self.scan += 1;
                    self.line = self.scan;
                    if self.data_lines.is_empty() && self.event_line.is_none() {
                        self.block = self.line;
                    }
                }
            }
            let Some(i) = memchr::memchr2(b'\r', b'\n', &self.buf[self.scan..]) else {
                self.scan = self.buf.len();
                return false;
            };
            let end = self.scan + i;
            let start = self.line;
            self.scan = end + 1;
            if self.buf[end] == b'\r' {
                if self.scan < self.buf.len() {
                    if self.buf[self.scan] == b'\n' {
                        self.scan += 1;
                    }
                } else {
                    self.held_cr = true;
                }
            }
            self.line = self.scan;
            if self.take_line(start..end) {
                return true;
            }
        }
    }

    /// Applies the line `buf[range]`; true when it dispatched an event.
    fn take_line(&mut self, range: Range<usize>) -> bool {
        let line = &self.buf[range.clone()];
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] != b':' {
            let (name, value) = match memchr::memchr(b':', line) {
                Some(i) => {
                    let v = range.start + i + 1;
                    let v = if self.buf.get(v) == Some(&b' ') && v < range.end {
                        v + 1
                    } else {
                        v
                    };
                    (&line[..i], v..range.end)
                }
                None => (line, range.end..range.end),
            };
            match name {
                b"data" => self.data_lines.push(value),
                b"event" => self.event_line = Some(value),
                _ => {}
            }
        }
        // Lines before a block's first field (comments, ignored fields) are not kept.
        if self.data_lines.is_empty() && self.event_line.is_none() {
            self.block = self.line;
        }
        false
    }

    /// The blank line: the block's event, if it has data.
    fn dispatch(&mut self) -> bool {
        let event_line = self.event_line.take();
        let dispatched = match self.data_lines.as_slice() {
            [] => false,
            [one] if std::str::from_utf8(&self.buf[one.clone()]).is_ok() => {
                self.ready_data = Text::Buf(one.clone());
                true
            }
            lines => {
                self.own_data.clear();
                for (k, r) in lines.iter().enumerate() {
                    if k > 0 {
                        self.own_data.push('\n');
                    }
                    push_lossy(&mut self.own_data, &self.buf[r.clone()]);
                }
                self.ready_data = Text::Own;
                true
            }
        };
        if dispatched {
            self.ready_event = match event_line {
                Some(r) if !r.is_empty() => {
                    if std::str::from_utf8(&self.buf[r.clone()]).is_ok() {
                        Text::Buf(r)
                    } else {
                        self.own_event.clear();
                        push_lossy(&mut self.own_event, &self.buf[r]);
                        Text::Own
                    }
                }
                _ => Text::None,
            };
        }
        self.data_lines.clear();
        self.block = self.line;
        dispatched
    }

    /// The event the last [`Framer::advance`] that returned true dispatched.
    pub fn event(&self) -> Event<'_> {
        Event {
            event: self.text(&self.ready_event, &self.own_event, "message"),
            data: self.text(&self.ready_data, &self.own_data, ""),
        }
    }

    /// The text `t` stands for: `own` or a range of the buffer (checked to be UTF-8 when
    /// dispatched), or `default`.
    fn text<'a>(&'a self, t: &Text, own: &'a str, default: &'static str) -> &'a str {
        match t {
            Text::None => default,
            Text::Buf(r) => std::str::from_utf8(&self.buf[r.clone()]).unwrap_or(default),
            Text::Own => own,
        }
    }
}

fn push_lossy(dst: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(s) => dst.push_str(s),
        Err(_) => dst.push_str(&String::from_utf8_lossy(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event of `stream` fed in pieces of `size` bytes, as (type, data).
    fn frame(stream: &[u8], size: usize) -> Vec<(String, String)> {
        let mut f = Framer::new();
        let mut out = Vec::new();
        for piece in stream.chunks(size.max(1)) {
            f.feed(piece);
            while f.advance() {
                let e = f.event();
                out.push((e.event.to_string(), e.data.to_string()));
            }
        }
        out
    }

    /// What `sse-parse` (the framer before this one) makes of the same bytes fed whole.
    fn reference(stream: &[u8]) -> Vec<(String, String)> {
        let mut p = sse_parse::SseParser::new();
        p.feed(stream);
        p.finish();
        std::iter::from_fn(|| p.next_event())
            .map(|e| (e.event, e.data))
            .collect()
    }

    #[test]
    fn events_are_the_whatwg_framings_for_every_chunking() {
        let cases: &[&[u8]] = &[
            b"data: {\"a\":1}\n\n",
            b"event: ping\ndata: x\n\nevent: content_block_delta\ndata: y\n\n",
            b"\xEF\xBB\xBFdata: bom\n\n",
            b"\xEF\xBBdata: half a bom\n\n",
            b"data:no space\r\n\r\ndata:  two spaces\r\rdata: cr\r\r",
            b": comment\ndata: a\n: between\ndata: b\ndata:\n\n",
            b"data\n\ndata:\n\n\n\nevent: lonely\n\ndata: after\n\n",
            b"id: 7\nretry: 100\ndata: with id\n\nfoo: bar\ndata: unknown field\n\n",
            b"event:\ndata: empty type\n\nevent: a\nevent: b\ndata: last type\n\n",
            b"data: bad \xFF utf8\n\nevent: \xFEx\ndata: bad type\n\ndata: \xE2\x82\ndata: cut\n\n",
            b"data: caf\xC3\xA9 \xE2\x9C\x93\n\n",
            b"data: unfinished\n",
            b"data: no blank line",
            b"data: a\r\ndata: b\r\n\r\ndata: c\n\r\n",
            b"\n\n\r\n:keep-alive\n\ndata: [DONE]\n\n",
        ];
        for case in cases {
            let want = reference(case);
            for size in 1..=case.len() {
                assert_eq!(
                    frame(case, size),
                    want,
                    "{:?} in pieces of {size}",
                    String::from_utf8_lossy(case)
                );
            }
        }
    }

    #[test]
    fn random_streams_frame_as_the_reference_does() {
        // A fixed xorshift: the same streams every run.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let atoms: &[&[u8]] = &[
            b"data",
            b"event",
            b":",
            b": ",
            b" ",
            b"\n",
            b"\r",
            b"\r\n",
            b"x",
            b"id",
            b"\xC3\xA9",
            b"\xFF",
            b"{\"a\":1}",
            b"message",
            b"\xEF\xBB\xBF",
        ];
        for _ in 0..2_000 {
            let mut stream = Vec::new();
            for _ in 0..(next() % 40) {
                stream.extend_from_slice(atoms[(next() % atoms.len() as u64) as usize]);
            }
            let want = reference(&stream);
            let size = 1 + (next() % 9) as usize;
            assert_eq!(
                frame(&stream, size),
                want,
                "{:?} in pieces of {size}",
                String::from_utf8_lossy(&stream)
            );
            assert_eq!(frame(&stream, stream.len()), want);
        }
    }

    #[test]
    fn a_read_only_keeps_the_block_being_received() {
        let mut f = Framer::new();
        let one = b"data: {\"choices\":[]}\n\n".repeat(100);
        f.feed(&one);
        f.feed(b"event: x\ndata: par");
        let mut n = 0;
        while f.advance() {
            n += 1;
        }
        assert_eq!(n, 100);
        assert_eq!(f.block_len(), "event: x\ndata: par".len());
        f.feed(b"tial\n\n");
        assert_eq!(f.buf.len(), "event: x\ndata: partial\n\n".len());
        assert!(f.advance());
        assert_eq!(
            f.event(),
            Event {
                event: "x",
                data: "partial"
            }
        );
        assert!(!f.advance());
    }
}
