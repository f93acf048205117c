//! `pi-lsp run` (and the other headless subcommands) as a user runs them: the real binary as a
//! child process, a temporary workspace and agent dir, the loopback model's `models.json`. Also
//! Pi itself on the loopback model ([`pi_command`], [`run_pi`]), for the comparisons.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::lsp_client::{agent_env, child_tmp, tmp_env};
use crate::{pi_lsp_bin, TempDir};

/// One headless test's folders: `<tmp>/ws` (the workspace, created empty) and `<tmp>/agent`
/// (`PI_CODING_AGENT_DIR`, holding the given `models.json`), and the environment
/// ([`agent_env`]: provider keys empty, `PI_LSP_LOG=info`) every command here runs with. The
/// folders go when it is dropped ([`TempDir`]).
pub struct Headless {
    tmp: TempDir,
    /// The workspace: `<tmp>/ws`.
    pub ws: PathBuf,
    /// The agent dir: `<tmp>/agent`.
    pub agent: PathBuf,
    /// The child's environment.
    pub env: Vec<(&'static str, String)>,
}

impl Headless {
    /// Folders for test `name` (the temporary folder's prefix) with `models` as the agent
    /// dir's `models.json` (usually `MockModel::models_json()`).
    pub fn new(name: &str, models: &Value) -> Headless {
        let tmp = TempDir::new(name);
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let agent = tmp.path().join("agent");
        let env = agent_env(&agent, models, &[]);
        Headless {
            tmp,
            ws,
            agent,
            env,
        }
    }

    /// The temporary folder holding `ws` and `agent` (room for other files of the test).
    pub fn path(&self) -> &Path {
        self.tmp.path()
    }

    /// `pi-lsp ARGS` with this environment, not started.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(pi_lsp_bin());
        cmd.args(args).envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// `pi-lsp run --workspace <ws> ARGS` run to its end ([`run`]).
    pub fn run(&self, args: &[&str]) -> Output {
        run(&self.ws, &self.env, args)
    }
}

/// Runs `pi-lsp run --workspace WS ARGS` with `env` to its end and returns its output. From a
/// multi-thread tokio test it waits in `block_in_place`, so the loopback model served by the
/// test's runtime keeps answering (outside a runtime it simply waits).
pub fn run(ws: &Path, env: &[(&str, String)], args: &[&str]) -> Output {
    let mut cmd = Command::new(pi_lsp_bin());
    cmd.arg("run").arg("--workspace").arg(ws).args(args);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    tokio::task::block_in_place(|| cmd.output().unwrap())
}

/// Pi (`pi`: a Pi 1.6.0 `pi`, `$PI16_REF_BIN`, or the reference Pi 0.73.1) on the loopback
/// model as the comparisons run it, not started: `--provider mock --model mock-1` and then
/// `args` (`-p TEXT`, `--mode json`, `--mode rpc`, `--session-dir DIR`, …), in `ws`, offline
/// (`PI_OFFLINE=1`), with `agent` as `PI_CODING_AGENT_DIR` (where the test wrote the mock's
/// `models.json`) and `home` as `HOME` (so the user's own Pi settings stay out).
pub fn pi_command<I, S>(pi: &Path, ws: &Path, agent: &Path, home: &Path, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = pi_bare_command(pi, ws, agent, home);
    cmd.args(["--provider", "mock", "--model", "mock-1"])
        .args(args);
    cmd
}

/// [`pi_command`] without `--provider`/`--model` and arguments: Pi offline in `ws` with
/// `agent` and `home`, at whatever model its settings or a resumed session choose.
pub fn pi_bare_command(pi: &Path, ws: &Path, agent: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(pi);
    cmd.current_dir(ws)
        .env("PI_OFFLINE", "1")
        .env("PI_CODING_AGENT_DIR", agent)
        .env("HOME", home)
        .envs(tmp_env(&child_tmp(agent)));
    cmd
}

/// [`pi_command`] run to its end (print mode, `--mode json`) and its output. From a
/// multi-thread tokio test it waits in `block_in_place`, as [`run`] does, so the loopback
/// model keeps answering.
pub fn run_pi<I, S>(pi: &Path, ws: &Path, agent: &Path, home: &Path, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = pi_command(pi, ws, agent, home, args);
    tokio::task::block_in_place(|| cmd.output().unwrap())
}

/// [`run_pi`] keeping its session files in `sessions` (`--session-dir`), before `args`.
pub fn run_pi_in(
    pi: &Path,
    ws: &Path,
    agent: &Path,
    home: &Path,
    sessions: &Path,
    args: &[&str],
) -> Output {
    let dir = [OsStr::new("--session-dir"), sessions.as_os_str()];
    run_pi(
        pi,
        ws,
        agent,
        home,
        dir.into_iter().chain(args.iter().map(OsStr::new)),
    )
}

/// Asserts that `out` is a refusal before anything ran: exit code 2, nothing on stdout, and
/// `message` as the whole of stderr (trimmed).
pub fn assert_refused(out: &Output, message: &str) {
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).as_ref(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        (Some(2), "", message)
    );
}

/// Asserts that `out` is a success (exit code 0), showing its stderr otherwise.
pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
