//! File operations whose system calls differ per OS, with one interface:
//!
//! | | Linux, macOS (`unix.rs`) | Windows (`windows.rs`) |
//! |---|---|---|
//! | [`read_at`] / [`read_exact_at`] (positioned reads, several threads on one file) | `pread` | `ReadFile` with an offset (`seek_read`; moves the file cursor, which no caller uses) |
//! | [`create_private_dir`] | mode `0700` | inherits the folder's ACL (the per-user temp folder is private) |
//! | [`owned_by_me`] | the owner's uid is this process's | always true (the per-user temp folder holds only the user's files) |
//! | [`same_file`] | device + inode | volume serial + file index (the `same-file` crate) |
//!
//! Session-file locks are std's `File::lock` / `try_lock` (Rust 1.89): `flock(LOCK_EX)` on
//! Unix, `LockFileEx` on Windows; both are released by the OS when the process dies, however
//! it dies (`session::LockFile`).

use std::fs::File;
use std::io;
use std::path::Path;

#[cfg(unix)]
#[path = "unix.rs"]
mod imp;
#[cfg(windows)]
#[path = "windows.rs"]
mod imp;

pub use imp::{create_private_dir, owned_by_me, read_at};

/// Fills `buf` from `offset` ([`read_at`] until full).
///
/// Errors: the file ends first (`UnexpectedEof`), or a read fails.
pub fn read_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match read_at(file, buf, offset) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// True when `file` (open) is the file now at `path` (not one removed or replaced since it
/// was opened).
pub fn same_file(file: &File, path: &Path) -> bool {
    let (Ok(a), Ok(b)) = (
        file.try_clone().and_then(same_file::Handle::from_file),
        same_file::Handle::from_path(path),
    ) else {
        return false;
    };
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn positioned_reads_and_identity() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::File::create(&p)
            .unwrap()
            .write_all(b"0123456789")
            .unwrap();
        let f = File::open(&p).unwrap();
        let mut buf = [0u8; 4];
        read_exact_at(&f, &mut buf, 3).unwrap();
        assert_eq!(&buf, b"3456");
        assert_eq!(read_at(&f, &mut buf, 8).unwrap(), 2);
        assert_eq!(&buf[..2], b"89");
        assert_eq!(
            read_exact_at(&f, &mut buf, 8).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        assert!(same_file(&f, &p));
        drop(f);
        // A file that replaced the one opened is another file.
        let f = File::open(&p).unwrap();
        let q = dir.path().join("g");
        std::fs::write(&q, "x").unwrap();
        std::fs::rename(&q, &p).unwrap();
        assert!(!same_file(&f, &p));
        assert!(!same_file(&f, &dir.path().join("missing")));
    }

    #[test]
    fn private_folders_are_made_and_owned() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b");
        create_private_dir(&p).unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert!(m.is_dir());
        assert!(owned_by_me(&m));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(m.permissions().mode() & 0o777, 0o700);
        }
    }
}
