/**
 * One DOM row per transcript item. A `RowView` keeps the elements it made and patches them on
 * `update(item)`; nothing outside its row is touched, so streaming mutates only the streaming
 * row (VP3).
 */
import type { Item, AssistantItem, ToolItem, TextBlock } from "./store";
import { errorInWords } from "./recovery";
import { collapseReturns, setTerminalText } from "./ansi";
import { turnActions } from "./turns";
import { MarkdownView, renderMarkdownFragment } from "./markdown";

/** What rows may ask of the panel. */
export interface RowHost {
  openDiff(toolCallId: string, path: string): void;
  openFile(path: string, line?: number): void;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

const MAX_OUTPUT = 12000;
const PREVIEW_LINES = 8;
const PREVIEW_CHARS = 1200;

/** The last `MAX_OUTPUT` characters of a tool's output (the tail is what matters while it runs). */
function clip(s: string): string {
  return s.length > MAX_OUTPUT ? `… (${s.length - MAX_OUTPUT} characters above)\n${s.slice(-MAX_OUTPUT)}` : s;
}

/** The last lines of an output (a card shows these; the rest on demand). */
export function preview(s: string): { text: string; hidden: number } {
  let end = s.length;
  while (end > 0 && s.charCodeAt(end - 1) === 10) end--;
  const trimmed = end === s.length ? s : s.slice(0, end);
  let cut = trimmed.length;
  for (let i = 0; i < PREVIEW_LINES && cut > 0; i++) {
    const nl = trimmed.lastIndexOf("\n", cut - 1);
    cut = nl < 0 ? 0 : nl;
  }
  if (trimmed.length - cut > PREVIEW_CHARS) cut = trimmed.length - PREVIEW_CHARS;
  let hiddenLines = 0;
  if (cut > 0) {
    hiddenLines = 1;
    for (let i = trimmed.indexOf("\n"); i >= 0 && i < cut; i = trimmed.indexOf("\n", i + 1)) hiddenLines++;
  }
  return { text: cut > 0 ? trimmed.slice(cut).replace(/^\n/, "") : trimmed, hidden: hiddenLines };
}

/** A one-line summary of a call's arguments (the command, the path, the pattern). */
export function argsSummary(toolName: string, args: unknown, argsText: string): string {
  const a = (args && typeof args === "object" ? args : {}) as Record<string, unknown>;
  if (typeof a.command === "string") return a.command;
  if (typeof a.path === "string") {
    const extra = typeof a.pattern === "string" ? ` ${a.pattern}` : "";
    return `${a.path}${extra}`;
  }
  if (typeof a.pattern === "string") return a.pattern;
  if (args === undefined && argsText) return argsText.slice(0, 200);
  const s = JSON.stringify(args ?? {});
  return s === "{}" ? "" : s.slice(0, 200);
}

export abstract class RowView {
  readonly el: HTMLDivElement;
  constructor(public id: string, kind: string) {
    this.el = el("div", `row row-${kind}`);
    this.el.dataset.id = id;
  }
  /** The item got another id (see `Store.renamed`). */
  rename(id: string): void {
    this.id = id;
    this.el.dataset.id = id;
  }
  abstract update(item: Item): void;
}

class UserRow extends RowView {
  private readonly body = el("div", "user-text");
  private readonly meta = el("div", "user-meta");
  constructor(id: string) {
    super(id, "user");
    // Edit / Rewind to here (turns.ts), shown on hover or focus.
    this.el.append(this.body, this.meta, turnActions());
  }
  update(item: Item): void {
    if (item.kind !== "user") return;
    this.body.textContent = item.text;
    this.meta.textContent = item.images ? `${item.images} image${item.images > 1 ? "s" : ""} attached` : "";
    this.meta.hidden = !item.images;
  }
}

class BlockView {
  readonly el: HTMLElement;
  private md: MarkdownView | null = null;
  private thinkingText: HTMLDivElement | null = null;
  private wasDone = false;
  constructor(readonly type: TextBlock["type"]) {
    if (type === "thinking") {
      const d = el("details", "thinking");
      d.open = true;
      const s = el("summary", undefined, "Thinking…");
      this.thinkingText = el("div", "thinking-text");
      d.append(s, this.thinkingText);
      this.el = d;
    } else {
      this.md = new MarkdownView();
      this.el = this.md.el;
    }
  }
  update(b: TextBlock): void {
    if (this.md) this.md.update(b.text, b.done);
    else if (this.thinkingText) {
      if (this.thinkingText.textContent !== b.text) this.thinkingText.textContent = b.text;
      if (b.done && !this.wasDone) {
        (this.el as HTMLDetailsElement).open = false;
        this.el.querySelector("summary")!.textContent = "Thinking";
      }
    }
    this.wasDone = b.done;
  }
}

class AssistantRow extends RowView {
  private readonly blocks: (BlockView | null)[] = [];
  private readonly body = el("div", "assistant-body");
  private readonly error = el("div", "assistant-error");
  constructor(id: string) {
    super(id, "assistant");
    this.error.hidden = true;
    this.el.append(this.body, this.error);
  }
  update(item: Item): void {
    if (item.kind !== "assistant") return;
    const a = item as AssistantItem;
    a.blocks.forEach((b, i) => {
      if (!b) return;
      let v = this.blocks[i];
      if (!v || v.type !== b.type) {
        const nv = new BlockView(b.type);
        if (v) v.el.replaceWith(nv.el);
        else {
          // Keep content order: insert before the first later block already shown.
          const next = this.blocks.slice(i + 1).find((x) => x);
          this.body.insertBefore(nv.el, next ? next.el : null);
        }
        this.blocks[i] = v = nv;
      }
      v.update(b);
    });
    // Only what changed is written (a write of the same value still invalidates style).
    const cl = this.el.classList;
    if (cl.contains("streaming") !== a.streaming) cl.toggle("streaming", a.streaming);
    // A message of tool calls only has no row of its own (its tool cards follow it).
    const hasContent = a.blocks.some((b) => b && (b.type === "thinking" || /\S/.test(b.text)));
    const noContent = (!hasContent && !a.errorMessage && a.stopReason !== "aborted") || !!a.retried;
    if (cl.contains("no-content") !== noContent) cl.toggle("no-content", noContent);
    const err = a.stopReason === "error" || a.stopReason === "aborted" ? (a.errorMessage ? errorInWords(a.errorMessage) : a.stopReason === "aborted" ? "Aborted." : "Failed.") : "";
    if (this.error.hidden !== !err) this.error.hidden = !err;
    if (this.error.textContent !== err) this.error.textContent = err;
    const aborted = a.stopReason === "aborted";
    if (cl.contains("aborted") !== aborted) cl.toggle("aborted", aborted);
  }
}

class ToolRow extends RowView {
  private readonly head = el("div", "tool-head");
  private readonly name = el("span", "tool-name");
  private readonly summary = el("span", "tool-summary");
  private readonly state = el("span", "tool-state");
  private readonly actions = el("span", "tool-actions");
  private readonly argsBox = el("details", "tool-args");
  private readonly argsPre = el("pre");
  private readonly out = el("pre", "tool-output tool-preview");
  private diffButton: HTMLButtonElement | null = null;
  private readonly more = el("details", "tool-more");
  private readonly moreSummary = el("summary");
  private readonly morePre = el("pre", "tool-output");
  private fullOutput = "";
  constructor(id: string, private readonly host: RowHost) {
    super(id, "tool");
    this.argsBox.append(el("summary", undefined, "Arguments"), this.argsPre);
    this.head.append(this.state, this.name, this.summary, this.actions);
    this.more.append(this.moreSummary, this.morePre);
    this.more.hidden = true;
    this.more.addEventListener("toggle", () => {
      setTerminalText(this.morePre, this.more.open ? clip(this.fullOutput) : "");
    });
    this.el.append(this.head, this.argsBox, this.more, this.out);
    this.el.setAttribute("role", "group");
  }
  update(item: Item): void {
    if (item.kind !== "tool") return;
    const t = item as ToolItem;
    const waiting = !!t.awaiting && (t.state === "pending" || t.state === "running");
    const state = waiting ? "waiting" : t.state;
    this.el.dataset.state = state;
    this.el.setAttribute("aria-label", `${t.toolName} ${waiting ? "waiting for your approval" : t.state}`);
    this.name.textContent = t.toolName;
    this.summary.textContent = argsSummary(t.toolName, t.args, t.argsText);
    this.state.textContent = waiting ? "waiting" : { pending: "pending", running: "running", done: "done", error: "error" }[t.state];
    const argsText = t.args === undefined ? t.argsText : JSON.stringify(t.args, null, 2);
    if (this.argsPre.textContent !== argsText) this.argsPre.textContent = argsText;
    // The last lines; the whole output (up to MAX_OUTPUT) only when asked for.
    // As a terminal shows it: progress lines (`\r`) collapsed, ANSI colours rendered (ansi.ts).
    const output = collapseReturns(t.output);
    const p = preview(output);
    setTerminalText(this.out, p.text);
    this.out.hidden = p.text === "";
    this.fullOutput = output;
    this.more.hidden = p.hidden === 0;
    if (p.hidden) this.moreSummary.textContent = `Show all output (${p.hidden} more line${p.hidden > 1 ? "s" : ""})`;
    if (this.more.open) setTerminalText(this.morePre, clip(output));
    const path = (t.args as { path?: unknown } | undefined)?.path;
    if ((t.toolName === "edit" || t.toolName === "write") && typeof path === "string" && !this.diffButton) {
      const b = el("button", "link open-diff", "Open diff");
      b.type = "button";
      b.title = `Open the diff of ${path} in the editor`;
      b.addEventListener("click", () => this.host.openDiff(t.toolCallId, path));
      const f = el("button", "link open-file", "Open file");
      f.type = "button";
      f.addEventListener("click", () => this.host.openFile(path));
      this.actions.append(b, f);
      this.diffButton = b;
    }
    // A diff to open: the change applied (done), or proposed (asking, then applying). A call
    // that failed or was stopped before it ran changed nothing: no "Open diff" for it.
    if (this.diffButton) {
      const hide = !(t.state === "done" || t.state === "running" || waiting);
      if (this.diffButton.hidden !== hide) this.diffButton.hidden = hide;
    }
  }
}

class CompactionRow extends RowView {
  constructor(id: string) {
    super(id, "compaction");
  }
  update(item: Item): void {
    if (item.kind !== "compaction") return;
    this.el.textContent = "";
    const head = el("div", "divider-head");
    const before = item.tokensBefore ? ` (${item.tokensBefore.toLocaleString("en-US")} tokens before)` : "";
    head.textContent =
      item.state === "running"
        ? `Compacting the context${item.reason ? ` (${item.reason})` : ""}…`
        : item.state === "done"
          ? `Context compacted${before}`
          : item.state === "aborted"
            ? "Compaction cancelled"
            : `Compaction failed${item.errorMessage ? `: ${item.errorMessage}` : ""}`;
    this.el.append(head);
    if (item.summary) {
      const d = el("details", "summary");
      d.append(el("summary", undefined, "Summary"));
      const body = el("div", "md");
      body.append(renderMarkdownFragment(item.summary));
      d.append(body);
      this.el.append(d);
    }
  }
}

class BranchSummaryRow extends RowView {
  constructor(id: string) {
    super(id, "branch-summary");
  }
  update(item: Item): void {
    if (item.kind !== "branchSummary") return;
    this.el.textContent = "";
    const d = el("details", "summary");
    d.append(el("summary", undefined, "Branch summary (the path left behind)"));
    const body = el("div", "md");
    body.append(renderMarkdownFragment(item.summary));
    d.append(body);
    this.el.append(d);
  }
}

class AbortRow extends RowView {
  constructor(id: string, private readonly host: RowHost) {
    super(id, "abort");
  }
  update(item: Item): void {
    if (item.kind !== "abort") return;
    const r = item.report;
    this.el.textContent = "";
    this.el.append(el("div", "abort-head", "Stopped"));
    const list = el("ul");
    const li = (t: string) => list.append(el("li", undefined, t));
    if (r.stoppedToolCalls.length) li(`Stopped tool calls: ${r.stoppedToolCalls.map((c) => `${c.toolName} ${argsSummary(c.toolName, c.args, "")}`.trim()).join(", ")}`);
    else li("No tool call was running.");
    for (const p of r.stoppedProcesses) li(`Killed process: ${p.command}`);
    if (r.appliedEdits.length) {
      const e = el("li", undefined, "Edits that stay (undo them in the editor): ");
      r.appliedEdits.forEach((a, i) => {
        const b = el("button", "link", a.path);
        b.type = "button";
        b.addEventListener("click", () => this.host.openDiff(a.toolCallId, a.path));
        if (i) e.append(", ");
        e.append(b);
      });
      list.append(e);
    }
    if (r.queuedMessages.length) li(`Queued messages kept for the next prompt: ${r.queuedMessages.map((q) => `“${q.text}”`).join(", ")}`);
    this.el.append(list);
  }
}

class BashRow extends RowView {
  constructor(id: string) {
    super(id, "bash");
  }
  update(item: Item): void {
    if (item.kind !== "bash") return;
    this.el.textContent = "";
    this.el.append(el("div", "bash-cmd", `$ ${item.command}`), el("pre", "tool-output", clip(item.output)));
    const status = item.cancelled ? "cancelled" : item.exitCode === null ? "" : `exit ${item.exitCode}`;
    if (status) this.el.append(el("div", "bash-status", status));
  }
}

class NoticeRow extends RowView {
  constructor(id: string) {
    super(id, "notice");
  }
  update(item: Item): void {
    if (item.kind !== "notice") return;
    this.el.dataset.level = item.level;
    this.el.textContent = item.text;
  }
}

export function createRow(item: Item, host: RowHost): RowView {
  switch (item.kind) {
    case "user":
      return new UserRow(item.id);
    case "assistant":
      return new AssistantRow(item.id);
    case "tool":
      return new ToolRow(item.id, host);
    case "compaction":
      return new CompactionRow(item.id);
    case "branchSummary":
      return new BranchSummaryRow(item.id);
    case "abort":
      return new AbortRow(item.id, host);
    case "bash":
      return new BashRow(item.id);
    default:
      return new NoticeRow(item.id);
  }
}
