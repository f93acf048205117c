//! The `pi-lsp` binary: with no subcommand (or `lsp`), an LSP server on stdio; `run` is the
//! headless main job. Warnings and errors go to stderr, informational lines to the client as
//! `window/logMessage` (`PI_LSP_LOG` sets the level and, when set, sends every line to stderr
//! too; see [`pi_lsp::logging`]); stdout belongs to the protocol.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

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
        /// Trust the workspace: load its project configuration (.pi/settings.json,
        /// .pi/models.json, prompt templates, skills, SYSTEM.md, APPEND_SYSTEM.md).
        #[arg(long)]
        trust: bool,
        /// Approve every tool call (approvalPolicy "approve-all" for this run); without it a
        /// call the policy would ask about is not run (nobody can answer here).
        #[arg(long)]
        approve: bool,
        /// The prompt.
        prompt: String,
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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Informational lines go to the client (`window/logMessage`), not stderr; see `logging`.
    pi_lsp::logging::init(!matches!(
        cli.command,
        Some(Command::Run { .. } | Command::Acp { .. })
    ));
    // At most two async workers whatever the core count: the async work is I/O (the CPU-heavy
    // parts, session parsing and search, run on threads of their own or the blocking pool), and
    // each worker costs its stack and a malloc arena: 8 workers (tokio's default on an 8-core
    // machine) held 1.1 MB more after 50 tool rounds than 2 (docs/benchmarks.md).
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(2));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    match cli.command {
        Some(Command::Run {
            workspace,
            model,
            json,
            trust,
            approve,
            prompt,
        }) => {
            let code = rt.block_on(pi_lsp::headless::run(pi_lsp::headless::RunArgs {
                workspace,
                model,
                json,
                trust,
                approve,
                prompt,
            }));
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
