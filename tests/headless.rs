//! The headless main job: `pi-lsp run`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::process::Command;
use std::time::Duration;

use pi_e2e::headless::{assert_success, run, Headless};
use pi_e2e::lsp_client::agent_env;
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{fixtures, session_file, session_lines, TempDir};
use serde_json::{json, Value};

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_name() == ".pi" {
            continue;
        }
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn demo_runs_offline_with_the_scripted_model() {
    let tmp = TempDir::new("demo");
    let ws = tmp.path().join("demo");
    copy_dir(&fixtures().join("workspaces/demo"), &ws);
    let env = vec![
        (
            "PI_CODING_AGENT_DIR",
            tmp.path().join("agent").display().to_string(),
        ),
        ("ANTHROPIC_API_KEY", String::new()),
        ("OPENAI_API_KEY", String::new()),
    ];
    let out = run(&ws, &env, &["What is in this workspace?"]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    // Said once, naming no file of the source tree (the workspace is a copy outside the
    // repository; the script is built into the binary) but what to do for a real model.
    let notice: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("offline scripted model"))
        .collect();
    assert_eq!(
        notice,
        ["pi-lsp: no usable model (no API key, no models.json that loads here); the offline scripted model built into pi-lsp answers instead (a fixed demo script, no model is called). To use a real model, set a provider's API key (such as ANTHROPIC_API_KEY or OPENAI_API_KEY) or add a models.json to ~/.pi/agent/ (or $PI_CODING_AGENT_DIR)."],
        "{stderr}"
    );
    // Tool calls go to stderr; stdout holds the final answer only (Pi 1.6's print mode).
    assert!(stderr.contains("→ bash"), "{stderr}");
    assert!(!stdout.contains("→ bash"), "{stdout}");
    assert!(
        stdout
            .trim_end()
            .ends_with("configure a provider to talk to a real one.)"),
        "{stdout}"
    );
    let lines = session_lines(&ws);
    let roles: Vec<&str> = lines[3..]
        .iter()
        .map(|l| l["message"]["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "toolResult",
            "assistant",
            "toolResult",
            "assistant",
            "toolResult",
            "assistant"
        ]
    );
    assert_eq!(
        lines[10]["message"]["content"][0]["text"],
        "  7 README.md\n  6 src/greet.py\n 13 total\nHello, pi-lsp!\n"
    );
}

/// A models.json that does not load (a trailing comma) stops the run with the file's error
/// and runs nothing, instead of falling back to the offline demo (which runs real tools).
/// A requested unknown model is Pi 1.6's error (`--list-models` lists the usable ones).
#[test]
fn broken_models_json_stops_the_run_instead_of_running_the_demo() {
    let tmp = TempDir::new("broken-models");
    let ws = tmp.path().join("demo");
    copy_dir(&fixtures().join("workspaces/demo"), &ws);
    let agent = tmp.path().join("agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(
        agent.join("models.json"),
        r#"{"providers": {"local": {"baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions", "apiKey": "k", "models": [{"id": "m1"},]}}}"#,
    )
    .unwrap();
    let env = vec![
        ("PI_CODING_AGENT_DIR", agent.display().to_string()),
        ("ANTHROPIC_API_KEY", String::new()),
        ("OPENAI_API_KEY", String::new()),
    ];
    let out = run(&ws, &env, &["What is in this workspace?"]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stdout, "", "nothing ran");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(
            "pi-lsp: no usable model, and the model configuration did not load: cannot read "
        ) && last.contains("models.json: trailing comma at line 1"),
        "{stderr}"
    );
    assert!(!stderr.contains("offline scripted model"), "{stderr}");

    std::fs::write(
        agent.join("models.json"),
        r#"{"providers": {"local": {"baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions", "apiKey": "k", "models": [{"id": "m1"}, {"id": "m2"}]}}}"#,
    )
    .unwrap();
    let out = run(&ws, &env, &["--model", "local/nope", "hi"]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.lines().last(),
        Some("Error: Model \"local/nope\" not found. Use --list-models to see available models."),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_mode_prints_every_event_and_errors_exit_nonzero() {
    let mock = MockModel::start(vec![
        Step::call("c1", "ls", json!({})),
        Step::text("empty"),
        Step::Raw {
            status: 401,
            content_type: "text/plain".into(),
            body: "bad key".into(),
        },
    ])
    .await;
    let h = Headless::new("json", &mock.models_json());
    let out = h.run(&["--json", "--model", "mock/mock-1", "list"]);
    assert!(out.status.success());
    let events: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The session's header first (Pi 1.6's `--mode json`), then the run.
    assert_eq!(events[0]["type"], "session");
    assert_eq!(events[1]["type"], "agent_start");
    // Pi 1.6's order: the run's `agent_end`, then `agent_settled` (nothing more will run).
    let [.., end, settled] = events.as_slice() else {
        panic!("{events:?}")
    };
    assert_eq!(settled, &json!({"type": "agent_settled", "aborted": false}));
    assert_eq!(end["type"], "agent_end");
    assert_eq!(end["messages"].as_array().unwrap().len(), 4);
    let out = h.run(&["--model", "mockant/mock-ant-1", "fail"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("401 bad key"));
    mock.assert_paired();
}

/// `pi-lsp run` builds a new session's run configuration once: its prompt's run starts on
/// the one the session's creation built (nothing changed in between), as every front door's
/// does; a second prompt builds it again (the first run may have changed what it reads). The
/// count is the harness's debug line per build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_headless_run_builds_its_configuration_once_per_prompt() {
    let mock = MockModel::start(vec![
        Step::text("one"),
        Step::text("two"),
        Step::text("three"),
    ])
    .await;
    let mut h = Headless::new("config-once", &mock.models_json());
    for (k, v) in h.env.iter_mut() {
        if *k == "PI_LSP_LOG" {
            *v = "warn,pi_core::harness=debug".to_string();
        }
    }
    let builds = |args: &[&str]| {
        let out = h.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        stderr.matches("run configuration built").count()
    };
    assert_eq!(
        (
            builds(&["--model", "mock/mock-1", "first"]),
            builds(&["--model", "mock/mock-1", "second", "third"])
        ),
        (1, 2)
    );
}

/// The reference Pi binary: `$PI_REF_BIN`, else `.pi-ref/node_modules/.bin/pi` (installed by
/// `.ci/run`). Required when `CI` is set.
fn pi_ref_bin() -> Option<std::path::PathBuf> {
    let candidates = [
        std::env::var("PI_REF_BIN")
            .ok()
            .map(std::path::PathBuf::from),
        Some(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../.pi-ref/node_modules/.bin/pi"),
        ),
    ];
    let found = candidates.into_iter().flatten().find(|p| p.exists());
    pi_e2e::require(
        found.is_some(),
        "reference Pi comparison",
        "the reference Pi (npm @mariozechner/pi-coding-agent@0.73.1; PI_REF_BIN)",
    );
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_file_opens_in_pi_unchanged() {
    let Some(pi) = pi_ref_bin() else { return };
    let mock = MockModel::start(vec![
        Step::Tools(
            Some("Reading.".into()),
            vec![
                ("call_1".into(), "read".into(), json!({"path": "hello.txt"})),
                ("call_2".into(), "nosuch".into(), json!({})),
            ],
        ),
        Step::text("It says hello."),
    ])
    .await;
    let h = Headless::new("pi-open", &mock.models_json());
    std::fs::write(h.ws.join("hello.txt"), "Hello 🍋\n").unwrap();
    let out = h.run(&["--model", "mock/mock-1", "read hello.txt"]);
    assert!(out.status.success());
    let file = session_file(&h.ws);
    let before = std::fs::read(&file).unwrap();
    let ours: Vec<Value> = session_lines(&h.ws)
        .into_iter()
        .filter(|l| l["type"] == "message")
        .map(|l| l["message"].clone())
        .collect();

    let empty_agent = h.path().join("pi-agent");
    std::fs::create_dir_all(&empty_agent).unwrap();
    let mut child = Command::new(&pi)
        .args(["--mode", "rpc", "--session"])
        .arg(&file)
        .current_dir(&h.ws)
        .env("PI_OFFLINE", "1")
        .env("PI_CODING_AGENT_DIR", &empty_agent)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, r#"{{"id":"m","type":"get_messages"}}"#).unwrap();
        writeln!(stdin, r#"{{"id":"s","type":"get_state"}}"#).unwrap();
    }
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let responses: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let msgs = responses
        .iter()
        .find(|r| r["id"] == "m")
        .unwrap_or_else(|| {
            panic!(
                "no get_messages answer: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert_eq!(msgs["success"], true);
    assert_eq!(msgs["data"]["messages"], Value::Array(ours.clone()));
    // Pi 0.73.1 lists the stored system message too (and counts it).
    assert_eq!(ours.len(), 6);
    assert_eq!(ours[0]["role"], "system");
    let state = responses.iter().find(|r| r["id"] == "s").unwrap();
    assert_eq!(state["data"]["messageCount"], 6);
    assert_eq!(std::fs::read(&file).unwrap(), before, "Pi rewrote the file");
}

/// Event labels of a run (type, plus role or tool name), consecutive updates collapsed, only
/// Pi's ten agent event types.
fn labels(events: &[Value]) -> Vec<String> {
    let kinds = [
        "agent_start",
        "turn_start",
        "message_start",
        "message_update",
        "message_end",
        "tool_execution_start",
        "tool_execution_update",
        "tool_execution_end",
        "turn_end",
        "agent_end",
    ];
    let mut out: Vec<String> = Vec::new();
    for e in events {
        let Some(t) = e["type"].as_str().filter(|t| kinds.contains(t)) else {
            continue;
        };
        let l = match t {
            "message_start" | "message_end" => {
                format!("{t}:{}", e["message"]["role"].as_str().unwrap_or(""))
            }
            "tool_execution_start" | "tool_execution_end" => format!(
                "{t}:{}:{}",
                e["toolName"].as_str().unwrap_or(""),
                e["args"]["path"]
                    .as_str()
                    .or(e["toolCallId"].as_str())
                    .unwrap_or("")
            ),
            _ => t.to_string(),
        };
        if (t == "message_update" || t == "tool_execution_update") && out.last() == Some(&l) {
            continue;
        }
        out.push(l);
    }
    // Completion order inside a parallel batch is not deterministic: compare each run of
    // consecutive `tool_execution_end`s as a set.
    let mut i = 0;
    while i < out.len() {
        let j = (i..out.len())
            .find(|&k| !out[k].starts_with("tool_execution_end"))
            .unwrap_or(out.len());
        out[i..j].sort();
        i = j.max(i + 1);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_order_matches_pi_for_the_same_scripted_model() {
    let Some(pi) = pi_e2e::pi16_bin("event order compared with Pi 1.6.0") else {
        return;
    };
    let script = || {
        vec![
            Step::Tools(
                Some("Let me look.".into()),
                vec![("call_1".into(), "read".into(), json!({"path": "hello.txt"}))],
            ),
            Step::Tools(
                None,
                vec![
                    ("call_2".into(), "read".into(), json!({"path": "a.txt"})),
                    ("call_3".into(), "read".into(), json!({"path": "b.txt"})),
                ],
            ),
            Step::text("Done."),
        ]
    };
    let tmp = TempDir::new("pi-order");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    for (f, t) in [("hello.txt", "hi\n"), ("a.txt", "a\n"), ("b.txt", "b\n")] {
        std::fs::write(ws.join(f), t).unwrap();
    }
    // Pi, in RPC mode.
    let mock = MockModel::start(script()).await;
    let agent = tmp.path().join("pi-agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("models.json"), mock.models_json().to_string()).unwrap();
    let mut child = Command::new(&pi)
        .args([
            "--mode",
            "rpc",
            "--provider",
            "mock",
            "--model",
            "mock-1",
            "--session-dir",
        ])
        .arg(tmp.path().join("pi-sessions"))
        .current_dir(&ws)
        .env("PI_OFFLINE", "1")
        .env("PI_CODING_AGENT_DIR", &agent)
        .env("HOME", tmp.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    {
        use std::io::Write;
        writeln!(
            stdin,
            r#"{{"id":"1","type":"prompt","message":"look around"}}"#
        )
        .unwrap();
    }
    let stdout = child.stdout.take().unwrap();
    let pi_events = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut events = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let v: Value = serde_json::from_str(&line.unwrap()).unwrap_or(Value::Null);
            let end = v["type"] == "agent_end";
            events.push(v);
            if end {
                break;
            }
        }
        events
    })
    .await
    .unwrap();
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    // pi-lsp, headless with --json.
    let mock2 = MockModel::start(script()).await;
    let env = agent_env(&tmp.path().join("agent"), &mock2.models_json(), &[]);
    let out = run(
        &ws,
        &env,
        &["--json", "--model", "mock/mock-1", "look around"],
    );
    assert!(out.status.success());
    let ours: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (theirs, ours) = (labels(&pi_events), labels(&ours));
    assert!(theirs.len() > 20, "{theirs:?}");
    assert_eq!(ours, theirs);
    mock.assert_paired();
    mock2.assert_paired();
}

/// `pi-lsp run` builds the same session as the editor: the extensions the settings enable
/// are loaded, so their tools are offered to the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_run_loads_the_extensions_the_settings_enable() {
    let mock = MockModel::start(vec![Step::text("done")]).await;
    let h = Headless::new("headless-ext", &mock.models_json());
    std::fs::write(
        h.agent.join("settings.json"),
        json!({"builtinExtensions": {"tmux": {"socket": "pi-e2e-headless"}}}).to_string(),
    )
    .unwrap();
    let out = h.run(&["--model", "mock/mock-1", "hello"]);
    assert_success(&out);
    let tools: Vec<String> = mock.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        tools,
        [
            "read",
            "bash",
            "edit",
            "write",
            "grep",
            "find",
            "ls",
            "tmux_start",
            "tmux_capture",
            "tmux_list",
            "tmux_kill",
            "todo"
        ]
    );
}

/// `--session` with a relative path takes it from the workspace folder (`--workspace`), as Pi
/// 1.6's `resolveSessionPath` takes it from the folder it runs in, whichever folder `pi-lsp`
/// was started from: the run continues that file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_session_path_is_taken_from_the_workspace_folder() {
    let mock = MockModel::start(vec![Step::text("one"), Step::text("two")]).await;
    let h = Headless::new("session-relative", &mock.models_json());
    let m = ["--model", "mock/mock-1"];
    assert_success(&h.run(&[&m[..], &["first"]].concat()));
    let file = session_file(&h.ws);
    let relative = file
        .strip_prefix(&h.ws)
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    // `pi-lsp` runs from the test's folder, where that path is nothing.
    assert!(!std::env::current_dir().unwrap().join(&relative).exists());
    assert_success(&h.run(&[&m[..], &["--session", &relative, "second"]].concat()));
    let users: Vec<Value> = session_lines(&h.ws)
        .into_iter()
        .filter(|l| l["message"]["role"] == "user")
        .map(|l| l["message"]["content"][0]["text"].clone())
        .collect();
    assert_eq!(
        (session_file(&h.ws), users),
        (file, vec![json!("first"), json!("second")])
    );
}

/// Pi 1.6's print-mode flags: `--continue` goes on with the folder's latest session,
/// `pi-lsp sessions` lists it, `--session` takes an id's start, text piped on stdin comes
/// before the prompt, `--no-session` leaves no file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_session_sessions_stdin_and_no_session_as_pi() {
    let mock = MockModel::start(vec![
        Step::text("one"),
        Step::text("two"),
        Step::text("three"),
        Step::text("four"),
    ])
    .await;
    let h = Headless::new("print-flags", &mock.models_json());
    let m = ["--model", "mock/mock-1"];
    let out = h.run(&[&m[..], &["first"]].concat());
    assert_success(&out);
    let out = h.run(&[&m[..], &["-c", "second"]].concat());
    assert_success(&out);
    let users = |lines: &[Value]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l["message"]["role"] == "user")
            .map(|l| {
                l["message"]["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let lines = session_lines(&h.ws);
    assert_eq!(users(&lines), ["first", "second"]);
    // The listing: one session, this one.
    let listed = tokio::task::block_in_place(|| {
        h.command(&["sessions", "--json", "--workspace"])
            .arg(&h.ws)
            .output()
            .unwrap()
    });
    assert_success(&listed);
    let rows: Vec<Value> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let id = lines[0]["id"].as_str().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0]["id"].as_str(), rows[0]["firstPrompt"].as_str()),
        (Some(id), Some("first"))
    );
    // Its count is of message entries, as Pi 1.6's `--resume` picker counts (`messageCount`),
    // not of every entry (model and thinking changes are entries too).
    let messages = lines.iter().filter(|l| l["type"] == "message").count();
    assert_eq!(rows[0]["messages"], messages);
    assert!(
        rows[0]["entries"].as_u64().unwrap() > messages as u64,
        "{rows:?}"
    );
    // --session by the id's start; stdin before the prompt, as Pi 1.6's print mode puts it:
    // trimmed, nothing between it and the prompt (`buildInitialMessage` joins with "").
    let out = tokio::task::block_in_place(|| {
        let mut child = h
            .command(&["run", "--workspace"])
            .arg(&h.ws)
            .args(m)
            .args(["--session", &id[..8], "third"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(b"  piped text\n\n").unwrap();
        }
        child.wait_with_output().unwrap()
    });
    assert_success(&out);
    assert_eq!(
        users(&session_lines(&h.ws)),
        ["first", "second", "piped textthird"]
    );
    // --no-session: answered, and no file left.
    let out = h.run(&[&m[..], &["--no-session", "fourth"]].concat());
    assert_success(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "four");
    let files = std::fs::read_dir(h.ws.join(".pi/sessions"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "jsonl")
        })
        .count();
    assert_eq!(files, 1);
}

