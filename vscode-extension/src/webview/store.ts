import type { ServerNotification } from "../shared/messages";
import type { AgentEventParams, QueueUpdateParams, UsageParams } from "../shared/wire";
/**
 * The event → view-model reducer of the chat panel: a normalized store fed with exactly the
 * server's notification params (docs/protocol.md: `agent/event`, `agent/queueUpdate`,
 * `agent/usage`, `agent/attention`) and with pages of `agent/session/history`.
 *
 * Shape: `order` (item ids in display order) + `items` (id → item). Ids are derived from the
 * data, never from arrival counters, so that the same data arriving twice lands on the same item:
 * - a message is `<role>:<timestamp>` (Pi stamps every message in ms; history entries and live
 *   events of the same message share it), falling back to the history entry id;
 * - a tool call is `tool:<toolCallId>` (its `toolResult` message merges into the card);
 * - a compaction is `compaction:<firstKeptEntryId>` once it has a result.
 * Events that carry state (`message_start` / `message_end`, `tool_execution_*`, `turn_end`,
 * `agent_end`, queue updates, usage) set values and are idempotent. Text fragments
 * (`*_delta`) carry no sequence number on the wire, so they append; the block's `*_end` and the
 * `message_end` carry the whole content and replace what the fragments built, so the model
 * converges on the server's message whatever the chunking or a duplicated fragment did.
 *
 * The store is plain data and has no DOM: `dirty` collects the ids of items changed since the
 * view last rendered (the view clears it), so a frame renders only what changed.
 */

/** One content block of an assistant message as the view shows it. */
/** A JSON object read off the wire whose Rust type is not generated yet (pi-ai's messages and
 * content blocks, pi-core's events and reports; wire.ts declares them `unknown`): read field
 * by field, never trusted whole. */
export type WireObject = { readonly [key: string]: unknown };

/** `v` when it is a JSON object, else an empty one. */
export function asObject(v: unknown): WireObject {
  return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as WireObject) : {};
}

/** A number field, else `undefined`. */
function num(v: unknown): number | undefined {
  return typeof v === "number" ? v : undefined;
}

/** A string field, else `undefined`. */
function str(v: unknown): string | undefined {
  return typeof v === "string" ? v : undefined;
}

/** The `type` of an `agent/event`'s event, if it has one. */
export function eventType(ev: unknown): string | undefined {
  return str(asObject(ev).type);
}

export interface TextBlock {
  type: "text" | "thinking";
  text: string;
  /** `*_end` (or `message_end`) arrived: the block will not grow any more. */
  done: boolean;
}

/** A user message (also a custom message or a user's own shell command shown as one). */
export interface UserItem {
  kind: "user";
  id: string;
  text: string;
  /** Number of attached images. */
  images: number;
  entryId?: string;
  timestamp?: number;
}

export interface AssistantItem {
  kind: "assistant";
  id: string;
  /** Text and thinking blocks by `contentIndex` (tool calls are their own `tool` items). */
  blocks: (TextBlock | null)[];
  /** `tool:<id>` of the tool calls this message made, in call order. */
  toolIds: string[];
  streaming: boolean;
  stopReason?: string;
  errorMessage?: string;
  model?: string;
  entryId?: string;
  timestamp?: number;
  /** Its error is being retried (`auto_retry_start` after it): the retry's notice says what
   * failed, so the row is not shown (as Pi drops the failed message before retrying). */
  retried?: boolean;
}

export type ToolState = "pending" | "running" | "done" | "error";

export interface ToolItem {
  kind: "tool";
  id: string;
  toolCallId: string;
  toolName: string;
  /** The call's arguments once known (`toolcall_end`, `tool_execution_start`, history). */
  args: unknown;
  /** The argument JSON text as it streams (before `toolcall_end`). */
  argsText: string;
  state: ToolState;
  /** The result's text blocks (the streamed partial result while running). */
  output: string;
  /** Number of image blocks in the result. */
  images: number;
  details?: unknown;
  /** A permission question about this call is open in the panel (the card says "waiting"
   * rather than "running": nothing runs until the user answers). */
  awaiting?: boolean;
}

export interface CompactionItem {
  kind: "compaction";
  id: string;
  state: "running" | "done" | "failed" | "aborted";
  reason?: string;
  tokensBefore?: number;
  summary?: string;
  errorMessage?: string;
}

export interface BranchSummaryItem {
  kind: "branchSummary";
  id: string;
  summary: string;
  fromId?: string;
}

/** The answer of `agent/abort` (docs/protocol.md), shown as a report card. */
export interface AbortReport {
  aborted: boolean;
  runId?: string;
  stoppedToolCalls: { toolCallId: string; toolName: string; args: unknown }[];
  stoppedProcesses: { toolCallId: string; command: string }[];
  appliedEdits: { toolCallId: string; toolName: string; path: string }[];
  queuedMessages: { queueId: string; delivery: string; text: string }[];
}

