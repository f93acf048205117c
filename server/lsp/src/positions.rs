//! The one position converter: LSP `Position`s in the negotiated `positionEncoding` (LSP 3.17
//! §"Position": `utf-16` by default, `utf-8` or `utf-32` when negotiated) to and from byte
//! offsets in a `&str` and char indexes in a rope. Lines end at `\n`, `\r\n` or `\r`, exactly
//! LSP's rule (ropey is built with only `cr_lines` for the same reason).

use ropey::Rope;
use tower_lsp_server::ls_types::{Position, PositionEncodingKind};

/// A negotiated position encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Columns count UTF-8 bytes.
    Utf8,
    /// Columns count UTF-16 code units (LSP's default).
    Utf16,
    /// Columns count code points.
    Utf32,
}

impl Encoding {
    /// Chooses from the client's `general.positionEncodings`: utf-8 when offered, else utf-16
    /// when offered (or nothing is), else utf-32 when that is all the client lists.
    pub fn negotiate(offered: Option<&[PositionEncodingKind]>) -> Encoding {
        match offered {
            Some(list) if list.contains(&PositionEncodingKind::UTF8) => Encoding::Utf8,
            Some(list)
                if list.contains(&PositionEncodingKind::UTF32)
                    && !list.contains(&PositionEncodingKind::UTF16) =>
            {
                Encoding::Utf32
            }
            _ => Encoding::Utf16,
        }
    }

    /// The LSP kind for `InitializeResult.capabilities.positionEncoding`.
    pub fn kind(self) -> PositionEncodingKind {
        match self {
            Encoding::Utf8 => PositionEncodingKind::UTF8,
            Encoding::Utf16 => PositionEncodingKind::UTF16,
            Encoding::Utf32 => PositionEncodingKind::UTF32,
        }
    }

    /// Width of `c` in this encoding's units.
    pub fn units(self, c: char) -> u32 {
        match self {
            Encoding::Utf8 => c.len_utf8() as u32,
            Encoding::Utf16 => c.len_utf16() as u32,
            Encoding::Utf32 => 1,
        }
    }
}

/// The position of byte `offset` (a char boundary, clamped to the text) in `text`.
pub fn offset_to_position(text: &str, offset: usize, enc: Encoding) -> Position {
    offsets_to_positions(text, &[offset], enc)
        .pop()
        .unwrap_or_default()
}

/// The positions of byte `offsets` (char boundaries, clamped to the text; any order) in `text`,
/// in one pass over the text up to the largest offset (line ends found with `memchr`).
pub fn offsets_to_positions(text: &str, offsets: &[usize], enc: Encoding) -> Vec<Position> {
    let bytes = text.as_bytes();
    let mut order: Vec<usize> = (0..offsets.len()).collect();
    order.sort_by_key(|i| offsets[*i]);
    let mut out = vec![Position::default(); offsets.len()];
    let (mut line, mut line_start, mut scanned) = (0u32, 0usize, 0usize);
    for i in order {
        let offset = offsets[i].min(text.len());
        for at in memchr::memchr2_iter(b'\n', b'\r', &bytes[scanned..offset]) {
            let at = scanned + at;
            // `\r\n` counts once, at its `\n`; a lone `\r` ends a line.
            if bytes[at] == b'\n' || bytes.get(at + 1) != Some(&b'\n') {
                line += 1;
                line_start = at + 1;
            }
        }
        scanned = scanned.max(offset);
        let character = match enc {
            Encoding::Utf8 => (offset - line_start) as u32,
            _ => text[line_start..offset].chars().map(|c| enc.units(c)).sum(),
        };
        out[i] = Position { line, character };
    }
    out
}

/// The position of byte `offset` (a char boundary, clamped) in `rope`, from the rope's own line
/// and UTF-16 indexes: O(log n), no scan of the text.
pub fn rope_offset_to_position(rope: &Rope, offset: usize, enc: Encoding) -> Position {
    let offset = offset.min(rope.len_bytes());
    let line = rope.byte_to_line(offset);
    let character = match enc {
        Encoding::Utf8 => offset - rope.line_to_byte(line),
        Encoding::Utf32 => rope.byte_to_char(offset) - rope.line_to_char(line),
        Encoding::Utf16 => {
            rope.char_to_utf16_cu(rope.byte_to_char(offset))
                - rope.char_to_utf16_cu(rope.line_to_char(line))
        }
    };
    Position {
        line: line as u32,
        character: character as u32,
    }
}

