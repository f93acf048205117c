//! `read {path, offset?, limit?}`: the file's text (an open buffer's unsaved text included),
//! head-truncated to 2,000 lines or 50 KB with Pi's continuation notice; images as image blocks.
//!
//! Images are recognised by content (PNG, JPEG, GIF, WebP signatures; any file name), as Pi
//! 0.73.1 does, and resized like Pi's `resizeImage` (`utils/image-resize.js`): an image within
//! 2000×2000 pixels whose base64 is under 4.5 MB is sent as it is; otherwise it is turned
//! upright (EXIF orientation), scaled to fit 2000×2000 (Lanczos3), and encoded as PNG and as
//! JPEG at quality 80: the smaller of the two is sent when its base64 is under 4.5 MB, else the
//! other, else JPEG at quality 85, 70, 55, 40, the first under 4.5 MB (Pi 1.6's
//! `image-resize-core.js`; its encoders are photon's, so the sizes compared differ from Pi's
//! by a few bytes); while none fits, the size shrinks to 75 % per step. The text block then carries Pi's dimension note; an
//! image that cannot be made small enough, or not decoded, is omitted with Pi's note.
//! When the model that made the call does not take images (its `input` lacks `image`), the text
//! block carries Pi's note saying so ([`NON_VISION_IMAGE_NOTE`]); the image block stays in the
//! result and the request view replaces it with a placeholder (`pi_ai::transform`), as in Pi.

use std::sync::Arc;

use async_trait::async_trait;
use pi_ai::{ContentBlock, ImageContent, ToolSpec};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, ToolState, MAX_BYTES, MAX_LINES};
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
    state: Arc<ToolState>,
}

impl ReadTool {
    /// A read tool over `fs`; every text read is recorded in `state.reads`.
    pub fn new(fs: Arc<dyn Fs>, state: Arc<ToolState>) -> Self {
        ReadTool { fs, state }
    }
}

/// Pi's `formatSize`: `512B`, `1.5KB`, `2.0MB`.
pub(crate) fn format_size(bytes: usize) -> String {
    if bytes < 1024 {
        format!("{bytes}B")
    } else if bytes < 1024 * 1024 {
        format!("{:.1}KB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1}MB", bytes as f64 / (1024.0 * 1024.0))
    }
}

/// Selects lines `offset..offset+limit` (1-based) of `text`, truncated to Pi's limits (2,000
/// lines / 50 KB, whole lines only), with Pi 0.73.1's continuation notices; `path` is the path
/// as the model gave it (used in the long-line hint). Returns the text and, when truncated,
/// Pi's `details.truncation`. `Err` is Pi's offset error. The same [`Window`] a streamed read
/// of a large file uses.
pub(crate) fn read_window(
    text: &str,
    offset: usize,
    limit: Option<usize>,
    path: &str,
) -> Result<(String, Option<Value>), String> {
    let mut w = Window::new(offset, limit);
    let mut lines = text.split('\n').peekable();
    while let Some(line) = lines.next() {
        w.piece(line);
        if lines.peek().is_some() {
            w.end_line();
        }
    }
    w.finish(path)
}

/// Pi's read window built from a text given piece by piece ([`Window::piece`], lines ended
/// by [`Window::end_line`]), keeping only what the output can hold: at most [`MAX_BYTES`] of
/// text whatever the input's size (issue: a 200 MB file read for a 50 KB answer), plus the
/// counts Pi's notices and `details.truncation` give. Lines are split at `\n` only, as Pi
/// splits them.
pub(crate) struct Window {
    /// 0-based first selected line.
    start: usize,
    /// One past the last selected line (`None`: to the end).
    end: Option<usize>,
    /// 0-based index of the line being read.
    line: usize,
    /// Bytes of the line being read so far.
    cur_len: usize,
    /// Its text, while it can still be kept.
    cur: String,
    /// The lines kept, joined with `\n`.
    out: String,
    kept: usize,
    /// No more lines are kept: (stopped, by bytes rather than lines).
    stopped: Option<bool>,
    selected_lines: usize,
    selected_bytes: usize,
    first_len: usize,
}

impl Window {
    pub(crate) fn new(offset: usize, limit: Option<usize>) -> Self {
        let start = offset.max(1) - 1;
        Window {
            start,
            end: limit.map(|l| start.saturating_add(l)),
            line: 0,
            cur_len: 0,
            cur: String::new(),
            out: String::new(),
            kept: 0,
            stopped: None,
            selected_lines: 0,
            selected_bytes: 0,
            first_len: 0,
        }
    }

    fn selected(&self) -> bool {
        self.line >= self.start && self.end.is_none_or(|e| self.line < e)
    }

    /// More text of the current line (no `\n` in it).
    pub(crate) fn piece(&mut self, s: &str) {
        if !self.selected() {
            return;
        }
        self.cur_len += s.len();
        let sep = usize::from(self.kept > 0);
        if self.stopped.is_none() && self.out.len() + sep + self.cur_len <= MAX_BYTES {
            self.cur.push_str(s);
        }
    }

    /// The current line ended (a `\n`, or the end of the text).
    pub(crate) fn end_line(&mut self) {
        if self.selected() {
            if self.selected_lines == 0 {
                self.first_len = self.cur_len;
            }
            self.selected_bytes += self.cur_len + usize::from(self.selected_lines > 0);
            self.selected_lines += 1;
            if self.stopped.is_none() {
                let sep = usize::from(self.kept > 0);
                if self.kept >= MAX_LINES {
                    self.stopped = Some(false);
                } else if self.out.len() + sep + self.cur_len > MAX_BYTES {
                    self.stopped = Some(true);
                } else {
                    if sep == 1 {
                        self.out.push('\n');
                    }
                    self.out.push_str(&self.cur);
                    self.kept += 1;
                }
            }
        }
        self.cur.clear();
        self.cur_len = 0;
        self.line += 1;
    }

