//! `pi-ai`: provider-neutral model I/O for pi-lsp (docs/design.md#model-io-and-streaming "Model I/O and streaming").
//!
//! - [`types`]: messages and blocks whose JSON matches Pi's session files.
//! - [`stream`]: the assistant event stream and the [`stream::MessageBuilder`] adapters drive.
//! - [`api`]: one module per wire format; [`api::stream`] dispatches on `model.api`.
//! - [`models`]: providers, models.json and model selection (defaults passed in).
//! - [`transform`]: provider-neutral replay (pairing repair, thinking per model, tool-call ids
//!   per target) applied to every request.
//! - [`errors`]: typed provider failures, their classification and the retry policy.
//! - [`keys`]: models.json key resolution (in memory) and redaction of secrets.
//! - [`json`]: tolerant JSON for streamed tool arguments and lone surrogates.
//!
//! Knows nothing of tools, sessions or editors.

pub mod api;
pub mod errors;
pub mod json;
pub mod keys;
pub mod models;
pub mod script;
pub mod stream;
pub mod transform;
pub mod types;

pub use api::{next_tools_generation, pi_output_limit, stream, CacheRetention, StreamOptions};
pub use errors::{ProviderError, RetryPolicy};
pub use models::{Api, Model, Registry};
pub use stream::{AssistantEvent, AssistantStream};
pub use types::*;