/// The system prompt and tool names of a chat-completions request body.
fn prompt_and_tools(body: &Value) -> (String, Vec<String>) {
    assert_eq!(body["messages"][0]["role"], "system", "{body}");
    let prompt = body["messages"][0]["content"].as_str().unwrap().to_string();
    let tools = body["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default();
    (prompt, tools)
}

/// Pi 1.6's `--system-prompt <text|path>` (a file's contents replace the default prompt and
/// SYSTEM.md), `--append-system-prompt` (repeatable, text or file, replacing APPEND_SYSTEM.md,
/// joined by blank lines) and `--tools` (names and `*` patterns replace the selection; only
/// `+name`/`-name` entries change the default one; the two cannot be mixed), as the model's
/// request carries them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_prompt_append_and_tools_flags_as_pi() {
    let mock = MockModel::start(vec![Step::text("one"), Step::text("two")]).await;
    let h = Headless::new("prompt-flags", &mock.models_json());
    std::fs::create_dir_all(h.ws.join(".pi")).unwrap();
    // Both files are replaced by the flags.
    std::fs::write(h.agent.join("SYSTEM.md"), "GLOBAL SYSTEM").unwrap();
    std::fs::write(h.agent.join("APPEND_SYSTEM.md"), "GLOBAL APPEND").unwrap();
    std::fs::write(
        h.agent.join("settings.json"),
        r#"{"defaultTools": ["read", "bash"]}"#,
    )
    .unwrap();
    let custom = h.path().join("custom.md");
    std::fs::write(&custom, "\u{feff}You review code. Nothing else.").unwrap();
    let extra = h.path().join("extra.md");
    std::fs::write(&extra, "From a file.").unwrap();
    let custom_arg = custom.display().to_string();
    let extra_arg = extra.display().to_string();
    let args = [
        "--model",
        "mock/mock-1",
        "--system-prompt",
        &custom_arg,
        "--append-system-prompt",
        "Plain text, not a file.",
        "--append-system-prompt",
        &extra_arg,
        "--tools",
        "read,gr*,todo,nosuch",
        "hello",
    ];
    let out = h.run(&args);
    assert_success(&out);
    let (prompt, tools) = prompt_and_tools(&mock.requests()[0].body);
    // Pi 1.6's sections: the custom prompt as the preamble, the appended texts as the
    // addendum, the folder; no date.
    assert_eq!(
        prompt,
        format!(
            "You review code. Nothing else.\n\n<addendum>\nPlain text, not a file.\n\nFrom a file.\n</addendum>\n\n<cwd>\n{}\n</cwd>",
            h.ws.canonicalize().unwrap().display()
        )
    );
    // An allowlist: in the tools' own order, the pattern matching grep, defaultTools ignored.
    assert_eq!(tools, ["read", "grep", "todo"]);

    // Modifiers change the default selection (defaultTools: read, bash; todo is on).
    let out = h.run(&["--model", "mock/mock-1", "--tools", "-bash,+ls", "hi"]);
    assert_success(&out);
    let (prompt, tools) = prompt_and_tools(&mock.requests()[1].body);
    assert_eq!(tools, ["read", "todo", "ls"]);
    assert!(
        prompt.starts_with("GLOBAL SYSTEM\n\n<addendum>\nGLOBAL APPEND\n"),
        "{prompt}"
    );

    // Mixed: refused before anything runs, in Pi 1.6's words and with its exit code.
    let out = h.run(&["--model", "mock/mock-1", "--tools", "read,-bash", "hi"]);
    assert_eq!(
        outcome(&out),
        (
            Some(1),
            String::new(),
            "Error: --tools: tool names cannot be mixed with +name or -name entries\n".into()
        )
    );
    assert_eq!(mock.requests().len(), 2);
}

/// `--thinking max` on a model whose `thinkingLevelMap` names `max`: the request asks for it
/// (`reasoning_effort` as the map gives it) and the new file records that level in one
/// `thinking_level_change`, not the default before it (Pi 1.6.0 with `--thinking high`
/// wrote one); on a model without it the level is clamped to the highest it has, as Pi's
/// `--thinking`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_max_is_sent_where_the_model_has_it_and_clamped_elsewhere() {
    let mock = MockModel::start(vec![Step::text("one"), Step::text("two")]).await;
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"] = json!([
        {"id": "deep", "reasoning": true, "thinkingLevelMap": {"xhigh": "xhigh", "max": "max-effort"}},
        {"id": "plain", "reasoning": true}
    ]);
    let h = Headless::new("thinking-max", &models);
    let levels = |ws: &std::path::Path| -> Vec<String> {
        session_lines(ws)
            .iter()
            .filter(|l| l["type"] == "thinking_level_change")
            .map(|l| l["thinkingLevel"].as_str().unwrap().to_string())
            .collect()
    };
    for (i, (model, sent, recorded)) in [("deep", "max-effort", "max"), ("plain", "high", "high")]
        .into_iter()
        .enumerate()
    {
        let ws = h.path().join(model);
        std::fs::create_dir_all(&ws).unwrap();
        let m = format!("mock/{model}");
        let out = run(&ws, &h.env, &["--model", &m, "--thinking", "max", "hello"]);
        assert_success(&out);
        assert_eq!(mock.requests()[i].body["reasoning_effort"], sent);
        assert_eq!(levels(&ws), [recorded]);
    }
    // A name that is not a level: Pi 1.6's warning, and nothing sent here (no prompt).
    let out = run(
        &h.path().join("deep"),
        &h.env,
        &["--model", "mock/deep", "--thinking", "maximum"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).lines().next(),
        Some("Warning: Invalid thinking level \"maximum\". Valid values: off, minimal, low, medium, high, xhigh, max")
    );
    assert_eq!(mock.requests().len(), 2);
}

/// Pi 1.6's default thinking level (`DEFAULT_THINKING_LEVEL`, `medium`) clamped to the model,
/// with no `--thinking` and no setting: what Pi 1.6.0 sent the same loopback models —
/// `reasoning_effort: "medium"` for a reasoning model, `"high"` where the model maps `medium`
/// (and `minimal`) to `null`, nothing for a model without reasoning — and the level the file
/// records (`off` for the last). `defaultThinkingLevel` comes before the default, and
/// `modelThinkingLevels["provider/id"]` before both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_defaults_to_medium_clamped_to_the_model() {
    let mock = MockModel::start((0..5).map(|_| Step::text("ok")).collect()).await;
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"] = json!([
        {"id": "r", "reasoning": true},
        {"id": "x", "reasoning": true, "thinkingLevelMap": {"medium": null, "minimal": null}},
        {"id": "p"}
    ]);
    let h = Headless::new("thinking-default", &models);
    let level = |ws: &std::path::Path| -> Value {
        session_lines(ws)
            .iter()
            .rfind(|l| l["type"] == "thinking_level_change")
            .map(|l| l["thinkingLevel"].clone())
            .unwrap_or(Value::Null)
    };
    let run_in = |name: &str, model: &str| {
        let ws = h.path().join(name);
        std::fs::create_dir_all(&ws).unwrap();
        assert_success(&run(&ws, &h.env, &["--model", model, "hello"]));
        level(&ws)
    };
    let mut recorded = Vec::new();
    for model in ["r", "x", "p"] {
        recorded.push(run_in(model, &format!("mock/{model}")));
    }
    std::fs::write(
        h.agent.join("settings.json"),
        json!({"defaultThinkingLevel": "low", "modelThinkingLevels": {"mock/x": "xhigh"}})
            .to_string(),
    )
    .unwrap();
    recorded.push(run_in("r-low", "mock/r"));
    recorded.push(run_in("x-xhigh", "mock/x"));
    let sent: Vec<Value> = mock
        .requests()
        .iter()
        .map(|r| r.body["reasoning_effort"].clone())
        .collect();
    assert_eq!(
        sent,
        [
            json!("medium"),
            json!("high"),
            Value::Null,
            json!("low"),
            json!("high")
        ]
    );
    assert_eq!(recorded, ["medium", "high", "off", "low", "high"]);
}

/// Pi 1.6's `--no-tools`: no tool at all (built-in, extension: no `tools` in the request);
/// with `--tools +ls,-bash` only `ls`; on a session Pi 1.6.0 ran with `--tools read,bash,ls`,
/// `--no-tools --tools +grep` offers `grep` alone — the recorded tools are not restored. Pi
/// 1.6.0 sent the same three requests (no `tools`; `ls`; `grep`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tools_offers_only_what_tools_adds() {
    let mock = MockModel::start((0..3).map(|_| Step::text("ok")).collect()).await;
    let h = Headless::new("no-tools", &mock.models_json());
    let file = pi16_tools_session(&h);
    let m = ["--model", "mock/mock-1"];
    assert_success(&h.run(&[m[0], m[1], "--no-tools", "x"]));
    assert_success(&h.run(&[m[0], m[1], "--no-tools", "--tools", "+ls,-bash", "x"]));
    assert_success(&h.run(&[
        m[0],
        m[1],
        "--session",
        &file,
        "--no-tools",
        "--tools",
        "+grep",
        "x",
    ]));
    let sent = tool_names_sent(&mock);
    assert_eq!(sent, [Value::Null, json!(["ls"]), json!(["grep"])]);
}

/// Pi 1.6's `supportsMidConvoSystemMessages`: a Pi 1.6 file with a prompt patch mid-branch,
/// continued here. Without the flag the run's prompt leads the request alone, as before; with
/// it the prompt the conversation started with leads and every later patch goes at its place
/// in Pi's wording — Pi's own patch, and the one this run stores (Pi's sections removed, the
/// harness's prompt set) — on chat completions in place, on Anthropic just before the next
/// assistant message (or last). The file keeps the patches as entries either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mid_conversation_system_messages_follow_the_model_compat_flag() {
    let mock = MockModel::start(vec![
        Step::text("three"),
        Step::text("three"),
        Step::text("three"),
    ])
    .await;
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"] = json!([
        {"id": "plain", "contextWindow": 128000, "maxTokens": 4096},
        {"id": "mid", "contextWindow": 128000, "maxTokens": 4096,
            "compat": {"supportsMidConvoSystemMessages": true}}
    ]);
    models["providers"]["mockant"]["compat"] = json!({"supportsMidConvoSystemMessages": true});
    let h = Headless::new("mid-convo-system", &models);
    let go = |file: &std::path::Path, model: &str| {
        let f = file.display().to_string();
        let out = h.run(&["--model", model, "--session", &f, "third"]);
        assert_success(&out);
    };
    let user = |t: &str| json!({"role": "user", "content": [{"type": "text", "text": t}]});
    let assistant = |t: &str| json!({"role": "assistant", "content": t});

    // Flag off: the run's prompt alone, no system text among the messages.
    let plain = h.path().join("plain.jsonl");
    pi_e2e::pi16_session_with_a_patch(&plain, &h.ws, ("mock", "plain", "openai-completions"));
    go(&plain, "mock/plain");
    let body = &mock.requests()[0].body;
    let prompt = body["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(prompt.ends_with("\n</cwd>"), "{prompt}");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": prompt},
            user("first"), assistant("one"), user("second"), assistant("two"), user("third")
        ])
    );
    // The run stored its patch (Pi's sections removed, its own set) before the prompt.
    let stored: Vec<Value> = std::fs::read_to_string(&plain)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l["message"]["role"] == "system")
        .map(|l| l["message"]["sections"].clone())
        .collect();
    assert_eq!(stored.len(), 3, "{stored:?}");
    assert_eq!(
        stored[..2],
        [
            json!({"preamble": "You are Pi.", "rules": "Be brief."}),
            json!({"rules": "Be very brief."}),
        ]
    );
    // Ours: Pi 1.6's sections, each that differs from the file's (all of them here), in order.
    // The prompt sent is what the branch replays to, as Pi 1.6 sends it (pi-ai's
    // `getCurrentSystemMessage`: a section keeps the place it was first stored at, a new one
    // comes last): preamble and rules where Pi's file set them, then tools and cwd.
    let patch: Vec<(String, String)> = stored[2]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    let names: Vec<&str> = patch.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["preamble", "tools", "rules", "cwd"]);
    assert_eq!(
        patch[0].1,
        "You are a coding assistant running inside pi, a coding agent harness. Help users inspect files, run commands, and modify code."
    );
    assert_eq!(
        patch[3].1,
        format!("<cwd>\n{}\n</cwd>", h.ws.canonicalize().unwrap().display())
    );
    let rendered: Vec<&str> = [0, 2, 1, 3].iter().map(|&i| patch[i].1.as_str()).collect();
    assert_eq!(rendered.join("\n\n"), prompt);

    // Flag on (chat completions): Pi's first prompt leads, the patches in place.
    let reload = "Updated system prompt section \"rules\":\n\nBe very brief.";
    let ours = patch
        .iter()
        .map(|(k, t)| format!("Updated system prompt section \"{k}\":\n\n{t}"))
        .collect::<Vec<_>>()
        .join("\n\n");
    let mid = h.path().join("mid.jsonl");
    pi_e2e::pi16_session_with_a_patch(&mid, &h.ws, ("mock", "mid", "openai-completions"));
    go(&mid, "mock/mid");
    assert_eq!(
        mock.requests()[1].body["messages"],
        json!([
            {"role": "system", "content": "You are Pi.\n\nBe brief."},
            user("first"), assistant("one"),
            {"role": "system", "content": reload},
            user("second"), assistant("two"),
            {"role": "system", "content": ours},
            user("third")
        ])
    );

    // Flag on (Anthropic Messages): the patches held to just before the next assistant
    // message, the last one last (with the conversation's cache mark).
    let ant = h.path().join("ant.jsonl");
    pi_e2e::pi16_session_with_a_patch(&ant, &h.ws, ("mockant", "mock-ant-1", "anthropic-messages"));
    go(&ant, "mockant/mock-ant-1");
    let body = &mock.requests()[2].body;
    let text = |t: &str| json!({"type": "text", "text": t});
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You are Pi.\n\nBe brief.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [text("first")]},
            {"role": "assistant", "content": [text("one")]},
            {"role": "user", "content": [text("second")]},
            {"role": "system", "content": [text(reload)]},
            {"role": "assistant", "content": [text("two")]},
            {"role": "user", "content": [text("third")]},
            {"role": "system", "content": [{"type": "text", "text": ours, "cache_control": {"type": "ephemeral"}}]}
        ])
    );
    assert_eq!(mock.requests().len(), 3);
}