    /// The output once the whole text was given (its last line not yet ended).
    pub(crate) fn finish(mut self, path: &str) -> Result<(String, Option<Value>), String> {
        self.end_line();
        let total = self.line;
        let start = self.start;
        if start >= total {
            return Err(format!(
                "Offset {} is beyond end of file ({total} lines total)",
                start + 1
            ));
        }
        let wanted_end = self.end.map(|e| e.min(total)).unwrap_or(total);
        let (selected_lines, selected_bytes) = (self.selected_lines, self.selected_bytes);
        let details = |by: &str, out_lines: usize, out_bytes: usize, first_exceeds: bool| {
            json!({"truncation": {
                "truncated": true, "truncatedBy": by, "totalLines": selected_lines,
                "totalBytes": selected_bytes, "outputLines": out_lines, "outputBytes": out_bytes,
                "lastLinePartial": false, "firstLineExceedsLimit": first_exceeds,
                "maxLines": MAX_LINES, "maxBytes": MAX_BYTES}})
        };
        let Some(by_bytes) = self.stopped else {
            let out = self.out;
            if wanted_end < total {
                return Ok((
                    format!(
                        "{out}\n\n[{} more lines in file. Use offset={} to continue.]",
                        total - wanted_end,
                        wanted_end + 1
                    ),
                    None,
                ));
            }
            return Ok((out, None));
        };
        if self.first_len > MAX_BYTES {
            return Ok((
                format!(
                    "[Line {} is {}, exceeds {} limit. Use bash: sed -n '{}p' {path} | head -c {MAX_BYTES}]",
                    start + 1,
                    format_size(self.first_len),
                    format_size(MAX_BYTES),
                    start + 1
                ),
                Some(details("bytes", 0, 0, true)),
            ));
        }
        let kept = self.kept;
        let mut out = self.out;
        let end = start + kept;
        let (by, note) = if by_bytes {
            (
                "bytes",
                format!(
                    "\n\n[Showing lines {}-{end} of {total} ({} limit). Use offset={} to continue.]",
                    start + 1,
                    format_size(MAX_BYTES),
                    end + 1
                ),
            )
        } else {
            (
                "lines",
                format!(
                    "\n\n[Showing lines {}-{end} of {total}. Use offset={} to continue.]",
                    start + 1,
                    end + 1
                ),
            )
        };
        let out_bytes = out.len();
        out.push_str(&note);
        Ok((out, Some(details(by, kept, out_bytes, false))))
    }
}

/// Files at least this large are read from disk in a stream ([`stream_window`]) instead of
/// whole; below it, a whole read (and [`crate::fs::decode_file`]'s detection over all bytes)
/// costs little.
pub(crate) const STREAM_FROM: u64 = 8 * 1024 * 1024;

/// Bytes read at a time by [`stream_window`].
const STREAM_CHUNK: usize = 256 * 1024;

/// Text bytes of a streamed file hashed for the read tracker (256 MiB); see [`stream_window`].
const HASH_UP_TO: u64 = 256 * 1024 * 1024;

/// What a streamed read of a file gives: the tool's text and details, the [`super::text_hash`]
/// of the whole decoded text (for the read tracker; `None` past [`HASH_UP_TO`]) and the
/// encoding found.
pub(crate) struct Streamed {
    pub text: String,
    pub details: Option<Value>,
    pub hash: Option<u64>,
    pub encoding: crate::fs::TextEncoding,
}

/// [`read_window`] of a file on disk read in [`STREAM_CHUNK`] pieces (issue 19 item 5): memory
/// stays a few chunks plus the 50 KB window, whatever the file's size; the whole file is
/// still scanned once (Pi's notices give its line count) and hashed as it goes. The encoding
/// is found from the first chunk (a UTF-16 BOM, valid UTF-8, else `chardetng`) and the rest
/// decoded with `encoding_rs` in a stream. Blocking: run it on a blocking thread. `Err` is a
/// message for the model.
pub(crate) fn stream_window(
    path: &std::path::Path,
    offset: usize,
    limit: Option<usize>,
    shown: &str,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<Streamed, String> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut buf = vec![0u8; STREAM_CHUNK];
    let mut filled = 0;
    // The first chunk, whole (for the detection).
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    let head = &buf[..filled];
    let (enc, bom) = if head.starts_with(&[0xFF, 0xFE]) {
        (encoding_rs::UTF_16LE, true)
    } else if head.starts_with(&[0xFE, 0xFF]) {
        (encoding_rs::UTF_16BE, true)
    } else {
        let valid = match std::str::from_utf8(head) {
            Ok(_) => true,
            // Cut inside a character at the chunk's end only.
            Err(e) => e.error_len().is_none(),
        };
        if valid || crate::fs::mostly_utf8(head) {
            // A UTF-8 BOM stays in the text; the flag says it is there (as `decode_file`).
            (encoding_rs::UTF_8, head.starts_with(crate::fs::UTF8_BOM))
        } else {
            (
                crate::fs::detect_legacy(head).unwrap_or(encoding_rs::UTF_8),
                false,
            )
        }
    };
    let mut decoder = enc.new_decoder_without_bom_handling();
    let utf8 = enc == encoding_rs::UTF_8;
    let mut window = Window::new(offset, limit);
    // The read tracker's hash, up to HASH_UP_TO bytes of text (beyond, the file is not
    // recorded as read: an edit of it is then not checked for staleness, as for a file never
    // read).
    let mut hasher = Some(xxhash_rust::xxh3::Xxh3::new());
    let mut hashed = 0u64;
    let mut replaced = false;
    let mut text = String::with_capacity(if utf8 { 0 } else { STREAM_CHUNK * 3 + 16 });
    // UTF-8: the bytes of a character cut at a chunk's end, carried to the next chunk.
    let mut carry: Vec<u8> = Vec::new();
    let mut joined: Vec<u8> = Vec::new();
    let mut first = true;
    let mut feed = |s: &str, window: &mut Window| {
        if let Some(h) = hasher.as_mut() {
            hashed += s.len() as u64;
            if hashed > HASH_UP_TO {
                hasher = None;
            } else {
                h.update(s.as_bytes());
            }
        }
        let mut rest = s;
        while let Some(i) = memchr::memchr(b'\n', rest.as_bytes()) {
            window.piece(&rest[..i]);
            window.end_line();
            rest = &rest[i + 1..];
        }
        window.piece(rest);
    };
    loop {
        if cancel.is_cancelled() {
            return Err("Operation aborted".into());
        }
        let chunk: &[u8] = if first {
            let skip = if bom && !utf8 { 2 } else { 0 };
            &buf[skip.min(filled)..filled]
        } else {
            &buf[..filled]
        };
        let last = filled == 0;
        if utf8 {
            // Validated in place (std's `from_utf8`), invalid sequences as U+FFFD exactly as
            // `String::from_utf8_lossy` replaces them.
            let mut data: &[u8] = if carry.is_empty() {
                chunk
            } else {
                joined.clear();
                joined.extend_from_slice(&carry);
                joined.extend_from_slice(chunk);
                carry.clear();
                &joined
            };
            loop {
                match std::str::from_utf8(data) {
                    Ok(s) => {
                        feed(s, &mut window);
                        break;
                    }
                    Err(e) => {
                        let good = e.valid_up_to();
                        // Valid up to `good` by the error's own account.
                        feed(
                            std::str::from_utf8(&data[..good]).unwrap_or_default(),
                            &mut window,
                        );
                        match e.error_len() {
                            Some(n) => {
                                replaced = true;
                                feed("\u{FFFD}", &mut window);
                                data = &data[good + n..];
                            }
                            None if last => {
                                replaced = true;
                                feed("\u{FFFD}", &mut window);
                                break;
                            }
                            None => {
                                carry.extend_from_slice(&data[good..]);
                                break;
                            }
                        }
                    }
                }
            }
        } else {
            text.clear();
            let (_, _, had) = decoder.decode_to_string(chunk, &mut text, last);
            replaced |= had;
            feed(&text, &mut window);
        }
        if last {
            break;
        }
        first = false;
        filled = loop {
            match file.read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        };
    }
    let (text, details) = window.finish(shown)?;
    Ok(Streamed {
        text,
        details,
        hash: hasher.map(|h| h.digest()),
        encoding: crate::fs::TextEncoding {
            encoding: enc,
            bom,
            exact: !replaced,
        },
    })
}

