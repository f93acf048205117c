//! glibc's allocator settings (Linux with glibc only; `memory` says why the server sets one).
//!
//! The one foreign call of the LSP crate: `mallopt(3)`, which has no safe wrapper in the
//! standard library or in `nix`. It takes two integers and touches only the allocator's own
//! parameters, so it cannot break Rust's memory rules; the workspace lint stays `deny` and
//! only this function (and the Windows job-object module of pi-core) allows `unsafe`.

/// Fixes glibc's mmap threshold at `bytes` (`mallopt(M_MMAP_THRESHOLD, bytes)`, which also
/// turns off glibc's dynamic raising of the threshold). Returns whether glibc took it.
#[allow(unsafe_code)]
pub fn set_mmap_threshold(bytes: i32) -> bool {
    // SAFETY: `mallopt` reads two integers and sets an allocator parameter; no pointers, no
    // memory of ours is touched, and glibc serialises it against concurrent malloc calls.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes) == 1 }
}
