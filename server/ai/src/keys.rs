//! API keys: resolution of models.json values (in memory only) and redaction of every known
//! secret from text that is logged, stored or returned.
//!
//! Resolution follows Pi 0.73.1's `resolve-config-value.js`: a value starting with `!` is a
//! shell command (`sh -c`, stdin and stderr closed, 10 s timeout) whose trimmed stdout is the
//! value (none when it fails, exits non-zero or prints nothing); otherwise an environment
//! variable of that name when it is set and non-empty; otherwise the value itself. Pi caches
//! command results for the life of the process; so does [`resolve_config_value`].
//!
//! Redaction: every resolved key, every value of a known key variable ([`KEY_ENV_VARS`]) and
//! every header value that came from a variable or command is registered in one process-wide
//! set; [`redact`] replaces each registered value with [`REDACTED`], and also the value after
//! `Authorization`, `x-api-key`, `api-key` and `Bearer` in header-like or JSON text, whatever
//! that value is. Values shorter than [`MIN_SECRET_LEN`] are not registered (they are not real
//! keys and would blank ordinary words).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// What a redacted secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Shortest value treated as a secret, in bytes.
pub const MIN_SECRET_LEN: usize = 8;

/// Environment variables that hold provider keys (Pi's `env-api-keys.js` names for the
/// providers this crate knows). Their values are secrets whether or not a model uses them.
pub const KEY_ENV_VARS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_OAUTH_TOKEN",
    "OPENAI_API_KEY",
    "DEEPSEEK_API_KEY",
    "GROQ_API_KEY",
    "CEREBRAS_API_KEY",
    "XAI_API_KEY",
    "OPENROUTER_API_KEY",
    "ZAI_API_KEY",
    "MISTRAL_API_KEY",
    "FIREWORKS_API_KEY",
    "HF_TOKEN",
    "GEMINI_API_KEY",
];

/// How long a `!command` may run (Pi: 10 s).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

fn secrets() -> &'static RwLock<Vec<String>> {
    static S: OnceLock<RwLock<Vec<String>>> = OnceLock::new();
    S.get_or_init(|| {
        let mut v: Vec<String> = Vec::new();
        for name in KEY_ENV_VARS {
            if let Ok(val) = std::env::var(name) {
                let val = val.trim().to_string();
                if val.len() >= MIN_SECRET_LEN && !v.contains(&val) {
                    v.push(val);
                }
            }
        }
        RwLock::new(v)
    })
}

/// Names of environment variables whose values are registered secrets (models.json `apiKey`
/// and header values naming a variable).
fn secret_vars() -> &'static RwLock<Vec<String>> {
    static S: OnceLock<RwLock<Vec<String>>> = OnceLock::new();
    S.get_or_init(|| RwLock::new(Vec::new()))
}

/// Registers `value` as a secret (ignored when shorter than [`MIN_SECRET_LEN`]).
pub fn register_secret(value: &str) {
    let value = value.trim();
    if value.len() < MIN_SECRET_LEN {
        return;
    }
    let Ok(mut s) = secrets().write() else {
        return;
    };
    if !s.iter().any(|v| v == value) {
        s.push(value.to_string());
        // Longest first, so a key containing another is replaced whole.
        s.sort_by_key(|v| std::cmp::Reverse(v.len()));
    }
}

/// True when `value` is a registered secret.
pub fn is_secret(value: &str) -> bool {
    let value = value.trim();
    value.len() >= MIN_SECRET_LEN
        && secrets()
            .read()
            .map(|s| s.iter().any(|v| v == value))
            .unwrap_or(false)
}

