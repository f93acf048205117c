/**
 * The host ↔ webview contract of the pi chat panel, as TypeScript types.
 *
 * The webview speaks the server's own `agent/*` protocol (docs/protocol.md) through the host:
 * the host relays requests as-is and forwards the attached session's notifications unchanged,
 * so the webview's reducer consumes exactly the server's notification params and recorded
 * `agent/event` streams can drive the webview in a plain browser.
 *
 * Rules for changing this file (both engineers): only ADD optional fields or new message types,
 * each with a doc comment; never rename or remove.
 */
import type { AgentEventParams, AttentionParams, PlanParams, QueueUpdateParams, UsageParams } from "./wire";

/** A JSON-RPC notification from the server, relayed unchanged (`params` as the server sent it,
 * typed by the generated wire types, wire.ts). */
export type ServerNotification =
  | { method: "agent/event"; params: AgentEventParams }
  | { method: "agent/queueUpdate"; params: QueueUpdateParams }
  | { method: "agent/usage"; params: UsageParams }
  | { method: "agent/attention"; params: AttentionParams }
  /** The session's plan/todo state, whole (features.ts shows it in the plan strip). */
  | { method: "agent/plan"; params: PlanParams }
  /** Not read by the webview (`agent/ui/notification`, `agent/didWriteDocument`, `$/…`). */
  | { method: "agent/ui/notification" | "agent/didWriteDocument"; params: unknown };

/** A JSON-RPC error as the server (or the host) answered it. */
export interface RpcError {
  code: number;
  message: string;
  data?: unknown;
}

/** One context item attached from the editor (selection, current file, diagnostics). */
export interface ContextItem {
  kind: "selection" | "file" | "diagnostics";
  /** Short label shown on the chip, e.g. `main.rs:10-20`. */
  label: string;
  /** The text that goes into the prompt. */
  text: string;
  /** Workspace-relative or absolute path, when the item is about one file. */
  path?: string;
  /** 1-based inclusive line range of a selection. */
  range?: { startLine: number; endLine: number };
  /** Offered by the `pi.context.activeEditor` setting (the active editor), not attached by the
   * user: shown marked "auto", follows the editor (added 2026-12-05). */
  auto?: boolean;
}

/** What the host tells the webview about the editor side (all optional, extend freely). */
export interface InitCapabilities {
  /** The key binding that queues a follow-up instead of a steer, e.g. `"alt+enter"`. */
  followUpKey?: string;
  /** Whether Escape in the panel aborts the run (default true). */
  escapeAborts?: boolean;
  /** Ask once before aborting a run that has been going for longer than this many ms. */
  confirmAbortAfterMs?: number;
  /** Extra capabilities; the webview ignores keys it does not know. */
  [key: string]: unknown;
}

// ---------------------------------------------------------------------------------------------
// Host → webview
// ---------------------------------------------------------------------------------------------

/** Sent after the webview posts `ready`, and whenever the panel is attached to another session
 * (`sessionId: null`: a new, not yet created session — the first prompt creates it). */
export interface InitMessage {
  type: "init";
  sessionId: string | null;
  workspaceName: string;
  capabilities: InitCapabilities;
}

/** Server notifications for the attached session, in arrival order, batched by the host to at
 * most 60 posts per second; never reordered. */
export interface NotificationsMessage {
  type: "notifications";
  items: ServerNotification[];
}

/** The answer to a webview `request` (exactly one of `result` / `error`). */
export interface ResponseMessage {
  type: "response";
  requestId: number;
  /** The method's result (panelMethods.ts `PanelResult` of the request's method). */
  result?: unknown;
  error?: RpcError;
}

/** A server → client request the webview shows; answered with `serverResponse`. `requestId`
 * is the host's id for it (not the JSON-RPC id). */
export interface ServerRequestMessage {
  type: "serverRequest";
  requestId: number;
  method: "agent/requestPermission" | "agent/ui/request";
  /** The server's params (cards.ts reads them). */
  params: unknown;
}

/** The server request was answered elsewhere (a notification while the panel was hidden) or
 * cancelled (`$/cancelRequest`, e.g. after an abort); the webview removes its card. */
export interface ServerRequestDoneMessage {
  type: "serverRequestDone";
  requestId: number;
  /** Optional: why it is gone, shown on the card's trace (`"answered"`, `"cancelled"`). */
  reason?: "answered" | "cancelled";
}

/** An open edit question went stale: its file changed while the user decides (allowing now
 * would be refused). The webview marks the card at once with `message`. */
export interface ServerRequestStaleMessage {
  type: "serverRequestStale";
  requestId: number;
  message: string;
}

/** Palette commands / keybindings forwarded to the panel. */
export interface CommandMessage {
  type: "command";
  command:
    | "abort"
    | "focusComposer"
    | "newSession"
    | "steerMode"
    | "followUpMode"
    | "compact"
    | "insertText";
  /** For `insertText`: the text inserted at the composer's cursor. */
  text?: string;
}

/** Context attached from the editor; the webview adds the items as chips to the composer. */
export interface ContextMessage {
  type: "context";
  items: ContextItem[];
}

/** The active editor's context under `pi.context.activeEditor` (null: none), sent when it
 * changes; the webview shows it as an "auto" chip that goes with each prompt until the user
 * removes it (added 2026-12-05). */
export interface EditorContextMessage {
  type: "editorContext";
  item: ContextItem | null;
}

/** The host's answer to `pickFiles` (for `@` mentions). */
export interface FilesMessage {
  type: "files";
  query: string;
  items: { path: string; label: string }[];
}