export interface AbortItem {
  kind: "abort";
  id: string;
  report: AbortReport;
}

export interface BashItem {
  kind: "bash";
  id: string;
  command: string;
  output: string;
  exitCode: number | null;
  cancelled: boolean;
}

/** Anything else: unknown events, extension errors, retries, model changes. */
export interface NoticeItem {
  kind: "notice";
  id: string;
  level: "info" | "warning" | "error";
  text: string;
}

/** What needs the user in the panel (`agent/attention`, docs/protocol.md), shown as a banner
 * until it is handled. */
export interface Attention {
  /** `permission`, `question`, `finished`, `failed`, or a reason this panel does not know. */
  reason: string;
  message: string;
  runId?: string;
}

export type Item =
  | UserItem
  | AssistantItem
  | ToolItem
  | CompactionItem
  | BranchSummaryItem
  | AbortItem
  | BashItem
  | NoticeItem;

/** A queued steering / follow-up message as `agent/queueUpdate` reports it. */
export interface QueueItem {
  queueId: string;
  delivery: string;
  /** `queued` → `delivered` → `consumed`, or `dropped` / `removed`. */
  state: string;
  text: string;
}

export interface Usage {
  contextTokens: number;
  contextWindow: number;
  /** US$ of the whole session file. */
  sessionCost: number;
  turnCost: number;
  sessionTokens: number;
}

export interface Store {
  sessionId: string | null;
  order: string[];
  items: Map<string, Item>;
  /** Whether a run is active (between `agent_start` and `agent_end`). */
  running: boolean;
  runId: string | null;
  /** Whether an `agent_start` / `agent_end` was applied (then `running` is newer than any
   * `agent/state` answer asked for before). */
  runSeen: boolean;
  /** The user asked to stop; cleared at `agent_end`. */
  stopping: boolean;
  /** The assistant message being streamed, if any. */
  streamingId: string | null;
  /** Whether any assistant text, thinking or tool call arrived since the last `agent_start`. */
  streamedSinceStart: boolean;
  /** The running compaction's item id. */
  compactionId: string | null;
  queue: Map<string, QueueItem>;
  usage: Usage | null;
  /** Oldest history entry loaded (the `beforeEntryId` of the next older page). */
  oldestEntryId: string | null;
  /** Whether older history exists beyond what is loaded. */
  hasMore: boolean;
  /** What needs the user now, from `agent/attention` (see {@link applyAttention}); null: nothing. */
  attention: Attention | null;
  /** The panel is hidden (the host's `visibility` messages): what arrives meanwhile was not
   * seen as it happened. */
  hidden: boolean;
  /** Ids changed since the view rendered; `order` changes set `orderChanged`. */
  dirty: Set<string>;
  orderChanged: boolean;
  /** Items whose id changed (`[old, new]`), so the view moves their rows instead of
   * re-creating them: an assistant message is keyed by its `message_start` stamp while it
   * streams and by its final message's stamp (the one history shows) from `message_end` on. */
  renamed: [string, string][];
  /** Bumped on every change (cheap change detection for tests and the view). */
  version: number;
}

export function createStore(sessionId: string | null = null): Store {
  return {
    sessionId,
    order: [],
    items: new Map(),
    running: false,
    runId: null,
    runSeen: false,
    stopping: false,
    streamingId: null,
    streamedSinceStart: false,
    compactionId: null,
    queue: new Map(),
    usage: null,
    oldestEntryId: null,
    hasMore: false,
    attention: null,
    hidden: false,
    dirty: new Set(),
    orderChanged: false,
    renamed: [],
    version: 0,
  };
}

function touch(s: Store, id: string): void {
  s.dirty.add(id);
  s.version++;
}

function put(s: Store, item: Item): void {
  if (!s.items.has(item.id)) {
    s.order.push(item.id);
    s.orderChanged = true;
  }
  s.items.set(item.id, item);
  touch(s, item.id);
}

/** A provider's failed HTTP answer as the server words it, `[status, body]`, or null: Pi 1.6's
 * wording per wire (`400: {error object}` and `400 text` on chat completions, `400 {body}` on
 * Anthropic messages, `<Provider> API error (400): text` on Responses) and the `HTTP 400: {body}`
 * of older session files. Only 4xx and 5xx statuses count. */
export function httpStatus(text: string): [number, string] | null {
  const t = text.trim();
  const m = /^HTTP (\d{3}): ([\s\S]*)$/.exec(t) ?? /^(\d{3}):? ([\s\S]*)$/.exec(t) ?? /^.*? API error \((\d{3})\): ([\s\S]*)$/.exec(t);
  if (!m) return null;
  const status = Number(m[1]);
  return status >= 400 && status <= 599 ? [status, m[2]!] : null;
}

/** A provider's error as a user reads it ({@link httpStatus}): a JSON body (Anthropic's and
 * OpenAI's `{"error": {"message"}}`, an error object `{"message"}`) is its message followed by
 * the status, e.g. `Internal server error (HTTP 500)`. Any other text is returned as it is. */
