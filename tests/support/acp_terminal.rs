//! An ACP client's terminals for the e2e tests: `terminal/create` really runs the command line
//! it is given as a child process (stdin closed, stdout and stderr merged into one buffer,
//! the client's own environment plus the request's `env`, in its `cwd`), and `terminal/output`,
//! `terminal/wait_for_exit`, `terminal/kill`, `terminal/release` act on that child, as an
//! editor's terminal would. Every request is recorded ([`Terminals::calls`]) with the pid of
//! the child it started ([`Terminals::pids`]).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

use crate::acp_client::AsyncAnswerer;

struct Term {
    output: Arc<Mutex<Vec<u8>>>,
    /// `None` while running; then `{exitCode, signal}`.
    exit: watch::Receiver<Option<Value>>,
    kill: Arc<tokio::sync::Notify>,
    limit: usize,
}

/// The terminals of one test client; see the module doc.
#[derive(Clone, Default)]
pub struct Terminals {
    terms: Arc<Mutex<HashMap<String, Term>>>,
    calls: Arc<Mutex<Vec<(String, Value)>>>,
    pids: Arc<Mutex<Vec<u32>>>,
    /// The client's own environment (what its terminals inherit).
    env: Arc<Vec<(String, String)>>,
}

/// `{exitCode, signal}` of a finished child (ACP's `TerminalExitStatus`; the signal by name).
fn exit_status(s: std::process::ExitStatus) -> Value {
    let signal = pi_core::platform::process::exit_signal(&s).map(|n| match n {
        9 => "SIGKILL".to_string(),
        15 => "SIGTERM".to_string(),
        n => n.to_string(),
    });
    json!({"exitCode": s.code(), "signal": signal})
}

impl Terminals {
    /// Terminals whose children inherit `env` (besides the test process's environment).
    pub fn new(env: &[(&str, String)]) -> Terminals {
        Terminals {
            env: Arc::new(
                env.iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect(),
            ),
            ..Terminals::default()
        }
    }

    /// Every `terminal/*` request so far: (method, params).
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.calls.lock().unwrap().clone()
    }

    /// The pids of the children started, in order.
    pub fn pids(&self) -> Vec<u32> {
        self.pids.lock().unwrap().clone()
    }

    /// An answerer serving `terminal/*` here and everything else through `other`.
    pub fn answerer(&self, other: crate::acp_client::Answerer) -> AsyncAnswerer {
        let me = self.clone();
        Arc::new(
            move |m: String, p: Value| -> BoxFuture<'static, Result<Value, (i64, String)>> {
                if !m.starts_with("terminal/") {
                    let r = other(&m, &p);
                    return Box::pin(async move { r });
                }
                me.calls.lock().unwrap().push((m.clone(), p.clone()));
                let me = me.clone();
                Box::pin(async move { me.serve(&m, &p).await })
            },
        )
    }

    async fn serve(&self, m: &str, p: &Value) -> Result<Value, (i64, String)> {
        let id = p["terminalId"].as_str().unwrap_or_default().to_string();
        let unknown = || (-32002, format!("unknown terminal {id}"));
        match m {
            "terminal/create" => self.create(p),
            "terminal/output" => {
                let terms = self.terms.lock().unwrap();
                let t = terms.get(&id).ok_or_else(unknown)?;
                let out = t.output.lock().unwrap();
                let start = out.len().saturating_sub(t.limit);
                let mut text = String::from_utf8_lossy(&out[start..]).into_owned();
                if start > 0 {
                    text = text.trim_start_matches('\u{fffd}').to_string();
                }
                let mut r = json!({"output": text, "truncated": start > 0});
                if let Some(e) = t.exit.borrow().clone() {
                    r["exitStatus"] = e;
                }
                Ok(r)
            }
            "terminal/wait_for_exit" => {
                let mut rx = {
                    let terms = self.terms.lock().unwrap();
                    terms.get(&id).ok_or_else(unknown)?.exit.clone()
                };
                loop {
                    if let Some(e) = rx.borrow_and_update().clone() {
                        return Ok(e);
                    }
                    if rx.changed().await.is_err() {
                        return Err((-32603, "the terminal is gone".into()));
                    }
                }
            }
            "terminal/kill" => {
                let terms = self.terms.lock().unwrap();
                terms.get(&id).ok_or_else(unknown)?.kill.notify_one();
                Ok(json!({}))
            }
            "terminal/release" => {
                let t = self.terms.lock().unwrap().remove(&id).ok_or_else(unknown)?;
                t.kill.notify_one();
                Ok(json!({}))
            }
            other => Err((-32601, format!("no such method: {other}"))),
        }
    }

    fn create(&self, p: &Value) -> Result<Value, (i64, String)> {
        let command = p["command"]
            .as_str()
            .ok_or((-32602, "command".to_string()))?;
        let mut cmd = tokio::process::Command::new(command);
        for a in p["args"].as_array().into_iter().flatten() {
            cmd.arg(a.as_str().unwrap_or_default());
        }
        for (k, v) in self.env.iter() {
            cmd.env(k, v);
        }
        for e in p["env"].as_array().into_iter().flatten() {
            cmd.env(
                e["name"].as_str().unwrap_or_default(),
                e["value"].as_str().unwrap_or_default(),
            );
        }
        if let Some(d) = p["cwd"].as_str() {
            cmd.current_dir(d);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| (-32603, e.to_string()))?;
        let pid = child.id().unwrap_or(0);
        let output: Arc<Mutex<Vec<u8>>> = Arc::default();
        let mut readers = Vec::new();
        let pipes: Vec<Box<dyn tokio::io::AsyncRead + Unpin + Send>> = vec![
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for mut pipe in pipes {
            let out = output.clone();
            readers.push(tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                while let Ok(n) = pipe.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    out.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            }));
        }
        let (tx, rx) = watch::channel(None);
        let kill = Arc::new(tokio::sync::Notify::new());
        let k = kill.clone();
        tokio::spawn(async move {
            let status = tokio::select! {
                s = child.wait() => s,
                _ = k.notified() => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            // What the pipes still hold (a short wait: a background child may keep them open).
            for r in readers {
                let _ = tokio::time::timeout(std::time::Duration::from_millis(200), r).await;
            }
            let _ = tx.send(Some(status.map(exit_status).unwrap_or(Value::Null)));
        });
        let id = {
            let mut pids = self.pids.lock().unwrap();
            pids.push(pid);
            format!("term-{}", pids.len())
        };
        let limit = p["outputByteLimit"].as_u64().unwrap_or(u64::MAX) as usize;
        self.terms.lock().unwrap().insert(
            id.clone(),
            Term {
                output,
                exit: rx,
                kill,
                limit,
            },
        );
        Ok(json!({"terminalId": id}))
    }
}
