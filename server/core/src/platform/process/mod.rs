//! Process trees: a command started so that it and everything it starts can be stopped as one.
//!
//! | | Linux, macOS (`unix.rs`) | Windows (`windows.rs`) |
//! |---|---|---|
//! | [`prepare`] | `process_group(0)`: the child leads a new process group | `CREATE_NEW_PROCESS_GROUP \| CREATE_NO_WINDOW` |
//! | [`lead_own_group`] (the process itself, for a launcher another program starts) | `setsid` (else `setpgid(0, 0)`) | an error |
//! | [`ProcessTree::adopt`] | the group whose id is the child's pid | a new job object (kill-on-close) the child is assigned to; what it starts later joins the job |
//! | [`ProcessTree::terminate`] (`false`: no live member) | `SIGTERM` to the group | `TerminateJobObject` (Windows has no polite stop for a window-less tree) |
//! | [`ProcessTree::kill`] | `SIGKILL` to the group (macOS: `SIGSTOP` first, as Pi 1.6 does) | `TerminateJobObject` |
//! | [`ProcessTree::alive`] | a live, not zombie, member (`/proc` on Linux; `kill(-pgid, 0)` elsewhere, which also counts unreaped zombies) | the job's active process count > 0 |
//! | the server dies (any way) | the group lives on; the next server cleans only its own | the job's last handle closes and Windows kills the tree |
//!
//! Windows caveat (unproven here, see docs/platforms.md): the child is assigned to its job
//! right after `CreateProcess` returns, so a grandchild started in those microseconds escapes
//! the job (the child would have to be created suspended to close that window, which std's
//! `Command` cannot resume).
//!
//! # Use (the `bash` tool, user commands, MCP server processes)
//!
//! ```no_run
//! # async fn f() -> std::io::Result<()> {
//! use pi_core::platform::process;
//! let mut cmd = tokio::process::Command::new("some-server");
//! process::prepare(&mut cmd); // before spawning
//! let mut child = cmd.spawn()?;
//! let tree = process::ProcessTree::adopt(child.id().unwrap_or(0))?;
//! process::track(&tree); // stopped with every other tree when the server goes away
//! // …
//! process::stop(&tree, process::KILL_GRACE).await; // terminate, grace, kill
//! let _ = child.wait().await;
//! # Ok(()) }
//! ```
//!
//! A tree is cheap to clone (a group id, or a shared job handle). [`track`]ed trees are kept
//! until found empty; [`stop_all`] / [`kill_all_now`] stop what is left when the process goes
//! away (the server's shutdown path).

use std::sync::Mutex;
use std::time::{Duration, Instant};

#[cfg(unix)]
#[path = "unix.rs"]
mod imp;
#[cfg(windows)]
#[path = "windows.rs"]
mod imp;

pub use imp::{exit_signal, lead_own_group, pid_alive, prepare, ProcessTree};

/// Grace between [`ProcessTree::terminate`] and [`ProcessTree::kill`] in [`stop`].
pub const KILL_GRACE: Duration = Duration::from_millis(300);

/// Tracked process trees, each kept until it is found empty. The process has one, [`TREES`],
/// behind [`track`], [`live_trees`], [`stop_all`] and [`kill_all_now`]; a test makes its own,
/// so that another test of the same binary stopping the process's trees (a session registry's
/// `Sessions::stop_all`) cannot stop or forget the trees it checks.
#[derive(Default)]
pub(crate) struct Registry(Mutex<Vec<ProcessTree>>);

/// The process's tracked trees.
static TREES: Registry = Registry(Mutex::new(Vec::new()));

impl Registry {
    fn trees(&self) -> std::sync::MutexGuard<'_, Vec<ProcessTree>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// See [`track`].
    pub(crate) fn track(&self, tree: &ProcessTree) {
        let mut t = self.trees();
        imp::retain_live(&mut t);
        if !t.iter().any(|x| x.id() == tree.id()) {
            t.push(tree.clone());
        }
    }

    /// See [`live_trees`].
    pub(crate) fn live_trees(&self) -> Vec<ProcessTree> {
        let mut t = self.trees();
        imp::retain_live(&mut t);
        t.clone()
    }

    /// See [`stop_all`].
    pub(crate) async fn stop_all(&self) -> usize {
        let live = self.live_trees();
        futures::future::join_all(live.iter().map(|t| stop(t, KILL_GRACE))).await;
        imp::retain_live(&mut self.trees());
        live.len()
    }

    /// See [`kill_all_now`].
    pub(crate) fn kill_all_now(&self) -> usize {
        let live = self.live_trees();
        for t in &live {
            t.kill();
        }
        live.len()
    }
}

