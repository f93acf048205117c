//! Linux backend: Landlock for the file rules, a seccomp filter for network off. Everything
//! here restricts the *calling thread* only (Landlock without `TSYNC`, seccomp without
//! `SECCOMP_FILTER_FLAG_TSYNC`, `no_new_privs` is per thread too), so callers use a thread of
//! their own that ends after spawning ([`spawn`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, LandlockStatus, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};

use crate::sandbox::{Policy, SandboxMode, Support};

/// The newest Landlock ABI this code asks for (this crate version knows up to 7's rights).
const TARGET_ABI: ABI = ABI::V7;

/// Device files a shell writes to under every policy.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// Landlock: reads and execution everywhere, everything beneath `policy.writable`, file
/// access to [`DEVICES`]; abstract Unix sockets and signals scoped to the sandbox (ABI 6).
fn landlock(policy: &Policy) -> io::Result<RulesetStatus> {
    let all = AccessFs::from_all(TARGET_ABI);
    let read = AccessFs::from_read(TARGET_ABI);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(other)?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(other)?
        .create()
        .map_err(other)?;
    let root = PathFd::new("/").map_err(other)?;
    ruleset = ruleset
        .add_rule(PathBeneath::new(root, read))
        .map_err(other)?;
    for dev in DEVICES {
        let Ok(fd) = PathFd::new(dev) else { continue };
        let access = if Path::new(dev).is_dir() {
            all
        } else {
            AccessFs::from_file(TARGET_ABI)
        };
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(other)?;
    }
    for dir in &policy.writable {
        match PathFd::new(dir) {
            Ok(fd) => {
                ruleset = ruleset.add_rule(PathBeneath::new(fd, all)).map_err(other)?;
            }
            Err(e) => tracing::debug!("sandbox: skipping writable root {}: {e}", dir.display()),
        }
    }
    let status = ruleset.restrict_self().map_err(other)?;
    Ok(status.ruleset)
}

/// A filter failing `socket(AF_INET | AF_INET6, …)` and `io_uring_setup` (whose socket
/// operations would bypass the first rule) with `EACCES`; everything else allowed.
fn network_filter() -> io::Result<BpfProgram> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| other(format!("seccomp: {e:?}")))?;
    let family = |f: i32| -> io::Result<SeccompRule> {
        SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            f as u64,
        )
        .map_err(other)?])
        .map_err(other)
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(
        libc::SYS_socket,
        vec![family(libc::AF_INET)?, family(libc::AF_INET6)?],
    );
    rules.insert(libc::SYS_io_uring_setup, vec![]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(other)?;
    filter.try_into().map_err(other)
}

/// Applies `policy` to the calling thread. Fails (and the caller must not spawn) when a rule
/// that should apply cannot.
fn restrict_current_thread(policy: &Policy) -> io::Result<()> {
    if policy.mode != SandboxMode::Off {
        match landlock(policy)? {
            RulesetStatus::NotEnforced => {
                return Err(other("Landlock is not enforced by this kernel"));
            }
            RulesetStatus::FullyEnforced | RulesetStatus::PartiallyEnforced => {}
        }
    }
    if !policy.network {
        let prog = network_filter()?;
        seccompiler::apply_filter(&prog).map_err(other)?;
    }
    Ok(())
}

/// What enforces the file rules here.
pub const FILES: &str = "Landlock";
/// What enforces network off here.
pub const NETWORK: &str = "seccomp";

/// The command as given: the restrictions are applied by [`spawn`], not by a wrapper.
pub fn wrap(program: PathBuf, args: Vec<OsString>, _policy: &Policy) -> (PathBuf, Vec<OsString>) {
    (program, args)
}

/// Spawns `cmd` from a fresh thread that first restricts itself (Landlock, then the network
/// filter); the child inherits the restrictions, the thread then ends, so the server is never
/// restricted. Must be called inside a Tokio runtime.
///
/// Errors: a restriction could not be applied (nothing is started), or the spawn failed.
pub async fn spawn(
    mut cmd: tokio::process::Command,
    policy: &Policy,
) -> io::Result<tokio::process::Child> {
    let handle = tokio::runtime::Handle::current();
    let policy = policy.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("pi-sandbox-spawn".into())
        .spawn(move || {
            let _rt = handle.enter();
            let r = restrict_current_thread(&policy).and_then(|()| cmd.spawn());
            let _ = tx.send(r);
        })?;
    rx.await
        .unwrap_or_else(|_| Err(io::Error::other("sandbox spawn thread died")))
}

/// Restricts this process's calling thread under `policy` and replaces the process with
/// `program args` (`execvp`): the command runs under the same Landlock ruleset and network
/// filter [`spawn`] gives a child (exec keeps only the calling thread, with its restrictions).
/// Used by the `pi-lsp sandbox-exec` launcher. Returns only on failure: a restriction that
/// should apply could not (nothing is run), or the exec failed.
pub fn exec(
    program: PathBuf,
    args: Vec<OsString>,
    policy: &Policy,
    configure: &mut dyn FnMut(&mut std::process::Command),
) -> io::Error {
    use std::os::unix::process::CommandExt;
    if let Err(e) = restrict_current_thread(policy) {
        return e;
    }
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    configure(&mut cmd);
    cmd.exec()
}

/// Probes both mechanisms on a throwaway thread (its restrictions die with it).
pub fn probe() -> Support {
    let joined = std::thread::Builder::new()
        .name("pi-sandbox-probe".into())
        .spawn(|| {
            let files = (|| -> Result<String, String> {
                let status = Ruleset::default()
                    .set_compatibility(CompatLevel::BestEffort)
                    .handle_access(AccessFs::from_all(TARGET_ABI))
                    .and_then(|r| r.create())
                    .and_then(|r| r.restrict_self())
                    .map_err(|e| e.to_string())?;
                match (status.ruleset, status.landlock) {
                    (RulesetStatus::NotEnforced, LandlockStatus::NotEnabled) => {
                        Err("Landlock is built into this kernel but not enabled at boot".into())
                    }
                    (RulesetStatus::NotEnforced, LandlockStatus::NotImplemented) => {
                        Err("this kernel has no Landlock".into())
                    }
                    (RulesetStatus::NotEnforced, _) => Err("Landlock is not enforced".into()),
                    (_, LandlockStatus::Available { effective_abi, .. }) => {
                        Ok(format!("Landlock ABI {}", effective_abi as u8))
                    }
                    (_, _) => Err("Landlock status unknown".into()),
                }
            })();
            let network = network_filter()
                .and_then(|p| seccompiler::apply_filter(&p).map_err(other))
                .map(|()| "seccomp".to_string())
                .map_err(|e| e.to_string());
            Support { files, network }
        });
    match joined.map(|h| h.join()) {
        Ok(Ok(s)) => s,
        _ => Support {
            files: Err("sandbox probe failed".into()),
            network: Err("sandbox probe failed".into()),
        },
    }
}
