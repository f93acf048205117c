//! Images in session files: the image window (`sessions.imageTurns`), images kept out of memory while loading, large images in `assets/` (case SESS-05).

use std::collections::HashSet;
use std::path::Path;

use pi_ai::Message;
use serde_json::{json, Value};

use super::*;

/// With [`ImageStorage::Assets`], images whose base64 text is longer than this (in bytes) are
/// stored once in the sessions folder's `assets/` (named by content hash) instead of inline in
/// the entry (case SESS-05).
pub const IMAGE_INLINE_LIMIT: usize = 256 * 1024;

/// The folder beside the session files that holds large images ([`ImageStorage::Assets`]).
pub const ASSETS_DIR: &str = "assets";

/// Field of an image block whose bytes are in `assets/` (its `data` is then empty). Pi 0.73.1
/// does not know it: it sends such an image as an empty data URL. Files holding it are still
/// read here (the bytes are read back from `assets/`), and a fork or clone of them is written
/// inline.
pub const ASSET_FIELD: &str = "piLspAsset";

/// How a session file holds images (setting `sessions.imageStorage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ImageStorage {
    /// `"inline"` (default): base64 in the entry, exactly as Pi writes it, so Pi resumes the
    /// file and sends the image.
    #[default]
    Inline,
    /// `"assets"`: images over [`IMAGE_INLINE_LIMIT`] go to `assets/` beside the session file
    /// and the entry keeps `data: ""` with [`ASSET_FIELD`]. Smaller files, but Pi 0.73.1 cannot
    /// read those images.
    Assets,
}

/// The default of `sessions.imageTurns`: the images of the last 10 user messages go to the
/// model.
pub const DEFAULT_IMAGE_TURNS: usize = 10;

/// What replaces an image that is older than the image window in the model context (case
/// SESS-05: the context builder drops old images after N turns; the file keeps them).
pub const IMAGE_DROPPED_NOTE: &str =
    "(image omitted from the context: older than the last user turns that keep their images; it stays in the session file)";

/// Image settings of sessions (`sessions.imageStorage`, `sessions.imageTurns`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageOptions {
    /// Where image bytes are written.
    pub storage: ImageStorage,
    /// Images of the last this many user messages of the context go to the model, older ones
    /// are replaced by [`IMAGE_DROPPED_NOTE`]; `None` (setting `0`): every image, as Pi.
    pub keep_turns: Option<usize>,
}

impl Default for ImageOptions {
    fn default() -> Self {
        ImageOptions {
            storage: ImageStorage::Inline,
            keep_turns: Some(DEFAULT_IMAGE_TURNS),
        }
    }
}

impl ImageOptions {
    /// Reads `sessions.imageStorage` (`"inline"` | `"assets"`) and `sessions.imageTurns` (a
    /// whole number; `0` keeps every image) from merged settings. A wrong value keeps the
    /// default and is returned as a warning.
    pub fn from_settings(merged: &serde_json::Map<String, Value>) -> (ImageOptions, Vec<String>) {
        let mut o = ImageOptions::default();
        let mut warnings = Vec::new();
        let Some(s) = merged.get("sessions") else {
            return (o, warnings);
        };
        match s.get("imageStorage") {
            None => {}
            Some(v) if v == "inline" => o.storage = ImageStorage::Inline,
            Some(v) if v == "assets" => o.storage = ImageStorage::Assets,
            Some(v) => warnings.push(format!(
                "settings: sessions.imageStorage must be \"inline\" or \"assets\", not {v}"
            )),
        }
        match s.get("imageTurns") {
            None => {}
            Some(v) => match v.as_u64() {
                Some(0) => o.keep_turns = None,
                Some(n) => o.keep_turns = Some(usize::try_from(n).unwrap_or(usize::MAX)),
                None => warnings.push(format!(
                    "settings: sessions.imageTurns must be a whole number (0: every image), not {v}"
                )),
            },
        }
        (o, warnings)
    }
}

