//! LSPX-03: the editor going away. The real `pi-lsp` (over stdio, with a real LSP client, a
//! loopback mock model and real shell processes) is sent SIGTERM, SIGHUP or SIGINT, has its
//! stdin closed, or gets `exit` (with or without `shutdown` first) while a `bash` tool call
//! runs (a shell with two background `sleep 60` children), while the model streams, or while
//! the user's own `agent/bash` command runs; `pi-lsp run` gets SIGTERM and SIGINT during a tool
//! call. Each test checks, within 2 s of the event: the process exited with the documented
//! code, no process of the tool's group survives (the pids the command printed, and anything
//! else in its process group, read from /proc), the session file's last entries are the
//! paired aborted tool result and the aborted assistant message as Pi 0.73.1 writes them
//! (`Command aborted`, `isError: true`; `stopReason: "aborted"`), every line parses, and the
//! session's lock is free (the `.lock` file is gone and an exclusive `flock` on its path is
//! granted at once).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pi_e2e::lsp_client::{agent_env, start_with_mock, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{pi_lsp_bin, TempDir};
use serde_json::{json, Value};

/// The shell command the model runs: two background sleeps and the shell itself print their
/// pids (and append them to `pids` in the workspace), then the shell waits for both.
const COMMAND: &str = "sleep 60 & echo $! | tee -a pids; sleep 60 & echo $! | tee -a pids; echo $$ | tee -a pids; wait";

/// The whole window the server has, from the event to its exit.
const WINDOW: Duration = Duration::from_secs(2);

/// How the editor goes away.
#[derive(Debug, Clone, Copy)]
enum Away {
    Signal(i32),
    CloseStdin,
    ShutdownThenExit,
    ExitOnly,
}

impl Away {
    fn expected_code(self) -> i32 {
        match self {
            Away::Signal(n) => 128 + n,
            Away::ShutdownThenExit => 0,
            Away::CloseStdin | Away::ExitOnly => 1,
        }
    }
}

const SIGHUP: i32 = 1;
const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

/// `(state, process group)` of a live process, `None` once it is gone (or a zombie).
fn proc_state(pid: i32) -> Option<(String, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.to_string();
    let pgrp = f.nth(1)?.parse().ok()?;
    (state != "Z" && state != "X").then_some((state, pgrp))
}

/// Live processes whose process group is `pgid`.
fn group_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| proc_state(*pid).is_some_and(|(_, g)| g == pgid))
        .collect()
}

/// The three pids the command wrote to `ws/pids` (background sleeps, then the shell), once all
/// are there and alive.
async fn wait_for_pids(ws: &Path) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let pids: Vec<i32> = std::fs::read_to_string(ws.join("pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if pids.len() == 3 && pids.iter().all(|p| proc_state(*p).is_some()) {
            return pids;
        }
        assert!(
            Instant::now() < deadline,
            "the command never printed its pids"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The only session file of `ws` and its lines, each of which must parse.
fn session_file(ws: &Path) -> (PathBuf, Vec<Value>) {
    let dir = ws.join(".pi/sessions");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(text.ends_with('\n'), "the file ends inside a line");
    let lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("line {} does not parse: {e}", i + 1))
        })
        .collect();
    (files[0].clone(), lines)
}

/// The lock of `session` is free: its `.lock` file was removed and an exclusive `flock` on
/// that path is granted at once.
fn assert_lock_free(session: &Path) {
    let lock = session.with_extension("jsonl.lock");
    assert!(!lock.exists(), "{} was left behind", lock.display());
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock)
        .unwrap();
    f.try_lock().expect("the session's lock is still held");
    drop(f);
    std::fs::remove_file(&lock).unwrap();
}

/// A message entry's message without its timestamp.
fn message(entry: &Value) -> Value {
    assert_eq!(entry["type"], "message", "{entry}");
    let mut m = entry["message"].clone();
    let o = m.as_object_mut().unwrap();
    o.remove("timestamp");
    // Pi 1.6's stamps (assistant messages: `thinkingLevel` and `durationMs`; tool results:
    // `durationMs`): their types checked here, their values vary from run to run.
    if let Some(d) = o.remove("durationMs") {
        assert!(d.is_u64(), "durationMs: {d}");
    }
    if let Some(t) = o.remove("thinkingLevel") {
        assert!(t.is_string(), "thinkingLevel: {t}");
    }
    m
}

/// The last two entries are the aborted command's paired result (its printed pids kept) and
/// the aborted assistant message, as Pi writes them on abort.
fn assert_aborted_tool_run(lines: &[Value], pids: &[i32]) {
    let n = lines.len();
    assert!(n >= 6, "{lines:#?}");
    let call = message(&lines[n - 3]);
    assert_eq!(
        (
            &call["role"],
            &call["stopReason"],
            &call["content"][0]["id"]
        ),
        (&json!("assistant"), &json!("toolUse"), &json!("call_sleep"))
    );
    let printed: String = pids.iter().map(|p| format!("{p}\n")).collect();
    // Key by key what Pi 0.73.1 wrote for the same aborted command (`details: {}`), plus
    // pi-lsp's `details.exitCode` (`null`: the command was killed).
    assert_eq!(
        message(&lines[n - 2]),
        json!({"role": "toolResult", "toolCallId": "call_sleep", "toolName": "bash",
            "content": [{"type": "text", "text": format!("{printed}\n\nCommand aborted")}],
            "details": {"exitCode": null}, "isError": true})
    );
    assert_aborted_assistant(&lines[n - 1], json!([]));
}

