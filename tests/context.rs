//! Project trust, settings and the system prompt, end to end: what the mock model actually
//! receives from the real `pi-lsp` (over LSP and headless) in a workspace full of project
//! configuration, trusted and not; and the system prompt compared byte for byte with the one
//! Pi 1.6.0 sends for the same workspace (and the sections each stores).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pi_e2e::lsp_client::{agent_env, tool_result_text, EditorBehavior, LspClient};
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{pi_lsp_bin, TempDir};
use serde_json::{json, Value};

/// A workspace with every kind of project configuration, a global agent dir with its own, and
/// a folder outside the workspace that only the project settings allow.
struct Fixture {
    _tmp: TempDir,
    ws: PathBuf,
    agent: PathBuf,
    home: PathBuf,
    secret: PathBuf,
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The folders of a fixture; the mock (whose script needs the secret's path) comes next.
fn folders(name: &str) -> Fixture {
    let tmp = TempDir::new(name);
    let ws = tmp.path().join("ws");
    let agent = tmp.path().join("agent");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let secret = tmp.path().join("outside/secret.txt");
    write(&secret, "the secret\n");
    Fixture {
        _tmp: tmp,
        ws,
        agent,
        home,
        secret,
    }
}

/// Writes the global and project configuration of `f`, pointing at `mock`.
fn configure(f: &Fixture, mock: &MockModel) {
    let (ws, agent) = (&f.ws, &f.agent);
    // Global (always loaded): the mock providers, a template and a skill.
    write(&agent.join("models.json"), &mock.models_json().to_string());
    write(
        &agent.join("prompts/hello.md"),
        "---\ndescription: Global greeting\n---\nGlobal hello to $1.\n",
    );
    write(
        &agent.join("skills/global-skill/SKILL.md"),
        "---\nname: global-skill\ndescription: A global skill.\n---\n# Global\nDo global things.\n",
    );
    // Project (trusted only): another provider chosen by settings, a template, a skill, a
    // system prompt, and an allowed folder outside the workspace.
    let mut project_models = mock.models_json();
    project_models["providers"] = json!({"proj": {
        "baseUrl": mock.openai_base(), "api": "openai-completions", "apiKey": "test-key",
        "compat": {"supportsDeveloperRole": false},
        "models": [{"id": "proj-model", "contextWindow": 64000, "maxTokens": 2048}]}});
    write(&ws.join(".pi/models.json"), &project_models.to_string());
    write(
        &ws.join(".pi/settings.json"),
        r#"{"defaultProvider": "proj", "defaultModel": "proj-model", "allowedDirs": ["../../outside"]}"#,
    );
    write(
        &ws.join(".pi/prompts/greet.md"),
        "---\ndescription: Project greeting\n---\nSay hello to $1 from the project template.\n",
    );
    write(
        &ws.join(".pi/skills/proj-skill/SKILL.md"),
        "---\nname: proj-skill\ndescription: A project skill.\n---\n# Project\nDo project things.\n",
    );
    write(&ws.join(".pi/SYSTEM.md"), "PROJECT SYSTEM PROMPT\n");
    // Context file: loaded whatever the trust.
    write(&ws.join("AGENTS.md"), "Use tabs.\n");
}

fn env(f: &Fixture, mock: &MockModel) -> Vec<(&'static str, String)> {
    agent_env(
        &f.agent,
        &mock.models_json(),
        &[("HOME", &f.home.display().to_string())],
    )
}

/// Pi 1.6's `tools` and `rules` sections for the seven built-in tools (`read`, `bash`, `edit`,
/// `write`, `grep`, `find`, `ls`), the rules still open.
const TOOLS_AND_RULES: &str = "<tools>
- read: Read file contents
- bash: Execute bash commands (ls, grep, find, etc.)
- edit: Make precise file edits with exact text replacement, including multiple disjoint edits in one call
- write: Create or overwrite files
- grep: Search file contents for patterns (respects .gitignore)
- find: Find files by glob pattern (respects .gitignore)
- ls: List directory contents

Additional tools may be available.
</tools>

<rules>
- Use read to examine files instead of cat or sed.
- You can inspect PI_* environment variables for current model and session details.
- Use edit for targeted changes. Batch changes to one file in a single call.
- Each edits[].oldText must exactly and uniquely match the original file. Keep matches short and non-overlapping; merge nearby changes without including large unchanged regions.
- Use write only for new files or complete rewrites.
";

fn skill_xml(path: &Path, name: &str, description: &str) -> String {
    format!(
        "  <skill>\n    <name>{name}</name>\n    <description>{description}</description>\n    <location>{}</location>\n  </skill>\n",
        path.display()
    )
}

/// The whole system prompt pi-lsp must send for the fixture (Pi 1.6's sections).
fn expected_prompt(f: &Fixture, trusted: bool, editor: bool) -> String {
    let mut s = if trusted {
        "PROJECT SYSTEM PROMPT\n".to_string()
    } else {
        let mut d = String::from("You are a coding assistant running inside pi, a coding agent harness. Help users inspect files, run commands, and modify code.\n\n");
        d.push_str(TOOLS_AND_RULES);
        if editor {
            d.push_str("- File edits are applied through the user's editor, where they can be reviewed and undone; read shows unsaved editor changes\n");
        }
        d.push_str(
            "- Be concise in your responses\n- Show file paths clearly when working with files\n</rules>",
        );
        d
    };
    s.push_str(&format!(
        "\n\n<project_context>\nProject-specific instructions and guidelines:\n\n<project_instructions path=\"{}\">\nUse tabs.\n\n</project_instructions>\n</project_context>",
        f.ws.join("AGENTS.md").display()
    ));
    s.push_str("\n\n<skills>\nThe following skills provide specialized instructions for specific tasks.\nUse the read tool to load a skill's file when the task matches its description.\nResolve relative paths against the skill's directory (parent of SKILL.md). Use absolute paths in tool calls.\n\n<available_skills>\n");
    if trusted {
        s.push_str(&skill_xml(
            &f.ws.join(".pi/skills/proj-skill/SKILL.md"),
            "proj-skill",
            "A project skill.",
        ));
    }
    s.push_str(&skill_xml(
        &f.agent.join("skills/global-skill/SKILL.md"),
        "global-skill",
        "A global skill.",
    ));
    s.push_str(&format!(
        "</available_skills>\n</skills>\n\n<cwd>\n{}\n</cwd>",
        f.ws.display()
    ));
    s
}

/// Checks the first request of a run prompted with "/greet Ada" then, in a second request
/// after the `read` of the secret, the tool result.
fn check_requests(f: &Fixture, mock: &MockModel, trusted: bool, editor: bool) {
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2, "one request per turn");
    let body = &reqs[0].body;
    // The model: the project's settings and models.json choose proj/proj-model.
    assert_eq!(
        body["model"],
        if trusted { "proj-model" } else { "mock-1" },
        "{body}"
    );
    let system = body["messages"][0]["content"].as_str().unwrap();
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(system, expected_prompt(f, trusted, editor), "system prompt");
    // The project template expands only when trusted; the global one always would.
    let user = if trusted {
        "Say hello to Ada from the project template."
    } else {
        "/greet Ada"
    };
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": [{"type": "text", "text": user}]})
    );
    // allowedDirs from the project settings widen the tools only when trusted.
    let result = &reqs[1].body["messages"][3];
    assert_eq!(result["role"], "tool", "{result}");
    if trusted {
        assert_eq!(result["content"], "the secret\n");
    } else {
        assert!(
            result["content"]
                .as_str()
                .unwrap()
                .contains("outside the workspace"),
            "{result}"
        );
    }
}

