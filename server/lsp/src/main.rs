//! The `pi-lsp` binary: with no subcommand (or `lsp`), an LSP server on stdio; `run` is the
//! headless main job; `sandbox-exec` is the launcher of `acp`'s client terminals. Warnings and errors go to stderr, informational lines to the client as
//! `window/logMessage` (`PI_LSP_LOG` sets the level and, when set, sends every line to stderr
//! too; see [`pi_lsp::logging`]); stdout belongs to the protocol.

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

// The system allocator (glibc malloc): the bench (docs/benchmarks.md) measured mimalloc v2 at
// twice the resident memory after 50 tool rounds (46 MB against 21 MB: its arena is backed by
// transparent huge pages, 24 MB of them for a heap that peaks under 2 MB) and a third more
// opening a 100 MB session (412 MB against about 300 MB), for no less CPU.

#[derive(Parser)]
#[command(
    name = "pi-lsp",
    version,
    about = "The Pi coding-agent harness as an LSP server (stdio)"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Accepted for editor compatibility; stdio is the only transport.
    #[arg(long, global = true)]
    stdio: bool,
}

// `run`'s many flags make its variant large; the enum is made once, at start.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Serve LSP on stdin/stdout (the default).
    Lsp,
    /// Run one prompt without an editor and print the streamed answer.
    Run {
        /// Workspace folder (default: the current folder).
        #[arg(long, default_value = ".")]
        workspace: PathBuf,
        /// Model as provider/id (default: settings, then the first provider with a key).
        #[arg(long)]
        model: Option<String>,
        /// Print every agent event as one JSON line.
        #[arg(long)]
        json: bool,
        /// Pi's `-p/--print`: accepted and changes nothing (`run` is Pi's print mode).
        #[arg(short = 'p', long = "print")]
        print: bool,
        /// Pi's `--mode text|json|rpc`: `json` is `--json`, `text` the default; `rpc` is
        /// refused (`pi-lsp` serves LSP, `pi-lsp acp` the Agent Client Protocol).
        #[arg(long, value_name = "MODE")]
        mode: Option<String>,
        /// Provider of `--model` (Pi's `--provider <name>`): `--provider P --model M` is
        /// `--model P/M`; it requires `--model`.
        #[arg(long, value_name = "NAME")]
        provider: Option<String>,
        /// Continue the session of the workspace folder with exactly this id (Pi's
        /// `--session-id <id>`); `run` cannot start a new session with an id of your choosing.
        #[arg(long, value_name = "ID")]
        session_id: Option<String>,
        /// The sessions folder for this run, where new sessions are kept and `-c` / `--session`
        /// look (Pi's `--session-dir <dir>`; relative: to the workspace folder).
        #[arg(long, value_name = "DIR")]
        session_dir: Option<String>,
        /// Name the session (Pi's `-n/--name <name>`: a `session_info` entry).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// List the available models (those with a key) as Pi's `--list-models [search]`
        /// does, optionally only those matching every word of SEARCH, and exit.
        #[arg(long, value_name = "SEARCH", num_args = 0..=1)]
        list_models: Option<Option<String>>,
        /// Pi's `--api-key <key>`: refused (put the key in models.json or the provider's
        /// environment variable).
        #[arg(long, value_name = "KEY")]
        api_key: Option<String>,
        /// Fork a session (a file's path, or a session id or the start of one) into the
        /// workspace's sessions folder and continue the fork (Pi's `--fork <path|id>`).
        #[arg(long, value_name = "PATH|ID")]
        fork: Option<String>,
        /// Pi's `--offline`: accepted and changes nothing (`run` makes no startup network
        /// calls).
        #[arg(long)]
        offline: bool,
        /// Pi's `--verbose`: accepted and changes nothing (print mode has no startup output).
        #[arg(long)]
        verbose: bool,
        /// Trust the project folder, as Pi's `-a/--approve` does: load its project
        /// configuration (.pi/settings.json, .pi/models.json, prompt templates, skills,
        /// SYSTEM.md, APPEND_SYSTEM.md). `--trust` is the older name.
        #[arg(short = 'a', long, alias = "trust", conflicts_with = "no_approve")]
        approve: bool,
        /// Do not trust the project folder for this run, whatever Pi's trust store says (Pi's
        /// `-na/--no-approve`). Without either flag the folder is trusted as Pi 1.6 decides:
        /// its trust store (`trust.json` in the agent dir), then `defaultProjectTrust`.
        /// `-na` is accepted for it, as Pi spells it.
        #[arg(long = "no-approve")]
        no_approve: bool,
        /// Approve every tool call (approvalPolicy "approve-all" for this run); without it a
        /// call the policy would ask about is not run (nobody can answer here). Before Pi
        /// 1.6's meaning of `--approve`, this was `--approve`.
        #[arg(long)]
        approve_all: bool,
        /// Continue the latest session of the workspace folder (Pi's `-c/--continue`).
        #[arg(short = 'c', long, conflicts_with_all = ["session", "no_session"])]
        r#continue: bool,
        /// Continue a session: a session file's path, or a session id (or the start of one)
        /// of the workspace's sessions folder.
        #[arg(long, conflicts_with = "no_session")]
        session: Option<String>,
        /// Keep no session file (it is removed when the run ends).
        #[arg(long)]
        no_session: bool,
        /// Thinking level for this run: off, minimal, low, medium, high, xhigh, max (clamped
        /// to what the model has, as Pi's `--thinking`).
        #[arg(long)]
        thinking: Option<String>,
        /// Replace the default system prompt (and SYSTEM.md) with this text, or with the
        /// contents of this file when it names one (Pi's `--system-prompt <text|path>`).
        #[arg(long, value_name = "TEXT|PATH")]
        system_prompt: Option<String>,
        /// Append this text, or this file's contents when it names one, to the system prompt
        /// instead of APPEND_SYSTEM.md; repeatable (Pi's `--append-system-prompt`).
        #[arg(long, value_name = "TEXT|PATH")]
        append_system_prompt: Vec<String>,
        /// Comma-separated tools for this run (Pi's `-t/--tools`): names or `*` patterns
        /// replace the default selection; a list of only `+name` / `-name` entries changes it.
        #[arg(short = 't', long, value_name = "LIST", allow_hyphen_values = true)]
        tools: Option<String>,
        /// Disable every tool by default, built-in, extension and MCP (Pi's `--no-tools`):
        /// only what `--tools` names (or adds with `+name`) is offered; a resumed session's
        /// recorded tools are not restored. `-nt` is accepted for it, as Pi spells it.
        #[arg(long)]
        no_tools: bool,
        /// Disable the built-in tools by default (Pi's `--no-builtin-tools`): extension,
        /// MCP and editor tools stay on; `--tools` names or adds (`+name`) built-ins back; a
        /// resumed session's recorded tools are not restored. `--no-tools` wins over it.
        /// `-nbt` is accepted for it, as Pi spells it.
        #[arg(long = "no-builtin-tools")]
        no_builtin_tools: bool,
        /// Do not connect MCP servers for this run (Pi's `--no-mcp`).
        #[arg(long)]
        no_mcp: bool,
        /// Start in plan mode (Pi's: read/search tools, and bash only for commands whose
        /// first word is on its read-only allow-list; the model writes a numbered plan); the
        /// plan is printed at the end.
        #[arg(long)]
        plan: bool,
        /// The prompt, and `@path` arguments (Pi's file arguments, anywhere among them): a text
        /// file goes into the prompt as `<file name="/abs/path">\n…\n</file>`, an image (PNG,
        /// JPEG, GIF, WebP, BMP by content) as an image block with an empty `<file name>`
        /// marker. Text piped on stdin comes first, then the files, then the prompt, as Pi's
        /// print mode joins them.
        #[arg(value_name = "PROMPT | @FILE")]
        args: Vec<String>,
    },
    /// List the workspace folder's sessions, newest first, as Pi's `--resume` picker shows
    /// them: id, last activity, message entries, name or first prompt.
    Sessions {
        /// Workspace folder (default: the current folder).
        #[arg(long, default_value = ".")]
        workspace: PathBuf,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Serve the Agent Client Protocol (v1) on stdin/stdout: for Zed, JetBrains, and other
    /// ACP clients (docs/acp.md).
    Acp {
        /// Trust the session's folder: load its project configuration (.pi/settings.json,
        /// .pi/models.json, prompt templates, skills, SYSTEM.md, APPEND_SYSTEM.md).
        #[arg(long)]
        trust: bool,
        /// Model for new sessions as provider/id (default: settings, then the first provider
        /// with a key).
        #[arg(long)]
        model: Option<String>,
    },
    /// Launch a command for an ACP client's terminal (used by `pi-lsp acp`, not by people): lead
    /// a process group of its own, write its pid, apply the sandbox, exec the command
    /// (docs/acp.md "Terminals").
    #[command(hide = true)]
    SandboxExec(pi_lsp::sandbox_exec::Args),
    /// MCP servers (Pi's `pi mcp`).
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
}

