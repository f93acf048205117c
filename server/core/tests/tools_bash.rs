//! The `bash` tool against real processes: cases BASH-01 (background child holds the pipes),
//! BASH-03 (the whole group dies on abort and timeout, also when SIGTERM is ignored), BASH-04
//! (huge output: tail, clipped lines, spill file, UTF-8 boundaries, exit code).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pi_core::agent::{Tool, ToolContext, ToolError, ToolOutput};
use pi_core::tools::BashTool;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

fn bash() -> BashTool {
    BashTool::new(std::env::temp_dir(), None)
}

fn ctx(cancel: CancellationToken) -> ToolContext {
    ToolContext {
        call_id: "call_b".into(),
        turn: 1,
        cancel,
        on_update: Arc::new(|_| {}),
        model_input: None,
    }
}

async fn run(args: Value) -> Result<ToolOutput, ToolError> {
    bash().execute(ctx(CancellationToken::new()), args).await
}

fn text_of(out: &ToolOutput) -> String {
    match &out.content[0] {
        pi_ai::ContentBlock::Text(t) => t.text.clone(),
        other => panic!("not text: {other:?}"),
    }
}

/// Live (not zombie) processes whose command line contains `marker`.
fn survivors(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let state = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let zombie = state
            .rfind(')')
            .map(|i| state[i + 1..].trim_start().starts_with('Z'))
            .unwrap_or(true);
        if cmd.contains(marker) && !zombie && !cmd.contains("pgrep") {
            out.push(cmd);
        }
    }
    out
}

fn full_output_path(out: &Value) -> PathBuf {
    PathBuf::from(out["fullOutputPath"].as_str().unwrap())
}

#[tokio::test]
async fn bash01_background_child_does_not_hang() {
    let t = Instant::now();
    let out = run(json!({"command": "sleep 3 & echo done"}))
        .await
        .unwrap();
    assert_eq!(text_of(&out), "done\n");
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let out = run(json!({"command": "(for i in $(seq 1 60); do echo tick; sleep 0.05; done) & sleep 0.3; echo fg-done"}))
        .await
        .unwrap();
    assert!(text_of(&out).contains("fg-done"));
    assert!(
        t.elapsed() < Duration::from_millis(1800),
        "{:?}",
        t.elapsed()
    );
}

/// Aborts `command` after 500 ms; every process of it must be gone within 500 ms of the abort.
async fn abort_kills_everything(command: &str, marker: &str) {
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    let aborted_at = Arc::new(std::sync::Mutex::new(None));
    let at = aborted_at.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        *at.lock().unwrap() = Some(Instant::now());
        c2.cancel();
    });
    let err = bash()
        .execute(ctx(cancel), json!({"command": command}))
        .await
        .unwrap_err();
    let took = aborted_at.lock().unwrap().unwrap().elapsed();
    assert!(err.message.ends_with("Command aborted"), "{}", err.message);
    assert_eq!(err.details, Some(json!({"exitCode": null})));
    assert_eq!(survivors(marker), Vec::<String>::new());
    assert!(
        took < Duration::from_millis(500),
        "ended {took:?} after the abort"
    );
}

