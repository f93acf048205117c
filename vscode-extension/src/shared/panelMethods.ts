/**
 * The `agent/*` requests a chat panel (webview) may ask the host to relay to the server — and
 * nothing else. The webview is page script: a bug or injected markup there must not reach
 * methods the panel has no use for (`agent/bash` runs a shell command, `agent/permissions/set`
 * changes the approval policy). The host refuses any other method with a JSON-RPC "method not
 * found" error (`checkPanelRequest`) and logs it. `agent/session/rewind` (it rewrites files) is
 * relayed only after the user confirms it in a modal dialog of the host (`REWIND_CONFIRM`), which
 * page script cannot answer.
 *
 * Adding a panel feature that needs a new server method: add it here (the webview's `request`
 * accepts only these names, so the compiler points at this list).
 */
import type * as W from "./wire";

/** Params and result of each panel method, from the generated wire types (wire.ts, made from the
 * server's Rust types). `unknown`: the server's type lives in a crate whose types are not
 * generated yet (wire.ts says which); the reader narrows it. */
export interface PanelRequests {
  "agent/abort": { params: W.AbortParams; result: unknown };
  "agent/commands": { params: W.CommandsParams; result: W.CommandsResult };
  "agent/compact": { params: W.CompactParams; result: W.CompactResult };
  "agent/continue": { params: W.SessionParams; result: W.ContinueResult };
  "agent/extension/commands": { params: W.SessionParams; result: W.ExtensionCommandsResult };
  "agent/messages": { params: W.SessionParams; result: W.MessagesResult };
  "agent/model/list": { params: Record<string, never>; result: W.ModelListResult };
  "agent/model/set": { params: W.ModelSetParams; result: W.ModelSetResult };
  "agent/plan/get": { params: W.SessionParams; result: W.PlanParams };
  "agent/plan/set": { params: W.PlanSetParams; result: W.PlanParams };
  "agent/prompt": { params: W.PromptParams; result: W.PromptResult };
  "agent/queue/edit": { params: W.QueueEditParams; result: W.QueueEditResult };
  "agent/queue/remove": { params: W.QueueRemoveParams; result: W.QueueRemoveResult };
  /** Result: pi-core's `BranchOutcome` (not generated yet). */
  "agent/session/branch": { params: W.SessionBranchParams; result: unknown };
  "agent/session/history": { params: W.HistoryParams; result: W.HistoryResult };
  /** Result: pi-core's `RewindOutcome` (not generated yet; turns.ts narrows it). */
  "agent/session/rewind": { params: W.RewindParams; result: unknown };
  "agent/session/stats": { params: W.SessionParams; result: W.SessionStatsResult };
  "agent/state": { params: W.SessionParams; result: W.SessionState };
  "agent/thinking/set": { params: W.ThinkingSetParams; result: W.ThinkingResult };
}

export const PANEL_METHODS = [
  "agent/abort",
  "agent/commands",
  "agent/compact",
  "agent/continue",
  "agent/extension/commands",
  "agent/messages",
  "agent/model/list",
  "agent/model/set",
  "agent/plan/get",
  "agent/plan/set",
  "agent/prompt",
  "agent/queue/edit",
  "agent/queue/remove",
  "agent/session/branch",
  "agent/session/history",
  "agent/session/rewind",
  "agent/session/stats",
  "agent/state",
  "agent/thinking/set",
] as const satisfies readonly (keyof PanelRequests)[];

/** The host's modal question before a panel's `agent/session/rewind`, and its button. */
export const REWIND_CONFIRM = {
  message: "Rewind the session to before this message?",
  detail: "The conversation goes back to there (nothing is deleted: the later turns stay on their branch), and the agent's later changes to files are reverted where you have not changed the file since. Undo rewind puts them back.",
  button: "Rewind",
} as const;

/** A method the panel may call. */
export type PanelMethod = (typeof PANEL_METHODS)[number];

/** The list and the typed table name the same methods (a compile error otherwise). */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : never) : never;
const _sameMethods: Same<PanelMethod, keyof PanelRequests> = true;
void _sameMethods;

/** The params of panel method `M`. */
export type PanelParams<M extends PanelMethod> = PanelRequests[M]["params"];
/** The result of panel method `M`. */
export type PanelResult<M extends PanelMethod> = PanelRequests[M]["result"];

const ALLOWED: ReadonlySet<string> = new Set(PANEL_METHODS);

/** JSON-RPC's "method not found" code, used for a refused panel request. */
export const METHOD_NOT_ALLOWED = -32601;

/** Whether `method` is one the panel may call. */
export function isPanelMethod(method: unknown): method is PanelMethod {
  return typeof method === "string" && ALLOWED.has(method);
}

/** `null` when `method` may be relayed, else the refusal's message (the panel shows it). */
export function checkPanelRequest(method: unknown): string | null {
  if (isPanelMethod(method)) return null;
  return `the chat panel may not call ${typeof method === "string" ? JSON.stringify(method) : "a method without a name"}; it calls only ${PANEL_METHODS.join(", ")}`;
}
