//! [`Sessions`], the registry every front door uses, over real session files: create, open
//! by id (live: the same session; closed: resumed from its file), by path, list, close, the
//! wait for a file another registry releases (resumed, not forked), a file held past the wait
//! (a fork, told to the user), unknown ids and bad paths, and `stop_all` (files closed and
//! unlocked, nothing opened afterwards).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pi_core::agent::{AgentEvent, WeakAgent};
use pi_core::approval::{ApprovalPolicy, Gate};
use pi_core::extension::{ExtensionErrorInfo, ExtensionUi};
use pi_core::fs::{DiskFs, Fs};
use pi_core::harness::sessions::{Error, RELEASE_WAIT};
use pi_core::harness::{MessageLevel, Notice, SessionListener, SessionSetup, Sessions, Tracker};
use pi_core::resources::WorkspaceConfig;
use pi_core::settings::Settings;
use pi_core::tools::BeforeBash;

mod common;
use common::{tmp_dir, Tmp};

struct Quiet;

#[async_trait]
impl SessionListener for Quiet {
    async fn event(&self, _event: AgentEvent, _notices: Vec<Notice>) {}
    async fn notice(&self, _notice: Notice) {}
}

struct NoUi;

#[async_trait]
impl ExtensionUi for NoUi {
    async fn extension_error(&self, _error: ExtensionErrorInfo) {}
}

/// A product that records what it was asked to show the user.
struct TestSetup {
    root: PathBuf,
    shown: Mutex<Vec<(MessageLevel, String)>>,
}

impl SessionSetup for TestSetup {
    fn fs(&self, _session_id: &str) -> (Arc<dyn Fs>, Option<BeforeBash>) {
        (Arc::new(DiskFs::new(self.root.clone())), None)
    }
    fn gate(&self, _ws: &WorkspaceConfig, _id: &str, _tracker: &Arc<Tracker>) -> Arc<Gate> {
        Arc::new(Gate::new(
            ApprovalPolicy::ApproveAll,
            Vec::new(),
            None,
            None,
            "nobody asks",
        ))
    }
    fn default_policy(&self, _settings: &Settings) -> ApprovalPolicy {
        ApprovalPolicy::ApproveAll
    }
    fn extension_ui(&self, _session_id: &str) -> Arc<dyn ExtensionUi> {
        Arc::new(NoUi)
    }
    fn listeners(&self, _session_id: &str, _agent: &WeakAgent) -> Vec<Arc<dyn SessionListener>> {
        vec![Arc::new(Quiet)]
    }
    fn show_message(&self, level: MessageLevel, message: String) {
        self.shown.lock().unwrap().push((level, message));
    }
}

/// The error of `r` (the sessions it would give have no `Debug`).
fn err<T>(r: Result<T, Error>) -> Error {
    match r {
        Err(e) => e,
        Ok(_) => panic!("expected an error"),
    }
}

