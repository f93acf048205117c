//! `pi-ai`: provider-neutral model I/O for pi-lsp (seed §2 "Model I/O and streaming").
//!
//! - [`types`]: messages and blocks whose JSON matches Pi's session files.
//! - [`stream`]: the assistant event stream and the [`stream::MessageBuilder`] adapters drive.
//! - [`api`]: one module per wire format; [`api::stream`] dispatches on `model.api`.
//! - [`models`]: providers, models.json, settings and model selection.
//! - [`transform`]: pairing repair applied to every request.
//!
//! Knows nothing of tools, sessions or editors.

pub mod api;
pub mod models;
pub mod stream;
pub mod transform;
pub mod types;

pub use api::{stream, StreamOptions};
pub use models::{Model, Registry};
pub use stream::{AssistantEvent, AssistantStream};
pub use types::*;
