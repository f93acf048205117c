//! A stdio LSP client for the real `pi-lsp` binary, written independently of the server's own
//! code: its own framing, its own position arithmetic, its own document store. It answers the
//! server's requests like an editor would (`workspace/applyEdit` changes its buffer, sends
//! `didChange`, then answers; `window/workDoneProgress/create` is accepted;
//! `agent/saveDocument` writes the buffer to disk) and records every message it receives.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::{mpsc, oneshot};

/// How the fake editor behaves.
#[derive(Debug, Clone)]
pub struct EditorBehavior {
    /// Answer to `workspace/applyEdit` (`applied`).
    pub apply_edits: bool,
    /// Advertise `experimental.agent.saveDocument` and save on request.
    pub save_documents: bool,
    /// Offer `general.positionEncodings: ["utf-8", "utf-16"]`.
    pub offer_utf8: bool,
    /// Advertise `window.workDoneProgress`.
    pub work_done_progress: bool,
    /// Send `didChange` after applying an edit (an editor that skips a stale edit but still
    /// answers `applied: true` sends none).
    pub send_changes: bool,
    /// `initializationOptions` of `initialize` (e.g. `{"workspaceTrusted": true}`).
    pub initialization_options: Option<Value>,
    /// When set, advertise `experimental.agent.requestPermission` and answer every
    /// `agent/requestPermission` with this result.
    pub permission_answer: Option<Value>,
    /// Title of the action chosen for `window/showMessageRequest` (`None` answers `null`).
    pub message_action: Option<String>,
    /// Send the `didChange` for an applied edit as incremental range changes (what VS Code and
    /// Neovim send to a server that asks for incremental sync) instead of the full text.
    pub incremental_changes: bool,
    /// `workspace.workspaceEdit.resourceOperations` to advertise (`create`, `rename`,
    /// `delete`).
    pub resource_operations: Vec<&'static str>,
    /// Sent as `initializationOptions.approvalPolicy` (the editor's own setting). The default
    /// is `approve-all`, like an editor whose user turned questions off, so tests about other
    /// things run their tools unasked; `None` leaves the server's default (`auto-edit`).
    pub approval_policy: Option<&'static str>,
    /// Do not answer `agent/requestPermission` / `window/showMessageRequest`: they arrive
    /// through [`LspClient::next_notification`] (with their `id`) and the test answers with
    /// [`LspClient::respond`] when it wants to (or never).
    pub hold_permissions: bool,
    /// When set, advertise `experimental.agent.ui` and answer every `agent/ui/request` with
    /// this result.
    pub ui_answer: Option<Value>,
    /// Answers to `agent/runTool` by tool name: the response's members, `{"result": …}` or
    /// `{"error": …}`. A tool not listed is left unanswered (the request stays pending).
    pub run_tool_answers: HashMap<String, Value>,
    /// When set, advertise `experimental.agent.diagnostics` and answer `agent/diagnostics` with
    /// these items (`[{uri, diagnostics}]`), only those of the asked `uris` when given.
    pub diagnostics: Option<Value>,
    /// More `workspaceFolders` sent in `initialize` after the root (a multi-root workspace).
    pub extra_folders: Vec<std::path::PathBuf>,
    /// Advertise `experimental.agent.syncsAllDocuments` (every buffer this editor holds is
    /// open on the server; it opens every file it is sent an edit for). Default: true.
    pub syncs_all_documents: bool,
    /// Advertise `workspace.workspaceEdit.changeAnnotationSupport`.
    pub change_annotations: bool,
    /// A slow or busy editor: `workspace/applyEdit` is applied (as `apply_edits` says) and
    /// answered this long after it arrived, other messages read and answered meanwhile.
    pub apply_edit_delay: Option<Duration>,
    /// The user types while the first `workspace/applyEdit` is under way: before answering
    /// it, the editor replaces the first occurrence of `.0` by `.1` in the edited document's
    /// buffer (version + 1, a full-text `didChange` sent), then answers `applied: false`
    /// (`failureReason: "version mismatch"`, what VS Code answers for an edit made for an
    /// older version). Later `workspace/applyEdit`s are answered as `apply_edits` says.
    pub type_during_apply: Option<(&'static str, &'static str)>,
}

impl Default for EditorBehavior {
    fn default() -> Self {
        EditorBehavior {
            apply_edits: true,
            save_documents: false,
            offer_utf8: false,
            work_done_progress: true,
            send_changes: true,
            initialization_options: None,
            permission_answer: None,
            message_action: None,
            incremental_changes: false,
            resource_operations: vec!["create"],
            approval_policy: Some("approve-all"),
            hold_permissions: false,
            ui_answer: None,
            run_tool_answers: HashMap::new(),
            diagnostics: None,
            extra_folders: Vec::new(),
            syncs_all_documents: true,
            change_annotations: false,
            apply_edit_delay: None,
            type_during_apply: None,
        }
    }
}