/// Environment variables a child process must not inherit: [`KEY_ENV_VARS`], the variables
/// models.json values named, and any variable whose value is a registered secret.
pub fn secret_env_vars() -> Vec<String> {
    let mut names: Vec<String> = KEY_ENV_VARS.iter().map(|s| s.to_string()).collect();
    if let Ok(v) = secret_vars().read() {
        names.extend(v.iter().cloned());
    }
    for (k, v) in std::env::vars_os() {
        if let (Some(k), Some(v)) = (k.to_str(), v.to_str()) {
            if is_secret(v) {
                names.push(k.to_string());
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

fn header_pattern() -> Option<&'static regex::Regex> {
    static RE: OnceLock<Option<regex::Regex>> = OnceLock::new();
    RE.get_or_init(|| {
        // `authorization: Bearer X`, `"x-api-key":"X"`, `api-key=X`, `Bearer X` …: group 1 is
        // everything up to the value, group 2 the value (never starting with `[`, so an
        // already redacted value stays as it is).
        regex::Regex::new(
            r#"((?i:\b(?:authorization|proxy-authorization|x-api-key|api-key|x-goog-api-key)\b["']?\s*[:=]\s*["']?(?:(?:bearer|basic)\s+)?)|\bBearer\s+)([^\s"',;}\]\[][^\s"',;}\]]*)"#,
        )
        .ok()
    })
    .as_ref()
}

/// `text` with every registered secret replaced by [`REDACTED`] (values only: no patterns, so
/// ordinary text such as command output is otherwise unchanged).
pub fn redact_secrets(text: &str) -> String {
    let mut out = text.to_string();
    if let Ok(s) = secrets().read() {
        for secret in s.iter() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
    }
    out
}

/// `text` with every registered secret and every credential header value replaced by
/// [`REDACTED`].
pub fn redact(text: &str) -> String {
    let out = match header_pattern() {
        Some(re) => re
            .replace_all(text, |c: &regex::Captures<'_>| {
                // `Authorization: Bearer [REDACTED]` seen again: the scheme is not a value.
                let v = &c[2];
                if v.eq_ignore_ascii_case("bearer") || v.eq_ignore_ascii_case("basic") {
                    c[0].to_string()
                } else {
                    format!("{}{REDACTED}", &c[1])
                }
            })
            .into_owned(),
        None => text.to_string(),
    };
    redact_secrets(&out)
}

/// Replaces every registered secret inside the file at `path` with [`REDACTED`], streaming
/// (1 MB at a time, so secrets cut across reads are still found); the file is rewritten only
/// when something was replaced. Returns whether it was.
pub fn redact_file(path: &std::path::Path) -> std::io::Result<bool> {
    use std::io::{Read, Write};
    let list: Vec<Vec<u8>> = match secrets().read() {
        Ok(s) => s.iter().map(|v| v.as_bytes().to_vec()).collect(),
        Err(_) => return Ok(false),
    };
    let Some(longest) = list.iter().map(Vec::len).max() else {
        return Ok(false);
    };
    let mut input = std::fs::File::open(path)?;
    let tmp = path.with_extension("redacting");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 1 << 20];
    let mut changed = false;
    loop {
        let n = input.read(&mut chunk)?;
        buf.extend_from_slice(&chunk[..n]);
        // Replace in place, left to right.
        let mut i = 0;
        let mut replaced = Vec::with_capacity(buf.len());
        'scan: while i < buf.len() {
            for s in &list {
                if buf[i..].starts_with(s) {
                    replaced.extend_from_slice(REDACTED.as_bytes());
                    i += s.len();
                    changed = true;
                    continue 'scan;
                }
            }
            replaced.push(buf[i]);
            i += 1;
        }
        buf = replaced;
        if n == 0 {
            out.write_all(&buf)?;
            break;
        }
        // Keep a tail that could be the start of a secret cut by this read.
        let keep = buf.len().min(longest.saturating_sub(1));
        let flush_to = buf.len() - keep;
        out.write_all(&buf[..flush_to])?;
        buf.drain(..flush_to);
    }
    out.flush()?;
    drop(out);
    if changed {
        std::fs::rename(&tmp, path)?;
    } else {
        std::fs::remove_file(&tmp)?;
    }
    Ok(changed)
}