/// How many leading bytes [`sniff_image`] looks at: Pi 1.6's `IMAGE_TYPE_SNIFF_BYTES`
/// (`utils/mime.js`; the animated-PNG check walks chunks within them).
pub const SNIFF_BYTES: usize = 4100;

/// Pi 1.6's `isBmp` (`utils/mime.js`): a `BM` header whose sizes and offsets are coherent, one
/// colour plane and a bit depth of 1, 4, 8, 16, 24 or 32.
fn is_bmp(b: &[u8]) -> bool {
    let u32le = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let u16le = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    if b.len() < 26 || !b.starts_with(b"BM") {
        return false;
    }
    let (size, pixels, dib) = (u32le(2), u32le(10), u32le(14));
    if (size != 0 && size < 26) || u64::from(pixels) < 14 + u64::from(dib) {
        return false;
    }
    if size != 0 && pixels >= size {
        return false;
    }
    let (planes, bits) = match dib {
        12 => (u16le(22), u16le(24)),
        40..=124 if b.len() >= 30 => (u16le(26), u16le(28)),
        _ => return false,
    };
    planes == 1 && [1, 4, 8, 16, 24, 32].contains(&bits)
}

/// The image type Pi 1.6 sends a file as, from its content alone, whatever the file's name
/// (`detectSupportedImageMimeType`, `utils/mime.js`; `bytes`: the file's first
/// [`SNIFF_BYTES`], more are not read): JPEG but not JPEG-LS (`FF D8 FF F7`), PNG with its
/// `IHDR` header and not animated (no `acTL` chunk before the first `IDAT`), GIF87a/89a, WebP
/// (`RIFF` … `WEBP`), BMP with a plausible header ([`is_bmp`]); `None`: the file is text (an
/// APNG, a JPEG-LS or a PNG without `IHDR` is read as text, as Pi reads them). Used by `read`
/// and by `pi-lsp run`'s `@file` arguments.
pub fn sniff_image(bytes: &[u8]) -> Option<&'static str> {
    let bytes = &bytes[..bytes.len().min(SNIFF_BYTES)];
    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n";
    let u32_be = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]))
    };
    if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        (bytes.get(3) != Some(&0xF7)).then_some("image/jpeg")
    } else if bytes.starts_with(PNG) {
        let is_png = bytes.len() >= 16 && u32_be(8) == Some(13) && &bytes[12..16] == b"IHDR";
        // Pi's `isAnimatedPng`: the chunks up to the first `IDAT`, within the bytes read.
        let mut at = PNG.len();
        let mut animated = false;
        while let (Some(len), Some(kind)) = (u32_be(at), bytes.get(at + 4..at + 8)) {
            if kind == b"acTL" {
                animated = true;
                break;
            }
            if kind == b"IDAT" {
                break;
            }
            let next = at + 12 + len as usize;
            if next <= at || next > bytes.len() {
                break;
            }
            at = next;
        }
        (is_png && !animated).then_some("image/png")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else if is_bmp(bytes) {
        Some("image/bmp")
    } else {
        None
    }
}

/// Pi's limits for images sent inline: 2000×2000 pixels, 4.5 MB of base64 (headroom below
/// Anthropic's 5 MB), JPEG quality 80 first.
const IMAGE_MAX_SIDE: u32 = 2000;
/// See [`IMAGE_MAX_SIDE`].
const IMAGE_MAX_BASE64: usize = 4_718_592; // 4.5 * 1024 * 1024
const JPEG_QUALITIES: [u8; 5] = [80, 85, 70, 55, 40];

/// An image ready to send: base64 data, its MIME type, and how it was fitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentImage {
    pub data: String,
    pub mime: String,
    /// `Some` when it was re-encoded (Pi's `wasResized`, also when the size stayed and only
    /// the bytes shrank); `None`: its own bytes, within the limits or not fitted at all
    /// (`images.autoResize` off).
    pub resized: Option<Resized>,
}

/// The sizes of a re-encoded image, in pixels (width, height): its own (upright) and sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resized {
    pub original: (u32, u32),
    pub sent: (u32, u32),
}

/// Why [`fit_image`] gives no image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unfit {
    /// Its header does not decode: not an image of a type read here.
    Unreadable,
    /// Its pixels do not decode, or no size and encoding gets it under the limits.
    NotFitted,
}

impl SentImage {
    /// `bytes` of type `mime` sent as they are.
    fn as_is(bytes: &[u8], mime: &str) -> SentImage {
        use base64::Engine as _;
        SentImage {
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
            mime: mime.to_string(),
            resized: None,
        }
    }

    /// Pi's `formatDimensionNote`, for resized images only.
    pub(crate) fn dimension_note(&self) -> Option<String> {
        let Resized { original, sent } = self.resized?;
        let scale = f64::from(original.0) / f64::from(sent.0);
        Some(format!(
            "[Image: original {}x{}, displayed at {}x{}. Multiply coordinates by {scale:.2} to map to original image.]",
            original.0, original.1, sent.0, sent.1
        ))
    }
}

fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// Pi's `resizeImage` with its default options (see module docs); [`Unfit`] when the image
/// cannot be decoded or made small enough. Its header is decoded once. CPU-bound: call it on
/// a blocking thread.
pub(crate) fn fit_image(bytes: &[u8], mime: &str) -> Result<SentImage, Unfit> {
    use base64::Engine as _;
    use image::ImageDecoder as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut decoder = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .ok()
        .and_then(|r| r.into_decoder().ok())
        .ok_or(Unfit::Unreadable)?;
    let orientation = decoder.orientation().ok();
    let mut img = image::DynamicImage::from_decoder(decoder).map_err(|_| Unfit::NotFitted)?;
    if let Some(o) = orientation {
        img.apply_orientation(o);
    }
    let (w, h) = (img.width(), img.height());
    if w <= IMAGE_MAX_SIDE && h <= IMAGE_MAX_SIDE && base64_len(bytes.len()) < IMAGE_MAX_BASE64 {
        return Ok(SentImage::as_is(bytes, mime));
    }
    // Pi's rounding: Math.round on the scaled side.
    let (mut tw, mut th) = (w, h);
    if tw > IMAGE_MAX_SIDE {
        th = ((f64::from(th) * f64::from(IMAGE_MAX_SIDE)) / f64::from(tw)).round() as u32;
        tw = IMAGE_MAX_SIDE;
    }
    if th > IMAGE_MAX_SIDE {
        tw = ((f64::from(tw) * f64::from(IMAGE_MAX_SIDE)) / f64::from(th)).round() as u32;
        th = IMAGE_MAX_SIDE;
    }
    let (mut cw, mut ch) = (tw.max(1), th.max(1));
    loop {
        let resized = img.resize_exact(cw, ch, image::imageops::FilterType::Lanczos3);
        let found = |data: String, mime: &str| SentImage {
            data,
            mime: mime.to_string(),
            resized: Some(Resized {
                original: (w, h),
                sent: (cw, ch),
            }),
        };
        let mut png = Vec::new();
        let png = resized
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .is_ok()
            .then_some(png);
        let rgb = image::DynamicImage::ImageRgb8(resized.to_rgb8());
        let jpeg = |q: u8| {
            let mut jpeg = Vec::new();
            let enc = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, q);
            rgb.write_with_encoder(enc).is_ok().then_some(jpeg)
        };
        let first_jpeg = jpeg(JPEG_QUALITIES[0]);
        // Pi 1.6: the smaller of PNG and JPEG at the first quality first (by base64 length,
        // PNG on a tie), then the other, then JPEG at the lower qualities.
        let jpeg_smaller = match (&png, &first_jpeg) {
            (Some(p), Some(j)) => base64_len(j.len()) < base64_len(p.len()),
            _ => false,
        };
        let preferred = if jpeg_smaller {
            [(first_jpeg, "image/jpeg"), (png, "image/png")]
        } else {
            [(png, "image/png"), (first_jpeg, "image/jpeg")]
        };
        for (bytes, mime) in preferred {
            if let Some(b) = bytes.filter(|b| base64_len(b.len()) < IMAGE_MAX_BASE64) {
                return Ok(found(b64(&b), mime));
            }
        }
        for q in &JPEG_QUALITIES[1..] {
            if let Some(b) = jpeg(*q).filter(|b| base64_len(b.len()) < IMAGE_MAX_BASE64) {
                return Ok(found(b64(&b), "image/jpeg"));
            }
        }
        if cw == 1 && ch == 1 {
            return Err(Unfit::NotFitted);
        }
        let nw = if cw == 1 { 1 } else { (cw * 3 / 4).max(1) };
        let nh = if ch == 1 { 1 } else { (ch * 3 / 4).max(1) };
        if (nw, nh) == (cw, ch) {
            return Err(Unfit::NotFitted);
        }
        (cw, ch) = (nw, nh);
    }
}

/// Pi 1.6's `processImage` (`utils/image-process.js`) for an image the user sent with a prompt
/// (base64 `data` of type `mime`): a type providers take inline (PNG, JPEG, GIF, WebP) kept,
/// another converted to PNG (with the hint `[Image converted from X to image/png.]`); with
/// `auto_resize` (`images.autoResize`, default on) fitted as the `read` tool fits images
/// ([`fit_image`]: at most 2000×2000 and 4.5 MB of base64, with `formatDimensionNote`'s hint).
/// Returns the image to send and its hints, or Pi's `[Image omitted: …]` text when it cannot be
/// converted or made small enough; an image of a sendable type whose header does not decode is
/// sent as it came. CPU-bound: call it on a blocking thread.
pub(crate) fn process_prompt_image(
    data: &str,
    mime: &str,
    auto_resize: bool,
) -> Result<(ImageContent, Vec<String>), String> {
    use base64::Engine as _;
    const NOT_CONVERTED: &str =
        "[Image omitted: could not be converted to a supported inline image format.]";
    let base = mime
        .split(';')
        .next()
        .unwrap_or(mime)
        .trim()
        .to_ascii_lowercase();
    let supported = match base.as_str() {
        "image/png" => Some("image/png"),
        "image/jpeg" | "image/jpg" => Some("image/jpeg"),
        "image/gif" => Some("image/gif"),
        "image/webp" => Some("image/webp"),
        _ => None,
    };
    let mut hints = Vec::new();
    let (bytes, mime) = match supported {
        // Already sendable and not to be resized: sent as it came (no decoding).
        Some(m) if !auto_resize => {
            return Ok((
                ImageContent {
                    data: data.into(),
                    mime_type: m.to_string(),
                },
                hints,
            ))
        }
        Some(m) => match base64::engine::general_purpose::STANDARD.decode(data.trim()) {
            Ok(bytes) => (bytes, m),
            // Not base64 after all: as it came (see below).
            Err(_) => {
                return Ok((
                    ImageContent {
                        data: data.into(),
                        mime_type: m.to_string(),
                    },
                    hints,
                ))
            }
        },
        None => {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .map_err(|_| NOT_CONVERTED.to_string())?;
            let mut png = Vec::new();
            image::load_from_memory(&raw)
                .and_then(|img| {
                    img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
                })
                .map_err(|_| NOT_CONVERTED.to_string())?;
            (png, "image/png")
        }
    };
    if !auto_resize {
        hints.push(format!("[Image converted from {base} to {mime}.]"));
        return Ok((
            ImageContent {
                data: base64::engine::general_purpose::STANDARD
                    .encode(&bytes)
                    .into(),
                mime_type: mime.to_string(),
            },
            hints,
        ));
    }
    let fitted = match fit_image(&bytes, mime) {
        Ok(fitted) => fitted,
        // An image whose header does not decode is sent as it came (Pi 1.6 leaves it out with
        // its "could not be resized" note; a provider that refuses it is handled as every
        // image refusal is, case 18.12): a deliberate difference, in the changelog.
        Err(Unfit::Unreadable) if supported.is_some() => {
            return Ok((
                ImageContent {
                    data: data.into(),
                    mime_type: mime.to_string(),
                },
                hints,
            ))
        }
        Err(_) => {
            return Err(
                "[Image omitted: could not be resized below the inline image size limit.]".into(),
            )
        }
    };
    if supported.is_none() && fitted.mime != base {
        hints.push(format!("[Image converted from {base} to {}.]", fitted.mime));
    }
    if let Some(d) = fitted.dimension_note() {
        hints.push(d);
    }
    Ok((
        ImageContent {
            data: fitted.data.into(),
            mime_type: fitted.mime,
        },
        hints,
    ))
}

/// The content blocks of a read image: Pi's text note, then the image unless it was omitted.
/// Pi 0.73.1's note (`getNonVisionImageNote` in `tools/read.js`) on a read image when the
/// current model's `input` does not include `image`.
pub const NON_VISION_IMAGE_NOTE: &str =
    "[Current model does not support images. The image will be omitted from this request.]";