/// A document as the fake editor holds it.
#[derive(Debug, Clone)]
pub struct Doc {
    pub text: String,
    pub version: i32,
}

struct Shared {
    /// `None` once [`LspClient::close_stdin`] closed it.
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    pending: Mutex<HashMap<i64, oneshot::Sender<Value>>>,
    docs: Mutex<HashMap<String, Doc>>,
    utf8: Mutex<bool>,
    behavior: EditorBehavior,
    /// Every message from the server, in arrival order.
    log: Mutex<Vec<Value>>,
    /// The size on the wire of each message of `log` (header and body), in bytes.
    log_bytes: Mutex<Vec<usize>>,
    /// How much of the log the test has looked at ([`LspClient::log`]).
    log_seen: Mutex<usize>,
    /// Server → client requests this fake editor does not know (answered `null`).
    unknown_requests: Mutex<Vec<Value>>,
    /// Set once `EditorBehavior::type_during_apply` has typed.
    typed_during_apply: std::sync::atomic::AtomicBool,
}

/// The client. It fails the test that drops it with unexpected server messages left unread:
/// an error `window/showMessage` neither taken with [`LspClient::next_notification`] nor
/// looked at in [`LspClient::log`], or a server → client request it does not know.
pub struct LspClient {
    child: Child,
    shared: Arc<Shared>,
    next_id: i64,
    /// Notifications (and held requests) with their index in the log.
    notes: mpsc::UnboundedReceiver<(usize, Value)>,
    pub stderr: Arc<Mutex<String>>,
}

/// The `file://` URI of an absolute path (percent-encoding spaces only, enough for tests).
pub fn file_uri(path: &Path) -> String {
    format!("file://{}", path.display().to_string().replace(' ', "%20"))
}

/// Byte offset of an LSP position in `text`, counting columns in UTF-8 bytes or UTF-16 units.
/// Lines end at `\n`, `\r\n` or a lone `\r` (LSP's rule); a column past the line's end is its
/// end. Line ends are found with `memchr` a block at a time, the way an editor's line index
/// makes the lookup cheap; walking line by line cost 0.7 ms per position on a 50,000-line
/// buffer, which the tools bench measured as server time.
pub fn offset_of(text: &str, line: u64, character: u64, utf8: bool) -> usize {
    let off = line_start(text, line as usize);
    if off > text.len() {
        return text.len();
    }
    let mut units = 0u64;
    for (i, c) in text[off..].char_indices() {
        if c == '\n' || c == '\r' || units >= character {
            return off + i;
        }
        units += if utf8 {
            c.len_utf8() as u64
        } else {
            c.len_utf16() as u64
        };
    }
    text.len()
}

/// Byte offset of the start of 0-based `line` in `text` (`text.len() + 1` when there are fewer
/// lines). Without a `\r` in the text, lines are counted a block at a time.
fn line_start(text: &str, line: usize) -> usize {
    if line == 0 {
        return 0;
    }
    let b = text.as_bytes();
    if memchr::memchr(b'\r', b).is_some() {
        let mut seen = 0;
        for at in memchr::memchr2_iter(b'\r', b'\n', b) {
            // `\r\n` ends a line once, at its `\n`.
            if b[at] == b'\r' && b.get(at + 1) == Some(&b'\n') {
                continue;
            }
            seen += 1;
            if seen == line {
                return at + 1;
            }
        }
        return text.len() + 1;
    }
    const BLOCK: usize = 4096;
    let mut seen = 0;
    for (k, block) in b.chunks(BLOCK).enumerate() {
        let n = memchr::memchr_iter(b'\n', block).count();
        if seen + n >= line {
            let i = memchr::memchr_iter(b'\n', block)
                .nth(line - seen - 1)
                .unwrap_or(0);
            return k * BLOCK + i + 1;
        }
        seen += n;
    }
    text.len() + 1
}

impl Shared {
    /// Applies a `workspace/applyEdit` (as `behavior` says), sending the editor's document
    /// notifications first; returns the answer.
    async fn answer_apply_edit(&self, msg: &Value) -> Value {
        if let Some((from, to)) = self.behavior.type_during_apply {
            if !self
                .typed_during_apply
                .swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                return self.type_before_answering(msg, from, to).await;
            }
        }
        if self.behavior.apply_edits && !self.behavior.send_changes {
            json!({"applied": true})
        } else if self.behavior.apply_edits {
            let notes = self.apply_workspace_edit(&msg["params"]["edit"]);
            for n in notes {
                if let Some(open) = n.get("open") {
                    write_msg(
                        &self.stdin,
                        &json!({"jsonrpc":"2.0","method":"textDocument/didOpen","params":open}),
                    )
                    .await;
                } else if let Some(close) = n.get("close") {
                    write_msg(
                        &self.stdin,
                        &json!({"jsonrpc":"2.0","method":"textDocument/didClose","params":close}),
                    )
                    .await;
                } else {
                    write_msg(
                        &self.stdin,
                        &json!({"jsonrpc":"2.0","method":"textDocument/didChange","params":n}),
                    )
                    .await;
                }
            }
            json!({"applied": true})
        } else {
            json!({"applied": false, "failureReason": "version mismatch"})
        }
    }
}