/// The model-context image window (case SESS-05): every image block (in user messages and
/// tool results) before the `keep_turns`-th last user message of `messages` is replaced by a
/// text block [`IMAGE_DROPPED_NOTE`], and so is any image whose data is empty anywhere (never
/// sent as an empty image). `None` keeps every image with data. Returns how many images were
/// replaced. Idempotent.
pub fn image_window(messages: &mut [Message], keep_turns: Option<usize>) -> usize {
    use pi_ai::{ContentBlock, UserContent};
    let start = keep_turns.map_or(0, |n| {
        let mut seen = 0;
        messages
            .iter()
            .rposition(|m| {
                if matches!(m, Message::User(_)) {
                    seen += 1;
                }
                seen == n.max(1)
            })
            .unwrap_or(0)
    });
    let mut replaced = 0;
    for (k, m) in messages.iter_mut().enumerate() {
        let blocks = match m {
            Message::User(u) => match &mut u.content {
                UserContent::Blocks(b) => b,
                UserContent::Text(_) => continue,
            },
            Message::ToolResult(r) => &mut r.content,
            Message::Assistant(_) | Message::System(_) => continue,
        };
        for b in blocks.iter_mut() {
            if let ContentBlock::Image(i) = b {
                if k < start || i.data.is_empty() {
                    *b = ContentBlock::text(IMAGE_DROPPED_NOTE);
                    replaced += 1;
                }
            }
        }
    }
    replaced
}

/// Loading keeps no image bytes over this (base64 length) in the messages it parses; the
/// ones the image window keeps are read back from their lines afterwards.
pub(super) const LOAD_IMAGE_KEEP: usize = 16 * 1024;

/// Empties the data of the large images of `message` (see [`LOAD_IMAGE_KEEP`]); true when
/// one was emptied.
pub(super) fn strip_image_data(message: &mut Message) -> bool {
    use pi_ai::{ContentBlock, UserContent};
    let blocks = match message {
        Message::User(u) => match &mut u.content {
            UserContent::Blocks(b) => b,
            UserContent::Text(_) => return false,
        },
        Message::ToolResult(r) => &mut r.content,
        Message::Assistant(_) | Message::System(_) => return false,
    };
    let mut stripped = false;
    for b in blocks.iter_mut() {
        if let ContentBlock::Image(i) = b {
            if i.data.len() > LOAD_IMAGE_KEEP {
                i.data = "".into();
                stripped = true;
            }
        }
    }
    stripped
}

/// Puts back the image bytes loading left out (`stripped`: entry indices) of the `message`
/// entries on the path to `leaf` that lie within the image window (from the `keep_turns`-th
/// last user message entry of the path on; every one for `None`), reading their lines again.
pub(super) fn restore_images(
    tree: &SessionTree,
    leaf: Option<&str>,
    parsed: &mut [Option<Message>],
    stripped: &[usize],
    keep_turns: Option<usize>,
) {
    if stripped.is_empty() {
        return;
    }
    let Some(leaf) = leaf else { return };
    let path = tree.path_indices(leaf);
    let start = keep_turns.map_or(0, |n| {
        window_start(path.iter().map(|&i| &tree.entries[i]), n)
    });
    let recent: HashSet<usize> = path[start..].iter().copied().collect();
    for &i in stripped.iter().filter(|i| recent.contains(i)) {
        if let (Some(slot), Some(m)) = (parsed.get_mut(i), tree.entries[i].message()) {
            *slot = Some(m);
        }
    }
}

/// Where the image window of `keep_turns` user messages starts on a path (`path`: its
/// entries, root first): the position of the `keep_turns`-th last user `message` entry (at
/// least the last one), 0 when the path has fewer. Entries before it keep no image bytes in a
/// context ([`restore_images`], [`SessionTree::context_windowed`]).
pub(super) fn window_start<'a, I>(mut path: I, keep_turns: usize) -> usize
where
    I: DoubleEndedIterator<Item = &'a Entry> + ExactSizeIterator,
{
    let mut seen = 0;
    path.rposition(|e| {
        if e.kind == "message" && e.role() == Some("user") {
            seen += 1;
        }
        seen == keep_turns.max(1)
    })
    .unwrap_or(0)
}