/// `entry` is the aborted assistant message with `content`, as Pi 1.6.0 writes it: `Request
/// aborted` for the request that followed an aborted tool call (aborted before any answer),
/// `Request was aborted` for a chat-completions stream cut while it was read.
/// A stream cut while it was read also keeps the response id it had streamed, as Pi does.
fn assert_aborted_assistant(entry: &Value, content: Value) {
    let before_answer = content == json!([]);
    let error = if before_answer {
        "Request aborted"
    } else {
        "Request was aborted"
    };
    let zero = json!({"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 0,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}});
    let mut expected = json!({"role": "assistant", "content": content, "api": "openai-completions",
        "provider": "mock", "model": "mock-1", "usage": zero, "stopReason": "aborted",
        "errorMessage": error});
    if !before_answer {
        expected["responseId"] = json!("chatcmpl-mock1");
    }
    assert_eq!(message(entry), expected);
}

/// Every pid the command printed, and every other member of its process group, is gone.
fn assert_group_gone(pids: &[i32]) {
    let alive: Vec<(i32, Option<(String, i32)>)> = pids
        .iter()
        .map(|p| (*p, proc_state(*p)))
        .filter(|(_, s)| s.is_some())
        .collect();
    // The shell (the last pid) leads the group.
    let members = group_members(pids[2]);
    // Survivors are killed before the test fails, so a failure leaves no orphans behind.
    for p in alive.iter().map(|(p, _)| *p).chain(members.iter().copied()) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &p.to_string()])
            .status();
    }
    assert_eq!(alive, Vec::new(), "processes of the tool survived");
    assert_eq!(
        members,
        Vec::<i32>::new(),
        "processes of the tool's group survived"
    );
}

/// Events of the run being stopped that were on their way when the editor went away are not
/// errors: nothing about them reaches stderr (editors show stderr as errors).
fn assert_no_send_failures(c: &LspClient) {
    let stderr = c.stderr.lock().unwrap().clone();
    assert!(
        !stderr.contains("failed to send"),
        "stderr reports notifications the gone editor could not get:\n{stderr}"
    );
}

/// Makes the editor go away as `away` says; returns when the process exited (or panics after
/// the window) with its exit code and how long it took.
async fn go_away(c: &mut LspClient, away: Away) -> (i32, Duration) {
    let t0 = Instant::now();
    match away {
        Away::Signal(n) => c.signal(n),
        Away::CloseStdin => c.close_stdin().await,
        Away::ShutdownThenExit => {
            assert_eq!(c.request("shutdown", Value::Null).await, Ok(Value::Null));
            c.notify("exit", Value::Null).await;
        }
        Away::ExitOnly => c.notify("exit", Value::Null).await,
    }
    let status = c
        .wait_exit(WINDOW + Duration::from_secs(3))
        .await
        .expect("the server did not exit");
    let took = t0.elapsed();
    assert!(
        took < WINDOW,
        "the server took {took:?} to go away ({away:?})"
    );
    (status.code().expect("exited with a code"), took)
}

/// A workspace, a mock model answering with the shell command (then hanging, should anything
/// more be asked), and the server on them.
async fn start(name: &str, script: Vec<Step>) -> (TempDir, PathBuf, MockModel, LspClient) {
    let tmp = TempDir::new(name);
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mock = MockModel::start(script).await;
    let c = start_with_mock(&ws, &mock, EditorBehavior::default()).await;
    (tmp, ws, mock, c)
}

fn tool_script() -> Vec<Step> {
    vec![
        Step::call("call_sleep", "bash", json!({"command": COMMAND})),
        Step::Hang(String::new()),
    ]
}

/// The editor goes away (`away`) while the model's `bash` call runs.
async fn during_a_tool_run(name: &str, away: Away) {
    let (_tmp, ws, _mock, mut c) = start(name, tool_script()).await;
    c.request("agent/prompt", json!({"text": "go"}))
        .await
        .unwrap();
    let pids = wait_for_pids(&ws).await;
    let (code, took) = go_away(&mut c, away).await;
    assert_eq!(
        code,
        away.expected_code(),
        "{away:?}; stderr: {}",
        c.stderr.lock().unwrap()
    );
    assert_no_send_failures(&c);
    assert_group_gone(&pids);
    let (file, lines) = session_file(&ws);
    assert_aborted_tool_run(&lines, &pids);
    assert_lock_free(&file);
    eprintln!("{name}: exited {code} after {took:?}");
}

