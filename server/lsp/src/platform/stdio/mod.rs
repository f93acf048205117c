//! The server's stdin and stdout for the LSP transport, one interface per OS:
//! `stdio() -> (StdinReader, StdoutWriter, Restore)`, `Restore::blocking_again()`.
//!
//! | | Linux, macOS (`unix.rs`) | Windows (`other.rs`) |
//! |---|---|---|
//! | a pipe or a Unix-domain socket (what editors give) | duplicated, set `O_NONBLOCK`, driven by the reactor (no blocking-thread hand-off per message) | tokio's stdio (blocking threads) |
//! | a terminal, a regular file, a stdout that is stderr | tokio's stdio | tokio's stdio |
//! | at exit | `O_NONBLOCK` cleared again (the flag belongs to the open file, which the parent may share) | nothing to undo |

#[cfg(unix)]
#[path = "unix.rs"]
mod imp;
#[cfg(not(unix))]
#[path = "other.rs"]
mod imp;

pub use imp::{stdio, Restore, StdinReader, StdoutWriter};