export function readableError(text: string): string {
  const m = httpStatus(text);
  if (!m || !m[1].trim().startsWith("{")) return text;
  try {
    const body = JSON.parse(m[1]);
    const e = body?.error;
    const message = typeof e === "string" ? e : typeof e?.message === "string" ? e.message : typeof body?.message === "string" ? body.message : null;
    if (message && message.trim()) return `${message.trim()} (HTTP ${m[0]})`;
  } catch {}
  return text;
}

/** The text of Pi content (a string, or blocks whose `text` blocks are joined with newlines). */
export function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  const parts: string[] = [];
  for (const b of content) {
    const { type, text } = asObject(b);
    if (type === "text" && typeof text === "string") parts.push(text);
  }
  return parts.join("\n");
}

function countImages(content: unknown): number {
  if (!Array.isArray(content)) return 0;
  let n = 0;
  for (const b of content) if (asObject(b).type === "image") n++;
  return n;
}

function messageId(message: unknown, fallback: string): string {
  const { role, timestamp } = asObject(message);
  return typeof timestamp === "number" && timestamp > 0 ? `${String(role ?? "message")}:${timestamp}` : fallback;
}

function toolItem(s: Store, toolCallId: string, toolName: string): ToolItem {
  const id = `tool:${toolCallId}`;
  let t = s.items.get(id) as ToolItem | undefined;
  if (!t) {
    t = { kind: "tool", id, toolCallId, toolName, args: undefined, argsText: "", state: "pending", output: "", images: 0 };
    put(s, t);
  }
  return t;
}

/** Replaces an assistant item's blocks with a whole message's content (idempotent). */
function setAssistantContent(s: Store, a: AssistantItem, msg: unknown, done: boolean): void {
  const message = asObject(msg);
  const content: unknown[] = Array.isArray(message.content) ? message.content : [];
  const blocks: (TextBlock | null)[] = [];
  const toolIds: string[] = [];
  content.forEach((block, i) => {
    const b = asObject(block);
    if (b.type === "text") blocks[i] = { type: "text", text: String(b.text ?? ""), done };
    else if (b.type === "thinking") blocks[i] = { type: "thinking", text: String(b.thinking ?? ""), done };
    else {
      blocks[i] = null;
      if (b.type === "toolCall" && typeof b.id === "string") {
        const t = toolItem(s, b.id, String(b.name ?? ""));
        t.args = b.arguments;
        t.argsText = "";
        touch(s, t.id);
        toolIds.push(t.id);
      }
    }
  });
  // Keep a streamed block the final message does not have (never lose text).
  a.blocks = blocks;
  a.toolIds = toolIds;
  if (message.stopReason) a.stopReason = String(message.stopReason);
  if (message.errorMessage) a.errorMessage = String(message.errorMessage);
  else delete a.errorMessage;
  if (message.model) a.model = String(message.model);
  touch(s, a.id);
}

function applyToolResultMessage(s: Store, message: WireObject): void {
  const t = toolItem(s, String(message.toolCallId ?? ""), String(message.toolName ?? ""));
  t.output = contentText(message.content);
  t.images = countImages(message.content);
  t.details = message.details;
  t.state = message.isError ? "error" : "done";
  touch(s, t.id);
}

/** Adds a whole message (live `message_start`/`message_end` or a history entry). */
function applyMessage(s: Store, msg: unknown, entryId: string | undefined, streaming: boolean): string | null {
  const message = asObject(msg);
  const role = message.role;
  const fallback = `entry:${entryId ?? s.order.length}`;
  // Pi 1.6's stored system messages (the prompt and tools a run started with): not part of
  // the conversation a user reads.
  if (role === "system") return null;
  // An extension's hidden message (plan mode's context): the model reads it, the user does not.
  if (role === "custom" && message.display === false) return null;
  if (role === "toolResult") {
    applyToolResultMessage(s, message);
    return `tool:${String(message.toolCallId)}`;
  }
  if (role === "assistant") {
    const id = messageId(message, fallback);
    let a = s.items.get(id) as AssistantItem | undefined;
    if (!a || a.kind !== "assistant") {
      a = { kind: "assistant", id, blocks: [], toolIds: [], streaming, timestamp: num(message.timestamp) };
      put(s, a);
    }
    if (entryId) a.entryId = entryId;
    a.streaming = streaming;
    if (!streaming || a.blocks.length === 0) setAssistantContent(s, a, message, !streaming);
    // Tool cards go right after their message in the order.
    for (const tid of a.toolIds) placeAfter(s, tid, a.id);
    return id;
  }
  if (role === "user" || role === "custom") {
    const id = messageId(message, fallback);
    const prev = s.items.get(id) as UserItem | undefined;
    const item: UserItem = {
      kind: "user",
      id,
      text: contentText(message.content),
      images: countImages(message.content),
      entryId: entryId ?? prev?.entryId,
      timestamp: num(message.timestamp),
    };
    put(s, item);
    return id;
  }
  if (role === "bashExecution") {
    const id = messageId(message, fallback);
    put(s, {
      kind: "bash",
      id,
      command: String(message.command ?? ""),
      output: String(message.output ?? ""),
      exitCode: typeof message.exitCode === "number" ? message.exitCode : null,
      cancelled: Boolean(message.cancelled),
    });
    return id;
  }
  if (role === "branchSummary") {
    const id = messageId(message, fallback);
    put(s, { kind: "branchSummary", id, summary: String(message.summary ?? ""), fromId: str(message.fromId) });
    return id;
  }
  if (role === "compactionSummary") {
    const id = messageId(message, fallback);
    put(s, { kind: "compaction", id, state: "done", summary: String(message.summary ?? ""), tokensBefore: num(message.tokensBefore) });
    return id;
  }
  const id = messageId(message, fallback);
  put(s, { kind: "notice", id, level: "info", text: `${String(role ?? "message")} message` });
  return id;
}

