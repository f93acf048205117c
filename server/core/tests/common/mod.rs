//! Support shared by pi-core's integration tests (each test file includes it with
//! `mod common;`).

/// A temporary folder (its canonical path), removed on drop, also when the test fails.
pub struct Tmp(#[allow(dead_code)] tempfile::TempDir, std::path::PathBuf);

impl std::ops::Deref for Tmp {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.1
    }
}

impl AsRef<std::path::Path> for Tmp {
    fn as_ref(&self) -> &std::path::Path {
        &self.1
    }
}

/// A new temporary folder named `<prefix><random>`.
pub fn tmp_dir(prefix: &str) -> Tmp {
    let d = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    let p = d.path().canonicalize().unwrap();
    Tmp(d, p)
}