/// Pi 1.6's rule for the system prompt's role on chat completions: `developer` only for
/// OpenAI's own API (provider `openai` or `api.openai.com`) or a `compat` that says
/// `supportsDeveloperRole`; any other host (here loopback, as ollama, llama.cpp, vLLM) gets
/// `system`, even for a reasoning model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_prompt_role_is_developer_only_where_pi_sends_it() {
    let mock = MockModel::start(vec![Step::text("one"), Step::text("two")]).await;
    let mut models = mock.models_json();
    let provider = models["providers"]["mock"].as_object_mut().unwrap();
    provider.remove("compat");
    provider["models"] = json!([
        {"id": "local", "reasoning": true},
        {"id": "dev", "reasoning": true, "compat": {"supportsDeveloperRole": true}}
    ]);
    let h = Headless::new("developer-role", &models);
    for (i, (model, role)) in [("local", "system"), ("dev", "developer")]
        .into_iter()
        .enumerate()
    {
        let m = format!("mock/{model}");
        let out = h.run(&["--model", &m, "hello"]);
        assert_success(&out);
        let body = &mock.requests()[i].body;
        let roles: Vec<&str> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, [role, "user"], "{model}: {body}");
    }
}

/// An empty or blank prompt argument with nothing on stdin is no prompt, as empty stdin is:
/// as Pi 1.6's print mode, exit 0, nothing printed, sent or written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_prompt_runs_nothing_and_writes_nothing() {
    let mock = MockModel::start(vec![Step::text("never")]).await;
    let mut h = Headless::new("empty-prompt", &mock.models_json());
    warn_only(&mut h);
    for prompt in ["", "  \n\t "] {
        let out = h.run(&["--model", "mock/mock-1", prompt]);
        assert_eq!(outcome(&out), (Some(0), String::new(), String::new()));
    }
    assert_eq!(mock.requests().len(), 0);
    assert!(!h.ws.join(".pi").exists());
}

/// Flags are checked before the session file is made: `--mode yaml` leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_flag_creates_no_session_file() {
    let mock = MockModel::start(vec![Step::text("never")]).await;
    let h = Headless::new("bad-flag", &mock.models_json());
    let out = h.run(&["--model", "mock/mock-1", "--mode", "yaml", "hi"]);
    assert_eq!(
        outcome(&out),
        (
            Some(1),
            String::new(),
            "Error: Invalid mode \"yaml\". Valid values: text, json, rpc\n".into()
        )
    );
    assert_eq!(mock.requests().len(), 0);
    assert!(!h.ws.join(".pi").exists());
}

/// `--no-session` answers, says nothing about a saved session and creates nothing in the
/// workspace (no file, no `.pi/sessions/.gitignore`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_session_creates_and_announces_nothing() {
    let mock = MockModel::start(vec![Step::text("answer")]).await;
    let h = Headless::new("no-session", &mock.models_json());
    let out = h.run(&["--model", "mock/mock-1", "--no-session", "hi"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "answer\n");
    assert!(!stderr.contains("session saved"), "{stderr}");
    assert!(!h.ws.join(".pi").exists());
    assert!(!h.path().join("agent/sessions").exists());
}

/// `-c` in a folder with no session starts a new one (Pi's `continueRecent`); `--model` with
/// `-c` / `--session` is the model the resumed session runs at, recorded nowhere but in the
/// answers (Pi 1.6.0, `pi -p --model … -c` on the same loopback model, appended no
/// `model_change`: the file keeps its first one only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_starts_new_and_model_applies_on_resume() {
    let mock = MockModel::start(vec![
        Step::text("one"),
        Step::text("two"),
        Step::text("three"),
    ])
    .await;
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"] = json!([{"id": "mock-1"}, {"id": "mock-2"}]);
    let h = Headless::new("continue-model", &models);
    let out = h.run(&["--model", "mock/mock-1", "-c", "first"]);
    assert_success(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one\n");
    let out = h.run(&["--model", "mock/mock-2", "-c", "second"]);
    assert_success(&out);
    let id = session_lines(&h.ws)[0]["id"].as_str().unwrap().to_string();
    let out = h.run(&["--model", "mock/mock-1", "--session", &id[..8], "third"]);
    assert_success(&out);
    let sent: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sent, ["mock-1", "mock-2", "mock-1"]);
    let changes: Vec<String> = session_lines(&h.ws)
        .iter()
        .filter(|l| l["type"] == "model_change")
        .map(|l| {
            format!(
                "{}/{}",
                l["provider"].as_str().unwrap(),
                l["modelId"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(changes, ["mock/mock-1"]);
}

/// Pi's own sessions folder for the cwd (`$PI_CODING_AGENT_DIR/sessions/--<cwd>--/`) is read
/// by `sessions`, `run -c` and `run --session`: only files whose header's cwd is this folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_sessions_folder_is_listed_and_continued() {
    let mock = MockModel::start(vec![Step::text("two"), Step::text("three")]).await;
    let h = Headless::new("pi-folder", &mock.models_json());
    let safe =
        h.ws.display()
            .to_string()
            .trim_start_matches('/')
            .replace('/', "-");
    let dir = h.agent.join("sessions").join(format!("--{safe}--"));
    std::fs::create_dir_all(&dir).unwrap();
    let pi_file = |id: &str, cwd: &std::path::Path, text: &str| {
        let lines = [
            json!({"type": "session", "version": 3, "id": id, "timestamp": "2026-11-30T16:50:34.872Z", "cwd": cwd}),
            json!({"type": "model_change", "id": "a0000001", "parentId": null, "timestamp": "2026-11-30T16:50:34.886Z", "provider": "mock", "modelId": "mock-1"}),
            json!({"type": "message", "id": "a0000002", "parentId": "a0000001", "timestamp": "2026-11-30T16:50:34.934Z", "message": {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1796057434912u64}}),
            json!({"type": "message", "id": "a0000003", "parentId": "a0000002", "timestamp": "2026-11-30T16:50:35.084Z", "message": {"role": "assistant", "content": [{"type": "text", "text": "one"}], "api": "openai-completions", "provider": "mock", "model": "mock-1", "usage": {"input": 100, "output": 10, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 110, "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}, "stopReason": "stop", "timestamp": 1796057434989u64}}),
        ];
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(
            dir.join(format!("2026-11-30T16-50-34-872Z_{id}.jsonl")),
            body,
        )
        .unwrap();
    };
    let id = "01a22d5d-8af7-7261-b8bf-53378d3c9d40";
    pi_file(id, &h.ws, "from pi");
    // Another project whose cwd maps to the same folder name: not this folder's.
    pi_file(
        "02b33e6e-0000-7000-8000-000000000000",
        &h.path().join("other"),
        "other",
    );
    let listed = tokio::task::block_in_place(|| {
        h.command(&["sessions", "--json", "--workspace"])
            .arg(&h.ws)
            .output()
            .unwrap()
    });
    assert!(listed.status.success());
    let rows: Vec<Value> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0]["id"].as_str(), rows[0]["firstPrompt"].as_str()),
        (Some(id), Some("from pi"))
    );
    let users = |body: &Value| -> Vec<String> {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| {
                m["content"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| m["content"][0]["text"].as_str().unwrap().to_string())
            })
            .collect()
    };
    let out = h.run(&["--model", "mock/mock-1", "-c", "second"]);
    assert_success(&out);
    assert_eq!(users(&mock.requests()[0].body), ["from pi", "second"]);
    let out = h.run(&["--model", "mock/mock-1", "--session", &id[..8], "third"]);
    assert_success(&out);
    assert_eq!(
        users(&mock.requests()[1].body),
        ["from pi", "second", "third"]
    );
    assert!(
        !h.ws.join(".pi/sessions").exists()
            || std::fs::read_dir(h.ws.join(".pi/sessions"))
                .unwrap()
                .all(|e| e.unwrap().path().extension().is_none_or(|x| x != "jsonl"))
    );
}

/// An OpenAI-compatible stream that sends `text` and is then cut (no finish reason, no
/// `[DONE]`): a retryable failure after partial text.
fn cut_stream(text: &str) -> Step {
    let chunk = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-cut", "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
        )
    };
    // The body ends inside an event (no blank line closes it): a cut, whatever came before.
    let mut torn = chunk(json!({"content": " and more"}));
    torn.truncate(torn.len() - 10);
    Step::Events(vec![
        chunk(json!({"role": "assistant", "content": ""})),
        chunk(json!({"content": text})),
        torn,
    ])
}

/// Pi 1.6's print mode: stdout holds only the final answer, printed when the run has ended, so
/// the text of a failed attempt (a stream cut after "PARTIAL-ATTEMPT", retried) and of the
/// message before a tool call never reaches it; tool calls and retries go to stderr. And a
/// background child of a `bash` command (`sleep 300 &`) does not outlive the run: the process
/// groups are stopped at exit, as the ACP and LSP servers do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_holds_only_the_final_answer_and_no_child_outlives_the_run() {
    let mock = MockModel::start(vec![
        Step::Tools(
            Some("Starting it in the background.".into()),
            vec![(
                "c1".into(),
                "bash".into(),
                json!({"command": "sleep 300 >/dev/null 2>&1 & echo $! > bg.pid; echo started"}),
            )],
        ),
        cut_stream("PARTIAL-ATTEMPT"),
        Step::text("The final answer."),
    ])
    .await;
    let h = Headless::new("final-answer", &mock.models_json());
    std::fs::write(
        h.agent.join("settings.json"),
        r#"{"retry": {"baseDelayMs": 10}}"#,
    )
    .unwrap();
    let out = h.run(&["--model", "mock/mock-1", "--approve-all", "start it"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "The final answer.\n");
    assert!(stderr.contains("→ bash {\"command\":"), "{stderr}");
    assert!(
        stderr.contains("stream ended before the response was complete")
            && stderr.contains("retrying (1/"),
        "{stderr}"
    );
    assert_eq!(mock.requests().len(), 3);
    // The background sleep is gone (killed and reaped once the run ended).
    let pid = std::fs::read_to_string(h.ws.join("bg.pid")).unwrap();
    let proc_dir = std::path::PathBuf::from(format!("/proc/{}", pid.trim()));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while proc_dir.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !proc_dir.exists(),
        "the background child {} outlived the run",
        pid.trim()
    );
}

/// `--tools nosuchtool`: Pi 1.6 runs with no tools; so does this, with a warning that names the
/// unknown entries and the tools there are. A pattern that matches nothing is named too; an
/// `mcp__` entry is not judged (its server may connect later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tools_are_named_in_a_warning() {
    let mock = MockModel::start(vec![Step::text("no tools here")]).await;
    let h = Headless::new("unknown-tools", &mock.models_json());
    let out = h.run(&[
        "--model",
        "mock/mock-1",
        "--tools",
        "nosuchtool,zz*,mcp__srv__x",
        "hi",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "no tools here\n");
    let warning = "--tools: no tool matches \"nosuchtool\", \"zz*\"; the tools are bash, edit, find, grep, ls, read, todo, write (and MCP tools, mcp__<server>__<tool>)";
    assert_eq!(
        stderr.lines().filter(|l| l.ends_with(warning)).count(),
        1,
        "{stderr}"
    );
    let (_, tools) = prompt_and_tools(&mock.requests()[0].body);
    assert!(tools.is_empty(), "{tools:?}");
}

/// An overflow's compact-and-retry leaves the failed answer out of the context as Pi 1.6 does
/// (`_omitRecoveryAttempt`): the file keeps the failed answer, then a `context_edit`
/// (`replacement: null`) naming it, then the compaction (cut as Pi 1.6 cuts around a left-out
/// attempt), then the retried answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflow_retry_leaves_the_failed_answer_out_with_a_context_edit() {
    let overflow = || {
        Step::Raw {
        status: 400,
        content_type: "application/json".into(),
        body: json!({"error": {"message": "This model's maximum context length is 8000 tokens. However, your messages resulted in 9000 tokens.", "code": "context_length_exceeded"}}).to_string(),
    }
    };
    let mock = MockModel::start(vec![
        Step::text("first answer"),
        overflow(),
        Step::text("recovered"),
    ])
    .await;
    mock.set_responder(std::sync::Arc::new(|body: &Value| {
        body.to_string()
            .contains("context summarization assistant")
            .then(|| Step::text("SUMMARY-OF-EARLIER-WORK"))
    }));
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"][0]["contextWindow"] = json!(8000);
    models["providers"]["mock"]["models"][0]["maxTokens"] = json!(1024);
    let h = Headless::new("overflow-edit", &models);
    std::fs::write(
        h.agent.join("settings.json"),
        json!({"compaction": {"enabled": true, "reserveTokens": 500, "keepRecentTokens": 10}})
            .to_string(),
    )
    .unwrap();
    let m = ["--model", "mock/mock-1"];
    assert_success(&h.run(&[&m[..], &["one ".repeat(300).trim()]].concat()));
    let out = h.run(&[&m[..], &["-c", "two ".repeat(300).trim()]].concat());
    assert_success(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "recovered");
    let lines = session_lines(&h.ws);
    let kind = |e: &Value| match e["type"].as_str().unwrap() {
        "message" => format!(
            "message:{}:{}",
            e["message"]["role"].as_str().unwrap(),
            e["message"]["stopReason"].as_str().unwrap_or("")
        ),
        t => t.to_string(),
    };
    let n = lines.len();
    let tail: Vec<String> = lines[n - 5..].iter().map(kind).collect();
    assert_eq!(
        tail,
        [
            "message:user:",
            "message:assistant:error",
            "context_edit",
            "compaction",
            "message:assistant:stop"
        ]
    );
    let (failed, edit, compaction) = (&lines[n - 4], &lines[n - 3], &lines[n - 2]);
    assert_eq!(edit["targetId"], failed["id"]);
    assert_eq!(edit["parentId"], failed["id"]);
    assert_eq!(edit["replacement"], Value::Null);
    assert_eq!(compaction["parentId"], edit["id"]);
    // Pi 1.6's cut (`findProjectedCutPoint`): what follows the cut may not be only the left-out
    // attempt and its edit, so the cut moves onto the failed entry and the prompt before it is
    // summarised as a split turn's prefix.
    assert_eq!(compaction["firstKeptEntryId"], failed["id"]);
    assert_eq!(
        compaction["summary"],
        "SUMMARY-OF-EARLIER-WORK\n\n---\n\n**Turn Context (split turn):**\n\nSUMMARY-OF-EARLIER-WORK"
    );
}