/** Moves `id` (already in `order`) to just after `after` and the tool cards already there. */
function placeAfter(s: Store, id: string, after: string): void {
  const from = s.order.indexOf(id);
  const at = s.order.indexOf(after);
  if (from < 0 || at < 0) return;
  const a = s.items.get(after) as AssistantItem;
  const want = at + 1 + a.toolIds.indexOf(id);
  if (from === want) return;
  s.order.splice(from, 1);
  s.order.splice(from < want ? want - 1 : want, 0, id);
  s.orderChanged = true;
  s.version++;
}

/** Gives an item a new id in place (same position in `order`). */
function rekey(s: Store, item: Item, id: string): void {
  if (item.id === id || s.items.has(id)) return;
  const old = item.id;
  s.items.delete(old);
  item.id = id;
  s.items.set(id, item);
  const i = s.order.indexOf(old);
  if (i >= 0) s.order[i] = id;
  s.renamed.push([old, id]);
  s.dirty.delete(old);
  s.orderChanged = true;
  touch(s, id);
}

function streamingAssistant(s: Store): AssistantItem | null {
  const a = s.streamingId ? (s.items.get(s.streamingId) as AssistantItem | undefined) : undefined;
  return a && a.kind === "assistant" ? a : null;
}

function applyAssistantEvent(s: Store, event: unknown): void {
  const ev = asObject(event);
  const a = streamingAssistant(s);
  if (!a) return;
  const i = Number(ev.contentIndex ?? 0);
  switch (ev.type) {
    case "text_start":
    case "thinking_start": {
      if (!a.blocks[i]) a.blocks[i] = { type: ev.type === "text_start" ? "text" : "thinking", text: "", done: false };
      break;
    }
    case "text_delta":
    case "thinking_delta": {
      const type = ev.type === "text_delta" ? "text" : "thinking";
      let b = a.blocks[i];
      if (!b) b = a.blocks[i] = { type, text: "", done: false };
      if (!b.done) b.text += String(ev.delta ?? "");
      s.streamedSinceStart = true;
      break;
    }
    case "text_end":
    case "thinking_end": {
      a.blocks[i] = { type: ev.type === "text_end" ? "text" : "thinking", text: String(ev.content ?? a.blocks[i]?.text ?? ""), done: true };
      break;
    }
    case "toolcall_start": {
      const t = toolItem(s, String(ev.id ?? ""), String(ev.name ?? ""));
      if (!a.toolIds.includes(t.id)) a.toolIds.push(t.id);
      placeAfter(s, t.id, a.id);
      a.blocks[i] = null;
      s.streamedSinceStart = true;
      break;
    }
    case "toolcall_delta": {
      const tid = a.toolIds[a.toolIds.length - 1];
      const t = tid ? (s.items.get(tid) as ToolItem) : undefined;
      if (t && t.args === undefined) {
        t.argsText += String(ev.delta ?? "");
        touch(s, t.id);
      }
      break;
    }
    case "toolcall_end": {
      const tc = asObject(ev.toolCall);
      const t = toolItem(s, String(tc.id ?? ""), String(tc.name ?? ""));
      t.args = tc.arguments;
      t.argsText = "";
      if (!a.toolIds.includes(t.id)) a.toolIds.push(t.id);
      touch(s, t.id);
      break;
    }
    case "done":
    case "error": {
      const m = ev.message ?? ev.error;
      if (m) setAssistantContent(s, a, m, true);
      break;
    }
    default:
      break;
  }
  touch(s, a.id);
}

/** A run's end (`agent_end`, or `agent_settled` after a retry stopped in its wait: Pi 1.6 sends
 * no run of its own after the `agent_end` that announced the retry). */
