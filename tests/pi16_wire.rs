//! What goes over each wire, and what a failed request leaves, compared whole with Pi 1.6.0
//! (`$PI16_REF_BIN`) on the same loopback model: the `errorMessage` each wire stores for an
//! HTTP error (print mode's stderr and exit code with it), and the request bodies with strict
//! tools on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;

use pi_e2e::headless::{run_pi, Headless};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{session_lines, TempDir};
use serde_json::{json, Value};

/// The loopback model's `models.json` with a third provider, `mockresp` (openai-responses,
/// model `mock-resp-1`), beside `mock` (chat completions) and `mockant` (anthropic-messages).
fn models(mock: &MockModel) -> Value {
    let mut models = mock.models_json();
    models["providers"]["mockresp"] = json!({
        "baseUrl": mock.openai_base(), "api": "openai-responses", "apiKey": "test-key",
        "models": [{"id": "mock-resp-1", "contextWindow": 128000, "maxTokens": 4096}]
    });
    models
}

/// One retry 10 ms after a retryable failure, on both sides.
fn settings() -> Value {
    json!({"retry": {"maxRetries": 1, "baseDelayMs": 10}})
}

/// The `errorMessage` of every assistant message in a session file, in order.
fn error_messages(lines: &[Value]) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| l["message"]["role"] == "assistant")
        .map(|l| l["message"]["errorMessage"].clone())
        .collect()
}

/// Exit code, stdout and stderr of a print-mode run.
fn said(out: &Output) -> (Option<i32>, String, String) {
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Pi 1.6.0 `-p hi` on `provider/model` at `mock`, in a fresh folder under `tmp`: its output
/// and its session file's lines.
fn theirs(pi: &Path, mock: &MockModel, tmp: &Path, model: &str) -> (Output, Vec<Value>) {
    let (ws, agent, sessions) = (tmp.join("ws"), tmp.join("agent"), tmp.join("sessions"));
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("models.json"), models(mock).to_string()).unwrap();
    std::fs::write(agent.join("settings.json"), settings().to_string()).unwrap();
    let (provider, id) = model.split_once('/').unwrap();
    let args = [
        OsStr::new("--session-dir"),
        sessions.as_os_str(),
        OsStr::new("--provider"),
        OsStr::new(provider),
        OsStr::new("--model"),
        OsStr::new(id),
        OsStr::new("-p"),
        OsStr::new("hi"),
    ];
    let out = run_pi(pi, &ws, &agent, tmp, args);
    (out, session_file_lines(&sessions))
}

/// The lines of the one session file in `dir` (Pi's `--session-dir`).
fn session_file_lines(dir: &Path) -> Vec<Value> {
    let file = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `pi-lsp run --model provider/model hi` at `mock`: its output and its session file's lines.
fn ours(mock: &MockModel, name: &str, model: &str) -> (Output, Vec<Value>) {
    let h = Headless::new(name, &models(mock));
    std::fs::write(h.agent.join("settings.json"), settings().to_string()).unwrap();
    let out = h.run(&["--model", model, "hi"]);
    (out, session_lines(&h.ws))
}

fn raw(status: u16, content_type: &str, body: &str) -> Step {
    Step::Raw {
        status,
        content_type: content_type.into(),
        body: body.into(),
    }
}

/// Each wire (chat completions, Responses, Anthropic messages) and each kind of error body —
/// an OpenAI-style JSON error, Anthropic's, plain text, a 429 and a 5xx retried once, an empty
/// 500, an HTML 502 — stores the `errorMessage` Pi 1.6.0 stores, every attempt's, whole; print
/// mode exits as Pi's does and says the error on stderr. The expected texts are also written out below for the
/// chat-completions wire (Pi's `400: {error object}`), so a change on both sides is seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_errors_are_stored_as_pi_1_6_stores_them() {
    let Some(pi) = pi_e2e::pi16_bin("Pi 1.6.0 provider error wording") else {
        return;
    };
    let tmp = TempDir::new("wire-errors");
    let openai = r#"{"error":{"message":"bad thing","type":"invalid_request_error"}}"#;
    let anthropic =
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad thing"}}"#;
    let bodies: [(&str, Vec<Step>); 7] = [
        (
            "openai-json-400",
            vec![raw(400, "application/json", openai)],
        ),
        (
            "anthropic-json-400",
            vec![raw(400, "application/json", anthropic)],
        ),
        (
            "text-400",
            vec![raw(400, "text/plain", "plain failure text")],
        ),
        (
            "json-429",
            vec![
                raw(
                    429,
                    "application/json",
                    r#"{"error":{"message":"slow down","type":"rate_limit"}}"#
                );
                2
            ],
        ),
        ("text-503", vec![raw(503, "text/plain", "upstream down"); 2]),
        ("empty-500", vec![raw(500, "text/plain", ""); 2]),
        (
            "html-502",
            vec![raw(502, "text/html", "<html><body>Bad Gateway</body></html>"); 2],
        ),
    ];
    let mut completions = Vec::new();
    for model in ["mock/mock-1", "mockresp/mock-resp-1", "mockant/mock-ant-1"] {
        for (kind, steps) in &bodies {
            let name = format!("{}-{kind}", model.split('/').next().unwrap());
            let their_mock = MockModel::start(steps.clone()).await;
            let (their_out, their_lines) = theirs(&pi, &their_mock, &tmp.path().join(&name), model);
            let our_mock = MockModel::start(steps.clone()).await;
            let (our_out, our_lines) = ours(&our_mock, &name, model);
            let theirs = error_messages(&their_lines);
            assert_eq!(error_messages(&our_lines), theirs, "{name}");
            assert_eq!(theirs.len(), steps.len(), "{name}: {their_lines:#?}");
            // Exit code and stdout alike; stderr ends with Pi's error line, word for word
            // (pi-lsp's own notes, `pi-lsp: `…, before it: retries, where the session went).
            let (our_said, their_said) = (said(&our_out), said(&their_out));
            assert_eq!(
                (our_said.0, &our_said.1),
                (their_said.0, &their_said.1),
                "{name}"
            );
            assert_eq!(
                our_said.2.lines().last(),
                their_said.2.lines().last(),
                "{name}: {}",
                our_said.2
            );
            assert_eq!(
                our_mock.requests().len(),
                their_mock.requests().len(),
                "{name}"
            );
            if model == "mock/mock-1" {
                completions.push(theirs.last().unwrap().clone());
            }
        }
    }
    assert_eq!(
        completions,
        [
            r#"400: {"message":"bad thing","type":"invalid_request_error"}"#,
            r#"400: {"type":"invalid_request_error","message":"bad thing"}"#,
            "400 plain failure text",
            r#"429: {"message":"slow down","type":"rate_limit"}"#,
            "503 upstream down",
            "500 status code (no body)",
            "502 <html><body>Bad Gateway</body></html>",
        ]
    );
}

