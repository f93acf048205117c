//! The file system tools see: a trait with two implementations, the disk ([`DiskFs`], headless)
//! and the editor (`pi-lsp`'s `EditorFs`: reads see unsaved buffers, writes become
//! `workspace/applyEdit`). Tools touch files only through [`Fs`].
//!
//! Paths given to an `Fs` are absolute and already confined to the workspace by
//! [`crate::tools::resolve_path`].

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;

/// A file's text as the agent sees it, with the editor version when the file is open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSnapshot {
    /// The whole text, shared: an editor keeps one contiguous copy per buffer version and hands
    /// out this `Arc` (no copy per read), so an `Fs` can tell by pointer that a snapshot is
    /// still the buffer's current text.
    pub text: Arc<String>,
    /// LSP document version of an open buffer; `None` for a file read from disk.
    pub version: Option<i32>,
    /// How the file's bytes on disk map to `text` (UTF-8 unless detected otherwise, case
    /// ED-04); writes keep it.
    pub encoding: TextEncoding,
}

/// A file's character encoding, as detected from its bytes ([`decode_file`]) and kept when the
/// file is written ([`encode_text`]; case ED-04).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextEncoding {
    /// The encoding (WHATWG names, `encoding_rs`): `UTF-8`, `windows-1252` (also what
    /// ISO-8859-1 files decode as), `Shift_JIS`, `UTF-16LE`, …
    pub encoding: &'static encoding_rs::Encoding,
    /// The file on disk starts with a byte order mark. UTF-16: taken off the text and written
    /// back by [`encode_text`]. UTF-8 ([`UTF8_BOM`]): it stays in the text read from disk as
    /// U+FEFF, as Pi keeps it, so [`encode_text`] adds none; an editor's buffer shows no BOM,
    /// and the server writing such a buffer puts it back from this flag (case EDIT-02).
    pub bom: bool,
    /// The bytes decode to the text and the text encodes back to the same bytes. When false
    /// (undecodable bytes shown as U+FFFD, or an encoding that does not round-trip) the file
    /// cannot be written back without changing bytes nobody edited, so edits are refused.
    pub exact: bool,
}

impl Default for TextEncoding {
    fn default() -> Self {
        TextEncoding::UTF8
    }
}

impl TextEncoding {
    /// Exact UTF-8 (the default, and every new file).
    pub const UTF8: TextEncoding = TextEncoding {
        encoding: encoding_rs::UTF_8,
        bom: false,
        exact: true,
    };

    /// True for exact UTF-8: bytes and text are the same.
    pub fn is_utf8(&self) -> bool {
        self.encoding == encoding_rs::UTF_8 && self.exact
    }

    /// The encoding's name as said to the model (`windows-1252`, `Shift_JIS`, `UTF-16LE`).
    pub fn name(&self) -> &'static str {
        self.encoding.name()
    }

    /// The note `read` adds for a file that is not exact UTF-8, `None` for UTF-8.
    pub fn read_note(&self) -> Option<String> {
        if self.is_utf8() {
            return None;
        }
        Some(if self.exact {
            format!(
                "[File encoding: {}{} (detected); the text is shown decoded, and edit and write keep the file in {}.]",
                self.name(),
                if self.bom { " with BOM" } else { "" },
                self.name()
            )
        } else {
            format!(
                "[File encoding: not valid {} (undecodable bytes are shown as U+FFFD); edit refuses to change this file because its bytes could not be kept exactly.]",
                self.name()
            )
        })
    }
}

/// A file's bytes decoded: the text and its encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedText {
    pub text: String,
    pub encoding: TextEncoding,
}

