/**
 * The chat panel (webview side). Speaks `src/shared/messages.ts` with the extension host and,
 * through it, the server's `agent/*` protocol: notifications go into the normalized store
 * (`store.ts`), and one animation frame after a change renders what changed (`transcript.ts`,
 * `rows.ts`). The composer, the queue, the request cards and the header are their own DOM that
 * no stream update touches (typing stays fast while text streams).
 *
 * Nothing runs while nothing changes: no intervals, no polling; a frame is requested only when
 * the store or the scroll position changed.
 */
import "./webview.css";
import type { HostToWebview, WebviewToHost, WebviewState, ContextItem, InitCapabilities } from "../shared/messages";
import type { PanelMethod } from "../shared/panelMethods";
import {
  createStore,
  applyNotification,
  applyHistoryPage,
  applyStats,
  applyAbortReport,
  markStopping,
  setAwaiting,
  addQueued,
  promptToRestore,
  applyQueueUpdate,
  entriesFromMessages,
  questionsAnswered,
  dismissAttention,
  setVisible,
  type Attention,
  type Store,
  type QueueItem,
} from "./store";
import { Transcript } from "./transcript";
import { permissionCard, uiCard, pressShortcut } from "./cards";
import { renderStats, MarkdownView, warmUpSteps } from "./markdown";
import { deliberate, accessKeyAllowed } from "./deliberate";
import { RecoveryBar, PromptHistory } from "./recovery";
import { installCodeActions } from "./codeblocks";
import { takeSnapshot, type Snapshot } from "./snapshot";
import { PlanView, isPlanState, isPlanQuestion, planQuestionCard, type PlanState } from "./plan";

interface VsCodeApi {
  postMessage(msg: WebviewToHost): void;
  getState(): WebviewState | undefined;
  setState(s: WebviewState): void;
}
declare function acquireVsCodeApi(): VsCodeApi;

const vscode = acquireVsCodeApi();
const PAGE = 50;

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function post(msg: WebviewToHost): void {
  vscode.postMessage(msg);
}

// ---- requests to the server through the host ------------------------------------------------
let nextRequestId = 1;
const pending = new Map<number, { resolve: (v: any) => void; reject: (e: { code: number; message: string }) => void }>();
function request<T = any>(method: PanelMethod, params: unknown): Promise<T> {
  const requestId = nextRequestId++;
  post({ type: "request", requestId, method, params });
  return new Promise<T>((resolve, reject) => pending.set(requestId, { resolve, reject }));
}
function log(level: "info" | "warn" | "error", message: string): void {
  post({ type: "log", level, message });
}

// ---- state -------------------------------------------------------------------------------
const saved = vscode.getState();
let store: Store = createStore(saved?.sessionId ?? null);
let capabilities: InitCapabilities = {};
let contextItems: ContextItem[] = saved?.context ?? [];
let images: { data: string; mimeType: string; name: string }[] = [];
let mode: "steer" | "followUp" = "steer";
let loadingOlder = false;
let models: any[] = [];
let currentModel: any = null;
let pendingModel: string | null = null;
let commandsCache: { name: string; description?: string }[] | null = null;
let firstInit = true;
/** The session's last screen kept for a reload (snapshot.ts). */
let lastScreen: Snapshot | null = saved?.snapshot && saved.snapshot.sessionId === saved.sessionId ? saved.snapshot : null;
/** The session whose snapshot the store shows until the server's page replaces it. */
let showingSnapshot: string | null = null;

let savedFromBottom = 0;
function saveState(): void {
  savedFromBottom = transcript.atBottom ? 0 : transcript.fromBottom();
  vscode.setState({ sessionId: store.sessionId, draft: input.value, scrollFromBottom: savedFromBottom, context: contextItems, planCollapsed: plan.el.classList.contains("collapsed"), history: history.items, ...(lastScreen ? { snapshot: lastScreen } : {}) });
}

// ---- layout --------------------------------------------------------------------------------
const app = el("div", "app");
document.body.append(app);

const header = el("div", "header");
const modelSelect = el("select", "model-select");
modelSelect.setAttribute("aria-label", "Model");
const thinkingSelect = el("select", "thinking-select");
thinkingSelect.setAttribute("aria-label", "Thinking level");
const meter = el("div", "meter");
meter.setAttribute("role", "meter");
meter.setAttribute("aria-label", "Context used");
const meterBar = el("div", "meter-bar");
const meterFill = el("div", "meter-fill");
meterBar.append(meterFill);
const meterText = el("span", "meter-text", "ctx –");
meter.append(meterBar, meterText);
const statusText = el("span", "status", "idle");
statusText.setAttribute("role", "status");
// "+" as in the view's title bar (a word would not fit beside the meter in a narrow side bar).
const newButton = el("button", "icon new-session", "+");
newButton.type = "button";
newButton.title = "New session";
newButton.setAttribute("aria-label", "New session");
const compactButton = el("button", "icon", "Compact");
compactButton.type = "button";
compactButton.title = "Compact the context";
// Two rows (a side bar is narrow): the pickers, then the meter, the state and the actions.
const headerTop = el("div", "header-row");
const headerBottom = el("div", "header-row");
headerTop.append(modelSelect, thinkingSelect);
const headerState = el("div", "header-state");
const headerActions = el("div", "header-actions");
headerState.append(meter, statusText);
headerActions.append(compactButton, newButton);
headerBottom.append(headerState, headerActions);
header.append(headerTop, headerBottom);

/** What needs the user (`agent/attention`, store.ts `applyAttention`): a banner under the
 * header until it is handled. */
