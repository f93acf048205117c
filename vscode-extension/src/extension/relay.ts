/**
 * Host-side relay of server notifications to chat panels (no `vscode` import, so it runs under
 * `node --test`).
 *
 * - {@link Batcher}: collects notifications for one panel and posts them as one
 *   `{type: "notifications", items}` message, at most once per {@link MIN_POST_INTERVAL_MS}
 *   (≤ 60 posts per second, CLIENTS.md VP7), never reordered. Anything else posted to the panel
 *   (responses, server requests) first flushes what is waiting, so the panel sees messages in
 *   arrival order.
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

/** Smallest gap between two posts of one panel, in ms (17: at most 58.8 posts per second, so
 * no one-second window holds more than 60 even with timer rounding). */
export const MIN_POST_INTERVAL_MS = 17;

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

/** Batches notifications for one panel; `post` receives each outgoing message. */
export class Batcher {
  private items: Note[] = [];
  private timer: unknown = undefined;
  private lastPost = -Infinity;
  /** Posts made so far (notification batches and direct posts). */
  posts = 0;
  /** Notifications posted so far. */
  notes = 0;
  /** The most posts seen in any one-second window so far (VP7 says ≤ 60). */
  maxPostsPerSecond = 0;
  private recent: number[] = [];

  constructor(
    private readonly post: (message: unknown) => void,
    private readonly clock: Clock = realClock,
    private readonly interval = MIN_POST_INTERVAL_MS,
  ) {}

  /** Queues one notification; it is posted in the next window. */
  push(note: Note): void {
    this.items.push(note);
    if (this.timer !== undefined) return;
    const wait = Math.max(0, this.lastPost + this.interval - this.clock.now());
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      this.flush();
    }, wait);
  }

  /** Posts what is waiting now (if anything). */
  flush(): void {
    if (this.timer !== undefined) {
      this.clock.clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.items.length === 0) return;
    const items = this.items;
    this.items = [];
    this.notes += items.length;
    this.send({ type: "notifications", items });
  }

  /** Posts another message after flushing waiting notifications (keeps arrival order). */
  direct(message: unknown): void {
    this.flush();
    this.send(message);
  }

  /** Notifications waiting for the next post. */
  get pending(): number {
    return this.items.length;
  }

  dispose(): void {
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.items = [];
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
    return [...this.targets].filter((t) => t.sessionId === sessionId);
  }

  /** Delivers a notification to every panel on its session, or keeps it in the backlog.
   * Notifications without a `sessionId` go to every panel. Returns how many got it. */
  route(note: Note): number {
    const sessionId: unknown = note.params?.sessionId;
    if (typeof sessionId !== "string") {
      for (const t of this.targets) t.deliver(note);
      return this.targets.size;
    }
    const panels = this.panelsOf(sessionId);
    for (const t of panels) t.deliver(note);
    if (panels.length === 0) this.keep(sessionId, note);
    return panels.length;
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