/// The UTF-8 byte order mark.
pub const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Decodes a file's bytes (case ED-04): a UTF-16 BOM gives UTF-16; valid UTF-8 (a UTF-8 BOM
/// included, kept in the text and said by [`TextEncoding::bom`]) is UTF-8; text that is mostly
/// UTF-8 with a few invalid sequences stays UTF-8 with U+FFFD for them (not exact; case
/// STRM-07); anything else is detected with `chardetng` (the detector Firefox uses) and
/// decoded with `encoding_rs`, exact only when the text encodes back to the very same bytes.
pub fn decode_file(bytes: Vec<u8>) -> DecodedText {
    let utf16 = if bytes.starts_with(&[0xFF, 0xFE]) {
        Some(encoding_rs::UTF_16LE)
    } else if bytes.starts_with(&[0xFE, 0xFF]) {
        Some(encoding_rs::UTF_16BE)
    } else {
        None
    };
    if let Some(enc) = utf16 {
        let body = &bytes[2..];
        let (text, had_errors) = enc.decode_without_bom_handling(body);
        let exact = !had_errors && body.len().is_multiple_of(2);
        return DecodedText {
            text: text.into_owned(),
            encoding: TextEncoding {
                encoding: enc,
                bom: true,
                exact,
            },
        };
    }
    let bom = bytes.starts_with(UTF8_BOM);
    let bytes = match String::from_utf8(bytes) {
        Ok(text) => {
            return DecodedText {
                text,
                encoding: TextEncoding {
                    bom,
                    ..TextEncoding::UTF8
                },
            }
        }
        Err(e) => e.into_bytes(),
    };
    if mostly_utf8(&bytes) {
        return DecodedText {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            encoding: TextEncoding {
                bom,
                exact: false,
                ..TextEncoding::UTF8
            },
        };
    }
    let Some(enc) = detect_legacy(&bytes) else {
        return DecodedText {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            encoding: TextEncoding {
                bom,
                exact: false,
                ..TextEncoding::UTF8
            },
        };
    };
    match enc.decode_without_bom_handling_and_without_replacement(&bytes) {
        Some(text) => {
            let (back, _, unmappable) = enc.encode(&text);
            let exact = !unmappable && *back == *bytes;
            DecodedText {
                text: text.into_owned(),
                encoding: TextEncoding {
                    encoding: enc,
                    bom: false,
                    exact,
                },
            }
        }
        None => DecodedText {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            encoding: TextEncoding {
                bom,
                exact: false,
                ..TextEncoding::UTF8
            },
        },
    }
}

/// The legacy encoding of `bytes` (not UTF-8): `chardetng`'s guess, made for Web pages of a
/// generic domain, and its guesses as for Japanese, Chinese, Taiwanese and Korean domains (a
/// file has no domain to tell; a few lines of Japanese alone read as Cyrillic to the generic
/// guess). Of those that decode without errors, the one whose non-ASCII characters are most
/// often letters wins (mis-decoded text is mostly punctuation and symbols); ties go to the
/// generic guess.
///
/// `None` when the bytes do not look like text in any legacy encoding, so the caller shows them
/// as lossy UTF-8 with a note instead of a guessed code page (case STRM-07 (c)): chardetng is
/// sure of no guess (`guess_assess`), or the bytes hold what no text file of a single- or
/// double-byte encoding holds: a UTF-16 byte-order mark past the start (`ff fe` / `fe ff`, as in
/// `hi\xff\xfe\n`) or C0 control characters other than tab, line feed, form feed, carriage
/// return and escape (NUL included: binary data). A guess is also refused when its text holds
/// C1 control characters (U+0080–U+009F: what a byte the code page leaves undefined decodes
/// to; no text holds them), or, for a multi-byte encoding, when no more than half of its
/// non-ASCII characters are letters: stray bytes such as `ok\x80\x81zz` are then lossy UTF-8,
/// as Pi 1.6 reads every file, not `ok€\u{81}zz` (windows-1252) or `ok€乃z` (GBK, a `z`
/// eaten).
pub fn detect_legacy(bytes: &[u8]) -> Option<&'static encoding_rs::Encoding> {
    let bom_inside = bytes
        .windows(2)
        .any(|w| w == [0xFF, 0xFE] || w == [0xFE, 0xFF]);
    let controls = bytes
        .iter()
        .any(|&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | 0x0C | b'\r' | 0x1B));
    if bom_inside || controls {
        return None;
    }
    let mut detector = chardetng::EncodingDetector::new();
    detector.feed(bytes, true);
    let (generic, mut sure) = detector.guess_assess(None, false);
    let score = |enc: &'static encoding_rs::Encoding| -> Option<f64> {
        let text = enc.decode_without_bom_handling_and_without_replacement(bytes)?;
        if text.chars().any(|c| ('\u{80}'..='\u{9F}').contains(&c)) {
            return None;
        }
        let (mut letters, mut kana, mut all) = (0usize, 0usize, 0usize);
        for c in text.chars().filter(|c| !c.is_ascii()) {
            all += 1;
            // Half-width katakana are what double-byte text read as Shift_JIS mostly turns into.
            letters += usize::from(c.is_alphabetic() && !('\u{FF61}'..='\u{FF9F}').contains(&c));
            kana += usize::from(('\u{3040}'..='\u{30FF}').contains(&c));
        }
        // Japanese text holds kana; Japanese read as Chinese turns into rare ideographs (which
        // still count as letters), so kana tip the balance.
        let sc = if all == 0 {
            1.0
        } else {
            (letters as f64 + 0.5 * kana as f64) / all as f64
        };
        (enc.is_single_byte() || sc > 0.5).then_some(sc)
    };
    let mut best: Option<(&'static encoding_rs::Encoding, f64)> =
        score(generic).map(|sc| (generic, sc));
    let mut seen = vec![generic];
    for tld in [&b"jp"[..], b"cn", b"tw", b"kr"] {
        let (enc, tld_sure) = detector.guess_assess(Some(tld), false);
        sure |= tld_sure;
        if seen.contains(&enc) {
            continue;
        }
        seen.push(enc);
        if let Some(sc) = score(enc) {
            if best.is_none_or(|(_, b)| sc > b) {
                best = Some((enc, sc));
            }
        }
    }
    best.filter(|_| sure).map(|(enc, _)| enc)
}