/// Pi's `getNonVisionImageNote`: the note when there is a model and it does not take images.
fn non_vision_note(model_input: Option<&[String]>) -> Option<&'static str> {
    match model_input {
        Some(input) if !input.iter().any(|k| k == "image") => Some(NON_VISION_IMAGE_NOTE),
        _ => None,
    }
}

/// `auto_resize`: fitted ([`fit_image`]), else sent at its own size (Pi 1.6's read with
/// `autoResizeImages: false`: no dimension note).
async fn image_blocks(
    bytes: Vec<u8>,
    mime: &'static str,
    extra_note: Option<&str>,
    auto_resize: bool,
) -> Vec<ContentBlock> {
    // Pi 1.6's `normalizeImage`: a type providers do not take inline (BMP) is sent as PNG,
    // with a hint; one that does not decode is left out.
    let converted = mime == "image/bmp";
    let fit = move |b: &[u8], m: &str| {
        if auto_resize {
            fit_image(b, m).ok()
        } else {
            Some(SentImage::as_is(b, m))
        }
    };
    let fitted = tokio::task::spawn_blocking(move || {
        if !converted {
            return Ok(fit(&bytes, mime));
        }
        let mut png = Vec::new();
        image::load_from_memory_with_format(&bytes, image::ImageFormat::Bmp)
            .and_then(|img| {
                img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            })
            .map(|()| fit(&png, "image/png"))
            .map_err(|_| ())
    })
    .await
    .unwrap_or(Err(()));
    let fitted = match fitted {
        Ok(f) => f,
        Err(()) => {
            let mut note = format!(
                "Read image file [{mime}]\n[Image omitted: could not be converted to a supported inline image format.]"
            );
            if let Some(n) = extra_note {
                note.push('\n');
                note.push_str(n);
            }
            return vec![ContentBlock::text(note)];
        }
    };
    match fitted {
        Some(img) => {
            let mut note = format!("Read image file [{}]", img.mime);
            if converted && img.mime != mime {
                note.push_str(&format!("\n[Image converted from {mime} to {}.]", img.mime));
            }
            if let Some(d) = img.dimension_note() {
                note.push('\n');
                note.push_str(&d);
            }
            if let Some(n) = extra_note {
                note.push('\n');
                note.push_str(n);
            }
            vec![
                ContentBlock::text(note),
                ContentBlock::Image(ImageContent {
                    data: img.data.into(),
                    mime_type: img.mime,
                }),
            ]
        }
        None => {
            let mut note = format!(
                "Read image file [{mime}]\n[Image omitted: could not be resized below the inline image size limit.]"
            );
            if let Some(n) = extra_note {
                note.push('\n');
                note.push_str(n);
            }
            vec![ContentBlock::text(note)]
        }
    }
}

/// A file on disk read whole by [`read_small_here`] / [`read_opened`].
enum Small {
    /// Its bytes and the image type its first bytes name.
    Image(Vec<u8>, &'static str),
    Text(crate::fs::DecodedText),
}

/// Files up to this size (bytes) are read on the async worker itself ([`read_small_here`]):
/// an open, a `fstat`, a read and a close cost less than the hand-off to a blocking thread
/// and back (two thread wake-ups on a tool round's path).
pub(crate) const READ_HERE_UP_TO: u64 = 64 * 1024;

/// A regular file under [`STREAM_FROM`] bytes read whole through one open: an image by its
/// first bytes, else its decoded text (as [`crate::fs::DiskFs`] reads it), read here for a file
/// of at most [`READ_HERE_UP_TO`] bytes (`Ok`; `Ok(None)`: an error, or large after all: the
/// tool's general path takes it and says what is wrong); `Err` with the opened file and its
/// size for a larger one (to finish with [`read_opened`] on a blocking thread), `Err(None)`
/// for what is not a regular file (or not there).
fn read_small_here(path: &std::path::Path) -> Result<Option<Small>, Option<(std::fs::File, u64)>> {
    // Only a regular file is opened here: opening a FIFO would wait for its writer.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return Err(None);
    }
    let file = std::fs::File::open(path).map_err(|_| None)?;
    let meta = file.metadata().map_err(|_| None)?;
    if !meta.is_file() {
        return Err(None);
    }
    if meta.len() > READ_HERE_UP_TO {
        return Err(Some((file, meta.len())));
    }
    Ok(read_opened(file, meta.len()))
}

/// The rest of [`read_small_here`] once the regular file `file` is open (`len`: its size in
/// bytes): `None` for a file of [`STREAM_FROM`] bytes or more. Blocking.
fn read_opened(mut file: std::fs::File, len: u64) -> Option<Small> {
    use std::io::Read as _;
    if len >= STREAM_FROM {
        return None;
    }
    let mut bytes = Vec::with_capacity(len as usize + 1);
    // Through `Take` (up to the limit): the size is known, no second `fstat` for a hint.
    (&mut file).take(STREAM_FROM).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 >= STREAM_FROM {
        return None;
    }
    Some(match sniff_image(&bytes[..bytes.len().min(SNIFF_BYTES)]) {
        Some(mime) => Small::Image(bytes, mime),
        None => Small::Text(crate::fs::decode_file(bytes)),
    })
}

#[async_trait]
impl Tool for ReadTool {
    /// Pi's `promptSnippet` of `read` (`core/tools/read.js`, 1.6).
    fn prompt_snippet(&self) -> Option<String> {
        Some("Read file contents".into())
    }

    /// Pi's `promptGuidelines` of `read` (`core/tools/read.js`, 1.6).
    fn prompt_guidelines(&self) -> Vec<String> {
        ["Use read to examine files instead of cat or sed."]
            .map(String::from)
            .to_vec()
    }

    /// For the approval policy: reads only.
    fn approval_kind(&self) -> crate::approval::ToolKind {
        crate::approval::ToolKind::ReadOnly
    }

    fn name(&self) -> std::borrow::Cow<'_, str> {
        std::borrow::Cow::Borrowed("read")
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
 // Pi 1.6: `constrainedSampling: { type: "json_schema", strict: "prefer" }`.
 constrained_sampling: Some(pi_ai::ConstrainedSampling::PREFER_JSON_SCHEMA),
            name: "read".into(),
            description: format!("Read the contents of a file. Supports text files and images (jpg, png, gif, webp, bmp). Images are sent as attachments. For text files, output is truncated to {MAX_LINES} lines or 50KB (whichever is hit first). Use offset/limit for large files. When you need the full file, continue with offset until complete."),
            parameters: json!({"type":"object","required":["path"],"properties":{
                "path":{"type":"string","description":"Path to the file to read (relative or absolute)"},
                "offset":{"type":"number","description":"Line number to start reading from (1-indexed)"},
                "limit":{"type":"number","description":"Maximum number of lines to read"}}}),
        }
    }

    /// The file's window, image or note ([`ReadTool::read`]) with Pi 1.6's structured
    /// content ([`with_structured`]).
    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        self.read(ctx, args).await.map(with_structured)
    }
}