/// Case: a write past the file-size limit (`ulimit -f`) must not end the process. Its default
/// action (`SIGXFSZ`) killed `run` mid-append: the session cut off mid-line, the tool result
/// lost, the lock left. Now the append fails (`EFBIG`) as on a full disk: the file keeps whole
/// lines only, the run is stopped (no work goes unrecorded), the lock is released, and the
/// user is told that the session was not saved whole — and not that it was.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_past_the_file_size_limit_does_not_end_the_run() {
    let mock = MockModel::start(vec![
        Step::Tools(
            None,
            vec![("call_1".into(), "read".into(), json!({"path": "big.txt"}))],
        ),
        Step::text("Read it."),
    ])
    .await;
    let h = Headless::new("fsize", &mock.models_json());
    let big: String = (0..1200)
        .map(|i| format!("line {i} of a big file with some words\n"))
        .collect();
    std::fs::write(h.ws.join("big.txt"), &big).unwrap();
    // 24 blocks of 512 bytes (POSIX sh): the header and the first messages fit, the 47 KB tool
    // result does not.
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -f 24 && exec \"$0\" \"$@\"")
        .arg(pi_e2e::pi_lsp_bin())
        .args(["run", "--workspace"])
        .arg(&h.ws)
        .args(["--model", "mock/mock-1", "read big.txt"])
        .envs(h.env.iter().map(|(k, v)| (k, v)));
    let out = tokio::task::block_in_place(|| cmd.output().unwrap());
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    assert_eq!(out.status.code(), Some(1), "{:?}\n{stderr}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    // The failure told in `pi-lsp:` lines for the user, not also as log lines (`ERROR …`)
    // saying the same.
    let told: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("File too large") || l.contains("not saved"))
        .collect();
    assert!(
        told[0].starts_with("pi-lsp: session not saved: session file ")
            && told[0].contains("File too large"),
        "{stderr}"
    );
    assert!(told.iter().all(|l| l.starts_with("pi-lsp: ")), "{stderr}");
    // Once, though every later append failed the same way.
    assert_eq!(told.len(), 1, "{stderr}");
    assert!(!stderr.contains("ERROR"), "{stderr}");
    assert!(!stderr.contains("session saved to"), "{stderr}");
    let dir = h.ws.join(".pi/sessions");
    let file = session_file(&h.ws);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.len() <= 24 * 512, "{} bytes", text.len());
    assert!(text.ends_with('\n'), "a torn last line: {text:?}");
    for line in text.lines() {
        serde_json::from_str::<Value>(line).unwrap();
    }
    let locks: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".lock"))
        .collect();
    assert_eq!(locks, Vec::<String>::new());
    assert!(
        stderr.contains(&format!(
            "pi-lsp: the session's last entries could not be saved to {} (the run was stopped)",
            file.display()
        )),
        "{stderr}"
    );
    // What the file holds: the header, the user's prompt and the call (the result did not fit).
    let kinds: Vec<String> = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            format!(
                "{}:{}",
                v["type"].as_str().unwrap(),
                v["message"]["role"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(kinds[0], "session:");
    assert!(kinds.contains(&"message:user".to_string()), "{kinds:?}");
    assert!(
        !kinds.contains(&"message:toolResult".to_string()),
        "{kinds:?}"
    );
}

/// Case CMP-02 through the binary: a session whose history is ONE huge old turn (user ≈30k
/// tokens, assistant ≈15k, no usage: imported) then case PAIR-01's small tail overflows the
/// provider. The keep budget (20,000) would keep all of it (Pi 1.6 gives up: "nothing to
/// compact", and the session is stuck); the cut moves to the huge answer, the user message
/// before it is summarised as the split turn's prefix, the retry succeeds and the next prompt
/// works without another compaction. `tokensBefore` is the whole context's estimate (no
/// usage to anchor on), not the few tokens after the last answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflow_on_one_huge_old_turn_is_compacted_and_the_session_goes_on() {
    let too_long = Step::Raw {
        status: 400,
        content_type: "application/json".into(),
        body: json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}}).to_string(),
    };
    let mock = MockModel::start(vec![
        too_long,
        Step::text("recovered"),
        Step::text("second answer"),
    ])
    .await;
    let is_summary = |body: &Value| body.to_string().contains("context summarization assistant");
    mock.set_responder(std::sync::Arc::new(move |body: &Value| {
        is_summary(body).then(|| Step::text("SUMMARY-OF-THE-BIG-TURN"))
    }));
    let h = Headless::new("huge-turn", &mock.models_json());
    let sessions = h.ws.join(".pi/sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let file = sessions.join("case.jsonl");
    let (big_user, big_answer) = ("u".repeat(120_000), "a".repeat(60_000));
    let lines = [
        json!({"type":"session","id":"s1","version":3,"timestamp":"2026-01-01T00:00:00.000Z","cwd":h.ws}),
        json!({"type":"message","id":"u0","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":big_user,"timestamp":1}}),
        json!({"type":"message","id":"a0","parentId":"u0","timestamp":"2026-01-01T00:00:02.000Z","message":{"role":"assistant","content":[{"type":"text","text":big_answer}],"stopReason":"stop","timestamp":2}}),
        json!({"type":"message","id":"e1","parentId":"a0","timestamp":"2026-01-01T00:00:03.000Z","message":{"role":"user","content":"run the tests","timestamp":3}}),
        json!({"type":"message","id":"e2","parentId":"e1","timestamp":"2026-01-01T00:00:04.000Z","message":{"role":"assistant","content":[{"type":"toolCall","id":"toolu_01A","name":"bash","arguments":{"command":"sleep 60"}}],"stopReason":"aborted","timestamp":4}}),
        json!({"type":"message","id":"e3","parentId":"e2","timestamp":"2026-01-01T00:00:05.000Z","message":{"role":"user","content":"never mind, list files","timestamp":5}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let file_arg = file.display().to_string();
    let m = [
        "--model",
        "mockant/mock-ant-1",
        "--session",
        file_arg.as_str(),
    ];

    let out = h.run(&[&m[..], &["next"]].concat());
    assert_success(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "recovered");
    let stored = session_lines(&h.ws);
    let compaction: Vec<&Value> = stored
        .iter()
        .filter(|e| e["type"] == "compaction")
        .collect();
    assert_eq!(compaction.len(), 1, "{stored:?}");
    let compaction = compaction[0];
    // The whole context estimated as Pi 1.6 does (ceil(chars / 4) per message): 30,000 +
    // 15,000 + 4 + 7 + 6 + 1 ("next") + the run's system message (the failed answer is left
    // out by its context_edit).
    let system: Vec<&Value> = stored
        .iter()
        .filter(|e| e["message"]["role"] == "system")
        .collect();
    let system_tokens: u64 = system
        .iter()
        .map(|e| {
            let m = &e["message"];
            let len = |v: &Value| v.as_str().map_or(0, |s| s.encode_utf16().count() as u64);
            let sections: u64 = m["sections"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(_, v)| len(v))
                .sum();
            let tools = match &m["toolsAdded"] {
                Value::Null => 0,
                t => t.to_string().encode_utf16().count() as u64,
            };
            (len(&m["content"]) + sections + tools).div_ceil(4)
        })
        .sum();
    assert_eq!(system.len(), 1, "one system message: {system:?}");
    let tokens_before = 45_018 + system_tokens;
    assert_eq!(
        (
            &compaction["firstKeptEntryId"],
            &compaction["summary"],
            &compaction["tokensBefore"]
        ),
        (
            &json!("a0"),
            &json!("No prior history.\n\n---\n\n**Turn Context (split turn):**\n\nSUMMARY-OF-THE-BIG-TURN"),
            &json!(tokens_before)
        )
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let compact_lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("pi-lsp: compact"))
        .collect();
    assert_eq!(
        compact_lines,
        [
            "pi-lsp: compacting the conversation (Overflow)…".to_string(),
            format!("pi-lsp: compacted {tokens_before} tokens into a summary; raw context kept from entry a0")
        ]
    );
    // Requests: the overflowing one, one summary request (the turn prefix: the huge user
    // message alone; no history request, there is nothing older), the retry.
    let requests = mock.requests();
    let summaries: Vec<&Value> = requests
        .iter()
        .map(|r| &r.body)
        .filter(|b| is_summary(b))
        .collect();
    assert_eq!(summaries.len(), 1);
    let prefix = summaries[0]["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(
        prefix.starts_with(&format!(
            "# Conversation\n[User]: {big_user}\n\n# Instructions\n"
        )),
        "{}",
        &prefix[..200]
    );
    assert!(!prefix.contains(&big_answer[..100]));
    let conversation: Vec<&Value> = requests
        .iter()
        .map(|r| &r.body)
        .filter(|b| !is_summary(b))
        .collect();
    assert_eq!(conversation.len(), 2);
    let retry = &conversation[1]["messages"];
    let first = retry[0]["content"].to_string();
    assert!(first.contains("SUMMARY-OF-THE-BIG-TURN"), "{first}");
    assert!(!retry.to_string().contains(&big_user[..100]));
    assert_eq!(retry[1]["role"], "assistant");
    assert_eq!(retry[1]["content"][0]["text"], json!(big_answer));

    // The session is not stuck: the next prompt is answered without another compaction.
    let out = h.run(&[&m[..], &["and now?"]].concat());
    assert_success(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "second answer");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.lines().any(|l| l.starts_with("pi-lsp: compact")),
        "{stderr}"
    );
    let stored = session_lines(&h.ws);
    assert_eq!(
        stored.iter().filter(|e| e["type"] == "compaction").count(),
        1
    );
    assert_eq!(mock.requests().len(), requests.len() + 1);
}

/// EDIT-08 across `run`s: the model reads `f.txt` in one run, the file changes on disk, and
/// its edit in the next run (`--continue`, a new process) is refused saying the file changed
/// since the read (the earlier read is known from the session file), not "could not find".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_after_continue_is_refused_when_the_file_changed_since_the_read() {
    let mock = MockModel::start(vec![
        Step::call("c1", "read", json!({"path": "f.txt"})),
        Step::text("Read it."),
        Step::edit("c2", "f.txt", "y = 2", "y = 5"),
        Step::text("I will read it again."),
    ])
    .await;
    let h = Headless::new("stale-continue", &mock.models_json());
    std::fs::write(h.ws.join("f.txt"), "x = 1\ny = 2\n").unwrap();
    let out = h.run(&["--model", "mock/mock-1", "--approve-all", "read f.txt"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The user changes the file between the runs (a later modification time).
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(h.ws.join("f.txt"), "x = 1\ny = 3\n").unwrap();
    let out = h.run(&[
        "--continue",
        "--model",
        "mock/mock-1",
        "--approve-all",
        "set y to 5",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = session_lines(&h.ws)
        .iter()
        .filter(|l| l["message"]["role"] == "toolResult")
        .map(|l| {
            json!([
                l["message"]["toolName"],
                l["message"]["isError"],
                l["message"]["content"][0]["text"]
            ])
        })
        .collect();
    assert_eq!(
        results,
        vec![
            json!(["read", false, "x = 1\ny = 2\n"]),
            json!(["edit", true, "f.txt changed since you read it: it was changed on disk (the user, a command or another program changed the file). Nothing was changed by this edit. Read f.txt again and redo the edit against its current text.\n\nClosest text in the file, lines 2-2 (→ is a tab, · a space):\n    2  y·=·3\nYour oldText:\n       y·=·2"]),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(h.ws.join("f.txt")).unwrap(),
        "x = 1\ny = 3\n"
    );
}

/// `VmHWM` (peak RSS) of process `pid`, in KiB (`/proc/<pid>/status`); 0 once it is gone.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A Pi v3 session of one user turn whose `read` results hold `n` images of `mb` MiB of
/// base64 each (unique, incompressible), for `ws`; written to `path`.
fn image_session(path: &std::path::Path, ws: &std::path::Path, n: usize, mb: usize) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut line = |v: Value| {
        serde_json::to_writer(&mut f, &v).unwrap();
        f.write_all(b"\n").unwrap();
    };
    line(
        json!({"type": "session", "version": 3, "id": "0197a000-0000-7000-8000-0000000000aa",
        "timestamp": "2026-01-01T00:00:00.000Z", "cwd": ws}),
    );
    let usage = json!({"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15,
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}});
    let mut parent = Value::Null;
    let mut k = 0;
    let mut add = |line: &mut dyn FnMut(Value), message: Value| {
        k += 1;
        let id = format!("{k:08x}");
        line(json!({"type": "message", "id": id, "parentId": parent,
            "timestamp": "2026-01-01T00:00:00.000Z", "message": message}));
        parent = json!(id);
    };
    add(
        &mut line,
        json!({"role": "user", "content": "look at every picture", "timestamp": 1}),
    );
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..n {
        let cid = format!("call_{i}");
        add(
            &mut line,
            json!({"role": "assistant", "content": [{"type": "toolCall", "id": cid,
            "name": "read", "arguments": {"path": format!("p{i}.png")}}],
            "api": "openai-completions", "provider": "mock", "model": "mock-1", "usage": usage,
            "stopReason": "toolUse", "timestamp": 1}),
        );
        // Base64 of random bytes (xorshift): as large as the text says, never alike.
        let mut raw = vec![0u8; mb * 1024 * 1024 / 4 * 3];
        for chunk in raw.chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
        }
        use base64::Engine;
        let data = base64::engine::general_purpose::STANDARD.encode(&raw);
        add(
            &mut line,
            json!({"role": "toolResult", "toolCallId": cid, "toolName": "read",
            "content": [{"type": "text", "text": "Read image file [image/png]"},
                {"type": "image", "data": data, "mimeType": "image/png"}],
            "isError": false, "timestamp": 1}),
        );
    }
    add(
        &mut line,
        json!({"role": "assistant", "content": [{"type": "text", "text": "All noise."}],
        "api": "openai-completions", "provider": "mock", "model": "mock-1", "usage": usage,
        "stopReason": "stop", "timestamp": 1}),
    );
    f.flush().unwrap();
}

/// SESS-05: `run --session` of a 60 MB session (30 images of 2 MiB of base64 in one turn,
/// all of them sent: a model that reads images) peaks under 250 MiB (main's release build:
/// 373 MiB): the images are held once (shared by every copy of the history), and the converted
/// messages are dropped as they are written into the request. Peak RSS (`VmHWM`) read once the model has the request, i.e. after the body
/// was built and sent; the model answers after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_of_large_images_runs_in_bounded_memory() {
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let mock = MockModel::start(vec![Step::Gate(gate.clone(), Box::new(Step::text("done")))]).await;
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"][0]["input"] = json!(["text", "image"]);
    models["providers"]["mock"]["models"][0]["contextWindow"] = json!(1_000_000);
    let h = Headless::new("image-session", &models);
    let file = h.ws.join("images.jsonl");
    image_session(&file, &h.ws, 30, 2);
    let size = std::fs::metadata(&file).unwrap().len();
    assert!(size > 60_000_000, "{size}");
    let child = Command::new(pi_e2e::pi_lsp_bin())
        .args(["run", "--workspace"])
        .arg(&h.ws)
        .arg("--session")
        .arg(&file)
        .args(["--model", "mock/mock-1", "say done"])
        .envs(h.env.iter().map(|(k, v)| (k, v)))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while mock.requests().is_empty() {
        assert!(std::time::Instant::now() < deadline, "no request");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let peak_mib = peak_rss_kib(child.id()) / 1024;
    gate.notify_one();
    let out = tokio::task::block_in_place(|| child.wait_with_output().unwrap());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    // Every image went to the model.
    let body = mock.requests()[0].body.to_string();
    assert_eq!(body.matches("data:image/png;base64,").count(), 30);
    eprintln!(
        "peak RSS {peak_mib} MiB for a {} MB session",
        size / 1_000_000
    );
    // main's build: 373 MiB (release) on this session; Pi 1.6.0's figure for a like one:
    // 219 MB. A debug build's peak here: 220 MiB.
    assert!(peak_mib < 250, "peak RSS {peak_mib} MiB");
}

/// Pi 1.6's `@path` arguments (`processFileArguments`), from a sub-folder of the workspace:
/// a text file (its byte-order mark dropped) as `<file name="ABS">`, an empty file left out,
/// a PNG as an image block after the text with an empty `<file name>` marker, the prompt
/// last; paths absolute with `..` and `.` removed. Pi 1.6.0 (`pi -p @sub/../a.txt "say hi"
/// @empty.txt @./img.png`, the same loopback model) sent this user message byte for byte. A
/// missing file: Pi's error, exit code 1, no session file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_arguments_go_into_the_prompt_as_pi_puts_them() {
    let mock = MockModel::start(vec![Step::text("ok")]).await;
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"][0]["input"] = json!(["text", "image"]);
    let h = Headless::new("file-args", &models);
    std::fs::write(h.ws.join("a.txt"), "\u{feff}hello file\nline2").unwrap();
    std::fs::write(h.ws.join("empty.txt"), "").unwrap();
    // A 2×2 red PNG.
    let png: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0x08, 0x02, 0x00, 0x00, 0x00, 0xfd,
        0xd4, 0x9a, 0x73, 0x00, 0x00, 0x00, 0x10, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8,
        0xcf, 0xc0, 0x00, 0x44, 0x0c, 0x10, 0x0a, 0x00, 0x1f, 0xee, 0x03, 0xfd, 0x8b, 0x5f, 0x14,
        0xd4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
    ];
    std::fs::write(h.ws.join("img.png"), png).unwrap();
    std::fs::create_dir_all(h.ws.join("sub")).unwrap();
    let ws = h.ws.canonicalize().unwrap();
    let out = tokio::task::block_in_place(|| {
        h.command(&["run", "--model", "mock/mock-1"])
            .args(["@sub/../a.txt", "say hi", "@empty.txt", "@./img.png"])
            .current_dir(&ws)
            .output()
            .unwrap()
    });
    assert_success(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    let sent = mock.requests()[0].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let w = ws.display();
    assert_eq!(
        sent,
        json!({"role": "user", "content": [
            {"type": "text", "text": format!("<file name=\"{w}/a.txt\">\nhello file\nline2\n</file>\n<file name=\"{w}/img.png\"></file>\nsay hi")},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR4nGP4z8AARAwQCgAf7gP9i18U1AAAAABJRU5ErkJggg=="}}
        ]})
    );

    let h2 = Headless::new("file-args-missing", &mock.models_json());
    let ws2 = h2.ws.canonicalize().unwrap();
    let out = tokio::task::block_in_place(|| {
        h2.command(&["run", "--model", "mock/mock-1", "@nope.txt", "hi"])
            .current_dir(&ws2)
            .output()
            .unwrap()
    });
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).as_ref(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        (
            Some(1),
            "",
            format!("Error: File not found: {}/nope.txt", ws2.display()).as_str()
        )
    );
    assert!(!ws2.join(".pi").exists(), "a missing file wrote a session");
    assert_eq!(mock.requests().len(), 1);
}

