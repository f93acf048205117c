//! No sandbox backend (Windows, and any OS other than Linux and macOS): every policy other than
//! `off` is reported as not enforceable ([`crate::sandbox::Enforcement`]), so the default is
//! `off` with a note on the first result, and a policy the user asked for explicitly makes
//! every command ask for approval to run unsandboxed. The clients say so too (the approval
//! question's reason, `:checkhealth pi`, the VS Code status).

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;

use crate::sandbox::{Policy, Support};

/// What would enforce the file rules here: nothing.
pub const FILES: &str = "an OS sandbox";
/// What would enforce network off here: nothing.
pub const NETWORK: &str = "an OS sandbox";

/// The command as given.
pub fn wrap(program: PathBuf, args: Vec<OsString>, _policy: &Policy) -> (PathBuf, Vec<OsString>) {
    (program, args)
}

/// Always an error: nothing here can restrict a command (callers only spawn through the
/// sandbox when [`probe`] said it works).
pub async fn spawn(
    cmd: tokio::process::Command,
    _policy: &Policy,
) -> io::Result<tokio::process::Child> {
    drop(cmd);
    Err(io::Error::other(format!(
        "no sandbox backend on {}",
        std::env::consts::OS
    )))
}

/// Replaces this process with `program args` when `policy` is off (on Unix); anything else is
/// an error, as nothing here can restrict a command. Used by the `pi-lsp sandbox-exec`
/// launcher. Returns only on failure.
pub fn exec(
    program: PathBuf,
    args: Vec<OsString>,
    policy: &Policy,
    configure: &mut dyn FnMut(&mut std::process::Command),
) -> io::Error {
    if !policy.is_off() {
        return io::Error::other(format!("no sandbox backend on {}", std::env::consts::OS));
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new(program);
        cmd.args(args);
        configure(&mut cmd);
        cmd.exec()
    }
    #[cfg(not(unix))]
    {
        drop((args, configure));
        io::Error::other(format!(
            "cannot replace this process with {} on {}",
            program.display(),
            std::env::consts::OS
        ))
    }
}

/// Nothing is supported.
pub fn probe() -> Support {
    let why = format!("no sandbox backend on {}", std::env::consts::OS);
    Support {
        files: Err(why.clone()),
        network: Err(why),
    }
}
