//! The OS sandbox backends behind [`crate::sandbox`] (the policies and their settings are
//! OS-neutral and live there). Every backend has the same items:
//!
//! - `FILES`, `NETWORK`: what enforces the file rules and network off (for messages);
//! - `probe() -> Support`: what works on this machine (cached by `crate::sandbox::support`);
//! - `wrap(program, args, policy)`: the command line to run (macOS: inside `sandbox-exec`);
//! - `async spawn(cmd, policy)`: starts the wrapped command under the policy;
//! - `exec(program, args, policy) -> io::Error`: replaces this process with the command under
//!   the policy (the `pi-lsp sandbox-exec` launcher); returns only on failure.
//!
//! | | backend | file rules | network off |
//! |---|---|---|---|
//! | Linux | `linux.rs` | Landlock, applied to a spawn thread the child inherits it from | seccomp filter: `socket(AF_INET/AF_INET6)` and `io_uring_setup` fail with `EACCES` |
//! | macOS | `macos.rs` + `seatbelt.rs` | Seatbelt profile through `/usr/bin/sandbox-exec`: `file-write*` denied outside the writable folders | the same profile denies IP `network-outbound` / `-inbound` / `-bind` |
//! | Windows, others | `none.rs` | none (reported; see `Enforcement`) | none |

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod imp;
#[cfg(target_os = "macos")]
#[path = "macos.rs"]
mod imp;
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
#[path = "none.rs"]
mod imp;

pub mod seatbelt;

pub use imp::{exec, probe, spawn, wrap, FILES, NETWORK};