/// Pi 1.6's print mode (`print-mode.js`) on an answer cut at the model's output limit
/// (`finish_reason: "length"` with all of `maxTokens` used): the text on stdout, "Response was
/// truncated: the model reached its output token limit." as stderr's last line (after
/// pi-lsp's own notes), exit code 1. Pi 1.6.0 printed the same on the same loopback answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_answer_is_printed_and_fails_as_pi_prints_it() {
    let mock = MockModel::start(vec![Step::length("Partial ans", 4096)]).await;
    let h = Headless::new("length", &mock.models_json());
    let out = h.run(&["--model", "mock/mock-1", "hello"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).as_ref(),
            stderr.lines().last()
        ),
        (
            Some(1),
            "Partial ans\n",
            Some("Response was truncated: the model reached its output token limit.")
        )
    );
}

/// Pi 1.6's `--no-builtin-tools` (`noTools: "builtin"`): no built-in tool, extension tools
/// kept (here the built-in `todo` extension; Pi 1.6.0 has none, and sent no `tools`);
/// `--tools +ls` adds `ls`, `--tools read,grep` selects just those (Pi 1.6.0 sent `[ls]` and
/// `[read, grep]`); on a session Pi 1.6.0 ran with `--tools read,bash,ls` the recorded tools
/// are not restored. `--no-tools` wins over it. `-nbt` is Pi's short form of it (clap has no
/// multi-letter short flags: the command line is rewritten before it is parsed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_builtin_tools_keeps_extension_tools_only() {
    let mock = MockModel::start((0..5).map(|_| Step::text("ok")).collect()).await;
    let h = Headless::new("no-builtin-tools", &mock.models_json());
    let file = pi16_tools_session(&h);
    let m = ["--model", "mock/mock-1", "--no-builtin-tools"];
    assert_success(&h.run(&[m[0], m[1], m[2], "x"]));
    assert_success(&h.run(&[m[0], m[1], "-nbt", "--tools", "+ls", "x"]));
    assert_success(&h.run(&[m[0], m[1], m[2], "--tools", "read,grep", "x"]));
    assert_success(&h.run(&[m[0], m[1], m[2], "--session", &file, "x"]));
    assert_success(&h.run(&[m[0], m[1], m[2], "--no-tools", "x"]));
    let sent = tool_names_sent(&mock);
    assert_eq!(
        sent,
        [
            json!(["todo"]),
            json!(["todo", "ls"]),
            json!(["read", "grep"]),
            json!(["todo"]),
            Value::Null
        ]
    );
}

/// Pi 1.6's "restore missing settings metadata for older sessions" (`sdk.js`): a file with
/// messages but no `thinking_level_change`, resumed, gets the level it now runs at appended
/// right after its leaf, before the prompt (`medium` on a reasoning model, sent as
/// `reasoning_effort`; `off` on one without reasoning); a file that has one gets none. Pi
/// 1.6.0 appended `thinking_level_change` `off` at the same place on the same file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_file_without_a_thinking_level_gets_one_appended_as_pi_does() {
    let mock = MockModel::start((0..6).map(|_| Step::text("ok")).collect()).await;
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"] = json!([{"id": "r", "reasoning": true}, {"id": "p"}]);
    let h = Headless::new("thinking-resume", &models);
    let mut sent_levels = Vec::new();
    for model in ["r", "p"] {
        let ws = h.path().join(model);
        std::fs::create_dir_all(&ws).unwrap();
        let full = format!("mock/{model}");
        assert_success(&run(&ws, &h.env, &["--model", &full, "one"]));
        let file = session_file(&ws);
        let kept: Vec<String> = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .filter(|l| !l.contains("\"thinking_level_change\""))
            .map(str::to_string)
            .collect();
        std::fs::write(&file, kept.join("\n") + "\n").unwrap();
        let before = kept.len();
        assert_success(&run(&ws, &h.env, &["--model", &full, "-c", "two"]));
        assert_success(&run(&ws, &h.env, &["--model", &full, "-c", "three"]));
        let lines = session_lines(&ws);
        let added: Vec<(Value, Value)> = lines[before..]
            .iter()
            .map(|l| (l["type"].clone(), l["message"]["role"].clone()))
            .collect();
        assert_eq!(
            added,
            [
                (json!("thinking_level_change"), Value::Null),
                (json!("message"), json!("user")),
                (json!("message"), json!("assistant")),
                (json!("message"), json!("user")),
                (json!("message"), json!("assistant")),
            ]
        );
        assert_eq!(lines[before]["parentId"], lines[before - 1]["id"]);
        sent_levels.push(lines[before]["thinkingLevel"].clone());
    }
    assert_eq!(sent_levels, [json!("medium"), json!("off")]);
    let efforts: Vec<Value> = mock
        .requests()
        .iter()
        .map(|r| r.body["reasoning_effort"].clone())
        .collect();
    assert_eq!(
        efforts,
        [
            json!("medium"),
            json!("medium"),
            json!("medium"),
            Value::Null,
            Value::Null,
            Value::Null
        ]
    );
}

/// A copy, in `h`'s folder, of the session Pi 1.6.0 ran with `--tools read,bash,ls`
/// (`fixtures/sessions/pi16/pi-1.6.0-tools-read-bash-ls.jsonl`); returns its path.
fn pi16_tools_session(h: &Headless) -> String {
    let file = h.path().join("pi.jsonl");
    std::fs::copy(
        pi_e2e::fixtures().join("sessions/pi16/pi-1.6.0-tools-read-bash-ls.jsonl"),
        &file,
    )
    .unwrap();
    file.display().to_string()
}

/// Pi 1.6's print mode with further positional messages (`pi -p "a" "b"`): each a prompt of
/// its own, run once the one before has ended, the second request carrying the first
/// exchange; only the last answer printed; exit code from the last run. Pi 1.6.0 (the same
/// loopback model) printed `second`, exited 0, and sent these two requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn further_messages_run_as_further_prompts_as_pi_runs_them() {
    let mock = MockModel::start(vec![Step::text("first"), Step::text("second")]).await;
    let h = Headless::new("further-prompts", &mock.models_json());
    let out = h.run(&["--model", "mock/mock-1", "a", "b"]);
    assert_success(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "second\n");
    let sent: Vec<Vec<(Value, Value)>> = mock
        .requests()
        .iter()
        .map(|r| {
            r.body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] != "system")
                .map(|m| (m["role"].clone(), m["content"].clone()))
                .collect()
        })
        .collect();
    let user = |t: &str| (json!("user"), json!([{"type": "text", "text": t}]));
    assert_eq!(
        sent,
        [
            vec![user("a")],
            vec![user("a"), (json!("assistant"), json!("first")), user("b")]
        ]
    );
    let roles: Vec<Value> = session_lines(&h.ws)
        .iter()
        .filter(|l| l["type"] == "message" && l["message"]["role"] != "system")
        .map(|l| l["message"]["role"].clone())
        .collect();
    assert_eq!(
        roles,
        [
            json!("user"),
            json!("assistant"),
            json!("user"),
            json!("assistant")
        ]
    );
}

/// `run --thinking X` on a file with messages and no recorded level: only X is appended, right
/// after the leaf (Pi 1.6's `createAgentSession` records `options.thinkingLevel`; Pi 1.6.0
/// with `-c --thinking low` on such a file appended one `thinking_level_change` `low`), and
/// the request asks for X.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_flag_on_a_file_without_a_level_records_only_that_level() {
    let mock = MockModel::start((0..2).map(|_| Step::text("ok")).collect()).await;
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"] = json!([{"id": "r", "reasoning": true}]);
    let h = Headless::new("thinking-flag-resume", &models);
    assert_success(&h.run(&["--model", "mock/r", "one"]));
    let file = session_file(&h.ws);
    let kept: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .filter(|l| !l.contains("\"thinking_level_change\""))
        .map(str::to_string)
        .collect();
    std::fs::write(&file, kept.join("\n") + "\n").unwrap();
    let before = kept.len();
    assert_success(&h.run(&["--model", "mock/r", "-c", "--thinking", "low", "two"]));
    let lines = session_lines(&h.ws);
    let added: Vec<(Value, Value)> = lines[before..]
        .iter()
        .map(|l| (l["type"].clone(), l["thinkingLevel"].clone()))
        .collect();
    assert_eq!(
        added,
        [
            (json!("thinking_level_change"), json!("low")),
            (json!("message"), Value::Null),
            (json!("message"), Value::Null),
        ]
    );
    assert_eq!(lines[before]["parentId"], lines[before - 1]["id"]);
    assert_eq!(mock.requests()[1].body["reasoning_effort"], "low");
}

/// An Anthropic answer that started a `read` call of `f.txt` and then failed with the
/// provider's overflow error ("prompt is too long"): an `error` response carrying a tool call.
fn overflow_with_a_call() -> Step {
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    Step::Events(vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "model": "mock-ant-1", "content": [], "stop_reason": null,
                "usage": {"input_tokens": 100, "output_tokens": 1}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block":
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta":
                {"type": "input_json_delta", "partial_json": "{\"path\": \"f.txt\"}"}}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        event(
            "error",
            json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": "prompt is too long: 210000 tokens > 200000 maximum"}}),
        ),
    ])
}

/// Of a `--json` (ours) or `--mode json` (Pi's) run: the assistant `message_end`s as
/// `[type, stopReason, tool calls]`, each `turn_end` with its number of tool results, the
/// tool executions and the compaction events as `[type, reason, willRetry, whether a result
/// is given]`.
fn overflow_events(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| {
            let t = e["type"].as_str().unwrap_or("");
            let calls = |m: &Value| -> Vec<Value> {
                m["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == "toolCall")
                    .map(|b| json!([b["name"], b["arguments"]]))
                    .collect()
            };
            match t {
                "message_end" if e["message"]["role"] == "assistant" => {
                    Some(json!([t, e["message"]["stopReason"], calls(&e["message"])]))
                }
                "turn_end" => Some(json!([t, e["toolResults"].as_array().map(Vec::len)])),
                _ if t.starts_with("tool_execution") || t.starts_with("compaction") => {
                    Some(json!([
                        t,
                        e["reason"],
                        e["willRetry"],
                        e["result"].is_object()
                    ]))
                }
                _ => None,
            }
        })
        .collect()
}

/// Makes `mock` refuse every compaction summary request (Anthropic's 400 `invalid_request_error`,
/// "summaries refused"), answering the rest from its script.
fn refuse_summaries(mock: &MockModel) {
    mock.set_responder(std::sync::Arc::new(|body: &Value| {
        body.to_string()
            .contains("context summarization assistant")
            .then(|| Step::Raw {
                status: 400,
                content_type: "application/json".into(),
                body: json!({"type": "error", "error": {"type": "invalid_request_error",
                    "message": "summaries refused"}})
                .to_string(),
            })
    }));
}

