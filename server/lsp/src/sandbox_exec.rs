//! `pi-lsp sandbox-exec`: the launcher an ACP client's terminal runs for a session's `bash`
//! command (`pi_acp::terminal`, which builds its arguments). In order, before anything else
//! of the binary starts (no runtime, no threads, no logging: the terminal shows its output):
//!
//! 1. it leads a session and process group of its own (`setsid`;
//!    [`pi_core::platform::process::lead_own_group`]), so the agent can stop the command and
//!    everything it starts as one group, and nothing else;
//! 2. it writes its pid (= the group id) to `--pid-file` (created new, mode 0600; the folder is
//!    the agent's private one, outside every writable folder of the sandbox);
//! 3. it removes `--unset-env` variables and the provider keys it knows of
//!    ([`pi_ai::keys::secret_env_vars`]) from the environment, closes stdin (`/dev/null`, as
//!    a command run in the agent has), changes to `--cwd`;
//! 4. it applies the sandbox policy (`--sandbox`, `--network`, `--writable`) through the same
//!    OS backend as a command the agent spawns itself ([`pi_core::sandbox::exec`]: Landlock and
//!    the seccomp network filter on Linux, `sandbox-exec` on macOS) and execs the program.
//!
//! Exit codes of its own (nothing was run): 126 when the group, the pid file or the sandbox
//! could not be set up, 127 when the program could not be executed; the reason on stderr.

use std::ffi::OsString;
use std::path::PathBuf;

use pi_core::sandbox::{Policy, SandboxMode};

/// The sandbox mode as the launcher's `--sandbox` spells it (the settings' spelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// No file restriction.
    Off,
    /// Writes only in the `--writable` folders.
    WorkspaceWrite,
    /// Writes only in the `--writable` folders (the session's temp folder).
    ReadOnly,
}

/// On or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    /// Allowed.
    On,
    /// Denied.
    Off,
}

/// The arguments of `pi-lsp sandbox-exec`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct Args {
    /// Working folder of the program.
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// File to write this process's pid (its process group id) to; created new.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// File policy: off, workspace-write, read-only.
    #[arg(long, value_enum, default_value = "off")]
    pub sandbox: Mode,
    /// Network: on or off.
    #[arg(long, value_enum, default_value = "on")]
    pub network: Switch,
    /// A folder the program may write in (repeatable).
    #[arg(long)]
    pub writable: Vec<PathBuf>,
    /// A variable removed from the program's environment (repeatable).
    #[arg(long)]
    pub unset_env: Vec<String>,
    /// The program and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<OsString>,
}

impl Args {
    /// The sandbox policy these arguments describe.
    pub fn policy(&self) -> Policy {
        Policy {
            mode: match self.sandbox {
                Mode::Off => SandboxMode::Off,
                Mode::WorkspaceWrite => SandboxMode::WorkspaceWrite,
                Mode::ReadOnly => SandboxMode::ReadOnly,
            },
            network: self.network == Switch::On,
            writable: self.writable.clone(),
        }
    }
}

/// Says why the launcher stops, on stderr (the terminal shows it).
#[allow(clippy::print_stderr)]
fn fail(code: i32, what: std::fmt::Arguments<'_>) -> i32 {
    eprintln!("pi-lsp sandbox-exec: {what}");
    code
}

/// Runs the launcher; returns only when it could not exec the program (the exit code).
pub fn run(args: Args) -> i32 {
    let policy = args.policy();
    let mut command = args.command.into_iter();
    let Some(program) = command.next() else {
        return fail(126, format_args!("no program to run"));
    };
    let pgid = match pi_core::platform::process::lead_own_group() {
        Ok(g) => g,
        Err(e) => return fail(126, format_args!("cannot lead a process group: {e}")),
    };
    if let Some(p) = &args.pid_file {
        if let Err(e) = write_new(p, &format!("{pgid}\n")) {
            return fail(126, format_args!("{}: {e}", p.display()));
        }
    }
    let mut remove = args.unset_env;
    remove.extend(pi_ai::keys::secret_env_vars());
    let cwd = args.cwd;
    let err = pi_core::sandbox::exec(
        PathBuf::from(program),
        command.collect(),
        &policy,
        &mut |cmd: &mut std::process::Command| {
            cmd.stdin(std::process::Stdio::null());
            for v in &remove {
                cmd.env_remove(v);
            }
            if let Some(d) = &cwd {
                cmd.current_dir(d);
            }
        },
    );
    let code = if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    fail(code, format_args!("{err}"))
}

/// Writes `text` to the new file `p` (mode 0600 on Unix; an existing file is an error).
fn write_new(p: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o.open(p)?.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        c: Sub,
    }

    #[derive(clap::Subcommand)]
    enum Sub {
        SandboxExec(Args),
    }

    /// The agent's side builds what this parser reads.
    #[test]
    fn the_acp_edges_arguments_parse_into_the_policy_they_carry() {
        let run = pi_core::tools::BashRun {
            call_id: "c".into(),
            command: "echo hi".into(),
            program: "/bin/bash".into(),
            args: vec!["-c".into(), "echo hi --network on".into()],
            cwd: PathBuf::from("/ws"),
            env: Vec::new(),
            env_remove: vec!["OPENAI_API_KEY".into()],
            policy: Policy {
                mode: SandboxMode::WorkspaceWrite,
                network: false,
                writable: vec![PathBuf::from("/tmp/x"), PathBuf::from("/ws")],
            },
            output: tokio::sync::mpsc::channel(1).0,
            stop: Default::default(),
        };
        let argv = pi_acp::terminal::launcher_args(&run, std::path::Path::new("/p/1.pid"));
        let cli = Cli::try_parse_from(std::iter::once("pi-lsp".to_string()).chain(argv)).unwrap();
        let Sub::SandboxExec(a) = cli.c;
        assert_eq!(
            a,
            Args {
                cwd: Some(PathBuf::from("/ws")),
                pid_file: Some(PathBuf::from("/p/1.pid")),
                sandbox: Mode::WorkspaceWrite,
                network: Switch::Off,
                writable: vec![PathBuf::from("/tmp/x"), PathBuf::from("/ws")],
                unset_env: vec!["OPENAI_API_KEY".into()],
                command: ["/bin/bash", "-c", "echo hi --network on"]
                    .map(OsString::from)
                    .to_vec(),
            }
        );
        assert_eq!(a.policy(), run.policy);
    }
}
