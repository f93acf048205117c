//! Stored system messages (Pi 1.6 `docs/session-format.md` "SessionMessageEntry",
//! pi-ai `getCurrentSystemMessage` / `getCurrentTools` / `getToolStateChanges`).
//!
//! A `message` entry with `role: "system"` carries the prompt and the tool loadout: the first
//! request of a session stores one with every prompt section (`sections`, by name) and every
//! tool declaration (`toolsAdded`); later changes store patches: sections by name (`null`
//! removes one), `toolsRemoved` (`{name}`) then `toolsAdded` (a changed tool is in both).
//! Replaying a branch's system messages in order gives the current prompt and tools; a
//! `compaction` with `systemMessage` is the complete checkpoint at its boundary (system messages
//! among its kept entries are dropped in its favour).
//!
//! The harness's prompt is built afresh for every run, and a run that starts with another
//! prompt or tool set than the branch replays to stores the patch ([`SystemState::patch_to`]),
//! so Pi 1.6 resumes a file written here with the prompt and tools it was last run with. The
//! whole prompt is one section, [`PROMPT_SECTION`]. A request sends that prompt alone, unless
//! the model takes system messages mid-conversation (`compat.supportsMidConvoSystemMessages`):
//! then the branch's first system message leads and later ones go at their place
//! ([`path_system_layout`]), as Pi 1.6 sends them.

use serde_json::{json, Map, Value};

use super::tree::Entry;

/// The one section pi-lsp's prompt is stored as (its prompt is built as one text).
pub const PROMPT_SECTION: &str = "prompt";

/// What a branch's system messages replay to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SystemState {
    /// `content` of every system message, in order (Pi joins them with blank lines).
    pub content: Vec<String>,
    /// Sections by name, in first-set order (a JavaScript `Map`).
    pub sections: Map<String, Value>,
    /// Tool declarations (`{name, description, parameters, …}`) by name, in first-set order.
    pub tools: Map<String, Value>,
    /// Whether any system message (or checkpoint) was replayed.
    pub seen: bool,
}

fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The tools Pi 1.6 declares with `constrainedSampling: {type: "json_schema", strict:
/// "prefer"}` (`core/tools/{read,bash,edit,write}.js`; `grep`, `find`, `ls` and extension
/// tools have none).
const CONSTRAINED_SAMPLING_TOOLS: [&str; 4] = ["read", "bash", "edit", "write"];

/// A tool's declaration as Pi 1.6 stores it in `toolsAdded`: `{name, description,
/// parameters}`, then `constrainedSampling` for the tools Pi declares it on
/// ([`CONSTRAINED_SAMPLING_TOOLS`]).
fn declaration(t: &pi_ai::ToolSpec) -> Value {
    let mut d = json!({"name": t.name, "description": t.description, "parameters": t.parameters});
    if CONSTRAINED_SAMPLING_TOOLS.contains(&t.name.as_str()) {
        d["constrainedSampling"] = json!({"type": "json_schema", "strict": "prefer"});
    }
    d
}

impl SystemState {
    /// Applies one stored system message (`{role:"system", content, sections?, toolsAdded?,
    /// toolsRemoved?}`).
    pub fn apply(&mut self, m: &Value) {
        self.seen = true;
        let text = content_text(&m["content"]);
        if !text.is_empty() {
            self.content.push(text);
        }
        if let Some(sections) = m["sections"].as_object() {
            for (name, value) in sections {
                if value.is_null() {
                    self.sections.shift_remove(name);
                } else {
                    self.sections.insert(name.clone(), value.clone());
                }
            }
        }
        for t in m["toolsRemoved"].as_array().into_iter().flatten() {
            if let Some(n) = t["name"].as_str() {
                self.tools.shift_remove(n);
            }
        }
        for t in m["toolsAdded"].as_array().into_iter().flatten() {
            if let Some(n) = t["name"].as_str() {
                self.tools.insert(n.to_string(), t.clone());
            }
        }
    }

    /// The state the model context of `path` (root first) replays to: the last compaction's
    /// checkpoint (when it has one), then the system messages after it; without a compaction
    /// every system message on the path.
    pub fn of_path(path: &[&Entry]) -> SystemState {
        let mut state = SystemState::default();
        let start = match path.iter().rposition(|e| e.kind == "compaction") {
            Some(ci) => {
                if let Some(m) = path[ci].raw().get("systemMessage") {
                    state.apply(m);
                } else {
                    // An older compaction without a checkpoint: the system messages before it.
                    for e in path[..ci].iter().filter(|e| is_system(e)) {
                        state.apply(&e.raw()["message"]);
                    }
                }
                ci + 1
            }
            None => 0,
        };
        for e in path[start..].iter().filter(|e| is_system(e)) {
            state.apply(&e.raw()["message"]);
        }
        state
    }

    /// The state of a harness run: its prompt's `sections` (Pi 1.6's, by name, in order) when
    /// given and they render to `prompt` (pi-ai's `getSystemMessageText`), else `prompt` as the
    /// one section [`PROMPT_SECTION`]; `tools` as declarations.
    pub fn of_run(
        prompt: &str,
        prompt_sections: Option<&[(String, String)]>,
        tools: &[pi_ai::ToolSpec],
    ) -> SystemState {
        let mut sections = Map::new();
        match prompt_sections.filter(|s| crate::prompt::render_sections(s) == prompt) {
            Some(named) => {
                for (name, text) in named {
                    sections.insert(name.clone(), json!(text));
                }
            }
            None => {
                sections.insert(PROMPT_SECTION.into(), json!(prompt));
            }
        }
        SystemState {
            content: Vec::new(),
            sections,
            tools: tools
                .iter()
                .map(|t| (t.name.clone(), declaration(t)))
                .collect(),
            seen: true,
        }
    }

    /// The system message that takes `self` to `want` (Pi's `getToolStateChanges` for tools,
    /// sections by name, `null` for a removed one), stamped `timestamp` (ms); `None` when
    /// nothing differs. With nothing replayed yet it is the complete message.
    pub fn patch_to(&self, want: &SystemState, timestamp: i64) -> Option<Value> {
        let mut sections = Map::new();
        for name in self.sections.keys() {
            if !want.sections.contains_key(name) {
                sections.insert(name.clone(), Value::Null);
            }
        }
        for (name, value) in &want.sections {
            if self.sections.get(name) != Some(value) {
                sections.insert(name.clone(), value.clone());
            }
        }
        let added: Vec<Value> = want
            .tools
            .iter()
            .filter(|(n, t)| self.tools.get(*n) != Some(t))
            .map(|(_, t)| t.clone())
            .collect();
        let removed: Vec<Value> = self
            .tools
            .iter()
            .filter(|(n, t)| want.tools.get(*n) != Some(t))
            .map(|(n, _)| json!({"name": n}))
            .collect();
        if self.seen && sections.is_empty() && added.is_empty() && removed.is_empty() {
            return None;
        }
        let mut m = Map::new();
        m.insert("role".into(), json!("system"));
        m.insert("content".into(), json!(""));
        m.insert("sections".into(), Value::Object(sections));
        // Pi 1.6's key order: the prompt's message, then the loop's tool declarations.
        m.insert("timestamp".into(), json!(timestamp));
        // Pi 1.6's `withToolChanges`: no key for no tools (a first message with none too).
        if !added.is_empty() {
            m.insert("toolsAdded".into(), Value::Array(added));
        }
        if !removed.is_empty() {
            m.insert("toolsRemoved".into(), Value::Array(removed));
        }
        Some(Value::Object(m))
    }

    /// Whether this state's sections are those of `prompt` in any order (a patch keeps a
    /// section where it was first set, so a replayed order can differ from a fresh build's):
    /// every section's text found in `prompt`, and, put in the order found there, their texts
    /// joined by blank lines are `prompt`.
    pub fn renders(&self, prompt: &str) -> bool {
        let mut found = Vec::new();
        for text in self.sections.values() {
            match text.as_str().and_then(|t| prompt.find(t).map(|at| (at, t))) {
                Some(f) => found.push(f),
                None => return false,
            }
        }
        found.sort_unstable();
        let texts: Vec<&str> = found.into_iter().map(|(_, t)| t).collect();
        texts.join("\n\n") == prompt
    }

    /// The system prompt this state renders (pi-ai 1.6's `getSystemMessageText` of
    /// `getCurrentSystemMessage`): the content, then every section in its stored order (a
    /// section a later patch added comes after those set before it), the non-empty parts
    /// joined by blank lines. What Pi 1.6 sends as the request's system prompt for a
    /// session whose prompt it stored.
    pub fn render(&self) -> String {
        let content = self.content.join("\n\n");
        std::iter::once(content.as_str())
            .chain(self.sections.values().filter_map(Value::as_str))
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    /// Pi 1.6's `estimateTokens` of this state's [`SystemState::checkpoint`]
    /// (`core/compaction/compaction.js`, role `system`): `ceil(chars / 4)` of its content, its
    /// sections' texts and its `toolsAdded` as JSON, in UTF-16 units as JavaScript counts.
    /// 0 when nothing was replayed (no checkpoint is stored then).
    pub fn checkpoint_tokens(&self) -> u64 {
        if !self.seen {
            return 0;
        }
        let js_len = |s: &str| s.encode_utf16().count() as u64;
        let content = js_len(&self.content.join("\n\n"));
        let sections: u64 = self
            .sections
            .values()
            .filter_map(Value::as_str)
            .map(js_len)
            .sum();
        let tools = if self.tools.is_empty() {
            0
        } else {
            let all: Vec<&Value> = self.tools.values().collect();
            js_len(&serde_json::to_string(&all).unwrap_or_default())
        };
        (content + sections + tools).div_ceil(4)
    }

    /// The complete system message of this state (a compaction's `systemMessage`); with no
    /// tools it names none (no `toolsAdded`: Pi 1.6's merged message).
    pub fn checkpoint(&self, timestamp: i64) -> Value {
        let mut m = json!({
            "role": "system",
            "content": self.content.join("\n\n"),
            "sections": Value::Object(self.sections.clone()),
            "toolsAdded": self.tools.values().cloned().collect::<Vec<_>>(),
            "timestamp": timestamp,
        });
        if self.tools.is_empty() {
            if let Some(o) = m.as_object_mut() {
                o.remove("toolsAdded");
            }
        }
        m
    }
}

/// The system messages of a branch as a request to a model whose `compat` has
/// `supportsMidConvoSystemMessages` carries them (Pi 1.6 pi-ai `resolveTranscript` keeping
/// the transcript its agent replays): the leading one as the request's system prompt, the
/// later ones at their place among the context's messages ([`path_system_layout`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SystemLayout {
    /// The text of the system message the context starts with (after a compaction its
    /// checkpoint), as pi-ai's `getSystemMessageText` renders it: its content, then every
    /// section's text, joined by blank lines; `None` when the context does not start with one.
    pub leading: Option<String>,
    /// Every later system message with the number of context messages before it.
    pub later: Vec<(usize, pi_ai::SystemMessage)>,
}

/// A stored system message (`{content, sections?}`) as pi-ai's [`pi_ai::SystemMessage`]:
/// content blocks' text joined with `\n`, sections in stored order (`null` removes one; a
/// non-string value is taken as its JSON text).
pub fn to_system_message(m: &Value) -> pi_ai::SystemMessage {
    pi_ai::SystemMessage {
        content: content_text(&m["content"]),
        sections: m["sections"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, v)| {
                let text = match v {
                    Value::Null => None,
                    Value::String(s) => Some(s.clone()),
                    other => Some(other.to_string()),
                };
                (name.clone(), text)
            })
            .collect(),
    }
}

