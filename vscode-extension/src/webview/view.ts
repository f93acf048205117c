/**
 * The transcript area and the frame loop: the page's root, the transcript (transcript.ts), the
 * empty-state text, the "↓" back-to-the-end button, the prompt being sent, and the scheduling
 * of renders (one animation frame after a change; streaming text alone at most every
 * {@link STREAM_MS}, slower when a render costs more or text arrives faster than anyone reads).
 */
import { renderAttention, renderStatus } from "./header";
import { el, setText } from "./dom";
import { renderQueue, renderQueueIfDirty } from "./queue";
import { saveState, savedScroll, store } from "./state";
import { Transcript } from "./transcript";
import { post } from "./rpc";
import { statusText } from "./header";

/** The page's root (main.ts lays the parts out in it). */
export const app = el("div", "app");

/** The transcript's scroll container. */
export const main = el("div", "main");
export const transcript = new Transcript(main, { openDiff: (toolCallId, path) => post({ type: "openDiff", toolCallId, path }), openFile: (path, line) => post({ type: "openFile", path, ...(line ? { line } : {}) }) }, () => {
  scrolled = true;
  schedule();
});
export const empty = el("div", "empty", "Ask pi anything about this workspace. Enter sends; while it runs, Enter steers and Alt+Enter queues a follow-up; Esc stops.");
// Scrolled up (reading), a way back to the end: the view no longer follows the answer there.
export const jumpButton = el("button", "jump-latest", "↓");
jumpButton.type = "button";
jumpButton.title = "Scroll to the latest";
jumpButton.setAttribute("aria-label", "Scroll to the latest message");
jumpButton.hidden = true;
jumpButton.addEventListener("click", () => {
  transcript.restore(0);
  jumpButton.hidden = true;
  scrolled = true;
  schedule();
});

/** The prompt just sent, shown at once under the transcript until the server's user message
 * (its row) arrives: the answer to Enter is immediate even when the server takes a moment. */
export const sending = el("div", "sending");
sending.hidden = true;
const sendingText = el("div", "user-text");
const sendingMeta = el("div", "user-meta", "Sending…");
sending.append(sendingText, sendingMeta);
/** The newest user row when `sending` was shown (it goes when another one is there). */
let sendingAfter: string | null = null;

/** The id of the newest user row of the transcript (null: none). */
function lastUserId(): string | null {
  for (let i = store.order.length - 1; i >= 0; i--) {
    const id = store.order[i]!;
    if (store.items.get(id)?.kind === "user") return id;
  }
  return null;
}

/** Shows `text` as being sent (until its row arrives). */
export function showSending(text: string): void {
  sendingAfter = lastUserId();
  sendingText.textContent = text;
  sending.hidden = false;
  empty.hidden = true;
  setText(statusText, "Sending…");
}

/** Hides the prompt being sent (its row arrived, or sending failed). */
export function hideSending(): void {
  if (sending.hidden) return;
  sending.hidden = true;
  sendingText.textContent = "";
  empty.hidden = store.order.length > 0;
  renderStatus();
}

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
export const STREAM_MS = 100;
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
/** Asks for a render of what changed (see {@link STREAM_MS}). */
export function schedule(): void {
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

/** Whether a render is scheduled (an animation frame or the streaming pause's timer): the
 * browser tests wait for the panel to settle on it, not on a count of frames. */
export function renderPending(): boolean {
  return frame !== 0 || timer !== 0;
}

/** Renders made so far (the browser tests read it). */
export function renders(): number {
  return renderCount;
}

/** The next render redraws the header and the queue whatever the store's version (a new store). */
export function resetRender(): void {
  lastVersion = -1;
}

/** Renders what changed: the transcript, then (when the store's version moved) the header's
 * state, the attention banner and the queue. */
export function renderFrame(): void {
  renderCount++;
  transcript.render(store);
  // Pinned to the bottom the saved position stays 0; scrolled up, content growing below moves
  // the distance from the bottom (the webview state keeps it for a reload).
  if (!transcript.atBottom ? Math.abs(transcript.fromBottom() - savedScroll()) >= 1 : savedScroll() !== 0) saveState();
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