impl Shared {
    /// [`EditorBehavior::type_during_apply`]: the user's typing reaches the buffer of the
    /// document the edit is for (its first `documentChanges` entry, or `changes` key) before
    /// the edit, which the editor then refuses as made for an older version.
    async fn type_before_answering(&self, msg: &Value, from: &str, to: &str) -> Value {
        let edit = &msg["params"]["edit"];
        let uri = edit["documentChanges"]
            .as_array()
            .and_then(|d| d.iter().find_map(|c| c["textDocument"]["uri"].as_str()))
            .or_else(|| {
                edit["changes"]
                    .as_object()
                    .and_then(|c| c.keys().next().map(String::as_str))
            })
            .expect("an edit with a document")
            .to_string();
        let (text, version) = {
            let mut docs = self.docs.lock().unwrap();
            let doc = docs.get_mut(&uri).expect("the edited document is open");
            doc.text = doc.text.replacen(from, to, 1);
            doc.version += 1;
            (doc.text.clone(), doc.version)
        };
        write_msg(
            &self.stdin,
            &json!({"jsonrpc":"2.0","method":"textDocument/didChange","params":{"textDocument":{"uri":uri,"version":version},"contentChanges":[{"text":text}]}}),
        )
        .await;
        json!({"applied": false, "failureReason": "version mismatch"})
    }
}

async fn write_msg(stdin: &tokio::sync::Mutex<Option<ChildStdin>>, v: &Value) {
    let body = v.to_string();
    let mut s = stdin.lock().await;
    let Some(s) = s.as_mut() else {
        return;
    };
    let _ = s
        .write_all(format!("Content-Length: {}\r\n\r\n{}", body.len(), body).as_bytes())
        .await;
    let _ = s.flush().await;
}

impl Shared {
    /// Applies a WorkspaceEdit to the fake editor's buffers; returns the didChange params to send.
    fn apply_workspace_edit(&self, edit: &Value) -> Vec<Value> {
        let utf8 = *self.utf8.lock().unwrap();
        let mut doc_edits: Vec<(String, Option<i64>, Vec<Value>)> = Vec::new();
        // didClose / didOpen the editor sends for renamed and deleted files.
        let mut resource_notes: Vec<Value> = Vec::new();
        if let Some(dc) = edit["documentChanges"].as_array() {
            for op in dc {
                if op["kind"] == "create" {
                    let uri = op["uri"].as_str().unwrap().to_string();
                    let path = uri.trim_start_matches("file://").replace("%20", " ");
                    if !Path::new(&path).exists() {
                        std::fs::write(&path, "").unwrap();
                    }
                } else if op["kind"] == "rename" {
                    // Like VS Code: the file moves on disk and an open buffer moves with it.
                    let (old, new) = (
                        op["oldUri"].as_str().unwrap(),
                        op["newUri"].as_str().unwrap(),
                    );
                    let path = |u: &str| u.trim_start_matches("file://").replace("%20", " ");
                    std::fs::rename(path(old), path(new)).unwrap();
                    let moved = self.docs.lock().unwrap().remove(old);
                    if let Some(doc) = moved {
                        resource_notes.push(json!({"close": {"textDocument": {"uri": old}}}));
                        resource_notes.push(json!({"open": {"textDocument": {"uri": new, "languageId": "plaintext", "version": doc.version, "text": doc.text}}}));
                        self.docs.lock().unwrap().insert(new.to_string(), doc);
                    }
                } else if op["kind"] == "delete" {
                    let uri = op["uri"].as_str().unwrap();
                    std::fs::remove_file(uri.trim_start_matches("file://").replace("%20", " "))
                        .unwrap();
                    if self.docs.lock().unwrap().remove(uri).is_some() {
                        resource_notes.push(json!({"close": {"textDocument": {"uri": uri}}}));
                    }
                } else if let Some(td) = op.get("textDocument") {
                    doc_edits.push((
                        td["uri"].as_str().unwrap().to_string(),
                        td["version"].as_i64(),
                        op["edits"].as_array().cloned().unwrap_or_default(),
                    ));
                }
            }
        }
        if let Some(ch) = edit["changes"].as_object() {
            for (uri, edits) in ch {
                doc_edits.push((
                    uri.clone(),
                    None,
                    edits.as_array().cloned().unwrap_or_default(),
                ));
            }
        }
        let mut notes = resource_notes;
        let mut docs = self.docs.lock().unwrap();
        for (uri, version, edits) in doc_edits {
            let path = uri.trim_start_matches("file://").replace("%20", " ");
            let open = docs.contains_key(&uri);
            let doc = docs.entry(uri.clone()).or_insert_with(|| Doc {
                text: std::fs::read_to_string(&path).unwrap_or_default(),
                version: 0,
            });
            if let (true, Some(v)) = (open, version) {
                assert_eq!(
                    v, doc.version as i64,
                    "applyEdit version does not match the buffer"
                );
            }
            let mut ranges: Vec<(usize, usize, String)> = edits
                .iter()
                .map(|e| {
                    let r = &e["range"];
                    let s = offset_of(
                        &doc.text,
                        r["start"]["line"].as_u64().unwrap(),
                        r["start"]["character"].as_u64().unwrap(),
                        utf8,
                    );
                    let t = offset_of(
                        &doc.text,
                        r["end"]["line"].as_u64().unwrap(),
                        r["end"]["character"].as_u64().unwrap(),
                        utf8,
                    );
                    (s, t, e["newText"].as_str().unwrap().to_string())
                })
                .collect();
            // Applied from the end, so each edit's range (against the original text) is still
            // valid for the text the previous ones produced: also the order of incremental
            // content changes.
            let mut order: Vec<usize> = (0..ranges.len()).collect();
            order.sort_by_key(|i| std::cmp::Reverse(ranges[*i].0));
            let content_changes: Vec<Value> = order
                .iter()
                .map(|i| json!({"range": edits[*i]["range"], "text": ranges[*i].2}))
                .collect();
            ranges.sort_by_key(|r| std::cmp::Reverse(r.0));
            for (s, t, new) in ranges {
                doc.text.replace_range(s..t, &new);
            }
            doc.version += 1;
            if open && self.behavior.incremental_changes {
                notes.push(json!({"textDocument":{"uri":uri,"version":doc.version},"contentChanges":content_changes}));
            } else if open {
                notes.push(json!({"textDocument":{"uri":uri,"version":doc.version},"contentChanges":[{"text":doc.text}]}));
            } else {
                // An editor opens the file it edits.
                notes.push(json!({"open": {"textDocument":{"uri":uri,"languageId":"plaintext","version":doc.version,"text":doc.text}}}));
            }
        }
        notes
    }
}