function endRun(s: Store): void {
  s.runSeen = true;
  s.running = false;
  s.stopping = false;
  const a = streamingAssistant(s);
  if (a) {
    a.streaming = false;
    a.blocks = a.blocks.map((b) => (b ? { ...b, done: true } : b));
    touch(s, a.id);
  }
  s.streamingId = null;
  // Nothing waits for an answer after the run.
  if (s.attention && isQuestion(s.attention.reason)) setAttention(s, null);
  // No card stays running after the run.
  for (const id of s.order) {
    const it = s.items.get(id);
    if (it?.kind === "tool" && (it.state === "pending" || it.state === "running")) {
      it.state = "error";
      if (!it.output) it.output = "Tool execution was aborted.";
      touch(s, id);
    }
  }
  s.version++;
}

/** Applies one `agent/event` notification's params `{sessionId, runId, event}`. */
export function applyAgentEvent(s: Store, params: AgentEventParams): void {
  const ev = params.event;
  const runId = params.runId || null;
  switch (ev.type) {
    case "agent_start":
      s.runSeen = true;
      s.running = true;
      s.runId = runId;
      s.stopping = false;
      s.streamedSinceStart = false;
      // A new run: what the last one asked for or said is over.
      setAttention(s, null);
      s.version++;
      return;
    case "turn_start":
      return;
    case "message_start": {
      const m = asObject(ev.message);
      if (m.role === "assistant") {
        s.streamingId = applyMessage(s, m, undefined, true);
      } else {
        applyMessage(s, m, undefined, false);
      }
      return;
    }
    case "message_update":
      applyAssistantEvent(s, ev.assistantMessageEvent);
      return;
    case "message_end": {
      const m = asObject(ev.message);
      if (m.role === "assistant") {
        const a = streamingAssistant(s);
        const finalId = messageId(m, a?.id ?? "");
        const known = a && finalId !== a.id ? (s.items.get(finalId) as AssistantItem | undefined) : undefined;
        if (a && known && known.kind === "assistant") {
          // The message is already shown (history loaded during the stream): one row stays.
          s.items.delete(a.id);
          const i = s.order.indexOf(a.id);
          if (i >= 0) s.order.splice(i, 1);
          s.orderChanged = true;
          s.streamingId = null;
          known.streaming = false;
          setAssistantContent(s, known, m, true);
          for (const tid of known.toolIds) placeAfter(s, tid, known.id);
        } else if (a) {
          a.streaming = false;
          rekey(s, a, finalId);
          setAssistantContent(s, a, m, true);
          for (const tid of a.toolIds) placeAfter(s, tid, a.id);
          s.streamingId = null;
        } else {
          applyMessage(s, m, undefined, false);
        }
      } else {
        applyMessage(s, m, undefined, false);
      }
      return;
    }
    case "tool_execution_start": {
      const t = toolItem(s, String(ev.toolCallId ?? ""), String(ev.toolName ?? ""));
      if (t.state === "pending") t.state = "running";
      if (ev.args !== undefined) t.args = ev.args;
      t.argsText = "";
      touch(s, t.id);
      return;
    }
    case "tool_execution_update": {
      const t = toolItem(s, String(ev.toolCallId ?? ""), String(ev.toolName ?? ""));
      if (t.state === "pending" || t.state === "running") {
        t.state = "running";
        t.output = contentText(asObject(ev.partialResult).content);
        touch(s, t.id);
      }
      return;
    }
    case "tool_execution_end": {
      const t = toolItem(s, String(ev.toolCallId ?? ""), String(ev.toolName ?? ""));
      t.state = ev.isError ? "error" : "done";
      const result = asObject(ev.result);
      t.output = contentText(result.content);
      t.images = countImages(result.content);
      t.details = result.details;
      touch(s, t.id);
      return;
    }
    case "turn_end":
      return;
    case "agent_end": {
      // Pi 1.6 ends a run before its automatic retry (`willRetry`): the run goes on.
      if (ev.willRetry === true) return;
      endRun(s);
      return;
    }
    case "compaction_start": {
      if (s.compactionId) return;
      const id = `compaction-run:${runId ?? ""}:${ev.reason ?? ""}`;
      put(s, { kind: "compaction", id, state: "running", reason: str(ev.reason) });
      s.compactionId = id;
      return;
    }
    case "compaction_end": {
      const id = s.compactionId ?? `compaction-run:${runId ?? ""}:${ev.reason ?? ""}`;
      s.compactionId = null;
      const c: CompactionItem = {
        kind: "compaction",
        id,
        reason: str(ev.reason),
        state: ev.result ? "done" : ev.aborted ? "aborted" : "failed",
        tokensBefore: num(asObject(ev.result).tokensBefore),
        summary: str(asObject(ev.result).summary),
        errorMessage: str(ev.errorMessage),
      };
      put(s, c);
      return;
    }
    case "auto_retry_start": {
      // The message that failed is retried: its notice replaces its error row.
      for (let i = s.order.length - 1; i >= 0; i--) {
        const it = s.items.get(s.order[i]!);
        if (it?.kind !== "assistant") continue;
        if (it.stopReason === "error" && !it.retried) {
          it.retried = true;
          touch(s, it.id);
        }
        break;
      }
      // One notice per run, updated by each attempt (not one row per attempt).
      put(s, {
        kind: "notice",
        id: `retry:${runId}`,
        level: "warning",
        text: `Retrying (attempt ${String(ev.attempt)} of ${String(ev.maxAttempts)}) in ${Math.round(Number(ev.delayMs ?? 0) / 1000)} s: ${readableError(String(ev.errorMessage ?? ""))}`,
      });
      return;
    }
    case "auto_retry_end": {
      // The run's retry notice says how it ended; a final failure's error is the answer's own
      // row below it (not said twice).
      const n = Number(ev.attempt ?? 0);
      put(s, {
        kind: "notice",
        id: `retry:${runId}`,
        level: ev.success ? "info" : "warning",
        text: ev.success ? `Retry ${n} succeeded.` : `Gave up after ${n} ${n === 1 ? "retry" : "retries"}.`,
      });
      return;
    }
    case "extension_error":
      put(s, {
        kind: "notice",
        id: `exterr:${runId}:${String(ev.extensionPath)}:${String(ev.event)}:${String(ev.error)}`,
        level: "error",
        text: `Extension ${String(ev.extensionPath)} failed in ${String(ev.event)}: ${String(ev.error)}`,
      });
      return;
    case "agent_settled":
      // Pi 1.6: the harness will not go on by itself; `agent_end` drew the run's end, unless a
      // retry was stopped in its wait (no `agent_end` after the one that announced it).
      if (s.running) endRun(s);
      return;
    default:
      put(s, {
        kind: "notice",
        id: `unknown:${runId}:${s.order.length}:${String(ev.type)}`,
        level: "info",
        text: `Event ${String(ev.type ?? "(no type)")}`,
      });
  }
}