/// The encoding [`decode_file`] finds for `bytes`, without making the text when they are
/// UTF-8 (a validation pass only).
pub fn detect_encoding(bytes: &[u8]) -> TextEncoding {
    if !bytes.starts_with(&[0xFF, 0xFE])
        && !bytes.starts_with(&[0xFE, 0xFF])
        && std::str::from_utf8(bytes).is_ok()
    {
        return TextEncoding {
            bom: bytes.starts_with(UTF8_BOM),
            ..TextEncoding::UTF8
        };
    }
    decode_file(bytes.to_vec()).encoding
}

/// True when `bytes` (not valid UTF-8) hold at least as many valid non-ASCII UTF-8 characters
/// as invalid sequences, and some: a UTF-8 file with a few stray bytes rather than a legacy
/// encoding (whose bytes rarely form valid UTF-8 sequences).
pub(crate) fn mostly_utf8(bytes: &[u8]) -> bool {
    let (mut valid_multi, mut invalid) = (0usize, 0usize);
    for chunk in bytes.utf8_chunks() {
        valid_multi += chunk.valid().chars().filter(|c| !c.is_ascii()).count();
        if !chunk.invalid().is_empty() {
            invalid += 1;
        }
    }
    valid_multi > 0 && valid_multi >= invalid
}

/// `text` as the bytes of a file in `encoding` (case ED-04). Fails, naming the first character
/// the encoding cannot represent, when the text cannot be written in it exactly, and for a
/// file whose encoding is not exact (its other bytes would change); nothing is written then.
pub fn encode_text<'a>(
    path: &Path,
    text: &'a str,
    encoding: &TextEncoding,
) -> Result<std::borrow::Cow<'a, [u8]>, FsError> {
    use std::borrow::Cow;
    if encoding.is_utf8() {
        return Ok(Cow::Borrowed(text.as_bytes()));
    }
    if !encoding.exact {
        return Err(FsError::Io(format!(
            "{} is not valid {} (it has bytes that cannot be decoded), so it cannot be changed without altering them; nothing was changed. Edit it with bash (e.g. sed) or fix its encoding first.",
            path.display(),
            encoding.name()
        )));
    }
    let enc = encoding.encoding;
    if enc == encoding_rs::UTF_16LE || enc == encoding_rs::UTF_16BE {
        let le = enc == encoding_rs::UTF_16LE;
        let mut out = Vec::with_capacity(2 + text.len() * 2);
        if encoding.bom {
            out.extend_from_slice(if le { &[0xFF, 0xFE] } else { &[0xFE, 0xFF] });
        }
        for u in text.encode_utf16() {
            out.extend_from_slice(&if le { u.to_le_bytes() } else { u.to_be_bytes() });
        }
        return Ok(Cow::Owned(out));
    }
    let mut encoder = enc.new_encoder();
    let mut out = Vec::with_capacity(
        encoder
            .max_buffer_length_from_utf8_without_replacement(text.len())
            .unwrap_or(text.len() * 4),
    );
    let (result, _) = encoder.encode_from_utf8_to_vec_without_replacement(text, &mut out, true);
    match result {
        encoding_rs::EncoderResult::InputEmpty => Ok(Cow::Owned(out)),
        encoding_rs::EncoderResult::Unmappable(c) => {
            Err(FsError::Io(format!(
                "{} is encoded in {}, which cannot represent {:?} (U+{:04X}); nothing was changed. Use only characters {} can encode.",
                path.display(),
                enc.name(),
                c,
                c as u32,
                enc.name()
            )))
        }
        encoding_rs::EncoderResult::OutputFull => Err(FsError::Io(format!(
            "{}: could not encode the text in {}",
            path.display(),
            enc.name()
        ))),
    }
}

