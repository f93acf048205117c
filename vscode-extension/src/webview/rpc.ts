/**
 * The webview's line to the extension host (`src/shared/messages.ts`): posting messages, the
 * state VS Code keeps for the webview across reloads, and requests to the server relayed by the
 * host — only the panel's methods (`src/shared/panelMethods.ts`), answered by `response`
 * messages ({@link settle}).
 */
import type { HostToWebview, RpcError, WebviewState, WebviewToHost } from "../shared/messages";
import type { PanelMethod, PanelParams, PanelResult } from "../shared/panelMethods";

interface VsCodeApi {
  postMessage(msg: WebviewToHost): void;
  getState(): WebviewState | undefined;
  setState(s: WebviewState): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

/** VS Code's webview API (acquired once per page). */
export const vscode = acquireVsCodeApi();

/** The webview state kept before this page loaded (a reload, a panel restored). */
export const saved = vscode.getState();

/** Posts a message to the host. */
export function post(msg: WebviewToHost): void {
  vscode.postMessage(msg);
}

let nextRequestId = 1;
const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: RpcError) => void }>();

/** A server request through the host, typed by the generated wire types (panelMethods.ts);
 * rejects with the JSON-RPC error `{code, message}`. */
export function request<M extends PanelMethod>(method: M, params: PanelParams<M>): Promise<PanelResult<M>> {
  const requestId = nextRequestId++;
  post({ type: "request", requestId, method, params });
  // The host answers this id with this method's result (the server's typed answer).
  return new Promise((resolve, reject) => pending.set(requestId, { resolve: (v) => resolve(v as PanelResult<M>), reject }));
}

/** A rejected request's message (a JSON-RPC error's, else the value in words). */
export function errorMessage(e: unknown): string | undefined {
  return e && typeof e === "object" && "message" in e && typeof e.message === "string" ? e.message : undefined;
}

/** A rejected request's JSON-RPC error code, if any. */
export function errorCode(e: unknown): number | undefined {
  return e && typeof e === "object" && "code" in e && typeof e.code === "number" ? e.code : undefined;
}

/** Settles the request a `response` message answers (an unknown id is ignored). */
export function settle(msg: Extract<HostToWebview, { type: "response" }>): void {
  const p = pending.get(msg.requestId);
  if (!p) return;
  pending.delete(msg.requestId);
  if (msg.error) p.reject(msg.error);
  else p.resolve(msg.result);
}

/** A line in the host's "Pi" log. */
export function log(level: "info" | "warn" | "error", message: string): void {
  post({ type: "log", level, message });
}
