//! The bash tool's OS sandbox against real processes and the real kernel: escape attempts
//! under `workspace-write` and `read-only` fail and leave nothing behind, writing inside
//! works, network off blocks a loopback connection (and network on does not), a denied
//! command is re-run outside the sandbox only after approval, and a kernel without support is
//! reported, never pretended. Tests that need a kernel feature print why they skip when it
//! is missing.
// Landlock and seccomp are Linux's: on other OSes this file compiles to nothing (their backend
// is tested by sandbox_macos.rs and the platform module's own tests; docs/platforms.md).
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

#[path = "../../../tests/support/require.rs"]
mod require;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use pi_core::agent::{Tool, ToolContext, ToolError, ToolOutput};
use pi_core::sandbox::{
    support, Approver, Decision, Enforcement, PermissionRequest, Sandbox, SandboxMode,
    SandboxSettings, Support,
};
use pi_core::tools::BashTool;
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct Dirs {
    base: PathBuf,
    ws: PathBuf,
    outside: PathBuf,
    home: PathBuf,
}

impl Dirs {
    fn new(name: &str) -> Dirs {
        let base = std::env::temp_dir().join(format!(
            "pi-sandbox-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let ws = base.join("ws");
        let outside = base.join("outside-dir");
        let home = base.join("home");
        for d in [&ws, &outside, &home] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(home.join(".bashrc"), "# original\n").unwrap();
        Dirs {
            base: base.canonicalize().unwrap(),
            ws: ws.canonicalize().unwrap(),
            outside: outside.canonicalize().unwrap(),
            home: home.canonicalize().unwrap(),
        }
    }
}

impl Drop for Dirs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// Skips (with the reason on stderr) when the kernel cannot enforce file rules.
fn landlock_or_skip(test: &str) -> bool {
    match &support().files {
        Ok(_) => true,
        Err(why) => require::require(false, test, &format!("Landlock ({why})")),
    }
}

fn seccomp_or_skip(test: &str) -> bool {
    match &support().network {
        Ok(_) => true,
        Err(why) => require::require(false, test, &format!("seccomp ({why})")),
    }
}

#[derive(Default)]
struct Recorder {
    answer: Mutex<Option<Decision>>,
    asked: Mutex<Vec<PermissionRequest>>,
}

#[async_trait]
impl Approver for Recorder {
    async fn ask(&self, request: PermissionRequest) -> Decision {
        self.asked.lock().unwrap().push(request);
        self.answer
            .lock()
            .unwrap()
            .clone()
            .unwrap_or(Decision::Reject { reason: None })
    }
}

fn settings(mode: SandboxMode, network: bool) -> SandboxSettings {
    SandboxSettings {
        mode: Some(mode),
        network: Some(network),
        writable_roots: Some(vec![]),
    }
}

fn tool(ws: &Path, s: &SandboxSettings, approver: Option<Arc<dyn Approver>>) -> BashTool {
    BashTool::with_sandbox(ws.to_path_buf(), None, Sandbox::new(ws, s), approver)
}

fn ctx() -> ToolContext {
    ToolContext {
        call_id: "call_s".into(),
        turn: 1,
        cancel: CancellationToken::new(),
        on_update: Arc::new(|_| {}),
        model_input: None,
    }
}

async fn run(t: &BashTool, command: &str) -> Result<ToolOutput, ToolError> {
    t.execute(ctx(), json!({"command": command})).await
}

fn text(out: &ToolOutput) -> String {
    match &out.content[0] {
        pi_ai::ContentBlock::Text(t) => t.text.clone(),
        other => panic!("not text: {other:?}"),
    }
}

#[test]
fn kernel_support_is_reported() {
    let s: &Support = support();
    eprintln!("sandbox support on this kernel: {s:?}");
    if let Ok(m) = &s.files {
        let abi: u8 = m.strip_prefix("Landlock ABI ").unwrap().parse().unwrap();
        assert!((1..=10).contains(&abi));
    }
    if let Ok(m) = &s.network {
        assert_eq!(m, "seccomp");
    }
}

#[tokio::test]
async fn workspace_write_blocks_escapes_and_leaves_nothing() {
    if !landlock_or_skip("workspace_write_blocks_escapes_and_leaves_nothing") {
        return;
    }
    let d = Dirs::new("ww");
    std::os::unix::fs::symlink(&d.outside, d.ws.join("link-dir")).unwrap();
    std::fs::write(d.outside.join("target.txt"), "keep\n").unwrap();
    std::os::unix::fs::symlink(d.outside.join("target.txt"), d.ws.join("link-file")).unwrap();
    let t = tool(&d.ws, &settings(SandboxMode::WorkspaceWrite, true), None);
    assert_eq!(t.sandbox().enforcement(), &Enforcement::Enforced);

    let home = d.home.display();
    for (command, denied) in [
        (
            "touch ../outside".to_string(),
            "touch: cannot touch '../outside': Permission denied",
        ),
        (
            format!("export HOME={home}; echo x > ~/.bashrc"),
            "Permission denied",
        ),
        ("echo x > link-dir/new.txt".to_string(), "Permission denied"),
        ("echo x > link-file".to_string(), "Permission denied"),
        ("mkdir link-dir/sub".to_string(), "Permission denied"),
        (
            "rm link-file && ln -s x ../made-link".to_string(),
            "Permission denied",
        ),
    ] {
        let err = run(&t, &command).await.unwrap_err();
        assert!(err.message.contains(denied), "{command}: {}", err.message);
        assert!(
            err.message.contains("The sandbox (workspace-write, network on) likely caused this failure")
                && err.message.ends_with("Re-running it outside the sandbox needs the user's approval, and no client can be asked here."),
            "{command}: {}",
            err.message
        );
    }
    // Nothing was left behind outside the workspace.
    assert!(!d.base.join("outside").exists());
    assert!(!d.base.join("made-link").exists());
    assert_eq!(
        std::fs::read_to_string(d.home.join(".bashrc")).unwrap(),
        "# original\n"
    );
    assert_eq!(
        std::fs::read_to_string(d.outside.join("target.txt")).unwrap(),
        "keep\n"
    );
    let mut left: Vec<String> = std::fs::read_dir(&d.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, vec!["target.txt".to_string()]);

    // Inside the workspace, the temp folder and the devices work.
    let out = run(
        &t,
        "echo inside > a.txt && mkdir -p sub && mv a.txt sub/b.txt && cat sub/b.txt \
         && echo tmp > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && echo gone > /dev/null && echo ok",
    )
    .await
    .unwrap();
    assert_eq!(text(&out), "inside\ntmp\nok\n");
    assert_eq!(
        std::fs::read_to_string(d.ws.join("sub/b.txt")).unwrap(),
        "inside\n"
    );
    // TMPDIR is the session's own folder, not the server's.
    let out = run(&t, "echo \"$TMPDIR\"").await.unwrap();
    assert_eq!(
        text(&out).trim_end(),
        t.sandbox().tmp_dir().display().to_string()
    );
}

#[tokio::test]
async fn read_only_blocks_writes_in_the_workspace() {
    if !landlock_or_skip("read_only_blocks_writes_in_the_workspace") {
        return;
    }
    let d = Dirs::new("ro");
    std::fs::write(d.ws.join("f.txt"), "one\n").unwrap();
    let t = tool(&d.ws, &settings(SandboxMode::ReadOnly, true), None);
    let err = run(&t, "echo two >> f.txt").await.unwrap_err();
    assert!(
        err.message.contains("f.txt: Permission denied"),
        "{}",
        err.message
    );
    assert_eq!(
        std::fs::read_to_string(d.ws.join("f.txt")).unwrap(),
        "one\n"
    );
    let out = run(&t, "cat f.txt && ls /").await.unwrap();
    assert!(text(&out).starts_with("one\n"), "{}", text(&out));
}

/// A loopback server accepting in the background; returns its port.
fn loopback_server() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            use std::io::Write;
            let _ = s.write_all(b"hello-from-loopback\n");
        }
    });
    port
}

