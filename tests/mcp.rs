//! MCP servers end to end (docs/mcp.md): the real `pi-lsp run` with the loopback scripted model
//! calling `mcp__…` tools of real servers — `@modelcontextprotocol/server-everything` over
//! stdio and a streamable-HTTP server written here on PyPI `mcp` 2.x (`MCPServer`) — plus a
//! misbehaving stdio server for the faults (hangs, floods stdout, 50 MB results, dies mid-call).
//!
//! Needs: `node` and server-everything's `dist/index.js` (`$PI_MCP_EVERYTHING`, else
//! `.mcp-ref/node_modules/@modelcontextprotocol/server-everything/dist/index.js`), and a Python
//! with `mcp` (`$PI_MCP_PYTHON`, else `.mcp-ref/venv/bin/python`); `.ci/run` installs both.
//! Under `CI=true` a missing one fails the tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pi_e2e::lsp_client::agent_env;
use pi_e2e::mock_model::{MockModel, Step};
use pi_e2e::{pi_lsp_bin, require, session_lines, TempDir};
use serde_json::{json, Value};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn everything() -> Option<PathBuf> {
    let p = std::env::var("PI_MCP_EVERYTHING")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            repo()
                .join(".mcp-ref/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
        });
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    (p.exists() && node).then_some(p)
}

fn python() -> Option<PathBuf> {
    let p = std::env::var("PI_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join(".mcp-ref/venv/bin/python"));
    let ok = Command::new(&p)
        .args(["-c", "from mcp.server.mcpserver import MCPServer"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(p)
}

/// A stdio MCP server that misbehaves on request, written as plain JSON-RPC lines: tool
/// `hang` never answers, `flood` prints endless garbage lines, `huge` answers with a 50 MB
/// line, `die` exits mid-call, `ok` answers. Its children (a `sleep`) show whether the process
/// group is stopped.
const FAULTY: &str = r#"
import json, sys, os, time, subprocess
child = subprocess.Popen(["sleep", "300"])
open(os.environ["PIDS"], "a").write(f"{os.getpid()}\n{child.pid}\n")
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
tools = [{"name": n, "description": "fault " + n, "inputSchema": {"type": "object"}} for n in ["hang", "flood", "huge", "die", "ok"]]
for line in sys.stdin:
    m = json.loads(line)
    i, meth = m.get("id"), m.get("method")
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "faulty", "version": "1"}}})
    elif meth == "tools/list":
        send({"jsonrpc": "2.0", "id": i, "result": {"tools": tools}})
    elif meth == "tools/call":
        n = m["params"]["name"]
        if n == "hang":
            continue
        if n == "flood":
            while True:
                sys.stdout.write("garbage " * 1000 + "\n")
        if n == "huge":
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "x" * (50 * 1024 * 1024)}]}}) + "\n"); sys.stdout.flush()
            continue
        if n == "die":
            os._exit(9)
        send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "fine"}]}})
"#;

/// A streamable-HTTP server on PyPI `mcp` 2.x: `big` (a 30,000-character text), `fail`
/// (`isError`), `whoami` (the Authorization header it got). Prints its port when listening.
const HTTP_SERVER: &str = r#"
import socket, sys
from mcp.server.mcpserver import MCPServer
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
m = MCPServer("py")
@m.tool()
def big() -> str:
    """Returns a long text."""
    return "".join(f"{i:05d}" for i in range(6000))
@m.tool()
def fail() -> str:
    """Always fails."""
    raise ValueError("it failed on purpose")
print(port, flush=True)
m.run(transport="streamable-http", host="127.0.0.1", port=port)
"#;

struct Env {
    _tmp: TempDir,
    ws: PathBuf,
    agent: PathBuf,
    env: Vec<(&'static str, String)>,
}

fn setup(name: &str, mock: &MockModel, mcp: Value, settings: Option<Value>) -> Env {
    let tmp = TempDir::new(name);
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let agent = tmp.path().join("agent");
    let env = agent_env(&agent, &mock.models_json(), &[]);
    std::fs::write(agent.join("mcp.json"), mcp.to_string()).unwrap();
    if let Some(s) = settings {
        std::fs::write(agent.join("settings.json"), s.to_string()).unwrap();
    }
    Env {
        _tmp: tmp,
        ws,
        agent,
        env,
    }
}

async fn run_async(e: &Env, args: &[&str]) -> (std::process::Output, Duration) {
    let mut cmd = Command::new(pi_lsp_bin());
    cmd.arg("run")
        .arg("--workspace")
        .arg(&e.ws)
        .args(["--model", "mock/mock-1"])
        .args(args);
    for (k, v) in &e.env {
        cmd.env(k, v);
    }
    tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let out = cmd.output().unwrap();
        (out, t.elapsed())
    })
    .await
    .unwrap()
}

fn results(ws: &Path) -> Vec<Value> {
    session_lines(ws)
        .into_iter()
        .filter(|l| l["message"]["role"] == "toolResult")
        .map(|l| l["message"].clone())
        .collect()
}

fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn everything_entry(path: &Path, exposure: &str) -> Value {
    json!({"command": "node", "args": [path, "stdio"], "exposure": exposure})
}