fn script(secret: &Path) -> Vec<Step> {
    vec![
        Step::call("c1", "read", json!({"path": secret.display().to_string()})),
        Step::text("Done."),
    ]
}

/// Pi 1.6's trust store in `f`'s agent dir: `decision` for the workspace's parent folder.
fn store_trust(f: &Fixture, decision: bool) {
    let parent = f.ws.parent().unwrap().canonicalize().unwrap();
    write(
        &f.agent.join("trust.json"),
        &json!({parent.display().to_string(): decision}).to_string(),
    );
}

async fn lsp_run(name: &str, initialization_options: Option<Value>, trusted: bool) {
    lsp_run_with_store(name, initialization_options, None, trusted).await;
}

async fn lsp_run_with_store(
    name: &str,
    initialization_options: Option<Value>,
    store: Option<bool>,
    trusted: bool,
) {
    let f = folders(name);
    let mock = MockModel::start(script(&f.secret)).await;
    configure(&f, &mock);
    if let Some(d) = store {
        store_trust(&f, d);
    }
    let behavior = EditorBehavior {
        initialization_options,
        ..EditorBehavior::default()
    };
    let mut c = LspClient::start(&pi_lsp_bin(), &f.ws, &env(&f, &mock), behavior).await;
    c.request("agent/prompt", json!({"text": "/greet Ada"}))
        .await
        .unwrap();
    let events = c.run_until_end(Duration::from_secs(20)).await;
    assert_eq!(tool_result_text(&events, "read").1, !trusted);
    check_requests(&f, &mock, trusted, true);
    // An untrusted workspace says what it ignored, once.
    let warnings: Vec<Value> = c
        .log()
        .into_iter()
        .filter(|m| m["method"] == "window/showMessage")
        .map(|m| m["params"].clone())
        .collect();
    if trusted {
        assert_eq!(warnings, Vec::<Value>::new());
    } else {
        assert_eq!(
            warnings,
            vec![
                json!({"type": 2, "message": "pi-lsp: workspace not trusted; ignoring project configuration: \
.pi/settings.json, .pi/models.json, .pi/prompts, .pi/skills, .pi/SYSTEM.md (trust the workspace in the editor to load it)"})
            ]
        );
    }
    assert!(c.shutdown().await.success());
    mock.assert_paired();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_by_default_project_configuration_is_ignored() {
    lsp_run("trust-default", None, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicitly_untrusted_workspace_ignores_project_configuration() {
    lsp_run("trust-off", Some(json!({"workspaceTrusted": false})), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_workspace_applies_project_configuration() {
    lsp_run("trust-on", Some(json!({"workspaceTrusted": true})), true).await;
}

/// Pi 1.6's trust store (`trust.json` in the agent dir, the nearest folder's decision)
/// decides where no front door does: an editor that sends no `workspaceTrusted`, `pi-lsp run`
/// without `--approve` / `--no-approve`. The editor's own answer and the flags still win.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_trust_store_decides_where_no_front_door_does() {
    lsp_run_with_store("store-lsp-on", None, Some(true), true).await;
    lsp_run_with_store(
        "store-lsp-editor-off",
        Some(json!({"workspaceTrusted": false})),
        Some(true),
        false,
    )
    .await;
    for (stored, flag, trusted) in [
        (true, None, true),
        (false, None, false),
        (true, Some("--no-approve"), false),
        (false, Some("--approve"), true),
    ] {
        let f = folders("store-headless");
        let mock = MockModel::start(script(&f.secret)).await;
        configure(&f, &mock);
        store_trust(&f, stored);
        let args: Vec<&str> = flag.into_iter().chain(["/greet Ada"]).collect();
        let out = tokio::task::block_in_place(|| run(&f, &mock, &args));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        check_requests(&f, &mock, trusted, false);
    }
}

fn run(f: &Fixture, mock: &MockModel, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(pi_lsp_bin());
    cmd.arg("run").arg("--workspace").arg(&f.ws).args(args);
    for (k, v) in env(f, mock) {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_run_loads_project_configuration_only_with_trust() {
    for trusted in [false, true] {
        let f = folders("trust-headless");
        let mock = MockModel::start(script(&f.secret)).await;
        configure(&f, &mock);
        let args: &[&str] = if trusted {
            &["--trust", "/greet Ada"]
        } else {
            &["/greet Ada"]
        };
        let out = tokio::task::block_in_place(|| run(&f, &mock, args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        check_requests(&f, &mock, trusted, false);
        let notice =
            "pi-lsp: workspace not trusted; ignoring project configuration: .pi/settings.json, \
.pi/models.json, .pi/prompts, .pi/skills, .pi/SYSTEM.md (run with --approve, or trust the folder in Pi, to load it)";
        assert_eq!(
            stderr.lines().filter(|l| *l == notice).count(),
            usize::from(!trusted),
            "{stderr}"
        );
    }
}

/// A workspace exercising every part of the prompt Pi assembles: context files global, in an
/// ancestor and in the workspace; APPEND_SYSTEM.md; skills global, project and `.agents`.
pub fn prompt_fixture(root: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let ws = root.join("ws");
    let agent = root.join("agent");
    let home = root.join("home");
    std::fs::create_dir_all(&home).unwrap();
    write(&agent.join("AGENTS.md"), "Global rules.\n");
    // Compared with Pi's prompt byte for byte: the built-in todo and plan-mode extensions off.
    write(
        &agent.join("settings.json"),
        r#"{"builtinExtensions": {"todo": false, "plan-mode": false}}"#,
    );
    write(&root.join("CLAUDE.md"), "Ancestor rules.");
    write(
        &ws.join("AGENTS.md"),
        "# Workspace\n\nUse tabs & <angle> brackets.\n",
    );
    write(&ws.join(".pi/APPEND_SYSTEM.md"), "Appended text.\n");
    write(
        &agent.join("skills/global-skill/SKILL.md"),
        "---\nname: global-skill\ndescription: \"Global: <b> & 'q'\"\n---\nBody.\n",
    );
    write(
        &agent.join("skills/hidden/SKILL.md"),
        "---\nname: hidden\ndescription: Hidden.\ndisable-model-invocation: true\n---\nBody.\n",
    );
    write(
        &ws.join(".pi/skills/proj-skill/SKILL.md"),
        "---\nname: proj-skill\ndescription: Project skill.\n---\nBody.\n",
    );
    write(
        &ws.join(".agents/skills/agents-skill/SKILL.md"),
        "---\nname: agents-skill\ndescription: From .agents.\n---\nBody.\n",
    );
    (ws, agent, home)
}

/// The system message of the first request `mock` received.
fn system_of(mock: &MockModel) -> String {
    let reqs = mock.requests();
    let body = &reqs.first().expect("a request").body;
    assert_eq!(body["messages"][0]["role"], "system", "{body}");
    body["messages"][0]["content"].as_str().unwrap().to_string()
}

/// The system prompt against Pi 1.6.0's own, byte for byte and nothing left out: the same
/// workspace (context files, `APPEND_SYSTEM.md`, skills), the seven built-in tools, and Pi's
/// package folder named to both by Pi's own `PI_PACKAGE_DIR` (pi-lsp ships no Pi docs: the
/// `docs` section points there only when it is set). Also the sections each stores in its
/// session's system message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_prompt_is_byte_for_byte_the_one_pi_sends() {
    let Some(pi) = pi_e2e::pi16_bin("Pi 1.6.0 prompt comparison") else {
        return;
    };
    let package = pi_e2e::pi16_package(&pi);
    let tmp = TempDir::new("pi-prompt");
    let (ws, agent, home) = prompt_fixture(tmp.path());
    let pi_sessions = tmp.path().join("pi-sessions");

    let pi_mock = MockModel::start(vec![Step::text("Hi.")]).await;
    write(
        &agent.join("models.json"),
        &pi_mock.models_json().to_string(),
    );
    let out = tokio::task::block_in_place(|| {
        Command::new(&pi)
            // `-a`: Pi 1.6 trusts the project folder (its APPEND_SYSTEM.md and skills), as
            // `run --trust` does here.
            .args(["-p", "-a", "--provider", "mock", "--model", "mock-1"])
            .arg("--session-dir")
            .arg(&pi_sessions)
            .args(["--tools", "read,bash,edit,write,grep,find,ls", "hello"])
            .current_dir(&ws)
            .env("PI_OFFLINE", "1")
            .env("PI_CODING_AGENT_DIR", &agent)
            .env("PI_PACKAGE_DIR", &package)
            .env("HOME", &home)
            .output()
            .unwrap()
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = system_of(&pi_mock);

    let mock = MockModel::start(vec![Step::text("Hi.")]).await;
    let env = agent_env(
        &agent,
        &mock.models_json(),
        &[
            ("HOME", &home.display().to_string()),
            ("PI_PACKAGE_DIR", &package.display().to_string()),
        ],
    );
    let out = tokio::task::block_in_place(|| {
        let mut cmd = Command::new(pi_lsp_bin());
        cmd.args(["run", "--trust", "--model", "mock/mock-1", "--workspace"])
            .arg(&ws)
            .arg("hello");
        for (k, v) in &env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours = system_of(&mock);
    if std::env::var_os("PI_PROMPT_FIXTURE").is_some() {
        let fixture = theirs
            .replace(&package.display().to_string(), "{PI_PACKAGE}")
            .replace(&tmp.path().display().to_string(), "{ROOT}");
        std::fs::write(std::env::var("PI_PROMPT_FIXTURE").unwrap(), fixture).unwrap();
    }
    assert!(theirs.contains("\n\n<docs>\n"), "{theirs}");
    assert_eq!(ours, theirs);

    // The sections as each stores them: Pi's session folder, ours under the workspace.
    let stored = |dir: &Path| -> Value {
        let file = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .unwrap_or_else(|| panic!("no session file in {}", dir.display()));
        std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|e| e["type"] == "message" && e["message"]["role"] == "system")
            .unwrap_or_else(|| panic!("no system message in {}", file.display()))["message"]
            .clone()
    };
    let (theirs, ours) = (stored(&pi_sessions), stored(&ws.join(".pi/sessions")));
    let names =
        |m: &Value| -> Vec<String> { m["sections"].as_object().unwrap().keys().cloned().collect() };
    assert_eq!(
        names(&theirs),
        [
            "preamble",
            "tools",
            "rules",
            "docs",
            "addendum",
            "project_context",
            "skills",
            "cwd"
        ]
    );
    assert_eq!(ours["sections"], theirs["sections"]);
    assert_eq!(names(&ours), names(&theirs));
    assert_eq!(ours["content"], theirs["content"]);
    // The declarations, whole and key by key in Pi's order: name, description, parameters,
    // and `constrainedSampling` on read/bash/edit/write.
    let declared = |m: &Value| -> Vec<(Vec<String>, Value)> {
        m["toolsAdded"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t.as_object().unwrap().keys().cloned().collect(), t.clone()))
            .collect()
    };
    assert_eq!(declared(&ours), declared(&theirs));
}
