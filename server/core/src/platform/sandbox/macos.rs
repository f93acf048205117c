//! macOS backend: a Seatbelt profile applied by `/usr/bin/sandbox-exec` wrapping the command
//! ([`super::seatbelt`]), as Codex does. Unproven here (no macOS target on the development
//! machines): the hosted macOS runner runs `server/core/tests/sandbox_macos.rs`.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use crate::sandbox::{Policy, Support};

/// What enforces the file rules here.
pub const FILES: &str = "Seatbelt (sandbox-exec)";
/// What enforces network off here.
pub const NETWORK: &str = "Seatbelt (sandbox-exec)";

/// The command wrapped in `sandbox-exec` with the policy's profile.
pub fn wrap(program: PathBuf, args: Vec<OsString>, policy: &Policy) -> (PathBuf, Vec<OsString>) {
    super::seatbelt::wrap(program, args, policy)
}

/// Spawns `cmd` (already [`wrap`]ped: `sandbox-exec` applies the profile before it runs the
/// command).
///
/// Errors: the spawn failed.
pub async fn spawn(
    mut cmd: tokio::process::Command,
    _policy: &Policy,
) -> io::Result<tokio::process::Child> {
    cmd.spawn()
}

/// Replaces this process with `program args` run inside `sandbox-exec` with the policy's
/// profile ([`wrap`]). Used by the `pi-lsp sandbox-exec` launcher. Returns only on failure.
pub fn exec(
    program: PathBuf,
    args: Vec<OsString>,
    policy: &Policy,
    configure: &mut dyn FnMut(&mut std::process::Command),
) -> io::Error {
    use std::os::unix::process::CommandExt;
    let (program, args) = if policy.is_off() {
        (program, args)
    } else {
        wrap(program, args, policy)
    };
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    configure(&mut cmd);
    cmd.exec()
}

/// `sandbox-exec` is there and applies a profile (`(allow default)` around `/usr/bin/true`).
pub fn probe() -> Support {
    let works = if !Path::new(super::seatbelt::SANDBOX_EXEC).is_file() {
        Err(format!("{} is missing", super::seatbelt::SANDBOX_EXEC))
    } else {
        match std::process::Command::new(super::seatbelt::SANDBOX_EXEC)
            .args([
                "-p",
                "(version 1)\n(allow default)\n",
                "--",
                "/usr/bin/true",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
        {
            Ok(s) if s.success() => Ok("Seatbelt".to_string()),
            Ok(s) => Err(format!("sandbox-exec failed ({s})")),
            Err(e) => Err(format!("sandbox-exec cannot run: {e}")),
        }
    };
    Support {
        files: works.clone(),
        network: works,
    }
}