/** Applies `agent/queueUpdate` params `{queueId, delivery, state, text, ...}`. */
export function applyQueueUpdate(s: Store, p: Pick<QueueUpdateParams, "queueId"> & Partial<QueueUpdateParams>): void {
  if (!p.queueId) return;
  const prev = s.queue.get(p.queueId);
  s.queue.set(p.queueId, {
    queueId: p.queueId,
    delivery: p.delivery ?? prev?.delivery ?? "steer",
    state: p.state ?? prev?.state ?? "queued",
    text: p.text ?? prev?.text ?? "",
  });
  s.dirty.add("queue");
  s.version++;
}

/** A message queued by this panel (`agent/prompt` with `streamingBehavior`, `agent/steer`…):
 * shown at once, before the server's `agent/queueUpdate` (which then sets its state). */
export function addQueued(s: Store, queueId: string, delivery: string, text: string): void {
  if (s.queue.has(queueId)) return;
  s.queue.set(queueId, { queueId, delivery, state: "queued", text });
  s.dirty.add("queue");
  s.version++;
}

/** Applies `agent/usage` params. */
export function applyUsage(s: Store, p: UsageParams): void {
  const { turn, session } = p;
  // A response that reported no usage (aborted, failed) says nothing about the context: the
  // meter keeps what the last real answer measured.
  const nothing = turn.totalTokens === 0 && p.contextTokens === 0;
  s.usage = {
    contextTokens: nothing && s.usage ? s.usage.contextTokens : p.contextTokens,
    contextWindow: p.contextWindow,
    sessionCost: session.cost,
    turnCost: turn.cost,
    sessionTokens: session.totalTokens,
  };
  s.dirty.add("usage");
  s.version++;
}

/** Applies an `agent/session/stats` answer to a session just opened (its `agent/usage` came
 * before this panel existed): the context as Pi estimates it and what the session cost. Usage a
 * live answer already reported is newer and stays. */
export function applyStats(s: Store, stats: unknown): void {
  if (s.usage || !stats) return;
  const st = asObject(stats);
  const cu = asObject(st.contextUsage);
  const window = Number(cu?.contextWindow ?? 0);
  if (!(window > 0)) return;
  s.usage = {
    contextTokens: Number(cu?.tokens ?? 0),
    contextWindow: window,
    sessionCost: Number(st.sessionCost ?? st.cost ?? 0),
    turnCost: 0,
    sessionTokens: Number(asObject(st.sessionTokens).total ?? asObject(st.tokens).total ?? 0),
  };
  s.dirty.add("usage");
  s.version++;
}

/** Marks the tool call `toolCallId` as waiting for the user's answer to a permission question
 * (`on`), or not; a call the transcript does not show is left alone. */
export function setAwaiting(s: Store, toolCallId: string, on: boolean): void {
  const t = s.items.get(`tool:${toolCallId}`);
  if (!t || t.kind !== "tool" || !!t.awaiting === on) return;
  t.awaiting = on;
  touch(s, t.id);
}

