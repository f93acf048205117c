//! Settings' `images.blockImages` as Pi 1.6 applies it: the `convertToLlm` wrapper its
//! `createAgentSession` gives the agent (`core/sdk.js`) replaces, in every request, each image
//! block of a user message or tool result by the text [`IMAGE_BLOCKED_TEXT`], and leaves out
//! such a text right after another one (`Dedupe consecutive "Image reading is disabled."
//! texts`): a message of three images sends one note. Only requests of the agent loop go
//! through it (a summary request serialises text only); messages whose content is a string
//! and messages without images go as they are; the session and the run keep the images.
//!
//! Here the request is built from the run's own messages, lent to it ([`super::Run`]): the
//! contents holding images are swapped for their blocked form while the request is built and
//! swapped back after ([`block`], [`restore`]); no image is copied.

use pi_ai::{ContentBlock, Message, UserContent};

use crate::agent::IMAGE_BLOCKED_TEXT;

/// The contents [`block`] took out: each message's index and its blocks as they were.
pub(super) type Taken = Vec<(usize, Vec<ContentBlock>)>;

/// The blocks of `m` a blocked image can be in: a user message's blocks, a tool result's.
fn blocks_mut(m: &mut Message) -> Option<&mut Vec<ContentBlock>> {
    match m {
        Message::User(u) => match &mut u.content {
            UserContent::Blocks(b) => Some(b),
            UserContent::Text(_) => None,
        },
        Message::ToolResult(r) => Some(&mut r.content),
        _ => None,
    }
}

/// Whether `b` is the text [`IMAGE_BLOCKED_TEXT`].
fn is_note(b: &ContentBlock) -> bool {
    matches!(b, ContentBlock::Text(t) if t.text == IMAGE_BLOCKED_TEXT)
}

/// Pi 1.6's replacement of one message's blocks: each image by [`IMAGE_BLOCKED_TEXT`], then
/// a text [`IMAGE_BLOCKED_TEXT`] left out when the block before it (after the replacement) is
/// one too.
fn blocked(blocks: &[ContentBlock]) -> Vec<ContentBlock> {
    let mapped: Vec<ContentBlock> = blocks
        .iter()
        .map(|b| match b {
            ContentBlock::Image(_) => ContentBlock::text(IMAGE_BLOCKED_TEXT),
            other => other.clone(),
        })
        .collect();
    let mut out = Vec::with_capacity(mapped.len());
    let mut previous_note = false;
    for b in mapped {
        let note = is_note(&b);
        if !(note && previous_note) {
            out.push(b);
        }
        previous_note = note;
    }
    out
}

/// Puts the blocked form in place of every content of `messages` holding an image; returns
/// what it took out, for [`restore`].
pub(super) fn block(messages: &mut [Message]) -> Taken {
    let mut taken = Vec::new();
    for (i, m) in messages.iter_mut().enumerate() {
        let Some(b) = blocks_mut(m) else { continue };
        if !b.iter().any(|b| matches!(b, ContentBlock::Image(_))) {
            continue;
        }
        let replaced = blocked(b);
        taken.push((i, std::mem::replace(b, replaced)));
    }
    taken
}

/// Puts back what [`block`] took out of the same `messages`.
pub(super) fn restore(messages: &mut [Message], taken: Taken) {
    for (i, original) in taken {
        if let Some(b) = messages.get_mut(i).and_then(blocks_mut) {
            *b = original;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pi_ai::{ImageContent, ToolResultMessage, UserMessage};

    fn image() -> ContentBlock {
        ContentBlock::Image(ImageContent {
            data: "AAAA".into(),
            mime_type: "image/png".into(),
        })
    }

    /// Pi 1.6's wrapper on each shape: images become the note, a note right after a note is
    /// left out (also a text that was the note already), a string content and an assistant
    /// message are untouched; restoring gives back the messages as they were.
    #[test]
    fn images_become_one_note_per_run_and_come_back() {
        let t = ContentBlock::text;
        let user = |content| {
            Message::User(UserMessage {
                content,
                timestamp: 1,
            })
        };
        let result = |content| {
            Message::ToolResult(ToolResultMessage {
                tool_call_id: "c".into(),
                tool_name: "read".into(),
                content,
                details: None,
                is_error: false,
                timestamp: 2,
            })
        };
        let original = vec![
            user(UserContent::Blocks(vec![
                t("look"),
                image(),
                image(),
                t("and"),
                image(),
            ])),
            user(UserContent::Text("plain".into())),
            result(vec![t("Read image file [image/png]"), image()]),
            result(vec![t(IMAGE_BLOCKED_TEXT), image(), t("x")]),
            result(vec![t("no image")]),
        ];
        let mut messages = original.clone();
        let taken = block(&mut messages);
        assert_eq!(
            messages,
            vec![
                user(UserContent::Blocks(vec![
                    t("look"),
                    t(IMAGE_BLOCKED_TEXT),
                    t("and"),
                    t(IMAGE_BLOCKED_TEXT),
                ])),
                user(UserContent::Text("plain".into())),
                result(vec![
                    t("Read image file [image/png]"),
                    t(IMAGE_BLOCKED_TEXT)
                ]),
                result(vec![t(IMAGE_BLOCKED_TEXT), t("x")]),
                result(vec![t("no image")]),
            ]
        );
        assert_eq!(taken.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0, 2, 3]);
        restore(&mut messages, taken);
        assert_eq!(messages, original);
    }
}