#[tokio::test]
#[cfg(unix)] // signals the background process
async fn bash01_sleep_100_in_background_does_not_hang() {
    let t = Instant::now();
    let out = run(json!({"command": "sleep 100.21 & echo done"}))
        .await
        .unwrap();
    assert_eq!(text_of(&out), "done\n");
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    // The next call is not blocked by the background sleep.
    let t = Instant::now();
    let out = run(json!({"command": "echo next"})).await.unwrap();
    assert_eq!(text_of(&out), "next\n");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    // Documented: the background process is left running in its group; clean it up here.
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains("sleep\u{0}100.21") {
            if let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

#[tokio::test]
async fn bash03_abort_kills_group_within_500ms() {
    abort_kills_everything(
        "sleep 300.11 & (sleep 301.11 & wait) ; sleep 302.11",
        ".11 ",
    )
    .await;
}

#[tokio::test]
async fn bash03_trap_term_is_killed() {
    abort_kills_everything("sh -c 'trap \"\" TERM; sleep 303.12'", "303.12").await;
}

#[tokio::test]
async fn bash03_tree_of_eight_children_ends() {
    abort_kills_everything(
        "for i in 1 2 3 4 5 6 7 8; do (trap '' TERM; sleep 304.13) & done; wait",
        "304.13",
    )
    .await;
}

#[tokio::test]
async fn bash03_abort_during_yes_head() {
    abort_kills_everything(
        "yes pi-bash-yes-14 | head -c 1G > /dev/null; sleep 305.14",
        "305.14",
    )
    .await;
    assert_eq!(survivors("pi-bash-yes-14"), Vec::<String>::new());
}

#[tokio::test]
async fn bash03_timeout_uses_the_same_path() {
    let t = Instant::now();
    let err = run(
        json!({"command": "echo before; sh -c 'trap \"\" TERM; sleep 306.15'", "timeout": 0.5}),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.message,
        "before\n\n\nCommand timed out after 0.5 seconds"
    );
    assert_eq!(err.details, Some(json!({"exitCode": null})));
    assert!(
        t.elapsed() < Duration::from_millis(1200),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(survivors("306.15"), Vec::<String>::new());
}

#[tokio::test]
async fn exit_code_is_an_error_with_output() {
    let err = run(json!({"command": "echo out; echo err >&2; exit 3"}))
        .await
        .unwrap_err();
    assert_eq!(err.message, "out\nerr\n\n\nCommand exited with code 3");
    assert_eq!(err.details, Some(json!({"exitCode": 3})));
}

/// `details.exitCode` is the process's status (a number), `null` when it did not exit on its
/// own; it never comes from the text (a command may print Pi's status line itself).
#[tokio::test]
async fn exit_code_in_details_comes_from_the_process_status() {
    let ok = run(json!({"command": "echo 'Command exited with code 7'"}))
        .await
        .unwrap();
    assert_eq!(text_of(&ok), "Command exited with code 7\n");
    assert_eq!(ok.details, Some(json!({"exitCode": 0})));
    let failed = run(json!({"command": "echo 'Command exited with code 7'; exit 2"}))
        .await
        .unwrap_err();
    assert_eq!(failed.details, Some(json!({"exitCode": 2})));
    let killed = run(json!({"command": "kill -KILL $$"})).await.unwrap_err();
    assert_eq!(
        (killed.message.as_str(), killed.details),
        (
            "(no output)\n\nCommand was killed by signal 9",
            Some(json!({"exitCode": null}))
        )
    );
    // Cut output: Pi's keys, and the exit code beside them.
    let cut = run(json!({"command": "seq 3000; exit 5"}))
        .await
        .unwrap_err();
    let details = cut.details.clone().unwrap();
    let path = full_output_path(&details);
    let mut keys: Vec<&str> = details
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(keys, ["exitCode", "fullOutputPath", "truncation"]);
    assert_eq!(details["exitCode"], json!(5));
    std::fs::remove_file(path).unwrap();
}

#[tokio::test]
async fn bash04_seq_3000_keeps_tail_and_spills() {
    let out = run(json!({"command": "seq 3000"})).await.unwrap();
    let details = out.details.clone().unwrap();
    let path = full_output_path(&details);
    // Pi 1.6 counts lines as truncate.js `splitLinesForCounting`: the final newline ends line
    // 3000, the tail is lines 1001-3000 joined by newlines.
    let expected = (1001..=3000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join("\n");
    let got = text_of(&out);
    let want = format!(
        "{expected}\n\n[Showing lines 1001-3000 of 3000. Full output: {}]",
        path.display()
    );
    assert!(
        got == want,
        "head {:?} tail {:?}",
        &got[..40],
        &got[got.len() - 120..]
    );
    let full: String = (1..=3000).map(|i| format!("{i}\n")).collect();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), full);
    std::fs::remove_file(path).unwrap();
}

#[tokio::test]
async fn bash04_long_line_is_clipped_with_marker() {
    let out = run(json!({"command": "printf 'needle '; head -c 120000 /dev/zero | tr '\\0' x; echo; echo after"}))
        .await
        .unwrap();
    let details = out.details.clone().unwrap();
    let path = full_output_path(&details);
    assert_eq!(
        text_of(&out),
        format!(
            "needle {}... [line truncated: 120007 bytes]\nafter\n\n\n[1 line(s) longer than 2000 bytes were cut. Full output: {}]",
            "x".repeat(1993),
            path.display()
        )
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 120007 + 7);
    std::fs::remove_file(path).unwrap();
}

#[tokio::test]
async fn bash04_huge_output_bounded_and_utf8_safe() {
    // 10,000 × é on one line, then a cut inside a character, then 300 MB of 'a' without newline.
    let out = run(json!({"command": "for i in $(seq 1 10000); do printf 'é'; done; echo; printf '\\xc3' ; echo; head -c 300000000 /dev/zero | tr '\\0' a; exit 4"}))
        .await
        .unwrap_err();
    let details = out.details.clone().unwrap();
    let path = full_output_path(&details);
    let text = out.message;
    assert!(
        text.starts_with(&format!(
            "{}... [line truncated: 20000 bytes]\n\u{FFFD}\n",
            "é".repeat(1000)
        )),
        "{}",
        &text[..200]
    );
    assert!(text.ends_with(&format!("... [line truncated: 300000000 bytes]\n\n[2 line(s) longer than 2000 bytes were cut. Full output: {}]\n\nCommand exited with code 4", path.display())));
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        20000 + 1 + 2 + 300_000_000
    );
    assert_eq!(details["truncation"]["totalBytes"], json!(300_020_003u64));
    std::fs::remove_file(path).unwrap();
}

/// Issue "clients, round 2" item 12: the model reads what a terminal would show — colours,
/// cursor moves and OSC links gone, `\r` progress collapsed to its last state, CRLF endings
/// plain — while the live updates keep the raw bytes for the editor to render.
#[tokio::test]
async fn the_model_reads_output_without_escape_codes() {
    let updates = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = updates.clone();
    let ctx = ToolContext {
        on_update: Arc::new(move |o: ToolOutput| {
            if let Some(pi_ai::ContentBlock::Text(t)) = o.content.first() {
                seen.lock().unwrap().push(t.text.clone());
            }
        }),
        ..ctx(CancellationToken::new())
    };
    let command = r"sleep 0.2; printf '\033[1;32mCompiling\033[0m app\n'; sleep 0.3; printf 'Downloading 10%%\rDownloading 55%%\rDownloading 100%%\n'; printf '\033]8;;https://example.com\033\\link\033]8;;\033\\ done\r\n'; printf '\033[2K\033[1Gwarning: \033[4mx\033[24m unused\n'";
    let out = bash()
        .execute(ctx, json!({"command": command}))
        .await
        .unwrap();
    assert_eq!(
        text_of(&out),
        "Compiling app\nDownloading 100%\nlink done\nwarning: x unused\n"
    );
    let raw = updates.lock().unwrap().join("");
    assert!(raw.contains("\u{1b}[1;32mCompiling"), "{raw:?}");
}

/// Output written inside the 100 ms gap after a progress update is sent when the gap ends,
/// while the command still runs: `printf 'a\n'; printf 'end\n'` arrives as two writes, and the
/// second must be shown during the `sleep`, not only when the command ends.
#[tokio::test]
async fn progress_shows_the_last_write_while_the_command_waits() {
    let updates: Arc<std::sync::Mutex<Vec<(Duration, String)>>> = Arc::default();
    let seen = updates.clone();
    let t0 = Instant::now();
    let ctx = ToolContext {
        on_update: Arc::new(move |o: ToolOutput| {
            let t = match &o.content[0] {
                pi_ai::ContentBlock::Text(t) => t.text.clone(),
                other => panic!("not text: {other:?}"),
            };
            seen.lock().unwrap().push((t0.elapsed(), t));
        }),
        ..ctx(CancellationToken::new())
    };
    let out = bash()
        .execute(
            ctx,
            json!({"command": "sleep 0.2; printf 'first\\n'; printf 'end\\n'; sleep 1.5; printf 'after\\n'"}),
        )
        .await
        .unwrap();
    assert_eq!(text_of(&out), "first\nend\nafter\n");
    let updates = updates.lock().unwrap().clone();
    // Both earlier lines are shown before the command's last write (t ≥ 1.7 s), well inside the sleep.
    let shown = updates
        .iter()
        .find(|(_, text)| text == "first\nend\n")
        .unwrap_or_else(|| panic!("no update showed both lines: {updates:?}"));
    assert!(shown.0 < Duration::from_millis(1200), "{updates:?}");
}

/// A command with no output: Pi 1.6's `formatOutput(snapshot, "")` on the aborted and
/// timed-out paths (the status alone), `(no output)` before the status when it exited.
#[tokio::test]
async fn a_silent_commands_status_stands_alone_as_pi_1_6_words_it() {
    let timed_out = run(json!({"command": "sleep 307.16", "timeout": 0.3}))
        .await
        .unwrap_err();
    assert_eq!(timed_out.message, "Command timed out after 0.3 seconds");
    let exited = run(json!({"command": "exit 3"})).await.unwrap_err();
    assert_eq!(exited.message, "(no output)\n\nCommand exited with code 3");
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        c2.cancel();
    });
    let aborted = bash()
        .execute(ctx(cancel), json!({"command": "sleep 307.17"}))
        .await
        .unwrap_err();
    assert_eq!(aborted.message, "Command aborted");
}