fn pids_alive(pids: &[i32]) -> Vec<i32> {
    pids.iter()
        .copied()
        .filter(|p| {
            Path::new(&format!("/proc/{p}")).exists()
                && !std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .unwrap_or_default()
                    .contains(") Z ")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_tools_image_and_abort_free_run() {
    let Some(ev) = everything() else {
        require(
            false,
            "direct_tools_image_and_abort_free_run",
            "node + server-everything",
        );
        return;
    };
    let mock = MockModel::start(vec![
        Step::call("c1", "mcp__everything__echo", json!({"message": "hello"})),
        Step::call("c2", "mcp__everything__get_tiny_image", json!({})),
        Step::call("c3", "mcp__everything__get_sum", json!({"a": "x"})),
        Step::text("done"),
    ])
    .await;
    let e = setup(
        "mcp-direct",
        &mock,
        json!({"mcpServers": {"everything": everything_entry(&ev, "direct")}}),
        None,
    );
    let (out, _) = run_async(&e, &["go"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = results(&e.ws);
    assert_eq!(r.len(), 3);
    assert_eq!(r[0]["toolName"], "mcp__everything__echo");
    assert_eq!(r[0]["isError"], false);
    assert_eq!(text_of(&r[0]), "Echo: hello");
    assert_eq!(
        r[0]["details"],
        json!({"server": "everything", "tool": "echo"})
    );
    let blocks = r[1]["content"].as_array().unwrap();
    let img = blocks
        .iter()
        .find(|b| b["type"] == "image")
        .expect("an image block");
    assert_eq!(img["mimeType"], "image/png");
    assert!(img["data"].as_str().unwrap().len() > 100);
    // Arguments are validated against the server's schema before anything is sent.
    assert_eq!(r[2]["isError"], true);
    assert!(
        text_of(&r[2]).contains("mcp__everything__get_sum"),
        "{}",
        text_of(&r[2])
    );
    let reqs = mock.requests();
    let names = tool_names(&reqs[0].body);
    assert!(
        names.contains(&"mcp__everything__echo".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"list_mcp_resources".to_string()),
        "{names:?}"
    );
    assert!(!names.contains(&"tool_search".to_string()), "{names:?}");
    mock.assert_paired();
}

/// Pi's two ways to switch MCP off, `--no-mcp` and `"extensions": ["-builtin:mcp"]`: no
/// server process starts, no MCP tool is declared, and a call of one is "not found"; the same
/// configuration without them connects (the control run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_mcp_and_builtin_off_start_no_server() {
    let Some(ev) = everything() else {
        require(
            false,
            "no_mcp_and_builtin_off_start_no_server",
            "node + server-everything",
        );
        return;
    };
    let call = || Step::call("c", "mcp__everything__echo", json!({"message": "hi"}));
    let mock = MockModel::start(vec![
        call(),
        Step::text("a"),
        call(),
        Step::text("b"),
        call(),
        Step::text("c"),
    ])
    .await;
    let tmp = TempDir::new("mcp-off-marker");
    let marker = tmp.path().join("started");
    let entry = json!({
        "command": "sh",
        "args": ["-c", "touch \"$0\"; exec node \"$1\" stdio", marker, ev],
        "exposure": "direct"
    });
    let e = setup(
        "mcp-off",
        &mock,
        json!({"mcpServers": {"everything": entry}}),
        None,
    );
    let not_found = "Tool mcp__everything__echo not found";
    let (out, _) = run_async(&e, &["--no-mcp", "--no-session", "go"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        e.agent.join("settings.json"),
        json!({"extensions": ["-builtin:mcp"]}).to_string(),
    )
    .unwrap();
    let (out, _) = run_async(&e, &["--no-session", "go"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!marker.exists(), "a server started with MCP off");
    std::fs::remove_file(e.agent.join("settings.json")).unwrap();
    let (out, _) = run_async(&e, &["go"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(marker.exists(), "the control run started no server");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 6);
    let mcp_names = |i: usize| -> Vec<String> {
        tool_names(&reqs[i].body)
            .into_iter()
            .filter(|n| n.starts_with("mcp__") || n.contains("mcp_resource"))
            .collect()
    };
    assert_eq!(mcp_names(0), Vec::<String>::new());
    assert_eq!(mcp_names(2), Vec::<String>::new());
    assert!(
        mcp_names(4).contains(&"mcp__everything__echo".to_string()),
        "{:?}",
        mcp_names(4)
    );
    // The tool result of each run is the last message of its second request.
    let last_tool_text = |i: usize| -> String {
        let msgs = reqs[i].body["messages"].as_array().unwrap();
        let m = msgs.last().unwrap();
        assert_eq!(m["role"], "tool", "{m}");
        m["content"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| m["content"].to_string())
    };
    assert_eq!(last_tool_text(1), not_found);
    assert_eq!(last_tool_text(3), not_found);
    assert_eq!(last_tool_text(5), "Echo: hi");
    mock.assert_paired();
}

/// Plan mode (issue "plan mode and a live todo list": MCP tools without `readOnlyHint` off):
/// only the server's tools annotated `readOnlyHint: true` are declared, and a call of another
/// does not reach the server; without plan mode every tool is declared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_mode_declares_only_read_only_mcp_tools() {
    let Some(ev) = everything() else {
        require(
            false,
            "plan_mode_declares_only_read_only_mcp_tools",
            "node + server-everything",
        );
        return;
    };
    let mock = MockModel::start(vec![
        Step::call("c", "mcp__everything__toggle_simulated_logging", json!({})),
        Step::text("Plan:\n1. Look around"),
        Step::text("fine"),
    ])
    .await;
    let e = setup(
        "mcp-plan",
        &mock,
        json!({"mcpServers": {"everything": everything_entry(&ev, "direct")}}),
        None,
    );
    let (out, _) = run_async(&e, &["--plan", "--no-session", "plan it"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (out, _) = run_async(&e, &["--no-session", "go"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    let mcp_names = |i: usize| -> Vec<String> {
        let mut v: Vec<String> = tool_names(&reqs[i].body)
            .into_iter()
            .filter(|n| n.starts_with("mcp__everything__"))
            .map(|n| n["mcp__everything__".len()..].to_string())
            .collect();
        v.sort();
        v
    };
    let read_only = [
        "echo",
        "get_annotated_message",
        "get_env",
        "get_resource_links",
        "get_resource_reference",
        "get_structured_content",
        "get_sum",
        "get_tiny_image",
        "trigger_long_running_operation",
    ];
    assert_eq!(mcp_names(0), read_only);
    assert_eq!(mcp_names(1), read_only);
    let all = mcp_names(2);
    assert!(
        all.contains(&"toggle_simulated_logging".to_string())
            && all.contains(&"gzip_file_as_resource".to_string())
            && all.len() > read_only.len(),
        "{all:?}"
    );
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    let result = msgs.last().unwrap();
    assert_eq!(result["role"], "tool", "{result}");
    let text = result["content"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| result["content"].to_string());
    // Not declared, so not reached: the server's "Started simulated … logging" never comes.
    assert_eq!(
        text,
        "Tool mcp__everything__toggle_simulated_logging not found"
    );
    mock.assert_paired();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_tools_load_through_tool_search_and_stay_on_the_branch() {
    let Some(ev) = everything() else {
        require(
            false,
            "deferred_tools_load_through_tool_search",
            "node + server-everything",
        );
        return;
    };
    let mock = MockModel::start(vec![
        Step::call("c0", "mcp__everything__get_sum", json!({"a": 1, "b": 2})),
        Step::call(
            "c1",
            "tool_search",
            json!({"query": "sum of two numbers", "limit": 1}),
        ),
        Step::call("c2", "mcp__everything__get_sum", json!({"a": 2, "b": 3})),
        Step::text("done"),
        Step::text("again"),
        Step::text("as Pi 1.6 wrote it"),
    ])
    .await;
    // `codemode` (Pi's default) is served as deferred, said once.
    let mut entry = everything_entry(&ev, "codemode");
    entry["toolExposure"] = json!({"echo": "hidden"});
    let e = setup(
        "mcp-deferred",
        &mock,
        json!({"mcpServers": {"everything": entry}}),
        None,
    );
    let (out, _) = run_async(&e, &["go"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr
            .matches("codemode exposure is not available in pi-lsp yet")
            .count(),
        1,
        "{stderr}"
    );
    let r = results(&e.ws);
    assert_eq!(text_of(&r[0]), "Tool mcp__everything__get_sum not found");
    assert_eq!(
        text_of(&r[1]),
        "Loaded 1 tool. They are available from your next call:\n- mcp__everything__get_sum: Returns the sum of two numbers"
    );
    assert_eq!(text_of(&r[2]), "The sum of 2 and 3 is 5.");
    let reqs = mock.requests();
    let first = tool_names(&reqs[0].body);
    assert!(
        first.contains(&"tool_search".to_string()) && !first.iter().any(|n| n.starts_with("mcp__")),
        "{first:?}"
    );
    let third = tool_names(&reqs[2].body);
    assert!(
        third.contains(&"mcp__everything__get_sum".to_string()),
        "{third:?}"
    );
    assert!(
        !third.contains(&"mcp__everything__echo".to_string()),
        "{third:?}"
    );
    let custom: Vec<Value> = session_lines(&e.ws)
        .into_iter()
        .filter(|l| l["type"] == "custom")
        .collect();
    assert_eq!(custom.len(), 1);
    assert_eq!(custom[0]["customType"], "mcp-tools");
    assert_eq!(
        custom[0]["data"],
        json!({"loaded": ["mcp__everything__get_sum"]})
    );
    // As Pi 1.6 records a load: a stored system message declaring the loaded tool, after the
    // `tool_search` result and before the answer that calls it.
    let lines = session_lines(&e.ws);
    let kinds: Vec<String> = lines
        .iter()
        .filter(|l| l["type"] == "message")
        .map(|l| {
            let m = &l["message"];
            match m["role"].as_str().unwrap() {
                "toolResult" => format!("toolResult {}", m["toolName"].as_str().unwrap()),
                "system" if m.get("toolsAdded").is_some() => {
                    let names: Vec<&str> = m["toolsAdded"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t["name"].as_str().unwrap())
                        .collect();
                    format!("system +{}", names.join(",").replace("mcp__", "MCP:"))
                }
                other => other.to_string(),
            }
        })
        .collect();
    let run_start = kinds[0].clone();
    assert!(run_start.starts_with("system +read,"), "{kinds:?}");
    assert!(!run_start.contains("MCP:"), "{kinds:?}");
    assert_eq!(
        kinds[1..],
        [
            "user",
            "assistant",
            "toolResult mcp__everything__get_sum",
            "assistant",
            "toolResult tool_search",
            "system +MCP:everything__get_sum",
            "assistant",
            "toolResult mcp__everything__get_sum",
            "assistant",
        ],
        "{kinds:?}"
    );
    let added = lines
        .iter()
        .find(|l| l["message"]["toolsAdded"][0]["name"] == "mcp__everything__get_sum")
        .unwrap();
    assert_eq!(
        added["message"]["toolsAdded"][0]["description"],
        "Returns the sum of two numbers"
    );
    assert_eq!(added["message"]["sections"], json!({}));
    assert_eq!(added["message"]["content"], "");

    // The next run on the branch declares it from the start, and its run-start check does not
    // take it away again.
    let (out, _) = run_async(&e, &["-c", "more"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let declared = tool_names(&mock.requests()[4].body);
    assert!(
        declared.contains(&"mcp__everything__get_sum".to_string()),
        "{declared:?}"
    );
    let removed: Vec<Value> = session_lines(&e.ws)
        .into_iter()
        .filter(|l| l["message"].get("toolsRemoved").is_some())
        .collect();
    assert_eq!(removed, Vec::<Value>::new());

    // A file Pi 1.6 wrote has the stored system message only: the load stays declared.
    let file = std::fs::read_dir(e.ws.join(".pi/sessions"))
        .unwrap()
        .map(|x| x.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.matches("\"customType\":\"mcp-tools\"").count(), 1);
    std::fs::write(
        &file,
        text.replace("\"customType\":\"mcp-tools\"", "\"customType\":\"other\""),
    )
    .unwrap();
    let (out, _) = run_async(&e, &["-c", "once more"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let declared = tool_names(&mock.requests()[5].body);
    assert!(
        declared.contains(&"mcp__everything__get_sum".to_string()),
        "{declared:?}"
    );
    mock.assert_paired();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_tools_untrusted_projects_and_the_approval_gate() {
    let Some(ev) = everything() else {
        require(
            false,
            "hidden_tools_untrusted_projects_and_the_approval_gate",
            "node + server-everything",
        );
        return;
    };
    let mock = MockModel::start(vec![
        Step::call("c1", "mcp__everything__echo", json!({"message": "hi"})),
        Step::call("c2", "mcp__everything__get_sum", json!({"a": 1, "b": 2})),
        Step::call("c3", "mcp__project__echo", json!({"message": "hi"})),
        Step::text("done"),
    ])
    .await;
    let mut entry = everything_entry(&ev, "direct");
    entry["toolExposure"] = json!({"get-sum": "hidden"});
    // auto-edit: a readOnlyHint tool runs, another asks (headless: nobody to ask → refused).
    let e = setup(
        "mcp-gate",
        &mock,
        json!({"mcpServers": {"everything": entry}}),
        Some(json!({"approvalPolicy": "auto-edit"})),
    );
    std::fs::create_dir_all(e.ws.join(".pi")).unwrap();
    std::fs::write(
        e.ws.join(".pi/mcp.json"),
        json!({"mcpServers": {"project": everything_entry(&ev, "direct")}}).to_string(),
    )
    .unwrap();
    let (out, _) = run_async(&e, &["go"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = results(&e.ws);
    assert_eq!(text_of(&r[0]), "Echo: hi");
    assert_eq!(text_of(&r[1]), "Tool mcp__everything__get_sum not found");
    assert_eq!(text_of(&r[2]), "Tool mcp__project__echo not found");
    // With the project trusted, `project` connects, and its echo (readOnlyHint) runs; a tool
    // without it (get-env) asks under auto-edit and nobody can answer headless.
    let mock2 = MockModel::start(vec![
        Step::call("c1", "mcp__project__echo", json!({"message": "p"})),
        Step::call("c2", "mcp__project__toggle_simulated_logging", json!({})),
        Step::text("done"),
    ])
    .await;
    let mut e2 = setup(
        "mcp-gate2",
        &mock2,
        json!({"mcpServers": {}}),
        Some(json!({"approvalPolicy": "auto-edit"})),
    );
    std::fs::create_dir_all(e2.ws.join(".pi")).unwrap();
    std::fs::write(
        e2.ws.join(".pi/mcp.json"),
        json!({"mcpServers": {"project": everything_entry(&ev, "direct")}}).to_string(),
    )
    .unwrap();
    e2.env.retain(|(k, _)| *k != "PI_LSP_LOG");
    let (out, _) = run_async(&e2, &["--trust", "go"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = results(&e2.ws);
    assert_eq!(text_of(&r[0]), "Echo: p");
    assert_eq!(r[1]["isError"], true);
    assert!(
        text_of(&r[1]).starts_with("Not run: the approval policy asks the user"),
        "{}",
        text_of(&r[1])
    );
    mock.assert_paired();
    mock2.assert_paired();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_large_results_and_errors() {
    let Some(py) = python() else {
        require(
            false,
            "streamable_http_large_results_and_errors",
            "python with mcp 2.x",
        );
        return;
    };
    let tmp = TempDir::new("mcp-http-server");
    let script = tmp.path().join("server.py");
    std::fs::write(&script, HTTP_SERVER).unwrap();
    let mut server = std::process::Command::new(&py)
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    {
        use std::io::BufRead;
        let out = server.stdout.as_mut().unwrap();
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
    }
    let port: u16 = line.trim().parse().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mock = MockModel::start(vec![
        Step::call("c1", "mcp__py__big", json!({})),
        Step::call("c2", "mcp__py__fail", json!({})),
        Step::text("done"),
    ])
    .await;
    let secret = "hdr-secret-value-0123456789";
    let mut e = setup(
        "mcp-http",
        &mock,
        json!({"mcpServers": {"py": {"url": format!("http://127.0.0.1:{port}/mcp"), "exposure": "direct",
            "headers": {"X-Api-Key": "${PI_MCP_TEST_SECRET}"}},
            "oauthy": {"url": format!("http://127.0.0.1:{port}/mcp"), "oauth": {}, "exposure": "direct"}}}),
        None,
    );
    e.env.push(("PI_MCP_TEST_SECRET", secret.to_string()));
    let (out, _) = run_async(&e, &["go"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let _ = server.kill();
    let _ = server.wait();
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("sign-in is not supported yet"), "{stderr}");
    let r = results(&e.ws);
    let big: String = (0..6000).map(|i| format!("{i:05}")).collect();
    let t = text_of(&r[0]);
    let path = r[0]["details"]["fullOutputPath"].as_str().unwrap();
    assert_eq!(std::fs::read_to_string(path).unwrap(), big);
    assert_eq!(
        t,
        format!(
            "Warning: truncated output (original token count: 7500)\nTotal output lines: 1\n\n{}…9520 chars truncated…{}\n\n[Full output: {path} (read it with offset/limit)]",
            &big[..10240],
            &big[30000 - 10240..]
        )
    );
    std::fs::remove_file(path).unwrap();
    assert_eq!(r[1]["isError"], true);
    assert_eq!(text_of(&r[1]), "Error executing tool fail");
    // The header's value never reaches a file written for the session, nor the log.
    assert_no_secret(&[&e.ws, &e.agent], secret);
    mock.assert_paired();
}

/// Every byte of every file under `roots` is free of `secret`.
fn assert_no_secret(roots: &[&Path], secret: &str) {
    fn walk(p: &Path, out: &mut Vec<PathBuf>) {
        if p.is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                walk(&e.unwrap().path(), out);
            }
        } else {
            out.push(p.to_path_buf());
        }
    }
    let mut files = Vec::new();
    for r in roots {
        walk(r, &mut files);
    }
    // The user's own configuration holds what the user wrote.
    files.retain(|f| {
        f.file_name()
            .is_none_or(|n| n != "mcp.json" && n != "models.json")
    });
    assert!(!files.is_empty());
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{} holds the secret",
            f.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_secrets_stay_out_of_sessions_logs_and_exports() {
    let Some(ev) = everything() else {
        require(false, "env_secrets_stay_out", "node + server-everything");
        return;
    };
    let secret = "env-secret-value-9876543210";
    let mock = MockModel::start(vec![
        Step::call("c1", "mcp__everything__get_env", json!({})),
        Step::call("c2", "mcp__everything__toggle_simulated_logging", json!({})),
        Step::text("done"),
    ])
    .await;
    let mut entry = everything_entry(&ev, "direct");
    entry["env"] =
        json!({"MY_TOKEN": "${PI_MCP_TEST_SECRET}", "CMD_TOKEN": "!echo cmd-secret-abcdefghijkl"});
    let mut e = setup(
        "mcp-secrets",
        &mock,
        json!({"mcpServers": {"everything": entry}}),
        None,
    );
    e.env.push(("PI_MCP_TEST_SECRET", secret.to_string()));
    let (out, _) = run_async(&e, &["--json", "go"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = results(&e.ws);
    // The server saw it (its environment) …
    assert!(text_of(&r[0]).contains("MY_TOKEN"), "{}", text_of(&r[0]));
    // … but no byte the harness wrote holds it: stdout, stderr, the session, the agent dir.
    for s in [secret, "cmd-secret-abcdefghijkl"] {
        assert!(!String::from_utf8_lossy(&out.stdout).contains(s));
        assert!(!String::from_utf8_lossy(&out.stderr).contains(s));
        assert_no_secret(&[&e.ws, &e.agent], s);
    }
    mock.assert_paired();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_servers_end_calls_with_errors_and_leave_no_process() {
    let python = python().or_else(|| {
        Command::new("python3")
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|_| PathBuf::from("python3"))
    });
    let Some(py) = python else {
        require(false, "faulty_servers", "python3");
        return;
    };
    let tmp = TempDir::new("mcp-faulty-script");
    let script = tmp.path().join("faulty.py");
    std::fs::write(&script, FAULTY).unwrap();
    let mock = MockModel::start(vec![
        Step::call("c1", "mcp__faulty__hang", json!({})),
        Step::call("c2", "mcp__faulty__huge", json!({})),
        Step::call("c3", "mcp__faulty__ok", json!({})),
        Step::call("c4", "mcp__faulty__die", json!({})),
        Step::call("c5", "mcp__faulty__ok", json!({})),
        Step::call("c6", "mcp__faulty__flood", json!({})),
        Step::call("c7", "mcp__crashing__anything", json!({})),
        Step::text("done"),
    ])
    .await;
    let e = setup(
        "mcp-faulty",
        &mock,
        json!({"mcpServers": {
            "faulty": {"command": py, "args": [script], "exposure": "direct", "timeout": 5, "env": {"PIDS": tmp.path().join("pids")}},
            "crashing": {"command": "sh", "args": ["-c", "echo it broke >&2; exit 4"], "exposure": "direct"}
        }}),
        None,
    );
    let (out, took) = run_async(&e, &["go"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let r = results(&e.ws);
    let texts: Vec<String> = r.iter().map(text_of).collect();
    assert!(
        texts[0].starts_with("MCP tool faulty/hang failed: MCP request timed out after 5 s"),
        "{texts:?}"
    );
    assert!(
        texts[1].contains("MCP stdio message exceeds 16777216 bytes")
            || texts[1].contains("timed out after 5 s"),
        "{texts:?}"
    );
    assert_eq!(texts[2], "fine", "reconnects on the next call");
    assert!(
        texts[3].starts_with("MCP tool faulty/die failed: Connection closed"),
        "{texts:?}"
    );
    assert_eq!(texts[4], "fine");
    assert!(texts[5].contains("timed out after 5 s"), "{texts:?}");
    assert_eq!(texts[6], "Tool mcp__crashing__anything not found");
    assert!(
        stderr.contains("MCP server \"crashing\"") && stderr.contains("it broke"),
        "{stderr}"
    );
    assert!([0, 1, 3, 5].iter().all(|i| r[*i]["isError"] == true));
    assert!(took < Duration::from_secs(40), "{took:?}");
    // Every server the run started, and the `sleep` child each started, is gone.
    let children: Vec<i32> = std::fs::read_to_string(tmp.path().join("pids"))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(children.len() >= 6, "{children:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(pids_alive(&children), Vec::<i32>::new(), "orphans");
    let leftovers = Command::new("pgrep")
        .args(["-f", &script.display().to_string()])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&leftovers.stdout).trim().is_empty(),
        "orphans: {}",
        String::from_utf8_lossy(&leftovers.stdout)
    );
    mock.assert_paired();
}

#[test]
fn mcp_list_reports_state_tools_and_errors() {
    let Some(ev) = everything() else {
        require(
            false,
            "mcp_list_reports_state_tools_and_errors",
            "node + server-everything",
        );
        return;
    };
    let tmp = TempDir::new("mcp-list");
    let agent = tmp.path().join("agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(
        agent.join("mcp.json"),
        json!({"mcpServers": {
            "everything": {"command": "node", "args": [ev, "stdio"], "toolExposure": {"echo": "direct"}},
            "off": {"command": "nothing-here", "enabled": false},
            "sse": {"type": "sse", "url": "http://127.0.0.1:1/sse"}
        }})
        .to_string(),
    )
    .unwrap();
    let out = Command::new(pi_lsp_bin())
        .args(["mcp", "list", "--workspace"])
        .arg(tmp.path())
        .env("PI_CODING_AGENT_DIR", &agent)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("everything: connected, "), "{text}");
    assert!(lines[0].ends_with(" tools (codemode, global)"), "{text}");
    assert!(text.contains("echo [direct]"), "{text}");
    assert!(text.contains("\n  offers resources\n"), "{text}");
    assert!(
        text.contains("off: disabled (codemode, global)\n  nothing-here\n"),
        "{text}"
    );
    assert!(text.contains(&format!(
        "config error: {}: server \"sse\": legacy SSE transport is not supported; use the streamable HTTP URL",
        agent.join("mcp.json").display()
    )), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_mid_call_fails_the_call_at_once() {
    let python = python().or_else(|| {
        Command::new("python3")
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|_| PathBuf::from("python3"))
    });
    let Some(py) = python else {
        require(false, "a_server_that_exits_mid_call", "python3");
        return;
    };
    let tmp = TempDir::new("mcp-die-script");
    let script = tmp.path().join("faulty.py");
    std::fs::write(&script, FAULTY).unwrap();
    let mock = MockModel::start(vec![
        Step::call("c1", "mcp__faulty__die", json!({})),
        Step::call("c2", "mcp__faulty__ok", json!({})),
        Step::text("done"),
    ])
    .await;
    let e = setup(
        "mcp-die",
        &mock,
        json!({"mcpServers": {"faulty": {"command": py, "args": [script], "exposure": "direct", "timeout": 20, "env": {"PIDS": tmp.path().join("pids")}}}}),
        None,
    );
    let (out, took) = run_async(&e, &["go"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let texts: Vec<String> = results(&e.ws).iter().map(text_of).collect();
    assert!(
        texts[0].starts_with("MCP tool faulty/die failed: Connection closed"),
        "{texts:?}"
    );
    assert_eq!(texts[1], "fine");
    assert!(took < Duration::from_secs(15), "{took:?}");
    mock.assert_paired();
}

// ---- Over the editor's LSP stdio: abort, list_changed, agent/mcp/*, notices, VS Code, secrets.

use pi_e2e::lsp_client::{EditorBehavior, LspClient};

/// Copies every line the harness writes to the server into `$MCP_TEE`, then to the real server
/// (`argv[1:]`), whose stdout is ours: what reached the server, as it reached it.
const TEE: &str = r#"
import os, subprocess, sys
log = open(os.environ["MCP_TEE"], "a", buffering=1)
p = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE)
for line in sys.stdin.buffer:
    log.write(line.decode())
    p.stdin.write(line); p.stdin.flush()
p.stdin.close(); p.wait()
"#;

/// A streamable-HTTP server whose tool `grow` adds the tool `extra`, withdraws `shrinkme` and
/// announces it (`notifications/tools/list_changed`, on the call's stream).
const LIST_CHANGED_SERVER: &str = r#"
import asyncio, socket
from mcp import types
from mcp.server.mcpserver import MCPServer, Context
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
m = MCPServer("py")
def extra() -> str:
    """Added by grow."""
    return "extra ran"
@m.tool()
def shrinkme() -> str:
    """Withdrawn by grow."""
    return "still here"
@m.tool()
async def grow(ctx: Context) -> str:
    """Changes the tool list."""
    m.add_tool(extra)
    m.remove_tool("shrinkme")
    await ctx.session.send_notification(types.ToolListChangedNotification(), related_request_id=ctx.request_id)
    await asyncio.sleep(1.0)
    return "grown"
print(port, flush=True)
m.run(transport="streamable-http", host="127.0.0.1", port=port)
"#;

async fn lsp(e: &Env, init: Option<Value>) -> LspClient {
    let behavior = EditorBehavior {
        initialization_options: init,
        ..EditorBehavior::default()
    };
    LspClient::start(&pi_lsp_bin(), &e.ws, &e.env, behavior).await
}

/// `agent/mcp/list` until `server` is no longer connecting (at most 30 s).
async fn settled(c: &mut LspClient, server: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let l = c.request("agent/mcp/list", json!({})).await.unwrap();
        let s = l["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == server)
            .cloned();
        if let Some(s) = &s {
            if s["state"] != "connecting" {
                return l;
            }
        }
        assert!(Instant::now() < deadline, "{server} still connecting: {l}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn server_of<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {list}"))
}

/// The `mcp__` tools of a model request, sorted.
fn mcp_tools(body: &Value) -> Vec<String> {
    let mut t: Vec<String> = tool_names(body)
        .into_iter()
        .filter(|t| t.starts_with("mcp__"))
        .collect();
    t.sort();
    t
}

fn show_messages(c: &LspClient, prefix: &str) -> Vec<Value> {
    c.log()
        .into_iter()
        .filter(|m| {
            m["method"] == "window/showMessage"
                && m["params"]["message"]
                    .as_str()
                    .is_some_and(|t| t.starts_with(prefix))
        })
        .map(|m| m["params"].clone())
        .collect()
}

async fn start_py(py: &Path, dir: &Path, script: &str) -> (std::process::Child, u16) {
    let path = dir.join("server.py");
    std::fs::write(&path, script).unwrap();
    let mut server = std::process::Command::new(py)
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    {
        use std::io::BufRead;
        let out = server.stdout.as_mut().unwrap();
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    (server, line.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_during_a_long_call_cancels_it_at_the_server() {
    let (Some(ev), Some(py)) = (everything(), python()) else {
        require(
            false,
            "abort_during_a_long_call",
            "node + server-everything + python",
        );
        return;
    };
    let mock = MockModel::start(vec![
        Step::call(
            "c1",
            "mcp__everything__trigger_long_running_operation",
            json!({"duration": 60, "steps": 60}),
        ),
        Step::text("after"),
    ])
    .await;
    let tmp = TempDir::new("mcp-abort-tee");
    let tee = tmp.path().join("to-server.jsonl");
    let entry = json!({"command": py, "args": ["-c", TEE, "node", ev, "stdio"],
        "env": {"MCP_TEE": tee}, "exposure": "direct"});
    let e = setup(
        "mcp-abort",
        &mock,
        json!({"mcpServers": {"everything": entry}}),
        None,
    );
    let mut c = lsp(&e, None).await;
    settled(&mut c, "everything").await;
    let r = c
        .request("agent/prompt", json!({"text": "long one"}))
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    // The call reached the server …
    let deadline = Instant::now() + Duration::from_secs(20);
    let call_id = loop {
        let text = std::fs::read_to_string(&tee).unwrap_or_default();
        let call = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|m| m["method"] == "tools/call");
        if let Some(m) = call {
            break m["id"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "no tools/call reached the server"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // … then the user aborts: the run ends at once.
    let t = Instant::now();
    let a = c
        .request("agent/abort", json!({"sessionId": sid}))
        .await
        .unwrap();
    assert_eq!(a["aborted"], true);
    let events = c.run_until_end(Duration::from_secs(5)).await;
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    let ends: Vec<&Value> = events
        .iter()
        .filter(|ev| ev["event"]["type"] == "tool_execution_end")
        .collect();
    assert_eq!(ends.len(), 1);
    assert_eq!(ends[0]["event"]["isError"], true);
    assert_eq!(
        ends[0]["event"]["result"]["content"][0]["text"],
        "Tool execution was aborted by the user."
    );
    // `notifications/cancelled` for that request reached the server.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(&tee).unwrap();
        let cancelled: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|m| m["method"] == "notifications/cancelled")
            .collect();
        if !cancelled.is_empty() {
            assert_eq!(cancelled.len(), 1);
            assert_eq!(cancelled[0]["params"]["requestId"], call_id);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no notifications/cancelled: {text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Only the one request went to the model; the second step was never asked for.
    assert_eq!(mock.requests().len(), 1);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_changed_adds_and_withdraws_tools() {
    let Some(py) = python() else {
        require(false, "tools_list_changed", "python with mcp 2.x");
        return;
    };
    let tmp = TempDir::new("mcp-list-changed-server");
    let (mut server, port) = start_py(&py, tmp.path(), LIST_CHANGED_SERVER).await;
    let mock = MockModel::start(vec![
        Step::call("c1", "mcp__py__grow", json!({})),
        Step::call("c2", "mcp__py__extra", json!({})),
        Step::call("c3", "mcp__py__shrinkme", json!({})),
        Step::text("done"),
    ])
    .await;
    let e = setup(
        "mcp-list-changed",
        &mock,
        json!({"mcpServers": {"py": {"url": format!("http://127.0.0.1:{port}/mcp"), "exposure": "direct"}}}),
        None,
    );
    let (out, _) = run_async(&e, &["--json", "go"]).await;
    server.kill().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 4);
    assert_eq!(
        mcp_tools(&reqs[0].body),
        vec!["mcp__py__grow", "mcp__py__shrinkme"]
    );
    assert_eq!(
        mcp_tools(&reqs[1].body),
        vec!["mcp__py__extra", "mcp__py__grow"]
    );
    let r = results(&e.ws);
    assert_eq!(text_of(&r[0]), "grown");
    assert_eq!(text_of(&r[1]), "extra ran");
    assert_eq!(r[2]["isError"], true);
    assert_eq!(text_of(&r[2]), "Tool mcp__py__shrinkme not found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_mcp_methods_over_stdio_change_every_session_and_the_file() {
    let Some(ev) = everything() else {
        require(
            false,
            "agent_mcp_methods_over_stdio",
            "node + server-everything",
        );
        return;
    };
    let mock = MockModel::start(vec![
        Step::text("1"),
        Step::text("2"),
        Step::text("3"),
        Step::text("4"),
        Step::text("5"),
        Step::text("6"),
    ])
    .await;
    let e = setup(
        "mcp-methods",
        &mock,
        json!({"mcpServers": {"everything": everything_entry(&ev, "direct")}}),
        None,
    );
    let file = e.agent.join("mcp.json");
    let mut c = lsp(&e, None).await;
    let l = settled(&mut c, "everything").await;
    let s = server_of(&l, "everything");
    assert_eq!(s["state"], "connected");
    assert_eq!(s["enabled"], true);
    assert_eq!(s["scope"], "global");
    assert_eq!(s["transport"], "stdio");
    assert_eq!(s["source"], file.display().to_string());
    let count = s["toolCount"].as_u64().unwrap();
    assert!(count >= 10, "{s}");
    assert_eq!(s["tools"].as_array().unwrap().len() as u64, count);
    assert!(s["tools"].as_array().unwrap().contains(
        &json!({"name": "echo", "modelName": "mcp__everything__echo", "exposure": "direct"})
    ));

    // Two sessions of the workspace.
    let prompt = async |c: &mut LspClient, sid: Option<&str>, text: &str| -> String {
        let mut p = json!({"text": text});
        if let Some(s) = sid {
            p["sessionId"] = json!(s);
        }
        let r = c.request("agent/prompt", p).await.unwrap();
        c.run_until_end(Duration::from_secs(30)).await;
        r["sessionId"].as_str().unwrap().to_string()
    };
    let a = prompt(&mut c, None, "a").await;
    let b = prompt(&mut c, None, "b").await;
    assert_ne!(a, b);

    let l = c
        .request("agent/mcp/disable", json!({"server": "everything"}))
        .await
        .unwrap();
    let s = server_of(&l, "everything");
    assert_eq!(
        (s["enabled"].clone(), s["state"].clone()),
        (json!(false), json!("disabled"))
    );
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let mut want = everything_entry(&ev, "direct");
    want["enabled"] = json!(false);
    assert_eq!(saved, json!({"mcpServers": {"everything": want}}));
    prompt(&mut c, Some(&a), "c").await;
    prompt(&mut c, Some(&b), "d").await;

    c.request("agent/mcp/enable", json!({"server": "everything"}))
        .await
        .unwrap();
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(
        saved,
        json!({"mcpServers": {"everything": everything_entry(&ev, "direct")}})
    );
    let l = settled(&mut c, "everything").await;
    assert_eq!(server_of(&l, "everything")["state"], "connected");
    prompt(&mut c, Some(&b), "e").await;

    let l = c
        .request(
            "agent/mcp/setExposure",
            json!({"server": "everything", "exposure": "hidden"}),
        )
        .await
        .unwrap();
    assert_eq!(server_of(&l, "everything")["exposure"], "hidden");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(saved["mcpServers"]["everything"]["exposure"], "hidden");
    prompt(&mut c, Some(&a), "f").await;

    let l = c
        .request("agent/mcp/reconnect", json!({"server": "everything"}))
        .await
        .unwrap();
    assert_eq!(server_of(&l, "everything")["state"], "connected");
    let err = c
        .request("agent/mcp/disable", json!({"server": "nope"}))
        .await
        .unwrap_err();
    assert_eq!(err["code"], -32602);
    assert_eq!(err["message"], "server: no MCP server \"nope\"");

    let reqs = mock.requests();
    assert_eq!(reqs.len(), 6);
    let has_echo =
        |i: usize| mcp_tools(&reqs[i].body).contains(&"mcp__everything__echo".to_string());
    // Before: both sessions; disabled: neither; enabled again: yes; hidden: no.
    assert_eq!(
        (0..6).map(has_echo).collect::<Vec<_>>(),
        vec![true, true, false, false, true, false]
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_server_is_told_once_to_the_editor_and_on_headless_stderr() {
    let mock = MockModel::start(vec![Step::text("1"), Step::text("2"), Step::text("3")]).await;
    let crash = json!({"command": "sh", "args": ["-c", "echo 'boom: the tail of stderr' >&2; exit 3"],
        "exposure": "direct"});
    let e = setup(
        "mcp-notice",
        &mock,
        json!({"mcpServers": {"crash": crash, "bad name": {"command": "x"}}}),
        None,
    );
    let mut c = lsp(&e, None).await;
    for t in ["one", "two"] {
        let r = c.request("agent/prompt", json!({"text": t})).await.unwrap();
        assert!(r["sessionId"].is_string());
        c.run_until_end(Duration::from_secs(30)).await;
    }
    let notes = show_messages(&c, "MCP server \"crash\"");
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0]["type"], 2);
    let text = notes[0]["message"].as_str().unwrap();
    assert!(text.contains("boom: the tail of stderr"), "{text}");
    let config = show_messages(&c, "MCP configuration:");
    assert_eq!(
        config,
        vec![json!({"type": 2, "message": format!(
            "MCP configuration: {}: invalid server name \"bad name\" (use letters, digits, \"_\" and \"-\")",
            e.agent.join("mcp.json").display()
        )})]
    );
    c.shutdown().await;

    // As a user runs it (no PI_LSP_LOG copying informational lines to stderr).
    let mut e = e;
    e.env.push(("PI_LSP_LOG", String::new()));
    let (out, _) = run_async(&e, &["go"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("MCP server \"crash\"").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("boom: the tail of stderr"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vscode_servers_are_offered_when_the_setting_is_on() {
    let Some(ev) = everything() else {
        require(false, "vscode_servers", "node + server-everything");
        return;
    };
    let mock = MockModel::start(vec![
        Step::call("c1", "mcp__everything__echo", json!({"message": "hi"})),
        Step::text("done"),
    ])
    .await;
    let mut e = setup("mcp-vscode", &mock, json!({"mcpServers": {}}), None);
    e.env.push(("PI_TEST_EV_PATH", ev.display().to_string()));
    let vs_ws = e.ws.join(".vscode").join("mcp.json");
    std::fs::create_dir_all(vs_ws.parent().unwrap()).unwrap();
    let ws_text = r#"{
  // the workspace's servers, as VS Code reads them
  "servers": {
    "everything": {"type": "stdio", "command": "node", "args": ["${env:PI_TEST_EV_PATH}", "stdio"], "cwd": "${workspaceFolder}"},
  },
  "inputs": [],
}
"#;
    std::fs::write(&vs_ws, ws_text).unwrap();
    let vs_user = e
        .agent
        .parent()
        .unwrap()
        .join("Code")
        .join("User")
        .join("mcp.json");
    std::fs::create_dir_all(vs_user.parent().unwrap()).unwrap();
    std::fs::write(
        &vs_user,
        json!({"servers": {"gh": {"type": "http", "url": "http://127.0.0.1:9/mcp",
            "headers": {"Authorization": "Bearer ${input:gh-token}"}}}})
        .to_string(),
    )
    .unwrap();

    // Off by default.
    let mut c = lsp(&e, Some(json!({"workspaceTrusted": true}))).await;
    let l = c.request("agent/mcp/list", json!({})).await.unwrap();
    assert_eq!(l, json!({"servers": [], "errors": []}));
    c.shutdown().await;

    let init = json!({"workspaceTrusted": true, "vscodeMcpServers": true,
        "vscodeMcpUserConfig": vs_user});
    let mut c = lsp(&e, Some(init)).await;
    let l = settled(&mut c, "everything").await;
    let input_error = format!(
        "{}: server \"gh\": ${{input:gh-token}} asks VS Code for a value, which pi-lsp cannot do; put the value in an environment variable and write ${{env:NAME}}",
        vs_user.display()
    );
    assert_eq!(l["errors"], json!([input_error]));
    let s = server_of(&l, "everything");
    assert_eq!(s["state"], "connected");
    assert_eq!(s["scope"], "vscode-workspace");
    assert_eq!(s["source"], vs_ws.display().to_string());
    assert_eq!(s["exposure"], "codemode");
    assert_eq!(
        show_messages(&c, "MCP configuration:"),
        vec![json!({"type": 2, "message": format!("MCP configuration: {input_error}")})]
    );
    // A change is an override in Pi's project file; VS Code's file is only read.
    let l = c
        .request(
            "agent/mcp/setExposure",
            json!({"server": "everything", "exposure": "direct"}),
        )
        .await
        .unwrap();
    assert_eq!(server_of(&l, "everything")["exposure"], "direct");
    let pi_project: Value =
        serde_json::from_str(&std::fs::read_to_string(e.ws.join(".pi/mcp.json")).unwrap()).unwrap();
    assert_eq!(
        pi_project,
        json!({"mcpServers": {"everything": {"exposure": "direct"}}})
    );
    assert_eq!(std::fs::read_to_string(&vs_ws).unwrap(), ws_text);
    settled(&mut c, "everything").await;
    c.request("agent/prompt", json!({"text": "echo"}))
        .await
        .unwrap();
    let events = c.run_until_end(Duration::from_secs(30)).await;
    assert_eq!(
        pi_e2e::lsp_client::tool_results(&events),
        vec![(
            "mcp__everything__echo".to_string(),
            "Echo: hi".to_string(),
            false
        )]
    );
    let err = c
        .request("agent/mcp/list", json!({"bogus": 1}))
        .await
        .unwrap_err();
    assert_eq!(err["code"], -32602);
    c.shutdown().await;

    // A wrongly typed option fails initialize, naming it.
    let (err, _) = LspClient::try_start(
        &pi_lsp_bin(),
        &e.ws,
        &e.env,
        EditorBehavior {
            initialization_options: Some(json!({"vscodeMcpServers": "yes"})),
            ..EditorBehavior::default()
        },
    )
    .await
    .err()
    .unwrap();
    assert_eq!(err["code"], -32602);
    assert_eq!(
        err["message"],
        "initializationOptions.vscodeMcpServers: expected a boolean, got \"yes\""
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_reach_no_file_log_payload_or_export() {
    let Some(ev) = everything() else {
        require(false, "secrets_reach_no_file", "node + server-everything");
        return;
    };
    let env_secret = "env-secret-value-5551234";
    let key_secret = "sk-cmd-secret-424242";
    let mock = MockModel::start(vec![
        Step::call("c1", "mcp__everything__get_env", json!({})),
        Step::text("done"),
    ])
    .await;
    let mut entry = everything_entry(&ev, "direct");
    entry["env"] = json!({"MY_TOKEN": "${PI_MCP_TEST_SECRET}"});
    let mut e = setup(
        "mcp-secrets-lsp",
        &mock,
        json!({"mcpServers": {"everything": entry}}),
        None,
    );
    // The model server's key comes from a command, as Pi's `!command` apiKey.
    let mut models = mock.models_json();
    models["providers"]["mock"]["apiKey"] = json!(format!("!printf {key_secret}"));
    std::fs::write(e.agent.join("models.json"), models.to_string()).unwrap();
    e.env.push(("PI_MCP_TEST_SECRET", env_secret.to_string()));
    e.env.push(("PI_LSP_LOG", "debug".to_string()));
    let mut c = lsp(&e, None).await;
    let r = c
        .request("agent/prompt", json!({"text": "env?"}))
        .await
        .unwrap();
    let sid = r["sessionId"].as_str().unwrap().to_string();
    let events = c.run_until_end(Duration::from_secs(30)).await;
    // The key reached the model server, the variable reached the MCP server …
    let reqs = mock.requests();
    assert_eq!(
        reqs[0].headers["authorization"].to_str().unwrap(),
        format!("Bearer {key_secret}")
    );
    let (result, is_error) =
        pi_e2e::lsp_client::tool_result_text(&events, "mcp__everything__get_env");
    assert!(!is_error);
    assert!(result.contains("MY_TOKEN"), "{result}");
    // … and the exports, the payloads, the logs and every file written hold neither.
    for format in ["html", "markdown"] {
        c.request(
            "agent/session/export",
            json!({"sessionId": sid, "format": format}),
        )
        .await
        .unwrap();
        c.request(
            "agent/session/export",
            json!({"sessionId": sid, "format": format, "outputPath": format!("export.{format}")}),
        )
        .await
        .unwrap();
    }
    c.request("agent/messages", json!({"sessionId": sid}))
        .await
        .unwrap();
    c.request("agent/mcp/list", json!({})).await.unwrap();
    let received = serde_json::to_string(&c.log()).unwrap();
    let stderr = c.stderr.lock().unwrap().clone();
    c.shutdown().await;
    assert!(e.ws.join("export.html").exists());
    for s in [env_secret, key_secret] {
        assert!(!received.contains(s), "the client received {s}");
        assert!(!stderr.contains(s), "the log holds {s}");
        assert_no_secret(&[&e.ws, &e.agent], s);
    }
}

/// Pi 1.6's restored loadout meets MCP tools (`_restoreToolsFromTranscript`: a tool the
/// branch's stored system messages removed stays off): a session whose branch removed
/// `mcp__everything__echo` continues without it although its server registers it again, the
/// server's other tools still offered; `--tools +mcp__everything__echo` adds it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_tool_the_branch_removed_stays_off_when_its_server_registers_it() {
    let Some(ev) = everything() else {
        require(
            false,
            "an_mcp_tool_the_branch_removed_stays_off_when_its_server_registers_it",
            "node + server-everything",
        );
        return;
    };
    let mock = MockModel::start((0..3).map(|_| Step::text("ok")).collect()).await;
    let e = setup(
        "mcp-recorded",
        &mock,
        json!({"mcpServers": {"everything": everything_entry(&ev, "direct")}}),
        None,
    );
    let ok = |out: &std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        )
    };
    ok(&run_async(&e, &["one"]).await.0);
    let echo = "mcp__everything__echo".to_string();
    let first = tool_names(&mock.requests()[0].body);
    assert!(first.contains(&echo), "{first:?}");
    // The branch removes it, as Pi 1.6 stores a removal (a system message patch).
    let file = std::fs::read_dir(e.ws.join(".pi/sessions"))
        .unwrap()
        .map(|x| x.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap();
    let last = session_lines(&e.ws).last().unwrap()["id"].clone();
    let removal = json!({"type": "message", "id": "rm000001", "parentId": last,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": "system", "content": "", "sections": {},
            "toolsRemoved": [{"name": echo}], "timestamp": 1767225600000u64}});
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(&format!("{removal}\n"));
    std::fs::write(&file, text).unwrap();
    ok(&run_async(&e, &["-c", "two"]).await.0);
    ok(
        &run_async(&e, &["-c", "--tools", "+mcp__everything__echo", "three"])
            .await
            .0,
    );
    let second = tool_names(&mock.requests()[1].body);
    let third = tool_names(&mock.requests()[2].body);
    assert!(!second.contains(&echo), "{second:?}");
    assert!(
        second.contains(&"mcp__everything__get_sum".to_string()),
        "{second:?}"
    );
    assert!(third.contains(&echo), "{third:?}");
}