/** Host → webview messages serialised once by the host: `json` is the UTF-8 JSON text of an
 * ARRAY of HostToWebview messages (never nested `packed`), to handle in order exactly as if each
 * had been posted alone. It arrives as a `Uint8Array` (VS Code moves it as raw bytes, with no
 * per-value serialisation); decode with `JSON.parse(new TextDecoder().decode(json))`; a string
 * is JSON text as is. Sent only to a webview whose `ready` listed `"packed"` in `accepts`
 * (added 2026-12-02). */
export interface PackedMessage {
  type: "packed";
  json: Uint8Array | string;
}

/** The session's state (model, thinking level, approval policy, name) was changed outside
 * the panel — a palette command, the status bar's model picker: ask `agent/state` again and
 * update the pickers (added 2026-12-02). */
export interface StateChangedMessage {
  type: "stateChanged";
  sessionId: string;
}

/** The panel was hidden (`visible: false`) or shown again, in order with the notifications: what
 * arrives between the two was not seen as it happened (e.g. a run that finished meanwhile is
 * marked in the panel). Sent only to a webview whose `ready` listed `"visibility"` in
 * `accepts` (added 2026-12-03). */
export interface VisibilityMessage {
  type: "visibility";
  visible: boolean;
}

export type HostToWebview =
  | EditorContextMessage
  | PackedMessage
  | VisibilityMessage
  | StateChangedMessage
  | InitMessage
  | NotificationsMessage
  | ResponseMessage
  | ServerRequestMessage
  | ServerRequestDoneMessage
  | ServerRequestStaleMessage
  | CommandMessage
  | ContextMessage
  | FilesMessage;

// ---------------------------------------------------------------------------------------------
// Webview → host
// ---------------------------------------------------------------------------------------------

/** The webview has loaded and listens; the host answers with `init`. */
export interface ReadyMessage {
  type: "ready";
  /** Optional: host → webview message types beyond the base contract that this webview
   * handles, e.g. `["packed"]` ({@link PackedMessage}); the host sends no other optional type
   * (added 2026-12-02). */
  accepts?: string[];
}

/** A server request relayed as-is (`client.sendRequest(method, params)`) when `method` is one of
 * the panel's ({@link PANEL_METHODS} in panelMethods.ts; any other is refused with a JSON-RPC
 * -32601 error); answered by `response` with the same `requestId` (unique per webview instance,
 * increasing). */
export interface RequestMessage {
  type: "request";
  requestId: number;
  /** Page script names it: the host relays it only when it is a panel method. */
  method: string;
  /** `PanelParams` of the method (the server checks them). */
  params: unknown;
}

/** The panel now shows that session: the host routes that session's notifications to it. */
export interface AttachMessage {
  type: "attach";
  sessionId: string | null;
}

/** The answer to a `serverRequest` (`agent/requestPermission`: `{decision, scope?, reason?}`;
 * `agent/ui/request`: `{value}` | `{confirmed}` | `{cancelled: true}`). */
export interface ServerResponseMessage {
  type: "serverResponse";
  requestId: number;
  result: unknown;
}

/** Open VS Code's diff editor for one agent edit (`preserveFocus: true`). */
export interface OpenDiffMessage {
  type: "openDiff";
  toolCallId: string;
  path: string;
}

/** Open a file (`preserveFocus: true`); `line` is 1-based. */
export interface OpenFileMessage {
  type: "openFile";
  path: string;
  line?: number;
}

/** Ask the host for workspace files matching `query` (fuzzy); answered by `files`. */
export interface PickFilesMessage {
  type: "pickFiles";
  query: string;
}

/** A line for the extension's output channel. */
export interface LogMessage {
  type: "log";
  level: "trace" | "debug" | "info" | "warn" | "error";
  message: string;
}

/** A code block's button (added 2026-12-05): `copy` to the clipboard, `insert` at the active
 * editor's selections (the document is not saved), `newFile` in an untitled document of
 * `language` (the block's fence language, e.g. `ts`; empty when none). */
export interface CodeActionMessage {
  type: "codeAction";
  action: "copy" | "insert" | "newFile";
  code: string;
  language: string;
}

/** An `@file` chosen in the composer: the host answers with a `context` message carrying the
 * file's content (the open buffer's text), or logs why it cannot (added 2026-12-05). */
export interface AttachFileMessage {
  type: "attachFile";
  path: string;
}

export type WebviewToHost =
  | AttachFileMessage
  | CodeActionMessage
  | ReadyMessage
  | RequestMessage
  | AttachMessage
  | ServerResponseMessage
  | OpenDiffMessage
  | OpenFileMessage
  | PickFilesMessage
  | LogMessage;

/** What the webview keeps with `acquireVsCodeApi().setState` (survives hiding and reload). */
export interface WebviewState {
  sessionId: string | null;
  draft: string;
  /** Distance from the bottom of the transcript in px (0: pinned to the bottom). */
  scrollFromBottom: number;
  /** Context chips attached but not sent yet. */
  context?: ContextItem[];
  /** The plan strip is collapsed (added 2026-12-05). */
  planCollapsed?: boolean;
  /** Prompts sent from this panel, oldest first (at most 100), recalled with ↑ (added
   * 2026-12-05). */
  history?: string[];
  /** The session's newest history entries (`{sessionId, entries}`, at most 30 and 200 KB),
   * shown at once after a reload before the server answers (added 2026-12-05). */
  snapshot?: { sessionId: string; entries: unknown[] };
}