const attentionBar = el("div", "attention");
attentionBar.hidden = true;
attentionBar.setAttribute("role", "status");
const attentionTitle = el("span", "attention-title");
const attentionText = el("span", "attention-text");
const attentionButton = el("button", "link attention-action");
attentionButton.type = "button";
attentionBar.append(attentionTitle, attentionText, attentionButton);
attentionButton.addEventListener("click", () => {
  const a = store.attention;
  if (a && (a.reason === "permission" || a.reason === "question")) {
    // The user's own click: the open question takes focus (the card, not one of its answers:
    // the next key typed must not answer it, deliberate.ts); Tab reaches its answers.
    const b = cards.querySelector<HTMLElement>(".card[data-request-id]:not(.answered)");
    if (b) b.tabIndex = -1;
    b?.scrollIntoView({ block: "nearest" });
    b?.focus();
    return;
  }
  dismissAttention(store);
  schedule();
});

const main = el("div", "main");
const transcript = new Transcript(main, { openDiff: (toolCallId, path) => post({ type: "openDiff", toolCallId, path }), openFile: (path, line) => post({ type: "openFile", path, ...(line ? { line } : {}) }) }, () => {
  scrolled = true;
  schedule();
});
installCodeActions(main, post);
const empty = el("div", "empty", "Ask pi anything about this workspace. Enter sends; while it runs, Enter steers and Alt+Enter queues a follow-up; Esc stops.");
main.append(empty);
// Scrolled up (reading), a way back to the end: the view no longer follows the answer there.
const jumpButton = el("button", "jump-latest", "↓");
jumpButton.type = "button";
jumpButton.title = "Scroll to the latest";
jumpButton.setAttribute("aria-label", "Scroll to the latest message");
jumpButton.hidden = true;
main.append(jumpButton);
jumpButton.addEventListener("click", () => {
  transcript.restore(0);
  jumpButton.hidden = true;
  scrolled = true;
  schedule();
});

/** The prompt just sent, shown at once under the transcript until the server's user message
 * (its row) arrives: the answer to Enter is immediate even when the server takes a moment. */
const sending = el("div", "sending");
sending.hidden = true;
const sendingText = el("div", "user-text");
const sendingMeta = el("div", "user-meta", "Sending…");
sending.append(sendingText, sendingMeta);
/** The newest user row when `sending` was shown (it goes when another one is there). */
let sendingAfter: string | null = null;
/** Open permission questions of this panel: request id → the tool call they are about. */
const awaitingCalls = new Map<number, string>();
/** Every question (permission or extension UI) open in this panel: the header says the run
 * waits for the user. */
const openQuestions = new Set<number>();

/** The id of the newest user row of the transcript (null: none). */
function lastUserId(): string | null {
  for (let i = store.order.length - 1; i >= 0; i--) {
    const id = store.order[i]!;
    if (store.items.get(id)?.kind === "user") return id;
  }
  return null;
}

function showSending(text: string): void {
  sendingAfter = lastUserId();
  sendingText.textContent = text;
  sending.hidden = false;
  empty.hidden = true;
  setText(statusText, "Sending…");
}

function hideSending(): void {
  if (sending.hidden) return;
  sending.hidden = true;
  sendingText.textContent = "";
  empty.hidden = store.order.length > 0;
  renderStatus();
}

const cards = el("div", "cards");
cards.setAttribute("aria-live", "polite");
const queueList = el("ul", "queue");
queueList.setAttribute("aria-label", "Queued messages");

const composer = el("div", "composer");
const chips = el("div", "chips");
const input = el("textarea", "input");
input.rows = 3;
input.placeholder = "Ask pi… (@ for files, / for commands)";
input.setAttribute("aria-label", "Message");
const popup = el("ul", "popup");
popup.setAttribute("role", "listbox");
popup.hidden = true;
const controls = el("div", "controls");
const modeText = el("span", "mode");
const sendButton = el("button", "primary send", "Send");
sendButton.type = "button";
const stopButton = el("button", "secondary stop", "Stop");
stopButton.type = "button";
stopButton.title = "Stop the run (Esc)";
controls.append(modeText, stopButton, sendButton);
composer.append(chips, popup, input, controls);
// The plan strip (plan.ts) above the questions and the composer; its switch in the header.
const plan = new PlanView(
  (enabled) => request<PlanState>("agent/plan/set", { sessionId: store.sessionId, enabled }),
  saved?.planCollapsed ?? false,
  () => saveState(),
  (m) => showError(m),
);
headerActions.prepend(plan.toggle);
// Retry / Continue and ↑ recall (recovery.ts).
const history = new PromptHistory(saved?.history);
const recovery = new RecoveryBar({
  continueRun: () => request("agent/continue", { sessionId: store.sessionId }),
  composer: () => input.value,
  setComposer: (t) => {
    input.value = t;
    saveState();
  },
  showError: (m) => showError(m),
});
app.append(header, attentionBar, main, sending, recovery.el, plan.el, cards, queueList, composer);

input.value = saved?.draft ?? "";

// ---- frame scheduling ----------------------------------------------------------------------
let frame = 0;
let timer: ReturnType<typeof setTimeout> | 0 = 0;
let lastRenderAt = -Infinity;
/** Streaming text alone is revealed every STREAM_MS at most (10 renders/s). Most of a
 * render's cost is fixed (the tail's Markdown again, layout, paint, commit), so how often it
 * renders is what a stream costs; the pause grows (up to STREAM_MAX_MS) with
 * - what a render costs: STREAM_COST_FACTOR × the last streaming render's time, so a costly
 *   tail (a long code block being written) or a busy machine slows the reveal, not the panel;
 * - how fast text arrives beyond anyone's reading: above FAST_CHARS_PER_S the pause scales with
 *   the rate, up to STREAM_MAX_MS: at 500 deltas/s (~10,000 characters a second, 50 times
 *   reading speed) 2.5 renders/s. A render costs about 10 ms whatever it adds (layout of the
 *   row, paint, commit), so at 5 renders/s such a stream took 0.17–0.22 ms of main thread per
 *   delta (the VP2 bound is 0.2); at 2.5 renders/s it takes about 0.10 ms. A stream at reading
 *   speed (below FAST_CHARS_PER_S) still renders every STREAM_MS.
 * Anything else (a new row, a tool card, the status, a scroll) renders in the next frame.
 * Between two streaming renders the page waits on a timer, not on animation frames: a frame
 * requested only to wait still runs the browser's frame (style, paint, commit). */
