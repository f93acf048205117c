//! Process trees on Windows: one job object per tree (see the table in `mod.rs`).
//!
//! Unproven here (no Windows target on the development machines): written against
//! `windows-sys` 0.61.2's signatures (`HANDLE = *mut c_void`, `BOOL = i32`); the hosted
//! Windows runner compiles and runs `process::tests` (docs/platforms.md).
// The Win32 calls are FFI: this file is the only place in
// the workspace allowed `unsafe` (checked by `tests/platform_deps.rs`).
#![allow(unsafe_code)]

use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::sync::Arc;

use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JobObjectBasicAccountingInformation,
    JobObjectExtendedLimitInformation, QueryInformationJobObject, SetInformationJobObject,
    TerminateJobObject, JOBOBJECT_BASIC_ACCOUNTING_INFORMATION,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
};
use windows_sys::Win32::System::Threading::{
    GetExitCodeProcess, OpenProcess, CREATE_NEW_PROCESS_GROUP, CREATE_NO_WINDOW,
    PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_SET_QUOTA, PROCESS_TERMINATE,
};

/// `STILL_ACTIVE` (259): the exit code of a process that has not exited.
const STILL_ACTIVE: u32 = 259;
/// `ERROR_ACCESS_DENIED`: the process exists but is not ours to open.
const ERROR_ACCESS_DENIED: i32 = 5;
/// The exit code members of a terminated tree get (what `taskkill /F` gives).
const TERMINATED: u32 = 1;

/// A job object holding a command and everything it starts.
#[derive(Debug, Clone)]
pub struct ProcessTree {
    job: Arc<OwnedHandle>,
    pid: u32,
}

impl PartialEq for ProcessTree {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.job, &other.job)
    }
}

/// A new process group (Ctrl-C / Ctrl-Break of the server's console do not reach it) and no
/// console window of its own.
pub fn prepare(cmd: &mut tokio::process::Command) {
    cmd.creation_flags(CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW);
}

/// `h` owned (closed on drop), or the last OS error when it is null.
fn owned(h: *mut core::ffi::c_void) -> std::io::Result<OwnedHandle> {
    if h.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `h` is a valid handle just returned to us by the OS, owned by nobody else.
    Ok(unsafe { OwnedHandle::from_raw_handle(h) })
}

impl ProcessTree {
    /// A new job (kill-on-close: when the last handle closes, the server having died however
    /// it died, Windows kills every member) with the process `pid` assigned to it.
    ///
    /// Errors: the process cannot be opened or assigned (it exited, or it is in a job that
    /// forbids nesting on a Windows older than 8).
    pub fn adopt(pid: u32) -> std::io::Result<ProcessTree> {
        // SAFETY: plain Win32 calls on handles we own; every pointer points to a live local
        // of the size passed.
        unsafe {
            let job = owned(CreateJobObjectW(std::ptr::null(), std::ptr::null()))?;
            let mut info = JOBOBJECT_EXTENDED_LIMIT_INFORMATION::default();
            info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
            if SetInformationJobObject(
                job.as_raw_handle(),
                JobObjectExtendedLimitInformation,
                (&info as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
                std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            ) == 0
            {
                return Err(std::io::Error::last_os_error());
            }
            let process = owned(OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, 0, pid))?;
            if AssignProcessToJobObject(job.as_raw_handle(), process.as_raw_handle()) == 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(ProcessTree {
                job: Arc::new(job),
                pid,
            })
        }
    }

    /// The pid of the process the tree was started with.
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Terminates every member (`TerminateJobObject`); `false` when the job is already empty.
    pub fn terminate(&self) -> bool {
        if !self.alive() {
            return false;
        }
        // SAFETY: the job handle is owned by `self` and valid.
        unsafe { TerminateJobObject(self.job.as_raw_handle(), TERMINATED) != 0 }
    }

    /// The same as [`ProcessTree::terminate`] (Windows has one way to end a tree).
    pub fn kill(&self) -> bool {
        self.terminate()
    }

    /// True while the job has an active process.
    pub fn alive(&self) -> bool {
        let mut info = JOBOBJECT_BASIC_ACCOUNTING_INFORMATION::default();
        // SAFETY: `info` is a live local of the size passed; the handle is owned by `self`.
        let ok = unsafe {
            QueryInformationJobObject(
                self.job.as_raw_handle(),
                JobObjectBasicAccountingInformation,
                (&mut info as *mut JOBOBJECT_BASIC_ACCOUNTING_INFORMATION).cast(),
                std::mem::size_of::<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION>() as u32,
                std::ptr::null_mut(),
            )
        };
        ok != 0 && info.ActiveProcesses > 0
    }
}

/// Keeps the trees whose job still has an active process.
pub(super) fn retain_live(trees: &mut Vec<ProcessTree>) {
    trees.retain(ProcessTree::alive);
}

/// Always an error on Windows: a process cannot move itself into a job of its own here (the
/// `pi-lsp sandbox-exec` launcher is Unix-only).
pub fn lead_own_group() -> std::io::Result<u32> {
    Err(std::io::Error::other(
        "a process cannot lead its own process tree on Windows",
    ))
}

/// Windows processes end with an exit code, never a signal.
pub fn exit_signal(_status: &std::process::ExitStatus) -> Option<i32> {
    None
}

/// True unless no process has id `pid` (one we may not open counts as alive).
pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: plain Win32 calls; `code` is a live local.
    unsafe {
        let h = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid);
        if h.is_null() {
            return std::io::Error::last_os_error().raw_os_error() == Some(ERROR_ACCESS_DENIED);
        }
        let Ok(process) = owned(h) else {
            return false;
        };
        let mut code = 0u32;
        GetExitCodeProcess(process.as_raw_handle(), &mut code) != 0 && code == STILL_ACTIVE
    }
}