/// The char index of `pos` in `rope`. A line past the end gives the end of the text; a column
/// past the end of its line gives the line's end (before its terminator), as LSP requires.
pub fn position_to_char(rope: &Rope, pos: Position, enc: Encoding) -> usize {
    let line = pos.line as usize;
    if line >= rope.len_lines() {
        return rope.len_chars();
    }
    let start = rope.line_to_char(line);
    let mut units = 0u32;
    let mut idx = start;
    for c in rope.line(line).chars() {
        if c == '\n' || c == '\r' {
            break;
        }
        let w = enc.units(c);
        if units + w > pos.character {
            break;
        }
        units += w;
        idx += 1;
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(line: u32, character: u32) -> Position {
        Position { line, character }
    }

    #[test]
    fn lsp01_columns_in_each_encoding() {
        // LSP-01: `x` after an emoji; `#` after é and an emoji.
        let text = "let s = \"🍋\"; x\nname = \"é🍋\"  # ok\n";
        let x = text.find('x').unwrap();
        assert_eq!(offset_to_position(text, x, Encoding::Utf16), pos(0, 14));
        assert_eq!(offset_to_position(text, x, Encoding::Utf8), pos(0, 16));
        assert_eq!(offset_to_position(text, x, Encoding::Utf32), pos(0, 13));
        let hash = text.find('#').unwrap();
        assert_eq!(offset_to_position(text, hash, Encoding::Utf16), pos(1, 14));
        assert_eq!(offset_to_position(text, hash, Encoding::Utf8), pos(1, 17));
        assert_eq!(offset_to_position(text, hash, Encoding::Utf32), pos(1, 13));
        let rope = Rope::from_str(text);
        for enc in [Encoding::Utf8, Encoding::Utf16, Encoding::Utf32] {
            for off in [x, hash] {
                let p = offset_to_position(text, off, enc);
                assert_eq!(
                    rope.char_to_byte(position_to_char(&rope, p, enc)),
                    off,
                    "{enc:?}"
                );
            }
        }
    }

    #[test]
    fn combining_marks_cjk_and_line_ends() {
        let text = "e\u{301}中\r\nb\rc\nd";
        let rope = Rope::from_str(text);
        assert_eq!(
            offset_to_position(text, text.find('b').unwrap(), Encoding::Utf16),
            pos(1, 0)
        );
        assert_eq!(
            offset_to_position(text, text.find('c').unwrap(), Encoding::Utf16),
            pos(2, 0)
        );
        assert_eq!(
            offset_to_position(text, text.find('d').unwrap(), Encoding::Utf16),
            pos(3, 0)
        );
        assert_eq!(
            offset_to_position(text, text.find('\r').unwrap(), Encoding::Utf16),
            pos(0, 3)
        );
        assert_eq!(
            offset_to_position(text, text.find('\r').unwrap(), Encoding::Utf8),
            pos(0, 6)
        );
        // Past the line's end clamps before the terminator; past the last line is the end.
        assert_eq!(position_to_char(&rope, pos(0, 99), Encoding::Utf16), 3);
        assert_eq!(
            position_to_char(&rope, pos(9, 0), Encoding::Utf16),
            rope.len_chars()
        );
    }

    #[test]
    fn rope_str_and_batch_conversions_agree_on_every_offset() {
        let text = "a🍋\r\né中\rx\n\ne\u{301}z\r\n\r🦊";
        let rope = Rope::from_str(text);
        let offsets: Vec<usize> = (0..=text.len())
            .filter(|o| text.is_char_boundary(*o))
            .collect();
        for enc in [Encoding::Utf8, Encoding::Utf16, Encoding::Utf32] {
            // Reversed, so the batch also sorts.
            let rev: Vec<usize> = offsets.iter().rev().copied().collect();
            let batch = offsets_to_positions(text, &rev, enc);
            for (k, &off) in rev.iter().enumerate() {
                let p = rope_offset_to_position(&rope, off, enc);
                assert_eq!(p, batch[k], "{enc:?} at {off}");
                // A char index of a CRLF's middle is not a position LSP can name; others are.
                if !(off > 0 && text.as_bytes()[off - 1] == b'\r' && text.as_bytes()[off] == b'\n')
                {
                    assert_eq!(
                        rope.char_to_byte(position_to_char(&rope, p, enc)),
                        off,
                        "{enc:?} at {off}"
                    );
                }
            }
        }
        assert_eq!(
            rope_offset_to_position(&rope, text.find('z').unwrap(), Encoding::Utf16),
            pos(4, 2)
        );
        assert_eq!(
            rope_offset_to_position(&rope, text.len(), Encoding::Utf16),
            pos(6, 2)
        );
    }

    /// ED-03: the case's buffers (a lone CR of a progress line; CRLF, LF and no final newline
    /// mixed) through incremental changes in each encoding: every position names the same
    /// text in the rope, the `&str` converter and after the change.
    #[test]
    fn ed03_lone_cr_and_mixed_endings_in_every_encoding() {
        use crate::documents::Documents;
        use tower_lsp_server::ls_types::{Range, TextDocumentContentChangeEvent, Uri};
        let lone = "progress 10%\rprogress 100%\ndone\n";
        let mixed = "a\r\nb\nc";
        for enc in [Encoding::Utf8, Encoding::Utf16, Encoding::Utf32] {
            assert_eq!(
                offset_to_position(lone, lone.find("progress 100").unwrap(), enc),
                pos(1, 0)
            );
            assert_eq!(
                offset_to_position(lone, lone.find("done").unwrap(), enc),
                pos(2, 0)
            );
            assert_eq!(offset_to_position(mixed, 5, enc), pos(2, 0));
            // The end of a line stops before its terminator, a lone CR included.
            let rope = Rope::from_str(lone);
            assert_eq!(position_to_char(&rope, pos(0, 99), enc), 12);
            // Incremental changes on lines after a lone CR and a CRLF land where they should.
            let docs = Documents::default();
            let uri: Uri = "file:///nonexistent-ed03/a.txt".parse().unwrap();
            docs.open(uri.clone(), lone, 1);
            let change = |l, a, b, text: &str| TextDocumentContentChangeEvent {
                range: Some(Range {
                    start: pos(l, a),
                    end: pos(l, b),
                }),
                range_length: None,
                text: text.into(),
            };
            docs.change(
                &uri,
                2,
                vec![change(1, 9, 13, "99% 🦊"), change(2, 0, 4, "fin")],
                enc,
            );
            let path = std::path::Path::new("/nonexistent-ed03/a.txt");
            assert_eq!(
                docs.text(path).unwrap().0.as_str(),
                "progress 10%\rprogress 99% 🦊\nfin\n",
                "{enc:?}"
            );
            // A column after the emoji, in this encoding's units.
            let after = "progress 10%\rprogress 99% 🦊".len();
            let text = docs.text(path).unwrap().0;
            let p = offset_to_position(&text, after, enc);
            let want = match enc {
                Encoding::Utf8 => 17,
                Encoding::Utf16 => 15,
                Encoding::Utf32 => 14,
            };
            assert_eq!(p, pos(1, want), "{enc:?}");
            docs.open(uri.clone(), mixed, 1);
            docs.change(
                &uri,
                2,
                vec![change(1, 0, 1, "B"), change(2, 0, 1, "C")],
                enc,
            );
            assert_eq!(docs.text(path).unwrap().0.as_str(), "a\r\nB\nC");
        }
    }

    #[test]
    fn negotiation_prefers_utf8_only_when_offered() {
        assert_eq!(
            Encoding::negotiate(Some(&[PositionEncodingKind::UTF32])),
            Encoding::Utf32
        );
        assert_eq!(
            Encoding::negotiate(Some(&[
                PositionEncodingKind::UTF32,
                PositionEncodingKind::UTF16
            ])),
            Encoding::Utf16
        );
        assert_eq!(Encoding::negotiate(None), Encoding::Utf16);
        assert_eq!(
            Encoding::negotiate(Some(&[PositionEncodingKind::UTF16])),
            Encoding::Utf16
        );
        assert_eq!(
            Encoding::negotiate(Some(&[
                PositionEncodingKind::UTF16,
                PositionEncodingKind::UTF8
            ])),
            Encoding::Utf8
        );
    }
}