const STREAM_MS = 100;
const STREAM_MAX_MS = 400;
const STREAM_COST_FACTOR = 16;
const FAST_CHARS_PER_S = 2000;
let streamPause = STREAM_MS;
/** Characters of the streaming message at the last streaming render (for its rate). */
let streamedChars = -1;

/** The text and thinking characters of the streaming message so far. */
function streamingChars(): number {
  const a = store.streamingId ? store.items.get(store.streamingId) : undefined;
  if (!a || a.kind !== "assistant") return 0;
  let n = 0;
  for (const b of a.blocks) if (b) n += b.text.length;
  return n;
}
/** Whether the only change since the last render is the streaming message's text. */
function onlyStreaming(): boolean {
  return store.dirty.size === 1 && store.streamingId !== null && store.dirty.has(store.streamingId) && !store.orderChanged && !scrolled;
}
function schedule(): void {
  if (frame) return;
  const streaming = onlyStreaming();
  if (timer) {
    if (streaming) return;
    clearTimeout(timer);
    timer = 0;
  }
  // Streaming text within the pause: wait on the timer without a frame.
  if (streaming && waitFor(performance.now())) return;
  frame = requestAnimationFrame(onFrame);
}
/** Starts the pause timer if the streaming pause has not passed at `now`; returns whether. */
function waitFor(now: number): boolean {
  const wait = streamPause - (now - lastRenderAt);
  if (wait <= 0) return false;
  // The frame after the timer is about a frame later: wake that much early.
  timer = setTimeout(() => {
    timer = 0;
    frame = requestAnimationFrame(onFrame);
  }, Math.max(0, wait - 12));
  return true;
}
function onFrame(now: number): void {
  frame = 0;
  const streaming = onlyStreaming();
  if (streaming && waitFor(now)) return;
  const since = now - lastRenderAt;
  lastRenderAt = now;
  scrolled = false;
  const t0 = performance.now();
  renderFrame();
  if (streaming) {
    const chars = streamingChars();
    const rate = streamedChars >= 0 && since > 0 && since < 1000 ? ((chars - streamedChars) * 1000) / since : 0;
    streamedChars = chars;
    streamPause = Math.min(STREAM_MAX_MS, Math.max(STREAM_MS, STREAM_COST_FACTOR * (performance.now() - t0), (STREAM_MS * rate) / FAST_CHARS_PER_S));
  } else {
    streamedChars = -1;
    streamPause = STREAM_MS;
  }
}
let scrolled = false;

let lastVersion = -1;
let renderCount = 0;
function renderFrame(): void {
  renderCount++;
  transcript.render(store);
  // Pinned to the bottom the saved position stays 0; scrolled up, content growing below moves
  // the distance from the bottom (the webview state keeps it for a reload).
  if (!transcript.atBottom ? Math.abs(transcript.fromBottom() - savedFromBottom) >= 1 : savedFromBottom !== 0) saveState();
  if (!sending.hidden && lastUserId() !== sendingAfter) hideSending();
  empty.hidden = store.order.length > 0 || !sending.hidden;
  const jump = !transcript.atBottom && store.order.length > 0;
  if (jumpButton.hidden === jump) jumpButton.hidden = !jump;
  if (store.version !== lastVersion) {
    lastVersion = store.version;
    renderStatus();
    renderAttention();
    if (store.dirty.has("queue")) renderQueue();
  }
  renderQueueIfDirty();
}

let queueDirty = false;
function renderQueueIfDirty(): void {
  if (!queueDirty) return;
  queueDirty = false;
  renderQueue();
}

/** Sets an element's text only when it differs (no layout invalidation otherwise). */
function setText(e: HTMLElement, t: string): void {
  if (e.textContent !== t) e.textContent = t;
}

let shownAttention: Attention | null = null;
/** The attention banner for `store.attention` (only when it changed). */
function renderAttention(): void {
  const a = store.attention;
  if (a === shownAttention) return;
  shownAttention = a;
  attentionBar.hidden = !a;
  if (!a) {
    delete attentionBar.dataset.reason;
    return;
  }
  attentionBar.dataset.reason = a.reason;
  const [title, action] =
    a.reason === "permission"
      ? ["Waiting for your approval", "Show"]
      : a.reason === "question"
        ? ["Pi asks you", "Show"]
        : a.reason === "finished"
          ? ["Finished while the panel was hidden", "Dismiss"]
          : a.reason === "failed"
            ? ["The run failed", "Dismiss"]
            : ["Pi needs you", "Dismiss"];
  attentionBar.setAttribute("role", a.reason === "failed" ? "alert" : "status");
  attentionTitle.textContent = title;
  attentionText.textContent = a.message;
  attentionText.title = a.message;
  attentionButton.textContent = action;
}

/** Whether the run waits on the model with nothing to show yet (no text or thinking of the
 * answer streamed, no tool running): a slow or stalled provider reads as such, not as work. */
function modelSilent(): boolean {
  if (store.streamingId) {
    const a = store.items.get(store.streamingId);
    return !(a?.kind === "assistant" && a.blocks.some((b) => b && (b.type === "thinking" || b.text.length > 0)));
  }
  // The tools of the turn are at the end of the transcript.
  for (let i = store.order.length - 1, n = 0; i >= 0 && n < 30; i--, n++) {
    const it = store.items.get(store.order[i]!);
    if (it?.kind === "tool" && (it.state === "running" || it.state === "pending")) return false;
    if (it?.kind === "user") break;
  }
  return true;
}

/** A cost as the status bar shows it: cents, or four decimals below a cent. */
function dollars(v: number): string {
  return `$${v > 0 && v < 0.01 ? v.toFixed(4) : v.toFixed(2)}`;
}

