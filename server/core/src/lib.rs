//! `pi-core`: the harness. The live session ([`harness`]: Pi's `AgentSession` and its setup), the agent loop ([`agent`]), the coding tools ([`tools`]) over a file
//! system abstraction ([`fs`]), Pi-format session files ([`session`]), the system prompt
//! ([`prompt`]), settings ([`settings`]), and the workspace's trust-gated resources
//! ([`resources`]: context files, [`skills`], prompt [`templates`]), and the OS sandbox for
//! commands with its approval interface ([`sandbox`]), and tool-call approval ([`approval`]). Depends on `pi-ai` only;
//! knows nothing of LSP.

pub mod agent;
pub mod approval;
pub mod compaction;
pub mod config;
pub mod export;
pub mod extension;
pub mod fs;
pub mod harness;
pub mod mcp;
pub mod platform;
pub mod sandbox;
pub mod session;
pub mod tools;
pub mod unsaved;
pub mod validate;

pub use config::{prompt, resources, settings, skills, templates, trust};

pub use agent::{
    run_agent, AgentConfig, AgentEvent, AgentHooks, Delivery, EventSink, QueueMode, RunControl,
    RunOutcome, Tool, ToolExecution,
};
