//! The session tree and its projections (docs/design.md#sessions-branching-and-compaction "One history, several projections",
//! "Branching selects a path", "Compaction changes context, not history"; Pi 0.73.1
//! `docs/session-format.md` and `buildSessionContext`).
//!
//! Entries keep their text as stored, so every entry type Pi writes (and any it may add)
//! survives a load untouched; typed views are parsed from the text on demand (the loader parses
//! each line once, straight into the model's messages, see `line.rs`). An entry loaded from a
//! file keeps where its line is (offset, length, xxh3), not its bytes: the text is read back
//! from the file when asked for, and a line another program changed since reads as empty
//! instead of as something else. Parent pointers rebuild
//! the tree; a leaf selects a root-to-leaf path; the model context is derived from the path:
//! - `message` entries of the roles `user`, `assistant`, `toolResult` as they are;
//! - extended roles converted as Pi's `convertToLlm` does: `bashExecution` → user text
//!   (skipped when `excludeFromContext`), `custom` → user content, `branchSummary` and
//!   `compactionSummary` → user text wrapped in Pi's prefixes;
//! - `custom_message` entries → user messages; `branch_summary` entries → branch summaries;
//! - with a `compaction` entry on the path: its summary first, then the kept entries from
//!   `firstKeptEntryId` up to the compaction, then everything after it.
//!
//! Version 1 files (no ids) are migrated in memory to a linear chain of generated ids;
//! version 2 renames the role `hookMessage` to `custom`. The file itself is never rewritten.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use compact_str::CompactString;
use pi_ai::Message;

use super::context_edit::ContextEdits;
pub use super::convert::{
    bash_execution_text, convert_message, BRANCH_SUMMARY_PREFIX, BRANCH_SUMMARY_SUFFIX,
    COMPACTION_SUMMARY_PREFIX, COMPACTION_SUMMARY_SUFFIX,
};
use super::convert::{millis, str_of, user, user_content};
use super::line::{self, AssistantInfo, LineParts, MessageSummary};
use serde_json::Value;

/// Where an entry's text lives: a line of the file as loaded (read again from the file when
/// asked for), or text serialized here (appended entries, migrated or repaired lines).
#[derive(Clone)]
enum Text {
    File {
        src: Arc<FileText>,
        offset: u64,
        len: usize,
        /// XXH3 of the line as loaded: a line changed since (by another program) reads as empty.
        hash: u64,
    },
    Owned(Box<str>),
}

/// The session file whose lines entries of a load refer to (kept open, so a rename or an
/// unlink of the path does not change what is read).
pub(crate) struct FileText {
    pub(crate) file: std::fs::File,
    path: std::path::PathBuf,
}

impl FileText {
    pub(crate) fn new(file: std::fs::File, path: &std::path::Path) -> FileText {
        FileText {
            file,
            path: path.to_path_buf(),
        }
    }

    /// The model-visible messages of the `message` entries `items` (`(offset, len, hash,
    /// slot)`, in file order) read from this file ([`FileText::texts`]), each parsed;
    /// `put(slot, message)` is called for each (a line changed since it was loaded gives
    /// `None`, as [`Entry::text`] reads it empty).
    fn messages(
        &self,
        items: &[(u64, usize, u64, usize)],
        put: &mut impl FnMut(usize, Option<Message>),
    ) {
        self.texts(items, &mut |slot, text| {
            put(
                slot,
                text.and_then(line::parse)
                    .and_then(|p| p.message?.message.map(|m| *m)),
            )
        })
    }

    /// The lines `items` (`(offset, len, hash, slot)`, in file order) read from this file:
    /// lines close together are read with one `pread` into a buffer reused from run to run
    /// (no syscall and no `String` per line), each checked against its hash; `put(slot,
    /// text)` is called for each in order (a line changed since it was loaded gives `None`,
    /// as [`Entry::text`] reads it empty).
    fn texts(&self, items: &[(u64, usize, u64, usize)], put: &mut dyn FnMut(usize, Option<&str>)) {
        /// Lines at most this far apart are read in one run.
        const GAP: u64 = 64 << 10;
        /// The most bytes a run reads at once.
        const RUN: u64 = 4 << 20;
        let mut buf = Vec::new();
        let mut i = 0;
        while i < items.len() {
            let start = items[i].0;
            let mut end = start + items[i].1 as u64;
            let mut j = i + 1;
            while let Some(&(o, l, _, _)) = items.get(j) {
                let e = o + l as u64;
                if o < start || o > end + GAP || e - start > RUN {
                    break;
                }
                end = end.max(e);
                j += 1;
            }
            buf.clear();
            buf.resize((end - start) as usize, 0);
            let read = crate::platform::fs::read_exact_at(&self.file, &mut buf, start).is_ok();
            for &(o, l, hash, slot) in &items[i..j] {
                let at = (o - start) as usize;
                let text = buf
                    .get(at..at + l)
                    .filter(|b| read && xxhash_rust::xxh3::xxh3_64(b) == hash)
                    .and_then(|b| std::str::from_utf8(b).ok());
                if text.is_none() {
                    tracing::warn!(
                        "session file {} changed under this session: the entry at byte {o} is gone",
                        self.path.display()
                    );
                }
                put(slot, text);
            }
            i = j;
        }
    }

    /// The line of `len` bytes at `offset`, if it is still what was loaded.
    fn line(&self, offset: u64, len: usize, hash: u64) -> Option<String> {
        let mut buf = vec![0u8; len];
        let read = crate::platform::fs::read_exact_at(&self.file, &mut buf, offset);
        let text = read
            .ok()
            .filter(|_| xxhash_rust::xxh3::xxh3_64(&buf) == hash)
            .and_then(|_| String::from_utf8(buf).ok());
        if text.is_none() {
            tracing::warn!(
                "session file {} changed under this session: the entry at byte {offset} is gone",
                self.path.display()
            );
        }
        text
    }
}

/// A short name an entry keeps (its `type`, its message's `role`): one of a fixed list of
/// static names, kept as its index in that list (no allocation), or any other as its own
/// text. 16 bytes (a `Cow<'static, str>` is 24; entries are most of a loaded session's
/// memory). Its list is the caller's: [`Name::new`] and [`Name::as_str`] are given the same one.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Name {
    /// The index in the list.
    Known(u8),
    Other(Box<str>),
}