/// Replace the bytes `range` of a snapshot's text with `new_text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextReplace {
    /// Byte offsets into [`FileSnapshot::text`], on char boundaries.
    pub range: Range<usize>,
    pub new_text: String,
}

/// Whether a write created the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    Created,
    Overwritten,
}

/// File system failures; their messages are shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FsError {
    #[error("ENOENT: no such file or directory: {0}")]
    NotFound(PathBuf),
    #[error("{0}")]
    Io(String),
    /// The editor refused the edit (`applied: false`).
    #[error("the editor did not apply the edit: {0}")]
    Rejected(String),
    /// The buffer changed between the read the edit was computed on and the apply.
    #[error("{0} changed since it was read; read it again and retry")]
    Stale(PathBuf),
}

fn io_err(path: &Path, e: std::io::Error) -> FsError {
    if e.kind() == std::io::ErrorKind::NotFound {
        FsError::NotFound(path.to_path_buf())
    } else {
        FsError::Io(format!("{}: {e}", path.display()))
    }
}

/// The file operations tools need.
#[async_trait]
pub trait Fs: Send + Sync {
    /// The workspace root every tool path is resolved against.
    fn root(&self) -> &Path;
    /// The current text (an open buffer's unsaved text when there is one).
    async fn read(&self, path: &Path) -> Result<FileSnapshot, FsError>;
    /// Applies non-overlapping `edits` computed against `base`; fails with
    /// [`FsError::Stale`] when the file no longer matches `base`. `label` names the change for
    /// the editor's undo history (e.g. `pi: turn 3 · edit notes.txt (call_1)`).
    async fn replace(
        &self,
        path: &Path,
        base: &FileSnapshot,
        edits: Vec<TextReplace>,
        label: &str,
    ) -> Result<(), FsError>;
    /// Creates or overwrites the whole file, creating parent folders; `label` as for
    /// [`Fs::replace`].
    async fn write(&self, path: &Path, text: &str, label: &str) -> Result<WriteKind, FsError>;
    /// True when [`Fs::read`] of `path` gives something other than the file on disk (an open
    /// editor buffer); tools may then read the disk directly otherwise (a large file in a
    /// stream). The default: false.
    fn has_buffer(&self, _path: &Path) -> bool {
        false
    }
    /// Every path [`Fs::has_buffer`] is true for (open editor buffers), for tools that walk
    /// folders (`grep` searches these as [`Fs::read`] gives them). The default: none.
    fn buffer_paths(&self) -> Vec<PathBuf> {
        Vec::new()
    }
    /// A sentence for the model when what [`Fs::read`] gives for `path` differs from the file
    /// on disk (an editor buffer with the user's unsaved changes, or an agent change kept in
    /// the buffer only), so it knows what `bash` and other programs see; `None` when they
    /// agree. Tools append it to their results (see [`crate::unsaved`]). The default: `None`.
    async fn unsaved_note(&self, _path: &Path) -> Option<String> {
        None
    }
    /// Raw bytes from disk (for binary files and images).
    async fn read_bytes(&self, path: &Path) -> Result<Vec<u8>, FsError> {
        tokio::fs::read(path).await.map_err(|e| io_err(path, e))
    }
    /// At most the first `n` bytes of the file on disk (to recognise images by content).
    async fn read_head(&self, path: &Path, n: usize) -> Result<Vec<u8>, FsError> {
        use tokio::io::AsyncReadExt as _;
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| io_err(path, e))?;
        let mut out = Vec::with_capacity(n);
        file.take(n as u64)
            .read_to_end(&mut out)
            .await
            .map_err(|e| io_err(path, e))?;
        Ok(out)
    }
    /// Renames the file `from` to `to` (absolute, already confined), creating `to`'s parent
    /// folders; fails with [`FsError::Io`] when `to` exists and with [`FsError::NotFound`] when
    /// `from` does not. An editor moves an open buffer along (`RenameFile`); `label` as for
    /// [`Fs::replace`]. The default renames on disk.
    async fn rename(&self, from: &Path, to: &Path, _label: &str) -> Result<(), FsError> {
        disk_rename(from, to).await
    }
    /// Deletes the file `path` (never a folder); fails with [`FsError::NotFound`] when it does
    /// not exist. An editor closes its buffer (`DeleteFile`); `label` as for [`Fs::replace`].
    /// The default deletes on disk.
    async fn delete(&self, path: &Path, _label: &str) -> Result<(), FsError> {
        disk_delete(path).await
    }
    /// Entries of a directory: (name, is_dir).
    async fn list_dir(&self, path: &Path) -> Result<Vec<(String, bool)>, FsError> {
        let mut rd = tokio::fs::read_dir(path)
            .await
            .map_err(|e| io_err(path, e))?;
        let mut out = Vec::new();
        while let Some(e) = rd.next_entry().await.map_err(|e| io_err(path, e))? {
            let is_dir = tokio::fs::metadata(e.path())
                .await
                .map(|m| m.is_dir())
                .unwrap_or(false);
            out.push((e.file_name().to_string_lossy().into_owned(), is_dir));
        }
        Ok(out)
    }
}