/// The loopback model's providers with strict tools on: `compat.supportsStrictMode` for the
/// two OpenAI wires, `compat.supportsStrictTools` for Anthropic's.
fn strict_models(mock: &MockModel) -> Value {
    let mut models = models(mock);
    let p = &mut models["providers"];
    p["mock"]["compat"]["supportsStrictMode"] = json!(true);
    p["mockresp"]["compat"] = json!({"supportsStrictMode": true});
    p["mockant"]["compat"] = json!({"supportsStrictTools": true});
    models
}

/// With strict tools on, each wire's request is Pi 1.6.0's, whole: read, bash, edit and write
/// (which ask for JSON-schema sampling, `strict: "prefer"`) go with `strict: true` and Pi's
/// strict schema (`makeStrictJsonSchema`: objects closed, every property required, optional
/// ones nullable), grep, find and ls with `strict: false` on the OpenAI wires and without it on
/// Anthropic's. Both sides run in the same workspace, so the system prompts are equal too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_tools_go_as_pi_1_6_sends_them() {
    let Some(pi) = pi_e2e::pi16_bin("Pi 1.6.0 strict tools") else {
        return;
    };
    let tools = "read,bash,edit,write,grep,find,ls";
    for model in ["mock/mock-1", "mockresp/mock-resp-1", "mockant/mock-ant-1"] {
        let name = format!("strict-{}", model.split('/').next().unwrap());
        let their_mock = MockModel::start(vec![Step::text("ok")]).await;
        let our_mock = MockModel::start(vec![Step::text("ok")]).await;
        let mut h = Headless::new(&name, &strict_models(&our_mock));
        // Pi's package folder named as Pi names it, for the same `docs` section.
        let package = pi_e2e::pi16_package(&pi).display().to_string();
        h.env.push(("PI_PACKAGE_DIR", package));
        // Pi in the same workspace, with its own agent dir and sessions outside it.
        let (agent, sessions) = (h.path().join("pi-agent"), h.path().join("pi-sessions"));
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::write(
            agent.join("models.json"),
            strict_models(&their_mock).to_string(),
        )
        .unwrap();
        let (provider, id) = model.split_once('/').unwrap();
        let args = [
            "--session-dir",
            sessions.to_str().unwrap(),
            "--provider",
            provider,
            "--model",
            id,
            "--tools",
            tools,
            "-p",
            "hi",
        ];
        let theirs = run_pi(&pi, &h.ws, &agent, h.path(), args);
        assert_eq!(said(&theirs).0, Some(0), "{name}: {theirs:?}");
        let ours = h.run(&["--model", model, "--tools", tools, "hi"]);
        let (our_said, their_said) = (said(&ours), said(&theirs));
        assert_eq!(
            (our_said.0, our_said.1),
            (their_said.0, their_said.1),
            "{name}"
        );
        let [their_request] = &their_mock.requests()[..] else {
            panic!("{name}: one request")
        };
        let [our_request] = &our_mock.requests()[..] else {
            panic!("{name}: one request")
        };
        assert_eq!(
            our_request.body["tools"], their_request.body["tools"],
            "{name}"
        );
        // Responses' `prompt_cache_key` is each side's session id; the rest equal whole.
        let (mut our_body, mut their_body) = (our_request.body.clone(), their_request.body.clone());
        if provider == "mockresp" {
            let key = |b: &mut Value| b.as_object_mut().unwrap().remove("prompt_cache_key");
            assert_eq!(
                key(&mut our_body),
                Some(session_lines(&h.ws)[0]["id"].clone())
            );
            assert_eq!(
                key(&mut their_body),
                Some(session_file_lines(&sessions)[0]["id"].clone())
            );
        }
        assert_eq!(our_body, their_body, "{name}");
        let strict: Vec<(String, Value)> = their_request.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let f = t.get("function").unwrap_or(t);
                (f["name"].as_str().unwrap().to_string(), f["strict"].clone())
            })
            .collect();
        let on = if provider == "mockant" {
            Value::Null
        } else {
            json!(false)
        };
        assert_eq!(
            strict,
            [
                ("read", json!(true)),
                ("bash", json!(true)),
                ("edit", json!(true)),
                ("write", json!(true)),
                ("grep", on.clone()),
                ("find", on.clone()),
                ("ls", on),
            ]
            .map(|(n, s)| (n.to_string(), s)),
            "{name}"
        );
    }
}