impl LspClient {
    /// Spawns `bin` with `env` and completes initialize/initialized for `root`.
    pub async fn start(
        bin: &Path,
        root: &Path,
        env: &[(&str, String)],
        behavior: EditorBehavior,
    ) -> LspClient {
        match Self::try_start(bin, root, env, behavior).await {
            Ok(c) => c,
            Err((e, _)) => panic!("initialize: {e}"),
        }
    }

    /// [`LspClient::start`], returning `initialize`'s error (and the client, not initialized)
    /// instead of panicking.
    pub async fn try_start(
        bin: &Path,
        root: &Path,
        env: &[(&str, String)],
        behavior: EditorBehavior,
    ) -> Result<LspClient, (Value, LspClient)> {
        let mut cmd = tokio::process::Command::new(bin);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn pi-lsp");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let shared = Arc::new(Shared {
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            pending: Mutex::new(HashMap::new()),
            docs: Mutex::new(HashMap::new()),
            utf8: Mutex::new(false),
            behavior: behavior.clone(),
            log: Mutex::new(Vec::new()),
            log_bytes: Mutex::new(Vec::new()),
            log_seen: Mutex::new(0),
            unknown_requests: Mutex::new(Vec::new()),
            typed_during_apply: Default::default(),
        });
        let err_buf = Arc::new(Mutex::new(String::new()));
        {
            let err_buf = err_buf.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(l)) = lines.next_line().await {
                    err_buf.lock().unwrap().push_str(&l);
                    err_buf.lock().unwrap().push('\n');
                }
            });
        }
        let (tx, notes) = mpsc::unbounded_channel();
        let sh = shared.clone();
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout);
            loop {
                let mut len = 0usize;
                let mut header = 0usize;
                loop {
                    let mut line = String::new();
                    let n = r.read_line(&mut line).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    header += n;
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    if let Some(v) = line.strip_prefix("Content-Length: ") {
                        len = v.parse().unwrap();
                    }
                }
                let mut body = vec![0u8; len];
                r.read_exact(&mut body).await.unwrap();
                let msg: Value = serde_json::from_slice(&body).unwrap();
                let seq = {
                    let mut log = sh.log.lock().unwrap();
                    log.push(msg.clone());
                    sh.log_bytes.lock().unwrap().push(header + len);
                    log.len() - 1
                };
                let held = sh.behavior.hold_permissions
                    && (msg["method"] == "agent/requestPermission"
                        || msg["method"] == "window/showMessageRequest");
                if held {
                    let _ = tx.send((seq, msg));
                    continue;
                }
                match (msg.get("id"), msg.get("method")) {
                    // Editor-side tools: answered by name as configured, or left pending.
                    (Some(id), Some(method)) if method == "agent/runTool" => {
                        let name = msg["params"]["name"].as_str().unwrap_or_default();
                        if let Some(answer) = sh.behavior.run_tool_answers.get(name) {
                            let mut reply = json!({"jsonrpc": "2.0", "id": id});
                            for (k, v) in answer.as_object().unwrap() {
                                reply[k] = v.clone();
                            }
                            write_msg(&sh.stdin, &reply).await;
                        }
                    }
                    (Some(id), Some(method)) if method == "agent/diagnostics" => {
                        let all = sh.behavior.diagnostics.clone().unwrap_or(json!([]));
                        let items: Vec<Value> = match msg["params"]["uris"].as_array() {
                            Some(uris) => all
                                .as_array()
                                .unwrap()
                                .iter()
                                .filter(|i| uris.contains(&i["uri"]))
                                .cloned()
                                .collect(),
                            None => all.as_array().unwrap().clone(),
                        };
                        write_msg(
                            &sh.stdin,
                            &json!({"jsonrpc":"2.0","id":id,"result":{"items": items}}),
                        )
                        .await;
                    }
                    (Some(id), Some(method))
                        if method == "workspace/applyEdit"
                            && sh.behavior.apply_edit_delay.is_some() =>
                    {
                        let (sh, id, delay) = (
                            sh.clone(),
                            id.clone(),
                            sh.behavior.apply_edit_delay.unwrap(),
                        );
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            let result = sh.answer_apply_edit(&msg).await;
                            write_msg(&sh.stdin, &json!({"jsonrpc":"2.0","id":id,"result":result}))
                                .await;
                        });
                    }
                    (Some(id), Some(method)) => {
                        let result = match method.as_str().unwrap() {
                            "workspace/applyEdit" => sh.answer_apply_edit(&msg).await,
                            "agent/saveDocument" => {
                                let uri = msg["params"]["uri"].as_str().unwrap().to_string();
                                let text =
                                    sh.docs.lock().unwrap().get(&uri).map(|d| d.text.clone());
                                match text {
                                    Some(t) => {
                                        std::fs::write(
                                            uri.trim_start_matches("file://").replace("%20", " "),
                                            t,
                                        )
                                        .unwrap();
                                        json!({"saved": true})
                                    }
                                    None => json!({"saved": false}),
                                }
                            }
                            "agent/ui/request" => {
                                sh.behavior.ui_answer.clone().unwrap_or(Value::Null)
                            }
                            "agent/requestPermission" => {
                                sh.behavior.permission_answer.clone().unwrap_or(Value::Null)
                            }
                            "window/showMessageRequest" => match &sh.behavior.message_action {
                                Some(t) => json!({"title": t}),
                                None => Value::Null,
                            },
                            "window/workDoneProgress/create" => Value::Null,
                            _ => {
                                sh.unknown_requests.lock().unwrap().push(msg.clone());
                                Value::Null
                            }
                        };
                        write_msg(&sh.stdin, &json!({"jsonrpc":"2.0","id":id,"result":result}))
                            .await;
                    }
                    (Some(id), None) => {
                        if let Some(tx) = sh
                            .pending
                            .lock()
                            .unwrap()
                            .remove(&id.as_i64().unwrap_or(-1))
                        {
                            let _ = tx.send(msg);
                        }
                    }
                    (None, Some(_)) => {
                        let _ = tx.send((seq, msg));
                    }
                    _ => {}
                }
            }
        });
        let mut c = LspClient {
            child,
            shared,
            next_id: 0,
            notes,
            stderr: err_buf,
        };
        let mut caps = json!({
            "workspace": {"workspaceEdit": {"documentChanges": true, "resourceOperations": behavior.resource_operations}},
            "window": {"workDoneProgress": behavior.work_done_progress},
            "experimental": {"agent": {"saveDocument": behavior.save_documents,
                "requestPermission": behavior.permission_answer.is_some(),
                "ui": behavior.ui_answer.is_some(),
                "diagnostics": behavior.diagnostics.is_some(),
                "syncsAllDocuments": behavior.syncs_all_documents}}
        });
        if behavior.change_annotations {
            caps["workspace"]["workspaceEdit"]["changeAnnotationSupport"] =
                json!({"groupsOnLabel": true});
        }
        if behavior.offer_utf8 {
            caps["general"] = json!({"positionEncodings": ["utf-8", "utf-16"]});
        }
        let mut init_options = behavior.initialization_options.clone();
        if let Some(p) = behavior.approval_policy {
            let o = init_options.get_or_insert_with(|| json!({}));
            if o.get("approvalPolicy").is_none() {
                o["approvalPolicy"] = json!(p);
            }
        }
        let init = match c
            .request(
                "initialize",
                json!({"processId": null, "rootUri": file_uri(root), "capabilities": caps,
                "workspaceFolders": std::iter::once(json!({"uri": file_uri(root), "name": "ws"}))
                    .chain(behavior.extra_folders.iter().map(|f| json!({"uri": file_uri(f), "name": f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()})))
                    .collect::<Vec<_>>(),
                "initializationOptions": init_options}),
            )
            .await
        {
            Ok(v) => v,
            Err(e) => return Err((e, c)),
        };
        *c.shared.utf8.lock().unwrap() = init["capabilities"]["positionEncoding"] == "utf-8";
        c.notify("initialized", json!({})).await;
        Ok(c)
    }

    /// Sends a request and waits for its response: `Ok(result)` or `Err(error object)`.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        let (tx, rx) = oneshot::channel();
        self.shared.pending.lock().unwrap().insert(id, tx);
        write_msg(
            &self.shared.stdin,
            &json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}),
        )
        .await;
        let resp = tokio::time::timeout(Duration::from_secs(10), rx)
            .await
            .expect("response timeout")
            .expect("server gone");
        match resp.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(resp["result"].clone()),
        }
    }

    /// `method` (`agent/state`, `agent/messages`, `agent/session/stats`, …) asked of session
    /// `sid` (params `{"sessionId": sid}`): its result; panics with the error object when the
    /// server answers one.
    pub async fn ask(&mut self, method: &str, sid: &str) -> Value {
        let params = json!({ "sessionId": sid });
        self.request(method, params)
            .await
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// Sends a request without waiting: the receiver yields the whole response message
    /// (for requests that stay open while others are sent, e.g. a long `agent/bash`).
    pub async fn send_request(&mut self, method: &str, params: Value) -> oneshot::Receiver<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let (tx, rx) = oneshot::channel();
        self.shared.pending.lock().unwrap().insert(id, tx);
        write_msg(
            &self.shared.stdin,
            &json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}),
        )
        .await;
        rx
    }

    /// The id of the last request sent (e.g. to `$/cancelRequest` one sent with
    /// [`LspClient::send_request`]).
    pub fn last_request_id(&self) -> i64 {
        self.next_id
    }

    /// Writes `bytes` to the server's stdin as they are (no framing added).
    pub async fn send_bytes(&self, bytes: &[u8]) {
        let mut s = self.shared.stdin.lock().await;
        let s = s.as_mut().expect("stdin was closed");
        s.write_all(bytes).await.unwrap();
        s.flush().await.unwrap();
    }

    /// Sends a response to a server → client request with the given `members` (`{"result": …}`
    /// or `{"error": …}`), e.g. a late `agent/runTool` answer.
    pub async fn reply(&self, id: &Value, members: Value) {
        let mut reply = json!({"jsonrpc": "2.0", "id": id});
        for (k, v) in members.as_object().unwrap() {
            reply[k] = v.clone();
        }
        write_msg(&self.shared.stdin, &reply).await;
    }

    /// Sends raw bytes as one framed message body (for malformed input tests).
    pub async fn send_raw(&self, body: &str) {
        let mut s = self.shared.stdin.lock().await;
        let s = s.as_mut().expect("stdin was closed");
        s.write_all(format!("Content-Length: {}\r\n\r\n{}", body.len(), body).as_bytes())
            .await
            .unwrap();
        s.flush().await.unwrap();
    }

    /// Answers the server's request `id` with `result` (for held permission requests).
    pub async fn respond(&self, id: &Value, result: Value) {
        write_msg(
            &self.shared.stdin,
            &json!({"jsonrpc":"2.0","id":id,"result":result}),
        )
        .await;
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Value) {
        write_msg(
            &self.shared.stdin,
            &json!({"jsonrpc":"2.0","method":method,"params":params}),
        )
        .await;
    }

    /// Opens a document in the fake editor and tells the server.
    pub async fn open(&self, path: &Path, text: &str) {
        let uri = file_uri(path);
        self.shared.docs.lock().unwrap().insert(
            uri.clone(),
            Doc {
                text: text.into(),
                version: 1,
            },
        );
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument":{"uri":uri,"languageId":"plaintext","version":1,"text":text}}),
        )
        .await;
    }

    /// Closes the fake editor's buffer of `path` and tells the server.
    pub async fn close(&self, path: &Path) {
        let uri = file_uri(path);
        self.shared.docs.lock().unwrap().remove(&uri);
        self.notify(
            "textDocument/didClose",
            json!({"textDocument": {"uri": uri}}),
        )
        .await;
    }

    /// The fake editor's buffer for `path`.
    pub fn doc(&self, path: &Path) -> Option<Doc> {
        self.shared
            .docs
            .lock()
            .unwrap()
            .get(&file_uri(path))
            .cloned()
    }

    /// Records a change the "user" typed: replaces the buffer (version +1) and sends a full
    /// didChange.
    pub async fn set_buffer(&self, path: &Path, text: &str) {
        let uri = file_uri(path);
        let version = {
            let mut d = self.shared.docs.lock().unwrap();
            let doc = d.get_mut(&uri).unwrap();
            doc.text = text.into();
            doc.version += 1;
            doc.version
        };
        self.notify(
            "textDocument/didChange",
            json!({"textDocument":{"uri":uri,"version":version},"contentChanges":[{"text":text}]}),
        )
        .await;
    }

    /// The next notification from the server.
    pub async fn next_notification(&mut self, timeout: Duration) -> Option<Value> {
        tokio::time::timeout(timeout, self.notes.recv())
            .await
            .ok()
            .flatten()
            .map(|(_, n)| n)
    }

    /// The events of the `agent/event` notifications from now until `agent_settled` (Pi 1.6's
    /// last event of a prompt: retries, recovery and queued messages over), that one
    /// included; other notifications are passed over. Panics, with the events so far, when
    /// none comes within `timeout`.
    pub async fn events_until_settled(&mut self, timeout: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut events = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let n = self
                .next_notification(left)
                .await
                .unwrap_or_else(|| panic!("no agent_settled; events so far: {events:#?}"));
            if n["method"] != "agent/event" {
                continue;
            }
            let e = n["params"]["event"].clone();
            let settled = e["type"] == "agent_settled";
            events.push(e);
            if settled {
                return events;
            }
        }
    }

    /// Collects `agent/event` notifications until `agent_end` (not one that ends a run to retry
    /// it, `willRetry: true`: Pi 1.6's), all notifications kept in [`LspClient::log`]; returns
    /// the events' params.
    pub async fn run_until_end(&mut self, timeout: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut events = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(n) = self.next_notification(left).await else {
                panic!(
                    "no agent_end within {timeout:?}; events so far: {:#?}\nstderr:\n{}",
                    events
                        .iter()
                        .map(|e: &Value| e["event"]["type"].clone())
                        .collect::<Vec<_>>(),
                    self.stderr.lock().unwrap()
                );
            };
            if n["method"] == "agent/event" {
                let e = &n["params"]["event"];
                let done = e["type"] == "agent_end" && e["willRetry"] != true;
                events.push(n["params"].clone());
                if done {
                    return events;
                }
            }
        }
    }

    /// Every message received from the server so far.
    pub fn log(&self) -> Vec<Value> {
        let log = self.shared.log.lock().unwrap().clone();
        *self.shared.log_seen.lock().unwrap() = log.len();
        log
    }

    /// The messages of [`LspClient::log`] that `pred` selects, once there are at least `n` of
    /// them or `timeout` passed (then what there is). For answers whose order against other
    /// frames JSON-RPC leaves open (the transport guard's errors are written between the
    /// server's frames, possibly after the answer to a later request).
    pub async fn log_matching(
        &self,
        n: usize,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let found: Vec<Value> = self.log().into_iter().filter(|m| pred(m)).collect();
            if found.len() >= n || tokio::time::Instant::now() >= deadline {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The size on the wire (`Content-Length` header and body, in bytes) of each message of
    /// [`LspClient::log`], by index.
    pub fn log_bytes(&self) -> Vec<usize> {
        self.shared.log_bytes.lock().unwrap().clone()
    }

    /// The params of every `workspace/applyEdit` the editor received, in order.
    pub fn apply_edit_params(&self) -> Vec<Value> {
        self.log()
            .into_iter()
            .filter(|m| m["method"] == "workspace/applyEdit")
            .map(|m| m["params"].clone())
            .collect()
    }

    /// The `WorkspaceEdit` of every `workspace/applyEdit` the editor received, in order.
    pub fn applied_edits(&self) -> Vec<Value> {
        self.apply_edit_params()
            .into_iter()
            .map(|p| p["edit"].clone())
            .collect()
    }

    /// shutdown + exit; waits for the process.
    pub async fn shutdown(mut self) -> std::process::ExitStatus {
        let _ = self.request("shutdown", Value::Null).await;
        self.notify("exit", Value::Null).await;
        tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .expect("exit timeout")
            .unwrap()
    }

    /// Sends `exit` without `shutdown` and waits for the process to end.
    pub async fn exit_without_shutdown(mut self) -> std::process::ExitStatus {
        self.notify("exit", Value::Null).await;
        tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .expect("exit timeout")
            .unwrap()
    }

    /// The server process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Closes the server's stdin (the editor went away without a word); later writes are
    /// dropped.
    pub async fn close_stdin(&self) {
        drop(self.shared.stdin.lock().await.take());
    }

    /// Sends signal `signal` (a number, e.g. 15 for SIGTERM) to the server with `kill(1)`.
    pub fn signal(&self, signal: i32) {
        let pid = self.pid().expect("the server already exited");
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// Waits at most `timeout` for the server to exit; `None` when it still runs.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .ok()
            .map(|s| s.unwrap())
    }
}

impl Drop for LspClient {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let seen = *self.shared.log_seen.lock().unwrap();
        let mut unread = Vec::new();
        while let Ok((seq, n)) = self.notes.try_recv() {
            // An error shown to the user that the test never looked at.
            if seq >= seen && n["method"] == "window/showMessage" && n["params"]["type"] == 1 {
                unread.push(n);
            }
        }
        let unknown = self.shared.unknown_requests.lock().unwrap().clone();
        assert!(
            unread.is_empty() && unknown.is_empty(),
            "unexpected server messages left unread: errors shown {unread:#?}, requests this editor does not know {unknown:#?}\nstderr:\n{}",
            self.stderr.lock().unwrap()
        );
    }
}

