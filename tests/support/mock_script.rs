//! The JSON script of the `mock-model` binary (`tests/bin/mock_model.rs`): what the Neovim
//! specs, the code-server e2e and the benchmarks tell the one loopback model
//! ([`crate::mock_model`]) to answer.
//!
//! ```json
//! {
//!   "steps":   [STEP, …],
//!   "rules":   [{"when": {"firstWord": "edit"}, "steps": [STEP, …]}, …],
//!   "default": STEP,
//!   "usage":   {"input": 1000, "output": 20},
//!   "responseModel": "mock-1"
//! }
//! ```
//!
//! A request is answered by the first rule whose `when` holds for the prompt (the last text
//! block of the last user message that is not only tool results): `firstWord` (the prompt's
//! first word, case-insensitive), `startsWith`, `contains` (all given must hold). A rule
//! answers with `steps[k]`, `k` the assistant messages after that user message (its tool
//! rounds so far); past its end, with its last step. Rules keep no state: the conversation
//! the request carries decides. A request no rule takes gets the next of `steps` (in
//! order, counted over those requests); past the end, `default` (else the text
//! "(script end)").
//!
//! STEP: `{"thinking"?, "text"?, "toolCalls"?: [{"id"?, "name", "arguments"?}], "chunk"?,
//! "words"?, "chunkDelayMs"?, "keepRate"?, "delayMs"?, "firstDelayMs"?, "hang"?, "repeat"?}`
//! ([`Answer`] says what each does; `repeat: n` stands for n copies of the step), or an error
//! answer `{"status", "error"? | "body"?, "contentType"?}` (`error`: the message of an
//! OpenAI-style `{"error": {"message"}}` body; `body`: sent verbatim). Unknown keys are
//! refused, naming the key.
//!
//! `usage`: the tokens each answer reports: `input` (default 100) or `"inputFromBody": true`
//! (the request body's length / 4), and `output` (default 10).

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::mock_model::{Answer, AnswerCall, MockModel, Responder, Step};

/// The whole script.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Script {
    #[serde(default)]
    pub steps: Vec<StepSpec>,
    #[serde(default)]
    pub rules: Vec<Rule>,
    pub default: Option<StepSpec>,
    pub usage: Option<UsageSpec>,
    pub response_model: Option<String>,
}

/// Answers the requests whose prompt `when` describes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rule {
    pub when: When,
    pub steps: Vec<StepSpec>,
}

/// Conditions on the prompt; every one given must hold.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct When {
    pub first_word: Option<String>,
    pub starts_with: Option<String>,
    pub contains: Option<String>,
}

/// The tokens each answer reports.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UsageSpec {
    pub input: Option<u64>,
    #[serde(default)]
    pub input_from_body: bool,
    pub output: Option<u64>,
}

/// One step as the script writes it (see the module's doc).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StepSpec {
    pub thinking: Option<String>,
    pub text: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<CallSpec>,
    #[serde(default)]
    pub chunk: usize,
    #[serde(default)]
    pub words: bool,
    #[serde(default)]
    pub chunk_delay_ms: u64,
    #[serde(default)]
    pub keep_rate: bool,
    #[serde(default)]
    pub delay_ms: u64,
    #[serde(default)]
    pub first_delay_ms: u64,
    #[serde(default)]
    pub hang: bool,
    pub status: Option<u16>,
    pub error: Option<String>,
    pub body: Option<String>,
    pub content_type: Option<String>,
    pub repeat: Option<usize>,
}

/// A tool call of a step.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CallSpec {
    pub id: Option<String>,
    pub name: String,
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    json!({})
}

