//! File operations on Windows (see the table in `mod.rs`). Unproven here (no Windows target
//! on the development machines); only std APIs.

use std::fs::File;
use std::io;
use std::os::windows::fs::FileExt;
use std::path::Path;

/// Reads into `buf` from `offset` (`ReadFile` with an offset; the file cursor moves, which no
/// caller relies on); returns the bytes read (0 at the end).
///
/// Errors: the read failed.
pub fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    file.seek_read(buf, offset)
}

/// Makes `p` and its missing parents (they inherit the parent folder's ACL: under the per-user
/// temp folder, only the user's).
///
/// Errors: a folder could not be made.
pub fn create_private_dir(p: &Path) -> io::Result<()> {
    std::fs::create_dir_all(p)
}

/// Always true: the temp folder these checks run in is the user's own.
pub fn owned_by_me(_m: &std::fs::Metadata) -> bool {
    true
}