/// Writes `models.json` into a fresh agent dir and returns the env for the server.
pub fn agent_env(
    agent_dir: &Path,
    models: &Value,
    extra: &[(&str, &str)],
) -> Vec<(&'static str, String)> {
    std::fs::create_dir_all(agent_dir).unwrap();
    std::fs::write(agent_dir.join("models.json"), models.to_string()).unwrap();
    let tmp = child_tmp(agent_dir);
    let mut env = vec![
        ("PI_CODING_AGENT_DIR", agent_dir.display().to_string()),
        ("ANTHROPIC_API_KEY", String::new()),
        ("OPENAI_API_KEY", String::new()),
        ("PI_LSP_LOG", "info".to_string()),
    ];
    env.extend(tmp_env(&tmp));
    for (k, v) in extra {
        match env.iter_mut().find(|(ek, _)| ek == k) {
            Some(e) => e.1 = v.to_string(),
            None => env.push((Box::leak(k.to_string().into_boxed_str()), v.to_string())),
        }
    }
    env
}

/// The temporary folder of a child started with the agent dir `agent_dir`: `tmp` beside it
/// (created), inside the test's own [`crate::TempDir`], so what the child leaves in its temp
/// folder (a cut command's `pi-bash-*.log`, sandbox folders, Pi's own spill files) goes with
/// the test's folders instead of staying in the system's temp folder.
pub fn child_tmp(agent_dir: &Path) -> PathBuf {
    let tmp = match agent_dir.parent() {
        Some(p) => p.join("tmp"),
        None => agent_dir.join("tmp"),
    };
    std::fs::create_dir_all(&tmp).unwrap();
    tmp
}

