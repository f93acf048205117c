//! `mock-model`: the one loopback model (`pi_e2e::mock_model`) as a process, for the suites
//! that are not cargo tests (the Neovim specs, the code-server e2e, the benchmarks).
//!
//!     mock-model SCRIPT.json [LOG.jsonl]
//!
//! SCRIPT is the JSON script of `pi_e2e::mock_script` (ordered steps, rules on the last user
//! message, paced streams, tool rounds). The server listens on 127.0.0.1 on a free port and
//! prints that port, alone, as the first line of stdout; it serves
//! `POST /v1/chat/completions` (openai-completions) and `POST /v1/messages`
//! (anthropic-messages) until it is killed. Every request body is appended to LOG as one JSON
//! line before it is answered. A request breaking tool-call pairing is answered with HTTP 400
//! and named on stderr. A bad script or an unwritable log: the reason on stderr, exit code 2.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::process::ExitCode;

use pi_e2e::mock_script::Script;

const USAGE: &str = "usage: mock-model SCRIPT.json [LOG.jsonl]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (script_path, log_path) = match args.as_slice() {
        [s] if s != "-h" && s != "--help" => (s, None),
        [s, l] => (s, Some(l)),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let script = match std::fs::read_to_string(script_path)
        .map_err(|e| e.to_string())
        .and_then(|t| Script::parse(&t))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("mock-model: {script_path}: {e}");
            return ExitCode::from(2);
        }
    };
    let log = match log_path.map(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .map_err(|e| format!("{p}: {e}"))
    }) {
        None => None,
        Some(Ok(f)) => Some(f),
        Some(Err(e)) => {
            eprintln!("mock-model: cannot open the request log {e}");
            return ExitCode::from(2);
        }
    };
    // One thread: a request is answered where it is read, with no hand-over between threads
    // to wait for on a loaded machine (the benchmarks subtract this server's own time).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mock-model: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async move {
        let mock = script.start().await;
        // The log keeps them; the process may serve for hours (the benchmarks).
        mock.forget_requests();
        if let Some(f) = log {
            mock.log_requests(f);
        }
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{}", mock.addr.port())
            .and_then(|()| out.flush())
            .is_err()
        {
            return ExitCode::from(2);
        }
        drop(out);
        std::future::pending::<ExitCode>().await
    })
}
