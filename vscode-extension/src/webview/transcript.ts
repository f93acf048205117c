/**
 * The windowed transcript: only the rows around the viewport are in the DOM; rows above and
 * below are replaced by two spacers whose heights are the rows' measured heights (estimated
 * for rows never shown). The window grows as the user scrolls and is trimmed far from the
 * viewport, so the DOM stays small for any session length (VP1: ≤ 5,000 nodes).
 *
 * Scrolling: the view sticks to the bottom only while the user is at the bottom; otherwise every
 * change is anchored on the first visible row, so content growing or arriving above the
 * viewport never moves what the user reads (VP3). `overflow-anchor` is off (we anchor ourselves).
 *
 * Work happens in `render()`, which the panel calls from one animation frame after the store
 * changed; nothing runs while nothing changes (VP5).
 */
import type { Store } from "./store";
import { createRow, type RowHost, type RowView } from "./rows";

const ESTIMATE = 80;
/** Rows added per extension step. */
const STEP = 24;
/** Keep at least this many viewport heights rendered on each side. */
const OVERSCAN = 1.5;
/** Time per frame for making rows outside the viewport (ms); the viewport's rows are made
 * whatever they cost. */
const ROW_BUDGET_MS = 6;

/** The height a row takes in the list: its border box (fractional, as laid out: rounded
 * heights add up to a drift over many rows) and its vertical margins (the list is a flex
 * column, so margins never collapse and the sum of the rows' slots is the list's height). */
function slot(el: HTMLElement): { height: number; tail: number } {
  const cs = getComputedStyle(el);
  if (cs.display === "none") return { height: 0, tail: 0 };
  const tail = parseFloat(cs.marginBottom) || 0;
  return { height: el.getBoundingClientRect().height + (parseFloat(cs.marginTop) || 0) + tail, tail };
}

export class Transcript {
  readonly scroller: HTMLDivElement;
  private readonly top: HTMLDivElement;
  private readonly rows: HTMLDivElement;
  private readonly bottom: HTMLDivElement;
  private readonly views = new Map<string, RowView>();
  private readonly heights = new Map<string, number>();
  /** Each measured row's bottom margin (px): the part of its slot below its box. */
  private readonly tails = new Map<string, number>();
  /** Rendered range of `store.order`: [lo, hi). */
  private lo = 0;
  private hi = 0;
  private order: string[] = [];
  atBottom = true;
  /** Set by the panel: called when the top of the loaded history comes into view. */
  onNeedOlder: (() => void) | null = null;
  /** Set by the panel: called after a scroll that the user made (not our pinning/anchoring). */
  onUserScroll: (() => void) | null = null;
  /** Where our last programmatic scroll put `scrollTop` (null after the user scrolled). */
  private ownTop: number | null = null;
  /** The page or the list changed size since the last render: scrolls are not the user's. */
  private resized = false;
  /** The row at the viewport's top after the last render, and how far it was scrolled into
   * (the anchor when a resize clamped `scrollTop` before the user scrolled). */
  private lastAnchor: { id: string; off: number } | null = null;

  constructor(parent: HTMLElement, private readonly host: RowHost, private readonly requestFrame: () => void) {
    this.scroller = document.createElement("div");
    this.scroller.id = "transcript";
    this.scroller.tabIndex = 0;
    this.scroller.setAttribute("role", "log");
    this.scroller.setAttribute("aria-label", "Conversation");
    this.top = document.createElement("div");
    this.top.className = "spacer";
    this.rows = document.createElement("div");
    this.rows.className = "rows";
    this.bottom = document.createElement("div");
    this.bottom.className = "spacer";
    this.scroller.append(this.top, this.rows, this.bottom);
    parent.append(this.scroller);
    this.scroller.addEventListener(
      "scroll",
      () => {
        const s = this.scroller;
        // Our own scrolling (pinning, anchoring) lands where we put it: not the user's.
        if (this.ownTop !== null && Math.abs(s.scrollTop - this.ownTop) < 1) return;
        // A scroll after the page or the list changed size (VS Code lays a webview out again
        // when it hides and shows it, at other sizes on the way) is the browser clamping
        // `scrollTop` to a layout that may be gone by now: not the user's either. The next
        // render pins again, or keeps the row that was read (VF6).
        if (this.resized || s.clientHeight === 0) {
          this.requestFrame();
          return;
        }
        this.ownTop = null;
        this.atBottom = s.scrollHeight - s.scrollTop - s.clientHeight < 4;
        this.requestFrame();
        this.onUserScroll?.();
      },
      { passive: true },
    );
    // A resize (panel width, window) re-measures and keeps the anchor or the pin.
    const resized = () => {
      this.resized = true;
      this.orderDirty = true;
      this.requestFrame();
    };
    new ResizeObserver(resized).observe(this.scroller);
    // The page's own size (the webview's frame): its event comes before the scroll events of
    // the same frame, the observer's after them.
    window.addEventListener("resize", resized);
  }

