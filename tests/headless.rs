//! The headless main job: `pi-lsp run`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use pi_e2e::lsp_client::agent_env;
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{fixtures, pi_lsp_bin, session_lines, TempDir};
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

fn run(ws: &std::path::Path, env: &[(&str, String)], args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(pi_lsp_bin());
    cmd.arg("run").arg("--workspace").arg(ws).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
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
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.contains("offline scripted model"))
            .count(),
        1,
        "{stderr}"
    );
    assert!(stdout.contains("→ bash"), "{stdout}");
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
        lines[9]["message"]["content"][0]["text"],
        "  7 README.md\n  6 src/greet.py\n 13 total\nHello, pi-lsp!\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_mode_prints_every_event_and_errors_exit_nonzero() {
    let tmp = TempDir::new("json");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let mock = MockModel::start(vec![
        Step::call("c1", "ls", json!({})),
        Step::text("empty"),
        Step::Raw {
            status: 500,
            content_type: "text/plain".into(),
            body: "down".into(),
        },
    ])
    .await;
    let env = agent_env(&tmp.path().join("agent"), &mock.models_json(), &[]);
    let ws2 = ws.clone();
    let env2 = env.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(&ws2, &env2, &["--json", "--model", "mock/mock-1", "list"])
    })
    .await
    .unwrap();
    assert!(out.status.success());
    let events: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.first().unwrap()["type"], "agent_start");
    assert_eq!(events.last().unwrap()["type"], "agent_end");
    assert_eq!(
        events.last().unwrap()["messages"].as_array().unwrap().len(),
        4
    );
    let ws3 = ws.clone();
    let out = tokio::task::spawn_blocking(move || {
        run(&ws3, &env, &["--model", "mockant/mock-ant-1", "fail"])
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HTTP 500: down"));
    mock.assert_paired();
}
