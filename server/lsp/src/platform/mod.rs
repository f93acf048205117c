//! What differs per OS at the LSP edge, behind one interface each (the harness's own platform
//! code is `pi_core::platform`; docs/platforms.md has the matrix):
//!
//! - [`signals`]: the signals that end the server (SIGTERM / SIGHUP / SIGINT; Windows' console
//!   events): `pi_core::platform::signals`, which the ACP front door shares;
//! - [`stdio`]: the transport's stdin and stdout (non-blocking pipes on Unix, tokio's stdio
//!   elsewhere);
//! - `malloc` (Linux with glibc): the allocator's mmap threshold ([`crate::memory`]).

#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub mod malloc;
pub use pi_core::platform::signals;
pub mod stdio;