/// A registry of a fresh workspace (its own agent folder: no Pi folder of the user's).
fn registry(root: &Tmp) -> (Arc<Sessions>, Arc<TestSetup>) {
    std::fs::create_dir_all(root.join("agent")).unwrap();
    let ws = Arc::new(WorkspaceConfig::new(
        root.to_path_buf(),
        Some(root.join("agent")),
        false,
    ));
    let setup = Arc::new(TestSetup {
        root: root.to_path_buf(),
        shown: Mutex::new(Vec::new()),
    });
    (Arc::new(Sessions::new(ws, setup.clone(), None)), setup)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_by_id_and_path_list_and_close() {
    let root = tmp_dir("pi-sessions-open-");
    let (sessions, _) = registry(&root);
    let s = sessions.create(None, None, Some("first")).unwrap();
    let id = s.id().to_string();
    let file = s.file();
    // Live: the same session, by id and by path (relative to the workspace too).
    assert!(Arc::ptr_eq(&sessions.open(&id).await.unwrap(), &s));
    let relative = file.strip_prefix(&*root).unwrap().to_path_buf();
    assert!(Arc::ptr_eq(
        &sessions.open_path(&relative).await.unwrap(),
        &s
    ));
    assert!(Arc::ptr_eq(&sessions.find(&id).unwrap().unwrap(), &s));
    assert_eq!(sessions.file_of(&id), Some(file.clone()));
    let listed: Vec<_> = sessions
        .list()
        .into_iter()
        .map(|l| (l.summary.id, l.summary.name, l.open))
        .collect();
    assert_eq!(listed, vec![(id.clone(), Some("first".to_string()), true)]);
    // Closed: forgotten, its file released; listed as not open; opened again from the file.
    assert_eq!(sessions.close(&id).await.unwrap(), Some(Vec::new()));
    assert!(sessions.get(&id).is_none());
    assert!(!pi_core::session::lock_held(&file));
    assert!(sessions.find(&id).unwrap().is_none());
    assert_eq!(sessions.close(&id).await.unwrap(), None);
    assert_eq!(
        sessions
            .list()
            .into_iter()
            .map(|l| (l.summary.id, l.open))
            .collect::<Vec<_>>(),
        vec![(id.clone(), false)]
    );
    let started = Instant::now();
    let again = sessions.open(&id).await.unwrap();
    assert!(started.elapsed() < RELEASE_WAIT, "{:?}", started.elapsed());
    assert_eq!(
        (again.id(), again.file(), again.name()),
        (id.as_str(), file, Some("first".to_string()))
    );
    assert!(!Arc::ptr_eq(&again, &s));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_ids_and_bad_paths_are_named() {
    let root = tmp_dir("pi-sessions-unknown-");
    let (sessions, _) = registry(&root);
    let dir = pi_core::harness::sessions_dir(sessions.workspace());
    assert_eq!(
        err(sessions.open("nope").await).to_string(),
        format!("no session nope in {}", dir.display())
    );
    assert_eq!(err(sessions.find("nope")).to_string(), "no session nope");
    assert!(matches!(
        err(sessions.close("nope").await),
        Error::UnknownSession(_)
    ));
    let bad = err(sessions.open_path(std::path::Path::new("notes.txt")).await);
    assert_eq!(bad.to_string(), "path: expected a .jsonl session file");
    let missing = err(sessions.open_path(std::path::Path::new("gone.jsonl")).await);
    assert_eq!(
        missing.to_string(),
        format!("no session file {}", root.join("gone.jsonl").display())
    );
}

/// Two registries stand for two processes (the file lock is per open file): a window reload
/// opens the session while the old server still closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_file_is_resumed_and_a_held_one_forked() {
    let root = tmp_dir("pi-sessions-held-");
    let (old, _) = registry(&root);
    let (new, setup) = registry(&root);
    let s = old.create(None, None, None).unwrap();
    let id = s.id().to_string();
    drop(s);
    let closing = {
        let old = old.clone();
        let id = id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            old.close(&id).await.unwrap();
        })
    };
    let started = Instant::now();
    let resumed = new.open(&id).await.unwrap();
    let waited = started.elapsed();
    closing.await.unwrap();
    assert_eq!(resumed.id(), id);
    assert!(
        waited >= Duration::from_millis(250) && waited < RELEASE_WAIT,
        "{waited:?}"
    );
    assert!(setup.shown.lock().unwrap().is_empty());
    // Held past the wait: continued in a fork, and the user is told.
    let (third, third_setup) = registry(&root);
    let started = Instant::now();
    let forked = third.open(&id).await.unwrap();
    assert!(started.elapsed() >= RELEASE_WAIT);
    assert_ne!(forked.id(), id);
    assert_eq!(
        forked.parent_session(),
        Some(resumed.file().to_str().unwrap())
    );
    let shown = third_setup.shown.lock().unwrap().clone();
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0].0, MessageLevel::Warning);
    assert!(
        shown[0]
            .1
            .contains(&format!("session {id} is open in another process"))
            && shown[0]
                .1
                .ends_with(&format!("continuing in a fork, session {}", forked.id())),
        "{}",
        shown[0].1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_all_closes_every_file_and_opens_nothing_afterwards() {
    let root = tmp_dir("pi-sessions-stop-");
    let (sessions, _) = registry(&root);
    let a = sessions.create(None, None, None).unwrap();
    let b = sessions.create(None, None, None).unwrap();
    let files = [a.file(), b.file()];
    let ids = [a.id().to_string(), b.id().to_string()];
    assert!(files.iter().all(|f| pi_core::session::lock_held(f)));
    let report = sessions.stop_all().await;
    assert_eq!(report, Default::default());
    assert!(files.iter().all(|f| !pi_core::session::lock_held(f)));
    assert!(sessions.all().is_empty());
    assert!(matches!(
        err(sessions.create(None, None, None)),
        Error::ShuttingDown
    ));
    assert!(matches!(
        err(sessions.open(&ids[0]).await),
        Error::ShuttingDown
    ));
}

/// A file another process holds is continued in a fork that is opened as a plain open is: the
/// fork holds the held file's lines byte for byte (lines with U+2028 and a megabyte and more
/// of them, so they go out in several writes), its context is not built while opening (no
/// message in memory) and, once built, is the held file's.
#[test]
fn a_held_file_is_forked_and_the_fork_opened_without_its_context() {
    use pi_ai::Message;
    use pi_core::harness::{open_file, Opening};
    use pi_core::session::{read_tree, SessionWriter};
    use serde_json::json;
    let root = tmp_dir("pi-sessions-held-fork-");
    std::fs::create_dir_all(root.join("agent")).unwrap();
    let ws = WorkspaceConfig::new(root.to_path_buf(), Some(root.join("agent")), false);
    let mut held =
        SessionWriter::create(&root.join("elsewhere"), &root, "mock", "mock-1", "off").unwrap();
    let big = "lorem ipsum dolor sit amet \u{2028} ".repeat(2_000);
    let message = |v: serde_json::Value| serde_json::from_value::<Message>(v).unwrap();
    for k in 0..40 {
        held.append_message(&message(json!({"role": "user",
            "content": [{"type": "text", "text": format!("go {k}")}], "timestamp": 1})))
            .unwrap();
        held.append_message(&message(json!({"role": "assistant",
            "content": [{"type": "toolCall", "id": format!("c{k}"), "name": "read",
                "arguments": {"path": "a.txt"}}],
            "api": "openai-completions", "provider": "mock", "model": "mock-1",
            "usage": {"input": 100, "output": 10, "cacheRead": 0, "cacheWrite": 0,
                "totalTokens": 110, "cost": {"input": 0, "output": 0, "cacheRead": 0,
                "cacheWrite": 0, "total": 0}},
            "stopReason": "toolUse", "timestamp": 2})))
            .unwrap();
        held.append_message(&message(
            json!({"role": "toolResult", "toolCallId": format!("c{k}"),
            "toolName": "read", "content": [{"type": "text", "text": format!("{k} {big}")}],
            "isError": false, "timestamp": 3}),
        ))
        .unwrap();
    }
    let path = held.path().to_path_buf();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.len() > 2 << 20 && text.contains("\\u2028"));
    let Opening::Opened {
        writer,
        loaded,
        notices,
    } = open_file(&ws, &path, |_| None).unwrap()
    else {
        panic!("opened here already");
    };
    assert_ne!(writer.path(), path);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].contains("continuing in a fork"),
        "{}",
        notices[0]
    );
    // Opened as a plain open is: the tree only.
    assert!(loaded.deferred);
    assert!(loaded.messages.is_empty());
    assert_eq!(loaded.tree.message_count(writer.leaf()), 120);
    let entries = |t: &str| t.lines().skip(1).map(str::to_string).collect::<Vec<_>>();
    let forked = std::fs::read_to_string(writer.path()).unwrap();
    assert_eq!(entries(&forked), entries(&text));
    let (tree, _) = read_tree(&path, false).unwrap();
    let want = tree.context(None).messages;
    assert_eq!(want.len(), 120);
    assert_eq!(writer.context().messages, want);
    drop(held);
}
