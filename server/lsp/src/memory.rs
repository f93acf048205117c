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
//! So [`fix_mmap_threshold`], first thing in `main`, fixes the threshold at glibc's own
//! starting value with `mallopt` ([`crate::platform::malloc`]): no second start of the
//! process (an earlier version set `MALLOC_MMAP_THRESHOLD_` and started itself again, which
//! cost about a third of the start-up in the loader's work), and nothing in the environment
//! of the processes the server starts. A threshold the user set (`MALLOC_MMAP_THRESHOLD_`, or
//! `GLIBC_TUNABLES` naming `mmap_threshold`) is left alone; so is any other C library. A
//! launcher of the earlier version that sets `MALLOC_MMAP_THRESHOLD_` with
//! `PI_LSP_MMAP_THRESHOLD_SET=1` still works: both are taken out of the children's environment.

/// The fixed mmap threshold: glibc's own starting value (bytes).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: i32 = 128 * 1024;

/// Set by a launcher of the earlier version with the threshold variable (see the module docs).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MARK: &str = "PI_LSP_MMAP_THRESHOLD_SET";

/// Makes glibc's mmap threshold fixed for this process (see the module docs), unless the user
/// chose their own. Call it before any thread exists (it edits the environment).
pub fn fix_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const VAR: &str = "MALLOC_MMAP_THRESHOLD_";
        if std::env::var_os(MARK).is_some() {
            // A launcher set it for us: glibc has read it; the children need not.
            std::env::remove_var(MARK);
            std::env::remove_var(VAR);
            return;
        }
        let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
        if std::env::var_os(VAR).is_some() || tunables.contains("mmap_threshold") {
            return;
        }
        crate::platform::malloc::set_mmap_threshold(MMAP_THRESHOLD);
    }
}