impl StepSpec {
    /// The engine's step: [`Step::Raw`] for an error answer, else [`Step::Answer`].
    pub fn step(&self) -> Step {
        if let Some(status) = self.status {
            let body = match (&self.body, &self.error) {
                (Some(b), _) => b.clone(),
                (None, e) => json!({"error": {"message": e.as_deref().unwrap_or("mock failure")}})
                    .to_string(),
            };
            return Step::Raw {
                status,
                content_type: self
                    .content_type
                    .clone()
                    .unwrap_or_else(|| "application/json".into()),
                body,
            };
        }
        Step::Answer(Answer {
            thinking: self.thinking.clone().filter(|t| !t.is_empty()),
            text: self.text.clone().filter(|t| !t.is_empty()),
            tool_calls: self
                .tool_calls
                .iter()
                .map(|c| AnswerCall {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect(),
            chunk: self.chunk,
            words: self.words,
            chunk_delay: Duration::from_millis(self.chunk_delay_ms),
            keep_rate: self.keep_rate,
            delay: Duration::from_millis(self.delay_ms),
            first_delay: Duration::from_millis(self.first_delay_ms),
            hang: self.hang,
        })
    }
}

/// `steps` with each `repeat: n` written out n times.
fn expand(steps: &[StepSpec]) -> Vec<Step> {
    steps
        .iter()
        .flat_map(|s| std::iter::repeat_n(s.step(), s.repeat.unwrap_or(1)))
        .collect()
}

impl Script {
    /// Parses a script, naming what is wrong (the key and its place).
    pub fn parse(text: &str) -> Result<Script, String> {
        let script: Script = serde_json::from_str(text).map_err(|e| e.to_string())?;
        script.check()?;
        Ok(script)
    }

    /// Refuses what the engine cannot do: a rule without steps, an error step with a delay
    /// or deltas, a step with `repeat: 0`.
    pub fn check(&self) -> Result<(), String> {
        let all = self
            .steps
            .iter()
            .map(|s| ("steps", s))
            .chain(self.default.iter().map(|s| ("default", s)))
            .chain(
                self.rules
                    .iter()
                    .flat_map(|r| r.steps.iter().map(|s| ("rules[].steps", s))),
            );
        for (place, s) in all {
            if s.status.is_some()
                && (s.text.is_some()
                    || s.thinking.is_some()
                    || !s.tool_calls.is_empty()
                    || s.delay_ms > 0)
            {
                return Err(format!(
                    "{place}: a step with `status` answers with its body only (no text, thinking, toolCalls or delayMs)"
                ));
            }
            if s.status.is_none() && (s.error.is_some() || s.body.is_some()) {
                return Err(format!("{place}: `error` and `body` need a `status`"));
            }
            if s.repeat == Some(0) {
                return Err(format!("{place}: `repeat` must be at least 1"));
            }
        }
        if let Some(i) = self.rules.iter().position(|r| r.steps.is_empty()) {
            return Err(format!("rules[{i}]: a rule needs at least one step"));
        }
        Ok(())
    }

    /// Starts the one engine on this script (no pairing check on drop: the binary reports
    /// violations on stderr and answers them with HTTP 400, as a provider would).
    pub async fn start(&self) -> MockModel {
        let mock = MockModel::start_unchecked(expand(&self.steps)).await;
        mock.set_fallback(
            self.default
                .as_ref()
                .map(StepSpec::step)
                .unwrap_or_else(|| Step::text("(script end)")),
        );
        if let Some(u) = &self.usage {
            mock.set_usage(u.input.unwrap_or(100), u.output.unwrap_or(10));
            mock.set_usage_from_body(u.input_from_body);
        }
        mock.set_response_model(self.response_model.as_deref());
        if !self.rules.is_empty() {
            mock.set_responder(self.responder());
        }
        mock
    }

    /// The rules as the engine's responder.
    pub fn responder(&self) -> Responder {
        let rules: Vec<(When, Vec<Step>)> = self
            .rules
            .iter()
            .map(|r| (r.when.clone(), expand(&r.steps)))
            .collect();
        std::sync::Arc::new(move |body: &Value| {
            let (prompt, round) = prompt_and_round(body)?;
            let (_, steps) = rules.iter().find(|(w, _)| w.holds(&prompt))?;
            steps.get(round).or(steps.last()).cloned()
        })
    }
}

impl When {
    /// Whether every condition given holds for `prompt`.
    pub fn holds(&self, prompt: &str) -> bool {
        let first = prompt.split_whitespace().next().unwrap_or("");
        self.first_word
            .as_ref()
            .is_none_or(|w| w.eq_ignore_ascii_case(first))
            && self
                .starts_with
                .as_ref()
                .is_none_or(|s| prompt.starts_with(s.as_str()))
            && self
                .contains
                .as_ref()
                .is_none_or(|s| prompt.contains(s.as_str()))
    }
}

/// The prompt of a request (the last text block of the last user message that is not only
/// tool results; after an abort the server puts a note block before the user's text) and
/// the assistant messages after it. Both wire formats.
pub fn prompt_and_round(body: &Value) -> Option<(String, usize)> {
    let msgs = body["messages"].as_array()?;
    let at = msgs.iter().rposition(|m| {
        m["role"] == "user"
            && match &m["content"] {
                Value::String(_) => true,
                Value::Array(blocks) => {
                    blocks.iter().any(|b| b["type"] == "text")
                        && !blocks.iter().any(|b| b["type"] == "tool_result")
                }
                _ => false,
            }
    })?;
    let prompt = match &msgs[at]["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .rev()
            .find(|b| b["type"] == "text")
            .and_then(|b| b["text"].as_str())
            .unwrap_or("")
            .to_string(),
        _ => String::new(),
    };
    let round = msgs[at + 1..]
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    Some((prompt, round))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_choose_by_prompt_and_round() {
        let script = Script::parse(
            r#"{"rules": [{"when": {"firstWord": "edit"}, "steps": [
                 {"toolCalls": [{"name": "edit", "arguments": {"path": "a"}}]}, {"text": "Edited."}]},
               {"when": {"startsWith": "rounds"}, "steps": [{"toolCalls": [{"name": "read"}], "repeat": 2}, {"text": "done"}]}]}"#,
        )
        .unwrap();
        let r = script.responder();
        let text = |s: Option<Step>| match s {
            Some(Step::Answer(a)) => a
                .text
                .unwrap_or_else(|| format!("call {}", a.tool_calls[0].name)),
            other => format!("{other:?}"),
        };
        let user = |t: &str| json!({"role": "user", "content": [{"type": "text", "text": "(note)"}, {"type": "text", "text": t}]});
        let asst = json!({"role": "assistant", "tool_calls": [{"id": "c"}]});
        let tool = json!({"role": "tool", "tool_call_id": "c", "content": "x"});
        assert_eq!(
            text(r(&json!({"messages": [user("Edit it")]}))),
            "call edit"
        );
        assert_eq!(
            text(r(&json!({"messages": [user("edit it"), asst, tool]}))),
            "Edited."
        );
        let mut msgs = vec![user("rounds please")];
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(text(r(&json!({ "messages": msgs }))));
            msgs.push(asst.clone());
            msgs.push(tool.clone());
        }
        assert_eq!(got, ["call read", "call read", "done", "done"]);
        assert!(r(&json!({"messages": [user("hello")]})).is_none());
    }

    #[test]
    fn bad_scripts_are_refused_by_name() {
        assert_eq!(
            Script::parse(r#"{"steps": [{"txt": "x"}]}"#)
                .unwrap_err()
                .split(" at ")
                .next()
                .unwrap(),
            "unknown field `txt`, expected one of `thinking`, `text`, `toolCalls`, `chunk`, `words`, `chunkDelayMs`, `keepRate`, `delayMs`, `firstDelayMs`, `hang`, `status`, `error`, `body`, `contentType`, `repeat`"
        );
        assert_eq!(
            Script::parse(r#"{"steps": [{"status": 500, "text": "x"}]}"#).unwrap_err(),
            "steps: a step with `status` answers with its body only (no text, thinking, toolCalls or delayMs)"
        );
        assert_eq!(
            Script::parse(r#"{"rules": [{"when": {}, "steps": []}]}"#).unwrap_err(),
            "rules[0]: a rule needs at least one step"
        );
    }
}