let lastUsage: Store["usage"] = null;
function renderStatus(): void {
  const state = store.stopping ? "stopping" : store.running ? "running" : "idle";
  setText(statusText, state === "stopping" ? "Stopping…" : state === "running" ? (openQuestions.size ? "Waiting for you" : modelSilent() ? "Waiting for model" : "Running") : sending.hidden ? "Idle" : "Sending…");
  if (statusText.title !== statusText.textContent) statusText.title = statusText.textContent ?? "";
  if (app.dataset.state !== state) app.dataset.state = state;
  const stopDisabled = !store.running || store.stopping;
  if (stopButton.disabled !== stopDisabled) stopButton.disabled = stopDisabled;
  setText(sendButton, store.running ? (mode === "followUp" ? "Follow up" : "Steer") : "Send");
  setText(modeText, store.running ? (mode === "followUp" ? "follow-up (Alt+Enter)" : "steer (Enter) · Alt+Enter: follow-up") : "");
  const u = store.usage;
  if (u && u !== lastUsage && u.contextWindow > 0) {
    lastUsage = u;
    const pct = Math.min(100, (u.contextTokens / u.contextWindow) * 100);
    meterFill.style.width = `${pct.toFixed(1)}%`;
    meter.dataset.level = pct > 85 ? "high" : pct > 60 ? "mid" : "low";
    meterText.textContent = `${pct.toFixed(0)}% · ${dollars(u.sessionCost)}`;
    meter.title = `${u.contextTokens.toLocaleString("en-US")} of ${u.contextWindow.toLocaleString("en-US")} tokens in context; last turn $${u.turnCost.toFixed(4)}; session $${u.sessionCost.toFixed(4)} (${u.sessionTokens.toLocaleString("en-US")} tokens)`;
    meter.setAttribute("aria-valuenow", pct.toFixed(0));
  }
}

function renderQueue(): void {
  queueList.textContent = "";
  const items = [...store.queue.values()].filter((q) => q.state === "queued" || q.state === "delivered");
  queueList.hidden = items.length === 0;
  for (const q of items) queueList.append(queueRow(q));
}

function queueRow(q: QueueItem): HTMLLIElement {
  const li = el("li", "queue-item");
  li.dataset.queueId = q.queueId;
  li.dataset.state = q.state;
  li.append(el("span", "queue-delivery", q.delivery === "followUp" ? "follow-up" : q.delivery), el("span", "queue-text", q.text), el("span", "queue-state", q.state));
  if (q.state === "queued") {
    const edit = el("button", "link", "Edit");
    edit.type = "button";
    edit.addEventListener("click", () => {
      const field = el("input", "queue-edit");
      field.value = q.text;
      field.setAttribute("aria-label", "Edit queued message");
      li.querySelector(".queue-text")!.replaceWith(field);
      field.focus();
      field.addEventListener("keydown", async (e) => {
        if (e.key === "Escape") {
          e.stopPropagation();
          renderQueue();
        } else if (e.key === "Enter") {
          e.preventDefault();
          const text = field.value.trim();
          if (!text) return;
          try {
            const r = await request<{ edited: boolean }>("agent/queue/edit", { sessionId: store.sessionId, queueId: q.queueId, text });
            if (r.edited) applyQueueUpdate(store, { queueId: q.queueId, text });
          } catch (err: any) {
            log("warn", `agent/queue/edit: ${err?.message}`);
          }
          queueDirty = true;
          schedule();
        }
      });
    });
    const remove = el("button", "link", "Remove");
    remove.type = "button";
    remove.addEventListener("click", async () => {
      try {
        const r = await request<{ removed: boolean }>("agent/queue/remove", { sessionId: store.sessionId, queueId: q.queueId });
        if (r.removed) applyQueueUpdate(store, { queueId: q.queueId, state: "removed" });
      } catch (err: any) {
        log("warn", `agent/queue/remove: ${err?.message}`);
      }
      queueDirty = true;
      schedule();
    });
    li.append(edit, remove);
  }
  return li;
}

// ---- session loading ----------------------------------------------------------------------
async function loadSession(sessionId: string | null): Promise<void> {
  const hidden = store.hidden;
  if (sessionId && showingSnapshot === sessionId) {
    // The snapshot's rows stay until the server's page replaces them in place (no blank).
    store.oldestEntryId = null;
    store.hasMore = false;
  } else {
    store = createStore(sessionId);
    transcript.clear();
  }
  showingSnapshot = null;
  store.hidden = hidden;
  lastVersion = -1;
  commandsCache = null;
  renderQueue();
  schedule();
  plan.update(null);
  if (!sessionId) return;
  void request<PlanState>("agent/plan/get", { sessionId }).then(
    (p) => store.sessionId === sessionId && isPlanState(p) && plan.update(p),
    (e: any) => log("info", `agent/plan/get: ${e?.message}`),
  );
  // State and the last page are asked for at once (the last screen is one round trip away).
  const stateP = request<any>("agent/state", { sessionId }).then(
    (state) => {
      if (store.sessionId !== sessionId) return;
      // Run events that arrived meanwhile are newer than this answer.
      if (!store.runSeen) {
        store.running = Boolean(state.isStreaming);
        store.runId = state.runId ?? null;
      }
      store.version++;
      setModel(state.model, state.thinkingLevel);
      schedule();
    },
    (e: any) => log("warn", `agent/state: ${e?.message}`),
  );
  // The meter of a session opened again (window reload, another session): its last usage.
  const statsP = request<any>("agent/session/stats", { sessionId }).then(
    (st) => {
      if (store.sessionId !== sessionId) return;
      applyStats(store, st);
      schedule();
    },
    (e: any) => log("warn", `agent/session/stats: ${e?.message}`),
  );
  await Promise.all([stateP, statsP, loadPage(sessionId, false)]);
  if (store.sessionId === sessionId) recovery.update(store, false);
  if (saved?.sessionId === sessionId && saved.scrollFromBottom > 0) {
    renderFrame();
    transcript.restore(saved.scrollFromBottom);
  }
}