impl Name {
    /// `name` as an index into `known` when it is there, else as its own text.
    fn new(name: &str, known: &[&'static str]) -> Name {
        match known.iter().position(|k| *k == name) {
            Some(i) => Name::Known(i as u8),
            None => Name::Other(name.into()),
        }
    }

    /// [`Name::new`], keeping `name`'s allocation when it is not in `known`.
    fn from_string(name: String, known: &[&'static str]) -> Name {
        match known.iter().position(|k| **k == name) {
            Some(i) => Name::Known(i as u8),
            None => Name::Other(name.into_boxed_str()),
        }
    }

    /// The name as text; `known` is the list it was made with.
    fn as_str<'a>(&'a self, known: &[&'static str]) -> &'a str {
        match self {
            Name::Known(i) => known.get(usize::from(*i)).copied().unwrap_or(""),
            Name::Other(s) => s,
        }
    }
}

/// An entry's `type`: Pi's types kept without an allocation per entry, any other as it is.
/// Reads as a `str` (`kind == "message"`, `kind.as_str()`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct EntryKind(Name);

impl EntryKind {
    /// Pi's entry types (Pi 1.6's `docs/session-format.md`).
    const KNOWN: [&'static str; 13] = [
        "message",
        "model_change",
        "thinking_level_change",
        "compaction",
        "branch_summary",
        "custom",
        "custom_message",
        "label",
        "session_info",
        "context_edit",
        "usage",
        "session",
        "leaf",
    ];

    /// The type as text.
    pub fn as_str(&self) -> &str {
        self.0.as_str(&EntryKind::KNOWN)
    }
}

impl From<String> for EntryKind {
    fn from(kind: String) -> EntryKind {
        EntryKind(Name::from_string(kind, &EntryKind::KNOWN))
    }
}

impl From<&str> for EntryKind {
    fn from(kind: &str) -> EntryKind {
        EntryKind(Name::new(kind, &EntryKind::KNOWN))
    }
}

impl std::ops::Deref for EntryKind {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for EntryKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for EntryKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for EntryKind {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Debug for EntryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for EntryKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<EntryKind> for String {
    fn from(kind: EntryKind) -> String {
        match kind.0 {
            Name::Other(s) => s.into_string(),
            known => known.as_str(&EntryKind::KNOWN).to_string(),
        }
    }
}

/// Message roles an entry keeps without an allocation of their own ([`Name`]'s list for
/// `role`).
const ROLES: [&str; 8] = [
    "user",
    "assistant",
    "toolResult",
    "system",
    "bashExecution",
    "custom",
    "branchSummary",
    "compactionSummary",
];

/// The index [`Entry`] keeps for "no role" (past the end of [`ROLES`]).
const NO_ROLE: u8 = ROLES.len() as u8;

/// A message role as an entry keeps it: Pi's roles by index, any other as it is.
fn role_name(role: CompactString) -> Name {
    match ROLES.iter().position(|r| *r == role.as_str()) {
        Some(i) => Name::Known(i as u8),
        None => Name::Other(role.as_str().into()),
    }
}

/// One entry of a session file (everything but the header): the fields the tree needs, and the
/// entry's text exactly as stored (its place in the file, or its own text), so every entry type
/// Pi writes (and any it may add) and every unknown field survive; typed views are parsed from
/// the text on demand.
#[derive(Clone)]
pub struct Entry {
    /// The entry's `id` (Pi writes 8 hex characters; up to 24 bytes are kept inline, with no
    /// allocation of their own).
    pub id: CompactString,
    /// The entry's `parentId` (`None` for a root), kept as `id` is.
    pub parent_id: Option<CompactString>,
    /// The entry's `type`.
    pub kind: EntryKind,
    /// `message.role` of `message` entries (Pi's roles without an allocation of their own);
    /// `Name::Known(NO_ROLE)` when there is none.
    role: Name,
    /// Provider, model and usage of assistant messages.
    assistant: Option<Box<AssistantInfo>>,
    /// Of a `message` entry loaded without its message (a deferred load).
    summary: Option<MessageSummary>,
    /// Of a tool result: the [`line::tool_hash`] of its `toolName` (0 for other entries).
    tool: u64,
    text: Text,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("id", &self.id)
            .field("parent_id", &self.parent_id)
            .field("kind", &self.kind)
            .field("text", &self.text())
            .finish()
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && self.parent_id == other.parent_id
            && self.kind == other.kind
            && self.text() == other.text()
    }
}

impl Entry {
    /// An entry from parsed parts, and its model-visible message still in the box the parse
    /// made (not moved out and boxed again on its way into a loader's piece: each move of a
    /// `Message` is a copy of a few hundred bytes); `None` without id or type.
    fn from_parts(parts: LineParts, text: Text) -> Option<(Entry, Option<Box<Message>>)> {
        let (role, message, assistant, summary, tool) = match parts.message {
            Some(m) => (
                m.role.map_or(Name::Known(NO_ROLE), role_name),
                m.message,
                m.assistant.map(Box::new),
                m.summary,
                m.tool,
            ),
            None => (Name::Known(NO_ROLE), None, None, None, 0),
        };
        Some((
            Entry {
                id: parts.id?,
                parent_id: parts.parent_id,
                kind: EntryKind::from(parts.kind?.as_str()),
                role,
                assistant,
                summary,
                tool,
                text,
            },
            message,
        ))
    }

    /// An entry of the line of `src` at `offset` (`len` bytes, XXH3 `hash`), parsed into
    /// `parts`.
    pub(crate) fn from_file(
        src: &Arc<FileText>,
        offset: u64,
        len: usize,
        hash: u64,
        parts: LineParts,
    ) -> Option<(Entry, Option<Box<Message>>)> {
        let text = Text::File {
            src: src.clone(),
            offset,
            len,
            hash,
        };
        Self::from_parts(parts, text)
    }

    /// An entry whose text is `raw` serialized; `None` without id or type.
    pub fn from_value(raw: &Value) -> Option<Entry> {
        Self::from_value_text(raw, raw.to_string())
    }

    /// An entry of the parts a writer knows of the line `text` it wrote (what a parse of
    /// `text` would give); `None` without id or type.
    pub(crate) fn from_parts_text(parts: LineParts, text: String) -> Option<Entry> {
        Self::from_parts(parts, Text::Owned(text.into_boxed_str())).map(|(e, _)| e)
    }

    /// An entry of `raw` whose text (`raw` serialized) is `text`; `None` without id or type.
    pub(crate) fn from_value_text(raw: &Value, text: String) -> Option<Entry> {
        let parts = line::line_from_value(raw, false);
        Self::from_parts(parts, Text::Owned(text.into_boxed_str())).map(|(e, _)| e)
    }

    /// An entry of `raw` (serialized as its text) with its model-visible message.
    pub(crate) fn from_value_converted(raw: &Value) -> Option<(Entry, Option<Box<Message>>)> {
        let parts = line::line_from_value(raw, true);
        Self::from_parts(parts, Text::Owned(raw.to_string().into_boxed_str()))
    }

    /// The entry's JSON text as stored (one line, no newline). A line loaded from a file is
    /// read from it again (it is not kept in memory); if another program changed that line
    /// since, the text is empty (and a warning is logged).
    pub fn text(&self) -> Cow<'_, str> {
        match &self.text {
            Text::File {
                src,
                offset,
                len,
                hash,
            } => Cow::Owned(src.line(*offset, *len, *hash).unwrap_or_default()),
            Text::Owned(s) => Cow::Borrowed(s),
        }
    }

    /// The whole entry as stored, parsed (`Null` if the text does not parse, which loading
    /// rules out).
    pub fn raw(&self) -> Value {
        serde_json::from_str(&self.text()).unwrap_or(Value::Null)
    }

    /// `message.role` of a `message` entry.
    pub fn role(&self) -> Option<&str> {
        match &self.role {
            Name::Known(NO_ROLE) => None,
            role => Some(role.as_str(&ROLES)),
        }
    }

    /// Whether this is a tool result of the tool `name` (a `message` entry of role
    /// `toolResult` whose `toolName` is `name`), known without reading the entry.
    pub fn tool_is(&self, name: &str) -> bool {
        self.role() == Some("toolResult") && self.tool == line::tool_hash(name)
    }

    /// Provider, model and usage of an assistant `message` entry.
    pub fn assistant(&self) -> Option<&AssistantInfo> {
        self.assistant.as_deref()
    }

    /// The model-visible message of this entry ([`entry_message`]).
    pub fn message(&self) -> Option<Message> {
        entry_message(self)
    }

    /// Keeps what a deferred load needs of this `message` entry's `message` (unless the line's
    /// parse kept it already).
    pub(crate) fn summarize(&mut self, message: Option<&Message>) {
        if self.kind == "message" && self.summary.is_none() {
            self.summary = Some(MessageSummary::of(message));
        }
    }

    /// What a deferred load kept of this `message` entry's message.
    pub(crate) fn summary(&self) -> Option<&MessageSummary> {
        self.summary.as_ref()
    }

    /// Whether the entry has a model-visible message ([`entry_message`]), from its summary
    /// when a deferred load kept one (else the entry is read).
    pub fn is_visible(&self) -> bool {
        match (&self.summary, self.kind.as_str()) {
            (Some(s), _) => s.visible,
            (None, "message" | "custom_message" | "branch_summary") => {
                entry_message(self).is_some()
            }
            _ => false,
        }
    }
}

/// What a tree keeps of each entry beside the entries, in a vector of its own (4 bytes an
/// entry: a pass over a long path's kinds and roles reads these, not the 152-byte entries, so
/// the passes an open makes stay in the cache): the entry's kind and role as indices into
/// their lists of known names (15: another name; [`NO_ROLE`]: none), whether it has a
/// model-visible message when that is known without reading it ([`Entry::is_visible`]), and the
/// low 16 bits of a tool result's [`line::tool_hash`]. Each `may_*` question is false only when
/// the entry is certainly not so; the entry itself answers the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryShape(u32);

impl EntryShape {
    /// Bits 0–3: the kind's index in [`EntryKind::KNOWN`]; bits 4–7: the role's in [`ROLES`];
    /// bits 8–9: visible (1), not visible (2), unknown (0); bits 16–31: the tool hash's low bits.
    const OTHER: u32 = 15;

    fn of(e: &Entry) -> EntryShape {
        let code = |n: &Name| match n {
            Name::Known(i) if u32::from(*i) < Self::OTHER => u32::from(*i),
            _ => Self::OTHER,
        };
        let visible = match (&e.summary, e.kind.as_str()) {
            (Some(s), _) if s.visible => 1,
            (Some(_), _) => 2,
            (None, "message" | "custom_message" | "branch_summary") => 0,
            _ => 2,
        };
        EntryShape(
            code(&e.kind.0) | code(&e.role) << 4 | visible << 8 | ((e.tool & 0xffff) as u32) << 16,
        )
    }

    /// False when the entry's `type` is certainly not `kind`. Inlined: the passes over long
    /// paths ask it of every entry with a literal `kind`, whose compare then folds into a few
    /// instructions (a call and a `memcmp` per entry otherwise; docs/benchmarks.md, round 38).
    #[inline(always)]
    pub fn may_be_kind(self, kind: &str) -> bool {
        let code = self.0 & 15;
        code == Self::OTHER || EntryKind::KNOWN.get(code as usize) == Some(&kind)
    }

    /// False when the entry certainly has no `message.role` `role` (inlined as
    /// [`EntryShape::may_be_kind`]).
    #[inline(always)]
    pub fn may_have_role(self, role: &str) -> bool {
        let code = self.0 >> 4 & 15;
        code == Self::OTHER || ROLES.get(code as usize) == Some(&role)
    }

    /// False when the entry is certainly not a tool result of the tool `name`
    /// ([`Entry::tool_is`]).
    pub fn may_be_tool(self, name: &str) -> bool {
        self.may_be_kind("message")
            && self.may_have_role("toolResult")
            && (self.0 >> 16) as u64 == line::tool_hash(name) & 0xffff
    }

    /// False when the entry is certainly neither a `compaction` nor a stored system message
    /// (what [`super::system_message_count`] and [`super::SystemState::of_path`] read).
    pub fn may_be_system_part(self) -> bool {
        self.may_be_kind("compaction")
            || (self.may_be_kind("message") && self.may_have_role("system"))
    }

    /// [`EntryShape::may_be_kind`] of `kind`, or of the entries of `message.role` `kind`
    /// ([`EntryShape::may_have_role`]), or, for `toolResult:NAME`, of the tool results of the
    /// tool `NAME` ([`EntryShape::may_be_tool`]): the question of a pass over many entries
    /// (an extension's `branch_entries_of`), with the names looked up and the tool name
    /// hashed once instead of once per entry. Same answers as those calls.
    pub fn kind_or_role_test(kind: &str) -> impl Fn(EntryShape) -> bool + Copy {
        let code = |known: &[&str], name: &str| {
            known
                .iter()
                .position(|k| *k == name)
                .map_or(Self::OTHER, |i| (i as u32).min(Self::OTHER))
        };
        let message = code(&EntryKind::KNOWN, "message");
        let (kind_code, role_code, tool) = match kind.split_once(':') {
            Some(("toolResult", tool)) => (
                Self::OTHER + 1,
                code(&ROLES, "toolResult"),
                Some(line::tool_hash(tool) & 0xffff),
            ),
            _ => (code(&EntryKind::KNOWN, kind), code(&ROLES, kind), None),
        };
        move |s: EntryShape| {
            let k = s.0 & 15;
            let r = s.0 >> 4 & 15;
            let is_message = k == Self::OTHER || k == message;
            let has_role = r == Self::OTHER || r == role_code;
            match tool {
                Some(t) => is_message && has_role && u64::from(s.0 >> 16) == t,
                None => k == Self::OTHER || k == kind_code || (is_message && has_role),
            }
        }
    }

    /// [`Entry::is_visible`] when it is known without reading the entry.
    pub fn visible(self) -> Option<bool> {
        match self.0 >> 8 & 3 {
            1 => Some(true),
            2 => Some(false),
            _ => None,
        }
    }
}

/// A parsed session file: header, entries in file order, an index by id, and each entry's
/// parent by index (paths are walked without hashing an id per step).
#[derive(Debug, Clone, Default)]
pub struct SessionTree {
    pub header: Value,
    /// In file order. An entry's `parent_id` is changed through [`SessionTree::set_parent`]
    /// (which keeps the parents by index true), never in place.
    pub entries: Vec<Entry>,
    /// Entries by id: see [`IdIndex`].
    index: IdIndex,
    /// `parents[i]`: the index of entry `i`'s parent, [`ROOT`] without one, [`UNRESOLVED`]
    /// when its parent was not there when it was pushed (looked up by id when walked).
    parents: Vec<u32>,
    /// `shapes[i]`: what the passes over paths read of entry `i` ([`EntryShape`]).
    shapes: Vec<EntryShape>,
    /// Every shape `shapes` was given: a pass whose question none of them answers yes
    /// finds nothing, so it is not made ([`SessionTree::may_hold`]).
    seen: ShapesSeen,
    /// Repairs and migrations done while loading, for the user to see.
    pub warnings: Vec<String>,
}

/// A pass's question of entry shapes as [`SessionTree::shape_test`] prepares it: the few
/// shapes of the tree it keeps, or the question itself.
pub(crate) enum ShapeTest<F> {
    /// The first `n` shapes kept (of the tree's distinct shapes, all that `maybe` keeps).
    Among([EntryShape; FEW_SHAPES], usize),
    /// Asked of each entry.
    Ask(F),
}

/// The most shapes a [`ShapeTest`] compares per entry: more, and the question is asked
/// instead.
const FEW_SHAPES: usize = 4;

impl<F: Fn(EntryShape) -> bool> ShapeTest<F> {
    /// Whether the pass keeps an entry of shape `s`.
    #[inline(always)]
    pub(crate) fn keeps(&self, s: EntryShape) -> bool {
        match self {
            ShapeTest::Among(kept, n) => kept[..*n].contains(&s),
            ShapeTest::Ask(maybe) => maybe(s),
        }
    }
}

/// The distinct [`EntryShape`]s a tree's entries were given, in the order first seen: a few
/// dozen in a session (kinds × roles × tools), so a pass over a long path asks each of them
/// its question before it walks ([`SessionTree::may_hold`]). A shape is added when an entry
/// gets it and never taken away (an entry replaced leaves its old shape): a superset, so a
/// question none of them answers yes is certainly answered no by every entry. Past
/// [`ShapesSeen::MAX`] shapes the set stops counting and every pass walks.
#[derive(Debug, Clone, Default)]
struct ShapesSeen {
    /// The shapes, first seen first.
    all: Vec<EntryShape>,
    /// The last shapes added or met again (entries repeat a few shapes in turn: an assistant
    /// message, its results), checked before `all`.
    recent: [Option<EntryShape>; 4],
    /// More than [`ShapesSeen::MAX`] shapes: not kept.
    full: bool,
}

impl ShapesSeen {
    /// The most shapes kept.
    const MAX: usize = 1024;

    fn add(&mut self, shape: EntryShape) {
        if self.full || self.recent.contains(&Some(shape)) {
            return;
        }
        self.recent.rotate_right(1);
        self.recent[0] = Some(shape);
        if self.all.contains(&shape) {
            return;
        }
        if self.all.len() == Self::MAX {
            self.full = true;
            self.all = Vec::new();
        } else {
            self.all.push(shape);
        }
    }
}

/// The entries of a tree by id, without a copy of each id: the low 32 bits of the XXH3 of an
/// id → the index of its entry (8 bytes a slot; the entry's own id is compared on lookup);
/// the rare id whose hash bits another id already holds is kept by name in `overflow`. For a
/// long session this is an eighth of a map by id string (no string allocated per entry).
#[derive(Debug, Clone, Default)]
struct IdIndex {
    by_hash: HashMap<u32, u32, IdHashBuilder>,
    overflow: HashMap<String, usize>,
}

/// The key [`IdIndex`] files an id under.
fn id_hash(id: &str) -> u32 {
    xxhash_rust::xxh3::xxh3_64(id.as_bytes()) as u32
}

/// A hasher for keys that are hash bits already ([`IdIndex`]'s): the key spread over 64 bits
/// by one multiplication (the map's table takes its slot from the low bits and its tag from
/// the high ones).
#[derive(Debug, Clone, Copy, Default)]
struct IdHashBuilder;

impl std::hash::BuildHasher for IdHashBuilder {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// See [`IdHashBuilder`].
#[derive(Debug, Clone, Copy, Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only u32 keys are hashed; anything else is folded in, to stay a hasher.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        // The key's bits are uniform already: one odd multiplier (Fibonacci hashing) moves
        // them to the top bits too, and keeps the low ones (n itself is the low 32 bits'
        // source: `n * odd` is a bijection).
        self.0 = (u64::from(n) | u64::from(n) << 32).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// What [`IdIndex::file`] did with an entry.
enum Filed {
    /// A new id, filed at the index it was given.
    New,
    /// The id was there already, at this index (nothing filed).
    Existing(usize),
}

impl IdIndex {
    /// The index of the entry `id` of `entries`.
    fn get(&self, entries: &[Entry], id: &str) -> Option<usize> {
        match self.by_hash.get(&id_hash(id)) {
            Some(&i) if entries.get(i as usize).is_some_and(|e| e.id == id) => Some(i as usize),
            _ if self.overflow.is_empty() => None,
            _ => self.overflow.get(id).copied(),
        }
    }

    /// Files `id` as the entry `i` of `entries` (the next one) unless an entry of `entries`
    /// has it already: one hash and one probe of the table for a new id.
    fn file(&mut self, entries: &[Entry], id: &str, i: usize) -> Filed {
        let Ok(slot) = u32::try_from(i) else {
            return match self.get(entries, id) {
                Some(at) => Filed::Existing(at),
                None => {
                    self.overflow.insert(id.to_string(), i);
                    Filed::New
                }
            };
        };
        match self.by_hash.entry(id_hash(id)) {
            // An id in `overflow` has its hash bits held by another id: a free slot means new.
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(slot);
                Filed::New
            }
            std::collections::hash_map::Entry::Occupied(o) => {
                let at = *o.get() as usize;
                if entries.get(at).is_some_and(|e| e.id == id) {
                    return Filed::Existing(at);
                }
                match self.overflow.get(id) {
                    Some(&at) => Filed::Existing(at),
                    None => {
                        self.overflow.insert(id.to_string(), i);
                        Filed::New
                    }
                }
            }
        }
    }

    fn reserve(&mut self, n: usize) {
        self.by_hash.reserve(n);
    }
}

/// [`SessionTree::parents`] of an entry without `parentId`.
const ROOT: u32 = u32::MAX;
/// [`SessionTree::parents`] of an entry whose parent was not loaded before it (or whose index
/// does not fit: looked up by id then).
const UNRESOLVED: u32 = u32::MAX - 1;

/// The projection of a path that a run needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionContext {
    /// Model-visible messages in order.
    pub messages: Vec<Message>,
    /// `(provider, modelId)` from the last `model_change` or assistant message on the path.
    pub model: Option<(String, String)>,
    /// From the last `thinking_level_change` on the path; `None` without one (Pi 1.6 then
    /// runs a resumed file at its default level and records it: `hasThinkingEntry`).
    pub thinking_level: Option<String>,
    /// Messages before this index carry usage of a context that has changed since: they come
    /// from entries before the path's latest `compaction` or `context_edit` entry (0 without
    /// one). Pi 1.6 (`estimateProjectedContextTokens`, `core/compaction/compaction.js`) does
    /// not anchor the compaction threshold on such usage: it estimates the whole context by
    /// characters / 4.
    pub usage_from: usize,
}

/// The model-visible message of one entry, as Pi's `buildSessionContext` derives it: a
/// `message` (converted by [`convert_message`]), a `custom_message` as user content, a
/// non-empty `branch_summary` wrapped in Pi's prefix; `None` for every other entry. Parsed
/// from the entry's text.
pub fn entry_message(e: &Entry) -> Option<Message> {
    match e.kind.as_str() {
        "message" => line::parse(&e.text())?.message?.message.map(|m| *m),
        "custom_message" => {
            let raw = e.raw();
            user_content(&raw["content"], millis(&raw["timestamp"]))
        }
        "branch_summary" => {
            let raw = e.raw();
            str_of(&raw, "summary").filter(|s| !s.is_empty()).map(|s| {
                user(
                    format!("{BRANCH_SUMMARY_PREFIX}{s}{BRANCH_SUMMARY_SUFFIX}"),
                    millis(&raw["timestamp"]),
                )
            })
        }
        _ => None,
    }
}

/// The model-visible messages of a root-to-leaf `path` (Pi's `buildSessionContext`): with a
/// `compaction` entry on it, its summary first, then the kept entries from `firstKeptEntryId`
/// up to it, then everything after it; else every entry's message. `proposed`
/// (`(summary, firstKeptEntryId)`) is a compaction taken to follow the last entry. Messages
/// at path positions before `strip_before` are read without their large images' bytes (the
/// image window's start, [`super::images::window_start`]; 0: every image whole).
pub fn path_messages(
    path: &[&Entry],
    proposed: Option<(&str, &str)>,
    strip_before: usize,
) -> Vec<Message> {
    let mut read = plan_messages(path, &path_plan(path, proposed), strip_before);
    path_messages_with(path, proposed, |k, _| read[k].take())
}

/// Which entries of a path the model context holds: with a compaction (on the path, or
/// proposed to follow it), its summary first (`(summary, timestamp)`), then the kept entries
/// from `firstKeptEntryId` up to it, then everything after it; else the whole path.
pub(super) struct PathPlan {
    pub(super) summary: Option<(String, i64)>,
    /// Positions on the path, in order.
    pub(super) ranges: [std::ops::Range<usize>; 2],
}

pub(super) fn path_plan(path: &[&Entry], proposed: Option<(&str, &str)>) -> PathPlan {
    let compaction = path.iter().rposition(|e| e.kind == "compaction");
    let (ci, summary, first_kept, ts) = match (proposed, compaction) {
        (Some((summary, first)), _) => (
            path.len(),
            summary.to_string(),
            Some(first.to_string()),
            chrono::Utc::now().timestamp_millis(),
        ),
        (None, Some(ci)) => {
            let c = path[ci].raw();
            (
                ci,
                str_of(&c, "summary").unwrap_or_default(),
                str_of(&c, "firstKeptEntryId"),
                millis(&c["timestamp"]),
            )
        }
        (None, None) => {
            return PathPlan {
                summary: None,
                ranges: [0..path.len(), 0..0],
            }
        }
    };
    let start = path[..ci]
        .iter()
        .position(|e| Some(e.id.as_str()) == first_kept.as_deref())
        .unwrap_or(ci);
    let after = if ci < path.len() {
        ci + 1..path.len()
    } else {
        0..0
    };
    PathPlan {
        summary: Some((summary, ts)),
        ranges: [start..ci, after],
    }
}

/// The model-visible message ([`entry_message`]) of each entry of `path` that the context of
/// `plan` holds, by position on the path (`None` elsewhere). The `message` entries loaded
/// from a file are read back in file order, in runs of nearby lines ([`FileText::messages`]),
/// on every core (up to 8) when there are many megabytes of them; the others one by one.
fn plan_messages(path: &[&Entry], plan: &PathPlan, strip_before: usize) -> Vec<Option<Message>> {
    plan_messages_from(path, plan, PARALLEL, strip_before)
}

/// Below this many bytes of lines, one thread reads a context's messages
/// ([`plan_messages_from`]).
const PARALLEL: usize = 8 << 20;

/// `m` with its large images' bytes left out ([`super::images::strip_image_data`]) when
/// `strip`: a message before the image window, whose images the window replaces anyway.
fn stripped_if(m: Option<Message>, strip: bool) -> Option<Message> {
    m.map(|mut m| {
        if strip {
            super::images::strip_image_data(&mut m);
        }
        m
    })
}

/// [`plan_messages`], on several threads from `parallel` bytes of lines. The messages at path
/// positions before `strip_before` keep no large image bytes ([`stripped_if`]): each is
/// stripped as soon as it is parsed, so at most one such image per reading thread is in
/// memory at once (case SESS-05).
fn plan_messages_from(
    path: &[&Entry],
    plan: &PathPlan,
    parallel: usize,
    strip_before: usize,
) -> Vec<Option<Message>> {
    let mut out: Vec<Option<Message>> = Vec::new();
    out.resize_with(path.len(), || None);
    // The file most entries come from (one per load); lines of any other are read alone.
    let src = path.iter().find_map(|e| match &e.text {
        Text::File { src, .. } => Some(src.clone()),
        Text::Owned(_) => None,
    });
    let mut items = Vec::new();
    for k in plan.ranges.iter().flat_map(|r| r.clone()) {
        let e = path[k];
        match (&e.text, &src) {
            (
                Text::File {
                    src: s,
                    offset,
                    len,
                    hash,
                },
                Some(src),
            ) if e.kind == "message" && Arc::ptr_eq(s, src) => {
                items.push((*offset, *len, *hash, k))
            }
            _ => out[k] = stripped_if(entry_message(e), k < strip_before),
        }
    }
    let Some(src) = src else { return out };
    items.sort_unstable_by_key(|i| i.0);
    let bytes: usize = items.iter().map(|i| i.1).sum();
    let threads = std::thread::available_parallelism()
        .map(|t| t.get())
        .unwrap_or(1)
        .min(8);
    if bytes < parallel || threads < 2 {
        src.messages(&items, &mut |k, m| {
            out[k] = stripped_if(m, k < strip_before)
        });
        return out;
    }
    // Contiguous shares of about equal bytes, one per thread.
    let share = bytes.div_ceil(threads);
    let mut cuts = vec![0];
    let mut acc = 0;
    for (i, it) in items.iter().enumerate() {
        acc += it.1;
        if acc >= share * cuts.len() && cuts.len() < threads {
            cuts.push(i + 1);
        }
    }
    cuts.push(items.len());
    let parts: Vec<Vec<(usize, Option<Message>)>> = std::thread::scope(|sc| {
        let handles: Vec<_> = cuts
            .windows(2)
            .map(|w| {
                let (part, src) = (&items[w[0]..w[1]], &src);
                sc.spawn(move || {
                    let mut got = Vec::with_capacity(part.len());
                    src.messages(part, &mut |k, m| {
                        got.push((k, stripped_if(m, k < strip_before)))
                    });
                    got
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut placed = 0;
    for (k, m) in parts.into_iter().flatten() {
        out[k] = m;
        placed += 1;
    }
    if placed < items.len() {
        // A reader thread failed: what it left is read here, one line at a time.
        for &(_, _, _, k) in &items {
            if out[k].is_none() {
                out[k] = stripped_if(entry_message(path[k]), k < strip_before);
            }
        }
    }
    out
}

/// The messages of the whole root-to-`leaf` path of `tree` read back as a context reads
/// them, on several threads from `parallel` bytes of lines (tests: the threads' split).
#[cfg(test)]
pub(crate) fn read_path_messages(
    tree: &SessionTree,
    leaf: &str,
    parallel: usize,
) -> Vec<Option<Message>> {
    let path = tree.path(leaf);
    let plan = PathPlan {
        summary: None,
        ranges: [0..path.len(), 0..0],
    };
    plan_messages_from(&path, &plan, parallel, 0)
}

/// [`path_messages`] taking each entry's message from `message(position on the path, entry)`
/// (messages already parsed); it is asked only for the entries the context holds, in order.
pub fn path_messages_with(
    path: &[&Entry],
    proposed: Option<(&str, &str)>,
    mut message: impl FnMut(usize, &Entry) -> Option<Message>,
) -> Vec<Message> {
    let plan = path_plan(path, proposed);
    let edits = ContextEdits::on_path(path);
    // Room for the summary and a turn's messages: a long session's first prompt does not
    // grow (copy) the whole context to push its user message.
    let mut out = Vec::with_capacity(plan.ranges.iter().map(|r| r.len()).sum::<usize>() + 64);
    if let Some((summary, ts)) = plan.summary {
        out.push(user(
            format!("{COMPACTION_SUMMARY_PREFIX}{summary}{COMPACTION_SUMMARY_SUFFIX}"),
            ts,
        ));
    }
    for range in plan.ranges {
        out.extend(range.filter_map(|k| match &edits {
            // Pi 1.6's projection: the latest `context_edit` of the entry on this path.
            Some(edits) if edits.get(&path[k].id).is_some() => {
                edits.apply(path[k], message(k, path[k]))
            }
            _ => message(k, path[k]),
        }));
    }
    out
}

/// [`SessionContext::usage_from`] of `path`: how many of its context's messages come from
/// entries up to its latest `compaction` or `context_edit` entry (the compaction's summary and
/// kept messages, the messages an edit could change), 0 without one.
pub fn usage_from(path: &[&Entry]) -> usize {
    match path
        .iter()
        .rposition(|e| e.kind == "compaction" || e.kind == "context_edit")
    {
        Some(x) => path_message_count(&path[..=x]),
        None => 0,
    }
}

/// How many messages [`path_messages`] gives for `path`, without building them
/// ([`Entry::is_visible`]).
pub fn path_message_count(path: &[&Entry]) -> usize {
    let plan = path_plan(path, None);
    let edits = ContextEdits::on_path(path);
    let omitted = |e: &Entry| edits.as_ref().is_some_and(|x| x.omits(&e.id));
    let visible: usize = plan
        .ranges
        .into_iter()
        .map(|r| {
            r.filter(|&k| path[k].is_visible() && !omitted(path[k]))
                .count()
        })
        .sum();
    usize::from(plan.summary.is_some()) + visible
}

/// The model and thinking level of a root-to-leaf `path` (no messages): the last
/// `model_change` or assistant message's provider and model, the last `thinking_level_change`
/// (`None` without one).
#[cfg(test)]
fn path_settings(path: &[&Entry]) -> SessionContext {
    let mut ctx = SessionContext::default();
    // From the leaf back: the first of each found is the last on the path.
    let mut thinking = None;
    for e in path.iter().rev() {
        if thinking.is_some() && ctx.model.is_some() {
            break;
        }
        match e.kind.as_str() {
            "thinking_level_change" if thinking.is_none() => {
                thinking = str_of(&e.raw(), "thinkingLevel");
            }
            "model_change" if ctx.model.is_none() => {
                let raw = e.raw();
                if let (Some(p), Some(m)) = (str_of(&raw, "provider"), str_of(&raw, "modelId")) {
                    ctx.model = Some((p, m));
                }
            }
            "message" if ctx.model.is_none() => {
                if let Some((p, m)) = e.assistant().and_then(|a| a.provider().zip(a.model())) {
                    ctx.model = Some((p.to_string(), m.to_string()));
                }
            }
            _ => {}
        }
    }
    ctx.thinking_level = thinking;
    ctx
}

impl SessionTree {
    /// An empty tree under `header`.
    pub fn new(header: Value) -> SessionTree {
        SessionTree {
            header,
            ..Default::default()
        }
    }

    /// Builds the tree from parsed lines (header first); migrates v1 / v2 in memory.
    pub fn from_values(
        header: Value,
        mut values: Vec<Value>,
        warnings: Vec<String>,
    ) -> SessionTree {
        let mut tree = SessionTree {
            header,
            warnings,
            ..Default::default()
        };
        let version = tree.header["version"].as_u64().unwrap_or(1);
        if version < 2 {
            // v1: a linear list without ids; chain them in file order.
            let mut parent: Option<String> = None;
            for (n, v) in values.iter_mut().enumerate() {
                if let Some(o) = v.as_object_mut() {
                    let id = format!("{:08x}", n + 1);
                    o.insert("id".into(), Value::String(id.clone()));
                    o.insert(
                        "parentId".into(),
                        parent.clone().map(Value::String).unwrap_or(Value::Null),
                    );
                    parent = Some(id);
                }
            }
            tree.warnings
                .push(format!("migrated a version {version} session in memory"));
        }
        if version < 3 {
            for v in values.iter_mut() {
                if v["type"] == "message" && v["message"]["role"] == "hookMessage" {
                    v["message"]["role"] = Value::String("custom".into());
                }
            }
        }
        for raw in values {
            if !tree.push(raw) {
                tree.warnings
                    .push("skipped an entry without id or type".into());
            }
        }
        tree
    }

    /// Adds an entry (as the writer appends); an entry whose id is already there replaces it,
    /// with a warning. False when `raw` has no id or type.
    pub fn push(&mut self, raw: Value) -> bool {
        match Entry::from_value(&raw) {
            Some(e) => {
                self.push_entry(e);
                true
            }
            None => false,
        }
    }

    /// Adds `entry` and returns its index in [`SessionTree::entries`]; an entry whose id is
    /// already there is replaced (the later one wins, with a warning).
    pub fn push_entry(&mut self, entry: Entry) -> usize {
        let parent = self.parent_slot(entry.parent_id.as_deref());
        let shape = EntryShape::of(&entry);
        let i = self.entries.len();
        match self.index.file(&self.entries, &entry.id, i) {
            Filed::Existing(i) => {
                self.warnings.push(format!(
                    "duplicate entry id {}; the later one wins",
                    entry.id
                ));
                self.entries[i] = entry;
                self.parents[i] = parent;
                self.shapes[i] = shape;
                self.seen.add(shape);
                i
            }
            Filed::New => {
                self.entries.push(entry);
                self.parents.push(parent);
                self.shapes.push(shape);
                self.seen.add(shape);
                i
            }
        }
    }

    /// Room for `n` more entries.
    pub(crate) fn reserve(&mut self, n: usize) {
        self.entries.reserve(n);
        self.parents.reserve(n);
        self.shapes.reserve(n);
        self.index.reserve(n);
    }

    /// What [`SessionTree::parents`] holds for a parent id, as the entries are now.
    fn parent_slot(&self, parent: Option<&str>) -> u32 {
        let slot = |i: usize| u32::try_from(i).ok().filter(|&i| i < UNRESOLVED);
        match (parent, self.entries.last()) {
            (None, _) => ROOT,
            // Most entries follow their parent (ids are unique: the index agrees).
            (Some(p), Some(last)) if last.id == p => {
                slot(self.entries.len() - 1).unwrap_or(UNRESOLVED)
            }
            (Some(p), _) => self
                .index
                .get(&self.entries, p)
                .and_then(slot)
                .unwrap_or(UNRESOLVED),
        }
    }

    /// Entry `i` read under `parent` from now on (the file is not changed).
    pub(crate) fn set_parent(&mut self, i: usize, parent: Option<CompactString>) {
        self.parents[i] = self.parent_slot(parent.as_deref());
        self.entries[i].parent_id = parent;
    }

    /// The index of entry `i`'s parent (`None`: a root, or a parent that is not loaded).
    fn parent_of(&self, i: usize) -> Option<usize> {
        match self.parents.get(i).copied() {
            Some(ROOT) => None,
            Some(p) if p != UNRESOLVED => Some(p as usize),
            // Not resolved when pushed (or the entries were changed in place): by its id.
            _ => self.entries[i]
                .parent_id
                .as_deref()
                .and_then(|p| self.index.get(&self.entries, p)),
        }
    }

    /// The entry with `id`.
    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.index.get(&self.entries, id).map(|i| &self.entries[i])
    }

    /// The default leaf: the last entry in file order.
    pub fn last_id(&self) -> Option<&str> {
        self.entries.last().map(|e| e.id.as_str())
    }

    /// Ids of the children of `id` (`None`: the roots), in file order.
    pub fn children(&self, id: Option<&str>) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|e| e.parent_id.as_deref() == id)
            .map(|e| e.id.as_str())
            .collect()
    }

    /// Indices of the root-to-`leaf` path (stops at a missing parent or a cycle).
    pub(crate) fn path_indices(&self, leaf: &str) -> Vec<usize> {
        // A parent filed before its child has the smaller index: a walk whose every step goes
        // to a smaller index cannot meet an entry twice, and needs no record of the entries
        // it met (a vector as long as the tree, per walk); any other walk is made again with
        // one.
        //
        // The path is walked twice, the first time for its length only: the vector is made
        // once at its size (grown by doubling, a long path's vector was up to twice its size,
        // and the old and the new one were both there while it grew: at an open's peak).
        let start = self.index.get(&self.entries, leaf);
        let mut len = 0;
        let mut last = usize::MAX;
        let mut cur = start;
        while let Some(i) = cur {
            if i >= last {
                return self.path_indices_checked(leaf);
            }
            len += 1;
            last = i;
            cur = self.parent_of(i);
        }
        let mut out = vec![0; len];
        let mut cur = start;
        for slot in out.iter_mut().rev() {
            let Some(i) = cur else { break };
            *slot = i;
            cur = self.parent_of(i);
        }
        out
    }

    /// [`SessionTree::path_indices`], each entry checked against those met before.
    fn path_indices_checked(&self, leaf: &str) -> Vec<usize> {
        let mut out = Vec::new();
        let mut seen = vec![false; self.entries.len()];
        let mut cur = self.index.get(&self.entries, leaf);
        while let Some(i) = cur {
            if std::mem::replace(&mut seen[i], true) {
                break;
            }
            out.push(i);
            cur = self.parent_of(i);
        }
        out.reverse();
        out
    }

    /// The entries from `leaf` up to the root, leaf first, walked lazily (stops at a missing
    /// parent or a cycle).
    pub fn ancestors<'a>(&'a self, leaf: &str) -> impl Iterator<Item = &'a Entry> + 'a {
        let mut cur = self.index.get(&self.entries, leaf);
        let mut left = self.entries.len();
        std::iter::from_fn(move || {
            let i = cur.filter(|_| left > 0)?;
            left -= 1;
            cur = self.parent_of(i);
            Some(&self.entries[i])
        })
    }

    /// The entries of the root-to-`leaf` path ([`SessionTree::path`]) whose shape `maybe`
    /// keeps, in order: a pass over a long path that reads only the entries it may want
    /// ([`EntryShape`]'s questions are false only for entries that certainly are not so).
    ///
    /// Only the entries kept are collected: a walk whose every step goes to an earlier entry
    /// (a file as written, see [`SessionTree::path_indices`]) allocates nothing as long as the
    /// path; any other walk is made again through [`SessionTree::path_indices`].
    pub fn path_where(&self, leaf: &str, maybe: impl Fn(EntryShape) -> bool) -> Vec<&Entry> {
        if !self.may_hold(&maybe) {
            return Vec::new();
        }
        let test = self.shape_test(maybe);
        let keep = |i: usize| self.shapes.get(i).is_none_or(|s| test.keeps(*s));
        let mut out = Vec::new();
        let mut last = usize::MAX;
        let mut cur = self.index.get(&self.entries, leaf);
        while let Some(i) = cur {
            if i >= last {
                return self
                    .path_indices(leaf)
                    .into_iter()
                    .filter(|&i| keep(i))
                    .map(|i| &self.entries[i])
                    .collect();
            }
            if keep(i) {
                out.push(&self.entries[i]);
            }
            last = i;
            cur = self.parent_of(i);
        }
        out.reverse();
        out
    }

    /// Whether an entry of the tree may have a shape `maybe` keeps: false when no shape the
    /// entries were given is kept ([`ShapesSeen`]; every entry has its shape), so a pass
    /// asking `maybe` would find nothing and is not made (on a long session without system
    /// messages, custom entries or todo results, the passes at open that look for them).
    pub fn may_hold(&self, maybe: impl Fn(EntryShape) -> bool) -> bool {
        self.seen.full
            || self.shapes.len() != self.entries.len()
            || self.seen.all.iter().any(|s| maybe(*s))
    }

    /// `maybe` asked once of each distinct shape the entries were given ([`ShapesSeen`]: a
    /// few dozen) instead of once per entry: when it keeps at most [`FEW_SHAPES`] of them,
    /// a pass over many entries compares each entry's shape with those (the question of
    /// `file_usage`, four `may_be_*` calls, was asked of every entry of a 100 MB session at
    /// open; docs/benchmarks.md, round 39). Same answers as `maybe` for every entry of the
    /// tree (every entry's shape is among those seen), `maybe` itself when the shapes are
    /// not all known.
    pub(crate) fn shape_test<F: Fn(EntryShape) -> bool>(&self, maybe: F) -> ShapeTest<F> {
        if self.seen.full || self.shapes.len() != self.entries.len() {
            return ShapeTest::Ask(maybe);
        }
        let mut kept = [EntryShape(0); FEW_SHAPES];
        let mut n = 0;
        for &s in &self.seen.all {
            if maybe(s) {
                if n == kept.len() {
                    return ShapeTest::Ask(maybe);
                }
                kept[n] = s;
                n += 1;
            }
        }
        ShapeTest::Among(kept, n)
    }

    /// The entries in file order whose shape `maybe` keeps ([`SessionTree::path_where`];
    /// `maybe` asked once per distinct shape, [`SessionTree::shape_test`]).
    pub fn entries_where(
        &self,
        maybe: impl Fn(EntryShape) -> bool,
    ) -> impl DoubleEndedIterator<Item = &Entry> {
        let test = self.shape_test(maybe);
        self.entries
            .iter()
            .zip(&self.shapes)
            .filter(move |(_, s)| test.keeps(**s))
            .map(|(e, _)| e)
    }

    /// The entries from `leaf` up to the root whose shape `maybe` keeps, leaf first, walked
    /// lazily ([`SessionTree::ancestors`]).
    fn ancestors_where<'a>(
        &'a self,
        leaf: &str,
        maybe: impl Fn(EntryShape) -> bool + 'a,
    ) -> impl Iterator<Item = &'a Entry> + 'a {
        let mut cur = self
            .index
            .get(&self.entries, leaf)
            .filter(|_| self.may_hold(&maybe));
        let test = self.shape_test(maybe);
        let mut left = self.entries.len();
        std::iter::from_fn(move || loop {
            let i = cur.filter(|_| left > 0)?;
            left -= 1;
            cur = self.parent_of(i);
            if self.shapes.get(i).is_none_or(|s| test.keeps(*s)) {
                return Some(&self.entries[i]);
            }
        })
    }

    /// [`path_settings`] of the root-to-`leaf` path, reading only the entries that can set
    /// them: the last `thinking_level_change` with a level, the last `model_change` or
    /// assistant message with both provider and model.
    fn settings_at(&self, leaf: &str) -> SessionContext {
        let thinking = self
            .ancestors_where(leaf, |s| s.may_be_kind("thinking_level_change"))
            .filter(|e| e.kind == "thinking_level_change")
            .find_map(|e| str_of(&e.raw(), "thinkingLevel"));
        let model = self
            .ancestors_where(leaf, |s| {
                s.may_be_kind("model_change")
                    || (s.may_be_kind("message") && s.may_have_role("assistant"))
            })
            .find_map(|e| match e.kind.as_str() {
                "model_change" => {
                    let raw = e.raw();
                    str_of(&raw, "provider").zip(str_of(&raw, "modelId"))
                }
                "message" => e
                    .assistant()
                    .and_then(|a| a.provider().zip(a.model()))
                    .map(|(p, m)| (p.to_string(), m.to_string())),
                _ => None,
            });
        SessionContext {
            messages: Vec::new(),
            model,
            thinking_level: thinking,
            usage_from: 0,
        }
    }

    /// The root-to-`leaf` path (stops at a missing parent or a cycle).
    pub fn path(&self, leaf: &str) -> Vec<&Entry> {
        self.path_indices(leaf)
            .into_iter()
            .map(|i| &self.entries[i])
            .collect()
    }

    /// The text of each entry on the path from the root to `leaf` ([`SessionTree::path`]), in
    /// path order, as [`Entry::text`] gives it (a line changed since the load reads empty),
    /// without a `pread` and a `String` per line: lines of the loaded file are read back in
    /// runs ([`FileText::texts`]). What a fork copies.
    pub(crate) fn path_texts(&self, leaf: &str, put: &mut dyn FnMut(&Entry, &str)) {
        let path = self.path_indices(leaf);
        let mut k = 0;
        while k < path.len() {
            let e = &self.entries[path[k]];
            let Text::File { src, .. } = &e.text else {
                put(e, &e.text());
                k += 1;
                continue;
            };
            // The run of entries from the same file that starts here (up to a bound, so the
            // list stays small).
            let mut items = Vec::new();
            while let Some(&i) = path.get(k + items.len()).filter(|_| items.len() < 4096) {
                match &self.entries[i].text {
                    Text::File {
                        src: s,
                        offset,
                        len,
                        hash,
                    } if Arc::ptr_eq(s, src) => items.push((*offset, *len, *hash, i)),
                    _ => break,
                }
            }
            k += items.len();
            src.texts(&items, &mut |i, text| {
                put(&self.entries[i], text.unwrap_or(""))
            });
        }
    }

    /// The labels currently set, by target entry id (later `label` entries win; an empty or
    /// missing label clears).
    pub fn labels(&self) -> HashMap<String, String> {
        let mut out = HashMap::new();
        for e in self.entries_where(|s| s.may_be_kind("label")) {
            if e.kind != "label" {
                continue;
            }
            let raw = e.raw();
            let Some(target) = str_of(&raw, "targetId") else {
                continue;
            };
            match str_of(&raw, "label").filter(|l| !l.is_empty()) {
                Some(l) => {
                    out.insert(target, l);
                }
                None => {
                    out.remove(&target);
                }
            }
        }
        out
    }

    /// The session's name: the last `session_info` entry's `name`.
    pub fn name(&self) -> Option<String> {
        if !self.may_hold(|s| s.may_be_kind("session_info")) {
            return None;
        }
        self.entries
            .iter()
            .zip(&self.shapes)
            .rev()
            .find(|(e, s)| s.may_be_kind("session_info") && e.kind == "session_info")
            .and_then(|(e, _)| str_of(&e.raw(), "name"))
    }

    /// What a run at `leaf` (default: the last entry) sees.
    pub fn context(&self, leaf: Option<&str>) -> SessionContext {
        self.context_with(leaf, None, Source::Read { keep_turns: None })
    }

    /// [`SessionTree::context`] holding image bytes only within the image window of
    /// `keep_turns` user messages (`sessions.imageTurns`; `None`: every image, the same as
    /// [`SessionTree::context`]): the messages before the window
    /// ([`super::images::window_start`]) are read without their large images' bytes, which
    /// [`super::image_window`] replaces by its note anyway. So building the context of a long
    /// session full of images (a deferred open's first run) costs the window's images, not
    /// the file's (case SESS-05: loading in O(line) memory, old images dropped), as an open
    /// that builds its context at once ([`super::SessionWriter::open_with`]) does.
    pub fn context_windowed(
        &self,
        leaf: Option<&str>,
        keep_turns: Option<usize>,
    ) -> SessionContext {
        self.context_with(leaf, None, Source::Read { keep_turns })
    }

    /// What a run at `leaf` would see if a compaction with `summary` and `first_kept_entry_id`
    /// were appended after it (used to check a compaction before it is written).
    pub fn context_after_compaction(
        &self,
        leaf: Option<&str>,
        summary: &str,
        first_kept_entry_id: &str,
    ) -> SessionContext {
        self.context_with(
            leaf,
            Some((summary, first_kept_entry_id)),
            Source::Read { keep_turns: None },
        )
    }

    /// [`SessionTree::context`] taking the messages of `message` entries from `parsed` (by
    /// entry index, as loading parsed them). A path in file order without compaction and
    /// whose messages all come from `message` entries (a session without branches, say) takes
    /// them in place, in the same allocation; any other path takes them out one by one.
    pub(crate) fn context_parsed(
        &self,
        leaf: Option<&str>,
        mut parsed: Vec<Option<Message>>,
    ) -> SessionContext {
        let Some(leaf_id) = leaf.or(self.last_id()) else {
            return self.context_with(leaf, None, Source::Parsed(&mut parsed));
        };
        let indices = self.path_indices(leaf_id);
        let in_order = indices.windows(2).all(|w| w[0] < w[1]);
        let plain = indices.iter().all(|&i| {
            !matches!(
                self.entries[i].kind.as_str(),
                "compaction" | "custom_message" | "branch_summary" | "context_edit"
            )
        });
        if !(in_order && plain && parsed.len() == self.entries.len()) {
            return self.context_with(leaf, None, Source::Parsed(&mut parsed));
        }
        let mut ctx = self.settings_at(leaf_id);
        let mut on_path = vec![false; parsed.len()];
        for &i in &indices {
            on_path[i] = true;
        }
        // Entries other than `message` have no parsed message; off the path they are dropped.
        ctx.messages = parsed
            .into_iter()
            .enumerate()
            .filter_map(|(i, m)| m.filter(|_| on_path[i]))
            .collect();
        ctx
    }

    /// [`SessionContext::usage_from`] of the context at `leaf` (default: the last entry),
    /// without building the context.
    pub fn usage_from(&self, leaf: Option<&str>) -> usize {
        let Some(leaf) = leaf.or(self.last_id()) else {
            return 0;
        };
        let indices = self.path_indices(leaf);
        let path: Vec<&Entry> = indices.iter().map(|&i| &self.entries[i]).collect();
        usage_from(&path)
    }

    /// The model and thinking level at `leaf` (default: the last entry) without the messages
    /// (`messages` empty).
    pub fn settings(&self, leaf: Option<&str>) -> SessionContext {
        match leaf.or(self.last_id()) {
            Some(leaf) => self.settings_at(leaf),
            None => SessionContext::default(),
        }
    }

    /// How many messages the model context at `leaf` (default: the last entry) holds, counted
    /// without building it ([`path_message_count`]).
    pub fn message_count(&self, leaf: Option<&str>) -> usize {
        let Some(leaf) = leaf.or(self.last_id()) else {
            return 0;
        };
        // No compaction and no edit in the whole tree (the common case): one walk up from the
        // leaf, counting by the shapes, without the path's vector.
        let edits = |s: EntryShape| s.may_be_kind("compaction") || s.may_be_kind("context_edit");
        if !self.may_hold(edits) {
            if let Some(n) = self.visible_on_path(leaf) {
                return n;
            }
        }
        let indices = self.path_indices(leaf);
        let shape = |i: usize| self.shapes.get(i).copied();
        let plain = indices.iter().all(|&i| {
            shape(i).is_some_and(|s| !s.may_be_kind("compaction") && !s.may_be_kind("context_edit"))
        });
        if !plain {
            let path: Vec<&Entry> = indices.iter().map(|&i| &self.entries[i]).collect();
            return path_message_count(&path);
        }
        // No compaction and no edit on the path: every visible entry counts, known from its
        // shape for the most part ([`path_message_count`]'s plan is then the whole path).
        indices
            .iter()
            .filter(|&&i| match shape(i).and_then(EntryShape::visible) {
                Some(v) => v,
                None => self.entries[i].is_visible(),
            })
            .count()
    }

    /// The visible entries of the path to `leaf` ([`Entry::is_visible`], read from the shapes
    /// where they know it), counted in one walk up; `None` when the walk does not go to ever
    /// smaller indices (a parent filed after its child: [`SessionTree::path_indices`] walks
    /// that) or an entry's shape is not known.
    fn visible_on_path(&self, leaf: &str) -> Option<usize> {
        let mut n = 0;
        let mut last = usize::MAX;
        let mut cur = self.index.get(&self.entries, leaf);
        while let Some(i) = cur {
            if i >= last {
                return None;
            }
            let visible = match self.shapes.get(i)?.visible() {
                Some(v) => v,
                None => self.entries[i].is_visible(),
            };
            n += usize::from(visible);
            last = i;
            cur = self.parent_of(i);
        }
        Some(n)
    }

    /// How many messages Pi 1.6's agent holds at `leaf` (its `messageCount`): the model
    /// context's ([`SessionTree::message_count`]) and the stored system messages it replays
    /// ([`super::system_message_count`]).
    pub fn agent_message_count(&self, leaf: Option<&str>) -> usize {
        self.message_count(leaf) + self.system_message_count(leaf)
    }

    /// The stored system messages of the agent's messages at `leaf` (default: the last
    /// entry), see [`super::system_message_count`].
    pub fn system_message_count(&self, leaf: Option<&str>) -> usize {
        let Some(leaf) = leaf.or(self.last_id()) else {
            return 0;
        };
        super::system_message_count(&self.path_where(leaf, EntryShape::may_be_system_part))
    }

    /// What the branch at `leaf` (default: the last entry) replays its prompt and tools to
    /// ([`super::SystemState::of_path`]).
    pub fn system_state(&self, leaf: Option<&str>) -> super::SystemState {
        let Some(leaf) = leaf.or(self.last_id()) else {
            return super::SystemState::default();
        };
        super::SystemState::of_path(&self.path_where(leaf, EntryShape::may_be_system_part))
    }

    fn context_with(
        &self,
        leaf: Option<&str>,
        proposed: Option<(&str, &str)>,
        source: Source<'_>,
    ) -> SessionContext {
        let mut ctx = SessionContext::default();
        let Some(leaf) = leaf.or(self.last_id()) else {
            return ctx;
        };
        let indices = self.path_indices(leaf);
        let path: Vec<&Entry> = indices.iter().map(|&i| &self.entries[i]).collect();
        ctx = self.settings_at(leaf);
        ctx.messages = match source {
            Source::Parsed(parsed) => {
                path_messages_with(&path, proposed, |k, e| match e.kind.as_str() {
                    "message" => parsed.get_mut(indices[k]).and_then(Option::take),
                    _ => entry_message(e),
                })
            }
            Source::Read { keep_turns } => {
                let start = keep_turns
                    .map(|n| super::images::window_start(path.iter().copied(), n))
                    .unwrap_or(0);
                path_messages(&path, proposed, start)
            }
        };
        ctx.usage_from = if proposed.is_some() {
            ctx.messages.len()
        } else {
            usage_from(&path)
        };
        ctx
    }
}

/// Where [`SessionTree::context_with`] takes a path's messages from.
enum Source<'a> {
    /// The messages loading parsed, by entry index (taken out); other entries read.
    Parsed(&'a mut [Option<Message>]),
    /// Read from the file; with `keep_turns`, the messages before the image window
    /// ([`super::images::window_start`]) without their large images' bytes.
    Read { keep_turns: Option<usize> },
}

/// Read from a path of [`Entry`]s here, so that [`super::context_edit`] stays a leaf the tree
/// imports.
impl ContextEdits {
    /// The edits of the `context_edit` entries on `path` (root first); `None` when the path
    /// has none (the common case costs one pass over the entries' kinds).
    pub fn on_path(path: &[&Entry]) -> Option<ContextEdits> {
        if !path.iter().any(|e| e.kind == "context_edit") {
            return None;
        }
        let mut edits = HashMap::new();
        for e in path.iter().filter(|e| e.kind == "context_edit") {
            let mut raw = e.raw();
            let Some(target) = raw["targetId"].as_str().map(str::to_string) else {
                continue;
            };
            let replacement = raw
                .as_object_mut()
                .and_then(|o| o.remove("replacement"))
                .unwrap_or(Value::Null);
            edits.insert(target, (e.id.to_string(), replacement));
        }
        Some(ContextEdits(edits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// [`EntryShape::kind_or_role_test`] answers as the per-entry calls it replaces do, for
    /// every kind, role, visibility and tool-hash bits a shape can hold and the names an
    /// extension asks for (known and unknown kinds and roles, tool results of a tool, of
    /// another tool, a prefix that is not `toolResult`).
    #[test]
    fn prepared_shape_tests_answer_as_the_per_entry_calls() {
        let names = [
            "custom",
            "message",
            "compaction",
            "toolResult",
            "assistant",
            "user",
            "future_kind",
            "mystery",
            "toolResult:todo",
            "toolResult:read",
            "toolResult:",
            "other:todo",
        ];
        let tools = [
            line::tool_hash("todo") & 0xffff,
            line::tool_hash("read") & 0xffff,
            0,
            1,
        ];
        let mut checked = 0;
        for kind in 0..16u32 {
            for role in 0..16u32 {
                for visible in 0..4u32 {
                    for &tool in &tools {
                        let s = EntryShape(kind | role << 4 | visible << 8 | (tool as u32) << 16);
                        for name in names {
                            let expected = match name.split_once(':') {
                                Some(("toolResult", t)) => s.may_be_tool(t),
                                _ => {
                                    s.may_be_kind(name)
                                        || (s.may_be_kind("message") && s.may_have_role(name))
                                }
                            };
                            assert_eq!(
                                EntryShape::kind_or_role_test(name)(s),
                                expected,
                                "{name} of {s:?}"
                            );
                            checked += usize::from(expected);
                        }
                    }
                }
            }
        }
        // Both answers occur.
        assert!(checked > 0 && checked < 16 * 16 * 4 * 4 * names.len());
    }

    fn tree(lines: Value) -> SessionTree {
        let mut v = lines.as_array().unwrap().clone();
        let header = v.remove(0);
        SessionTree::from_values(header, v, Vec::new())
    }

    /// Pi 1.6's `projectContextEntry`: an edit replaces the content of a user, assistant or
    /// tool-result message and of a custom message (a string: one text block, as Pi's
    /// `convertToLlm` makes it), a user's string kept a string; a `!` command and a branch
    /// summary keep theirs; `null` leaves any of them out.
    #[test]
    fn context_edits_replace_what_pi_1_6_replaces() {
        let t = tree(json!([
            {"type":"session","version":3,"id":"s"},
            {"type":"message","id":"a","parentId":null,"message":{"role":"user","content":"hi","timestamp":1}},
            {"type":"custom_message","id":"b","parentId":"a","customType":"c","content":"cm","display":true,"timestamp":"2026-01-01T00:00:00.000Z"},
            {"type":"message","id":"c","parentId":"b","message":{"role":"bashExecution","command":"ls","output":"a.txt","exitCode":0,"cancelled":false,"truncated":false,"timestamp":2}},
            {"type":"branch_summary","id":"d","parentId":"c","fromId":"a","summary":"B","timestamp":"2026-01-01T00:00:00.000Z"},
            {"type":"custom_message","id":"e","parentId":"d","customType":"c","content":"gone","display":true,"timestamp":"2026-01-01T00:00:00.000Z"},
            {"type":"context_edit","id":"f","parentId":"e","targetId":"a","replacement":{"content":"EDITED USER"}},
            {"type":"context_edit","id":"g","parentId":"f","targetId":"b","replacement":{"content":"EDITED CUSTOM"}},
            {"type":"context_edit","id":"h","parentId":"g","targetId":"c","replacement":{"content":"EDITED BASH"}},
            {"type":"context_edit","id":"i","parentId":"h","targetId":"d","replacement":{"content":"EDITED SUMMARY"}},
            {"type":"context_edit","id":"j","parentId":"i","targetId":"e","replacement":null}
        ]));
        let contents: Vec<Value> = path_messages(&t.path("j"), None, 0)
            .iter()
            .map(|m| serde_json::to_value(m).unwrap()["content"].clone())
            .collect();
        assert_eq!(
            contents,
            [
                json!("EDITED USER"),
                json!([{"type": "text", "text": "EDITED CUSTOM"}]),
                json!([{"type": "text", "text": "Ran `ls`\n```\na.txt\n```"}]),
                json!([{"type": "text", "text": format!("{BRANCH_SUMMARY_PREFIX}B{BRANCH_SUMMARY_SUFFIX}")}]),
            ]
        );
    }

    /// A question asked once per distinct shape ([`SessionTree::shape_test`]) keeps exactly
    /// the entries it keeps asked of each entry, in `entries_where`, `path_where` and the
    /// walks built on `ancestors_where`: questions keeping no shape, one, a few, more than
    /// [`FEW_SHAPES`] (asked per entry then) and every shape, on a tree of many shapes and on
    /// one whose shapes are not all known (asked per entry).
    #[test]
    fn a_question_asked_per_shape_keeps_what_it_keeps_per_entry() {
        let mut lines = vec![json!({"type":"session","version":3,"id":"s"})];
        let mut parent: Option<String> = None;
        let mut push = |v: Value| {
            let id = format!("e{}", lines.len());
            let mut v = v;
            v["id"] = json!(id);
            v["parentId"] = json!(parent);
            lines.push(v);
            parent = Some(id);
        };
        for n in 0..30 {
            let tool = ["read", "bash", "todo", "grep", "edit", "write"][n % 6];
            push(
                json!({"type":"message","message":{"role":"assistant","content":[{"type":"toolCall","id":format!("c{n}"),"name":tool,"arguments":{}}],"api":"x","provider":"p","model":"m","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"toolUse","timestamp":2}}),
            );
            push(
                json!({"type":"message","message":{"role":"toolResult","toolCallId":format!("c{n}"),"toolName":tool,"content":[{"type":"text","text":"ok"}],"isError":false,"timestamp":3}}),
            );
            match n % 5 {
                0 => push(json!({"type":"custom","customType":"k"})),
                1 => push(json!({"type":"label","targetId":"e1","label":"L"})),
                2 => push(
                    json!({"type":"message","message":{"role":"user","content":"u","timestamp":1}}),
                ),
                3 => push(
                    json!({"type":"usage","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}}),
                ),
                _ => push(json!({"type":"thinking_level_change","thinkingLevel":"low"})),
            }
        }
        let t = tree(Value::Array(lines));
        assert!(t.seen.all.len() > 2 * FEW_SHAPES, "{}", t.seen.all.len());
        let usage = |s: EntryShape| {
            (s.may_be_kind("message") && s.may_have_role("assistant"))
                || ["usage", "compaction", "branch_summary"]
                    .iter()
                    .any(|k| s.may_be_kind(k))
        };
        type Question = Box<dyn Fn(EntryShape) -> bool>;
        let questions: Vec<(&str, Question)> = vec![
            ("none", Box::new(|_| false)),
            ("all", Box::new(|_| true)),
            ("usage", Box::new(usage)),
            ("custom", Box::new(EntryShape::kind_or_role_test("custom"))),
            (
                "todo",
                Box::new(EntryShape::kind_or_role_test("toolResult:todo")),
            ),
            (
                "results",
                Box::new(EntryShape::kind_or_role_test("toolResult")),
            ),
            (
                "message",
                Box::new(EntryShape::kind_or_role_test("message")),
            ),
        ];
        let mut unknown = t.clone();
        unknown.shapes.pop();
        let leaf = t.last_id().unwrap().to_string();
        let mut few = 0;
        for (name, q) in &questions {
            let ids = |es: Vec<&Entry>| es.iter().map(|e| e.id.to_string()).collect::<Vec<_>>();
            let want: Vec<&Entry> = t
                .entries
                .iter()
                .zip(&t.shapes)
                .filter(|(_, s)| q(**s))
                .map(|(e, _)| e)
                .collect();
            if matches!(t.shape_test(q), ShapeTest::Among(..)) {
                few += 1;
            }
            assert_eq!(
                ids(t.entries_where(q).collect()),
                ids(want.clone()),
                "{name}"
            );
            assert_eq!(ids(t.path_where(&leaf, q)), ids(want.clone()), "{name}");
            let mut up: Vec<&Entry> = t.ancestors_where(&leaf, q).collect();
            up.reverse();
            assert_eq!(ids(up), ids(want.clone()), "{name}");
            assert!(matches!(unknown.shape_test(q), ShapeTest::Ask(_)), "{name}");
            // The entry without a known shape is kept whatever the question.
            let mut want_unknown = ids(want);
            if !want_unknown.contains(&leaf) {
                want_unknown.push(leaf.clone());
            }
            assert_eq!(ids(unknown.path_where(&leaf, q)), want_unknown, "{name}");
        }
        // Both ways are taken: the few kept shapes compared, and the question asked.
        assert!(few > 0 && few < questions.len(), "{few}");
        // No compaction or edit in this tree: the message count is the one-walk count, the
        // same as the whole path's, at every leaf (a branch off the middle too).
        let mut branched = t.clone();
        let mut v = json!({"type":"message","id":"b1","parentId":"e40","message":{"role":"user","content":"u","timestamp":1}});
        branched.push_entry(Entry::from_value(&v).unwrap());
        v["id"] = json!("b2");
        v["parentId"] = json!("b1");
        branched.push_entry(Entry::from_value(&v).unwrap());
        for tree in [&t, &branched, &unknown] {
            for leaf in tree.entries.iter().map(|e| e.id.as_str()) {
                let want = path_message_count(&tree.path(leaf));
                assert_eq!(tree.message_count(Some(leaf)), want, "{leaf}");
            }
        }
        assert!(t.visible_on_path(&leaf).is_some() && unknown.visible_on_path(&leaf).is_none());
        assert_eq!(
            branched.message_count(None),
            path_message_count(&branched.path("b2"))
        );
        assert!(branched.message_count(None) < t.message_count(None));
    }

    /// Every answer read through the entries' shapes ([`EntryShape`]) equals the answer read
    /// from every entry of the path, at every leaf of a tree with each kind of entry that
    /// changes them (and of a deferred load of it), and no shape says "certainly not" of an
    /// entry that is.
    #[test]
    fn answers_read_through_shapes_equal_those_read_from_every_entry() {
        let lines = json!([
            {"type":"session","version":3,"id":"s"},
            {"type":"model_change","id":"a","parentId":null,"provider":"p1","modelId":"m1"},
            {"type":"thinking_level_change","id":"b","parentId":"a","thinkingLevel":"high"},
            {"type":"message","id":"c","parentId":"b","message":{"role":"system","content":"","sections":{"prompt":"P"},"timestamp":1}},
            {"type":"message","id":"d","parentId":"c","message":{"role":"user","content":"hi","timestamp":1}},
            {"type":"message","id":"e","parentId":"d","message":{"role":"assistant","content":[{"type":"toolCall","id":"t1","name":"todo","arguments":{}}],"api":"x","provider":"p2","model":"m2","stopReason":"toolUse","timestamp":2}},
            {"type":"message","id":"f","parentId":"e","message":{"role":"toolResult","toolCallId":"t1","toolName":"todo","content":[{"type":"text","text":"ok"}],"isError":false,"timestamp":3}},
            {"type":"thinking_level_change","id":"g","parentId":"f"},
            {"type":"message","id":"h","parentId":"f","message":{"role":"assistant","content":[{"type":"text","text":"x"}],"api":"x","stopReason":"stop","timestamp":4}},
            {"type":"context_edit","id":"i","parentId":"h","targetId":"d","replacement":null},
            {"type":"label","id":"j","parentId":"i","targetId":"d","label":"L"},
            {"type":"session_info","id":"k","parentId":"j","name":"N"},
            {"type":"compaction","id":"l","parentId":"k","summary":"S","firstKeptEntryId":"h","systemMessage":{"role":"system","content":"","sections":{"prompt":"Q"}}},
            {"type":"message","id":"m","parentId":"l","message":{"role":"mystery","content":"?"}},
            {"type":"future_kind","id":"n","parentId":"m"},
            {"type":"message","id":"o","parentId":"n","message":{"role":"user","content":5}},
            {"type":"custom_message","id":"p","parentId":"e","customType":"c","content":"cm","display":true},
            {"type":"branch_summary","id":"q","parentId":"p","fromId":"e","summary":"B"},
            {"type":"model_change","id":"r","parentId":null,"provider":"p3"},
            {"type":"message","id":"u","parentId":"r","message":{"role":"user","content":"root two"}}
        ]);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.jsonl");
        let text: Vec<String> = lines
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.to_string())
            .collect();
        std::fs::write(&file, text.join("\n") + "\n").unwrap();
        let deferred = super::super::load_file(&file, false, true).unwrap().tree;
        let names = EntryKind::KNOWN.iter().chain(&ROLES).chain(&[
            "future_kind",
            "mystery",
            "todo",
            "read",
            "",
        ]);
        for t in [tree(lines.clone()), deferred] {
            assert_eq!(t.entries.len(), 19);
            for (e, s) in t.entries.iter().zip(&t.shapes) {
                for n in names.clone() {
                    assert!(!(e.kind == *n) || s.may_be_kind(n), "{e:?} {n}");
                    assert!(e.role() != Some(n) || s.may_have_role(n), "{e:?} {n}");
                    assert!(!e.tool_is(n) || s.may_be_tool(n), "{e:?} {n}");
                }
                if let Some(v) = s.visible() {
                    assert_eq!(v, e.is_visible(), "{e:?}");
                }
            }
            for leaf in t.entries.iter().map(|e| e.id.as_str()) {
                let path = t.path(leaf);
                assert_eq!(t.path_where(leaf, |_| true), path);
                assert_eq!(t.settings(Some(leaf)), path_settings(&path), "{leaf}");
                assert_eq!(
                    t.message_count(Some(leaf)),
                    path_message_count(&path),
                    "{leaf}"
                );
                assert_eq!(
                    t.system_message_count(Some(leaf)),
                    super::super::system_message_count(&path),
                    "{leaf}"
                );
                assert_eq!(
                    t.system_state(Some(leaf)),
                    super::super::SystemState::of_path(&path),
                    "{leaf}"
                );
            }
            assert_eq!(t.name().as_deref(), Some("N"));
            assert_eq!(t.labels().get("d").map(String::as_str), Some("L"));
        }
        // What the answers are on a few leaves (so the pairs above are not equal by being empty).
        let t = tree(lines);
        let s = t.settings(Some("h"));
        assert_eq!(
            (s.model, s.thinking_level.as_deref()),
            (Some(("p2".into(), "m2".into())), Some("high"))
        );
        assert_eq!(t.settings(Some("u")).model, None);
        assert_eq!(t.message_count(Some("h")), 4);
        assert_eq!(t.message_count(Some("k")), 3);
        assert_eq!(t.message_count(Some("q")), 4);
        assert_eq!(t.system_message_count(Some("h")), 1);
        assert_eq!(t.system_message_count(Some("o")), 1);
    }

    fn texts(ctx: &SessionContext) -> Vec<String> {
        ctx.messages
            .iter()
            .map(|m| match m {
                Message::User(u) => format!("user:{}", u.content.to_text()),
                Message::Assistant(a) => format!("assistant:{}", a.text()),
                Message::ToolResult(r) => format!("result:{}", r.tool_call_id),
                Message::System(s) => format!("system:{}", s.update_text()),
            })
            .collect()
    }

    #[test]
    fn types_and_roles_read_back_as_written_known_or_not() {
        let t = tree(json!([
            {"type":"session","version":3,"id":"s"},
            {"type":"message","id":"A","parentId":null,"message":{"role":"user","content":"a"}},
            {"type":"message","id":"B","parentId":"A","message":{"role":"mystery","content":"b"}},
            {"type":"message","id":"C","parentId":"B","message":{"content":"c"}},
            {"type":"future_kind","id":"D","parentId":"C"},
            {"type":"label","id":"E","parentId":"D","targetId":"A","label":"x"}
        ]));
        let got: Vec<(String, Option<&str>)> = t
            .entries
            .iter()
            .map(|e| (String::from(e.kind.clone()), e.role()))
            .collect();
        assert_eq!(
            got,
            [
                ("message".to_string(), Some("user")),
                ("message".to_string(), Some("mystery")),
                ("message".to_string(), None),
                ("future_kind".to_string(), None),
                ("label".to_string(), None),
            ]
        );
        let kinds: Vec<&str> = t.entries.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            ["message", "message", "message", "future_kind", "label"]
        );
        assert_eq!(t.entries[3].kind, "future_kind");
        assert_eq!(
            format!("{:?} {}", t.entries[4].kind, t.entries[4].kind),
            "\"label\" label"
        );
        assert_eq!(
            EntryKind::from("label"),
            EntryKind::from("label".to_string())
        );
        assert_ne!(EntryKind::from("label"), EntryKind::from("labels"));
        // What a long session's memory is mostly made of: one of these per entry.
        assert!(
            std::mem::size_of::<Entry>() <= 152,
            "Entry is {} bytes",
            std::mem::size_of::<Entry>()
        );
        // And one of these per assistant message (boxed).
        assert!(
            std::mem::size_of::<AssistantInfo>() <= 72,
            "AssistantInfo is {} bytes",
            std::mem::size_of::<AssistantInfo>()
        );
    }

    #[test]
    fn seed_branching_selects_a_path() {
        // A─B─C─D and B─E─F; selecting F gives A-B-E-F; C-D stay durable.
        let t = tree(json!([
            {"type":"session","version":3,"id":"s"},
            {"type":"message","id":"A","parentId":null,"message":{"role":"user","content":"a"}},
            {"type":"message","id":"B","parentId":"A","message":{"role":"assistant","content":[{"type":"text","text":"b"}],"stopReason":"stop","provider":"p1","model":"m1"}},
            {"type":"message","id":"C","parentId":"B","message":{"role":"user","content":"c"}},
            {"type":"message","id":"D","parentId":"C","message":{"role":"assistant","content":[{"type":"text","text":"d"}],"stopReason":"stop"}},
            {"type":"message","id":"E","parentId":"B","message":{"role":"user","content":"e"}},
            {"type":"message","id":"F","parentId":"E","message":{"role":"assistant","content":[{"type":"text","text":"f"}],"stopReason":"stop","provider":"p2","model":"m2"}}
        ]));
        let ids: Vec<&str> = t.path("F").iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["A", "B", "E", "F"]);
        assert_eq!(
            texts(&t.context(Some("F"))),
            ["user:a", "assistant:b", "user:e", "assistant:f"]
        );
        assert_eq!(
            texts(&t.context(Some("D"))),
            ["user:a", "assistant:b", "user:c", "assistant:d"]
        );
        assert_eq!(t.children(Some("B")), ["C", "E"]);
        assert_eq!(t.context(Some("F")).model, Some(("p2".into(), "m2".into())));
    }

    #[test]
    fn compaction_keeps_summary_then_kept_suffix_then_later_entries() {
        // durable A→B→C→D→E→K, K summarises A-C keeping D: context = K, D, E.
        let t = tree(json!([
            {"type":"session","version":3,"id":"s"},
            {"type":"message","id":"A","parentId":null,"message":{"role":"user","content":"a"}},
            {"type":"message","id":"B","parentId":"A","message":{"role":"assistant","content":[{"type":"text","text":"b"}],"stopReason":"stop"}},
            {"type":"message","id":"C","parentId":"B","message":{"role":"user","content":"c"}},
            {"type":"message","id":"D","parentId":"C","message":{"role":"assistant","content":[{"type":"text","text":"d"}],"stopReason":"stop"}},
            {"type":"message","id":"E","parentId":"D","message":{"role":"user","content":"e"}},
            {"type":"compaction","id":"K","parentId":"E","summary":"did a, b, c","firstKeptEntryId":"D","tokensBefore":1234},
            {"type":"custom","id":"X","parentId":"K","customType":"ext","data":{"n":1}},
            {"type":"custom_message","id":"Y","parentId":"X","customType":"ext","content":"notice","display":true},
            {"type":"message","id":"Z","parentId":"Y","message":{"role":"bashExecution","command":"ls","output":"a.txt","exitCode":2,"cancelled":false,"truncated":false,"timestamp":5}}
        ]));
        assert_eq!(
            texts(&t.context(None)),
            [
                format!("user:{COMPACTION_SUMMARY_PREFIX}did a, b, c{COMPACTION_SUMMARY_SUFFIX}"),
                "assistant:d".into(),
                "user:e".into(),
                "user:notice".into(),
                "user:Ran `ls`\n```\na.txt\n```\n\nCommand exited with code 2".into()
            ]
        );
        // Every raw entry remains recoverable.
        assert_eq!(t.entries.len(), 9);
    }

    #[test]
    fn v1_files_are_chained_and_v2_roles_renamed() {
        let t = tree(json!([
            {"type":"session","id":"old"},
            {"type":"message","message":{"role":"user","content":"one"}},
            {"type":"message","message":{"role":"hookMessage","customType":"x","content":"two","display":false}}
        ]));
        assert_eq!(
            t.entries[1].parent_id.as_deref(),
            Some(t.entries[0].id.as_str())
        );
        assert_eq!(texts(&t.context(None)), ["user:one", "user:two"]);
        assert_eq!(t.warnings, ["migrated a version 1 session in memory"]);
    }

    /// The root-to-`leaf` ids walked by id, as the tree was before parents were kept by index.
    fn path_by_id(t: &SessionTree, leaf: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut cur = t.get(leaf);
        while let Some(e) = cur {
            if out.iter().any(|id| *id == e.id) {
                break;
            }
            out.push(e.id.to_string());
            cur = e.parent_id.as_deref().and_then(|p| t.get(p));
        }
        out.reverse();
        out
    }

    #[test]
    fn paths_by_index_equal_paths_by_id() {
        // A child before its parent, a missing parent, a self-parent, a cycle, and a
        // duplicate id whose later entry has another parent.
        let mut t = tree(json!([
            {"type":"session","version":3,"id":"s"},
            {"type":"custom","id":"A","parentId":null},
            {"type":"custom","id":"C","parentId":"B"},
            {"type":"custom","id":"B","parentId":"A"},
            {"type":"custom","id":"D","parentId":"C"},
            {"type":"custom","id":"E","parentId":"gone"},
            {"type":"custom","id":"F","parentId":"F"},
            {"type":"custom","id":"G","parentId":"H"},
            {"type":"custom","id":"H","parentId":"G"},
            {"type":"custom","id":"I","parentId":"D"},
            {"type":"custom","id":"B","parentId":"E"},
            {"type":"custom","id":"J","parentId":"I"}
        ]));
        let check = |t: &SessionTree| {
            for e in &t.entries {
                let by_index: Vec<String> =
                    t.path(&e.id).iter().map(|e| e.id.to_string()).collect();
                assert_eq!(by_index, path_by_id(t, &e.id), "leaf {}", e.id);
                let mut up: Vec<String> = t.ancestors(&e.id).map(|e| e.id.to_string()).collect();
                up.reverse();
                // (`ancestors` stops at the entry count, not at the first repeat.)
                assert!(
                    up.ends_with(&by_index) || by_index.ends_with(&up),
                    "leaf {}",
                    e.id
                );
            }
        };
        check(&t);
        assert_eq!(path_by_id(&t, "J"), ["E", "B", "C", "D", "I", "J"]);
        t.set_parent(8, Some("A".into()));
        check(&t);
        assert_eq!(path_by_id(&t, "J"), ["A", "I", "J"]);
        assert!(t.push(json!({"type":"custom","id":"gone","parentId":"J"})));
        check(&t);
        assert_eq!(t.path("E").len(), 5);
    }

    #[test]
    fn labels_and_name() {
        let t = tree(json!([
            {"type":"session","version":3,"id":"s"},
            {"type":"message","id":"A","parentId":null,"message":{"role":"user","content":"a"}},
            {"type":"label","id":"L1","parentId":"A","targetId":"A","label":"checkpoint"},
            {"type":"session_info","id":"N","parentId":"L1","name":"Refactor"},
            {"type":"label","id":"L2","parentId":"N","targetId":"A"}
        ]));
        assert!(t.labels().is_empty());
        assert_eq!(t.name().as_deref(), Some("Refactor"));
    }

    /// Ids whose index keys collide (the same low 32 bits of their XXH3) are told apart by the
    /// entries' own ids: each is found, parents resolve to the right one, and a later entry
    /// with either id replaces that one only.
    #[test]
    fn ids_whose_index_keys_collide_are_told_apart() {
        let mut seen = HashMap::new();
        let (a, b) = (0u32..)
            .find_map(|n| {
                let id = format!("{n:08x}");
                seen.insert(id_hash(&id), id.clone())
                    .map(|other| (other, id))
            })
            .unwrap();
        assert_eq!(id_hash(&a), id_hash(&b));
        assert_ne!(a, b);
        let mut t = tree(json!([
            {"type":"session","version":3,"id":"s"},
            {"type":"message","id":a,"parentId":null,"message":{"role":"user","content":"a"}},
            {"type":"custom","id":"x","parentId":a},
            {"type":"message","id":b,"parentId":"x","message":{"role":"user","content":"b"}},
            {"type":"custom","id":"y","parentId":b},
            {"type":"custom","id":"z","parentId":a}
        ]));
        assert_eq!(t.get(&a).map(|e| e.parent_id.clone()), Some(None));
        assert_eq!(t.get(&b).and_then(|e| e.parent_id.as_deref()), Some("x"));
        let ids = |path: Vec<&Entry>| path.iter().map(|e| e.id.to_string()).collect::<Vec<_>>();
        let want = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(ids(t.path("y")), want(&[&a, "x", &b, "y"]));
        assert_eq!(path_by_id(&t, "y"), want(&[&a, "x", &b, "y"]));
        assert_eq!(ids(t.path("z")), want(&[&a, "z"]));
        // A later entry with the overflowed id replaces it, not the other.
        assert!(t.push(json!({"type":"label","id":b,"parentId":"z","targetId":"x","label":"l"})));
        assert!(t.push(json!({"type":"label","id":a,"parentId":null,"targetId":"x","label":"m"})));
        assert_eq!(t.entries.len(), 5);
        assert_eq!(t.get(&b).map(|e| e.kind.as_str()), Some("label"));
        assert_eq!(t.get(&a).map(|e| e.kind.as_str()), Some("label"));
        assert_eq!(ids(t.path(&b)), want(&[&a, "z", &b]));
        assert_eq!(path_by_id(&t, &b), want(&[&a, "z", &b]));
        assert_eq!(t.warnings.len(), 2, "{:?}", t.warnings);
    }
}