/// The image blocks of a stored entry (message content, custom message content).
pub(super) fn image_blocks(entry: &mut Value) -> Vec<&mut Value> {
    let mut out = Vec::new();
    let content = if entry["type"] == "message" {
        entry.get_mut("message").and_then(|m| m.get_mut("content"))
    } else {
        entry.get_mut("content")
    };
    if let Some(Value::Array(blocks)) = content {
        for b in blocks.iter_mut() {
            if b["type"] == "image" {
                out.push(b);
            }
        }
    }
    out
}

/// The name of an image's base64 `data` for [`SessionWriter::edit_out_images`]: `xxh3:` and
/// the 16 hex digits of its xxh3-64 hash.
pub fn image_hash(data: &str) -> String {
    format!("xxh3:{:016x}", xxhash_rust::xxh3::xxh3_64(data.as_bytes()))
}

/// Moves images over [`IMAGE_INLINE_LIMIT`] of `entry` into `assets` (written once, by content
/// hash, through a temporary file) and leaves `{"type":"image","mimeType","data":"",
/// "piLspAsset":"assets/<hash>.<ext>"}` in their place.
pub(super) fn store_large_images(entry: &mut Value, assets: &Path) -> Result<(), SessionError> {
    use base64::Engine as _;
    for b in image_blocks(entry) {
        let Some(data) = b["data"].as_str().filter(|d| d.len() > IMAGE_INLINE_LIMIT) else {
            continue;
        };
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
            continue;
        };
        let ext = match b["mimeType"].as_str().unwrap_or("") {
            "image/png" => "png",
            "image/jpeg" => "jpg",
            "image/gif" => "gif",
            "image/webp" => "webp",
            _ => "bin",
        };
        let name = format!("{:032x}.{ext}", xxhash_rust::xxh3::xxh3_128(&bytes));
        let file = assets.join(&name);
        if !file.exists() {
            std::fs::create_dir_all(assets).map_err(io(assets))?;
            let tmp = assets.join(format!("{name}.tmp{}", std::process::id()));
            std::fs::write(&tmp, &bytes).map_err(io(&tmp))?;
            std::fs::rename(&tmp, &file).map_err(io(&file))?;
        }
        b["data"] = Value::String(String::new());
        b[ASSET_FIELD] = Value::String(format!("{ASSETS_DIR}/{name}"));
    }
    Ok(())
}

/// Puts the bytes of images stored in `dir`'s assets back into `entry`; a missing asset
/// becomes a text block saying so (and a warning), never an empty image.
pub(super) fn load_images(entry: &mut Value, dir: &Path, warnings: &mut Vec<String>) -> bool {
    use base64::Engine as _;
    let mut changed = false;
    for b in image_blocks(entry) {
        let Some(rel) = b[ASSET_FIELD].as_str().map(str::to_string) else {
            continue;
        };
        changed = true;
        // Only names inside the assets folder are followed.
        let name = rel.strip_prefix(&format!("{ASSETS_DIR}/")).unwrap_or("");
        let ok_name = !name.is_empty() && !name.contains(['/', '\\']) && !name.starts_with('.');
        match ok_name.then(|| std::fs::read(dir.join(ASSETS_DIR).join(name))) {
            Some(Ok(bytes)) => {
                b["data"] = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
                if let Some(o) = b.as_object_mut() {
                    o.remove(ASSET_FIELD);
                }
            }
            _ => {
                warnings.push(format!("image {rel} is missing from {}", dir.display()));
                *b = json!({"type": "text", "text": format!("[image {rel} is missing]")});
            }
        }
    }
    changed
}