  /** Distance from the bottom in px (kept in webview state). */
  fromBottom(): number {
    const s = this.scroller;
    return Math.max(0, s.scrollHeight - s.scrollTop - s.clientHeight);
  }

  /** Scrolls so that the bottom is `px` away (0: pinned). */
  restore(px: number): void {
    this.atBottom = px <= 0;
    const s = this.scroller;
    this.setScrollTop(s.scrollHeight - s.clientHeight - px);
    this.noteAnchor();
  }

  clear(): void {
    this.views.clear();
    this.heights.clear();
    this.tails.clear();
    this.acc = null;
    this.orderDirty = true;
    this.rows.textContent = "";
    this.lo = this.hi = 0;
    this.order = [];
    this.atBottom = true;
    this.lastAnchor = null;
    this.topPx = this.bottomPx = -1;
    this.setSpacers();
  }

  /** Keeps the row at the viewport's top (see {@link lastAnchor}). */
  private noteAnchor(): void {
    const top = this.scroller.scrollTop;
    this.lastAnchor = null;
    if (this.atBottom || !this.order.length) return;
    const { a, off } = this.readAt(top);
    this.lastAnchor = { id: this.order[a]!, off };
  }

  private setScrollTop(v: number): void {
    const s = this.scroller;
    if (Math.abs(s.scrollTop - v) >= 0.5) s.scrollTop = v;
    this.ownTop = s.scrollTop;
  }

  private heightOf(id: string): number {
    return this.heights.get(id) ?? ESTIMATE;
  }

  /** Prefix sums of the row heights (`acc[i]` = top of row i), rebuilt when a height or the
   * order changed. */
  private acc: Float64Array | null = null;

  private setHeight(id: string, h: number): void {
    if (this.heights.get(id) !== h) {
      this.heights.set(id, h);
      this.acc = null;
    }
  }

  private prefixes(): Float64Array {
    if (this.acc && this.acc.length === this.order.length + 1) return this.acc;
    const a = new Float64Array(this.order.length + 1);
    for (let i = 0; i < this.order.length; i++) a[i + 1] = a[i]! + this.heightOf(this.order[i]!);
    this.acc = a;
    return a;
  }

  private sum(from: number, to: number): number {
    const a = this.prefixes();
    return a[to]! - a[from]!;
  }

  private view(store: Store, id: string): RowView | null {
    let v = this.views.get(id);
    const item = store.items.get(id);
    if (!item) return null;
    if (!v) {
      v = createRow(item, this.host);
      v.update(item);
      this.views.set(id, v);
    }
    return v;
  }

  /** Top of row `i` in content coordinates (sum of the heights above it). */
  private prefix(i: number): number {
    return this.sum(0, i);
  }

