//! `read {path, offset?, limit?}`: the file's text (an open buffer's unsaved text included),
//! head-truncated to 2,000 lines or 50 KB with Pi's continuation notice; images as image blocks.
//!
//! Images are recognised by content (PNG, JPEG, GIF, WebP signatures; any file name), as Pi
//! 0.73.1 does, and resized like Pi's `resizeImage` (`utils/image-resize.js`): an image within
//! 2000×2000 pixels whose base64 is under 4.5 MB is sent as it is; otherwise it is turned
//! upright (EXIF orientation), scaled to fit 2000×2000 (Lanczos3), and encoded as PNG, then
//! JPEG at quality 80, 85, 70, 55, 40, taking the first whose base64 is under 4.5 MB; while none
//! is, the size shrinks to 75 % per step. The text block then carries Pi's dimension note; an
//! image that cannot be made small enough, or not decoded, is omitted with Pi's note.
//! When the model that made the call does not take images (its `input` lacks `image`), the text
//! block carries Pi's note saying so ([`NON_VISION_IMAGE_NOTE`]); the image block stays in the
//! result and the request view replaces it with a placeholder (`pi_ai::transform`), as in Pi.

use std::sync::Arc;

use async_trait::async_trait;
use pi_ai::{ContentBlock, ImageContent, ToolSpec};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse_args, resolve_path_in, ToolState, MAX_BYTES, MAX_LINES};
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
/// Pi's `details.truncation`. `Err` is Pi's offset error.
pub(crate) fn read_window(
    text: &str,
    offset: usize,
    limit: Option<usize>,
    path: &str,
) -> Result<(String, Option<Value>), String> {
    let lines: Vec<&str> = text.split('\n').collect();
    let total = lines.len();
    let start = offset.max(1) - 1;
    if start >= total {
        return Err(format!(
            "Offset {offset} is beyond end of file ({total} lines total)"
        ));
    }
    let wanted_end = limit.map(|l| (start + l).min(total)).unwrap_or(total);
    let selected = &lines[start..wanted_end];
    let selected_bytes: usize =
        selected.iter().map(|l| l.len()).sum::<usize>() + selected.len().saturating_sub(1);
    let details = |by: &str, out_lines: usize, out_bytes: usize, first_exceeds: bool| {
        json!({"truncation": {
            "truncated": true, "truncatedBy": by, "totalLines": selected.len(),
            "totalBytes": selected_bytes, "outputLines": out_lines, "outputBytes": out_bytes,
            "lastLinePartial": false, "firstLineExceedsLimit": first_exceeds,
            "maxLines": MAX_LINES, "maxBytes": MAX_BYTES}})
    };
    if selected.len() <= MAX_LINES && selected_bytes <= MAX_BYTES {
        let out = selected.join("\n");
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
    }
    if selected[0].len() > MAX_BYTES {
        return Ok((
            format!(
                "[Line {} is {}, exceeds {} limit. Use bash: sed -n '{}p' {path} | head -c {MAX_BYTES}]",
                start + 1,
                format_size(selected[0].len()),
                format_size(MAX_BYTES),
                start + 1
            ),
            Some(details("bytes", 0, 0, true)),
        ));
    }
    let mut out = String::new();
    let mut kept = 0;
    let mut by = "lines";
    for (i, line) in selected.iter().enumerate().take(MAX_LINES) {
        let add = line.len() + usize::from(i > 0);
        if out.len() + add > MAX_BYTES {
            by = "bytes";
            break;
        }
        if i > 0 {
            out.push('\n');
        }
        out.push_str(line);
        kept += 1;
    }
    let end = start + kept;
    let note = if by == "lines" {
        format!(
            "\n\n[Showing lines {}-{end} of {total}. Use offset={} to continue.]",
            start + 1,
            end + 1
        )
    } else {
        format!(
            "\n\n[Showing lines {}-{end} of {total} ({} limit). Use offset={} to continue.]",
            start + 1,
            format_size(MAX_BYTES),
            end + 1
        )
    };
    let out_bytes = out.len();
    out.push_str(&note);
    Ok((out, Some(details(by, kept, out_bytes, false))))
}