/// [`Fs::rename`] on disk: refuses to replace an existing `to`.
pub async fn disk_rename(from: &Path, to: &Path) -> Result<(), FsError> {
    tokio::fs::metadata(from)
        .await
        .map_err(|e| io_err(from, e))?;
    if tokio::fs::symlink_metadata(to).await.is_ok() {
        return Err(FsError::Io(format!("{} already exists", to.display())));
    }
    if let Some(parent) = to.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| io_err(parent, e))?;
    }
    tokio::fs::rename(from, to)
        .await
        .map_err(|e| io_err(from, e))
}

/// [`Fs::delete`] on disk: files only.
pub async fn disk_delete(path: &Path) -> Result<(), FsError> {
    let meta = tokio::fs::symlink_metadata(path)
        .await
        .map_err(|e| io_err(path, e))?;
    if meta.is_dir() {
        return Err(FsError::Io(format!(
            "{} is a folder; only files can be deleted",
            path.display()
        )));
    }
    tokio::fs::remove_file(path)
        .await
        .map_err(|e| io_err(path, e))
}

/// Applies byte-range edits to `text` (ranges must not overlap; any order).
pub fn apply_replacements(text: &str, edits: &[TextReplace]) -> String {
    let mut sorted: Vec<&TextReplace> = edits.iter().collect();
    sorted.sort_by_key(|e| e.range.start);
    // Exact size, so the copy never reallocates.
    let removed: usize = edits.iter().map(|e| e.range.len()).sum();
    let added: usize = edits.iter().map(|e| e.new_text.len()).sum();
    let mut out = String::with_capacity((text.len() + added).saturating_sub(removed));
    let mut pos = 0;
    for e in sorted {
        out.push_str(&text[pos..e.range.start]);
        out.push_str(&e.new_text);
        pos = e.range.end;
    }
    out.push_str(&text[pos..]);
    out
}

/// Writes `text` to `path` atomically: a temp file in the same folder, then rename, so a
/// failure never leaves a half-written file (case EDIT-06). Parent folders are created; an
/// existing file's permissions are kept.
pub async fn atomic_write(path: &Path, text: &[u8]) -> Result<(), FsError> {
    let bytes = text.to_vec();
    atomic_write_with(path, move |w| w.write_all(&bytes)).await
}

/// [`atomic_write`] with the content produced by `fill` (e.g. a rope writing its chunks), on a
/// blocking thread so no whole-text copy is needed.
pub async fn atomic_write_with<F>(path: &Path, fill: F) -> Result<(), FsError>
where
    F: FnOnce(&mut dyn std::io::Write) -> std::io::Result<()> + Send + 'static,
{
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || atomic_write_blocking(&path, fill))
        .await
        .map_err(|e| FsError::Io(format!("write task failed: {e}")))?
}

fn atomic_write_blocking<F>(path: &Path, fill: F) -> Result<(), FsError>
where
    F: FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
{
    use std::io::Write as _;
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // Through a symlink the link's target is written and the link stays (case ED-01).
    let target = link_target(path)?;
    let path = target.as_path();
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_err(parent, e))?;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_file_name(format!(".{name}.pi-tmp-{}-{seq}", std::process::id()));
    let written = (|| {
        let file = std::fs::File::create(&tmp)?;
        let mut w = std::io::BufWriter::with_capacity(256 * 1024, file);
        fill(&mut w)?;
        w.flush()?;
        if let Ok(meta) = std::fs::metadata(path) {
            let _ = std::fs::set_permissions(&tmp, meta.permissions());
        }
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io_err(path, e));
    }
    Ok(())
}

