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

export class Transcript {
  readonly scroller: HTMLDivElement;
  private readonly top: HTMLDivElement;
  private readonly rows: HTMLDivElement;
  private readonly bottom: HTMLDivElement;
  private readonly views = new Map<string, RowView>();
  private readonly heights = new Map<string, number>();
  /** Rendered range of `store.order`: [lo, hi). */
  private lo = 0;
  private hi = 0;
  private order: string[] = [];
  atBottom = true;
  /** Set by the panel: called when the top of the loaded history comes into view. */
  onNeedOlder: (() => void) | null = null;
  private ignoreScroll = false;

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
        if (this.ignoreScroll) {
          this.ignoreScroll = false;
          return;
        }
        const s = this.scroller;
        this.atBottom = s.scrollHeight - s.scrollTop - s.clientHeight < 4;
        this.requestFrame();
      },
      { passive: true },
    );
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
  }

  clear(): void {
    this.views.clear();
    this.heights.clear();
    this.acc = null;
    this.rows.textContent = "";
    this.lo = this.hi = 0;
    this.order = [];
    this.atBottom = true;
    this.top.style.height = "0px";
    this.bottom.style.height = "0px";
  }

  private setScrollTop(v: number): void {
    if (Math.abs(this.scroller.scrollTop - v) < 0.5) return;
    this.ignoreScroll = true;
    this.scroller.scrollTop = v;
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

  /** Brings the DOM up to date with the store (call from one animation frame). */
  render(store: Store): void {
    const s = this.scroller;
    const vh = Math.max(s.clientHeight, 200);
    // Anchor on the row at the viewport's top, by id (survives prepends and reorders).
    let anchorId: string | null = null;
    let anchorOff = 0;
    if (!this.atBottom && this.order.length) {
      const a = this.indexAt(s.scrollTop);
      anchorId = this.order[a] ?? null;
      anchorOff = s.scrollTop - this.prefix(a);
    }
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
      if (anchorId === from) anchorId = to;
    }
    store.renamed.length = 0;
    if (store.orderChanged || this.order !== store.order) {
      this.order = store.order;
      this.acc = null;
      const alive = new Set(this.order);
      for (const id of [...this.views.keys()]) if (!alive.has(id)) this.views.delete(id);
    }
    store.orderChanged = false;

    // Patch changed rows that are shown.
    for (const id of store.dirty) {
      const v = this.views.get(id);
      const item = store.items.get(id);
      if (v && item) v.update(item);
    }
    store.dirty.clear();

    const n = this.order.length;
    let scrollTarget = 0;
    for (let pass = 0; pass < 3; pass++) {
      const total = this.sum(0, n);
      let viewTop: number;
      if (this.atBottom) viewTop = Math.max(0, total - vh);
      else if (anchorId !== null && this.order.includes(anchorId)) viewTop = this.prefix(this.order.indexOf(anchorId)) + anchorOff;
      else viewTop = s.scrollTop;
      scrollTarget = viewTop;
      const wantLo = n ? this.indexAt(Math.max(0, viewTop - vh * OVERSCAN)) : 0;
      const wantHi = n ? (this.atBottom ? n : Math.min(n, this.indexAt(viewTop + vh * (1 + OVERSCAN)) + 1)) : 0;
      const changed = this.setWindow(store, wantLo, wantHi);
      // Measure what is shown (one layout), then the spacers.
      for (const child of this.rows.children) {
        const el = child as HTMLElement;
        this.setHeight(el.dataset.id!, el.offsetHeight);
      }
      this.top.style.height = `${this.sum(0, this.lo)}px`;
      this.bottom.style.height = `${this.sum(this.hi, n)}px`;
      if (!changed) break;
    }
    if (this.atBottom) this.setScrollTop(s.scrollHeight - s.clientHeight);
    else this.setScrollTop(scrollTarget);

    if (this.lo === 0 && this.onNeedOlder && s.scrollTop < vh * OVERSCAN) this.onNeedOlder();
  }

  /** Shows rows [wantLo, wantHi) (keeping up to STEP more on each side already shown, so small
   * scrolls do not churn). Returns whether rows were added. */
  private setWindow(store: Store, wantLo: number, wantHi: number): boolean {
    const n = this.order.length;
    let lo = wantLo;
    let hi = wantHi;
    // Keep rows already shown next to the wanted range (hysteresis).
    const shownIds = new Set([...this.rows.children].map((c) => (c as HTMLElement).dataset.id!));
    while (lo > 0 && lo > wantLo - STEP && shownIds.has(this.order[lo - 1]!)) lo--;
    while (hi < n && hi < wantHi + STEP && shownIds.has(this.order[hi]!)) hi++;
    let added = false;
    let cursor: ChildNode | null = this.rows.firstChild;
    const keep = new Set<Element>();
    for (let i = lo; i < hi; i++) {
      const id = this.order[i]!;
      const had = this.views.has(id);
      const v = this.view(store, id);
      if (!v) continue;
      keep.add(v.el);
      if (!had || !v.el.isConnected) added = true;
      if (v.el === cursor) cursor = cursor.nextSibling;
      else this.rows.insertBefore(v.el, cursor);
    }
    // Remove the rest (their measured heights stay for the spacers).
    for (const child of [...this.rows.children]) {
      if (keep.has(child)) continue;
      this.views.delete((child as HTMLElement).dataset.id!);
      child.remove();
    }
    this.lo = lo;
    this.hi = hi;
    return added;
  }

  /** Test hook: rendered range and counts. */
  stats(): { lo: number; hi: number; rows: number; views: number } {
    return { lo: this.lo, hi: this.hi, rows: this.rows.children.length, views: this.views.size };
  }
}