/// The whole prompt a system message gives as the leading one (pi-ai
/// `getSystemMessageText`): its content, then each set section's text, non-empty parts
/// joined by blank lines.
pub fn leading_text(m: &pi_ai::SystemMessage) -> String {
    std::iter::once(m.content.as_str())
        .chain(m.sections.iter().filter_map(|(_, v)| v.as_deref()))
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Where the stored system messages of a root-to-leaf `path` go in a request to a model that
/// takes them mid-conversation (Pi 1.6: its agent's transcript holds them among the messages,
/// and pi-ai `resolveTranscript` keeps them there for such a model). With a compaction, its
/// checkpoint (`systemMessage`) leads and the system messages after it follow at their place
/// (those among its kept entries are left out, as the checkpoint stands for them); without
/// one, the first system message leads when no context message comes before it and every
/// other follows at its place. A place is the number of context messages
/// ([`super::tree::path_message_count`]'s) before the system message.
pub fn path_system_layout(path: &[&Entry]) -> super::SystemLayout {
    let plan = super::tree::path_plan(path, None);
    let edits = super::ContextEdits::on_path(path);
    let omitted = |e: &Entry| edits.as_ref().is_some_and(|x| x.omits(&e.id));
    let mut layout = SystemLayout::default();
    let mut count = 0;
    if plan.summary.is_some() {
        let ci = plan.ranges[0].end;
        layout.leading = path[ci]
            .raw()
            .get("systemMessage")
            .map(|m| leading_text(&to_system_message(m)));
        count = 1;
        count += plan.ranges[0]
            .clone()
            .filter(|&k| path[k].is_visible() && !omitted(path[k]))
            .count();
    }
    let rest = if plan.summary.is_some() {
        plan.ranges[1].clone()
    } else {
        plan.ranges[0].clone()
    };
    for k in rest {
        let e = path[k];
        if is_system(e) {
            let m = to_system_message(&e.raw()["message"]);
            if count == 0 && layout.leading.is_none() && layout.later.is_empty() {
                layout.leading = Some(leading_text(&m));
            } else {
                layout.later.push((count, m));
            }
        } else if e.is_visible() && !omitted(e) {
            count += 1;
        }
    }
    layout
}

/// Whether sessions are written with Pi 1.6's entries and fields: setting `sessions.format`
/// `"pi-1.6"` (the default) or `"pi-0.73"` (files as Pi 0.73.1 wrote them: no stored system
/// messages, no `durationMs` / `thinkingLevel`, no compaction checkpoint; for users who open
/// the files in Pi 0.73.1, which fails on them, see docs/settings.md). Any other value warns
/// and keeps the default.
pub fn writes_pi16(merged: &Map<String, Value>) -> bool {
    match merged.get("sessions").and_then(|s| s.get("format")) {
        None => true,
        Some(v) if v == "pi-1.6" => true,
        Some(v) if v == "pi-0.73" => false,
        Some(v) => {
            tracing::warn!("settings: sessions.format must be \"pi-1.6\" or \"pi-0.73\", not {v}");
            true
        }
    }
}

/// Whether `e` is a `message` entry holding a system message.
pub fn is_system(e: &Entry) -> bool {
    e.kind == "message" && e.role() == Some("system")
}

/// How many system messages the agent's messages at the end of `path` hold, as Pi 1.6 counts
/// them (its `messageCount` counts every agent message, system ones included): with a
/// compaction, its checkpoint (when it has one) and the system messages after it; else every
/// system message on the path.
pub fn system_message_count(path: &[&Entry]) -> usize {
    match path.iter().rposition(|e| e.kind == "compaction") {
        Some(ci) => {
            usize::from(path[ci].raw().get("systemMessage").is_some())
                + path[ci + 1..].iter().filter(|e| is_system(e)).count()
        }
        None => path.iter().filter(|e| is_system(e)).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (`read` and `bash` are declared with Pi 1.6's `constrainedSampling`, `grep` without.)
    #[test]
    fn patches_replay_to_the_wanted_state_as_pi_replays_them() {
        let spec = |n: &str, d: &str| pi_ai::ToolSpec {
            constrained_sampling: None,
            name: n.into(),
            description: d.into(),
            parameters: json!({"type": "object"}),
        };
        let first = SystemState::of_run("P1", None, &[spec("read", "r"), spec("bash", "b")]);
        let full = SystemState::default().patch_to(&first, 7).unwrap();
        assert_eq!(
            full,
            json!({"role":"system","content":"","sections":{"prompt":"P1"},"toolsAdded":[
                {"name":"read","description":"r","parameters":{"type":"object"},"constrainedSampling":{"type":"json_schema","strict":"prefer"}},
                {"name":"bash","description":"b","parameters":{"type":"object"},"constrainedSampling":{"type":"json_schema","strict":"prefer"}}],"timestamp":7})
        );
        let mut replayed = SystemState::default();
        replayed.apply(&full);
        assert_eq!(replayed, first);
        assert_eq!(replayed.patch_to(&first, 8), None);
        // Another prompt, bash changed, read removed, grep added.
        let second = SystemState::of_run("P2", None, &[spec("bash", "b2"), spec("grep", "g")]);
        let patch = replayed.patch_to(&second, 9).unwrap();
        assert_eq!(
            patch,
            json!({"role":"system","content":"","sections":{"prompt":"P2"},"toolsAdded":[
                {"name":"bash","description":"b2","parameters":{"type":"object"},"constrainedSampling":{"type":"json_schema","strict":"prefer"}},
                {"name":"grep","description":"g","parameters":{"type":"object"}}],
                "toolsRemoved":[{"name":"read"},{"name":"bash"}],"timestamp":9})
        );
        replayed.apply(&patch);
        assert_eq!(replayed.patch_to(&second, 10), None);
        // Pi's own sections are removed by name when ours replace them.
        let mut pi = SystemState::default();
        pi.apply(&json!({"role":"system","content":"","sections":{"preamble":"x","cwd":"y"},"toolsAdded":[]}));
        assert_eq!(
            pi.patch_to(&SystemState::of_run("P", None, &[]), 1)
                .unwrap()["sections"],
            json!({"preamble": null, "cwd": null, "prompt": "P"})
        );
    }

    #[test]
    fn a_patched_state_renders_its_sections_in_stored_order_as_pi_16() {
        // A session stored with sections a, c; a run whose prompt has a, b, c (b new, c
        // changed): Pi 1.6 keeps a and c where they were and puts b after them.
        let section = |name: &str, text: &str| (name.to_string(), text.to_string());
        let first = [section("a", "A"), section("c", "C")];
        let mut have = SystemState::default();
        have.apply(
            &SystemState::default()
                .patch_to(&SystemState::of_run("A\n\nC", Some(&first), &[]), 1)
                .unwrap(),
        );
        let now = [section("a", "A"), section("b", "B"), section("c", "C2")];
        let want = SystemState::of_run("A\n\nB\n\nC2", Some(&now), &[]);
        let mut after = have.clone();
        after.apply(&have.patch_to(&want, 2).unwrap());
        assert_eq!(after.render(), "A\n\nC2\n\nB");
        assert!(after.renders("A\n\nB\n\nC2"));
        assert_eq!(want.render(), "A\n\nB\n\nC2");
    }

    #[test]
    fn a_run_without_tools_stores_and_checkpoints_no_tool_key_as_pi_16() {
        // Pi 1.6's `withToolChanges` / `getCurrentSystemMessage`: `toolsAdded` only when
        // there are tools (`--no-tools`, plan mode with none).
        let want = SystemState::of_run("P", None, &[]);
        let first = SystemState::default().patch_to(&want, 7).unwrap();
        assert_eq!(
            first,
            json!({"role":"system","content":"","sections":{"prompt":"P"},"timestamp":7})
        );
        let mut replayed = SystemState::default();
        replayed.apply(&first);
        assert_eq!(
            replayed.checkpoint(9),
            json!({"role":"system","content":"","sections":{"prompt":"P"},"timestamp":9})
        );
    }

    #[test]
    fn a_replayed_state_renders_the_prompt_in_any_section_order() {
        let mut state = SystemState::default();
        state.apply(&json!({"role":"system","content":"","sections":{"preamble":"P","rules":"<rules>\nR\n</rules>"}}));
        state.apply(&json!({"role":"system","content":"","sections":{"tools":"<tools>\nT\n</tools>","rules":"<rules>\nR2\n</rules>"}}));
        // Replayed order: preamble, rules, tools; the prompt's: preamble, tools, rules.
        assert!(state.renders("P\n\n<tools>\nT\n</tools>\n\n<rules>\nR2\n</rules>"));
        assert!(!state.renders("P\n\n<tools>\nT\n</tools>\n\n<rules>\nR\n</rules>"));
        assert!(!state
            .renders("P\n\n<tools>\nT\n</tools>\n\n<rules>\nR2\n</rules>\n\n<cwd>\n/\n</cwd>"));
    }
}
