//! The allocator's part in the memory left after a huge message (glibc only).
//!
//! glibc's malloc serves a block of 128 KiB or more with an `mmap` of its own and unmaps it
//! when freed, but freeing such a block also raises that threshold to the block's size (up
//! to 32 MiB, its "dynamic mmap threshold"). After one 8 MB model line every block below 8 MB
//! comes from the malloc arenas instead, where freed space fragmented across the async workers
//! stays resident. Measured over stdio against the real binary (`tests/reliability.rs`,
//! debug build): RSS after three closed runs streaming one 8 MB SSE line each was 155, 147 and
//! 147 MB against 40 MB after a run without the line; with the threshold fixed, 51, 51 and
//! 51 MB.
//!
//! Fixing the threshold takes `mallopt` (foreign code the workspace's `unsafe_code = "forbid"`
//! rules out) or the `MALLOC_MMAP_THRESHOLD_` environment variable, which glibc reads when the
//! process starts. So [`fix_mmap_threshold`], first thing in `main`, starts the server again
//! in place (`exec`: same process id, arguments and stdio, before any thread exists) with
//! the variable set, then takes it out of the environment so the processes the server starts
//! (shell commands, tools) do not inherit it. A threshold the user set (the variable, or
//! `GLIBC_TUNABLES` naming `mmap_threshold`) is left alone; so is any other C library.
//!
//! Starting again costs a second `exec` (the loader, the executable's relocations, the C
//! library's set-up): about 1 ms of CPU of a 5-7 ms start (docs/benchmarks.md). A launcher
//! that can set the environment saves it by starting the server the way the `exec` would:
//! with `MALLOC_MMAP_THRESHOLD_=131072` and `PI_LSP_MMAP_THRESHOLD_SET=1` (the two are then
//! taken out of the environment of the processes the server starts, as after the `exec`).
//! `PI_LSP_MMAP_THRESHOLD_SET=1` alone skips the fix (no `exec`, glibc's dynamic threshold).

/// The fixed mmap threshold: glibc's own starting value (bytes).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: &str = "131072";

/// Set (with the threshold) by the server for the process it becomes, or by a launcher that
/// set the threshold itself (see the module docs).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MARK: &str = "PI_LSP_MMAP_THRESHOLD_SET";

/// Makes glibc's mmap threshold fixed for this process (see the module docs): returns only
/// when it is (after the `exec`), when the user chose their own, or when starting again
/// failed (logged nowhere yet: logging is not set up; the server runs on as it is).
pub fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        const VAR: &str = "MALLOC_MMAP_THRESHOLD_";
        if std::env::var_os(MARK).is_some() {
            // Started again with it: glibc has read it; the children need not.
            std::env::remove_var(MARK);
            std::env::remove_var(VAR);
            return;
        }
        let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
        if std::env::var_os(VAR).is_some() || tunables.contains("mmap_threshold") {
            return;
        }
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let mut args = std::env::args_os();
        let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
        // Only returns on failure.
        let _failed = std::process::Command::new(&exe)
            .arg0(arg0)
            .args(args)
            .env(VAR, MMAP_THRESHOLD)
            .env(MARK, "1")
            .exec();
    }
}
