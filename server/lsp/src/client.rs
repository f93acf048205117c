//! The one way the server asks the editor something: [`request`] (and [`request_within`],
//! the same with a time limit) sends a typed server → client request and waits for the
//! answer, withdrawing it with one `$/cancelRequest {id}` (the id it went out with) when the
//! caller's token fires first, when the time limit passes (an extension's dialog with a
//! `timeout`: the editor closes it), or when the caller stops waiting (the future is dropped:
//! a question withdrawn because the run was aborted).
//!
//! Every server → client request goes through here: `workspace/applyEdit`,
//! `agent/saveDocument`, `window/showMessageRequest`, `window/workDoneProgress/create`,
//! `agent/requestPermission`, `agent/ui/request`, `agent/runTool`, `agent/diagnostics`.
//! (tower-lsp-server's own `Client::send_request` never tells the editor when its caller
//! stops waiting, so it is not used.)

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tower_lsp_server::jsonrpc::{self, Id};
use tower_lsp_server::ls_types::notification::Notification;
use tower_lsp_server::ls_types::request::Request;
use tower_lsp_server::Client;
use tower_service::Service;

/// How a server → client request ended.
#[derive(Debug)]
pub enum Reply<T> {
    /// The client's `result`.
    Result(T),
    /// The client's `error`, or a result that does not parse (`ParseError`, saying why).
    Error(jsonrpc::Error),
    /// The token fired first: `$/cancelRequest` was sent and the answer will be ignored.
    Cancelled,
    /// The time limit passed first: `$/cancelRequest` was sent and the answer will be ignored.
    TimedOut,
    /// The connection is gone.
    Gone,
}

impl<T> Reply<T> {
    /// The result, or an error saying why there is none.
    pub fn into_result(self) -> Result<T, jsonrpc::Error> {
        let none = |why: &str| jsonrpc::Error {
            code: jsonrpc::ErrorCode::InternalError,
            message: why.to_string().into(),
            data: None,
        };
        match self {
            Reply::Result(r) => Ok(r),
            Reply::Error(e) => Err(e),
            Reply::Cancelled => Err(none("the request was withdrawn")),
            Reply::TimedOut => Err(none("no answer in time: the request was withdrawn")),
            Reply::Gone => Err(none("no answer: the editor connection is closed")),
        }
    }
}

/// `$/cancelRequest` params with the JSON-RPC id exactly as the request went out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelRequestParams {
    pub id: Id,
}

/// `$/cancelRequest` for a request this server sent.
#[derive(Debug)]
pub enum CancelRequest {}

impl Notification for CancelRequest {
    type Params = CancelRequestParams;
    const METHOD: &'static str = "$/cancelRequest";
}

/// Sends `$/cancelRequest` for `id` when dropped while armed.
struct Withdraw {
    client: Client,
    id: Option<Id>,
}

impl Withdraw {
    /// Sends the cancellation now (and disarms).
    async fn now(&mut self) {
        if let Some(id) = self.id.take() {
            tracing::debug!("withdrawing request {id}");
            self.client
                .send_notification::<CancelRequest>(CancelRequestParams { id })
                .await;
        }
    }
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let client = self.client.clone();
        rt.spawn(async move {
            tracing::debug!("withdrawing request {id}");
            client
                .send_notification::<CancelRequest>(CancelRequestParams { id })
                .await;
        });
    }
}

/// Sends the request `R` with `params` to the client and waits for its answer, or for
/// `cancel` (`None`: only a dropped future withdraws it); see the module doc.
pub async fn request<R: Request>(
    client: &Client,
    params: R::Params,
    cancel: Option<&CancellationToken>,
) -> Reply<R::Result> {
    request_within::<R>(client, params, cancel, None).await
}

/// [`request`] with a time limit: when `limit` (if any) passes before the answer, the request
/// is withdrawn (`$/cancelRequest`) and the reply is [`Reply::TimedOut`].
pub async fn request_within<R: Request>(
    client: &Client,
    params: R::Params,
    cancel: Option<&CancellationToken>,
    limit: Option<std::time::Duration>,
) -> Reply<R::Result> {
    let params = match serde_json::to_value(params) {
        Ok(v) => v,
        Err(e) => {
            return Reply::Error(jsonrpc::Error {
                code: jsonrpc::ErrorCode::InternalError,
                message: format!("{} params: {e}", R::METHOD).into(),
                data: None,
            })
        }
    };
    let id = client.next_request_id();
    let request = jsonrpc::Request::build(R::METHOD)
        .id(id.clone())
        .params(params)
        .finish();
    let mut withdraw = Withdraw {
        client: client.clone(),
        id: Some(id),
    };
    let mut service = client.clone();
    let answer = service.call(request);
    let never = CancellationToken::new();
    let cancel = cancel.unwrap_or(&never);
    let deadline = async {
        match limit {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    let response = tokio::select! {
        biased;
        _ = cancel.cancelled() => {
            withdraw.now().await;
            return Reply::Cancelled;
        }
        r = answer => r,
        _ = deadline => {
            tracing::info!("{} not answered within {limit:?}; withdrawn", R::METHOD);
            withdraw.now().await;
            return Reply::TimedOut;
        }
    };
    withdraw.id = None;
    let Ok(Some(response)) = response else {
        return Reply::Gone;
    };
    match response.into_parts().1 {
        Ok(v) => match serde_json::from_value(v) {
            Ok(r) => Reply::Result(r),
            Err(e) => Reply::Error(jsonrpc::Error {
                code: jsonrpc::ErrorCode::ParseError,
                message: format!("the answer to {} does not parse: {e}", R::METHOD).into(),
                data: None,
            }),
        },
        Err(e) => Reply::Error(e),
    }
}
