//! The one lock-poison policy for a session's shared writer (`Arc<Mutex<SessionWriter>>`,
//! held by the session, its recorder, its compactor and its extensions' host).
//!
//! A writer whose lock another thread poisoned by panicking while it held it may have an
//! entry half written and its in-memory tree half updated, so it is neither appended to nor
//! read: [`lock_writer`] turns the poison into a [`SessionError`] that says so, and every
//! caller reports it (the recorder stops the run and the user is told the session is no
//! longer saved; an edit of the file is refused). Two things are done on a poisoned writer
//! anyway, through [`lock_writer_for_close`]: reading its path (fixed when it was opened) and
//! closing it (a sync of what was written and the release of the file's lock, so that another
//! process can open it). A `std` mutex on purpose: `parking_lot`'s has no poison to see.

use std::sync::{Mutex, MutexGuard};

use super::{SessionError, SessionWriter};

/// The writer to append to or read from, or the error of a poisoned one (see the module doc).
pub fn lock_writer(
    writer: &Mutex<SessionWriter>,
) -> Result<MutexGuard<'_, SessionWriter>, SessionError> {
    writer.lock().map_err(|p| SessionError::Io {
        path: p.get_ref().path().to_path_buf(),
        source: std::io::Error::other(
            "a writer of this session panicked while appending; nothing more is saved",
        ),
    })
}

/// The writer, poisoned or not, for its path and [`SessionWriter::close`] only (see the
/// module doc).
pub fn lock_writer_for_close(writer: &Mutex<SessionWriter>) -> MutexGuard<'_, SessionWriter> {
    writer.lock().unwrap_or_else(|p| p.into_inner())
}
