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
] as const;

/** The host's modal question before a panel's `agent/session/rewind`, and its button. */
export const REWIND_CONFIRM = {
  message: "Rewind the session to before this message?",
  detail: "The conversation goes back to there (nothing is deleted: the later turns stay on their branch), and the agent's later changes to files are reverted where you have not changed the file since. Undo rewind puts them back.",
  button: "Rewind",
} as const;

/** A method the panel may call. */
export type PanelMethod = (typeof PANEL_METHODS)[number];

const ALLOWED: ReadonlySet<string> = new Set(PANEL_METHODS);

/** JSON-RPC's "method not found" code, used for a refused panel request. */
export const METHOD_NOT_ALLOWED = -32601;

/** `null` when `method` may be relayed, else the refusal's message (the panel shows it). */
export function checkPanelRequest(method: unknown): string | null {
  if (typeof method === "string" && ALLOWED.has(method)) return null;
  return `the chat panel may not call ${typeof method === "string" ? JSON.stringify(method) : "a method without a name"}; it calls only ${PANEL_METHODS.join(", ")}`;
}