async function loadPage(sessionId: string, older: boolean): Promise<void> {
  const params: any = { sessionId, limit: PAGE };
  if (older && store.oldestEntryId) params.beforeEntryId = store.oldestEntryId;
  try {
    const page = await request<any>("agent/session/history", params);
    if (store.sessionId !== sessionId) return;
    applyHistoryPage(store, { entries: page.entries ?? [], hasMore: Boolean(page.hasMore) }, older);
    if (!older) {
      lastScreen = takeSnapshot(sessionId, page.entries ?? []);
      saveState();
    }
  } catch (e: any) {
    if (e?.code === -32601 && !older) {
      // A server without paged history: show the active branch's messages.
      const m = await request<any>("agent/messages", { sessionId });
      applyHistoryPage(store, { entries: entriesFromMessages(m), hasMore: false }, false);
    } else log("warn", `agent/session/history: ${e?.message}`);
  }
  schedule();
}

/** Keeps the session's newest entries for a reload (after each run). */
function refreshSnapshot(sessionId: string): void {
  void request<any>("agent/session/history", { sessionId, limit: 30 }).then(
    (page) => {
      if (store.sessionId !== sessionId) return;
      lastScreen = takeSnapshot(sessionId, page.entries ?? []);
      saveState();
    },
    () => {},
  );
}

transcript.onNeedOlder = () => {
  if (loadingOlder || !store.hasMore || !store.sessionId) return;
  loadingOlder = true;
  const sid = store.sessionId;
  void loadPage(sid, true).finally(() => {
    loadingOlder = false;
  });
};

// ---- models -------------------------------------------------------------------------------
async function loadModels(): Promise<void> {
  try {
    const r = await request<any>("agent/model/list", {});
    models = r.models ?? [];
  } catch (e: any) {
    log("warn", `agent/model/list: ${e?.message}`);
  }
  renderModels();
}

function modelKey(m: any): string {
  return `${m.provider}/${m.id}`;
}

function renderModels(): void {
  modelSelect.textContent = "";
  const list = [...models];
  if (currentModel && !list.some((m) => modelKey(m) === modelKey(currentModel))) list.unshift(currentModel);
  for (const m of list) {
    const o = el("option", undefined, m.name || modelKey(m));
    o.value = modelKey(m);
    const price = m.cost ? ` · $${m.cost.input}/$${m.cost.output} per Mtok` : "";
    o.title = `${modelKey(m)} · ${Number(m.contextWindow ?? 0).toLocaleString("en-US")} tokens${price}`;
    modelSelect.append(o);
  }
  if (currentModel) modelSelect.value = modelKey(currentModel);
  else if (pendingModel) modelSelect.value = pendingModel;
  renderThinking(thinkingSelect.value || "off");
}

function renderThinking(level: string): void {
  const m = currentModel ?? models.find((x) => modelKey(x) === modelSelect.value);
  const levels: string[] = m?.thinkingLevels?.length ? m.thinkingLevels : m?.reasoning ? ["off", "minimal", "low", "medium", "high"] : ["off"];
  thinkingSelect.textContent = "";
  for (const l of levels) {
    const o = el("option", undefined, `thinking: ${l}`);
    o.value = l;
    thinkingSelect.append(o);
  }
  thinkingSelect.value = levels.includes(level) ? level : levels[0]!;
  thinkingSelect.disabled = levels.length < 2;
}

function setModel(model: any, level?: string): void {
  if (model) currentModel = model;
  renderModels();
  if (level) renderThinking(level);
}

modelSelect.addEventListener("change", async () => {
  const key = modelSelect.value;
  if (!store.sessionId) {
    pendingModel = key;
    currentModel = models.find((m) => modelKey(m) === key) ?? null;
    renderThinking(thinkingSelect.value);
    return;
  }
  try {
    const r = await request<any>("agent/model/set", { sessionId: store.sessionId, model: key });
    setModel(r.model, r.thinkingLevel);
  } catch (e: any) {
    log("warn", `agent/model/set: ${e?.message}`);
    renderModels();
  }
});

thinkingSelect.addEventListener("change", async () => {
  if (!store.sessionId) return;
  try {
    const r = await request<any>("agent/thinking/set", { sessionId: store.sessionId, level: thinkingSelect.value });
    if (r?.level) renderThinking(r.level);
  } catch (e: any) {
    log("warn", `agent/thinking/set: ${e?.message}`);
  }
});

// ---- composer -----------------------------------------------------------------------------
/** The active editor's item (`editorContext`, the `pi.context.activeEditor` setting) and the
 * one the user removed (it stays out until the editor's context changes). */
let autoItem: ContextItem | null = null;
let autoRemoved: string | null = null;
const autoKey = (c: ContextItem) => `${c.kind}:${c.path}:${c.range?.startLine}-${c.range?.endLine}`;
function autoShown(): ContextItem | null {
  return autoItem && autoKey(autoItem) !== autoRemoved ? autoItem : null;
}

function renderChips(): void {
  chips.textContent = "";
  const auto = autoShown();
  if (auto) {
    const c = chip(auto.label, "auto", () => {
      autoRemoved = autoKey(auto);
      renderChips();
    });
    c.title = `${auto.path ?? auto.label}: offered with each prompt (pi.context.activeEditor); × leaves it out`;
    c.firstElementChild?.after(el("span", "chip-auto-mark", "auto"));
    chips.append(c);
  }
  contextItems.forEach((c, i) => chips.append(chip(c.label, c.kind, () => {
    contextItems.splice(i, 1);
    renderChips();
    saveState();
  })));
  images.forEach((img, i) => chips.append(chip(img.name, "image", () => {
    images.splice(i, 1);
    renderChips();
  })));
  chips.hidden = contextItems.length + images.length === 0 && !auto;
}

function chip(label: string, kind: string, remove: () => void): HTMLElement {
  const c = el("span", `chip chip-${kind}`);
  c.append(el("span", undefined, label));
  const x = el("button", "chip-remove", "×");
  x.type = "button";
  x.setAttribute("aria-label", `Remove ${label}`);
  x.addEventListener("click", remove);
  c.append(x);
  return c;
}

