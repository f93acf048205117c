//! File operations on Linux and macOS (see the table in `mod.rs`).

use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt};
use std::path::Path;

/// Reads into `buf` from `offset` without moving the file cursor (`pread`); returns the bytes
/// read (0 at the end).
///
/// Errors: the read failed.
pub fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    file.read_at(buf, offset)
}

/// Makes `p` and its missing parents, `p` with mode `0700`.
///
/// Errors: a folder could not be made.
pub fn create_private_dir(p: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(p)
}

/// True when this process's user owns the file `m` describes.
pub fn owned_by_me(m: &std::fs::Metadata) -> bool {
    m.uid() == nix::unistd::getuid().as_raw()
}
