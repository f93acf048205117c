//! What differs per OS at the LSP edge, behind one interface each (the harness's own platform
//! code is `pi_core::platform`; docs/platforms.md has the matrix):
//!
//! - [`signals`]: the signals that end the server (SIGTERM / SIGHUP / SIGINT; Windows' console
//!   events);
//! - [`stdio`]: the transport's stdin and stdout (non-blocking pipes on Unix, tokio's stdio
//!   elsewhere).

pub mod signals;
pub mod stdio;
