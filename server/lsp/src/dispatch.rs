//! The service the transport drives: [`Dispatch`] in front of tower-lsp-server's
//! [`LspService`], so that no message waits for a handler slot.
//!
//! tower-lsp-server reads one message at a time, turns it into a future with `Service::call`,
//! and polls at most `concurrency_level` of those futures at once (4 by default), requests and
//! notifications alike, all on one task. A handler that is pending (a user's shell command, a
//! compaction, an abort waiting for the run to settle) keeps its slot, so with four of them in
//! flight a `didChange` and an `agent/bash/abort` waited behind them, and every edit the agent
//! applied waited out its timeout for the editor's `didChange` (issue 16 §2).
//!
//! Two rules remove the stall:
//! - **Document sync is applied in the read loop.** `didOpen` / `didChange` / `didClose` change
//!   [`crate::documents::Documents`] inside [`Dispatch::call`], which the transport calls in
//!   arrival order before it reads the next message; they never reach a slot. Any request read
//!   after an edit sees it (LSP 3.17 "Request, Notification and Response Ordering").
//! - **Slots are not a limit.** A pending handler is a small future, so the transport is asked
//!   to poll up to [`MAX_IN_FLIGHT`] of them; long work inside a handler runs in its own task
//!   (see `methods/bash.rs`), so a handler in flight costs the shared polling task nothing.
//!
//! Framing and the dispatch loop stay tower-lsp-server's (and [`crate::transport`]'s input
//! guard); owning that loop as ruff's server does is a later step.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::FutureExt;
use tower_lsp_server::jsonrpc::{Request, Response};
use tower_lsp_server::ls_types::{
    DidChangeTextDocumentParams, DidCloseTextDocumentParams, DidOpenTextDocumentParams,
};
use tower_lsp_server::{ExitedError, LanguageServer, LspService};
use tower_service::Service;

use crate::state::State;

/// How many handlers the transport polls at once (`Server::concurrency_level`). Only a bound
/// on memory for a client that floods the server with requests: each pending handler is one
/// boxed future. 4, the library's default, stalled the server with four long requests.
pub const MAX_IN_FLIGHT: usize = 1024;

/// [`LspService`] with document sync applied in the read loop (see the module doc).
pub struct Dispatch<S: LanguageServer> {
    inner: LspService<S>,
    state: Arc<State>,
    /// Where `exit` is reported instead of reaching the library (see [`Dispatch::on_exit`]).
    exit: Option<Box<dyn Fn() + Send + Sync>>,
}

impl<S: LanguageServer> Dispatch<S> {
    /// Wraps the service built by [`crate::server::service`], whose state it is given.
    pub fn new(inner: LspService<S>, state: Arc<State>) -> Dispatch<S> {
        Dispatch {
            inner,
            state,
            exit: None,
        }
    }

    /// Reports the `exit` notification to `report` instead of passing it to the library, whose
    /// own `exit` drops every handler in flight at once (a user's `agent/bash` command would
    /// then neither be waited for nor stored): the process then goes away through
    /// [`crate::shutdown`]. The transport still stops reading after `exit`.
    pub fn on_exit(mut self, report: impl Fn() + Send + Sync + 'static) -> Dispatch<S> {
        self.exit = Some(Box::new(report));
        self
    }
}

impl<S: LanguageServer> Service<Request> for Dispatch<S> {
    type Response = Option<Response>;
    type Error = ExitedError;
    type Future = BoxFuture<'static, Result<Option<Response>, ExitedError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ExitedError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if req.method() == "exit" && req.id().is_none() {
            if let Some(report) = &self.exit {
                self.state.set_accepting_sync(false);
                report();
                return futures::future::ready(Ok(None)).boxed();
            }
        }
        if req.method() == "shutdown" {
            // As the library's own layer does at this point: later notifications are dropped.
            self.state.set_accepting_sync(false);
        }
        if self.state.accepting_sync() && self.apply_sync(&req) {
            return futures::future::ready(Ok(None)).boxed();
        }
        self.inner.call(req)
    }
}

impl<S: LanguageServer> Dispatch<S> {
    /// Applies `req` when it is document sync with well-formed params; `false` leaves it to
    /// the service (which also logs malformed params, as before).
    fn apply_sync(&self, req: &Request) -> bool {
        fn params<T: serde::de::DeserializeOwned>(req: &Request) -> Option<T> {
            serde_json::from_value(req.params()?.clone()).ok()
        }
        if req.id().is_some() {
            return false;
        }
        match req.method() {
            "textDocument/didOpen" => params::<DidOpenTextDocumentParams>(req)
                .map(|p| self.state.did_open(p))
                .is_some(),
            "textDocument/didChange" => match req
                .params()
                .map(|v| serde_json::from_value::<DidChangeTextDocumentParams>(v.clone()))
            {
                Some(Ok(p)) => {
                    self.state.did_change(p);
                    true
                }
                Some(Err(e)) => self.distrust_document(req, &e),
                None => false,
            },
            "textDocument/didClose" => params::<DidCloseTextDocumentParams>(req)
                .map(|p| self.state.did_close(p))
                .is_some(),
            _ => false,
        }
    }

    /// A `didChange` that cannot be read (a content change without `text`, a range that is
    /// not one): logged as a warning, and the document it names, when open, is dropped
    /// ([`crate::documents::Documents::distrust`]) so the next read goes to disk instead of
    /// text that missed a change. Handled here (`true`) when the document is named; a
    /// message naming none goes on to the service, which logs it.
    fn distrust_document(&self, req: &Request, e: &serde_json::Error) -> bool {
        let uri = req
            .params()
            .and_then(|p| p.pointer("/textDocument/uri"))
            .and_then(|u| u.as_str())
            .and_then(|u| u.parse::<tower_lsp_server::ls_types::Uri>().ok());
        let Some(uri) = uri else {
            tracing::warn!("textDocument/didChange ignored: {e}");
            return false;
        };
        if self.state.docs.distrust(&uri) {
            tracing::warn!(
                "textDocument/didChange for {} could not be applied ({e}): its buffer is no longer trusted; tools read the file from disk until the editor sends the whole text again",
                uri.as_str()
            );
        } else {
            tracing::warn!(
                "textDocument/didChange for {} (not open) ignored: {e}",
                uri.as_str()
            );
        }
        true
    }
}