/// An overflow error that carries a tool call, and whose compaction fails (the summary
/// request is refused): as Pi 1.6.0 (`--mode json` on the same script), the failed response
/// ends its turn once (`turn_end` without results), its call is never run and gets no result
/// (Pi's loop gives a failed response none; the response left the context with its
/// `context_edit`), the compaction's failure ends the run. The file holds the response and
/// its `context_edit`, nothing after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflow_with_a_call_whose_compaction_fails_ends_as_pi_ends_it() {
    let first = format!("first answer {}", "y".repeat(2000));
    let script = || {
        vec![
            Step::text(&first),
            overflow_with_a_call(),
            Step::text("never asked"),
        ]
    };
    let settings = json!({"compaction": {"keepRecentTokens": 100}}).to_string();
    let two = format!("two {}", "x".repeat(800));
    // The entries from the first user message on, as `type:role:stopReason`, and whether each
    // `context_edit` leaves out the entry right before it.
    let kinds = |lines: &[Value]| -> Vec<String> {
        let first = lines
            .iter()
            .position(|e| e["message"]["role"] == "user")
            .unwrap();
        lines[first..]
            .iter()
            .enumerate()
            .map(|(i, e)| match e["type"].as_str().unwrap() {
                "context_edit" => format!(
                    "context_edit:{}:{}",
                    e["targetId"] == lines[first + i - 1]["id"],
                    e["replacement"]
                ),
                t => format!(
                    "{t}:{}:{}",
                    e["message"]["role"].as_str().unwrap_or(""),
                    e["message"]["stopReason"].as_str().unwrap_or("")
                ),
            })
            .collect()
    };

    let mock = MockModel::start(script()).await;
    refuse_summaries(&mock);
    let h = Headless::new("overflow-call", &mock.models_json());
    std::fs::write(h.ws.join("f.txt"), "hello\n").unwrap();
    std::fs::write(h.agent.join("settings.json"), &settings).unwrap();
    let model = ["--model", "mockant/mock-ant-1"];
    assert_success(&h.run(&[&model[..], &["one"]].concat()));
    let ours = h.run(&[&model[..], &["--continue", "--json", &two]].concat());
    let our_lines = session_lines(&h.ws);
    assert_eq!(
        overflow_events(&ours),
        [
            json!(["message_end", "error", [["read", {"path": "f.txt"}]]]),
            json!(["turn_end", 0]),
            json!(["compaction_start", "overflow", null, false]),
            json!(["compaction_end", "overflow", false, false]),
        ]
    );
    assert_eq!(
        kinds(&our_lines),
        [
            "message:user:",
            "message:assistant:stop",
            "message:user:",
            "message:assistant:error",
            "context_edit:true:null",
        ]
    );
    assert_eq!(
        mock.requests()
            .iter()
            .filter(|r| !r
                .body
                .to_string()
                .contains("context summarization assistant"))
            .count(),
        2
    );

    let Some(pi) = pi_e2e::pi16_bin("overflow with a call") else {
        return;
    };
    let their_mock = MockModel::start(script()).await;
    refuse_summaries(&their_mock);
    let tmp = TempDir::new("overflow-call-pi16");
    let (ws, agent, sessions) = (
        tmp.join("ws"),
        tmp.join("agent"),
        tmp.join("sessions").display().to_string(),
    );
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(ws.join("f.txt"), "hello\n").unwrap();
    std::fs::write(agent.join("settings.json"), &settings).unwrap();
    std::fs::write(
        agent.join("models.json"),
        their_mock.models_json().to_string(),
    )
    .unwrap();
    let pi_model = ["--provider", "mockant", "--model", "mock-ant-1"];
    let dir = ["--session-dir", sessions.as_str()];
    let run_pi = |args: &[&str]| {
        pi_e2e::headless::run_pi(&pi, &ws, &agent, &tmp, [&pi_model[..], &dir, args].concat())
    };
    assert_success(&run_pi(&["-p", "one"]));
    let theirs = run_pi(&["--mode", "json", "--continue", &two]);
    assert_eq!(overflow_events(&ours), overflow_events(&theirs));
    let file = std::fs::read_dir(tmp.join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let their_lines: Vec<Value> = std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(kinds(&our_lines), kinds(&their_lines));
}

/// Print mode after an overflow whose recovery cannot retry, as Pi 1.6.0's print mode (`-p`
/// on the same scripts): the failed answer left the context (its `context_edit`), and Pi's
/// print mode reads the context's last message, so nothing is printed on stdout, the
/// provider's error is not printed either, and the exit code is 0. Two cases: the summary
/// request is refused (the compaction fails: `refused`), and a one-prompt session with
/// nothing older to summarise (no compaction starts: `small`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn print_mode_after_an_overflow_that_is_not_retried_is_pi_1_6_s() {
    let first = format!("first answer {}", "y".repeat(2000));
    let two = format!("two {}", "x".repeat(800));
    let settings = json!({"compaction": {"keepRecentTokens": 100}}).to_string();
    // `(name, script, prompts)`: the last prompt's run is the one compared.
    let cases = || {
        [
            (
                "refused",
                vec![
                    Step::text(&first),
                    overflow_with_a_call(),
                    Step::text("never asked"),
                ],
                vec!["one", two.as_str()],
            ),
            (
                "small",
                vec![overflow_with_a_call(), Step::text("never asked")],
                vec!["hi"],
            ),
        ]
    };
    // `(exit code, stdout, whether stderr names the provider's error)`.
    let said = |out: &std::process::Output| {
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).contains("prompt is too long"),
        )
    };
    let mut ours = Vec::new();
    for (name, script, prompts) in cases() {
        let mock = MockModel::start(script).await;
        refuse_summaries(&mock);
        let h = Headless::new(&format!("overflow-print-{name}"), &mock.models_json());
        std::fs::write(h.ws.join("f.txt"), "hello\n").unwrap();
        std::fs::write(h.agent.join("settings.json"), &settings).unwrap();
        let model = ["--model", "mockant/mock-ant-1"];
        let mut out = None;
        for (i, p) in prompts.iter().enumerate() {
            let cont: &[&str] = if i > 0 { &["--continue"] } else { &[] };
            out = Some(h.run(&[&model[..], cont, &[p]].concat()));
        }
        let out = out.unwrap();
        assert_eq!(
            said(&out),
            (Some(0), String::new(), false),
            "{name}: {out:?}"
        );
        let lines = session_lines(&h.ws);
        let n = lines.len();
        assert_eq!(lines[n - 1]["type"], "context_edit", "{name}");
        assert_eq!(lines[n - 1]["targetId"], lines[n - 2]["id"], "{name}");
        assert_eq!(lines[n - 2]["message"]["stopReason"], "error", "{name}");
        ours.push(said(&out));
    }

    let Some(pi) = pi_e2e::pi16_bin("print mode after an overflow") else {
        return;
    };
    for ((name, script, prompts), our) in cases().into_iter().zip(ours) {
        let mock = MockModel::start(script).await;
        refuse_summaries(&mock);
        let tmp = TempDir::new(&format!("overflow-print-{name}-pi16"));
        let (ws, agent) = (tmp.join("ws"), tmp.join("agent"));
        let sessions = tmp.join("sessions").display().to_string();
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::write(ws.join("f.txt"), "hello\n").unwrap();
        std::fs::write(agent.join("settings.json"), &settings).unwrap();
        std::fs::write(agent.join("models.json"), mock.models_json().to_string()).unwrap();
        let base = [
            "--provider",
            "mockant",
            "--model",
            "mock-ant-1",
            "--session-dir",
            sessions.as_str(),
            "-p",
        ];
        let mut out = None;
        for (i, p) in prompts.iter().enumerate() {
            let cont: &[&str] = if i > 0 { &["--continue"] } else { &[] };
            out = Some(pi_e2e::headless::run_pi(
                &pi,
                &ws,
                &agent,
                &tmp,
                [&base[..], cont, &[p]].concat(),
            ));
        }
        let theirs = out.unwrap();
        assert_eq!(said(&theirs), our, "{name}: {theirs:?}");
        // Pi says nothing on stderr either.
        assert_eq!(String::from_utf8_lossy(&theirs.stderr), "", "{name}");
    }
}

/// Session files of folder `cwd` in `dir` whose modification times disagree with their
/// messages' times (issue 29, pi44 b), named `<name>.jsonl` (`a` … `d`), each id
/// `0000000<n>-…`: `a`, messages of 2026-06-01 (numeric times), written in 2020; `b`, a user
/// message without a time of its own (its entry's 2026-03-01 counts) and an answer of
/// 2026-02-15, written last (2030); `c`, no message, header of 2026-04-01, written in 2021;
/// `d`, no message and no header time (its file's time counts: 2026-05-01). Pi 1.6's list
/// order: a, d, c, b; by modification time: b, d, c, a.
fn sessions_with_disagreeing_times(dir: &std::path::Path, cwd: &std::path::Path) {
    use std::time::{Duration, SystemTime};
    std::fs::create_dir_all(dir).unwrap();
    // Milliseconds since the epoch of the midnights (UTC) used here.
    let at = |iso: &str| -> i64 {
        match &iso[..10] {
            "2026-06-01" => 1_780_272_000_000,
            "2026-02-15" => 1_771_113_600_000,
            "2020-01-01" => 1_577_836_800_000,
            "2030-01-01" => 1_893_456_000_000,
            "2021-01-01" => 1_609_459_200_000,
            "2026-05-01" => 1_777_593_600_000,
            other => panic!("no time for {other}"),
        }
    };
    let user = |id: &str, entry_ts: &str, ts: Option<i64>, text: &str| {
        let mut m = json!({"type": "message", "id": id, "parentId": "m0", "timestamp": entry_ts,
            "message": {"role": "user", "content": [{"type": "text", "text": text}]}});
        if let Some(t) = ts {
            m["message"]["timestamp"] = json!(t);
        }
        m
    };
    let answer = |id: &str, parent: &str, ts: i64| {
        json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "earlier"}],
                "api": "openai-completions", "provider": "mock", "model": "mock-1",
                "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2,
                    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
                "stopReason": "stop", "timestamp": ts}})
    };
    let model = json!({"type": "model_change", "id": "m0", "parentId": null,
        "timestamp": "2026-01-01T00:00:00.000Z", "provider": "mock", "modelId": "mock-1"});
    let header = |n: u32, ts: Option<&str>| {
        let mut h = json!({"type": "session", "version": 3,
            "id": format!("0000000{n}-0000-7000-8000-000000000000"), "cwd": cwd});
        if let Some(t) = ts {
            h["timestamp"] = json!(t);
        }
        h
    };
    let files = [
        (
            "a",
            vec![
                header(1, Some("2026-01-01T00:00:00.000Z")),
                model.clone(),
                user(
                    "u1",
                    "2026-01-01T00:00:01.000Z",
                    Some(at("2026-06-01T00:00:00Z")),
                    "from a",
                ),
                answer("r1", "u1", at("2026-06-01T00:00:00Z") - 5),
            ],
            "2020-01-01T00:00:00Z",
        ),
        (
            "b",
            vec![
                header(2, Some("2026-01-01T00:00:00.000Z")),
                model.clone(),
                user("u1", "2026-03-01T00:00:00.000Z", None, "from b"),
                answer("r1", "u1", at("2026-02-15T00:00:00Z")),
            ],
            "2030-01-01T00:00:00Z",
        ),
        (
            "c",
            vec![header(3, Some("2026-04-01T00:00:00.000Z")), model.clone()],
            "2021-01-01T00:00:00Z",
        ),
        ("d", vec![header(4, None), model], "2026-05-01T00:00:00Z"),
    ];
    for (name, lines, mtime) in files {
        let path = dir.join(format!("{name}.jsonl"));
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&path, body).unwrap();
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(at(mtime) as u64);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
}

/// The user texts of the session file `path`.
fn user_texts(path: &std::path::Path) -> Vec<String> {
    pi_e2e::json_lines(path)
        .iter()
        .filter(|l| l["message"]["role"] == "user")
        .map(|l| pi_e2e::content_text(&l["message"]))
        .collect()
}