fn command_cache() -> &'static Mutex<HashMap<String, Option<String>>> {
    static C: OnceLock<Mutex<HashMap<String, Option<String>>>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Runs `!command` values: `sh -c`, stdin and stderr closed, killed after 10 s; the trimmed
/// stdout when the command exits 0 and prints something.
fn run_command(command: &str) -> Option<String> {
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut buf);
        buf
    });
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = reader.join().ok()?;
    if !status?.success() {
        return None;
    }
    let value = String::from_utf8_lossy(&out).trim().to_string();
    (!value.is_empty()).then_some(value)
}

/// How a value was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// From a `!command`.
    Command,
    /// From the environment variable the value named.
    Env,
    /// The configured text itself.
    Literal,
}

/// Pi's `resolveConfigValue`: see the module docs. Returns the value and where it came from;
/// command results (also failures) are cached per command text for the life of the process.
pub fn resolve_config_value(spec: &str) -> Option<(String, Source)> {
    if let Some(cmd) = spec.strip_prefix('!') {
        if let Ok(cache) = command_cache().lock() {
            if let Some(hit) = cache.get(spec) {
                return hit.clone().map(|v| (v, Source::Command));
            }
        }
        let value = run_command(cmd);
        if let Ok(mut cache) = command_cache().lock() {
            cache.insert(spec.to_string(), value.clone());
        }
        return value.map(|v| (v, Source::Command));
    }
    match std::env::var(spec) {
        Ok(v) if !v.is_empty() => Some((v, Source::Env)),
        _ if spec.is_empty() => None,
        _ => Some((spec.to_string(), Source::Literal)),
    }
}

/// Resolves a models.json `apiKey` ([`resolve_config_value`]) and registers the key as a
/// secret (and, when it came from a variable, that variable's name).
pub fn resolve_api_key(spec: &str) -> Option<String> {
    let (value, source) = resolve_config_value(spec)?;
    register_secret(&value);
    if source == Source::Env {
        if let Ok(mut v) = secret_vars().write() {
            if !v.iter().any(|n| n == spec) {
                v.push(spec.to_string());
            }
        }
    }
    Some(value)
}

/// Header names whose literal values are credentials.
fn sensitive_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["authorization", "key", "token", "secret", "cookie"]
        .iter()
        .any(|w| n.contains(w))
}

