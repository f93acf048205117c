//! Appends user messages to a session file forever, printing `ack N` after each entry is
//! written (one `write` into the kernel: a process kill cannot lose it; `sync` is for power
//! loss and is not needed here). Used by the crash test (`tests/sessions.rs`), which kills it with
//! SIGKILL at random points. Usage: `session_append DIR_OR_FILE PREFIX MAX`: after MAX entries
//! it waits to be killed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::Write;
use std::path::Path;

use pi_ai::Message;
use pi_core::session::SessionWriter;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let target = Path::new(&args[1]);
    let prefix = &args[2];
    let max: usize = args[3].parse().unwrap();
    let mut w = if target.is_dir() {
        let w = SessionWriter::create(target, Path::new("/ws"), "p", "m", "off").unwrap();
        println!("file {}", w.path().display());
        w
    } else {
        SessionWriter::open(target).unwrap().0
    };
    let mut out = std::io::stdout().lock();
    for n in 0..max {
        // Large entries make a kill in the middle of a write likely.
        let text = format!("{prefix}-{n} {}", "x".repeat(n % 7 * 300));
        w.append_message(&Message::user_text(text)).unwrap();
        writeln!(out, "ack {prefix}-{n}").unwrap();
        out.flush().unwrap();
    }
    std::thread::sleep(std::time::Duration::from_secs(3600));
}
