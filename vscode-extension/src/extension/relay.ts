/**
 * Host-side relay of server notifications to chat panels (no `vscode` import, so it runs under
 * `node --test`).
 *
 * - {@link Batcher}: collects notifications for one panel and posts them as one
 *   `{type: "notifications", items}` message, at most once per {@link STREAM_POST_INTERVAL_MS}
 *   (CLIENTS.md VP7: ≤ 60 posts per second; what a post costs the host is why it is fewer),
 *   never reordered; merges consecutive deltas while they wait, holds everything while the
 *   panel is hidden, and serialises once (`packed`) when the webview accepts it. Anything else
 *   posted to the panel (responses, server requests) goes after the notifications waiting
 *   before it, within {@link MIN_POST_INTERVAL_MS} of the last post, so the panel sees messages
 *   in arrival order and never more than 60 posts in a second.
 * - {@link Router}: which panels show which session (`sessionId` of every notification), plus a
 *   short backlog of notifications of sessions no panel shows yet, handed to the panel that
 *   created the session when it attaches (a new session's first events can arrive before the
 *   `agent/prompt` answer that names it).
 */

/** A server notification as relayed: `{method, params}` (params unchanged). */
export interface Note {
  method: string;
  params: any;
}

/** Smallest gap between two posts of one panel, in ms (18: at most 55.6 posts per second, under
 * VP7's 60). Answers to the panel's requests and server questions wait no longer than this. */
export const MIN_POST_INTERVAL_MS = 18;

/**
 * Smallest gap between two posts of notifications while they stream, in ms; also the server's
 * delta window we ask for (`initializationOptions.coalesceDeltasMs`, server.ts), so one
 * notification carries what one post does. A post is the host's big cost: in code-server each
 * `webview.postMessage` is a VS Code RPC call (its arguments serialised, a frame written through
 * the remote connection's compressed WebSocket, a reply read back) — 0.13–0.2 ms of the host's
 * thread inside the call on a loaded machine and about 1 ms in all (docs/benchmarks.md, round
 * 34), whatever it carries; a notification costs the host some 0.05 ms more. So VP7's 5 ms of
 * host CPU per 1,000 streamed deltas (at 500 a second: 2.5 ms a second) allows about 8 posts a
 * second on a loaded machine: measured, 100 ms gave 6.4–7.3 ms per 1,000, 150 ms 3.4–4.5,
 * 200 ms (5 posts a second) 3.0–4.5. The streamed text still grows as it comes (a model's
 * 50–100 tokens a second: 10–20 per post); the first notification after a pause goes at once.
 */
export const STREAM_POST_INTERVAL_MS = 200;

/**
 * WebAssembly module of one function, `now() -> i64`: WASI's `clock_time_get` of the thread's
 * CPU-time clock (id 3, `thread_cputime_id`) into its memory, read back — in nanoseconds. Its
 * text form:
 * `(module (import "wasi_snapshot_preview1" "clock_time_get" (func (param i32 i64 i32) (result i32)))
 *  (memory (export "memory") 1) (func (export "now") (result i64)
 *  (drop (call 0 (i32.const 3) (i64.const 1) (i32.const 0))) (i64.load (i32.const 0))))`.
 */
const THREAD_CLOCK_WASM =
  "0061736d01000000010c0260037f7e7f017f6000017e02290116776173695f736e617073686f745f70726576696577310e636c6f636b5f74696d655f67657400" +
  "00030201010503010001071002066d656d6f72790200036e6f7700010a1201100041034201410010001a41002903000b";

/** The thread's CPU time to the nanosecond, in ms, through Node's WASI (libuv's
 * `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`), or undefined where it cannot be had. */
export function wasiThreadClock(): (() => number) | undefined {
  try {
    // Loaded only here (Node warns when it loads): `process.getBuiltinModule` (Node ≥ 20.16)
    // works in the extension's CommonJS bundle and the tests' ES modules alike.
    const { WASI } = (process as any).getBuiltinModule("node:wasi") as typeof import("node:wasi");
    const wasi = new WASI({ version: "preview1" });
    const bytes = Uint8Array.from(THREAD_CLOCK_WASM.match(/../g)!.map((h) => parseInt(h, 16)));
    const instance = new WebAssembly.Instance(new WebAssembly.Module(bytes), wasi.getImportObject() as WebAssembly.Imports);
    wasi.initialize(instance);
    const now = instance.exports.now as () => bigint;
    const a = now();
    let x = 0;
    for (let i = 0; i < 10_000; i++) x += i;
    return x > 0 && now() > a ? () => Number(now()) / 1e6 : undefined;
  } catch {
    return undefined;
  }
}

