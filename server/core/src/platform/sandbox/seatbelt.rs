//! The macOS Seatbelt profile for a [`Policy`] and the `sandbox-exec` command line that applies
//! it (as Codex's `seatbelt.rs` does; our own profile). Pure text, built and tested on every OS;
//! only `macos.rs` runs it.
//!
//! The profile allows everything (`(allow default)`) but what the policy forbids:
//! - file rules (`workspace-write`, `read-only`): every `file-write*` outside the writable
//!   folders (passed as parameters `W0`, `W1`, … so no path is ever spliced into the profile
//!   text) and the device files a shell writes to;
//! - network off: IP sockets (`network-outbound` to, `network-inbound` / `network-bind` on any
//!   IP address); Unix sockets keep working, as on Linux.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::sandbox::{Policy, SandboxMode};

/// `sandbox-exec`'s fixed path (never looked up in `PATH`).
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// Device files writable under every policy (`/dev/fd/*` is how bash writes process
/// substitutions and here-documents; `ttys*` are terminals).
const DEVICES: &str = r#"(literal "/dev/null") (literal "/dev/zero") (literal "/dev/random") (literal "/dev/urandom") (literal "/dev/tty") (literal "/dev/dtracehelper") (regex #"^/dev/fd/[0-9]+$") (regex #"^/dev/ttys[0-9]+$") (literal "/dev/ptmx")"#;

/// The profile text for `policy` (its writable folders are the parameters `W0`…).
pub fn profile(policy: &Policy) -> String {
    let mut p = String::from("(version 1)\n(allow default)\n");
    if policy.mode != SandboxMode::Off {
        let roots: Vec<String> = (0..policy.writable.len())
            .map(|i| format!("(subpath (param \"W{i}\"))"))
            .collect();
        p.push_str(&format!(
            "(deny file-write*\n  (require-not (require-any\n    {DEVICES}{}{})))\n",
            if roots.is_empty() { "" } else { "\n    " },
            roots.join(" ")
        ));
    }
    if !policy.network {
        p.push_str(
            "(deny network-outbound (remote ip \"*:*\"))\n(deny network-inbound (local ip \"*:*\"))\n(deny network-bind (local ip \"*:*\"))\n",
        );
    }
    p
}

/// `sandbox-exec -p <profile> -D W0=<folder> … -- <program> <args…>`.
pub fn wrap(program: PathBuf, args: Vec<OsString>, policy: &Policy) -> (PathBuf, Vec<OsString>) {
    let mut out: Vec<OsString> = vec!["-p".into(), profile(policy).into()];
    for (i, w) in policy.writable.iter().enumerate() {
        let mut d = OsString::from(format!("W{i}="));
        d.push(w.as_os_str());
        out.push("-D".into());
        out.push(d);
    }
    out.push("--".into());
    out.push(program.into_os_string());
    out.extend(args);
    (PathBuf::from(SANDBOX_EXEC), out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_denies_writes_outside_the_folders_and_ip_sockets_when_network_is_off() {
        let policy = Policy {
            mode: SandboxMode::WorkspaceWrite,
            network: false,
            writable: vec![
                PathBuf::from("/private/tmp/pi-lsp-1-x"),
                PathBuf::from("/Users/me/ws"),
            ],
        };
        assert_eq!(
            profile(&policy),
            format!("(version 1)\n(allow default)\n(deny file-write*\n  (require-not (require-any\n    {DEVICES}\n    (subpath (param \"W0\")) (subpath (param \"W1\")))))\n(deny network-outbound (remote ip \"*:*\"))\n(deny network-inbound (local ip \"*:*\"))\n(deny network-bind (local ip \"*:*\"))\n")
        );
        let (program, args) = wrap(
            PathBuf::from("/bin/bash"),
            vec!["-c".into(), "echo \"$HOME\"".into()],
            &policy,
        );
        assert_eq!(program, PathBuf::from("/usr/bin/sandbox-exec"));
        let want: Vec<OsString> = [
            "-p",
            &profile(&policy),
            "-D",
            "W0=/private/tmp/pi-lsp-1-x",
            "-D",
            "W1=/Users/me/ws",
            "--",
            "/bin/bash",
            "-c",
            "echo \"$HOME\"",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(args, want);
    }

    #[test]
    fn network_off_alone_leaves_files_alone() {
        let policy = Policy {
            mode: SandboxMode::Off,
            network: false,
            writable: vec![],
        };
        assert_eq!(
            profile(&policy),
            "(version 1)\n(allow default)\n(deny network-outbound (remote ip \"*:*\"))\n(deny network-inbound (local ip \"*:*\"))\n(deny network-bind (local ip \"*:*\"))\n"
        );
    }
}
