//! A pi-core agent that compacts into a session file, for the suites comparing compactions
//! and their summary requests (tests/compaction_pi16.rs, tests/summary_cache.rs). Included
//! with `#[path]` by those suites (it needs pi-core, which the support library does not
//! depend on).
// Each suite uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pi_ai::{Message, Model, RetryPolicy};
use pi_core::agent::{Agent, AgentConfig, CompactionConfig, CompactionSettings};
use pi_core::compaction::SessionCompactor;
use pi_core::session::SessionWriter;
use serde_json::Value;

/// True for a summary request body (a compaction's or a branch summary's): its system prompt
/// is Pi's summarization assistant's.
pub fn is_summary(body: &Value) -> bool {
    body.to_string().contains("context summarization assistant")
}

/// The agent, its session file's writer and the file's path.
pub struct Compacting {
    pub agent: Agent,
    pub writer: Arc<Mutex<SessionWriter>>,
    pub path: PathBuf,
}

/// An agent on `model` (system prompt "You are a helper.", no tools) writing a new session
/// file under `sessions` for the workspace `dir`, compacting with `settings` into it;
/// `retry`: the summaries' and answers' retry policy (`None`: retries off).
pub fn compacting_agent(
    dir: &Path,
    sessions: &Path,
    model: Model,
    retry: Option<RetryPolicy>,
    settings: CompactionSettings,
    session_id: Option<&str>,
) -> Compacting {
    let writer = SessionWriter::create(sessions, dir, &model.provider, &model.id, "off").unwrap();
    let path = writer.path().to_path_buf();
    let writer = Arc::new(Mutex::new(writer));
    let mut cfg = AgentConfig::new(model, "You are a helper.".into(), Vec::new());
    cfg.session_id = session_id.map(Arc::from);
    match retry {
        Some(policy) => cfg.retry.policy = policy,
        None => cfg.retry.enabled = false,
    }
    cfg.compaction = Some(CompactionConfig {
        settings,
        compactor: Arc::new(SessionCompactor::new(writer.clone())),
    });
    Compacting {
        agent: Agent::new(cfg, Vec::new()),
        writer,
        path,
    }
}

impl Compacting {
    /// Waits (at most 30 s) for the agent to be idle.
    pub async fn idle(&self) {
        tokio::time::timeout(Duration::from_secs(30), self.agent.wait_for_idle())
            .await
            .expect("the agent did not become idle")
    }

    /// Each prompt run to its end, its user message and answer then appended to the file
    /// (the conversation as the file holds it, for the compaction).
    pub async fn converse(&self, prompts: &[&str]) {
        for text in prompts {
            self.agent.prompt(vec![Message::user_text(*text)]).unwrap();
            self.idle().await;
            for m in self.agent.messages().iter().rev().take(2).rev() {
                self.writer.lock().unwrap().append_message(m).unwrap();
            }
        }
    }
}