/** Which clock {@link cpuNow} reads: `thread` (the thread's CPU time, exact), `thread-ticks`
 * (`process.threadCpuUsage`), `wall`, or `off` (always 0: nobody asked for the figures). */
export type CpuClock = "thread" | "thread-ticks" | "wall" | "off";

/**
 * The clock host figures are read on, in ms, and its name. They sum it over sections of a few
 * microseconds each (a notification handled, a post, a keystroke's bookkeeping), so it must be
 * exact: on Linux `process.threadCpuUsage` (getrusage) moves only at scheduler ticks (4 ms at
 * 250 Hz) and context switches — a section reads 0 or the thread's whole time since the last
 * tick, and a burst's sum was a count of ticks (15.7–39.1 ms for one burst in CI). The exact
 * thread clock comes through WASI, which Node marks experimental (a warning on first use). The
 * figures are kept only when they are asked for (`PI_VSCODE_STATS`, tests and benchmarks):
 * every read is a system call, which a user's host does not pay for figures nobody reads
 * (`off`). Asked for: the exact clock, where it is missing `process.threadCpuUsage`, else wall
 * time (which counts every preemption on a loaded machine).
 */
function pickClock(): [() => number, CpuClock] {
  if (!process.env.PI_VSCODE_STATS) return [() => 0, "off"];
  const exact = wasiThreadClock();
  if (exact) return [exact, "thread"];
  if (typeof (process as any).threadCpuUsage === "function") {
    return [
      () => {
        const u = (process as any).threadCpuUsage();
        return (u.user + u.system) / 1000;
      },
      "thread-ticks",
    ];
  }
  return [() => performance.now(), "wall"];
}
const [clock, clockName] = pickClock();

/** CPU time of the calling thread, in ms ({@link pickClock}). */
export const cpuNow: () => number = clock;

/** What one {@link cpuNow} call costs, in ms (the least mean of 5 rounds of 400 calls, the first
 * round warming it up; measured once on first use): a figure summed over N measured sections
 * includes about N calls' worth of the clock itself. */
export function cpuNowCost(): number {
  if (cpuCallMs === undefined) {
    const n = 400;
    let best = Infinity;
    for (let round = 0; round < 5; round++) {
      const t0 = cpuNow();
      for (let i = 0; i < n; i++) cpuNow();
      best = Math.min(best, (cpuNow() - t0) / (n + 1));
    }
    cpuCallMs = best;
  }
  return cpuCallMs;
}
let cpuCallMs: number | undefined;

/** Which clock {@link cpuNow} reads (the e2e test checks it). */
export const cpuClock: CpuClock = clockName;

/** Timer functions, injectable for tests. */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const realClock: Clock = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
};

/** A lone notification batch with fewer items than this is posted as an object; anything
 * bigger, and every other message, is posted packed when the webview accepts it (see
 * {@link Batcher.packing}). 1: every post is packed — VS Code's own serialisation walks every
 * value of an object message with a replacer (a third of the post's cost in code-server's
 * profile for one notification), a packed one is two values, one of them a string. */
export const PACK_MIN_ITEMS = 1;

/** A hidden panel keeps at most this many (coalesced) notifications; past it they are dropped
 * and the panel is told to reload its session when it is shown again ({@link Batcher.onOverflow}). */
export const HIDDEN_BACKLOG_MAX = 20_000;

/** Whether `a` (pending) and `b` (new) are consecutive deltas of one content block:
 * `text_delta` / `thinking_delta` / `toolcall_delta` of the same session, run and
 * `contentIndex`. The server sends only the newest fragment (docs/protocol.md "agent/event"),
 * so their `delta`s concatenated are the same update (the webview's reducer is tested to give
 * the same model for any re-chunking of the deltas). */
