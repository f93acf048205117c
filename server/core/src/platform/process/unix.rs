//! Process trees on Linux and macOS: process groups (see the table in `mod.rs`).

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// A process group led by a command started after [`prepare`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessTree {
    pgid: i32,
}

/// Makes the command lead a new process group (`setpgid(0, 0)` in the child).
pub fn prepare(cmd: &mut tokio::process::Command) {
    cmd.process_group(0);
}

impl ProcessTree {
    /// The group of the child `pid` started after [`prepare`] (its group id is its pid).
    ///
    /// Errors: `pid` 0 (a child that already exited and was reaped has no id).
    pub fn adopt(pid: u32) -> std::io::Result<ProcessTree> {
        match i32::try_from(pid) {
            Ok(pgid) if pgid > 0 => Ok(ProcessTree { pgid }),
            _ => Err(std::io::Error::other(format!(
                "no process group for pid {pid}"
            ))),
        }
    }

    /// The group id.
    pub fn id(&self) -> u32 {
        self.pgid.unsigned_abs()
    }

    fn signal(&self, sig: Option<Signal>) -> bool {
        killpg(Pid::from_raw(self.pgid), sig).is_ok()
    }

    /// `SIGTERM` to every member; `false` when the group has no live member (nothing sent).
    pub fn terminate(&self) -> bool {
        self.alive() && self.signal(Some(Signal::SIGTERM))
    }

    /// `SIGKILL` to every member (on macOS `SIGSTOP` first, so a shell cannot start its next
    /// command between its child's death and its own: Pi 1.6's `killProcessTree`); `false`
    /// when the group no longer exists.
    pub fn kill(&self) -> bool {
        if cfg!(target_os = "macos") {
            self.signal(Some(Signal::SIGSTOP));
        }
        self.signal(Some(Signal::SIGKILL))
    }

    /// True while a member is alive (not a zombie where `/proc` tells; elsewhere an unreaped
    /// zombie still counts).
    pub fn alive(&self) -> bool {
        let mut one = vec![self.clone()];
        retain_live(&mut one);
        !one.is_empty()
    }
}

/// Keeps the trees with a live (not zombie) member: one pass over `/proc` for all of them
/// where it exists (Linux), else `kill(-pgid, 0)` for each.
pub(super) fn retain_live(trees: &mut Vec<ProcessTree>) {
    if trees.is_empty() {
        return;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        trees.retain(|t| t.signal(None));
        return;
    };
    let mut live = std::collections::HashSet::new();
    for e in dir.filter_map(Result::ok) {
        if let Some((state, pgrp)) = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .as_deref()
            .and_then(stat_state_pgrp)
        {
            if state != "Z" && state != "X" {
                live.insert(pgrp);
            }
        }
    }
    trees.retain(|t| live.contains(&t.pgid));
}

/// `(state, pgrp)` of a `/proc/<pid>/stat` line (the fields after the parenthesised command:
/// state ppid pgrp …).
fn stat_state_pgrp(stat: &str) -> Option<(String, i32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.to_string();
    let pgrp = f.nth(1)?.parse().ok()?;
    Some((state, pgrp))
}

/// Makes this process lead a new session and process group (`setsid`), so that stopping its
/// [`ProcessTree`] (group id = this pid) reaches everything it starts and nothing else; a
/// process that already leads its group (its parent started it in a group of its own, where
/// `setsid` is refused) keeps that group. Returns the group id. For the `pi-lsp sandbox-exec`
/// launcher, whose parent is another program (an ACP client's terminal).
///
/// Errors: the process could lead neither a session nor a group of its own.
pub fn lead_own_group() -> std::io::Result<u32> {
    use nix::unistd::{getpgrp, getpid, setpgid, setsid};
    if setsid().is_err() {
        let me = getpid();
        if getpgrp() != me {
            setpgid(me, me).map_err(std::io::Error::from)?;
        }
    }
    Ok(getpgrp().as_raw().unsigned_abs())
}

/// The signal that ended the process, if one did.
pub fn exit_signal(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

/// True unless no process has id `pid` (`kill(pid, 0)` fails with `ESRCH`; a process of another
/// user counts as alive).
pub fn pid_alive(pid: u32) -> bool {
    match i32::try_from(pid) {
        Ok(p) if p > 0 => kill(Pid::from_raw(p), None) != Err(nix::errno::Errno::ESRCH),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_after_the_command_name() {
        assert_eq!(
            stat_state_pgrp("42 (a) b) c) S 1 42 42 0 -1"),
            Some(("S".into(), 42))
        );
        assert_eq!(stat_state_pgrp("garbage"), None);
    }
}