/// The variables naming `tmp` as a child's temporary folder: `TMPDIR` (Unix, Node's
/// `os.tmpdir()`), `TMP` and `TEMP` (Windows).
pub fn tmp_env(tmp: &Path) -> [(&'static str, String); 3] {
    let t = tmp.display().to_string();
    [("TMPDIR", t.clone()), ("TMP", t.clone()), ("TEMP", t)]
}

/// Starts the real `pi-lsp` on workspace `ws` with `mock`'s models.json in `ws/../agent`.
pub async fn start_with_mock(
    ws: &Path,
    mock: &crate::mock_model::MockModel,
    behavior: EditorBehavior,
) -> LspClient {
    let env = agent_env(&ws.join("../agent"), &mock.models_json(), &[]);
    LspClient::start(&crate::pi_lsp_bin(), ws, &env, behavior).await
}

/// `(tool, text of its first content block, isError)` of every `tool_execution_end`, in order.
pub fn tool_results(events: &[Value]) -> Vec<(String, String, bool)> {
    events
        .iter()
        .filter(|e| e["event"]["type"] == "tool_execution_end")
        .map(|e| {
            (
                e["event"]["toolName"].as_str().unwrap().to_string(),
                e["event"]["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                e["event"]["isError"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// `(text, isError)` of the first `tool_execution_end` of `tool` among `agent/event` params.
pub fn tool_result_text(events: &[Value], tool: &str) -> (String, bool) {
    let e = events
        .iter()
        .find(|e| e["event"]["type"] == "tool_execution_end" && e["event"]["toolName"] == tool)
        .unwrap_or_else(|| panic!("no tool_execution_end for {tool}"));
    (
        e["event"]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        e["event"]["isError"].as_bool().unwrap_or(false),
    )
}

/// The note `read` and `edit` results end with when the editor's buffer of `shown` (the path as
/// the model names it) holds unsaved changes of the user's that the disk lacks.
pub fn unsaved_note(shown: &str) -> String {
    format!("\n\nNote: the user has unsaved changes to {shown} in the editor. read and edit use the editor's text; the file on disk differs by those changes (bash and other programs see the disk).")
}
