//! Everything that differs per OS, behind one interface per mechanism; the rest of the harness
//! calls these modules and has no `#[cfg]` of its own (docs/platforms.md has the matrix and
//! what is proven where). Each mechanism's `mod.rs` documents its behaviour per OS; its OS
//! files (`unix.rs`, `windows.rs`, `linux.rs`, `macos.rs`, `none.rs`) have the same items.
//!
//! - [`process`]: process trees (start, stop, kill, track; Unix process groups, Windows job
//!   objects) for the `bash` tool, user commands and MCP server processes.
//! - [`shell`]: which shell runs commands (Pi 1.6's order per OS).
//! - [`sandbox`]: the sandbox backends (Linux Landlock + seccomp, macOS Seatbelt, none).
//! - [`fs`]: positioned reads, private folders, file identity; session-file locks are std's.
//! - [`paths`]: canonical paths without `\\?\`, case-insensitive comparisons.
//! - [`signals`]: the signals that end a server (SIGTERM / SIGHUP / SIGINT; Windows' console
//!   events), shared by the LSP and ACP front doors.
//!
//! Stdio is the LSP binary's (`pi-lsp`'s own `platform` module).

pub mod fs;
pub mod paths;
pub mod process;
pub mod sandbox;
pub mod shell;
pub mod signals;