/// Pi's `resolveHeaders`: each value resolved like a key, empty results dropped. Values that
/// came from a variable or command, and literal values of credential-like headers
/// (`Authorization`, `*key*`, `*token*`, `*secret*`, `*cookie*`), are registered as secrets.
pub fn resolve_headers(headers: BTreeMap<String, String>) -> BTreeMap<String, String> {
    headers
        .into_iter()
        .filter_map(|(k, spec)| {
            let (value, source) = resolve_config_value(&spec)?;
            if source != Source::Literal || sensitive_header(&k) {
                register_secret(&value);
                let bare = value
                    .strip_prefix("Bearer ")
                    .or_else(|| value.strip_prefix("bearer "));
                if let Some(b) = bare {
                    register_secret(b);
                }
            }
            (!value.is_empty()).then_some((k, value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_follows_pi() {
        assert_eq!(
            resolve_config_value("sk-literal-value"),
            Some(("sk-literal-value".to_string(), Source::Literal))
        );
        assert_eq!(
            resolve_config_value("!printf '  from-cmd-1234 \\n'"),
            Some(("from-cmd-1234".to_string(), Source::Command))
        );
        assert_eq!(resolve_config_value("!exit 3"), None);
        assert_eq!(resolve_config_value("!true"), None);
        assert_eq!(
            resolve_config_value("PATH").map(|p| p.1),
            Some(Source::Env),
            "a set variable's value"
        );
        assert_eq!(resolve_config_value(""), None);
    }

    #[test]
    fn resolved_keys_are_redacted_everywhere() {
        let key = resolve_api_key("!echo sk-test-cmd-0123456789").unwrap();
        assert_eq!(key, "sk-test-cmd-0123456789");
        assert!(is_secret(&key));
        assert_eq!(
            redact("HTTP 401: invalid key sk-test-cmd-0123456789 (check it)"),
            "HTTP 401: invalid key [REDACTED] (check it)"
        );
        // Short values are never registered.
        register_secret("abc");
        assert_eq!(redact("abc"), "abc");
    }

    #[test]
    fn header_values_are_redacted_whatever_they_are() {
        assert_eq!(
            redact(r#"{"headers":{"x-api-key":"unknown-value-1","authorization":"Bearer tok-2"}}"#),
            r#"{"headers":{"x-api-key":"[REDACTED]","authorization":"Bearer [REDACTED]"}}"#
        );
        assert_eq!(
            redact("Authorization: Bearer abc.def\nX-Api-Key: zzz\ncontent-type: json"),
            "Authorization: Bearer [REDACTED]\nX-Api-Key: [REDACTED]\ncontent-type: json"
        );
        assert_eq!(redact("use a bearer token"), "use a bearer token");
        assert_eq!(redact("got Bearer abc123"), "got Bearer [REDACTED]");
        assert_eq!(redact(&redact("x-api-key: v")), "x-api-key: [REDACTED]");
        let once = redact("Authorization: Bearer tok-3 and authorization=basic dXNlcg==");
        assert_eq!(
            once,
            "Authorization: Bearer [REDACTED] and authorization=basic [REDACTED]"
        );
        assert_eq!(redact(&once), once);
    }

    #[test]
    fn provider_errors_never_carry_a_key() {
        register_secret("sk-echoed-key-abcdef0123456789");
        // A key deep in a long body is redacted.
        let body = format!(
            "{}{{\"error\":\"bad key sk-echoed-key-abcdef0123456789\"}}",
            "x".repeat(1990)
        );
        let e = crate::errors::classify_http(401, None, None, &body);
        assert!(!e.message().contains("sk-echoed"), "{}", e.message());
        assert!(!e.to_string().contains("sk-echoed"));
        let e = crate::errors::classify_stream_error(
            Some("authentication_error"),
            "invalid x-api-key: sk-echoed-key-abcdef0123456789",
        );
        assert_eq!(
            e.message(),
            "authentication_error: invalid x-api-key: [REDACTED]"
        );
        let e = crate::errors::classify_text("Authorization: Bearer whatever-1 rejected");
        assert_eq!(e.to_string(), "Authorization: Bearer [REDACTED] rejected");
    }

    #[test]
    fn files_are_redacted_across_reads() {
        register_secret("sk-file-secret-987654321");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("redact.log");
        // The secret straddles the 1 MB read boundary.
        let mut text = "a".repeat((1 << 20) - 5);
        text.push_str("sk-file-secret-987654321 end\n");
        std::fs::write(&p, &text).unwrap();
        assert!(redact_file(&p).unwrap());
        let got = std::fs::read_to_string(&p).unwrap();
        assert_eq!(
            got,
            format!("{}[REDACTED] end\n", "a".repeat((1 << 20) - 5))
        );
        assert!(!redact_file(&p).unwrap());
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn headers_resolve_and_register() {
        let mut h = BTreeMap::new();
        h.insert(
            "X-Custom-Token".to_string(),
            "literal-header-secret".to_string(),
        );
        h.insert("X-Plain".to_string(), "plain".to_string());
        h.insert("X-Empty".to_string(), "!true".to_string());
        let r = resolve_headers(h);
        assert_eq!(r.get("X-Plain").map(String::as_str), Some("plain"));
        assert_eq!(r.get("X-Empty"), None);
        assert!(is_secret("literal-header-secret"));
        assert!(!is_secret("plain"));
    }
}