/// The editor goes away (`away`) while the model streams its answer.
async fn during_a_stream(name: &str, away: Away) {
    let (_tmp, ws, _mock, mut c) = start(name, vec![Step::Hang("thinking it over".into())]).await;
    c.request("agent/prompt", json!({"text": "go"}))
        .await
        .unwrap();
    loop {
        let n = c
            .next_notification(Duration::from_secs(10))
            .await
            .expect("the model never streamed");
        if n["params"]["event"]["type"] == "message_update" {
            break;
        }
    }
    // Everything the mock streams before it hangs has arrived.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (code, took) = go_away(&mut c, away).await;
    assert_eq!(
        code,
        away.expected_code(),
        "{away:?}; stderr: {}",
        c.stderr.lock().unwrap()
    );
    assert_no_send_failures(&c);
    let (file, lines) = session_file(&ws);
    let n = lines.len();
    assert_eq!(
        message(&lines[n - 2]),
        json!({"role": "user", "content": [{"type": "text", "text": "go"}]})
    );
    assert_aborted_assistant(
        &lines[n - 1],
        json!([{"type": "text", "text": "thinking it over"}]),
    );
    assert_lock_free(&file);
    eprintln!("{name}: exited {code} after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_tool_run() {
    during_a_tool_run("lc-term", Away::Signal(SIGTERM)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_during_a_tool_run() {
    during_a_tool_run("lc-hup", Away::Signal(SIGHUP)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_during_a_tool_run() {
    during_a_tool_run("lc-int", Away::Signal(SIGINT)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_closed_during_a_tool_run() {
    during_a_tool_run("lc-eof", Away::CloseStdin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_and_exit_during_a_tool_run() {
    during_a_tool_run("lc-shutdown", Away::ShutdownThenExit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_without_shutdown_during_a_tool_run() {
    during_a_tool_run("lc-exit", Away::ExitOnly).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_the_model_streams() {
    during_a_stream("lc-stream-term", Away::Signal(SIGTERM)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_closed_while_the_model_streams() {
    during_a_stream("lc-stream-eof", Away::CloseStdin).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_while_the_model_streams() {
    during_a_stream("lc-stream-exit", Away::ExitOnly).await;
}

/// The user's own `agent/bash` command is killed too, and stored as Pi stores a cancelled
/// one (`bashExecution`, `cancelled: true`); its request is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_closed_during_a_user_command() {
    let (_tmp, ws, _mock, mut c) = start("lc-user-bash", Vec::new()).await;
    let s = c.request("agent/session/new", json!({})).await.unwrap();
    let sid = s["sessionId"].as_str().unwrap().to_string();
    let answer = c
        .send_request("agent/bash", json!({"sessionId": sid, "command": COMMAND}))
        .await;
    let pids = wait_for_pids(&ws).await;
    let (code, _) = go_away(&mut c, Away::CloseStdin).await;
    assert_eq!(code, 1);
    assert_group_gone(&pids);
    let printed: String = pids.iter().map(|p| format!("{p}\n")).collect();
    let answer = tokio::time::timeout(Duration::from_secs(1), answer)
        .await
        .expect("agent/bash was not answered")
        .unwrap();
    let (file, lines) = session_file(&ws);
    assert_eq!(
        answer["result"],
        json!({"output": printed, "exitCode": null, "cancelled": true, "truncated": false,
            "entryId": lines.last().unwrap()["id"]})
    );
    assert_eq!(
        message(lines.last().unwrap()),
        json!({"role": "bashExecution", "command": COMMAND, "output": printed,
            "exitCode": null, "cancelled": true, "truncated": false})
    );
    assert_lock_free(&file);
}

/// `pi-lsp run` on `signal` during the tool call: the same cleanup, exit 128 + n.
async fn headless(name: &str, signal: i32) {
    let tmp = TempDir::new(name);
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mock = MockModel::start(tool_script()).await;
    let env = agent_env(&tmp.path().join("agent"), &mock.models_json(), &[]);
    let mut cmd = tokio::process::Command::new(pi_lsp_bin());
    cmd.args([
        "run",
        "--approve-all",
        "--model",
        "mock/mock-1",
        "--workspace",
    ])
    .arg(&ws)
    .arg("go")
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .kill_on_drop(true);
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let pids = wait_for_pids(&ws).await;
    let t0 = Instant::now();
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().unwrap().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let status = tokio::time::timeout(WINDOW + Duration::from_secs(3), child.wait())
        .await
        .expect("pi-lsp run did not exit")
        .unwrap();
    let took = t0.elapsed();
    assert!(took < WINDOW, "pi-lsp run took {took:?}");
    assert_eq!(status.code(), Some(128 + signal));
    assert_group_gone(&pids);
    let (file, lines) = session_file(&ws);
    assert_aborted_tool_run(&lines, &pids);
    assert_lock_free(&file);
    eprintln!("{name}: exited after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_run_on_sigterm() {
    headless("lc-run-term", SIGTERM).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_run_on_sigint() {
    headless("lc-run-int", SIGINT).await;
}