/** Applies one relayed server notification `{method, params}`; other sessions' are ignored. */
export function applyNotification(s: Store, n: ServerNotification): void {
  const sid = str(asObject(n.params).sessionId);
  if (s.sessionId && sid && sid !== s.sessionId) return;
  if (!s.sessionId && sid && n.method === "agent/event") s.sessionId = sid;
  switch (n.method) {
    case "agent/event":
      applyAgentEvent(s, n.params);
      return;
    case "agent/queueUpdate":
      applyQueueUpdate(s, n.params);
      return;
    case "agent/usage":
      applyUsage(s, n.params);
      return;
    case "agent/attention":
      applyAttention(s, n.params);
      return;
    default:
      return;
  }
}

function isQuestion(reason: string): boolean {
  return reason === "permission" || reason === "question";
}

function setAttention(s: Store, a: Attention | null): void {
  if (s.attention === a) return;
  s.attention = a;
  s.dirty.add("attention");
  s.version++;
}

/**
 * Applies `agent/attention` params `{sessionId, runId?, reason, message}`: what the panel shows
 * as needing the user, and when it stops showing it.
 * - `permission` / `question`: shown until the panel's questions are answered or withdrawn
 *   ({@link questionsAnswered}), or the run ends.
 * - `finished`: shown only when it came while the panel was hidden (a panel in view showed the
 *   run end as it happened), with a marker row at the end of the transcript; until dismissed,
 *   the user types, or the next run starts.
 * - `failed`: shown (and a marker row with the error, unless the last answer's row shows that
 *   error already) until dismissed or the next run starts.
 * - Another reason: shown until dismissed or the next run starts.
 */
export function applyAttention(s: Store, params: unknown): void {
  const p = asObject(params);
  const a: Attention = { reason: String(p.reason ?? ""), message: String(p.message ?? "") };
  if (typeof p.runId === "string") a.runId = p.runId;
  if (a.reason === "finished") {
    if (!s.hidden) return setAttention(s, null);
    put(s, { kind: "notice", id: `attention:${a.runId ?? s.order.length}:finished`, level: "info", text: "Finished while the panel was hidden." });
  } else if (a.reason === "failed" && !lastAnswerShows(s, a.message)) {
    put(s, { kind: "notice", id: `attention:${a.runId ?? s.order.length}:failed`, level: "error", text: `Failed: ${a.message}` });
  }
  setAttention(s, a);
}

/** Whether the last assistant row shows `error` as its error already. */
function lastAnswerShows(s: Store, error: string): boolean {
  for (let i = s.order.length - 1; i >= 0; i--) {
    const it = s.items.get(s.order[i]!);
    if (it?.kind === "assistant") return !!it.errorMessage && !it.retried && (it.errorMessage === error || error.includes(it.errorMessage));
    if (it?.kind === "user") return false;
  }
  return false;
}

/** The panel has no open question any more: a `permission` / `question` attention is handled. */
export function questionsAnswered(s: Store): void {
  if (s.attention && isQuestion(s.attention.reason)) setAttention(s, null);
}

/** The user dismissed the attention banner (or, for `finished`, typed: they are back). */
export function dismissAttention(s: Store, onlyFinished = false): void {
  if (!s.attention || (onlyFinished && s.attention.reason !== "finished")) return;
  if (isQuestion(s.attention.reason)) return; // goes with its question
  setAttention(s, null);
}

/** The panel was hidden (`false`) or shown again. */
export function setVisible(s: Store, visible: boolean): void {
  s.hidden = !visible;
}

/** Records that the user asked to stop (shown at once, before the server answers). */
export function markStopping(s: Store): void {
  if (!s.running) return;
  s.stopping = true;
  s.version++;
}

/** Adds the `agent/abort` answer as a report card (one per run). */
export function applyAbortReport(s: Store, answer: unknown): void {
  // pi-core's AbortReport (not generated yet): its lists read as this panel's AbortReport.
  const report = asObject(answer) as Partial<AbortReport>;
  if (!report.aborted) {
    s.stopping = false;
    s.version++;
    return;
  }
  put(s, {
    kind: "abort",
    id: `abort:${report.runId ?? s.runId ?? s.order.length}`,
    report: {
      aborted: true,
      runId: report.runId,
      stoppedToolCalls: report.stoppedToolCalls ?? [],
      stoppedProcesses: report.stoppedProcesses ?? [],
      appliedEdits: report.appliedEdits ?? [],
      queuedMessages: report.queuedMessages ?? [],
    },
  });
}

/** The user's last prompt text when the run produced nothing yet (to put back in the
 * composer after an abort), else null. */
export function promptToRestore(s: Store): string | null {
  if (s.streamedSinceStart) return null;
  for (let i = s.order.length - 1; i >= 0; i--) {
    const it = s.items.get(s.order[i]!);
    if (!it) continue;
    if (it.kind === "user") return it.text;
    if (it.kind === "assistant" || it.kind === "tool") return null;
  }
  return null;
}

/** An `agent/session/history` entry as read (`type` and `id` are strings; an entry without
 * them gets `""`). */