function sameDeltaRun(a: Note, b: Note): boolean {
  if (a.method !== "agent/event" || b.method !== "agent/event") return false;
  const ea = a.params?.event;
  const eb = b.params?.event;
  if (ea?.type !== "message_update" || eb?.type !== "message_update") return false;
  const da = ea.assistantMessageEvent;
  const db = eb.assistantMessageEvent;
  if (!da || !db || da.type !== db.type || da.contentIndex !== db.contentIndex) return false;
  if (da.type !== "text_delta" && da.type !== "thinking_delta" && da.type !== "toolcall_delta") return false;
  if (typeof da.delta !== "string" || typeof db.delta !== "string") return false;
  return a.params.sessionId === b.params.sessionId && a.params.runId === b.params.runId;
}

/** The tool call id of a `tool_execution_update` notification, else undefined. Its
 * `partialResult` is the whole output so far (not a fragment), so a later update of the same
 * call replaces an earlier one that was not posted yet. */
function toolUpdateId(n: Note): string | undefined {
  if (n.method !== "agent/event") return undefined;
  const ev = n.params?.event;
  return ev?.type === "tool_execution_update" && typeof ev.toolCallId === "string" ? ev.toolCallId : undefined;
}

/**
 * Batches notifications for one panel; `post` receives each outgoing message.
 *
 * - Notifications: at most one post per `interval` ms, in arrival order; the first after a
 *   pause at once. Other messages ({@link direct}): at once, or within `minGap` ms of the last
 *   post, with the notifications waiting before them (≤ 60 posts per second in all).
 * - Coalescing while a notification waits: consecutive deltas of one content block become one
 *   delta ({@link sameDeltaRun}), and a tool's newer `tool_execution_update` replaces its older
 *   one. Notifications are shared by every panel on the session, so a merged one is a copy.
 * - Paused (the panel is hidden): nothing is posted; notifications wait, coalesced, and go in
 *   one post when it is resumed. Another message ({@link direct}) posts everything waiting at
 *   once, so order holds. Past {@link HIDDEN_BACKLOG_MAX} the backlog is dropped and
 *   {@link onOverflow} is called on resume instead.
 * - Packing ({@link packing}, when the webview accepts `packed`): what one post carries — a
 *   notification batch and the messages after it — goes as one `{type: "packed", json}` whose
 *   `json` is the JSON text of the message array: serialised once, here, without VS Code's
 *   per-value replacer walk.
 */
export class Batcher {
  private items: Note[] = [];
  private others: unknown[] = [];
  /** Merged copies made by this batcher (safe to extend in place). */
  private readonly owned = new WeakSet<Note>();
  private timer: unknown = undefined;
  /** When the pending timer fires (clock time). */
  private timerAt = Infinity;
  private lastPost = -Infinity;
  private isPaused = false;
  private overflowed = false;
  /** Post packed messages (set when the webview's `ready` lists `packed`). */
  packing = false;
  /** Called on resume when a hidden backlog overflowed (the panel reloads its session). */
  onOverflow: () => void = () => {};
  /** Posts made so far (notification batches and direct posts). */
  posts = 0;
  /** Notifications pushed so far. */
  notes = 0;
  /** Notifications posted so far (after coalescing). */
  notesPosted = 0;
  /** Packed posts and the JSON characters they carried. */
  packedPosts = 0;
  packedBytes = 0;
  /** Host CPU time of this batcher's posting, in ms ({@link cpuNow}): each flush and direct
   * post — building the batch, serialising it, `post` itself (VS Code's `postMessage`). */
  cpuMs = 0;
  /** The measured sections {@link cpuMs} sums (each read the clock twice). */
  sections = 0;
  private depth = 0;
  /** The most posts seen in any one-second window so far (VP7 says ≤ 60). */
  maxPostsPerSecond = 0;
  private recent: number[] = [];

  constructor(
    private readonly post: (message: unknown) => void,
    private readonly clock: Clock = realClock,
    private readonly interval = STREAM_POST_INTERVAL_MS,
    private readonly minGap = MIN_POST_INTERVAL_MS,
  ) {}

  /** Queues one notification; it is posted in the next window (or on resume). */
  push(note: Note): void {
    this.notes++;
    if (!this.coalesce(note)) {
      if (this.isPaused && this.items.length >= HIDDEN_BACKLOG_MAX) {
        this.items = [];
        this.overflowed = true;
      }
      if (!this.overflowed || !this.isPaused) this.items.push(note);
    }
    if (!this.isPaused) this.schedule(this.interval);
  }