/// Issue 29 (pi44 b): `pi-lsp sessions` orders a folder's sessions as Pi 1.6's session list
/// (`SessionManager.list`, its `--resume` picker) — by the latest user or assistant message's
/// time, else the header's, else the file's — not by modification time, with Pi's `modified`
/// as `lastActivity`; `run -c` goes on with the file written last, as Pi 1.6.0's `--continue`
/// (`findMostRecentSession`) does on the same four files (checked against it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_list_by_message_time_and_continue_takes_the_file_written_last() {
    let mock = MockModel::start(vec![Step::text("ours")]).await;
    let h = Headless::new("list-order", &mock.models_json());
    let ws = h.ws.canonicalize().unwrap();
    sessions_with_disagreeing_times(&ws.join(".pi/sessions"), &ws);
    let listed = tokio::task::block_in_place(|| {
        h.command(&["sessions", "--json", "--workspace"])
            .arg(&ws)
            .output()
            .unwrap()
    });
    assert_success(&listed);
    let rows: Vec<(String, String)> = String::from_utf8(listed.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| {
            (
                r["id"].as_str().unwrap()[..8].to_string(),
                r["lastActivity"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let row = |id: &str, t: &str| (id.to_string(), t.to_string());
    assert_eq!(
        rows,
        [
            row("00000001", "2026-06-01T00:00:00Z"),
            row("00000004", "2026-05-01T00:00:00Z"),
            row("00000003", "2026-04-01T00:00:00Z"),
            row("00000002", "2026-03-01T00:00:00Z"),
        ]
    );
    assert_success(&h.run(&["--model", "mock/mock-1", "-c", "next"]));
    let ours = ws.join(".pi/sessions/b.jsonl");
    assert_eq!(user_texts(&ours), ["from b", "next"]);

    let Some(pi) = pi_e2e::pi16_bin("--continue compared with Pi 1.6.0") else {
        return;
    };
    let their_mock = MockModel::start(vec![Step::text("theirs")]).await;
    let tmp = TempDir::new("list-order-pi16");
    let (their_ws, agent, sessions) = (
        tmp.path().join("ws"),
        tmp.path().join("agent"),
        tmp.path().join("sessions"),
    );
    std::fs::create_dir_all(&their_ws).unwrap();
    let their_ws = their_ws.canonicalize().unwrap();
    agent_env(&agent, &their_mock.models_json(), &[]);
    sessions_with_disagreeing_times(&sessions, &their_ws);
    let out = pi_e2e::headless::run_pi_in(
        &pi,
        &their_ws,
        &agent,
        tmp.path(),
        &sessions,
        &["-c", "-p", "next"],
    );
    assert_success(&out);
    assert_eq!(user_texts(&sessions.join("b.jsonl")), ["from b", "next"]);
    assert_eq!(user_texts(&sessions.join("a.jsonl")), ["from a"]);
}

/// Issue 29 (pi44 c): `run --session <path>` where no file is keeps a new session there, as
/// Pi 1.6's print mode does (`SessionManager.open` of a missing path: its folders made, the
/// header's `cwd` the project folder, the given path kept); the next `--session` of that path
/// goes on with it. The same entries (types and roles, in order) as Pi 1.6.0 writes for the
/// same command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_path_where_no_file_is_starts_a_session_there_as_pi_does() {
    let mock = MockModel::start(vec![Step::text("one"), Step::text("two")]).await;
    let h = Headless::new("session-new-path", &mock.models_json());
    let ws = h.ws.canonicalize().unwrap();
    let m = ["--model", "mock/mock-1"];
    assert_success(&h.run(&[&m[..], &["--session", "new/dir/s.jsonl", "hi"]].concat()));
    let file = ws.join("new/dir/s.jsonl");
    assert_eq!(user_texts(&file), ["hi"]);
    assert!(!ws.join(".pi/sessions").exists());
    let ours = pi_e2e::json_lines(&file);
    assert_eq!(ours[0]["cwd"], json!(ws));
    assert_success(&h.run(&[&m[..], &["--session", "new/dir/s.jsonl", "again"]].concat()));
    assert_eq!(user_texts(&file), ["hi", "again"]);
    let shape = |lines: &[Value]| -> Vec<String> {
        lines
            .iter()
            .map(|l| format!("{} {}", l["type"], l["message"]["role"]))
            .collect()
    };

    let Some(pi) = pi_e2e::pi16_bin("--session <new path> compared with Pi 1.6.0") else {
        return;
    };
    let their_mock = MockModel::start(vec![Step::text("one")]).await;
    let tmp = TempDir::new("session-new-path-pi16");
    let (their_ws, agent) = (tmp.path().join("ws"), tmp.path().join("agent"));
    std::fs::create_dir_all(&their_ws).unwrap();
    let their_ws = their_ws.canonicalize().unwrap();
    agent_env(&agent, &their_mock.models_json(), &[]);
    let out = pi_e2e::headless::run_pi(
        &pi,
        &their_ws,
        &agent,
        tmp.path(),
        ["--session", "new/dir/s.jsonl", "-p", "hi"],
    );
    assert_success(&out);
    let theirs = pi_e2e::json_lines(&their_ws.join("new/dir/s.jsonl"));
    assert_eq!(theirs[0]["cwd"], json!(their_ws));
    assert_eq!(shape(&ours), shape(&theirs));
}

/// Issue 29 (pi44 d): every relative path `run` takes — `@file` arguments, `--session` paths
/// (`a_relative_session_path_is_taken_from_the_workspace_folder`), `--system-prompt` /
/// `--append-system-prompt` files — is taken from the workspace folder (`--workspace`; Pi's folder is its project),
/// whichever folder `pi-lsp` was started from: `@a.txt` is the workspace's, not the one
/// beside the process, and a file only there is not found (Pi's error naming the workspace's
/// path, exit code 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_arguments_are_taken_from_the_workspace_folder() {
    let mock = MockModel::start(vec![Step::text("ok"), Step::text("ok")]).await;
    let h = Headless::new("file-args-workspace", &mock.models_json());
    let ws = h.ws.canonicalize().unwrap();
    let elsewhere = h.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(ws.join("a.txt"), "inside").unwrap();
    std::fs::write(elsewhere.join("a.txt"), "outside").unwrap();
    std::fs::write(elsewhere.join("only.txt"), "outside only").unwrap();
    let run_from = |args: &[&str]| {
        tokio::task::block_in_place(|| {
            h.command(&["run", "--model", "mock/mock-1", "--workspace"])
                .arg(&ws)
                .args(args)
                .current_dir(&elsewhere)
                .output()
                .unwrap()
        })
    };
    assert_success(&run_from(&["@a.txt", "hi"]));
    let sent = pi_e2e::content_text(
        mock.requests()[0].body["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap(),
    );
    let w = ws.display();
    assert_eq!(
        sent,
        format!("<file name=\"{w}/a.txt\">\ninside\n</file>\nhi")
    );
    let out = run_from(&["@only.txt", "hi"]);
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        (
            Some(1),
            format!("Error: File not found: {w}/only.txt").as_str()
        )
    );
    // `--append-system-prompt <path>` too: the workspace's file.
    std::fs::write(ws.join("extra.md"), "From the workspace.").unwrap();
    std::fs::write(elsewhere.join("extra.md"), "From elsewhere.").unwrap();
    assert_success(&run_from(&["--append-system-prompt", "extra.md", "hi"]));
    let (prompt, _) = prompt_and_tools(&mock.requests()[1].body);
    assert!(
        prompt.contains("<addendum>\nFrom the workspace.\n</addendum>"),
        "{prompt}"
    );
}

/// Issue 29 (pi44 c): `run --session <id>` of another project's session (found in Pi's
/// sessions folder, not this folder's) runs nothing, as Pi 1.6.0's print mode on the same
/// files: it says `Session found in different project: <cwd>` (stderr's first line, the same
/// words), asks whether to fork it — which `pi-lsp run` cannot, and Pi's question goes
/// unanswered without a terminal — and exits 0 with nothing sent to the model and no session
/// written in this folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_id_of_another_project_runs_nothing_as_pi_does() {
    let mock = MockModel::start(vec![Step::text("never")]).await;
    let h = Headless::new("session-other-project", &mock.models_json());
    let other = h.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let other = other.canonicalize().unwrap();
    let id = "0b000000-0000-7000-8000-000000000000";
    let write = |agent: &std::path::Path| {
        let safe = other
            .display()
            .to_string()
            .trim_start_matches('/')
            .replace('/', "-");
        let dir = agent.join("sessions").join(format!("--{safe}--"));
        std::fs::create_dir_all(&dir).unwrap();
        let lines = [
            json!({"type": "session", "version": 3, "id": id, "timestamp": "2026-12-01T10:00:00.000Z", "cwd": other}),
            json!({"type": "model_change", "id": "e1", "parentId": null, "timestamp": "2026-12-01T10:00:00.001Z", "provider": "mock", "modelId": "mock-1"}),
            json!({"type": "message", "id": "e2", "parentId": "e1", "timestamp": "2026-12-01T10:00:01.000Z", "message": {"role": "user", "content": [{"type": "text", "text": "there"}], "timestamp": 1796119201000u64}}),
        ];
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(
            dir.join(format!("2026-12-01T10-00-00-000Z_{id}.jsonl")),
            body,
        )
        .unwrap();
    };
    write(&h.agent);
    let out = h.run(&["--model", "mock/mock-1", "--session", &id[..8], "again"]);
    let ours = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        (out.status.code(), out.stdout.as_slice()),
        (Some(0), &b""[..]),
        "{ours}"
    );
    assert_eq!(
        ours.lines().next(),
        Some(format!("Session found in different project: {}", other.display()).as_str())
    );
    assert!(mock.requests().is_empty());
    assert!(!h.ws.join(".pi").exists());

    let Some(pi) = pi_e2e::pi16_bin("another project's session compared with Pi 1.6.0") else {
        return;
    };
    let their_mock = MockModel::start(vec![Step::text("never")]).await;
    let tmp = TempDir::new("session-other-project-pi16");
    let (their_ws, agent) = (tmp.path().join("ws"), tmp.path().join("agent"));
    std::fs::create_dir_all(&their_ws).unwrap();
    agent_env(&agent, &their_mock.models_json(), &[]);
    write(&agent);
    let out = pi_e2e::headless::run_pi(
        &pi,
        &their_ws.canonicalize().unwrap(),
        &agent,
        tmp.path(),
        ["--session", &id[..8], "-p", "again"],
    );
    let theirs = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        (out.status.code(), out.stdout.as_slice()),
        (Some(0), &b""[..]),
        "{theirs}"
    );
    assert_eq!(theirs.lines().next(), ours.lines().next());
    assert!(their_mock.requests().is_empty());
}

/// `run --json` starts with the session's header as Pi 1.6's `--mode json` does (its
/// docs/json.md: "The first JSON-mode record is the current session header"): a new session's,
/// equal to the file's first line; a resumed file's own header (here one with
/// `parentSession`, kept whole); with `--no-session` a header naming the workspace. Then the
/// run's events, `agent_start` first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_output_starts_with_the_session_header() {
    let mock = MockModel::start(vec![
        Step::text("one"),
        Step::text("two"),
        Step::text("three"),
    ])
    .await;
    let h = Headless::new("headless-json-header", &mock.models_json());
    let records = |out: &std::process::Output| -> Vec<Value> {
        assert_success(out);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    // A new session: the header is the file's first line, with Pi's keys in Pi's order.
    let fresh = records(&h.run(&["--json", "--model", "mock/mock-1", "hi"]));
    let file = session_file(&h.ws);
    let lines = session_lines(&h.ws);
    assert_eq!(fresh[0], lines[0]);
    assert_eq!(
        keys(&fresh[0]),
        ["type", "version", "id", "timestamp", "cwd"]
    );
    assert_eq!(fresh[0]["type"], "session");
    assert_eq!(fresh[0]["version"], 3);
    assert_eq!(fresh[0]["cwd"], h.ws.display().to_string());
    assert_eq!(fresh[1], json!({"type": "agent_start"}));
    assert_eq!(fresh.iter().filter(|r| r["type"] == "session").count(), 1);
    // A resumed file whose header names a parent session: printed as the file holds it.
    let forked = h.ws.join("forked.jsonl");
    let mut header = lines[0].clone();
    header["id"] = json!("0198f0aa-0000-7000-8000-00000000f0cc");
    header["parentSession"] = json!(file.display().to_string());
    let body: Vec<String> = std::iter::once(header.to_string())
        .chain(lines[1..].iter().map(Value::to_string))
        .collect();
    std::fs::write(&forked, body.join("\n") + "\n").unwrap();
    let resumed = records(&h.run(&["--json", "--session", forked.to_str().unwrap(), "again"]));
    assert_eq!(resumed[0], header);
    assert_eq!(resumed[1], json!({"type": "agent_start"}));
    // --no-session: a header of its own (a new id) for the workspace.
    let none = records(&h.run(&["--json", "--model", "mock/mock-1", "--no-session", "x"]));
    assert_eq!(
        keys(&none[0]),
        ["type", "version", "id", "timestamp", "cwd"]
    );
    assert_eq!(none[0]["cwd"], h.ws.display().to_string());
    assert_ne!(none[0]["id"], fresh[0]["id"]);
    assert_eq!(none[1], json!({"type": "agent_start"}));
}

/// A resumed session whose recorded model is gone from models.json runs on the usual choice
/// and says so as Pi 1.6 does (`createAgentSession`'s `modelFallbackMessage`, printed by its
/// print mode as a `Warning:` diagnostic on stderr); one that is still there says nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_session_whose_model_is_gone_warns_as_pi_does() {
    let mock = MockModel::start(vec![
        Step::text("one"),
        Step::text("two"),
        Step::text("three"),
    ])
    .await;
    let mut models = mock.models_json();
    models["providers"]["mock"]["models"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "old-1", "contextWindow": 128000, "maxTokens": 4096}));
    let h = Headless::new("headless-model-gone", &models);
    assert_success(&h.run(&["--model", "mock/old-1", "hi"]));
    // Still there: resumed on it, no warning.
    let out = h.run(&["--continue", "again"]);
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("Warning:"), "{stderr}");
    assert_eq!(mock.requests()[1].body["model"], "old-1");
    // Gone: the first line of stderr is Pi's warning, the request goes to the fallback.
    std::fs::write(h.agent.join("models.json"), mock.models_json().to_string()).unwrap();
    let out = h.run(&["--continue", "third"]);
    assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        stderr.lines().next(),
        Some("Warning: Could not restore model mock/old-1. Using mock/mock-1"),
        "{stderr}"
    );
    assert_eq!(mock.requests()[2].body["model"], "mock-1");
}

/// A PNG of `w`×`h` pixels (a gradient, so it does not compress to nothing).
fn png_of(w: u32, h: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(x % 256) as u8, (y % 256) as u8, 128])
    });
    let mut out = Vec::new();
    image::DynamicImage::ImageRgb8(img)
        .write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

/// The size of the PNG or JPEG in a chat-completions `image_url` data URL.
fn data_url_size(url: &str) -> (u32, u32) {
    use base64::Engine as _;
    let b64 = url.split_once("base64,").unwrap().1;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    let img = image::load_from_memory(&bytes).unwrap();
    (img.width(), img.height())
}

/// `images.autoResize` as Pi 1.6 reads it (`_normalizePromptImages` for a prompt's images,
/// `read: {autoResizeImages}` for the tool): by default a 3000×20 `@file` image is sent at
/// 2000×13 with Pi's dimension note after the prompt text, and `read` fits it the same way;
/// with `autoResize: false` both send it at 3000×20 without a note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_auto_resize_is_pis() {
    for auto in [true, false] {
        let mock = MockModel::start(vec![
            Step::text("seen"),
            Step::call("c1", "read", json!({"path": "big.png"})),
            Step::text("read"),
        ])
        .await;
        let mut models = mock.models_json();
        models["providers"]["mock"]["models"][0]["input"] = json!(["text", "image"]);
        let h = Headless::new("headless-autoresize", &models);
        if !auto {
            std::fs::write(
                h.agent.join("settings.json"),
                json!({"images": {"autoResize": false}}).to_string(),
            )
            .unwrap();
        }
        std::fs::write(h.ws.join("big.png"), png_of(3000, 20)).unwrap();
        let w = h.ws.display().to_string();
        assert_success(&h.run(&["--model", "mock/mock-1", "@big.png", "what"]));
        assert_success(&h.run(&["--model", "mock/mock-1", "--no-session", "read big.png"]));
        let reqs = mock.requests();
        // The prompt: its text (the note after a blank line when fitted) and the image's size.
        let user = &reqs[0].body["messages"].as_array().unwrap().last().unwrap()["content"];
        let note = "[Image: original 3000x20, displayed at 2000x13. Multiply coordinates by 1.50 to map to original image.]";
        let text = format!("<file name=\"{w}/big.png\"></file>\nwhat");
        let text = if auto {
            format!("{text}\n\n{note}")
        } else {
            text
        };
        assert_eq!(
            user[0],
            json!({"type": "text", "text": text}),
            "autoResize {auto}"
        );
        let size = if auto { (2000, 13) } else { (3000, 20) };
        assert_eq!(
            data_url_size(user[1]["image_url"]["url"].as_str().unwrap()),
            size
        );
        // The read tool's result, as the next request carries it.
        let msgs = reqs[2].body["messages"].as_array().unwrap();
        let tool = msgs.iter().find(|m| m["role"] == "tool").unwrap();
        let read = if auto {
            format!("Read image file [image/png]\n{note}")
        } else {
            "Read image file [image/png]".to_string()
        };
        let attached = msgs.iter().rev().find(|m| m["role"] == "user").unwrap();
        assert!(
            tool["content"]
                .to_string()
                .contains(&read.replace('\n', "\\n"))
                || attached["content"]
                    .to_string()
                    .contains(&read.replace('\n', "\\n")),
            "autoResize {auto}: {tool} {attached}"
        );
        let url = attached["content"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|b| b["image_url"]["url"].as_str())
            .unwrap();
        assert_eq!(data_url_size(url), size, "autoResize {auto}");
    }
}

/// The tool names each request to `mock` carried (chat completions' `tools`), in order; `null`
/// for a request without tools.
fn tool_names_sent(mock: &MockModel) -> Vec<Value> {
    mock.requests()
        .iter()
        .map(|r| match r.body.get("tools") {
            None => Value::Null,
            Some(t) => t
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["function"]["name"].clone())
                .collect(),
        })
        .collect()
}

/// `run`'s environment with only warnings logged, as a user's run has it (the tests' default
/// logs `info` lines too).
fn warn_only(h: &mut Headless) {
    for (k, v) in h.env.iter_mut() {
        if *k == "PI_LSP_LOG" {
            *v = "warn".into();
        }
    }
}

