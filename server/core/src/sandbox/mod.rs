//! The OS sandbox for commands the agent runs (the `bash` tool), and the approval interface a
//! command needs to leave it.
//!
//! # Policies
//!
//! - `off`: Pi's behaviour, the command runs with the server's permissions.
//! - `workspace-write`: reads anywhere; writes only inside the workspace (the root and every
//!   other folder of a multi-root workspace, as they are when the command starts), the session's temp
//!   folder (exported as `TMPDIR`), the writable roots from settings (by default `~/.cache`,
//!   `~/.cargo/registry`, `~/.npm`) and the device files shells need (`/dev/null`, `/dev/zero`,
//!   `/dev/full`, `/dev/random`, `/dev/urandom`, `/dev/tty`, `/dev/ptmx`, `/dev/pts`). The
//!   default wherever the kernel can enforce it.
//! - `read-only`: reads anywhere; writes only to the session's temp folder and those devices.
//!
//! Each with network on (default) or off (no IPv4 / IPv6 sockets; Unix sockets still work).
//!
//! # Settings
//!
//! A `sandbox` object in Pi-format `settings.json` (the workspace's `.pi/settings.json` over
//! `~/.pi/agent/settings.json`, `$PI_CODING_AGENT_DIR` replacing `~/.pi/agent`), key by key:
//!
//! ```json
//! {"sandbox": {"mode": "workspace-write", "network": true,
//!              "writableRoots": ["~/.cache", "~/.cargo/registry", "~/.npm"]}}
//! ```
//!
//! `mode` is `"off"`, `"workspace-write"` or `"read-only"`; `network` `true` / `false`;
//! `writableRoots` replaces the default list (`~` expanded; missing folders are skipped).
//!
//! # Enforcement
//!
//! By the OS backend in [`crate::platform::sandbox`]: on Linux, Landlock for the file rules
//! (the `landlock` crate, ABI up to 7) and a seccomp filter (`seccompiler`) failing
//! `socket(AF_INET | AF_INET6, …)` and `io_uring_setup` with `EACCES` for network off, both
//! applied to a short-lived thread that then spawns the command (the child inherits them, the
//! server stays unrestricted); on macOS, a Seatbelt profile through `/usr/bin/sandbox-exec`;
//! on Windows, nothing. Where the backend is missing, [`Sandbox::enforcement`] says so: a
//! policy the user asked for explicitly is never silently dropped; each command then needs
//! approval to run unsandboxed. With no `mode` set and no backend, the default is `off` and the
//! first result says so (docs/platforms.md).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The file policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// No restriction (Pi's behaviour).
    Off,
    /// Writes only in the workspace, the session temp folder and the writable roots.
    WorkspaceWrite,
    /// Writes only in the session temp folder.
    ReadOnly,
}

impl SandboxMode {
    /// The settings spelling: `off`, `workspace-write`, `read-only`.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Off => "off",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::ReadOnly => "read-only",
        }
    }
}

/// The `sandbox` object of settings.json, as written (all optional).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSettings {
    /// `off` / `workspace-write` / `read-only`; unset = `workspace-write` where enforceable.
    pub mode: Option<SandboxMode>,
    /// Network access; unset = on.
    pub network: Option<bool>,
    /// Extra writable folders under `workspace-write`; unset = [`default_writable_roots`].
    pub writable_roots: Option<Vec<String>>,
}

impl SandboxSettings {
    /// The `sandbox` object of loaded settings (global and, in a trusted workspace, project,
    /// merged key by key by the loader); malformed values are ignored with a warning.
    pub fn from_settings(settings: &crate::settings::Settings) -> SandboxSettings {
        match settings.raw("sandbox") {
            None => SandboxSettings::default(),
            Some(v) => serde_json::from_value(v.clone()).unwrap_or_else(|e| {
                tracing::warn!("ignoring invalid \"sandbox\" settings: {e}");
                SandboxSettings::default()
            }),
        }
    }