#[derive(Subcommand)]
enum McpCommand {
    /// Connect to every enabled server and print its state, tools and errors; exit status 1
    /// when an entry is invalid or an enabled server did not connect.
    List {
        /// Workspace folder (default: the current folder).
        #[arg(long, default_value = ".")]
        workspace: PathBuf,
        /// Trust the workspace: read its .pi/mcp.json too.
        #[arg(long)]
        trust: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The number of async workers: `var` (tokio's `TOKIO_WORKER_THREADS`) when it is a positive
/// count, else `default`: one for the LSP server and `run` ([`ONE_WORKER`]), the machine's
/// parallelism but at most two for `acp` ([`acp_workers`]).
fn async_workers(var: Option<&str>, default: impl FnOnce() -> usize) -> usize {
    var.and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(default)
}

/// The LSP server's and `run`'s async workers: one. Their async work is I/O and the harness's
/// bookkeeping between a model's reads (the CPU-heavy parts, session parsing and search, run on
/// threads of their own or the blocking pool), and a second worker costs every tool round the
/// two workers waking each other (an `eventfd` write, a `futex` wait and wake, an `epoll_wait`
/// each time: 49.5 system calls a round with two, 26.6 with one) for an overlap that only a
/// whole answer arriving at once can use (docs/benchmarks.md, "Round 44"; measured before in
/// "Round 36"). `TOKIO_WORKER_THREADS` still sets the number.
const ONE_WORKER: usize = 1;

/// `acp`'s async workers when `TOKIO_WORKER_THREADS` does not say: the machine's parallelism
/// (`cores()`; 2 when unknown) but at most two (not measured with one: its session replay is
/// the case round 36 left open).
fn acp_workers(cores: impl FnOnce() -> Option<usize>) -> usize {
    cores().map_or(2, |n| n.min(2))
}

/// Pi's multi-letter short flags of `run` (`dist/cli/args.js`), which clap cannot declare (a
/// short flag is one letter), and the long flag each stands for.
const PI_SHORT_FLAGS: [(&str, &str); 4] = [
    ("-nbt", "--no-builtin-tools"),
    ("-nt", "--no-tools"),
    ("-na", "--no-approve"),
    // Pi's `-n <name>`: a clap short flag `-n` would take Pi's other `-n…` flags (`-nc`,
    // `-ns`) as `-n c`, a name.
    ("-n", "--name"),
];

/// `argv` with Pi's multi-letter short flags ([`PI_SHORT_FLAGS`]) of the `run` subcommand
/// written as their long forms, so that clap reads them: only where a flag stands (not as the
/// value of an option that takes one, e.g. `--system-prompt -nt`, and not after `--`).
fn rewrite_pi_short_flags(argv: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let cli = Cli::command();
    let Some(run) = cli.find_subcommand("run") else {
        return argv;
    };
    // The options of `run` that take a value, as typed (`--model`, `-t`, …).
    let takes_value: Vec<String> = run
        .get_arguments()
        .filter(|a| !a.is_positional() && a.get_action().takes_values())
        .flat_map(|a| {
            let long = a.get_long_and_visible_aliases().unwrap_or_default();
            let aliases = a.get_all_aliases().unwrap_or_default();
            long.into_iter()
                .chain(aliases)
                .map(|l| format!("--{l}"))
                .chain(a.get_short().map(|c| format!("-{c}")))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut out = Vec::with_capacity(argv.len());
    let mut args = argv.into_iter();
    // Up to the subcommand (the program's name, `--stdio`), as given.
    for a in args.by_ref() {
        let is_run = a == "run";
        out.push(a);
        if is_run {
            break;
        }
    }
    let mut value_next = false;
    for a in args.by_ref() {
        if a == "--" {
            out.push(a);
            break;
        }
        let text = a.to_str().unwrap_or_default();
        let long = (!value_next)
            .then(|| PI_SHORT_FLAGS.iter().find(|(short, _)| *short == text))
            .flatten();
        let flag = long.map_or(text, |(_, l)| *l);
        value_next = !value_next && takes_value.iter().any(|o| o == flag);
        out.push(long.map_or(a, |(_, long)| (*long).into()));
    }
    out.extend(args);
    out
}

fn main() -> anyhow::Result<()> {
    // Before anything else (no thread yet): see `memory`.
    pi_lsp::memory::fix_mmap_threshold();
    let cli = Cli::parse_from(rewrite_pi_short_flags(std::env::args_os().collect()));
    // The terminal launcher runs before anything else starts: no runtime threads, no logging
    // (the terminal shows its output); it becomes the command.
    let command = match cli.command {
        Some(Command::SandboxExec(args)) => std::process::exit(pi_lsp::sandbox_exec::run(args)),
        other => other,
    };
    // Informational lines go to the client (`window/logMessage`), not stderr; see `logging`.
    pi_lsp::logging::init(!matches!(
        command,
        Some(Command::Run { .. } | Command::Mcp { .. } | Command::Acp { .. })
    ));
    // One async worker for the server and `run`, at most two for `acp`, whatever the core
    // count ([`ONE_WORKER`], [`acp_workers`]): the async work is I/O, and each worker costs its
    // stack and a malloc arena: 8 workers (tokio's default on an 8-core machine) held 1.1 MB
    // more after 50 tool rounds than 2 (docs/benchmarks.md). Tokio's own
    // `TOKIO_WORKER_THREADS` (a positive count) still sets the number when given.
    let workers = async_workers(
        std::env::var("TOKIO_WORKER_THREADS").ok().as_deref(),
        || match command {
            Some(Command::Acp { .. }) => {
                acp_workers(|| std::thread::available_parallelism().ok().map(|n| n.get()))
            }
            _ => ONE_WORKER,
        },
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    // A write past the file-size limit fails (EFBIG) instead of ending the process.
    {
        let _runtime = rt.enter();
        pi_lsp::platform::signals::survive_file_size_limit();
    }
    match command {
        Some(Command::Sessions { workspace, json }) => {
            std::process::exit(pi_lsp::headless::list(&workspace, json));
        }
        Some(Command::Run {
            workspace,
            model,
            json,
            print: _,
            mode,
            provider,
            session_id,
            session_dir,
            name,
            list_models,
            api_key,
            fork,
            offline: _,
            verbose: _,
            approve,
            no_approve,
            approve_all,
            r#continue,
            session,
            no_session,
            thinking,
            system_prompt,
            append_system_prompt,
            tools,
            no_tools,
            no_builtin_tools,
            no_mcp,
            plan,
            args,
        }) => {
            pi_core::mcp::set_disabled(no_mcp);
            // MCP failures and configuration errors, once each (docs/mcp.md "Lifecycle").
            #[allow(clippy::print_stderr)]
            pi_core::mcp::set_reporter(std::sync::Arc::new(|text| eprintln!("{text}")));
            let resume = match (r#continue, session) {
                (true, _) => Some(pi_lsp::headless::Resume::Latest),
                (false, Some(s)) => Some(pi_lsp::headless::Resume::Session(s)),
                (false, None) => None,
            };
            let code = rt.block_on(pi_lsp::headless::run(pi_lsp::headless::RunArgs {
                workspace,
                model,
                json,
                mode,
                provider,
                session_id,
                session_dir,
                name,
                list_models,
                api_key,
                fork,
                trust: match (approve, no_approve) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
                approve: approve_all,
                resume,
                no_session,
                thinking,
                system_prompt,
                append_system_prompt,
                tools,
                no_tools,
                no_builtin_tools,
                plan,
                args,
            }));
            rt.block_on(pi_core::mcp::shutdown_all());
            rt.shutdown_timeout(std::time::Duration::from_millis(200));
            pi_core::sandbox::remove_temp_folders();
            std::process::exit(code);
        }
        Some(Command::Acp { trust, model }) => {
            // Every message on stdout is ACP's; logs go to stderr.
            let code = rt.block_on(async {
                tokio::spawn(pi_acp::serve_stdio(pi_acp::AcpOptions { trust, model }))
                    .await
                    .unwrap_or(1)
            });
            rt.shutdown_background();
            pi_core::sandbox::remove_temp_folders();
            std::process::exit(code);
        }
        Some(Command::Mcp {
            command:
                McpCommand::List {
                    workspace,
                    trust,
                    json,
                },
        }) => {
            let root = workspace.canonicalize().unwrap_or(workspace);
            let agent_dir = pi_ai::models::agent_dir();
            // `--trust`, else as Pi 1.6 decides (its trust store, then defaultProjectTrust).
            let trusted = pi_core::trust::resolve_project_trust(
                &root,
                agent_dir.as_deref(),
                trust.then_some(true),
            )
            .trusted;
            let (text, code) = rt.block_on(pi_core::mcp::cli::list(
                &root,
                agent_dir.as_deref(),
                trusted,
                json,
            ));
            pi_lsp::headless::print_out(&text);
            rt.block_on(pi_core::mcp::shutdown_all());
            rt.shutdown_timeout(std::time::Duration::from_millis(200));
            std::process::exit(code);
        }
        Some(Command::SandboxExec(args)) => std::process::exit(pi_lsp::sandbox_exec::run(args)),
        Some(Command::Lsp) | None => {
            let _ = cli.stdio;
            // Every way the server goes away (shutdown/exit, end of input, SIGTERM/SIGHUP/
            // SIGINT) stops the sessions first; see `pi_lsp::shutdown` for the exit codes.
            // On a worker, not on this thread: every event a run sends wakes the server's
            // output loop, and a worker wakes it without a thread hand-off.
            let code = rt.block_on(async {
                tokio::spawn(pi_lsp::shutdown::serve_stdio())
                    .await
                    .unwrap_or_else(|e| {
                        tracing::error!("the server loop failed: {e}");
                        1
                    })
            });
            // A stdin reader on tokio's stdin (a terminal, a file) blocks on a thread until the
            // client closes it; exiting must not wait for that.
            rt.shutdown_background();
            pi_core::sandbox::remove_temp_folders();
            std::process::exit(code);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{async_workers, rewrite_pi_short_flags};

    fn rewrite(args: &[&str]) -> Vec<String> {
        rewrite_pi_short_flags(args.iter().map(Into::into).collect())
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    /// Pi's `-nbt`, `-nt` and `-na` where a flag of `run` stands; as they are given as the
    /// value of an option, after `--`, and outside `run`.
    #[test]
    fn pi_s_multi_letter_short_flags_are_read_as_their_long_forms() {
        assert_eq!(
            rewrite(&["pi-lsp", "run", "-nbt", "--model", "m/x", "-nt", "hi", "-na"]),
            [
                "pi-lsp",
                "run",
                "--no-builtin-tools",
                "--model",
                "m/x",
                "--no-tools",
                "hi",
                "--no-approve"
            ]
        );
        assert_eq!(
            rewrite(&["pi-lsp", "run", "--system-prompt", "-nt", "-t", "-nbt", "x"]),
            ["pi-lsp", "run", "--system-prompt", "-nt", "-t", "-nbt", "x"]
        );
        assert_eq!(
            rewrite(&["pi-lsp", "--stdio", "run", "--", "-nbt", "-nt"]),
            ["pi-lsp", "--stdio", "run", "--", "-nbt", "-nt"]
        );
        assert_eq!(
            rewrite(&["pi-lsp", "acp", "-nbt"]),
            ["pi-lsp", "acp", "-nbt"]
        );
        // Pi's `-n <name>`: its value is a value (`-nt` as a name stays `-nt`).
        assert_eq!(
            rewrite(&["pi-lsp", "run", "-n", "-nt", "-nt", "hi"]),
            ["pi-lsp", "run", "--name", "-nt", "--no-tools", "hi"]
        );
        // The rewritten line parses: `-nbt` is `--no-builtin-tools`.
        let cli = <super::Cli as clap::Parser>::try_parse_from(rewrite(&[
            "pi-lsp", "run", "-nbt", "-nt", "-na", "hi",
        ]))
        .unwrap();
        match cli.command {
            Some(super::Command::Run {
                no_builtin_tools,
                no_tools,
                no_approve,
                args,
                ..
            }) => assert_eq!(
                (no_builtin_tools, no_tools, no_approve, args),
                (true, true, true, vec!["hi".to_string()])
            ),
            _ => panic!("not run"),
        }
    }

    /// `TOKIO_WORKER_THREADS` (a positive count) sets the number; else one for the server and
    /// `run`, and for `acp` the cores but at most two.
    #[test]
    fn tokio_worker_threads_sets_the_count_else_one_and_acp_at_most_two() {
        let one = || super::ONE_WORKER;
        assert_eq!(async_workers(None, one), 1);
        assert_eq!(async_workers(Some("2"), one), 2);
        assert_eq!(async_workers(Some(" 4 "), one), 4);
        assert_eq!(async_workers(Some("0"), one), 1);
        assert_eq!(async_workers(Some("many"), one), 1);
        let acp = |cores: Option<usize>| move || super::acp_workers(|| cores);
        assert_eq!(async_workers(None, acp(Some(8))), 2);
        assert_eq!(async_workers(None, acp(Some(1))), 1);
        assert_eq!(async_workers(None, acp(None)), 2);
        assert_eq!(async_workers(Some("1"), acp(Some(8))), 1);
        assert_eq!(async_workers(Some("0"), acp(Some(8))), 2);
    }
}
