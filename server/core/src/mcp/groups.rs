//! The process trees of the stdio MCP servers this process started: recorded when a server
//! starts ([`track_group`]), forgotten when it ends ([`untrack_group`]), killed at the end of a
//! shutdown ([`kill_all_groups`]). A leaf both the connections ([`super::client`]) and the
//! servers of a workspace ([`super::manager`]) use. The trees are
//! [`crate::platform::process::ProcessTree`]s (a process group on Linux and macOS, a job object
//! on Windows), kept apart from the `bash` tool's so that stopping the tools' trees does not
//! stop a workspace's MCP servers.

use std::sync::OnceLock;

use crate::platform::process::ProcessTree;

fn groups() -> &'static parking_lot::Mutex<Vec<ProcessTree>> {
    static G: OnceLock<parking_lot::Mutex<Vec<ProcessTree>>> = OnceLock::new();
    G.get_or_init(Default::default)
}

/// Records a stdio server's process tree (killed by [`kill_all_groups`]).
pub(crate) fn track_group(tree: Option<&ProcessTree>) {
    if let Some(t) = tree {
        groups().lock().push(t.clone());
    }
}

/// Forgets a process tree that was ended.
pub(crate) fn untrack_group(tree: Option<&ProcessTree>) {
    if let Some(t) = tree {
        groups().lock().retain(|g| g.id() != t.id());
    }
}

/// Kills every stdio server's process tree still running (the last step of a shutdown, or an
/// exit that could not wait): `SIGKILL` to the group, `TerminateJobObject` on Windows.
pub fn kill_all_groups() {
    for t in groups().lock().drain(..) {
        t.kill();
    }
}
