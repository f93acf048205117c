//! Paths as the OS spells them, and as clients name them in URIs.
//!
//! - [`canonicalize`]: the real path (symlinks followed). On Windows std returns a verbatim
//!   path (`\\?\C:\…`) that other paths never `starts_with` and that a `file:` URI cannot
//!   carry; the `dunce` crate drops the prefix whenever the path means the same without it
//!   (elsewhere it is std's `canonicalize`).
//! - [`simplified`]: the same for a path already canonical.
//! - [`case_insensitive`]: whether two spellings of a path that differ only in case name the
//!   same file by default (Windows, and macOS's default APFS volume; Linux no). Editors send
//!   such spellings: VS Code on Windows writes `file:///c%3A/Users/…` (lower-case drive letter,
//!   colon escaped) for `C:\Users\…`.
//! - [`same_path`] / [`starts_with`]: comparisons that follow [`case_insensitive`] and treat a
//!   drive letter's case as insignificant everywhere.

use std::path::{Path, PathBuf};

/// The real path of `p` without Windows' verbatim prefix where it is not needed.
///
/// Errors: as `std::fs::canonicalize` (the path does not exist, a component is not a folder).
pub fn canonicalize(p: &Path) -> std::io::Result<PathBuf> {
    dunce::canonicalize(p)
}

/// `p` without Windows' verbatim prefix (`\\?\C:\x` → `C:\x`) where it means the same without
/// it; `p` unchanged elsewhere.
pub fn simplified(p: &Path) -> &Path {
    dunce::simplified(p)
}

/// True where file names are compared without regard to case by default (Windows, macOS).
pub fn case_insensitive() -> bool {
    cfg!(any(windows, target_os = "macos"))
}

/// A comparison key for `s`, a path's text: `\\?\` dropped before a drive letter, the drive
/// letter upper-cased, and everything lower-cased when `fold_case`.
pub fn key_of(s: &str, fold_case: bool) -> String {
    let s = s
        .strip_prefix(r"\\?\")
        .filter(|r| has_drive(r))
        .unwrap_or(s);
    let mut out = if fold_case {
        s.to_lowercase()
    } else {
        s.to_string()
    };
    if has_drive(&out) {
        let drive = out[..1].to_ascii_uppercase();
        out.replace_range(..1, &drive);
    }
    out
}

/// `X:` at the start.
fn has_drive(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':'
}

/// `a` and `b` name the same path (by [`key_of`], case folded where [`case_insensitive`]).
pub fn same_path(a: &Path, b: &Path) -> bool {
    a == b
        || key_of(&a.to_string_lossy(), case_insensitive())
            == key_of(&b.to_string_lossy(), case_insensitive())
}

/// `p` is `base` or beneath it, compared component by component as [`same_path`] does.
pub fn starts_with(p: &Path, base: &Path) -> bool {
    if p.starts_with(base) {
        return true;
    }
    let fold = case_insensitive();
    let pc: Vec<String> = p
        .components()
        .map(|c| key_of(&c.as_os_str().to_string_lossy(), fold))
        .collect();
    let bc: Vec<String> = base
        .components()
        .map(|c| key_of(&c.as_os_str().to_string_lossy(), fold))
        .collect();
    pc.len() >= bc.len() && pc[..bc.len()] == bc[..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_drop_the_verbatim_prefix_and_the_drive_letters_case() {
        assert_eq!(key_of(r"\\?\c:\Users\Me\ws", false), r"C:\Users\Me\ws");
        assert_eq!(key_of(r"c:\Users\Me\ws", true), r"C:\users\me\ws");
        assert_eq!(key_of(r"C:\Users\Me\ws", true), r"C:\users\me\ws");
        // A verbatim UNC path keeps its prefix (it means something else without it).
        assert_eq!(
            key_of(r"\\?\UNC\server\share", false),
            r"\\?\UNC\server\share"
        );
        assert_eq!(key_of("/home/Me/ws", false), "/home/Me/ws");
        assert_eq!(key_of("/home/Me/ws", true), "/home/me/ws");
    }

    #[test]
    fn comparisons_follow_the_os() {
        let a = Path::new("/tmp/Work/a.txt");
        let b = Path::new("/tmp/work/A.TXT");
        assert!(same_path(a, a));
        assert_eq!(same_path(a, b), case_insensitive());
        assert!(starts_with(a, Path::new("/tmp/Work")));
        assert_eq!(starts_with(a, Path::new("/tmp/work")), case_insensitive());
        assert!(!starts_with(
            Path::new("/tmp/Workshop"),
            Path::new("/tmp/Work")
        ));
    }

    #[test]
    fn canonical_paths_have_no_verbatim_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let c = canonicalize(dir.path()).unwrap();
        assert!(!c.to_string_lossy().starts_with(r"\\?\"), "{c:?}");
        assert_eq!(canonicalize(&c).unwrap(), c);
        assert_eq!(simplified(&c), c.as_path());
        #[cfg(windows)]
        assert_eq!(
            simplified(Path::new(r"\\?\C:\Windows")),
            Path::new(r"C:\Windows")
        );
    }
}
