/**
 * The webview's line to the extension host (`src/shared/messages.ts`): posting messages, the
 * state VS Code keeps for the webview across reloads, and requests to the server relayed by the
 * host — only the panel's methods (`src/shared/panelMethods.ts`), answered by `response`
 * messages ({@link settle}).
 */
import type { HostToWebview, WebviewState, WebviewToHost } from "../shared/messages";
import type { PanelMethod } from "../shared/panelMethods";

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
const pending = new Map<number, { resolve: (v: any) => void; reject: (e: { code: number; message: string }) => void }>();

/** A server request through the host; rejects with the JSON-RPC error `{code, message}`. */
export function request<T = any>(method: PanelMethod, params: unknown): Promise<T> {
  const requestId = nextRequestId++;
  post({ type: "request", requestId, method, params });
  return new Promise<T>((resolve, reject) => pending.set(requestId, { resolve, reject }));
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
