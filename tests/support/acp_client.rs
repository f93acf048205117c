//! A minimal ACP client of our own (NDJSON over the real `pi-lsp acp`'s stdio) for the e2e
//! tests: requests with ids, every received message kept in order, and the agent's requests
//! (`session/request_permission`, `fs/*`) answered by a test-supplied [`Answerer`].

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::Notify;

/// Answers a request from the agent: `(method, params)` → result (or `Err((code, message))`).
pub type Answerer = Arc<dyn Fn(&str, &Value) -> Result<Value, (i64, String)> + Send + Sync>;

/// Answers a request from the agent in its own time (e.g. `terminal/wait_for_exit`, which
/// answers when the command exits): `(method, params)` → a future of the answer. Requests are
/// answered concurrently, each when its future resolves.
pub type AsyncAnswerer = Arc<
    dyn Fn(String, Value) -> futures::future::BoxFuture<'static, Result<Value, (i64, String)>>
        + Send
        + Sync,
>;

/// The client; see the module doc.
pub struct AcpClient {
    pub child: Child,
    stdin: Option<ChildStdin>,
    next: i64,
    /// Every message received, in order.
    pub received: Arc<Mutex<Vec<Value>>>,
    /// When each message of `received` was read (its line complete), same order.
    pub received_at: Arc<Mutex<Vec<std::time::Instant>>>,
    arrived: Arc<Notify>,
    writer: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    /// Everything the agent wrote on stderr so far (its log).
    pub stderr: Arc<Mutex<String>>,
}

impl AcpClient {
    /// Starts `pi-lsp acp` in `cwd` with `env` and `args`; `answer` answers the agent's
    /// requests.
    pub fn start(cwd: &Path, env: &[(&str, String)], args: &[&str], answer: Answerer) -> AcpClient {
        let answer: AsyncAnswerer = Arc::new(move |m, p| {
            let r = answer(&m, &p);
            Box::pin(async move { r })
        });
        Self::start_async(cwd, env, args, answer)
    }

    /// [`AcpClient::start`] with requests answered by `answer` in their own time.
    pub fn start_async(
        cwd: &Path,
        env: &[(&str, String)],
        args: &[&str],
        answer: AsyncAnswerer,
    ) -> AcpClient {
        let mut cmd = Command::new(crate::pi_lsp_bin());
        cmd.arg("acp")
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        // The agent's log: kept for the tests and passed on to the test's own stderr.
        let stderr_text: Arc<Mutex<String>> = Arc::default();
        let (err_pipe, kept) = (child.stderr.take().unwrap(), stderr_text.clone());
        tokio::spawn(async move {
            let mut lines = BufReader::new(err_pipe).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                eprintln!("{l}");
                let mut k = kept.lock().unwrap();
                k.push_str(&l);
                k.push('\n');
            }
        });
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let received: Arc<Mutex<Vec<Value>>> = Arc::default();
        let received_at: Arc<Mutex<Vec<std::time::Instant>>> = Arc::default();
        let arrived = Arc::new(Notify::new());
        let (r, a, r_at) = (received.clone(), arrived.clone(), received_at.clone());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                let at = std::time::Instant::now();
                let v: Value = serde_json::from_str(&l).unwrap_or_else(|e| {
                    panic!("the agent wrote a line that is not JSON ({e}): {l}")
                });
                if v.get("method").is_some() && v.get("id").is_some() {
                    let m = v["method"].as_str().unwrap_or_default().to_string();
                    let (id, mut answered) = (v["id"].clone(), answer(m, v["params"].clone()));
                    let reply = move |r: Result<Value, (i64, String)>| match r {
                        Ok(res) => json!({"jsonrpc": "2.0", "id": id, "result": res}),
                        Err((code, message)) => {
                            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
                        }
                    };
                    // A ready answer goes out at once, in order; the others when they resolve.
                    match futures::FutureExt::now_or_never(&mut answered) {
                        Some(r) => {
                            let _ = tx.send(reply(r).to_string());
                        }
                        None => {
                            let tx = tx.clone();
                            tokio::spawn(async move {
                                let _ = tx.send(reply(answered.await).to_string());
                            });
                        }
                    }
                }
                {
                    let mut r = r.lock().unwrap();
                    r.push(v);
                    r_at.lock().unwrap().push(at);
                }
                a.notify_waiters();
            }
            a.notify_waiters();
        });
        let mut client = AcpClient {
            child,
            stdin,
            next: 1000,
            received,
            received_at,
            arrived,
            writer: None,
            stderr: stderr_text,
        };
        // Replies to the agent's requests go through the same stdin.
        let (w_tx, mut w_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let stdin = client.stdin.take().unwrap();
        tokio::spawn(async move {
            let mut stdin = stdin;
            loop {
                let line = tokio::select! {
                    l = rx.recv() => l,
                    l = w_rx.recv() => l,
                };
                let Some(mut line) = line else { break };
                line.push('\n');
                if stdin.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
                let _ = stdin.flush().await;
            }
        });
        client.writer = Some(w_tx);
        client
    }

    /// Writes one raw line (a newline is added).
    pub fn send_raw(&self, line: &str) {
        if let Some(w) = &self.writer {
            let _ = w.send(line.to_string());
        }
    }

    /// Sends a request and returns its id.
    pub fn send(&mut self, method: &str, params: Value) -> i64 {
        self.next += 1;
        let id = self.next;
        self.send_raw(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        id
    }

    /// Sends a notification.
    pub fn notify(&self, method: &str, params: Value) {
        self.send_raw(&json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string());
    }

    /// Waits (up to `secs`) until `pred` holds for a received message; returns it.
    pub async fn wait_for(&self, secs: u64, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let notified = self.arrived.notified();
            if let Some(v) = self.received.lock().unwrap().iter().find(|v| pred(v)) {
                return v.clone();
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let all = self.received.lock().unwrap().clone();
                panic!(
                    "timed out; received: {}",
                    serde_json::to_string_pretty(&all).unwrap()
                );
            }
        }
    }

    /// The response to request `id`.
    pub async fn response(&self, id: i64) -> Value {
        self.wait_for(30, |v| v["id"] == id && v.get("method").is_none())
            .await
    }

    /// Sends a request and waits for its result (panics on an error answer).
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        let r = self.response(id).await;
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    /// The `session/update`s received so far for `session`, as their `update` objects.
    pub fn updates(&self, session: &str) -> Vec<Value> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|v| v["method"] == "session/update" && v["params"]["sessionId"] == session)
            .map(|v| v["params"]["update"].clone())
            .collect()
    }

    /// Closes stdin (the client goes away).
    pub fn close_stdin(&mut self) {
        self.writer = None;
    }
}

/// Answers permission questions with `option` and refuses `fs/*`.
pub fn allow(option: &'static str) -> Answerer {
    Arc::new(move |m, _| match m {
        "session/request_permission" => {
            Ok(json!({"outcome": {"outcome": "selected", "optionId": option}}))
        }
        other => Err((-32601, format!("not offered: {other}"))),
    })
}
