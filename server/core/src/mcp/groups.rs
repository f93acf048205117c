//! The process groups of the stdio MCP servers this process started: recorded when a server
//! starts ([`track_group`]), forgotten when it ends ([`untrack_group`]), SIGKILLed at the end of
//! a shutdown ([`kill_all_groups`]). A leaf both the connections ([`super::client`]) and the
//! servers of a workspace ([`super::manager`]) use.

use std::sync::OnceLock;

fn groups() -> &'static parking_lot::Mutex<Vec<i32>> {
    static G: OnceLock<parking_lot::Mutex<Vec<i32>>> = OnceLock::new();
    G.get_or_init(Default::default)
}

/// Records a stdio server's process group (killed by [`kill_all_groups`]).
pub(crate) fn track_group(pid: Option<i32>) {
    if let Some(p) = pid {
        groups().lock().push(p);
    }
}

/// Forgets a process group that was ended.
pub(crate) fn untrack_group(pid: Option<i32>) {
    if let Some(p) = pid {
        groups().lock().retain(|g| *g != p);
    }
}

/// SIGKILLs every stdio server's process group still running (the last step of a shutdown, or
/// an exit that could not wait).
pub fn kill_all_groups() {
    for p in groups().lock().drain(..) {
        signal_group(Some(p), nix::sys::signal::Signal::SIGKILL);
    }
}

/// Sends `sig` to the process group `pid` leads.
pub(crate) fn signal_group(pid: Option<i32>, sig: nix::sys::signal::Signal) {
    if let Some(p) = pid.filter(|p| *p > 0) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(p), sig);
    }
}
