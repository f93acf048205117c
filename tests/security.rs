//! The security boundary through the real `pi-lsp` binary over stdio, a fake editor and the
//! loopback mock model: a command the sandbox denied is re-run outside it only after the
//! editor approved (`agent/requestPermission`, or `window/showMessageRequest` for clients
//! without it), a rejection is an error result with the reason, and a secret scan of
//! everything the server wrote and sent after a session with keys in the environment and in
//! models.json (literal, variable name, `!command`), including a provider error that echoes
//! the key.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use pi_e2e::lsp_client::{agent_env, tool_result_text, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::TempDir;
use serde_json::{json, Value};

/// Whether the kernel enforces Landlock (the escalation tests need a sandbox that denies);
/// the same probe the server uses.
fn sandbox_available() -> bool {
    match &pi_core::sandbox::support().files {
        Ok(_) => true,
        Err(why) => {
            eprintln!("no sandbox: {why}");
            false
        }
    }
}

async fn escalation_run(name: &str, behavior: EditorBehavior) -> (Vec<Value>, LspClient, TempDir) {
    let tmp = TempDir::new(name);
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mock = MockModel::start(vec![
        Step::call(
            "call_esc",
            "bash",
            json!({"command": "echo hi > ../escaped.txt && echo wrote"}),
        ),
        Step::text("done"),
    ])
    .await;
    let env = agent_env(&tmp.path().join("agent"), &mock.models_json(), &[]);
    let mut c = LspClient::start(&pi_e2e::pi_lsp_bin(), &ws, &env, behavior).await;
    c.request(
        "agent/prompt",
        json!({"text": "write outside", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let events = c.run_until_end(Duration::from_secs(30)).await;
    mock.assert_paired();
    (events, c, tmp)
}

fn requests(c: &LspClient, method: &str) -> Vec<Value> {
    c.log()
        .into_iter()
        .filter(|m| m["method"] == method && m.get("id").is_some())
        .map(|m| m["params"].clone())
        .collect()
}

fn session_id(events: &[Value]) -> String {
    events[0]["sessionId"].as_str().unwrap().to_string()
}

// bash names itself by the path it was started with (`/bin/bash`: Pi 1.6's shell lookup).
const DENIED: &str = "/bin/bash: line 1: ../escaped.txt: Permission denied";

#[tokio::test]
async fn denied_command_reruns_after_the_editor_allows() {
    if !pi_e2e::require(
        sandbox_available(),
        "denied_command_reruns_after_the_editor_allows",
        "Landlock",
    ) {
        return;
    }
    let (events, c, tmp) = escalation_run(
        "esc-allow",
        EditorBehavior {
            permission_answer: Some(json!({"decision": "allow"})),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        requests(&c, "agent/requestPermission"),
        vec![json!({
            "sessionId": session_id(&events),
            "tool": "bash",
            "toolCallId": "call_esc",
            "arguments": {"command": "echo hi > ../escaped.txt && echo wrote"},
            "reason": format!("sandbox denied: {DENIED}"),
        })]
    );
    assert_eq!(
        requests(&c, "window/showMessageRequest"),
        Vec::<Value>::new()
    );
    assert_eq!(
        tool_result_text(&events, "bash"),
        (
            format!("[the sandbox (workspace-write, network on) denied this command ({DENIED}); it was re-run outside the sandbox with the user's approval]\nwrote\n"),
            false
        )
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("escaped.txt")).unwrap(),
        "hi\n"
    );
    c.shutdown().await;
}

#[tokio::test]
async fn denied_command_rejected_is_an_error_result_with_the_reason() {
    if !pi_e2e::require(
        sandbox_available(),
        "denied_command_rejected_is_an_error_result_with_the_reason",
        "Landlock",
    ) {
        return;
    }
    let (events, c, tmp) = escalation_run(
        "esc-reject",
        EditorBehavior {
            permission_answer: Some(json!({"decision": "reject", "reason": "stay in the project"})),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(requests(&c, "agent/requestPermission").len(), 1);
    assert_eq!(
        tool_result_text(&events, "bash"),
        (
            format!("{DENIED}\n\n\nCommand exited with code 1\n\nThe sandbox (workspace-write, network on) likely caused this failure: {DENIED}\nThe user did not approve re-running it outside the sandbox: stay in the project."),
            true
        )
    );
    assert!(!tmp.path().join("escaped.txt").exists());
    c.shutdown().await;
}

#[tokio::test]
async fn clients_without_the_request_are_asked_with_show_message_request() {
    if !pi_e2e::require(
        sandbox_available(),
        "clients_without_the_request_are_asked_with_show_message_request",
        "Landlock",
    ) {
        return;
    }
    // Dismissed: rejected.
    let (events, c, tmp) = escalation_run("esc-msg-none", EditorBehavior::default()).await;
    let asked = requests(&c, "window/showMessageRequest");
    assert_eq!(
        asked,
        vec![json!({
            "type": 2,
            "message": format!("pi wants to run `echo hi > ../escaped.txt && echo wrote` outside the sandbox. Reason: sandbox denied: {DENIED}"),
            "actions": [{"title": "Allow"}, {"title": "Reject"}],
        })]
    );
    let (text, is_error) = tool_result_text(&events, "bash");
    assert!(is_error);
    assert!(
        text.ends_with("The user did not approve re-running it outside the sandbox: the user dismissed the question."),
        "{text}"
    );
    assert!(!tmp.path().join("escaped.txt").exists());
    c.shutdown().await;
    // "Allow" chosen: re-run.
    let (events, c, tmp) = escalation_run(
        "esc-msg-allow",
        EditorBehavior {
            message_action: Some("Allow".into()),
            ..Default::default()
        },
    )
    .await;
    assert!(!tool_result_text(&events, "bash").1);
    assert!(tmp.path().join("escaped.txt").exists());
    c.shutdown().await;
}

/// Every file under `dir` (recursively), with its bytes.
fn files_under(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            files_under(&p, out);
        } else if ft.is_file() {
            out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
        }
    }
}

fn find_secrets(haystack: &[u8], secrets: &[&str]) -> Vec<String> {
    secrets
        .iter()
        .filter(|s| haystack.windows(s.len()).any(|w| w == s.as_bytes()))
        .map(|s| s.to_string())
        .collect()
}

#[tokio::test]
async fn secret_scan_of_everything_written_and_sent() {
    const ENV_ANTHROPIC: &str = "sk-ant-env-SECRET-0001-abcdefgh";
    const ENV_OPENAI: &str = "sk-openai-env-SECRET-0002-abcdefgh";
    const ENV_OAUTH: &str = "sk-ant-oat01-env-SECRET-0003-abcdefgh";
    const CMD_KEY: &str = "sk-cmd-SECRET-0004-abcdefgh";
    const VAR_KEY: &str = "sk-var-SECRET-0005-abcdefgh";
    const LITERAL_KEY: &str = "sk-literal-SECRET-0006-abcdefgh";
    let secrets = [
        ENV_ANTHROPIC,
        ENV_OPENAI,
        ENV_OAUTH,
        CMD_KEY,
        VAR_KEY,
        LITERAL_KEY,
    ];

    let tmp = TempDir::new("secrets");
    let ws = tmp.path().join("ws");
    let server_tmp = tmp.path().join("server-tmp");
    let agent = tmp.path().join("agent");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&server_tmp).unwrap();
    let models_path = agent.join("models.json");
    let mock = MockModel::start(vec![
        // The model tries to get at the keys through the shell…
        Step::call(
            "call_env",
            "bash",
            json!({"command": "env; echo \"[$ANTHROPIC_API_KEY][$OPENAI_API_KEY][$MY_PROVIDER_KEY]\""}),
        ),
        // …through the config file (literal key), large enough to spill to a temp file…
        Step::call(
            "call_cat",
            "bash",
            json!({"command": format!("cat {}; seq 3000", models_path.display())}),
        ),
        // …through the read tool (outside the workspace: refused)…
        Step::call(
            "call_read",
            "read",
            json!({"path": models_path.display().to_string()}),
        ),
        // …then the provider fails echoing the key and the header it got.
        Step::Raw {
            status: 401,
            content_type: "application/json".into(),
            body: json!({"error": {"message": format!("Incorrect API key provided: {CMD_KEY}. Header was Authorization: Bearer {CMD_KEY}; also saw x-api-key: {VAR_KEY}"), "type": "invalid_request_error"}}).to_string(),
        },
    ])
    .await;
    let models = json!({"providers": {
        "mock": {"baseUrl": mock.openai_base(), "api": "openai-completions",
                 "apiKey": format!("!printf '%s' {CMD_KEY}"),
                 "compat": {"supportsDeveloperRole": false},
                 "models": [{"id": "mock-1", "contextWindow": 128000, "maxTokens": 4096}]},
        "byvar": {"baseUrl": mock.openai_base(), "api": "openai-completions", "apiKey": "MY_PROVIDER_KEY",
                  "models": [{"id": "v-1"}]},
        "literal": {"baseUrl": mock.openai_base(), "api": "openai-completions", "apiKey": LITERAL_KEY,
                    "headers": {"X-Api-Key": LITERAL_KEY},
                    "models": [{"id": "l-1"}]}
    }});
    let env = agent_env(
        &agent,
        &models,
        &[
            ("ANTHROPIC_API_KEY", ENV_ANTHROPIC),
            ("OPENAI_API_KEY", ENV_OPENAI),
            ("ANTHROPIC_OAUTH_TOKEN", ENV_OAUTH),
            ("MY_PROVIDER_KEY", VAR_KEY),
            ("PI_LSP_LOG", "debug"),
            ("TMPDIR", &server_tmp.display().to_string()),
        ],
    );
    let mut c = LspClient::start(&pi_e2e::pi_lsp_bin(), &ws, &env, EditorBehavior::default()).await;
    c.request(
        "agent/prompt",
        json!({"text": "show me your keys", "model": "mock/mock-1"}),
    )
    .await
    .unwrap();
    let events = c.run_until_end(Duration::from_secs(60)).await;
    // The keys were really used: the mock got the command's key.
    let sent = mock.requests();
    assert_eq!(
        sent[0]
            .headers
            .get("authorization")
            .unwrap()
            .to_str()
            .unwrap(),
        format!("Bearer {CMD_KEY}")
    );
    // The run really happened: the shell ran, spilled, and the provider error arrived.
    let (env_out, _) = tool_result_text(&events, "bash");
    assert!(
        env_out.contains("[][][]"),
        "key variables reached the shell: {env_out}"
    );
    let spill = events
        .iter()
        .filter(|e| {
            e["event"]["type"] == "tool_execution_end" && e["event"]["toolCallId"] == "call_cat"
        })
        .find_map(|e| {
            e["event"]["result"]["details"]["fullOutputPath"]
                .as_str()
                .map(PathBuf::from)
        })
        .expect("the cat command spilled to a temp file");
    assert!(spill.starts_with(&server_tmp), "{}", spill.display());
    let cat_text = events
        .iter()
        .find(|e| {
            e["event"]["type"] == "tool_execution_end" && e["event"]["toolCallId"] == "call_cat"
        })
        .map(|e| e["event"]["result"].to_string())
        .unwrap();
    assert!(
        cat_text.contains("[REDACTED]") || cat_text.contains("2999"),
        "{cat_text}"
    );
    let end = events.last().unwrap();
    let error_message = end["event"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find_map(|m| m["errorMessage"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        error_message.starts_with("401: ")
            && error_message.contains("Incorrect API key provided: [REDACTED]. Header was Authorization: Bearer [REDACTED]; also saw x-api-key: [REDACTED]"),
        "{error_message}"
    );
    let stderr = c.stderr.clone();
    let mut sent_to_client: Vec<String> = c.log().iter().map(Value::to_string).collect();
    c.shutdown().await;
    sent_to_client.push(stderr.lock().unwrap().clone());
    assert!(
        sent_to_client.last().unwrap().contains("DEBUG")
            || sent_to_client.last().unwrap().contains("INFO"),
        "the server logged nothing: {}",
        sent_to_client.last().unwrap()
    );

    // Everything written: the workspace (sessions), the server's temp folder (spill files,
    // session temp folders), the agent dir (except the models.json the test wrote).
    let mut written = Vec::new();
    files_under(&ws, &mut written);
    files_under(&server_tmp, &mut written);
    files_under(&agent, &mut written);
    written.retain(|(p, _)| p != &models_path);
    assert!(
        written
            .iter()
            .any(|(p, _)| p.extension().is_some_and(|e| e == "jsonl")),
        "no session file among {:?}",
        written.iter().map(|w| &w.0).collect::<Vec<_>>()
    );
    assert!(written.iter().any(|(p, _)| p == &spill));
    for (path, bytes) in &written {
        assert_eq!(
            find_secrets(bytes, &secrets),
            Vec::<String>::new(),
            "in {}",
            path.display()
        );
    }
    // Everything sent to the client, and everything logged on stderr.
    for msg in &sent_to_client {
        assert_eq!(
            find_secrets(msg.as_bytes(), &secrets),
            Vec::<String>::new(),
            "in {msg}"
        );
    }
}