/// The image type of `bytes` by signature (PNG, JPEG, GIF, WebP), as Pi detects it from the
/// file's content.
fn sniff_image(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
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

/// An image ready to send: base64 data, its MIME type, and the original and sent sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentImage {
    pub data: String,
    pub mime: String,
    pub original: (u32, u32),
    pub sent: (u32, u32),
    /// Re-encoded (Pi's `wasResized`, also when the size stayed and only the bytes shrank).
    pub resized: bool,
}

impl SentImage {
    /// Pi's `formatDimensionNote`, for resized images only.
    pub(crate) fn dimension_note(&self) -> Option<String> {
        if !self.resized {
            return None;
        }
        let scale = f64::from(self.original.0) / f64::from(self.sent.0);
        Some(format!(
            "[Image: original {}x{}, displayed at {}x{}. Multiply coordinates by {scale:.2} to map to original image.]",
            self.original.0, self.original.1, self.sent.0, self.sent.1
        ))
    }
}

fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// Pi's `resizeImage` with its default options (see module docs); `None` when the image cannot
/// be decoded or made small enough. CPU-bound: call it on a blocking thread.
pub(crate) fn fit_image(bytes: &[u8], mime: &str) -> Option<SentImage> {
    use base64::Engine as _;
    use image::ImageDecoder as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut decoder = image::ImageReader::new(std::io::Cursor::new(bytes))
        .with_guessed_format()
        .ok()?
        .into_decoder()
        .ok()?;
    let orientation = decoder.orientation().ok();
    let mut img = image::DynamicImage::from_decoder(decoder).ok()?;
    if let Some(o) = orientation {
        img.apply_orientation(o);
    }
    let (w, h) = (img.width(), img.height());
    if w <= IMAGE_MAX_SIDE && h <= IMAGE_MAX_SIDE && base64_len(bytes.len()) < IMAGE_MAX_BASE64 {
        return Some(SentImage {
            data: b64(bytes),
            mime: mime.to_string(),
            original: (w, h),
            sent: (w, h),
            resized: false,
        });
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
            original: (w, h),
            sent: (cw, ch),
            resized: true,
        };
        let mut png = Vec::new();
        if resized
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .is_ok()
            && base64_len(png.len()) < IMAGE_MAX_BASE64
        {
            return Some(found(b64(&png), "image/png"));
        }
        let rgb = image::DynamicImage::ImageRgb8(resized.to_rgb8());
        for q in JPEG_QUALITIES {
            let mut jpeg = Vec::new();
            let enc = image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, q);
            if rgb.write_with_encoder(enc).is_ok() && base64_len(jpeg.len()) < IMAGE_MAX_BASE64 {
                return Some(found(b64(&jpeg), "image/jpeg"));
            }
        }
        if cw == 1 && ch == 1 {
            return None;
        }
        let nw = if cw == 1 { 1 } else { (cw * 3 / 4).max(1) };
        let nh = if ch == 1 { 1 } else { (ch * 3 / 4).max(1) };
        if (nw, nh) == (cw, ch) {
            return None;
        }
        (cw, ch) = (nw, nh);
    }
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

async fn image_blocks(
    bytes: Vec<u8>,
    mime: &'static str,
    extra_note: Option<&str>,
) -> Vec<ContentBlock> {
    let fitted = tokio::task::spawn_blocking(move || fit_image(&bytes, mime))
        .await
        .ok()
        .flatten();
    match fitted {
        Some(img) => {
            let mut note = format!("Read image file [{}]", img.mime);
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
                    data: img.data,
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

    async fn execute(&self, ctx: ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        let a: Args = parse_args("read", args)?;
        let path = resolve_path_in(self.fs.root(), &self.state.allowed_dirs, &a.path)?;
        // An image by its content on disk, whatever its name (Pi's detection); else text.
        let mime = match self.fs.read_head(&path, 16).await {
            Ok(head) => sniff_image(&head),
            Err(_) => None,
        };
        if let Some(mime) = mime {
            let bytes = self
                .fs
                .read_bytes(&path)
                .await
                .map_err(|e| ToolError::new(e.to_string()))?;
            return Ok(ToolOutput {
                terminate: false,
                content: image_blocks(bytes, mime, non_vision_note(ctx.model_input.as_deref()))
                    .await,
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
        let (text, details) =
            read_window(&snap.text, offset, limit, &a.path).map_err(ToolError::new)?;
        self.state.reads.record(&path, &snap.text);
        Ok(ToolOutput {
            content: vec![ContentBlock::text(text)],
            details,
            terminate: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
