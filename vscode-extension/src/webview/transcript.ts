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
/** Trim rows further than this many viewport heights from the viewport. */
const TRIM = 4;

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

  private sum(from: number, to: number): number {
    let h = 0;
    for (let i = from; i < to; i++) h += this.heightOf(this.order[i]!);
    return h;
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

  /** Brings the DOM up to date with the store (call from one animation frame). */
  render(store: Store): void {
    const s = this.scroller;
    // Anchor: the first row whose bottom is below the viewport's top.
    let anchor: HTMLElement | null = null;
    let anchorTop = 0;
    if (!this.atBottom) {
      const top = s.getBoundingClientRect().top;
      for (const child of this.rows.children) {
        const r = (child as HTMLElement).getBoundingClientRect();
        if (r.bottom > top) {
          anchor = child as HTMLElement;
          anchorTop = r.top;
          break;
        }
      }
    }

    if (store.orderChanged || this.order !== store.order) this.reorder(store);
    store.orderChanged = false;

    // Patch changed rows that are shown.
    for (const id of store.dirty) {
      const v = this.views.get(id);
      const item = store.items.get(id);
      if (v && item) v.update(item);
      else if (!v) this.heights.delete(id);
    }
    store.dirty.clear();

    this.fill(store);

    if (anchor && anchor.isConnected) {
      const d = anchor.getBoundingClientRect().top - anchorTop;
      if (d !== 0) this.setScrollTop(s.scrollTop + d);
    } else if (this.atBottom) {
      this.setScrollTop(s.scrollHeight - s.clientHeight);
    }
  }

  /** Re-derives the window after `store.order` changed (prepends, inserts, resets). */
  private reorder(store: Store): void {
    const next = store.order;
    const shown = [...this.rows.children].map((c) => (c as HTMLElement).dataset.id!);
    const index = new Map<string, number>();
    next.forEach((id, i) => index.set(id, i));
    // Drop views of items gone from the order.
    for (const id of [...this.views.keys()]) if (!index.has(id)) this.views.delete(id);
    this.order = next;
    const present = shown.filter((id) => index.has(id));
    if (present.length === 0) {
      this.rows.textContent = "";
      this.lo = this.hi = next.length; // start from the bottom
      return;
    }
    // The window is the contiguous range covering what is shown now.
    let lo = Infinity;
    let hi = -1;
    for (const id of present) {
      const i = index.get(id)!;
      lo = Math.min(lo, i);
      hi = Math.max(hi, i);
    }
    this.lo = lo;
    this.hi = hi + 1;
    // Rebuild the rows element in order, reusing views (only moved rows are touched).
    let cursor: ChildNode | null = this.rows.firstChild;
    for (let i = this.lo; i < this.hi; i++) {
      const v = this.view(store, next[i]!);
      if (!v) continue;
      if (v.el === cursor) {
        cursor = cursor.nextSibling;
      } else {
        this.rows.insertBefore(v.el, cursor);
      }
    }
    while (cursor) {
      const n: ChildNode | null = cursor.nextSibling;
      cursor.remove();
      cursor = n;
    }
  }

  /** Extends the window to cover the viewport with overscan, and trims far rows. */
  private fill(store: Store): void {
    const s = this.scroller;
    const vh = Math.max(s.clientHeight, 200);
    const n = this.order.length;
    // When pinned to the bottom, the window must reach the end.
    if (this.atBottom && this.hi < n) {
      while (this.hi < n) this.appendRow(store);
    }
    for (let guard = 0; guard < 50; guard++) {
      const topEdge = this.top.offsetHeight;
      const rowsH = this.rows.offsetHeight;
      const viewTop = this.atBottom ? Math.max(0, topEdge + rowsH - vh) : s.scrollTop;
      let changed = false;
      if (this.lo > 0 && viewTop - topEdge < vh * OVERSCAN) {
        for (let k = 0; k < STEP && this.lo > 0; k++) this.prependRow(store);
        changed = true;
      } else if (this.hi < n && topEdge + rowsH - (viewTop + vh) < vh * OVERSCAN) {
        for (let k = 0; k < STEP && this.hi < n; k++) this.appendRow(store);
        changed = true;
      }
      this.top.style.height = `${this.sum(0, this.lo)}px`;
      this.bottom.style.height = `${this.sum(this.hi, n)}px`;
      if (!changed) break;
    }
    this.trim();
    if (this.lo === 0 && this.onNeedOlder) {
      const viewTop = this.atBottom ? Math.max(0, s.scrollHeight - vh) : s.scrollTop;
      if (viewTop < vh * OVERSCAN) this.onNeedOlder();
    }
  }

  private prependRow(store: Store): void {
    this.lo--;
    const v = this.view(store, this.order[this.lo]!);
    if (v) {
      this.rows.insertBefore(v.el, this.rows.firstChild);
      this.heights.delete(v.id);
    }
  }

  private appendRow(store: Store): void {
    const v = this.view(store, this.order[this.hi]!);
    this.hi++;
    if (v) {
      this.rows.append(v.el);
      this.heights.delete(v.id);
    }
  }

  /** Removes rows more than TRIM viewports away (their heights are kept for the spacers). */
  private trim(): void {
    const s = this.scroller;
    const vh = Math.max(s.clientHeight, 200);
    const viewTop = this.atBottom ? s.scrollHeight - vh : s.scrollTop;
    const children = [...this.rows.children] as HTMLElement[];
    if (children.length < STEP * 2) return;
    // Read all geometry first, then write.
    const base = this.top.offsetHeight;
    let y = base;
    const geo = children.map((c) => {
      const h = c.offsetHeight;
      const g = { el: c, top: y, h };
      y += h;
      return g;
    });
    let dropTop = 0;
    while (dropTop < geo.length - STEP && geo[dropTop]!.top + geo[dropTop]!.h < viewTop - vh * TRIM) dropTop++;
    let dropBottom = 0;
    while (dropBottom < geo.length - STEP - dropTop && geo[geo.length - 1 - dropBottom]!.top > viewTop + vh * (TRIM + 1)) dropBottom++;
    if (!dropTop && !dropBottom) return;
    for (let i = 0; i < dropTop; i++) {
      const g = geo[i]!;
      this.heights.set(g.el.dataset.id!, g.h);
      this.views.delete(g.el.dataset.id!);
      g.el.remove();
    }
    for (let i = 0; i < dropBottom; i++) {
      const g = geo[geo.length - 1 - i]!;
      this.heights.set(g.el.dataset.id!, g.h);
      this.views.delete(g.el.dataset.id!);
      g.el.remove();
    }
    this.lo += dropTop;
    this.hi -= dropBottom;
    this.top.style.height = `${this.sum(0, this.lo)}px`;
    this.bottom.style.height = `${this.sum(this.hi, this.order.length)}px`;
  }

  /** Test hook: rendered range and counts. */
  stats(): { lo: number; hi: number; rows: number; views: number } {
    return { lo: this.lo, hi: this.hi, rows: this.rows.children.length, views: this.views.size };
  }
}