  /** The index of the row at content offset `y` (clamped to the rows). */
  private indexAt(y: number): number {
    const a = this.prefixes();
    const n = this.order.length;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (a[mid]! <= y) lo = mid;
      else hi = mid - 1;
    }
    return Math.max(0, lo);
  }

  /** The row being read when the viewport's top is at content offset `y`: the first row with
   * more than a pixel of its box below `y`. A row above it that shows only its bottom margin,
   * or less than a pixel of its box, is not read: anchoring on it would let a new width that
   * rewraps it move the row that is read (VP6). Returns the row's index and `y`'s offset from
   * the top of its slot (negative when `y` is in the margin of the row above). */
  private readAt(y: number): { a: number; off: number } {
    let a = this.indexAt(y);
    const n = this.order.length;
    while (a + 1 < n && this.prefix(a + 1) - (this.tails.get(this.order[a]!) ?? 0) <= y + 1) a++;
    return { a, off: y - this.prefix(a) };
  }

  /** Brings the DOM up to date with the store (call from one animation frame). */
  render(store: Store): void {
    const s = this.scroller;
    const vh = Math.max(s.clientHeight, 200);
    // Anchor on the row at the viewport's top, by id (survives prepends and reorders).
    let anchorId: string | null = null;
    let anchorOff = 0;
    // After a resize that moved `scrollTop` away from where we put it (a clamp), the row read
    // is the one noted by the last render; otherwise it is the one at `scrollTop`.
    const clamped = this.resized && this.ownTop !== null && Math.abs(s.scrollTop - this.ownTop) >= 1;
    if (!this.atBottom && clamped && this.lastAnchor) {
      anchorId = this.lastAnchor.id;
      anchorOff = this.lastAnchor.off;
    } else if (!this.atBottom && this.order.length) {
      const { a, off } = this.readAt(s.scrollTop);
      anchorId = this.order[a] ?? null;
      anchorOff = off;
    }
    this.resized = false;
    for (const [from, to] of store.renamed) {
      const v = this.views.get(from);
      if (v) {
        this.views.delete(from);
        v.rename(to);
        this.views.set(to, v);
      }
      const h = this.heights.get(from);
      if (h !== undefined) {
        this.heights.delete(from);
        this.heights.set(to, h);
      }
      const tail = this.tails.get(from);
      if (tail !== undefined) {
        this.tails.delete(from);
        this.tails.set(to, tail);
      }
      if (anchorId === from) anchorId = to;
    }
    store.renamed.length = 0;
    if (store.orderChanged || this.order !== store.order || store.renamed.length) {
      this.orderDirty = true;
      this.order = store.order;
      this.acc = null;
      const alive = new Set(this.order);
      for (const id of [...this.views.keys()]) if (!alive.has(id)) this.views.delete(id);
    }
    store.orderChanged = false;

    // Patch changed rows that are shown.
    let allShown = true;
    for (const id of store.dirty) {
      const v = this.views.get(id);
      const item = store.items.get(id);
      if (v && item) {
        v.update(item);
        if (this.atBottom && this.heights.delete(id)) this.acc = null;
      } else if (item) allShown = false;
    }
    store.dirty.clear();

    const n = this.order.length;
    // Fast path while text streams at the bottom: the window already reaches the end, so only
    // the patched rows changed; pin to the bottom (one layout) and measure them later.
    if (this.atBottom && allShown && this.hi === n && n > 0 && !this.orderDirty) {
      this.setScrollTop(s.scrollHeight - s.clientHeight);
      return;
    }
    this.orderDirty = false;
    let scrollTarget = 0;
    // Rows beyond the viewport are made within a time budget per frame; the rest next frame
    // (paging in 50 older messages never makes one long task).
    const deadline = performance.now() + ROW_BUDGET_MS;
    let complete = true;
    for (let pass = 0; pass < 3; pass++) {
      const total = this.sum(0, n);
      let viewTop: number;
      if (this.atBottom) viewTop = Math.max(0, total - vh);
      else if (anchorId !== null && this.order.includes(anchorId)) viewTop = this.prefix(this.order.indexOf(anchorId)) + anchorOff;
      else viewTop = s.scrollTop;
      scrollTarget = viewTop;
      const wantLo = n ? this.indexAt(Math.max(0, viewTop - vh * OVERSCAN)) : 0;
      const wantHi = n ? (this.atBottom ? n : Math.min(n, this.indexAt(viewTop + vh * (1 + OVERSCAN)) + 1)) : 0;
      const visLo = n ? Math.max(wantLo, this.indexAt(viewTop)) : 0;
      const visHi = n ? Math.min(wantHi, this.indexAt(viewTop + vh) + 1) : 0;
      const w = this.setWindow(store, wantLo, wantHi, visLo, visHi, deadline);
      complete = w.complete;
      // Measure what is shown (one layout), then the spacers.
      for (const child of this.rows.children) {
        const el = child as HTMLElement;
        const m = slot(el);
        this.setHeight(el.dataset.id!, m.height);
        this.tails.set(el.dataset.id!, m.tail);
      }
      this.setSpacers();
      if (!w.added) break;
    }
    // The rows were just measured: rows above the anchor that changed height (a new width, a
    // card that grew) move it, so its place is taken from the new heights (VP3, VP6).
    if (!this.atBottom && anchorId !== null) {
      const a = this.order.indexOf(anchorId);
      if (a >= 0) scrollTarget = this.prefix(a) + Math.min(anchorOff, Math.max(0, this.heightOf(anchorId) - 1));
    }
    if (this.atBottom) this.setScrollTop(s.scrollHeight - s.clientHeight);
    else this.setScrollTop(scrollTarget);
    this.noteAnchor();
    if (!complete) {
      // Not the fast path next frame: the window is still being filled.
      this.orderDirty = true;
      this.requestFrame();
      return;
    }

    if (this.lo === 0 && this.onNeedOlder && s.scrollTop < vh * OVERSCAN) this.onNeedOlder();
  }

  /** The order changed since the last full render (the fast path does not apply). */
  private orderDirty = true;
  private topPx = -1;
  private bottomPx = -1;
  /** Sets the spacers' heights, writing only what changed (no style invalidation otherwise). */
  private setSpacers(): void {
    const t = this.sum(0, this.lo);
    const b = this.sum(this.hi, this.order.length);
    if (t !== this.topPx) {
      this.topPx = t;
      this.top.style.height = `${t}px`;
    }
    if (b !== this.bottomPx) {
      this.bottomPx = b;
      this.bottom.style.height = `${b}px`;
    }
  }

  /** Shows rows [wantLo, wantHi): the visible ones [visLo, visHi) always, the others (made
   * nearest the viewport first, upwards then downwards) while the clock is before `deadline`;
   * rows already shown next to the wanted range stay (up to STEP more on each side, so small
   * scrolls do not churn). Returns whether rows were added, and whether the whole wanted range
   * is shown. */
  private setWindow(store: Store, wantLo: number, wantHi: number, visLo: number, visHi: number, deadline: number): { added: boolean; complete: boolean } {
    const n = this.order.length;
    const ready = (i: number) => this.views.has(this.order[i]!) || !store.items.has(this.order[i]!);
    let complete = true;
    for (let i = visLo; i < visHi; i++) this.view(store, this.order[i]!);
    let lo = visLo;
    while (lo > wantLo) {
      if (!ready(lo - 1) && performance.now() > deadline) {
        complete = false;
        break;
      }
      this.view(store, this.order[--lo]!);
    }
    let hi = visHi;
    while (hi < wantHi) {
      if (!ready(hi) && performance.now() > deadline) {
        complete = false;
        break;
      }
      this.view(store, this.order[hi++]!);
    }
    // Keep rows already shown next to the range (hysteresis).
    const shownIds = new Set([...this.rows.children].map((c) => (c as HTMLElement).dataset.id!));
    while (lo > 0 && lo > wantLo - STEP && shownIds.has(this.order[lo - 1]!)) lo--;
    while (hi < n && hi < wantHi + STEP && shownIds.has(this.order[hi]!)) hi++;
    let added = false;
    let cursor: ChildNode | null = this.rows.firstChild;
    const keep = new Set<Element>();
    for (let i = lo; i < hi; i++) {
      const id = this.order[i]!;
      const v = this.views.get(id);
      if (!v) continue;
      keep.add(v.el);
      if (!v.el.isConnected) added = true;
      if (v.el === cursor) cursor = cursor.nextSibling;
      else this.rows.insertBefore(v.el, cursor);
    }
    // Remove the rest (their measured heights stay for the spacers).
    for (const child of [...this.rows.children]) {
      if (keep.has(child)) continue;
      this.views.delete((child as HTMLElement).dataset.id!);
      child.remove();
    }
    // Views made but not shown (none, unless an item vanished) are dropped with their rows.
    for (const id of this.views.keys()) if (!keep.has(this.views.get(id)!.el)) this.views.delete(id);
    this.lo = lo;
    this.hi = hi;
    return { added, complete };
  }

  /** Test hook: rendered range and counts. */
  stats(): { lo: number; hi: number; rows: number; views: number } {
    return { lo: this.lo, hi: this.hi, rows: this.rows.children.length, views: this.views.size };
  }
}