  /** Merges `note` into what waits; true when nothing is left to append. */
  private coalesce(note: Note): boolean {
    const n = this.items.length;
    if (n === 0) return false;
    const last = this.items[n - 1];
    if (sameDeltaRun(last, note)) {
      let merged = last;
      if (!this.owned.has(last)) {
        const ev = last.params.event;
        merged = { method: last.method, params: { ...last.params, event: { ...ev, assistantMessageEvent: { ...ev.assistantMessageEvent } } } };
        this.owned.add(merged);
        this.items[n - 1] = merged;
      }
      merged.params.event.assistantMessageEvent.delta += note.params.event.assistantMessageEvent.delta;
      return true;
    }
    const id = toolUpdateId(note);
    if (id !== undefined) {
      // Back over other tools' updates only: anything else between keeps its place.
      for (let i = n - 1; i >= 0; i--) {
        const other = toolUpdateId(this.items[i]);
        if (other === undefined) break;
        if (other === id) {
          this.items.splice(i, 1);
          this.items.push(note);
          return true;
        }
      }
    }
    return false;
  }

  /** Posts what is waiting now (notifications first, then other messages, in order). */
  flush(): void {
    this.timed(() => this.flushNow());
  }

  /** Runs `f` as a measured section ({@link cpuMs}, {@link sections}); a section inside
   * another is part of it. */
  private timed(f: () => void): void {
    if (this.depth > 0) {
      f();
      return;
    }
    this.depth++;
    const t0 = cpuNow();
    try {
      f();
    } finally {
      this.depth--;
      this.cpuMs += cpuNow() - t0;
      this.sections++;
    }
  }

  private flushNow(): void {
    if (this.timer !== undefined) {
      this.clock.clearTimeout(this.timer);
      this.timer = undefined;
      this.timerAt = Infinity;
    }
    const items = this.items;
    const others = this.others;
    this.items = [];
    this.others = [];
    const messages: unknown[] = [];
    if (items.length) {
      this.notesPosted += items.length;
      messages.push({ type: "notifications", items });
    }
    for (const m of others) messages.push(m);
    if (messages.length === 0) return;
    if (this.packing && (messages.length > 1 || others.length > 0 || items.length >= PACK_MIN_ITEMS)) {
      this.sendPacked(messages);
      return;
    }
    for (const m of messages) this.send(m);
    // Several posts at once use up as many gaps: the next post waits for them.
    if (messages.length > 1) this.lastPost += (messages.length - 1) * this.minGap;
  }

  /** Posts another message (a response, a server question) after the notifications waiting
   * before it: at once when nothing waits and the last post is `minGap` ago, or when the panel
   * is paused (with everything waiting); else with them `minGap` after the last post. */
  direct(message: unknown): void {
    if (this.isPaused) {
      this.others.push(message);
      this.flush();
      return;
    }
    if (this.items.length === 0 && this.others.length === 0 && this.clock.now() >= this.lastPost + this.minGap) {
      this.timed(() => (this.packing ? this.sendPacked([message]) : this.send(message)));
      return;
    }
    this.others.push(message);
    this.schedule(this.minGap);
  }

  /** The panel is hidden: keep notifications until {@link resume}. */
  pause(): void {
    if (this.isPaused) return;
    this.isPaused = true;
    if (this.timer !== undefined) {
      this.clock.clearTimeout(this.timer);
      this.timer = undefined;
      this.timerAt = Infinity;
    }
  }

  /** The panel is hidden: `message` (if any) is posted now, after everything waiting, and then
   * nothing until {@link resumeWith}. */
  pauseAfter(message?: unknown): void {
    if (this.isPaused) return;
    if (message !== undefined) {
      this.others.push(message);
      this.flush();
    }
    this.pause();
  }

  /** The panel is shown: the backlog is posted in one go and `message` (if any) right after it,
   * before anything that comes later. */
  resumeWith(message?: unknown): void {
    if (!this.isPaused) return;
    if (this.overflowed) {
      this.overflowed = false;
      this.items = [];
      this.onOverflow();
    }
    if (message !== undefined) this.others.push(message);
    this.isPaused = false;
    this.flush();
  }

  /** The panel is shown: post the backlog in one go (or ask for a reload after an overflow). */
  resume(): void {
    if (!this.isPaused) return;
    this.isPaused = false;
    if (this.overflowed) {
      this.overflowed = false;
      this.items = [];
      this.onOverflow();
    }
    this.flush();
  }

  get paused(): boolean {
    return this.isPaused;
  }