function contextPrefix(): string {
  const auto = autoShown();
  return [...(auto ? [auto] : []), ...contextItems]
    .map((c) => {
      if (c.auto && c.kind === "file") return `The user's active file: ${c.path}\n`;
      const where = c.path ? `${c.path}${c.range ? `:${c.range.startLine}-${c.range.endLine}` : ""}` : c.label;
      const what = c.kind === "diagnostics" ? "Problems in" : c.kind === "selection" ? "Selection from" : "File";
      return `${what} ${where}:\n\`\`\`\n${c.text}\n\`\`\`\n`;
    })
    .join("\n");
}

/** Pi's own `/` commands the panel runs itself (a prompt template, skill or extension command
 * of the same name is the server's and goes first). */
const BUILTIN_COMMANDS: { name: string; description: string }[] = [
  { name: "compact", description: "Compact the context (optionally: what the summary must keep)" },
  { name: "new", description: "Start a new session" },
];

/** Runs `typed` when it is one of Pi's own `/` commands; true when it was. */
function runBuiltin(typed: string): boolean {
  const m = /^\/([\w-]+)(?:\s+([\s\S]*))?$/.exec(typed);
  if (!m || !BUILTIN_COMMANDS.some((c) => c.name === m[1]) || commandsCache?.some((c) => c.name === m[1])) return false;
  input.value = "";
  closePopup();
  saveState();
  if (m[1] === "new") newSession();
  else void compact(m[2]?.trim() || undefined);
  return true;
}

async function send(behavior?: "steer" | "followUp"): Promise<void> {
  const typed = input.value.trim();
  if (!typed && images.length === 0) return;
  if (images.length === 0 && runBuiltin(typed)) return;
  const prefix = contextPrefix();
  const text = prefix ? `${prefix}\n${typed}` : typed;
  const imgs = images.map((i) => ({ type: "image", data: i.data, mimeType: i.mimeType }));
  const params: any = { text };
  if (imgs.length) params.images = imgs;
  if (store.sessionId) params.sessionId = store.sessionId;
  else if (pendingModel) params.model = pendingModel;
  const queued = store.running;
  if (queued) params.streamingBehavior = behavior ?? mode;
  history.push(typed);
  recovery.restoredText = null;
  input.value = "";
  contextItems = [];
  images = [];
  renderChips();
  closePopup();
  saveState();
  if (!queued) showSending(typed || `${imgs.length} image${imgs.length === 1 ? "" : "s"}`);
  try {
    const r = await request<any>("agent/prompt", params);
    if (!store.sessionId && r.sessionId) {
      store.sessionId = r.sessionId;
      post({ type: "attach", sessionId: r.sessionId });
      saveState();
      if (!currentModel) void request<any>("agent/state", { sessionId: r.sessionId }).then((s) => setModel(s.model, s.thinkingLevel), () => {});
    }
    if (r.queued && r.queueId) {
      addQueued(store, r.queueId, params.streamingBehavior, typed);
      queueDirty = true;
      schedule();
    }
  } catch (e: any) {
    // Nothing was sent: the text goes back to the composer.
    hideSending();
    if (!input.value) input.value = typed;
    log("error", `agent/prompt: ${e?.message}`);
    showError(e?.message ?? String(e));
  }
}

function showError(message: string): void {
  const c = el("div", "card error", message);
  c.setAttribute("role", "alert");
  const x = el("button", "link", "Dismiss");
  x.type = "button";
  x.addEventListener("click", () => c.remove());
  c.append(x);
  cards.append(c);
}

async function abort(): Promise<void> {
  if (!store.running || !store.sessionId) return;
  markStopping(store);
  renderStatus(); // "stopping" at once, not at the next frame
  try {
    const report = await request<any>("agent/abort", { sessionId: store.sessionId });
    const restore = promptToRestore(store);
    applyAbortReport(store, report);
    if (restore !== null && !input.value.trim()) {
      input.value = restore;
      saveState();
    }
  } catch (e: any) {
    log("error", `agent/abort: ${e?.message}`);
    store.stopping = false;
    store.version++;
  }
  schedule();
}

sendButton.addEventListener("click", () => void send());
stopButton.addEventListener("click", () => void abort());
newButton.addEventListener("click", () => newSession());
compactButton.addEventListener("click", () => void compact());

function newSession(): void {
  post({ type: "attach", sessionId: null });
  void loadSession(null);
  saveState();
}

async function compact(instructions?: string): Promise<void> {
  if (!store.sessionId) return;
  try {
    await request("agent/compact", instructions ? { sessionId: store.sessionId, instructions } : { sessionId: store.sessionId });
  } catch (e: any) {
    showError(`Compaction: ${e?.message ?? e}`);
  }
}

// `@` mentions and `/` completion.
let popupItems: { label: string; detail?: string; insert: string; from: number }[] = [];
let popupIndex = 0;
let lastFileQuery: string | null = null;

function closePopup(): void {
  popup.hidden = true;
  popupItems = [];
}

function showPopup(items: typeof popupItems): void {
  popupItems = items;
  popupIndex = 0;
  popup.textContent = "";
  popup.hidden = items.length === 0;
  items.forEach((it, i) => {
    const li = el("li", i === popupIndex ? "selected" : undefined);
    li.setAttribute("role", "option");
    li.append(el("span", "popup-label", it.label));
    if (it.detail) li.append(el("span", "popup-detail", it.detail));
    li.addEventListener("mousedown", (e) => {
      e.preventDefault();
      popupIndex = i;
      choosePopup();
    });
    popup.append(li);
  });
}

