//! `<agent dir>/mcp.log`: servers' logging notifications, one line each, as Pi 1.6 writes them
//! (`<ISO time> [<server>] <level> <logger>: <message>`, continuation lines indented four
//! spaces); the file moves to `mcp.log.1` once it grows past 5 MB. Best effort: a failed write
//! is dropped. Registered secrets are redacted.

use std::io::Write;
use std::path::PathBuf;

use serde_json::Value;

/// Size after which the log is rotated (Pi's 5 MB).
pub const MAX_LOG_BYTES: u64 = 5 * 1024 * 1024;

/// The log file of one agent dir.
pub struct McpLog {
    path: Option<PathBuf>,
    size: parking_lot::Mutex<Option<u64>>,
}

/// One log line for `server`'s notification `params` (`{level, logger?, data}`) at `now`.
pub fn format_line(server: &str, params: &Value, now: chrono::DateTime<chrono::Utc>) -> String {
    let level = params
        .get("level")
        .and_then(Value::as_str)
        .unwrap_or("info");
    let logger = params
        .get("logger")
        .and_then(Value::as_str)
        .filter(|l| !l.is_empty())
        .map(|l| format!(" {l}:"))
        .unwrap_or_default();
    let data = match params.get("data") {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => "null".into(),
    };
    let text = data.replace("\r\n", "\n").replace('\n', "\n    ");
    format!(
        "{} [{server}] {level}{logger} {}\n",
        now.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
        pi_ai::keys::redact(&text)
    )
}

impl McpLog {
    /// The log at `path` (`None`: nothing is written).
    pub fn new(path: Option<PathBuf>) -> McpLog {
        McpLog {
            path,
            size: parking_lot::Mutex::new(None),
        }
    }

    /// Appends one notification of `server`.
    pub fn write(&self, server: &str, params: &Value) {
        let Some(path) = &self.path else {
            return;
        };
        let line = format_line(server, params, chrono::Utc::now());
        let mut size = self.size.lock();
        let current = || std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        if size.is_none() {
            if let Some(d) = path.parent() {
                let _ = std::fs::create_dir_all(d);
            }
            *size = Some(current());
        }
        if size.unwrap_or(0) > MAX_LOG_BYTES {
            if current() > MAX_LOG_BYTES {
                let _ = std::fs::rename(path, path.with_extension("log.1"));
            }
            *size = Some(current());
        }
        let ok = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if ok.is_ok() {
            *size = Some(size.unwrap_or(0) + line.len() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_rotation() {
        let t = chrono::DateTime::parse_from_rfc3339("2026-01-02T03:04:05.678Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(
            format_line(
                "fs",
                &serde_json::json!({"level":"warning","logger":"io","data":"a\nb"}),
                t
            ),
            "2026-01-02T03:04:05.678Z [fs] warning io: a\n    b\n"
        );
        assert_eq!(
            format_line("fs", &serde_json::json!({"level":"info","data":{"x":1}}), t),
            "2026-01-02T03:04:05.678Z [fs] info {\"x\":1}\n"
        );
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("mcp.log");
        std::fs::write(&p, vec![b'x'; (MAX_LOG_BYTES + 1) as usize]).unwrap();
        let log = McpLog::new(Some(p.clone()));
        log.write("s", &serde_json::json!({"level":"info","data":"hello"}));
        assert_eq!(
            std::fs::metadata(d.path().join("mcp.log.1")).unwrap().len(),
            MAX_LOG_BYTES + 1
        );
        assert!(std::fs::read_to_string(&p)
            .unwrap()
            .ends_with("[s] info hello\n"));
    }
}