#[tokio::test]
async fn network_off_blocks_a_loopback_connection() {
    if !landlock_or_skip("network_off_blocks_a_loopback_connection")
        || !seccomp_or_skip("network_off_blocks_a_loopback_connection")
    {
        return;
    }
    let d = Dirs::new("net");
    let port = loopback_server();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && head -n1 <&3");

    let on = tool(&d.ws, &settings(SandboxMode::WorkspaceWrite, true), None);
    let out = run(&on, &connect).await.unwrap();
    assert_eq!(text(&out), "hello-from-loopback\n");

    let off = tool(&d.ws, &settings(SandboxMode::WorkspaceWrite, false), None);
    let err = run(&off, &connect).await.unwrap_err();
    assert!(
        err.message.contains("Permission denied")
            && err
                .message
                .contains("The sandbox (workspace-write, network off) likely caused this failure"),
        "{}",
        err.message
    );
    // IPv6 too, and Unix sockets still work.
    let err = run(&off, "exec 3<>/dev/tcp/::1/9").await.unwrap_err();
    assert!(err.message.contains("Permission denied"), "{}", err.message);
    let out = run(&off, "python3 -c 'import socket; a,b=socket.socketpair(); a.send(b\"unix-ok\"); print(b.recv(7).decode())' 2>/dev/null || echo unix-ok").await.unwrap();
    assert_eq!(text(&out), "unix-ok\n");

    // Network off alone (mode off) is enforced by the filter only.
    let net_only = tool(&d.ws, &settings(SandboxMode::Off, false), None);
    assert!(run(&net_only, &connect).await.is_err());
    assert!(
        run(&net_only, "touch ../free-to-write && rm ../free-to-write")
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn escalation_reruns_only_after_approval() {
    if !landlock_or_skip("escalation_reruns_only_after_approval") {
        return;
    }
    let d = Dirs::new("esc");
    let approver = Arc::new(Recorder::default());
    let t = tool(
        &d.ws,
        &settings(SandboxMode::WorkspaceWrite, true),
        Some(approver.clone()),
    );
    let command = format!("echo escaped > {}/approved.txt", d.outside.display());

    // Rejected: an error result with the user's reason; nothing written.
    *approver.answer.lock().unwrap() = Some(Decision::Reject {
        reason: Some("not outside the project".into()),
    });
    let err = run(&t, &command).await.unwrap_err();
    // bash names itself by the path it was started with: `/bin/bash` (Pi 1.6's shell lookup).
    let line = format!(
        "/bin/bash: line 1: {}/approved.txt: Permission denied",
        d.outside.display()
    );
    assert_eq!(
        err.message,
        format!(
            "{line}\n\n\nCommand exited with code 1\n\nThe sandbox (workspace-write, network on) likely caused this failure: {line}\nThe user did not approve re-running it outside the sandbox: not outside the project."
        )
    );
    assert!(!d.outside.join("approved.txt").exists());
    {
        let asked = approver.asked.lock().unwrap();
        assert_eq!(
            *asked,
            vec![PermissionRequest {
                tool: "bash".into(),
                tool_call_id: "call_s".into(),
                arguments: json!({"command": command}),
                reason: format!("sandbox denied: {line}"),
            }]
        );
    }

    // Approved: re-run outside the sandbox, and the result says so.
    *approver.answer.lock().unwrap() = Some(Decision::Allow);
    let out = run(&t, &format!("{command} && echo wrote")).await.unwrap();
    assert_eq!(
        text(&out),
        format!("[the sandbox (workspace-write, network on) denied this command ({line}); it was re-run outside the sandbox with the user's approval]\nwrote\n")
    );
    assert_eq!(
        std::fs::read_to_string(d.outside.join("approved.txt")).unwrap(),
        "escaped\n"
    );
    assert_eq!(approver.asked.lock().unwrap().len(), 2);

    // A failure that is not a denial asks nobody.
    let err = run(&t, "exit 4").await.unwrap_err();
    assert_eq!(err.message, "(no output)\n\nCommand exited with code 4");
    assert_eq!(approver.asked.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn unenforceable_policies_are_said_never_pretended() {
    let d = Dirs::new("none");
    let none = Support {
        files: Err("this kernel has no Landlock".into()),
        network: Err("seccomp is not available".into()),
    };
    // Default settings on such a kernel: off, said in the first result only.
    let t = BashTool::with_sandbox(
        d.ws.clone(),
        None,
        Sandbox::with_support(&d.ws, &SandboxSettings::default(), &none),
        None,
    );
    let first = text(&run(&t, "echo one").await.unwrap());
    assert_eq!(
        first,
        "[note: the sandbox is off: this kernel cannot enforce workspace-write (this kernel has no Landlock); commands run with the server's permissions]\none\n"
    );
    assert_eq!(text(&run(&t, "echo two").await.unwrap()), "two\n");

    // Asked for explicitly: every command needs approval first.
    let approver = Arc::new(Recorder::default());
    let t = BashTool::with_sandbox(
        d.ws.clone(),
        None,
        Sandbox::with_support(&d.ws, &settings(SandboxMode::WorkspaceWrite, true), &none),
        Some(approver.clone()),
    );
    let err = run(&t, "touch made").await.unwrap_err();
    assert_eq!(
        err.message,
        "Command not run: the sandbox (workspace-write, network on) cannot be enforced here: file rules need Landlock (this kernel has no Landlock), and running it unsandboxed was not approved."
    );
    assert!(!d.ws.join("made").exists());
    assert_eq!(
        approver.asked.lock().unwrap()[0].reason,
        "sandbox unavailable: the sandbox (workspace-write, network on) cannot be enforced here: file rules need Landlock (this kernel has no Landlock)"
    );
    *approver.answer.lock().unwrap() = Some(Decision::Allow);
    let out = text(&run(&t, "touch made && echo made").await.unwrap());
    assert!(
        out.ends_with("this command ran outside it with the user's approval]\nmade\n"),
        "{out}"
    );
    assert!(d.ws.join("made").exists());
}

#[tokio::test]
async fn settings_choose_the_policy() {
    let d = Dirs::new("settings");
    std::fs::create_dir_all(d.ws.join(".pi")).unwrap();
    std::fs::write(
        d.ws.join(".pi/settings.json"),
        json!({"sandbox": {"mode": "read-only", "network": false, "writableRoots": [d.outside]}})
            .to_string(),
    )
    .unwrap();
    let s = SandboxSettings::for_workspace(&d.ws);
    assert_eq!(
        s,
        SandboxSettings {
            mode: Some(SandboxMode::ReadOnly),
            network: Some(false),
            writable_roots: Some(vec![d.outside.display().to_string()]),
        }
    );
    let sb = Sandbox::new(&d.ws, &s);
    // read-only: the temp folder only (writable roots apply to workspace-write).
    assert_eq!(
        sb.policy().writable,
        vec![sb.tmp_dir().canonicalize().unwrap()]
    );
    let ww = Sandbox::new(
        &d.ws,
        &SandboxSettings {
            mode: Some(SandboxMode::WorkspaceWrite),
            ..s
        },
    );
    assert_eq!(
        ww.policy().writable,
        vec![
            ww.tmp_dir().canonicalize().unwrap(),
            d.ws.clone(),
            d.outside.clone()
        ]
    );
}