  /** A flush `gap` ms after the last post (or sooner, if one is due sooner already). */
  private schedule(gap: number): void {
    if (this.isPaused) return;
    const at = this.lastPost + gap;
    if (this.timer !== undefined) {
      if (this.timerAt <= at) return;
      this.clock.clearTimeout(this.timer);
    }
    this.timerAt = at;
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      this.timerAt = Infinity;
      this.flush();
    }, Math.max(0, at - this.clock.now()));
  }

  /** Messages waiting for the next post. */
  get pending(): number {
    return this.items.length + this.others.length;
  }

  dispose(): void {
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Infinity;
    this.items = [];
    this.others = [];
  }

  private sendPacked(messages: unknown[]): void {
    // JSON text, not its UTF-8 bytes: VS Code carries a string through its RPC as JSON, and a
    // typed array as a separate buffer (found in ArrayBuffer references, copied into a "mixed"
    // message): the string costs the host a quarter less per post in code-server.
    const json = JSON.stringify(messages);
    this.packedPosts++;
    this.packedBytes += json.length;
    this.send({ type: "packed", json });
  }

  private send(message: unknown): void {
    const now = this.clock.now();
    this.lastPost = now;
    this.posts++;
    this.recent.push(now);
    while (this.recent.length && this.recent[0] <= now - 1000) this.recent.shift();
    if (this.recent.length > this.maxPostsPerSecond) this.maxPostsPerSecond = this.recent.length;
    this.post(message);
  }
}

/** A panel as the router sees it. */
export interface RouteTarget {
  /** The session the panel shows (`null`: a new session not created yet). */
  sessionId: string | null;
  /** Set while the panel waits for the session its first prompt creates. */
  awaitingNewSession: boolean;
  deliver(note: Note): void;
}

/** How long notifications of a session no panel shows are kept for a late attach, in ms. */
export const BACKLOG_MS = 30_000;
/** At most this many notifications are kept per unattached session. */
export const BACKLOG_MAX = 5_000;

/** Routes notifications to the panels attached to their `sessionId`. */
export class Router {
  private readonly targets = new Set<RouteTarget>();
  private readonly backlog = new Map<string, { since: number; notes: Note[] }>();

  constructor(private readonly clock: Pick<Clock, "now"> = realClock) {}

  add(target: RouteTarget): void {
    this.targets.add(target);
  }

  remove(target: RouteTarget): void {
    this.targets.delete(target);
  }

  /** Panels showing `sessionId`. */
  panelsOf(sessionId: string): RouteTarget[] {
    const out: RouteTarget[] = [];
    for (const t of this.targets) if (t.sessionId === sessionId) out.push(t);
    return out;
  }

  /** Delivers a notification to every panel on its session, or keeps it in the backlog.
   * Notifications without a `sessionId` go to every panel. Returns how many got it. */
  route(note: Note): number {
    const sessionId: unknown = note.params?.sessionId;
    if (typeof sessionId !== "string") {
      for (const t of this.targets) t.deliver(note);
      return this.targets.size;
    }
    let n = 0;
    for (const t of this.targets) {
      if (t.sessionId !== sessionId) continue;
      t.deliver(note);
      n++;
    }
    if (n === 0) this.keep(sessionId, note);
    return n;
  }

  /** Attaches `target` to `sessionId`. A panel that was waiting for its new session first
   * gets what arrived for that session before it attached. */
  attach(target: RouteTarget, sessionId: string | null): void {
    const wasWaiting = target.awaitingNewSession;
    target.sessionId = sessionId;
    target.awaitingNewSession = false;
    if (sessionId === null) return;
    const kept = this.backlog.get(sessionId);
    this.backlog.delete(sessionId);
    if (wasWaiting && kept) for (const n of kept.notes) target.deliver(n);
  }

  /** Notifications kept for `sessionId` (for tests and diagnostics). */
  backlogOf(sessionId: string): Note[] {
    return this.backlog.get(sessionId)?.notes ?? [];
  }

  private keep(sessionId: string, note: Note): void {
    const now = this.clock.now();
    for (const [id, b] of this.backlog) if (now - b.since > BACKLOG_MS) this.backlog.delete(id);
    let b = this.backlog.get(sessionId);
    if (!b) {
      b = { since: now, notes: [] };
      this.backlog.set(sessionId, b);
    }
    if (b.notes.length < BACKLOG_MAX) b.notes.push(note);
  }
}