/// Where a write to `path` lands: `path` itself, or when it is a symlink (a chain of them,
/// dangling ones included) the file the last link names, so replacing the file by a temp file
/// and rename replaces the target and keeps the link (case ED-01). Fails on a symlink loop.
pub fn link_target(path: &Path) -> Result<PathBuf, FsError> {
    let mut cur = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                let next = std::fs::read_link(&cur).map_err(|e| io_err(&cur, e))?;
                cur = match cur.parent() {
                    Some(parent) if next.is_relative() => parent.join(next),
                    _ => next,
                };
            }
            _ => return Ok(cur),
        }
    }
    Err(FsError::Io(format!(
        "{}: too many levels of symbolic links",
        path.display()
    )))
}

/// Writes the content produced by `fill` over the file at `path` in place (created when
/// missing, parent folders too; cut to the new length), the way an editor saves a buffer. Not
/// atomic, but ten times cheaper than a temp file and rename for a multi-megabyte file on ext4
/// (no new inode, no forced flush on rename) and it keeps the file's inode, links and mode. For
/// mirroring an editor buffer, whose text stays in the editor; tools writing files of their own
/// use [`atomic_write`].
///
/// On a multi-threaded runtime the write runs on the calling worker thread
/// (`block_in_place`: the worker's other tasks move to another thread meanwhile), which starts
/// it at once; a hand-off to a blocking-pool thread that has been idle costs a wake-up, which on
/// a loaded machine measured as much as the write of a 2.4 MB buffer (0.1–0.5 ms). Elsewhere
/// (a current-thread runtime) it runs on the blocking pool. Not for use inside a `LocalSet`
/// on a multi-threaded runtime (`block_in_place` refuses there; nothing here uses one).
pub async fn overwrite_in_place_with<F>(path: &Path, fill: F) -> Result<(), FsError>
where
    F: FnOnce(&mut dyn std::io::Write) -> std::io::Result<()> + Send + 'static,
{
    let path = path.to_path_buf();
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        return tokio::task::block_in_place(move || overwrite_in_place_blocking(&path, fill));
    }
    tokio::task::spawn_blocking(move || overwrite_in_place_blocking(&path, fill))
        .await
        .map_err(|e| FsError::Io(format!("write task failed: {e}")))?
}

/// The blocking body of [`overwrite_in_place_with`].
fn overwrite_in_place_blocking<F>(path: &Path, fill: F) -> Result<(), FsError>
where
    F: FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
{
    use std::io::Write as _;
    /// Counts the bytes written through it.
    struct Counting<W> {
        inner: W,
        n: u64,
    }
    impl<W: std::io::Write> std::io::Write for Counting<W> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let k = self.inner.write(buf)?;
            self.n += k as u64;
            Ok(k)
        }
        fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
            let k = self.inner.write_vectored(bufs)?;
            self.n += k as u64;
            Ok(k)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.inner.flush()
        }
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io_err(parent, e))?;
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| io_err(path, e))?;
    let mut w = Counting {
        inner: std::io::BufWriter::with_capacity(256 * 1024, &file),
        n: 0,
    };
    fill(&mut w)
        .and_then(|()| w.flush())
        .map_err(|e| io_err(path, e))?;
    let len = w.n;
    drop(w);
    file.set_len(len).map_err(|e| io_err(path, e))
}

/// Writes every slice of `chunks` to `w` in order with vectored writes (`writev`, up to 1,024
/// slices a call), so a rope's chunks reach the file without being copied into one buffer.
/// Handles partial writes; `ErrorKind::Interrupted` is retried.
pub fn write_all_chunks(w: &mut dyn std::io::Write, chunks: &[&[u8]]) -> std::io::Result<()> {
    use std::io::IoSlice;
    /// Most slices handed to one `writev` (Linux's `IOV_MAX`).
    const MAX_SLICES: usize = 1024;
    // Next unwritten byte: chunk `i`, offset `skip` in it.
    let (mut i, mut skip) = (0usize, 0usize);
    loop {
        while i < chunks.len() && chunks[i].len() == skip {
            i += 1;
            skip = 0;
        }
        if i == chunks.len() {
            return Ok(());
        }
        let slices: Vec<IoSlice<'_>> = chunks[i..chunks.len().min(i + MAX_SLICES)]
            .iter()
            .enumerate()
            .map(|(k, c)| IoSlice::new(if k == 0 { &c[skip..] } else { c }))
            .collect();
        let mut n = match w.write_vectored(&slices) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        while n > 0 {
            let left = chunks[i].len() - skip;
            if n >= left {
                n -= left;
                i += 1;
                skip = 0;
            } else {
                skip += n;
                n = 0;
            }
        }
    }
}