/// `o` with Pi 1.6's `structuredContent` of a `read` result (`toReadOutput`,
/// `core/tools/read.js`): the first text block's text (`""` without one), or, when it holds
/// an image, `{type: "image", data, mimeType, note}` with that text as the note.
fn with_structured(mut o: ToolOutput) -> ToolOutput {
    let text = o
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .unwrap_or_default();
    let image = o.content.iter().find_map(|b| match b {
        ContentBlock::Image(i) => Some(i),
        _ => None,
    });
    o.structured_content = Some(match image {
        Some(i) => {
            serde_json::json!({"type": "image", "data": &*i.data, "mimeType": i.mime_type, "note": text})
        }
        None => Value::String(text.to_string()),
    });
    o
}

impl ReadTool {
    /// The result of reading the image `bytes` (of the sniffed type `mime`): its blocks
    /// ([`image_blocks`]), fitted unless `images.autoResize` is off, with Pi's note for a model
    /// that does not take images.
    async fn image_output(
        &self,
        ctx: &ToolContext,
        bytes: Vec<u8>,
        mime: &'static str,
    ) -> ToolOutput {
        ToolOutput {
            terminate: false,
            content: image_blocks(
                bytes,
                mime,
                non_vision_note(ctx.model_input.as_deref()),
                !self.state.images_unresized,
            )
            .await,
            details: None,
            ..Default::default()
        }
    }