    /// The workspace's `.pi/settings.json` `sandbox` keys over the agent dir's, key by key.
    /// Unreadable or malformed files are skipped with a warning.
    pub fn for_workspace(root: &Path) -> SandboxSettings {
        let agent_dir = std::env::var_os("PI_CODING_AGENT_DIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pi/agent")));
        let mut out = SandboxSettings::default();
        // Workspace first: its keys win.
        for file in [
            Some(root.join(".pi/settings.json")),
            agent_dir.map(|d| d.join("settings.json")),
        ]
        .into_iter()
        .flatten()
        {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let parsed = serde_json::from_str::<Value>(&text).map(|v| v.get("sandbox").cloned());
            let s = match parsed {
                Ok(Some(v)) => match serde_json::from_value::<SandboxSettings>(v) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!("{}: ignoring invalid \"sandbox\": {e}", file.display());
                        continue;
                    }
                },
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!("{}: {e}", file.display());
                    continue;
                }
            };
            out.mode = out.mode.or(s.mode);
            out.network = out.network.or(s.network);
            out.writable_roots = out.writable_roots.or(s.writable_roots);
        }
        out
    }
}

/// The default writable roots: `~/.cache`, `~/.cargo/registry`, `~/.npm`.
pub fn default_writable_roots() -> Vec<String> {
    vec![
        "~/.cache".into(),
        "~/.cargo/registry".into(),
        "~/.npm".into(),
    ]
}

fn expand_home(p: &str) -> PathBuf {
    if p == "~" || p.starts_with("~/") {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        home.join(p.trim_start_matches('~').trim_start_matches('/'))
    } else {
        PathBuf::from(p)
    }
}

/// What the OS offers, probed once per process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// What enforces file rules (`Landlock ABI 5`, `Seatbelt`), or why nothing can.
    pub files: Result<String, String>,
    /// What enforces network off (`seccomp`, `Seatbelt`), or why nothing can.
    pub network: Result<String, String>,
}

/// The OS backend's probe ([`crate::platform::sandbox`]: on Linux Landlock and seccomp on a
/// throwaway thread, on macOS `sandbox-exec`, elsewhere nothing); cached.
pub fn support() -> &'static Support {
    static S: OnceLock<Support> = OnceLock::new();
    S.get_or_init(crate::platform::sandbox::probe)
}

/// A resolved policy for one session's commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// File policy.
    pub mode: SandboxMode,
    /// Network allowed.
    pub network: bool,
    /// Folders writable besides the device files (workspace, temp folder, roots; canonical).
    pub writable: Vec<PathBuf>,
}

impl Policy {
    /// A policy with no restriction at all.
    pub fn unrestricted() -> Policy {
        Policy {
            mode: SandboxMode::Off,
            network: true,
            writable: Vec::new(),
        }
    }

    /// True when nothing is restricted.
    pub fn is_off(&self) -> bool {
        self.mode == SandboxMode::Off && self.network
    }

    /// `workspace-write, network off`-style label.
    pub fn label(&self) -> String {
        format!(
            "{}, network {}",
            self.mode.as_str(),
            if self.network { "on" } else { "off" }
        )
    }
}

/// Whether a [`Policy`] is enforced for real.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enforcement {
    /// Enforced by the kernel.
    Enforced,
    /// Nothing to enforce (`off` with network on).
    NotNeeded,
    /// Not enforceable; the user did not ask for a sandbox explicitly, so commands run
    /// unrestricted and the first result says why.
    Unavailable(String),
    /// Not enforceable although the user asked for it: every command needs approval to run
    /// unrestricted (the text says why).
    NeedsApproval(String),
}

/// A session's temp folder: made when a command first needs it ([`Sandbox::tmp_dir`]),
/// removed with everything in it when the last [`Sandbox`] using it is dropped, or by
/// [`remove_temp_folders`] when the process ends first.
#[derive(Debug)]
struct TempFolder(PathBuf, OnceLock<()>);

/// The temp folders alive in this process.
fn live_folders() -> &'static Mutex<std::collections::HashSet<PathBuf>> {
    static LIVE: OnceLock<Mutex<std::collections::HashSet<PathBuf>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
}

