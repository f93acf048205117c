//! `pi-lsp`: the editor edge of the harness (the live session itself is
//! [`pi_core::harness::AgentSession`]). Transport and lifecycle ([`server`]), the
//! `agent/*` wire types ([`protocol`]), open documents ([`documents`]), the one position
//! converter ([`positions`]), the editor file system ([`editor_fs`]), how the process goes away
//! ([`shutdown`]: `shutdown`/`exit`, end of input, signals), and the headless `run`
//! command ([`headless`]), permission requests to the editor ([`permissions`]), extensions' host
//! and UI requests ([`extensions`]), editor-side tools and the `diagnostics` tool
//! ([`editor_tools`]), where log lines go ([`logging`]). Only this crate writes stdout; only it imports LSP types.

pub mod client;
pub(crate) mod ctx;
pub mod delta;
pub mod dispatch;
pub mod documents;
pub mod editor_fs;
pub mod editor_tools;
pub(crate) mod event_json;
pub mod extensions;
pub mod headless;
pub mod logging;
pub mod memory;
pub(crate) mod methods;
pub mod permissions;
pub mod platform;
pub mod positions;
pub mod protocol;
pub mod sandbox_exec;
pub mod server;
pub(crate) mod setup;
pub mod shutdown;
pub(crate) mod sink;
pub mod state;
pub mod transport;
mod wire_ts;
