//! Persisting a session's events: each completed message becomes a `message` entry as it ends;
//! turn and run ends make the file durable; images replaced after a size refusal are replaced
//! in the file's branch too (written again, [`SessionWriter::replace_images`]).
//!
//! Every failure is returned, including a writer whose lock another thread poisoned by
//! panicking while it appended (an entry may be half written then): the caller tells the user
//! the session is no longer being saved and stops the run. Saving never fails silently.

use std::sync::{Arc, Mutex};

use crate::agent::AgentEvent;
use crate::session::{lock_writer, EntryData, SessionError, SessionWriter};

/// Appends a run's messages to its session file; see the module doc.
pub struct Recorder {
    writer: Arc<Mutex<SessionWriter>>,
}

impl Recorder {
    /// A recorder appending to `writer`.
    pub fn new(writer: Arc<Mutex<SessionWriter>>) -> Self {
        Recorder { writer }
    }

    /// Appends the entry `data` (a delivered custom message or shell output stored as what it
    /// is rather than as a plain user message).
    pub fn record_entry(&self, data: EntryData) -> Result<(), SessionError> {
        let mut w = lock_writer(&self.writer)?;
        w.append(data).map(|_| ())
    }

    /// Records `event`; an error means the session is no longer being saved.
    pub fn record(&self, event: &AgentEvent) -> Result<(), SessionError> {
        if !matches!(
            event,
            AgentEvent::MessageEnd { .. }
                | AgentEvent::TurnEnd { .. }
                | AgentEvent::AgentEnd { .. }
                | AgentEvent::ImagesReplaced { .. }
        ) {
            return Ok(());
        }
        let mut w = lock_writer(&self.writer)?;
        match event {
            AgentEvent::MessageEnd { message } => w.append_message(message).map(|_| ()),
            // The branch written again with the notes (case 18.12), durable before the retry.
            AgentEvent::ImagesReplaced { images } => {
                let notes = images
                    .iter()
                    .map(|i| (i.hash.clone(), i.note.clone()))
                    .collect();
                w.replace_images(&notes)?;
                w.sync()
            }
            _ => w.sync(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_writer_is_an_error_not_silence() {
        let dir_tmp = tempfile::tempdir().unwrap();
        let dir = dir_tmp.path().to_path_buf();
        let writer = SessionWriter::create(&dir, &dir, "p", "m", "off").unwrap();
        let writer = Arc::new(Mutex::new(writer));
        let rec = Recorder::new(writer.clone());
        let end = AgentEvent::MessageEnd {
            message: pi_ai::Message::user_text("hi"),
        };
        rec.record(&end).unwrap();
        let w = writer.clone();
        let _ = std::thread::spawn(move || {
            let _guard = w.lock().unwrap();
            panic!("poison the writer");
        })
        .join();
        let e = rec.record(&end).unwrap_err();
        assert!(
            e.to_string()
                .contains("a writer of this session panicked while appending"),
            "{e}"
        );
        assert!(rec
            .record_entry(EntryData::Custom {
                custom_type: "x".into(),
                data: serde_json::json!(1),
            })
            .is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