export function historyEntry(v: unknown): HistoryEntry {
  const o = asObject(v);
  return { ...o, type: String(o.type ?? ""), id: String(o.id ?? "") };
}

/** One entry of `agent/session/history` (Pi v3 session entry). */
export interface HistoryEntry {
  type: string;
  id: string;
  parentId?: string | null;
  timestamp?: string;
  [key: string]: unknown;
}

function applyEntry(s: Store, e: HistoryEntry): string | null {
  switch (e.type) {
    case "message":
      return applyMessage(s, e.message, e.id, false);
    case "custom_message": {
      if (e.display === false) return null;
      const id = `entry:${e.id}`;
      put(s, { kind: "user", id, text: contentText(e.content), images: countImages(e.content), entryId: e.id });
      return id;
    }
    case "compaction": {
      const id = `compaction:${e.firstKeptEntryId ?? e.id}`;
      put(s, { kind: "compaction", id, state: "done", tokensBefore: num(e.tokensBefore), summary: String(e.summary ?? "") });
      return id;
    }
    case "branch_summary": {
      const id = `entry:${e.id}`;
      put(s, { kind: "branchSummary", id, summary: String(e.summary ?? ""), fromId: str(e.fromId) });
      return id;
    }
    case "model_change": {
      const id = `entry:${e.id}`;
      put(s, { kind: "notice", id, level: "info", text: `Model: ${e.provider ?? ""}/${e.modelId ?? ""}` });
      return id;
    }
    case "thinking_level_change": {
      const id = `entry:${e.id}`;
      put(s, { kind: "notice", id, level: "info", text: `Thinking: ${e.thinkingLevel ?? ""}` });
      return id;
    }
    default:
      return null; // labels, session info, custom entries: not part of the transcript
  }
}

/**
 * Applies one page of `agent/session/history` (`{entries, hasMore}`, chronological).
 * `older: false` is the newest page (the leaf's): its items go first and anything already shown
 * (live events that arrived before the answer) keeps its place after them. `older: true`
 * prepends an older page. Loading a page twice changes nothing.
 */
export function applyHistoryPage(s: Store, page: { entries: readonly unknown[]; hasMore: boolean }, older: boolean): void {
  const entries = page.entries.map(historyEntry);
  const before = new Set(s.order);
  const pageIds: string[] = [];
  const seen = new Set<string>();
  const pushId = (id: string) => {
    if (!seen.has(id)) {
      seen.add(id);
      pageIds.push(id);
    }
  };
  let prev: Item | undefined;
  for (const e of entries) {
    const id = applyEntry(s, e);
    if (!id) continue;
    pushId(id);
    const it = s.items.get(id);
    // A failed answer followed at once by another answer was retried (the live view hid it
    // when its retry started): only the last attempt's error is shown.
    if (it?.kind === "assistant" && prev?.kind === "assistant" && prev.stopReason === "error" && !prev.retried) {
      prev.retried = true;
      touch(s, prev.id);
    }
    if (it?.kind === "assistant" || it?.kind === "user") prev = it;
    if (it?.kind === "assistant") for (const t of it.toolIds) pushId(t);
  }
  // Items the page created were appended by `put`; rebuild the order.
  const fresh = pageIds.filter((id) => !before.has(id));
  const freshSet = new Set(fresh);
  const rest = s.order.filter((id) => !freshSet.has(id));
  if (older) s.order = [...fresh, ...rest];
  else {
    // Newest page: page order first, then what was there and is not in the page.
    // Newest page: older history already loaded first, then the page, then live items.
    const pageSet = new Set(pageIds);
    const others = rest.filter((id) => !pageSet.has(id));
    const hasEntry = (id: string) => Boolean((s.items.get(id) as { entryId?: string } | undefined)?.entryId);
    s.order = [...others.filter(hasEntry), ...pageIds, ...others.filter((id) => !hasEntry(id))];
  }
  s.orderChanged = true;
  const first = entries[0];
  if (first && (older || s.oldestEntryId === null)) s.oldestEntryId = first.id;
  if (older || s.oldestEntryId === first?.id) s.hasMore = Boolean(page.hasMore);
  s.version++;
}

/** A comparable snapshot of the model (tests; no Maps, no dirty bookkeeping). */
/** The entries of an `agent/messages` answer (`{messages, entryIds}`) in the shape of
 * `agent/session/history` entries, for servers without paged history. */
export function entriesFromMessages(result: { messages?: readonly unknown[]; entryIds?: readonly string[] }): HistoryEntry[] {
  return (result.messages ?? []).map((message, i) => ({ type: "message", id: result.entryIds?.[i] ?? `m${i}`, message }));
}

export function snapshot(s: Store): unknown {
  return {
    sessionId: s.sessionId,
    running: s.running,
    stopping: s.stopping,
    order: s.order,
    items: s.order.map((id) => s.items.get(id)),
    queue: [...s.queue.values()],
    usage: s.usage,
    hasMore: s.hasMore,
    oldestEntryId: s.oldestEntryId,
  };
}
