//! `agent/bash` and `agent/bash/abort`: a shell command the user runs in the workspace (Pi's
//! `!cmd` / `!!cmd`, RPC `bash` / `abort_bash`).
//!
//! The command runs through the same `bash` tool the model uses (process group, Pi's output
//! limits, spill file), outside any run. Its result is stored as a `bashExecution` message
//! (`excludeFromContext: true` for `!!`): at once when the session is idle; while a run is
//! active, after it (Pi defers it so a tool call and its result stay adjacent) — queued for
//! the next prompt when it enters the context, written when the run ends otherwise.

use std::sync::{Arc, Mutex};

use pi_core::agent::{Tool, ToolContext};
use serde_json::{json, Value};
use tower_lsp_server::jsonrpc::Result;

use super::invalid;
use crate::protocol::{
    agent_error, codes, parse_params, BashAbortResult, BashParams, BashResult, DeliverAs,
    SessionParams,
};
use crate::server::{lock, Backend, Session};

/// Splits the bash tool's text into output and the trailing status line it adds.
fn split_status(text: &str) -> (String, Option<String>) {
    const ENDINGS: [&str; 5] = [
        "Command exited with code ",
        "Command aborted",
        "Command was killed by signal ",
        "Command timed out after ",
        "Command failed",
    ];
    match text.rsplit_once("\n\n") {
        Some((body, last)) if ENDINGS.iter().any(|e| last.starts_with(e)) => {
            (body.to_string(), Some(last.to_string()))
        }
        _ => (text.to_string(), None),
    }
}

impl Backend {
    /// `agent/bash {sessionId, command, excludeFromContext?}` → Pi's `BashResult`, when the
    /// command has ended.
    pub(crate) async fn agent_bash(&self, params: Value) -> Result<BashResult> {
        let p: BashParams = parse_params(params)?;
        if p.command.trim().is_empty() {
            return Err(invalid("command", "must not be empty"));
        }
        let session = self.session(&p.session_id)?;
        let tracker = lock(&session).tracker.clone();
        let Some(cancel) = tracker.start_bash() else {
            return Err(agent_error(
                codes::BASH_RUNNING,
                format!(
                    "a command started with agent/bash is still running in session {}; agent/bash/abort it first",
                    p.session_id
                ),
            ));
        };
        // The user's own command: outside the agent's sandbox (security issue: "user-run bash
        // excluded"), with the same output limits, process-group kill and key redaction.
        let root = self.state.root();
        let unsandboxed = pi_core::sandbox::SandboxSettings {
            mode: Some(pi_core::sandbox::SandboxMode::Off),
            ..Default::default()
        };
        let tool = pi_core::tools::BashTool::with_sandbox(
            root.clone(),
            None,
            pi_core::sandbox::Sandbox::new(&root, &unsandboxed),
            None,
        );
        let ctx = ToolContext {
            call_id: format!("user-bash-{}", uuid::Uuid::now_v7()),
            turn: 0,
            cancel: cancel.clone(),
            on_update: Arc::new(|_| {}),
            model_input: None,
        };
        // The command counts as running until its result is stored (or queued), so that
        // `agent/session/close` can wait for both; the guard ends it on every return path.
        let _running = EndBash(tracker);
        // The command runs in its own task, not in the task that polls every handler; a
        // cancelled request (`$/cancelRequest` drops this future) still kills it.
        let kill_on_drop = cancel.clone().drop_guard();
        let args = json!({"command": p.command});
        let outcome = match tokio::spawn(async move { tool.execute(ctx, args).await }).await {
            Ok(o) => o,
            Err(e) => Err(pi_core::agent::ToolError::new(format!(
                "the command's task failed: {e}"
            ))),
        };
        kill_on_drop.disarm();
        let (text, details) = match outcome {
            Ok(o) => (pi_ai::join_text(&o.content), o.details),
            Err(e) => (e.message, e.details),
        };
        let (output, status) = split_status(&text);
        let output = if output == "(no output)" {
            String::new()
        } else {
            output
        };
        let exit_code = match status.as_deref() {
            None => Some(0),
            Some(s) => s
                .strip_prefix("Command exited with code ")
                .and_then(|c| c.trim().parse().ok()),
        };
        let cancelled = cancel.is_cancelled();
        let full_output_path = details
            .as_ref()
            .and_then(|d| d["fullOutputPath"].as_str())
            .map(str::to_string);
        let mut raw = json!({
            "role": "bashExecution",
            "command": p.command,
            "output": output,
            "exitCode": exit_code,
            "cancelled": cancelled,
            "truncated": full_output_path.is_some(),
            "timestamp": pi_ai::types::now_millis(),
        });
        // Pi leaves `fullOutputPath` out when the output was not cut.
        if let Some(p) = &full_output_path {
            raw["fullOutputPath"] = json!(p);
        }
        if p.exclude_from_context {
            raw["excludeFromContext"] = json!(true);
        }
        let mut result = BashResult {
            output,
            exit_code,
            cancelled,
            truncated: full_output_path.is_some(),
            full_output_path,
            entry_id: None,
            queue_id: None,
        };
        let message = pi_core::session::convert_message(&raw);
        let fields = json!({ "message": raw });
        let streaming = lock(&session).agent().is_streaming();
        if !streaming {
            let s = lock(&session);
            if !s.agent().is_streaming() {
                result.entry_id = Some(super::queue::append_now(&s, "message", fields, message)?);
                return Ok(result);
            }
        }
        match message {
            // In the context: it goes with the next prompt and is stored as it is delivered.
            Some(m) => {
                let (queue_id, _) = self
                    .enqueue(
                        &session,
                        DeliverAs::NextTurn,
                        m,
                        Some(("message".into(), fields)),
                    )
                    .await;
                result.queue_id = Some(queue_id);
            }
            // Kept out of the context: stored once the run has ended.
            None => {
                tokio::spawn(write_when_idle(session.clone(), fields));
            }
        }
        Ok(result)
    }

    /// `agent/bash/abort {sessionId}` → `{aborted}`: kills the running `agent/bash` command's
    /// process group.
    pub(crate) async fn bash_abort(&self, params: Value) -> Result<BashAbortResult> {
        let p: SessionParams = parse_params(params)?;
        let session = self.session(&p.session_id)?;
        let aborted = lock(&session).tracker.abort_bash();
        Ok(BashAbortResult { aborted })
    }
}

/// Marks the session's `agent/bash` command ended when dropped.
struct EndBash(Arc<crate::tracker::Tracker>);

impl Drop for EndBash {
    fn drop(&mut self) {
        self.0.end_bash();
    }
}

/// Appends `fields` as a `message` entry once no run is active.
async fn write_when_idle(session: Arc<Mutex<Session>>, fields: Value) {
    loop {
        let agent = lock(&session).agent().clone();
        agent.wait_for_idle().await;
        let s = lock(&session);
        if s.agent().is_streaming() {
            continue;
        }
        if let Err(e) = super::queue::append_now(&s, "message", fields, None) {
            tracing::error!("shell output not saved: {}", e.message);
        }
        return;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_split_off() {
        assert_eq!(
            split_status("a\n\nb\n\nCommand exited with code 3"),
            ("a\n\nb".into(), Some("Command exited with code 3".into()))
        );
        assert_eq!(split_status("x\n\ny"), ("x\n\ny".into(), None));
    }
}