function choosePopup(): void {
  const it = popupItems[popupIndex];
  if (!it) return;
  // `@file`: its content is attached too (a chip), not just its path.
  if (it.insert.startsWith("@") && it.detail) post({ type: "attachFile", path: it.detail });
  const caret = input.selectionStart ?? input.value.length;
  input.value = input.value.slice(0, it.from) + it.insert + input.value.slice(caret);
  const at = it.from + it.insert.length;
  input.setSelectionRange(at, at);
  closePopup();
  saveState();
}

async function updateCompletion(): Promise<void> {
  const caret = input.selectionStart ?? 0;
  const before = input.value.slice(0, caret);
  const mention = /(^|\s)@([^\s@]*)$/.exec(before);
  if (mention) {
    const q = mention[2]!;
    lastFileQuery = q;
    post({ type: "pickFiles", query: q });
    return;
  }
  const slash = /^\/([^\s]*)$/.exec(before);
  if (slash) {
    if (!commandsCache) {
      const list: { name: string; description?: string }[] = [];
      try {
        const r = await request<any>("agent/commands", store.sessionId ? { sessionId: store.sessionId } : {});
        list.push(...(r.commands ?? []));
      } catch {}
      if (store.sessionId) {
        try {
          const r = await request<any>("agent/extension/commands", { sessionId: store.sessionId });
          list.push(...(r.commands ?? []));
        } catch {}
      }
      commandsCache = list;
    }
    const q = slash[1]!.toLowerCase();
    const now = /^\/([^\s]*)$/.exec(input.value.slice(0, input.selectionStart ?? 0));
    if (!now) return closePopup();
    const all = [...commandsCache, ...BUILTIN_COMMANDS.filter((b) => !commandsCache!.some((c) => c.name === b.name))];
    showPopup(
      [
        ...all.filter((c) => c.name.toLowerCase().startsWith(q)),
        ...all.filter((c) => !c.name.toLowerCase().startsWith(q) && c.name.toLowerCase().includes(q)),
      ]
        .slice(0, 30)
        .map((c) => ({ label: `/${c.name}`, detail: c.description, insert: `/${c.name} `, from: 0 })),
    );
    return;
  }
  closePopup();
}

input.addEventListener("input", () => {
  saveState();
  // Typing here: the user is back (a run that finished while the panel was hidden is seen).
  if (store.attention?.reason === "finished") {
    dismissAttention(store, true);
    schedule();
  }
  if (/[@/]/.test(input.value) || !popup.hidden) void updateCompletion();
});

input.addEventListener("keydown", (e) => {
  if (!popup.hidden && popupItems.length) {
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      e.preventDefault();
      popupIndex = (popupIndex + (e.key === "ArrowDown" ? 1 : popupItems.length - 1)) % popupItems.length;
      [...popup.children].forEach((c, i) => c.classList.toggle("selected", i === popupIndex));
      return;
    }
    if (e.key === "Enter" || e.key === "Tab") {
      e.preventDefault();
      choosePopup();
      return;
    }
    if (e.key === "Escape") {
      e.preventDefault();
      e.stopPropagation();
      closePopup();
      return;
    }
  }
  if ((e.key === "ArrowUp" || e.key === "ArrowDown") && !e.shiftKey && !e.altKey && !e.ctrlKey && !e.metaKey && !e.isComposing && history.move(input, e.key === "ArrowUp" ? -1 : 1)) {
    e.preventDefault();
    saveState();
    return;
  }
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    const behavior = store.running ? (e.altKey || e.metaKey ? "followUp" : mode) : undefined;
    void send(behavior);
  }
});

input.addEventListener("paste", (e) => {
  const files = [...(e.clipboardData?.files ?? [])].filter((f) => /^image\/(png|jpeg|gif|webp)$/.test(f.type));
  if (!files.length) return;
  e.preventDefault();
  for (const f of files) addImage(f);
});
composer.addEventListener("dragover", (e) => e.preventDefault());
composer.addEventListener("drop", (e) => {
  const files = [...(e.dataTransfer?.files ?? [])].filter((f) => /^image\/(png|jpeg|gif|webp)$/.test(f.type));
  if (!files.length) return;
  e.preventDefault();
  for (const f of files) addImage(f);
});

function addImage(f: File): void {
  const reader = new FileReader();
  reader.onload = () => {
    const url = String(reader.result);
    const comma = url.indexOf(",");
    images.push({ data: url.slice(comma + 1), mimeType: f.type, name: f.name || `image.${f.type.split("/")[1]}` });
    renderChips();
  };
  reader.readAsDataURL(f);
}

document.addEventListener("keydown", (e) => {
  if (e.altKey && !e.ctrlKey && !e.metaKey && !e.shiftKey && accessKeyAllowed(e) && pressShortcut(cards, e.code)) {
    e.preventDefault();
    return;
  }
  if (e.key === "Escape" && store.running && capabilities.escapeAborts !== false) {
    const t = e.target as HTMLElement | null;
    if (t && t.closest(".card")) return;
    e.preventDefault();
    void abort();
  }
});

// ---- server requests (cards) --------------------------------------------------------------
function questionClosed(requestId: number): void {
  if (openQuestions.delete(requestId)) {
    renderStatus();
    if (openQuestions.size === 0) {
      questionsAnswered(store);
      schedule();
    }
  }
  const call = awaitingCalls.get(requestId);
  if (call === undefined) return;
  awaitingCalls.delete(requestId);
  setAwaiting(store, call, false);
  schedule();
}

const cardHost = {
  answer(requestId: number, result: unknown) {
    questionClosed(requestId);
    post({ type: "serverResponse", requestId, result });
    const c = cards.querySelector(`[data-request-id="${requestId}"]`);
    c?.remove();
    input.focus({ preventScroll: true });
  },
  openDiff(toolCallId: string, path: string) {
    post({ type: "openDiff", toolCallId, path });
  },
};