/// The disk, for headless runs.
#[derive(Debug, Clone)]
pub struct DiskFs {
    root: PathBuf,
}

impl DiskFs {
    /// A disk file system rooted at `root`.
    pub fn new(root: PathBuf) -> Self {
        DiskFs { root }
    }
}

/// Decodes file bytes as UTF-8, lossily (invalid sequences become U+FFFD; case STRM-07).
pub fn decode_text(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

#[async_trait]
impl Fs for DiskFs {
    fn root(&self) -> &Path {
        &self.root
    }

    async fn read(&self, path: &Path) -> Result<FileSnapshot, FsError> {
        let bytes = tokio::fs::read(path).await.map_err(|e| io_err(path, e))?;
        let decoded = decode_file(bytes);
        Ok(FileSnapshot {
            text: Arc::new(decoded.text),
            version: None,
            encoding: decoded.encoding,
        })
    }

    async fn replace(
        &self,
        path: &Path,
        base: &FileSnapshot,
        edits: Vec<TextReplace>,
        _label: &str,
    ) -> Result<(), FsError> {
        let current = self.read(path).await?;
        if current.text != base.text || current.encoding != base.encoding {
            return Err(FsError::Stale(path.to_path_buf()));
        }
        let text = apply_replacements(&base.text, &edits);
        let bytes = encode_text(path, &text, &current.encoding)?;
        atomic_write(path, &bytes).await
    }

    /// Writes `text` in the existing file's encoding (UTF-8 for a new file); refuses, changing
    /// nothing, when that encoding cannot represent the text (see [`encode_text`]). A file
    /// whose bytes were not valid in any encoding is replaced by UTF-8 text: the whole content
    /// is new, nothing of the old bytes is meant to stay.
    async fn write(&self, path: &Path, text: &str, _label: &str) -> Result<WriteKind, FsError> {
        let existing = match tokio::fs::read(path).await {
            Ok(bytes) => Some(decode_file(bytes).encoding),
            Err(_) => None,
        };
        let encoding = existing.filter(|e| e.exact).unwrap_or(TextEncoding::UTF8);
        let bytes = encode_text(path, text, &encoding)?;
        atomic_write(path, &bytes).await?;
        Ok(if existing.is_some() {
            WriteKind::Overwritten
        } else {
            WriteKind::Created
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Case STRM-07 (c): a few stray bytes that are no UTF-8 are shown lossily as UTF-8, not
    /// read as a guessed code page; short real legacy text is still detected (ED-04).
    #[test]
    fn stray_bytes_read_lossily_and_short_legacy_text_is_still_detected() {
        let stray = decode_file(vec![0x68, 0x69, 0xff, 0xfe, 0x0a]);
        assert_eq!(
            stray,
            DecodedText {
                text: "hi\u{fffd}\u{fffd}\n".to_string(),
                encoding: TextEncoding {
                    exact: false,
                    ..TextEncoding::UTF8
                },
            }
        );
        // Bytes no code page reads as text (issue 29): lossy UTF-8, as Pi 1.6 reads them.
        let garbage = decode_file(b"ok\x80\x81zz\n".to_vec());
        assert_eq!(
            (
                garbage.text.as_str(),
                garbage.encoding.encoding,
                garbage.encoding.exact
            ),
            ("ok\u{fffd}\u{fffd}zz\n", encoding_rs::UTF_8, false)
        );
        let latin1 = decode_file(b"caf\xe9 cr\xe8me br\xfbl\xe9e\n".to_vec());
        assert_eq!(latin1.text, "café crème brûlée\n");
        assert!(latin1.encoding.exact);
        assert_eq!(latin1.encoding.encoding, encoding_rs::WINDOWS_1252);
        for (enc, text) in [
            (encoding_rs::SHIFT_JIS, "日本語のテキストです。\n"),
            (
                encoding_rs::SHIFT_JIS,
                "# 設定ファイル\nname = \"テスト\"\n",
            ),
            (encoding_rs::GBK, "这是一个中文文件。\n"),
            (encoding_rs::EUC_KR, "한국어 텍스트 파일입니다.\n"),
            (encoding_rs::WINDOWS_1251, "Привет, мир! Это тест.\n"),
            (encoding_rs::WINDOWS_1252, "# Résumé\n"),
        ] {
            let (bytes, _, _) = enc.encode(text);
            let got = decode_file(bytes.into_owned());
            assert_eq!(
                (got.text.as_str(), got.encoding.encoding.name()),
                (text, enc.name()),
                "{text}"
            );
        }
    }

    /// Case EDIT-02: a UTF-8 BOM stays in the text and [`TextEncoding::bom`] says it is there,
    /// the same from the decoder and the detector (what the editor keeps for an open buffer);
    /// the text is written back as it is, with its one BOM; a file without one has no flag.
    #[test]
    fn a_utf8_bom_stays_in_the_text_and_is_flagged_by_decoder_and_detector() {
        let bytes = b"\xEF\xBB\xBFname,age\r\n".to_vec();
        let d = decode_file(bytes.clone());
        let with_bom = TextEncoding {
            bom: true,
            ..TextEncoding::UTF8
        };
        assert_eq!(
            d,
            DecodedText {
                text: "\u{FEFF}name,age\r\n".to_string(),
                encoding: with_bom,
            }
        );
        assert_eq!(
            (detect_encoding(&bytes), detect_encoding(&bytes[3..])),
            (with_bom, TextEncoding::UTF8)
        );
        assert_eq!(
            decode_file(bytes[3..].to_vec()).encoding,
            TextEncoding::UTF8
        );
        let back = encode_text(Path::new("a.csv"), &d.text, &d.encoding).unwrap();
        assert_eq!(back.as_ref(), &bytes[..]);
    }

    /// A writer taking at most `max` bytes per call, vectored or not.
    struct Trickle {
        out: Vec<u8>,
        max: usize,
        calls: usize,
    }

    impl std::io::Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.calls += 1;
            let n = buf.len().min(self.max);
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
            self.calls += 1;
            let mut n = 0;
            for b in bufs {
                let k = b.len().min(self.max - n);
                self.out.extend_from_slice(&b[..k]);
                n += k;
                if n == self.max {
                    break;
                }
            }
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// `overwrite_in_place_with` on both runtime flavours (inline on a worker, or on the
    /// blocking pool): the new text replaces a longer old one, same inode.
    #[cfg(unix)] // symlinks / inode numbers: Unix APIs
    #[test]
    fn in_place_writes_replace_and_cut_on_both_runtime_flavours() {
        use std::os::unix::fs::MetadataExt;
        let dir_tmp = tempfile::tempdir().unwrap();
        let dir = dir_tmp.path().to_path_buf();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.txt");
        for multi in [false, true] {
            std::fs::write(&path, "a much longer old text\n").unwrap();
            let ino = std::fs::metadata(&path).unwrap().ino();
            let rt = if multi {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .build()
            } else {
                tokio::runtime::Builder::new_current_thread().build()
            }
            .unwrap();
            rt.block_on(async {
                // From a spawned task too (a worker thread on the multi-threaded runtime).
                let p = path.clone();
                tokio::spawn(async move {
                    overwrite_in_place_with(&p, |w| {
                        write_all_chunks(w, &[b"new ".as_slice(), b"text\n".as_slice()])
                    })
                    .await
                })
                .await
                .unwrap()
                .unwrap();
            });
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                "new text\n",
                "{multi}"
            );
            assert_eq!(std::fs::metadata(&path).unwrap().ino(), ino, "{multi}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn chunks_are_written_whole_and_in_order_across_partial_writes() {
        let owned: Vec<Vec<u8>> = (0..3000)
            .map(|i| format!("chunk {i} é\n").into_bytes())
            .chain([Vec::new(), b"end".to_vec()])
            .collect();
        let chunks: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let want: Vec<u8> = owned.concat();
        for max in [1, 7, 4096, usize::MAX / 2] {
            let mut w = Trickle {
                out: Vec::new(),
                max,
                calls: 0,
            };
            write_all_chunks(&mut w, &chunks).unwrap();
            assert_eq!(w.out, want, "max {max}");
            if max > want.len() {
                // 3,002 slices, 1,024 a call.
                assert_eq!(w.calls, 3, "max {max}");
            }
        }
    }
}