impl Drop for TempFolder {
    fn drop(&mut self) {
        live_folders().lock().remove(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How a session temp folder's name starts: `pi-lsp-<pid>-<uuid>`, `pid` being the server
/// that made it.
const TEMP_PREFIX: &str = "pi-lsp-";

/// Removes the session temp folders in `dir` whose server is gone: named
/// `pi-lsp-<pid>-<uuid>`, owned by this user, and `pid` no longer a process. A server that
/// was killed (`SIGKILL`, a crash, an editor that kills its language server) never ran
/// [`remove_temp_folders`]; the next server to make a temp folder removes what it left.
/// Folders of live processes, other users' folders and any other name are left alone.
/// Returns how many were removed.
pub fn remove_stale_temp_folders(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_PREFIX)) else {
            continue;
        };
        let Some((pid, id)) = rest.split_once('-') else {
            continue;
        };
        let (Ok(pid), true) = (pid.parse::<u32>(), uuid::Uuid::try_parse(id).is_ok()) else {
            continue;
        };
        let ours = e
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir() && crate::platform::fs::owned_by_me(&m));
        let gone = pid > 0 && !crate::platform::process::pid_alive(pid);
        if ours && gone && std::fs::remove_dir_all(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Removes every session temp folder still alive: for a process about to exit without
/// dropping its sessions (`std::process::exit` runs no destructors). Returns how many.
pub fn remove_temp_folders() -> usize {
    let folders: Vec<PathBuf> = live_folders().lock().drain().collect();
    for f in &folders {
        let _ = std::fs::remove_dir_all(f);
    }
    folders.len()
}

impl TempFolder {
    fn create() -> Arc<TempFolder> {
        let p = std::env::temp_dir().join(format!(
            "{TEMP_PREFIX}{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        live_folders().lock().insert(p.clone());
        Arc::new(TempFolder(p, OnceLock::new()))
    }

    /// The folder, made (mode 0700) the first time it is asked for.
    fn path(&self) -> &Path {
        self.1.get_or_init(|| {
            static SWEPT: std::sync::Once = std::sync::Once::new();
            SWEPT.call_once(|| {
                let n = remove_stale_temp_folders(&std::env::temp_dir());
                if n > 0 {
                    tracing::info!("removed {n} session temp folder(s) left by ended servers");
                }
            });
            if let Err(e) = crate::platform::fs::create_private_dir(&self.0) {
                tracing::warn!(
                    "cannot create session temp folder {}: {e}",
                    self.0.display()
                );
            }
        });
        &self.0
    }

    /// The folder of session `key`, shared by every sandbox of that session alive at once
    /// (tool sets are rebuilt per prompt; the folder outlives them while one is alive).
    fn for_session(key: &str) -> Arc<TempFolder> {
        static FOLDERS: OnceLock<Mutex<HashMap<String, Weak<TempFolder>>>> = OnceLock::new();
        let map = FOLDERS.get_or_init(|| Mutex::new(HashMap::new()));
        let mut m = map.lock();
        m.retain(|_, w| w.strong_count() > 0);
        if let Some(t) = m.get(key).and_then(Weak::upgrade) {
            return t;
        }
        let t = Self::create();
        m.insert(key.to_string(), Arc::downgrade(&t));
        t
    }
}

/// One session's sandbox: its policy, its temp folder, and whether the kernel enforces it.
#[derive(Debug)]
pub struct Sandbox {
    policy: Policy,
    /// The workspace's other folders (case ED-07), shared with the tools and read for every
    /// command ([`Sandbox::with_folders`]).
    folders: Option<Arc<std::sync::RwLock<Vec<PathBuf>>>>,
    /// Where the other folders go among the writable ones (after the root).
    folders_at: usize,
    tmp: Arc<TempFolder>,
    enforcement: Enforcement,
}

impl Sandbox {
    /// A sandbox in `workspace` from `settings`, with a temp folder of its own
    /// (`<system temp>/pi-lsp-<pid>-<uuid>`, mode 0700; removed when the sandbox is dropped,
    /// or by the next server when this one is killed: [`remove_stale_temp_folders`]).
    pub fn new(workspace: &Path, settings: &SandboxSettings) -> Sandbox {
        Self::build(workspace, settings, support(), TempFolder::create())
    }

    /// The sandbox of session `session_id`: like [`Sandbox::new`], but sandboxes of the same
    /// session alive at the same time share one temp folder, so `TMPDIR` stays the same
    /// across the session's prompts; it is removed when the session's last sandbox goes.
    pub fn for_session(workspace: &Path, settings: &SandboxSettings, session_id: &str) -> Sandbox {
        Self::build(
            workspace,
            settings,
            support(),
            TempFolder::for_session(session_id),
        )
    }

    /// [`Sandbox::new`] against a given kernel `support` (tests simulate kernels without it).
    pub fn with_support(workspace: &Path, settings: &SandboxSettings, sup: &Support) -> Sandbox {
        Self::build(workspace, settings, sup, TempFolder::create())
    }

    fn build(
        workspace: &Path,
        settings: &SandboxSettings,
        sup: &Support,
        folder: Arc<TempFolder>,
    ) -> Sandbox {
        let tmp = folder.0.clone();
        let canon = |p: &Path| crate::platform::paths::canonicalize(p).ok();
        let network = settings.network.unwrap_or(true);
        let fs_ok = sup.files.is_ok();
        let mode = match settings.mode {
            Some(m) => m,
            None if fs_ok => SandboxMode::WorkspaceWrite,
            None => SandboxMode::Off,
        };
        let mut writable: Vec<PathBuf> = Vec::new();
        // The folder itself is made only when a command runs: its canonical path is its
        // parent's.
        writable.extend(
            tmp.parent()
                .and_then(canon)
                .zip(tmp.file_name())
                .map(|(parent, name)| parent.join(name)),
        );
        let mut folders_at = writable.len();
        if mode == SandboxMode::WorkspaceWrite {
            writable.extend(canon(workspace));
            folders_at = writable.len();
            let roots = settings
                .writable_roots
                .clone()
                .unwrap_or_else(default_writable_roots);
            writable.extend(roots.iter().filter_map(|r| canon(&expand_home(r))));
        }
        writable.dedup();
        let policy = Policy {
            mode,
            network,
            writable,
        };
        let mut missing = Vec::new();
        if mode != SandboxMode::Off {
            if let Err(e) = &sup.files {
                missing.push(format!(
                    "file rules need {} ({e})",
                    crate::platform::sandbox::FILES
                ));
            }
        }
        if !network {
            if let Err(e) = &sup.network {
                missing.push(format!(
                    "network off needs {} ({e})",
                    crate::platform::sandbox::NETWORK
                ));
            }
        }
        let enforcement = if policy.is_off() {
            if settings.mode.is_none() && !fs_ok {
                Enforcement::Unavailable(format!(
                    "the sandbox is off: this kernel cannot enforce workspace-write ({}); commands run with the server's permissions",
                    sup.files.as_ref().err().map(String::as_str).unwrap_or("no sandbox")
                ))
            } else {
                Enforcement::NotNeeded
            }
        } else if missing.is_empty() {
            Enforcement::Enforced
        } else {
            Enforcement::NeedsApproval(format!(
                "the sandbox ({}) cannot be enforced here: {}",
                policy.label(),
                missing.join("; ")
            ))
        };
        Sandbox {
            policy,
            folders: None,
            folders_at,
            tmp: folder,
            enforcement,
        }
    }

    /// The same sandbox with the workspace's other `folders` writable too under
    /// `workspace-write` (the list as it is when each command starts: folders added to or
    /// removed from the editor's workspace apply to the next command).
    pub fn with_folders(mut self, folders: Arc<std::sync::RwLock<Vec<PathBuf>>>) -> Sandbox {
        self.folders = Some(folders);
        self
    }

    /// The policy for a command starting now: under `workspace-write`, the workspace's other
    /// folders (canonical) follow the root among the writable folders.
    pub fn policy(&self) -> Policy {
        let mut policy = self.policy.clone();
        if policy.mode != SandboxMode::WorkspaceWrite {
            return policy;
        }
        let extra: Vec<PathBuf> = self
            .folders
            .as_ref()
            .and_then(|f| f.read().ok().map(|f| f.clone()))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|f| crate::platform::paths::canonicalize(&f).ok())
            .filter(|f| !policy.writable.contains(f))
            .collect();
        // After the temp folder and the root, before the settings' roots.
        let at = self.folders_at.min(policy.writable.len());
        policy.writable.splice(at..at, extra);
        policy
    }

    /// The session's temp folder (exported to commands as `TMPDIR`), made on the first call:
    /// a session that runs no command leaves nothing behind, also when its process ends
    /// without dropping it.
    pub fn tmp_dir(&self) -> &Path {
        self.tmp.path()
    }

    /// Whether the policy is enforced.
    pub fn enforcement(&self) -> &Enforcement {
        &self.enforcement
    }

    /// True when commands run inside an enforced sandbox.
    pub fn active(&self) -> bool {
        self.enforcement == Enforcement::Enforced
    }
}

/// The command that runs `program` with `args` under `policy`: as given, or wrapped by the OS
/// backend (macOS: `sandbox-exec` with the policy's Seatbelt profile). Start it with [`spawn`].
pub fn command(
    program: PathBuf,
    args: Vec<std::ffi::OsString>,
    policy: &Policy,
) -> tokio::process::Command {
    let (program, args) = if policy.is_off() {
        (program, args)
    } else {
        crate::platform::sandbox::wrap(program, args, policy)
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args);
    cmd
}

/// Spawns `cmd` (made by [`command`]) under `policy` through the OS backend: on Linux a fresh
/// thread restricts itself (Landlock, then the network filter) and spawns the command, which
/// inherits the restrictions; the thread then ends, so the server is never restricted. On
/// macOS the command already is `sandbox-exec`. `policy.is_off()` spawns directly. Must be
/// called inside a Tokio runtime.
///
/// Errors: the restriction could not be applied (the command is not started), there is no
/// backend here, or the spawn failed.
pub async fn spawn(
    mut cmd: tokio::process::Command,
    policy: &Policy,
) -> std::io::Result<tokio::process::Child> {
    if policy.is_off() {
        return cmd.spawn();
    }
    crate::platform::sandbox::spawn(cmd, policy).await
}

/// Replaces this process with `program args` under `policy` through the OS backend (Linux:
/// this thread restricts itself with the same Landlock ruleset and network filter [`spawn`]
/// gives a child, then `execvp`; macOS: `sandbox-exec` with the policy's profile). For the
/// `pi-lsp sandbox-exec` launcher, which applies a session's sandbox to a command another
/// process (an ACP client's terminal) starts; `configure` sets the command's stdio,
/// environment and folder before the exec. Returns only on failure: a restriction that
/// should apply could not (nothing is run), or the exec failed.
pub fn exec(
    program: PathBuf,
    args: Vec<std::ffi::OsString>,
    policy: &Policy,
    configure: &mut dyn FnMut(&mut std::process::Command),
) -> std::io::Error {
    crate::platform::sandbox::exec(program, args, policy, configure)
}

/// Texts in a failed command's output that point at the sandbox: Landlock and the seccomp
/// filter fail with `EACCES` / `EPERM`.
const FS_DENIALS: &[&str] = &[
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
    "EACCES",
    "EPERM",
];

/// Texts of network failures (network off).
const NET_DENIALS: &[&str] = &[
    "Network is unreachable",
    "Could not resolve host",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Couldn't connect to server",
    "Failed to connect",
    "Connection refused",
    "getaddrinfo",
    "ENETUNREACH",
];

/// The first output line suggesting `policy` made a failed command fail, or `None`.
pub fn likely_denial(output: &str, policy: &Policy) -> Option<String> {
    let mut markers: Vec<&str> = Vec::new();
    if policy.mode != SandboxMode::Off || !policy.network {
        markers.extend(FS_DENIALS);
    }
    if !policy.network {
        markers.extend(NET_DENIALS);
    }
    output
        .lines()
        .find(|l| markers.iter().any(|m| l.contains(m)))
        .map(|l| {
            let l = l.trim();
            match l.char_indices().nth(300) {
                Some((i, _)) => format!("{}…", &l[..i]),
                None => l.to_string(),
            }
        })
}

/// A question to the user: may `tool` run with `arguments` although `reason`?
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRequest {
    /// The tool asking, e.g. `bash`.
    pub tool: String,
    /// The model's tool call id.
    pub tool_call_id: String,
    /// The tool's arguments as the model sent them.
    pub arguments: Value,
    /// Why approval is needed, e.g. `sandbox denied: touch: cannot touch '../x': Permission
    /// denied`.
    pub reason: String,
}

/// The user's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead (this once).
    Allow,
    /// Do not; `reason` is shown to the model when given.
    Reject {
        /// The user's or client's reason.
        reason: Option<String>,
    },
}

/// Asks the user for permission (the editor, a terminal prompt, a test). Implementations
/// answer [`Decision::Reject`] when nobody can be asked; they must not block forever on a
/// client that went away (the caller also stops waiting on abort).
#[async_trait]
pub trait Approver: Send + Sync {
    /// Asks once and returns the decision.
    async fn ask(&self, request: PermissionRequest) -> Decision;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_folders_of_ended_servers_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        // A process that has ended: its pid is no longer a process.
        let (shell, args) = crate::platform::shell::test_shell();
        let mut child = std::process::Command::new(shell)
            .args(args)
            .arg("exit 0")
            .spawn()
            .unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let id = "0d0a6c0e-3f4b-4a53-9b1c-2f1e5f6a7b8c";
        let stale = dir.path().join(format!("pi-lsp-{dead}-{id}"));
        std::fs::create_dir_all(stale.join("nested")).unwrap();
        std::fs::write(stale.join("nested/f"), "x").unwrap();
        let kept = [
            format!("pi-lsp-{}-{id}", std::process::id()), // this process: alive
            format!("pi-lsp-{id}"),                        // the old name, no pid
            format!("pi-lsp-{dead}-not-a-uuid"),
            format!("other-{dead}-{id}"),
        ];
        for k in &kept {
            std::fs::create_dir(dir.path().join(k)).unwrap();
        }
        // A file of that shape is not a folder of ours.
        std::fs::write(
            dir.path()
                .join(format!("pi-lsp-{dead}-{}", &id.replace('0', "1"))),
            "",
        )
        .unwrap();
        assert_eq!(remove_stale_temp_folders(dir.path()), 1);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut want: Vec<String> = kept.to_vec();
        want.push(format!("pi-lsp-{dead}-{}", id.replace('0', "1")));
        want.sort();
        assert_eq!(left, want);
        assert_eq!(remove_stale_temp_folders(dir.path()), 0);
    }

    #[test]
    fn denial_detection_follows_the_policy() {
        let ww = Policy {
            mode: SandboxMode::WorkspaceWrite,
            network: true,
            writable: vec![],
        };
        let out = "ok\ntouch: cannot touch '../x': Permission denied\n";
        assert_eq!(
            likely_denial(out, &ww).as_deref(),
            Some("touch: cannot touch '../x': Permission denied")
        );
        assert_eq!(likely_denial("curl: (7) Failed to connect", &ww), None);
        let net_off = Policy {
            mode: SandboxMode::Off,
            network: false,
            writable: vec![],
        };
        assert_eq!(
            likely_denial("curl: (7) Failed to connect to x", &net_off).as_deref(),
            Some("curl: (7) Failed to connect to x")
        );
        assert_eq!(likely_denial(out, &Policy::unrestricted()), None);
    }

    #[test]
    fn settings_merge_key_by_key_and_kernels_without_support_are_honest() {
        let ws_tmp = tempfile::tempdir().unwrap();
        let ws = ws_tmp.path().to_path_buf();
        std::fs::create_dir_all(ws.join(".pi")).unwrap();
        std::fs::write(
            ws.join(".pi/settings.json"),
            r#"{"sandbox":{"network":false}}"#,
        )
        .unwrap();
        let s = SandboxSettings::for_workspace(&ws);
        assert_eq!(s.network, Some(false));
        let none = Support {
            files: Err("Landlock is not enabled".into()),
            network: Err("seccomp unavailable".into()),
        };
        // Default mode, no kernel support: off, said once; network off asked for: approval.
        let sb = Sandbox::with_support(&ws, &SandboxSettings::default(), &none);
        assert!(
            matches!(sb.enforcement(), Enforcement::Unavailable(w) if w.contains("Landlock is not enabled"))
        );
        let sb = Sandbox::with_support(&ws, &s, &none);
        assert_eq!(
            sb.enforcement(),
            &Enforcement::NeedsApproval(format!(
                "the sandbox (off, network off) cannot be enforced here: network off needs {} (seccomp unavailable)",
                crate::platform::sandbox::NETWORK
            ))
        );
        let explicit = SandboxSettings {
            mode: Some(SandboxMode::ReadOnly),
            ..Default::default()
        };
        let sb = Sandbox::with_support(&ws, &explicit, &none);
        assert!(matches!(sb.enforcement(), Enforcement::NeedsApproval(_)));
        let tmp = sb.tmp_dir().to_path_buf();
        assert!(tmp.is_dir());
        drop(sb);
        assert!(!tmp.exists(), "the temp folder goes with the session");
        // A session's sandboxes share one folder while one of them is alive.
        let a = Sandbox::for_session(&ws, &explicit, "sess-1");
        let b = Sandbox::for_session(&ws, &explicit, "sess-1");
        let other = Sandbox::for_session(&ws, &explicit, "sess-2");
        assert_eq!(a.tmp_dir(), b.tmp_dir());
        assert_ne!(a.tmp_dir(), other.tmp_dir());
        let shared = a.tmp_dir().to_path_buf();
        drop(a);
        assert!(shared.is_dir());
        drop(b);
        assert!(!shared.exists());
        std::fs::remove_dir_all(&ws).unwrap();
    }
}