// ---- host messages ------------------------------------------------------------------------
window.addEventListener("message", (ev: MessageEvent<HostToWebview>) => {
  const msg = ev.data;
  switch (msg?.type) {
    case "init": {
      capabilities = msg.capabilities ?? {};
      // After a reload the host may not know the session yet: the first init falls back to the
      // one kept in webview state, and the panel re-attaches to it.
      const sid = msg.sessionId ?? (firstInit ? (saved?.sessionId ?? null) : null);
      firstInit = false;
      if (sid && !msg.sessionId) post({ type: "attach", sessionId: sid });
      void loadSession(sid);
      void loadModels();
      saveState();
      return;
    }
    case "notifications": {
      for (const n of msg.items) {
        if (n.method === "agent/ui/notification") continue;
        if (n.method === "agent/plan") {
          if (isPlanState(n.params) && (n.params.sessionId === store.sessionId || !store.sessionId)) plan.update(n.params);
          continue;
        }
        applyNotification(store, n);
        if (n.method === "agent/queueUpdate") queueDirty = true;
        if (n.method === "agent/event" && n.params?.event?.type === "agent_start" && !currentModel) void loadModels();
        if (n.method === "agent/event" && n.params?.event?.type === "agent_end" && store.sessionId) refreshSnapshot(store.sessionId);
      }
      recovery.update(store, true);
      schedule();
      return;
    }
    case "response": {
      const p = pending.get(msg.requestId);
      if (!p) return;
      pending.delete(msg.requestId);
      if (msg.error) p.reject(msg.error);
      else p.resolve(msg.result);
      return;
    }
    case "serverRequest": {
      // A question is shown once (the host may post the open ones again, e.g. on a re-attach).
      if (openQuestions.has(msg.requestId)) return;
      const card =
        msg.method === "agent/requestPermission"
          ? permissionCard(msg.requestId, msg.params, cardHost)
          : isPlanQuestion(msg.params)
            ? planQuestionCard(msg.requestId, msg.params, plan.current, (v) => cardHost.answer(msg.requestId, v === null ? { cancelled: true } : { value: v }))
            : uiCard(msg.requestId, msg.params, cardHost);
      cards.append(deliberate(card));
      openQuestions.add(msg.requestId);
      renderStatus();
      const call = msg.method === "agent/requestPermission" ? (msg.params as any)?.toolCallId : undefined;
      if (typeof call === "string") {
        awaitingCalls.set(msg.requestId, call);
        setAwaiting(store, call, true);
        schedule();
      }
      return;
    }
    case "visibility": {
      setVisible(store, msg.visible);
      return;
    }
    case "serverRequestStale": {
      // Said at once, before any answer: the card's diff no longer matches the file.
      const card = cards.querySelector(`[data-request-id="${msg.requestId}"]`);
      if (card && !card.querySelector(".pi-stale")) {
        const note = document.createElement("div");
        note.className = "pi-stale";
        note.setAttribute("role", "alert");
        note.textContent = msg.message;
        card.insertBefore(note, card.firstChild?.nextSibling ?? null);
      }
      return;
    }
    case "serverRequestDone": {
      questionClosed(msg.requestId);
      cards.querySelector(`[data-request-id="${msg.requestId}"]`)?.remove();
      return;
    }
    case "command": {
      switch (msg.command) {
        case "abort":
          void abort();
          return;
        case "focusComposer":
          input.focus();
          return;
        case "newSession":
          newSession();
          return;
        case "steerMode":
          mode = "steer";
          renderStatus();
          return;
        case "followUpMode":
          mode = "followUp";
          renderStatus();
          return;
        case "compact":
          void compact();
          return;
        case "insertText": {
          const t = msg.text ?? "";
          const at = input.selectionStart ?? input.value.length;
          input.value = input.value.slice(0, at) + t + input.value.slice(input.selectionEnd ?? at);
          input.setSelectionRange(at + t.length, at + t.length);
          saveState();
          return;
        }
      }
      return;
    }
    case "editorContext": {
      autoItem = msg.item;
      renderChips();
      return;
    }
    case "context": {
      contextItems.push(...msg.items);
      renderChips();
      saveState();
      return;
    }
    case "files": {
      if (msg.query !== lastFileQuery) return;
      const caret = input.selectionStart ?? 0;
      const m = /(^|\s)@([^\s@]*)$/.exec(input.value.slice(0, caret));
      if (!m) return closePopup();
      const from = caret - m[2]!.length - 1;
      showPopup(msg.items.slice(0, 30).map((f) => ({ label: f.label, detail: f.path, insert: `@${f.path} `, from })));
      return;
    }
  }
});

// The user's scrolling is kept in the webview state (our own pinning and anchoring is not a
// change of position: saving it would post the state to VS Code on every streaming render).
transcript.onUserScroll = () => saveState();

renderChips();
renderQueue();
renderStatus();
// After a reload: the session's last screen at once, before the host answers (snapshot.ts).
if (lastScreen && saved?.sessionId === lastScreen.sessionId) {
  store = createStore(lastScreen.sessionId);
  applyHistoryPage(store, { entries: lastScreen.entries, hasMore: false }, false);
  showingSnapshot = lastScreen.sessionId;
  schedule();
}
post({ type: "ready", accepts: ["visibility"] });

// While the host and the server answer, make the Markdown and highlighting code warm (one
// small step per idle callback; done long before the panel is idle).
{
  const steps = warmUpSteps();
  const idle: (cb: () => void) => void = typeof requestIdleCallback === "function" ? (cb) => requestIdleCallback(cb, { timeout: 500 }) : (cb) => setTimeout(cb, 0);
  const next = () => {
    const step = steps.shift();
    if (!step) return;
    try {
      step();
    } catch (e) {
      log("warn", `warm-up: ${e}`);
    }
    idle(next);
  };
  idle(next);
}

/** Test hooks (read-only views for the browser tests). */
(window as any).__pi = {
  get store() {
    return store;
  },
  transcript,
  renderStats,
  get renders() {
    return renderCount;
  },
  /** The HTML a fresh render of a finished text gives (to compare with a streamed one). */
  renderFresh(text: string): string {
    const v = new MarkdownView();
    v.update(text, true);
    return v.el.innerHTML;
  },
};