/// Records `tree` (forgetting the tracked trees found empty): [`stop_all`] and
/// [`kill_all_now`] stop it if it still has a live member when the process goes away.
pub fn track(tree: &ProcessTree) {
    TREES.track(tree)
}

/// The tracked trees that still have a live member (the others are forgotten).
pub fn live_trees() -> Vec<ProcessTree> {
    TREES.live_trees()
}

/// [`ProcessTree::terminate`], then [`ProcessTree::kill`] when a member is still alive after
/// `grace` (checked every 20 ms). Returns at once when the tree was already gone.
pub async fn stop(tree: &ProcessTree, grace: Duration) {
    if !tree.terminate() {
        return;
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if !tree.alive() {
            return;
        }
    }
    tree.kill();
}

/// [`stop`]s every tracked tree with a live member, all at once, with [`KILL_GRACE`].
/// Returns how many there were.
pub async fn stop_all() -> usize {
    TREES.stop_all().await
}

/// [`ProcessTree::kill`] on every tracked tree with a live member, at once (no grace): for an
/// exit that cannot wait. Returns how many there were.
pub fn kill_all_now() -> usize {
    TREES.kill_all_now()
}

/// Pi's status line for a process that did not exit with 0: `Command exited with code N`,
/// `Command was killed by signal N` (Unix), else `Command failed`.
pub fn exit_text(status: &std::process::ExitStatus) -> String {
    match (status.code(), exit_signal(status)) {
        (Some(c), _) => format!("Command exited with code {c}"),
        (None, Some(sig)) => format!("Command was killed by signal {sig}"),
        _ => "Command failed".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell command that starts a background child and waits: the tree holds both.
    fn sleeper() -> tokio::process::Command {
        let (shell, args) = crate::platform::shell::test_shell();
        let mut cmd = tokio::process::Command::new(shell);
        cmd.args(args)
            .arg("sleep 30 & sleep 30; wait")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        cmd
    }

    /// A tracked tree is stopped whole (the background child too) and then forgotten. The
    /// test's own registry: the sessions tests of this binary stop the process's trees.
    #[tokio::test]
    async fn a_tree_is_stopped_whole_and_then_forgotten() {
        let registry = Registry::default();
        let mut cmd = sleeper();
        prepare(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let tree = ProcessTree::adopt(child.id().unwrap()).unwrap();
        registry.track(&tree);
        // Give the shell time to start its background child.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(tree.alive());
        assert!(registry.live_trees().iter().any(|t| t.id() == tree.id()));
        let started = Instant::now();
        stop(&tree, KILL_GRACE).await;
        let status = child.wait().await.unwrap();
        assert!(!status.success());
        assert!(started.elapsed() < Duration::from_secs(2));
        // Every member is gone (the background sleep too), and the registry forgets it.
        let gone = Instant::now() + Duration::from_secs(2);
        while tree.alive() && Instant::now() < gone {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!tree.alive());
        assert!(!registry.live_trees().iter().any(|t| t.id() == tree.id()));
        // Stopping a gone tree is a no-op.
        assert!(!tree.terminate());
    }

    /// `kill_all_now` kills every tree its registry tracks, and only those: another registry
    /// (as the process's is to this test's) finds none of them. Each test has its own
    /// registry, so the count is exact whatever the other tests of this binary stop.
    #[tokio::test]
    async fn kill_all_now_kills_every_tracked_tree() {
        let (registry, other) = (Registry::default(), Registry::default());
        let mut pairs = Vec::new();
        for _ in 0..2 {
            let mut cmd = sleeper();
            prepare(&mut cmd);
            let child = cmd.spawn().unwrap();
            let tree = ProcessTree::adopt(child.id().unwrap()).unwrap();
            registry.track(&tree);
            pairs.push((child, tree));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(other.kill_all_now(), 0);
        assert!(pairs.iter().all(|(_, tree)| tree.alive()));
        assert_eq!(registry.kill_all_now(), 2);
        for (mut child, tree) in pairs {
            let _ = child.wait().await.unwrap();
            let gone = Instant::now() + Duration::from_secs(2);
            while tree.alive() && Instant::now() < gone {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(!tree.alive());
        }
        assert_eq!(registry.live_trees().len(), 0);
    }

    #[test]
    fn pid_liveness() {
        assert!(pid_alive(std::process::id()));
        let (shell, args) = crate::platform::shell::test_shell();
        let mut child = std::process::Command::new(shell)
            .args(args)
            .arg("exit 0")
            .spawn()
            .unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!pid_alive(pid));
    }

    #[test]
    fn exit_texts_are_pis() {
        let (shell, args) = crate::platform::shell::test_shell();
        let status = std::process::Command::new(shell)
            .args(args)
            .arg("exit 3")
            .status()
            .unwrap();
        assert_eq!(exit_text(&status), "Command exited with code 3");
    }
}