    /// The `read` tool's result without its structured content.
    async fn read(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let a: Args = parse_args("read", args)?;
        let path = self.state.resolve(self.fs.root(), &a.path)?;
        let offset = a.offset.map(|o| o.max(1.0) as usize).unwrap_or(1);
        let limit = a.limit.map(|l| l.max(1.0) as usize);
        // The common case, a file on disk under the streaming size with no editor buffer over
        // it, in one blocking hop (below: a sniff, a stat and a read, each its own hop and the
        // first and last each opening the file).
        // A file of at most `READ_HERE_UP_TO` bytes is read here, without the hop.
        let small = if self.fs.has_buffer(&path) {
            None
        } else {
            match read_small_here(&path) {
                Ok(small) => small,
                Err(None) => None,
                Err(Some((file, len))) => {
                    tokio::task::spawn_blocking(move || read_opened(file, len))
                        .await
                        .ok()
                        .flatten()
                }
            }
        };
        match small {
            Some(Small::Image(bytes, mime)) => {
                return Ok(self.image_output(&ctx, bytes, mime).await)
            }
            Some(Small::Text(decoded)) => {
                let (mut text, details) =
                    read_window(&decoded.text, offset, limit, &a.path).map_err(ToolError::new)?;
                self.state.reads.record(&path, &decoded.text);
                if let Some(note) = decoded.encoding.read_note() {
                    text.push_str("\n\n");
                    text.push_str(&note);
                }
                return Ok(ToolOutput {
                    content: vec![ContentBlock::text(text)],
                    details,
                    terminate: false,
                    ..Default::default()
                });
            }
            None => {}
        }
        // An image by its content on disk, whatever its name (Pi's detection); else text.
        let mime = match self.fs.read_head(&path, SNIFF_BYTES).await {
            Ok(head) => sniff_image(&head),
            Err(_) => None,
        };
        if let Some(mime) = mime {
            let bytes = self
                .fs
                .read_bytes(&path)
                .await
                .map_err(|e| ToolError::new(e.to_string()))?;
            return Ok(self.image_output(&ctx, bytes, mime).await);
        }
        // A large file on disk (no editor buffer over it) is read in a stream: memory stays
        // bounded whatever its size (issue 19 item 5).
        let large = !self.fs.has_buffer(&path)
            && tokio::fs::metadata(&path)
                .await
                .is_ok_and(|m| m.is_file() && m.len() >= STREAM_FROM);
        let (mut text, details, encoding) = if large {
            let (p, shown, cancel) = (path.clone(), a.path.clone(), ctx.cancel.clone());
            let s = tokio::task::spawn_blocking(move || {
                stream_window(&p, offset, limit, &shown, &cancel)
            })
            .await
            .map_err(|e| ToolError::new(format!("read failed: {e}")))?
            .map_err(ToolError::new)?;
            if let Some(h) = s.hash {
                self.state.reads.record_hash(&path, h);
            }
            (s.text, s.details, s.encoding)
        } else {
            let snap = self
                .fs
                .read(&path)
                .await
                .map_err(|e| ToolError::new(e.to_string()))?;
            let (text, details) =
                read_window(&snap.text, offset, limit, &a.path).map_err(ToolError::new)?;
            self.state.reads.record(&path, &snap.text);
            (text, details, snap.encoding)
        };
        // ED-04: a file that is not UTF-8 says so (and whether edits can keep it).
        if let Some(note) = encoding.read_note() {
            text.push_str("\n\n");
            text.push_str(&note);
        }
        // The editor's view differs from the disk (the user's unsaved changes): say so, so the
        // model knows what `bash` sees.
        if let Some(note) = self.fs.unsaved_note(&path).await {
            text.push_str("\n\n");
            text.push_str(&note);
        }
        Ok(ToolOutput {
            content: vec![ContentBlock::text(text)],
            details,
            terminate: false,
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(img: image::DynamicImage, format: image::ImageFormat) -> String {
        use base64::Engine as _;
        let mut out = Vec::new();
        img.write_to(&mut std::io::Cursor::new(&mut out), format)
            .unwrap();
        base64::engine::general_purpose::STANDARD.encode(out)
    }

    fn size_of(data: &str) -> (u32, u32) {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap();
        let img = image::load_from_memory(&bytes).unwrap();
        (img.width(), img.height())
    }

    /// Pi 1.6's `processImage` for a prompt's images: a large PNG fitted with the dimension
    /// note, kept at its size without `autoResize`; a BMP converted to PNG with the conversion
    /// hint (also without `autoResize`); a small PNG and an undecodable one sent as they came.
    #[test]
    fn prompt_images_are_processed_as_pi_1_6_processes_them() {
        let wide = image::DynamicImage::ImageRgb8(image::RgbImage::from_fn(3000, 20, |x, y| {
            image::Rgb([(x % 256) as u8, (y % 256) as u8, 7])
        }));
        let png = encoded(wide, image::ImageFormat::Png);
        let (img, hints) = process_prompt_image(&png, "image/png", true).unwrap();
        assert_eq!(
            (img.mime_type.as_str(), size_of(&img.data)),
            ("image/png", (2000, 13))
        );
        assert_eq!(hints, ["[Image: original 3000x20, displayed at 2000x13. Multiply coordinates by 1.50 to map to original image.]"]);
        let (img, hints) = process_prompt_image(&png, "image/png", false).unwrap();
        assert_eq!((&*img.data, hints.len()), (png.as_str(), 0));
        let small = image::DynamicImage::ImageRgb8(image::RgbImage::new(4, 3));
        let bmp = encoded(small.clone(), image::ImageFormat::Bmp);
        for auto in [true, false] {
            let (img, hints) = process_prompt_image(&bmp, "image/bmp", auto).unwrap();
            assert_eq!(
                (img.mime_type.as_str(), size_of(&img.data)),
                ("image/png", (4, 3))
            );
            assert_eq!(hints, ["[Image converted from image/bmp to image/png.]"]);
        }
        let tiny = encoded(small, image::ImageFormat::Png);
        let (img, hints) = process_prompt_image(&tiny, "image/png", true).unwrap();
        assert_eq!((&*img.data, hints.len()), (tiny.as_str(), 0));
        let (img, hints) = process_prompt_image("AAAA", "image/png", true).unwrap();
        assert_eq!(
            (&*img.data, img.mime_type.as_str(), hints.len()),
            ("AAAA", "image/png", 0)
        );
        assert_eq!(
            process_prompt_image("AAAA", "image/x-unknown", true),
            Err(
                "[Image omitted: could not be converted to a supported inline image format.]"
                    .into()
            )
        );
    }

    /// Pi 1.6's `resizeImage` sends a fitted image as the smaller of PNG and JPEG at quality
    /// 80: a 20×3000 strip of one colour as a 13×2000 JPEG, a 3000×20 one as a 2000×13 PNG (Pi
    /// 1.6.0 on the same images: a JPEG of 1,504 bytes, a PNG of 640).
    #[test]
    fn a_fitted_image_takes_the_smaller_format() {
        let solid = |w: u32, h: u32| {
            let img = image::RgbImage::from_pixel(w, h, image::Rgb([200, 30, 30]));
            let mut out = Vec::new();
            image::DynamicImage::ImageRgb8(img)
                .write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
                .unwrap();
            out
        };
        let fitted: Vec<(String, (u32, u32))> = [(20, 3000), (3000, 20)]
            .into_iter()
            .map(|(w, h)| {
                let f = fit_image(&solid(w, h), "image/png").unwrap();
                (f.mime, size_of(&f.data))
            })
            .collect();
        assert_eq!(
            fitted,
            [
                ("image/jpeg".to_string(), (13, 2000)),
                ("image/png".to_string(), (2000, 13))
            ]
        );
    }

    /// What [`fit_image`] says it did: an image within the limits is its own bytes (no sizes,
    /// no note), a fitted one carries its sizes and Pi's note, bytes that are no image are
    /// unreadable.
    #[test]
    fn fit_image_says_what_it_did() {
        use base64::Engine as _;
        let png = |w: u32, h: u32| {
            let mut out = Vec::new();
            image::DynamicImage::ImageRgb8(image::RgbImage::new(w, h))
                .write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
                .unwrap();
            out
        };
        let small = png(4, 3);
        assert_eq!(
            fit_image(&small, "image/png"),
            Ok(SentImage {
                data: base64::engine::general_purpose::STANDARD.encode(&small),
                mime: "image/png".into(),
                resized: None,
            })
        );
        let fitted = fit_image(&png(4000, 10), "image/png").unwrap();
        assert_eq!(
            fitted.resized,
            Some(Resized {
                original: (4000, 10),
                sent: (2000, 5)
            })
        );
        assert_eq!(
            fitted.dimension_note().as_deref(),
            Some("[Image: original 4000x10, displayed at 2000x5. Multiply coordinates by 2.00 to map to original image.]")
        );
        assert_eq!(
            fit_image(b"not an image", "image/png"),
            Err(Unfit::Unreadable)
        );
    }

    /// Pi 1.6's `detectSupportedImageMimeType` (`utils/mime.js`), case by case: each row's
    /// bytes gave Pi 1.6.0's function (run with its Node) the type in the row. A PNG without
    /// `IHDR`, an animated PNG and a JPEG-LS are text to Pi; so is a `BM` that is not a bitmap.
    #[test]
    fn images_are_sniffed_as_pi_1_6_sniffs_them() {
        let cases: [(&str, &str, Option<&str>); 11] = [
            ("png", "89504e470d0a1a0a0000000d4948445200000000000000000000000000000000000000000249444154787800000000", Some("image/png")),
            ("png_without_ihdr", "89504e470d0a1a0a0000000249444154787800000000", None),
            ("apng", "89504e470d0a1a0a0000000d494844520000000000000000000000000000000000000000086163544c0000000000000000000000000000000249444154787800000000", None),
            ("jpeg", "ffd8ffe0000000000000000000000000", Some("image/jpeg")),
            ("jpeg_ls", "ffd8fff7000000000000000000000000", None),
            ("gif", "47494638396100000000000000000000", Some("image/gif")),
            ("webp", "52494646000000005745425056503820", Some("image/webp")),
            ("bmp", "424d46000000000000003600000028000000010000000100000001001800000000000000000000000000000000000000000000000000", Some("image/bmp")),
            ("bmp_bad_depth", "424d46000000000000003600000028000000010000000100000001000300000000000000000000000000000000000000000000000000", None),
            ("bm_text", "424d57206275696c647320636172733b207468697320697320746578742c206e6f742061206269746d61702e", None),
            ("text", "68656c6c6f20776f726c640a", None),
        ];
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let got: Vec<(&str, Option<&str>)> = cases
            .iter()
            .map(|(k, h, _)| (*k, sniff_image(&hex(h))))
            .collect();
        let want: Vec<(&str, Option<&str>)> = cases.iter().map(|(k, _, m)| (*k, *m)).collect();
        assert_eq!(got, want);
    }

    /// The whole-text window of a reference implementation (Pi's algorithm over the split
    /// lines), to check [`Window`] against.
    fn reference_window(
        text: &str,
        offset: usize,
        limit: Option<usize>,
    ) -> Result<(String, usize, usize), String> {
        let lines: Vec<&str> = text.split('\n').collect();
        let total = lines.len();
        let start = offset.max(1) - 1;
        if start >= total {
            return Err(format!(
                "Offset {offset} is beyond end of file ({total} lines total)"
            ));
        }
        let end = limit.map(|l| (start + l).min(total)).unwrap_or(total);
        let sel = &lines[start..end];
        let bytes = sel.iter().map(|l| l.len()).sum::<usize>() + sel.len() - 1;
        let mut kept = 0;
        let mut out = 0;
        for (i, l) in sel.iter().enumerate().take(MAX_LINES) {
            let add = l.len() + usize::from(i > 0);
            if out + add > MAX_BYTES {
                break;
            }
            out += add;
            kept += 1;
        }
        Ok((sel[..kept].join("\n"), sel.len(), bytes))
    }

    #[test]
    fn window_keeps_what_pi_keeps_for_every_shape() {
        let long = "z".repeat(MAX_BYTES + 10);
        let texts = [
            String::new(),
            "\n".into(),
            "a".into(),
            "a\n\nb\r\nc\rd\n".into(),
            (0..2500).map(|i| format!("l{i}\n")).collect(),
            (0..300).map(|_| "y".repeat(200) + "\n").collect(),
            format!("a\n{long}\nb"),
            format!("{long}\nshort"),
            "x".repeat(MAX_BYTES) + "\n" + "y",
        ];
        for text in &texts {
            for offset in [1, 2, 3, 1999, 2001, 2600] {
                for limit in [None, Some(1), Some(2), Some(2000), Some(5000)] {
                    let got = read_window(text, offset, limit, "f");
                    let want = reference_window(text, offset, limit);
                    match (got, want) {
                        (Err(g), Err(w)) => assert_eq!(g, w),
                        (Ok((out, details)), Ok((kept, lines, bytes))) => {
                            assert!(
                                out.starts_with(&kept) || out.starts_with("[Line "),
                                "{offset} {limit:?}"
                            );
                            if let Some(d) = details {
                                assert_eq!(d["truncation"]["totalLines"], lines);
                                assert_eq!(d["truncation"]["totalBytes"], bytes);
                            }
                        }
                        (g, w) => panic!("{offset} {limit:?}: {g:?} vs {w:?}"),
                    }
                }
            }
        }
    }

    /// A streamed read gives exactly the whole-text read's output and hash, across chunk
    /// boundaries that cut lines and characters, in UTF-8 and in a detected encoding.
    #[test]
    fn streamed_read_matches_the_whole_read() {
        let dir_tmp = tempfile::tempdir().unwrap();
        let dir = dir_tmp.path().to_path_buf();
        std::fs::create_dir_all(&dir).unwrap();
        let cancel = tokio_util::sync::CancellationToken::new();
        // Multi-byte characters straddle every chunk boundary (3-byte 中 at odd offsets).
        let mut utf8: String = (0..120_000).map(|i| format!("row {i} 中é🦊\n")).collect();
        utf8.push_str("no final newline");
        let mut one_line = "q".repeat(3 * STREAM_CHUNK + 7);
        one_line.push('\n');
        // Invalid bytes at and around a chunk boundary, a cut character at the very end.
        let mut bad = utf8.clone().into_bytes();
        bad[STREAM_CHUNK - 1] = 0xFF;
        bad[2 * STREAM_CHUNK] = 0xC3;
        bad.extend_from_slice(b"\xE4\xB8");
        // A UTF-8 BOM: kept in the text, said by the encoding as `decode_file` says it.
        let bom = format!("\u{FEFF}{utf8}");
        let cases: Vec<(String, Vec<u8>)> = vec![
            (utf8.clone(), utf8.clone().into_bytes()),
            (bom.clone(), bom.clone().into_bytes()),
            (one_line.clone(), one_line.clone().into_bytes()),
            (String::from_utf8_lossy(&bad).into_owned(), bad),
        ];
        for (k, (text, bytes)) in cases.iter().enumerate() {
            let p = dir.join(format!("f{k}"));
            std::fs::write(&p, bytes).unwrap();
            for (offset, limit) in [(1, None), (50_000, Some(10)), (119_990, None), (2, None)] {
                let s = match (
                    stream_window(&p, offset, limit, "f", &cancel),
                    read_window(text, offset, limit, "f"),
                ) {
                    (Err(g), Err(w)) => {
                        assert_eq!(g, w);
                        continue;
                    }
                    (Ok(s), Ok((want, details))) => {
                        assert!(s.text == want, "case {k} offset {offset}");
                        assert_eq!(s.details, details);
                        s
                    }
                    (g, w) => panic!("case {k} offset {offset}: {:?} vs {w:?}", g.map(|s| s.text)),
                };
                assert_eq!(s.hash, Some(super::super::text_hash(text)));
                assert_eq!(s.encoding, crate::fs::decode_file(bytes.clone()).encoding);
                assert_eq!((s.encoding.is_utf8(), s.encoding.bom), (k < 3, k == 1));
            }
        }
        // Latin-1 text, detected from the first chunk, decoded in a stream.
        let latin: String = (0..40_000).map(|i| format!("café {i} = naïve\n")).collect();
        let (bytes, _, _) = encoding_rs::WINDOWS_1252.encode(&latin);
        let p = dir.join("latin1");
        std::fs::write(&p, &bytes).unwrap();
        let s = stream_window(&p, 39_999, None, "f", &cancel).unwrap();
        assert_eq!(s.text, read_window(&latin, 39_999, None, "f").unwrap().0);
        assert_eq!(s.encoding.name(), "windows-1252");
        assert_eq!(s.hash, Some(super::super::text_hash(&latin)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn window_and_notices_match_pi() {
        assert_eq!(read_window("a\nb\n", 1, None, "f").unwrap().0, "a\nb\n");
        assert_eq!(
            read_window("alpha\nBETA\nc\nd", 2, Some(1), "f").unwrap().0,
            "BETA\n\n[2 more lines in file. Use offset=3 to continue.]"
        );
        let big: String = (1..=2501).map(|i| format!("line {i}\n")).collect();
        let out = read_window(big.trim_end(), 1, None, "f").unwrap().0;
        assert!(
            out.ends_with(
                "line 2000\n\n[Showing lines 1-2000 of 2501. Use offset=2001 to continue.]"
            ),
            "{}",
            &out[out.len() - 80..]
        );
        assert_eq!(
            read_window("x", 5, None, "f").unwrap_err(),
            "Offset 5 is beyond end of file (1 lines total)"
        );
        let long = "x".repeat(60 * 1024);
        assert_eq!(
            read_window(&format!("a\n{long}\nb"), 2, None, "big.txt").unwrap().0,
            "[Line 2 is 60.0KB, exceeds 50.0KB limit. Use bash: sed -n '2p' big.txt | head -c 51200]"
        );
        let wide: String = (0..100)
            .map(|_| format!("{}\n", "y".repeat(1000)))
            .collect();
        let (out, details) = read_window(&wide, 1, None, "w").unwrap();
        assert!(out.ends_with(
            "\n\n[Showing lines 1-51 of 101 (50.0KB limit). Use offset=52 to continue.]"
        ));
        assert_eq!(details.unwrap()["truncation"]["outputLines"], 51);
    }
}