/// (exit code, stdout, stderr) of a finished process.
fn outcome(out: &std::process::Output) -> (Option<i32>, String, String) {
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 29 (found from outside): a session file with a damaged line is repaired while opening
/// and the repair is said once, as one `Warning:` line (no log lines repeating it), then the
/// run goes on. Pi 1.6.0 says nothing about it (its loader skips the line silently); pi-lsp
/// says it because the line is left out of what the model is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repaired_session_is_said_once() {
    let mock = MockModel::start(vec![Step::text("ok"), Step::text("ok")]).await;
    let mut h = Headless::new("repair-once", &mock.models_json());
    warn_only(&mut h);
    let ws = h.ws.canonicalize().unwrap();
    let damaged = |dir: &std::path::Path| {
        std::fs::create_dir_all(dir).unwrap();
        let file = dir.join("x.jsonl");
        let lines = [
            json!({"type": "session", "version": 3, "id": "s2", "timestamp": "2026-12-01T10:00:00.000Z", "cwd": ws}).to_string(),
            json!({"type": "model_change", "id": "e1", "parentId": null, "timestamp": "2026-12-01T10:00:00.001Z", "provider": "mock", "modelId": "mock-1"}).to_string(),
            "\u{0}\u{0}\u{0}not a line".to_string(),
            json!({"type": "message", "id": "e2", "parentId": "e1", "timestamp": "2026-12-01T10:00:01.000Z", "message": {"role": "user", "content": [{"type": "text", "text": "there"}], "timestamp": 1796119201000u64}}).to_string(),
        ];
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        file
    };
    let file = damaged(&ws.join(".pi/sessions"));
    let out = h.run(&[
        "--model",
        "mock/mock-1",
        "--session",
        file.to_str().unwrap(),
        "go",
    ]);
    let (code, stdout, stderr) = outcome(&out);
    assert_eq!((code, stdout.as_str()), (Some(0), "ok\n"), "{stderr}");
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            format!(
                "Warning: pi-lsp: session s2 was repaired while opening: skipped 1 damaged line(s) in {}",
                file.display()
            ),
            format!("pi-lsp: session saved to {}", file.display()),
        ]
    );

    let Some(pi) = pi_e2e::pi16_bin("a damaged session file compared with Pi 1.6.0") else {
        return;
    };
    let tmp = TempDir::new("repair-once-pi16");
    let agent = tmp.path().join("agent");
    agent_env(&agent, &mock.models_json(), &[]);
    let file = damaged(&ws.join("pi16"));
    let out = pi_e2e::headless::run_pi(
        &pi,
        &ws,
        &agent,
        tmp.path(),
        ["--session", file.to_str().unwrap(), "-p", "go"],
    );
    assert_eq!(outcome(&out), (Some(0), "ok\n".into(), String::new()));
}

/// Issue 29 (found from outside): `run`'s exit codes and words where Pi 1.6.0's print mode has
/// them, checked against it: a `--model` no provider has (exit 1, Pi's error), a `--session`
/// id that matches nothing (exit 1, Pi's line), no prompt at all (exit 0, nothing printed,
/// sent or written); and a `--session` prefix that several sessions share continues the
/// newest of them, as Pi's `resolveSessionPath` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_exit_as_pi_s_print_mode_in_its_words() {
    let mock = MockModel::start(vec![
        Step::text("one"),
        Step::text("two"),
        Step::text("three"),
    ])
    .await;
    let mut h = Headless::new("usage-exit", &mock.models_json());
    warn_only(&mut h);
    let bad_model = (
        Some(1),
        String::new(),
        "Error: Model \"zz/mock-1\" not found. Use --list-models to see available models.\n"
            .to_string(),
    );
    let no_session = (
        Some(1),
        String::new(),
        "No session found matching 'deadbeef'\n".to_string(),
    );
    let silent = (Some(0), String::new(), String::new());
    assert_eq!(outcome(&h.run(&["--model", "zz/mock-1", "hi"])), bad_model);
    assert_eq!(
        outcome(&h.run(&["--model", "mock/mock-1", "--session", "deadbeef", "hi"])),
        no_session
    );
    assert_eq!(outcome(&h.run(&["--model", "mock/mock-1"])), silent);
    assert!(mock.requests().is_empty());
    assert!(!h.ws.join(".pi").exists());
    // Two sessions (ids of one millisecond's time start alike): the newest is continued.
    for p in ["first", "first b"] {
        assert_success(&h.run(&["--model", "mock/mock-1", p]));
        std::thread::sleep(Duration::from_millis(20));
    }
    let dir = h.ws.join(".pi/sessions");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    let newest = files.last().unwrap().clone();
    let id = pi_e2e::json_lines(&newest)[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = h.run(&["--model", "mock/mock-1", "--session", &id[..2], "third"]);
    assert_success(&out);
    assert_eq!(user_texts(&newest), ["first b", "third"]);

    let Some(pi) = pi_e2e::pi16_bin("print mode's usage errors compared with Pi 1.6.0") else {
        return;
    };
    let tmp = TempDir::new("usage-exit-pi16");
    let (ws, agent) = (tmp.path().join("ws"), tmp.path().join("agent"));
    std::fs::create_dir_all(&ws).unwrap();
    agent_env(&agent, &mock.models_json(), &[]);
    let pi_out = |args: &[&str]| {
        let mut cmd = pi_e2e::headless::pi_bare_command(&pi, &ws, &agent, tmp.path());
        cmd.args(args);
        outcome(&tokio::task::block_in_place(|| cmd.output().unwrap()))
    };
    let before = mock.requests().len();
    assert_eq!(pi_out(&["-p", "--model", "zz/mock-1", "hi"]), bad_model);
    assert_eq!(
        pi_out(&[
            "-p",
            "--model",
            "mock/mock-1",
            "--session",
            "deadbeef",
            "hi"
        ]),
        no_session
    );
    assert_eq!(pi_out(&["-p", "--model", "mock/mock-1"]), silent);
    assert_eq!(mock.requests().len(), before);
}

/// Issue 29 (found from outside): `--thinking` with a word that is no level is Pi 1.6.0's
/// warning, in its words, and the run goes on at the level it would have had (checked
/// against Pi 1.6.0: same stderr line, same answer, exit 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_thinking_level_is_warned_about_and_the_run_goes_on() {
    let mock = MockModel::start(vec![Step::text("answer"), Step::text("answer")]).await;
    let mut h = Headless::new("bad-thinking", &mock.models_json());
    warn_only(&mut h);
    let warning = "Warning: Invalid thinking level \"bogus\". Valid values: off, minimal, low, medium, high, xhigh, max";
    let out = h.run(&["--model", "mock/mock-1", "--thinking", "bogus", "hi"]);
    let (code, stdout, stderr) = outcome(&out);
    assert_eq!((code, stdout.as_str()), (Some(0), "answer\n"), "{stderr}");
    assert_eq!(stderr.lines().next(), Some(warning));
    assert_eq!(mock.requests().len(), 1);

    let Some(pi) = pi_e2e::pi16_bin("--thinking bogus compared with Pi 1.6.0") else {
        return;
    };
    let tmp = TempDir::new("bad-thinking-pi16");
    let (ws, agent) = (tmp.path().join("ws"), tmp.path().join("agent"));
    std::fs::create_dir_all(&ws).unwrap();
    agent_env(&agent, &mock.models_json(), &[]);
    let out = pi_e2e::headless::run_pi(
        &pi,
        &ws,
        &agent,
        tmp.path(),
        ["--thinking", "bogus", "-p", "hi"],
    );
    assert_eq!(
        outcome(&out),
        (Some(0), "answer\n".into(), format!("{warning}\n"))
    );
}

/// Issue 29 (found from outside): Pi 1.6.0's print-mode flags `run` takes with Pi's meaning:
/// `-p` and `--offline` / `--verbose` (nothing to change), `--mode json` (`--json`),
/// `--provider P --model M`, `--session-dir`, `--name` (a `session_info` entry), `--fork` (a
/// new file whose header names its parent, holding its entries, then the run; here by path,
/// as `--session-dir` is where ids are looked up),
/// `--session-id` of an existing session, `--list-models` (Pi's table, the same bytes as Pi
/// 1.6.0 prints); and the ones it refuses in Pi's way (exit 1, one `Error:` line):
/// `--mode rpc`, `--api-key`, `--session-id` of no session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_s_print_mode_flags_are_taken_with_pi_s_meaning() {
    let mock = MockModel::start((0..8).map(|i| Step::text(&format!("answer {i}"))).collect()).await;
    let mut h = Headless::new("pi-flags", &mock.models_json());
    warn_only(&mut h);
    let answer = |out: &std::process::Output| {
        let (code, stdout, stderr) = outcome(out);
        assert_eq!(code, Some(0), "{stderr}");
        stdout
    };
    assert_eq!(
        answer(&h.run(&[
            "-p",
            "--offline",
            "--verbose",
            "--provider",
            "mock",
            "--model",
            "mock-1",
            "hi"
        ])),
        "answer 0\n"
    );
    let first = session_file(&h.ws);
    let id = pi_e2e::json_lines(&first)[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let json_out = answer(&h.run(&[
        "--mode",
        "json",
        "--model",
        "mock/mock-1",
        "--session-id",
        &id,
        "again",
    ]));
    assert_eq!(
        serde_json::from_str::<Value>(json_out.lines().next().unwrap()).unwrap(),
        pi_e2e::json_lines(&first)[0]
    );
    assert_eq!(user_texts(&first), ["hi", "again"]);
    // The fork: a second file, its parent named, the entries copied, then the run's.
    let sd = h.path().join("sd");
    assert_eq!(
        answer(&h.run(&[
            "--model",
            "mock/mock-1",
            "--session-dir",
            sd.to_str().unwrap(),
            "--fork",
            first.to_str().unwrap(),
            "--name",
            " nm ",
            "forked"
        ])),
        "answer 2\n"
    );
    let forks: Vec<_> = std::fs::read_dir(&sd)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert_eq!(forks.len(), 1, "{forks:?}");
    let lines = pi_e2e::json_lines(&forks[0]);
    assert_eq!(
        lines[0]["parentSession"],
        json!(first.display().to_string())
    );
    assert_ne!(lines[0]["id"], json!(id));
    assert_eq!(user_texts(&forks[0]), ["hi", "again", "forked"]);
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["type"] == "session_info")
            .map(|l| l["name"].clone())
            .collect::<Vec<_>>(),
        [json!("nm")]
    );
    // Refused in Pi's way.
    for (args, line) in [
        (vec!["--mode", "rpc", "hi"], pi_lsp_rpc_refused()),
        (vec!["--api-key", "k", "--model", "mock/mock-1", "hi"], pi_lsp_api_key_refused()),
        (vec!["--session-id", "nope-1", "hi"], "Error: --session-id: no session of this folder has id 'nope-1', and `pi-lsp run` cannot start a session with an id of your choosing".to_string()),
        (vec!["--mode", "yaml", "hi"], "Error: Invalid mode \"yaml\". Valid values: text, json, rpc".to_string()),
        (vec!["--provider", "mock", "hi"], "Error: --provider requires --model (for example: --provider mock --model <pattern>)".to_string()),
    ] {
        assert_eq!(outcome(&h.run(&args)), (Some(1), String::new(), format!("{line}\n")), "{args:?}");
    }
    assert_eq!(mock.requests().len(), 3);
    let table = "provider  model       context  max-out  thinking  images\nmock      mock-1      128K     4.1K     no        no    \nmockant   mock-ant-1  200K     4.1K     no        no    \n";
    assert_eq!(
        outcome(&h.run(&["--list-models"])),
        (Some(0), table.to_string(), String::new())
    );
    assert_eq!(outcome(&h.run(&["--list-models", "ant"])).1, "provider  model       context  max-out  thinking  images\nmockant   mock-ant-1  200K     4.1K     no        no    \n");

    let Some(pi) = pi_e2e::pi16_bin("--list-models compared with Pi 1.6.0") else {
        return;
    };
    let tmp = TempDir::new("pi-flags-pi16");
    let (ws, agent) = (tmp.path().join("ws"), tmp.path().join("agent"));
    std::fs::create_dir_all(&ws).unwrap();
    agent_env(&agent, &mock.models_json(), &[]);
    for search in [None, Some("ant")] {
        let mut cmd = pi_e2e::headless::pi_bare_command(&pi, &ws, &agent, tmp.path());
        cmd.arg("--list-models").args(search);
        let theirs = outcome(&tokio::task::block_in_place(|| cmd.output().unwrap()));
        let ours = outcome(
            &h.run(
                &["--list-models"]
                    .into_iter()
                    .chain(search)
                    .collect::<Vec<_>>(),
            ),
        );
        assert_eq!(ours, theirs, "{search:?}");
    }
}

/// [`pi_lsp::headless::RPC_REFUSED`], as the test binary cannot link the binary's crate.
fn pi_lsp_rpc_refused() -> String {
    "Error: --mode rpc is not served by `pi-lsp run`; `pi-lsp` serves the editor protocol (LSP) and `pi-lsp acp` the Agent Client Protocol".into()
}

/// [`pi_lsp::headless::API_KEY_REFUSED`].
fn pi_lsp_api_key_refused() -> String {
    "Error: --api-key is not supported by `pi-lsp run`; put the key in models.json (`apiKey`) or in the provider's environment variable".into()
}

/// Issue 29 (found from outside): no prompt on a resumed session (`-c`) sends nothing and prints
/// the session's last answer, as Pi 1.6.0's print mode does (it prints the context's last
/// message); with `--mode json` the session's header alone. Checked against Pi 1.6.0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_prompt_on_a_resumed_session_prints_its_last_answer_as_pi() {
    let mock = MockModel::start(vec![
        Step::text("answer one\nline two"),
        Step::text("answer one\nline two"),
    ])
    .await;
    let mut h = Headless::new("no-prompt-resumed", &mock.models_json());
    warn_only(&mut h);
    assert_success(&h.run(&["--model", "mock/mock-1", "first"]));
    let header = pi_e2e::json_lines(&session_file(&h.ws))[0].clone();
    let text = (Some(0), "answer one\nline two\n".to_string(), String::new());
    assert_eq!(outcome(&h.run(&["-c"])), text);
    let (code, stdout, stderr) = outcome(&h.run(&["-c", "--mode", "json"]));
    assert_eq!((code, stderr.as_str()), (Some(0), ""));
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, [header]);
    assert_eq!(mock.requests().len(), 1);

    let Some(pi) = pi_e2e::pi16_bin("no prompt on a resumed session compared with Pi 1.6.0") else {
        return;
    };
    let tmp = TempDir::new("no-prompt-resumed-pi16");
    let (ws, agent) = (tmp.path().join("ws"), tmp.path().join("agent"));
    std::fs::create_dir_all(&ws).unwrap();
    agent_env(&agent, &mock.models_json(), &[]);
    assert_success(&pi_e2e::headless::run_pi(
        &pi,
        &ws,
        &agent,
        tmp.path(),
        ["-p", "first"],
    ));
    let out = pi_e2e::headless::run_pi(&pi, &ws, &agent, tmp.path(), ["-p", "-c"]);
    assert_eq!(outcome(&out), text);
    assert_eq!(mock.requests().len(), 2);
}
