/**
 * Recovering from a failed or interrupted run (issue 30 items 9 and 11):
 * - *Retry* after a failed run and *Continue* after an interrupted one (the window reloaded or
 *   the server went away mid-run): both are `agent/continue` (docs/protocol.md), which starts a
 *   run from the branch as it stands — the user message is sent again once and stored once,
 *   never duplicated;
 * - the failed prompt comes back into the composer (when the composer is empty), so it can be
 *   edited and sent as a new message instead;
 * - the error in words (a provider's JSON body, a refused connection) rather than `os error 111`;
 * - ↑ / ↓ in the composer recall the prompts sent before (kept in the webview state of the
 *   workspace's panel, at most {@link HISTORY_MAX}).
 */
import { readableError, type Store } from "./store";

/** Prompts kept for ↑ recall. */
export const HISTORY_MAX = 100;

/** What the end of the session's branch offers: `retry` (its last answer failed), `continue`
 * (it ends with the user's message or a tool result and no run is going: interrupted), or
 * nothing. `prompt` is the last user message's text; `error` the failure in words. */
export interface Offer {
  kind: "retry" | "continue";
  /** The item the offer is about (a new failure is a new id). */
  key: string;
  prompt: string | null;
  error?: string;
}

/** An error text as a user reads it: a provider's JSON body's message ({@link readableError}),
 * and the operating system's error numbers a failed connection reports said in words. */
export function errorInWords(text: string): string {
  let t = readableError(text);
  const url = /(https?:\/\/[^\s)]+)/.exec(t)?.[1];
  const host = url ? url.replace(/^https?:\/\//, "").replace(/\/.*$/, "") : null;
  const where = host ? ` at ${host}` : "";
  if (/os error 111\b|ECONNREFUSED|Connection refused/i.test(t)) return `The model server refused the connection${where} (is it running?).`;
  if (/os error 110\b|ETIMEDOUT|timed out/i.test(t)) return `The model server did not answer in time${where}.`;
  if (/os error 101\b|ENETUNREACH|Network is unreachable/i.test(t)) return `The network is unreachable${where}.`;
  if (/dns error|failed to lookup address|ENOTFOUND|Name or service not known/i.test(t)) return `The model server's name could not be resolved${where}.`;
  if (/os error 104\b|ECONNRESET|Connection reset/i.test(t)) return `The model server closed the connection${where}.`;
  t = t.replace(/\s*\(os error \d+\)/g, "");
  return t;
}

/** What the end of `s`'s transcript offers (null while a run is going or nothing is to do). */
export function offerOf(s: Store): Offer | null {
  if (s.running || !s.sessionId) return null;
  let prompt: string | null = null;
  let last: { kind: string; id: string; stopReason?: string; errorMessage?: string } | null = null;
  for (let i = s.order.length - 1; i >= 0; i--) {
    const it = s.items.get(s.order[i]!);
    if (!it) continue;
    if (it.kind === "notice") continue;
    // The user stopped this run (its report is there): nothing to offer.
    if (it.kind === "abort" && !last) return null;
    if (it.kind === "abort") continue;
    if (!last) {
      if (it.kind === "assistant" && it.retried) continue;
      last = it.kind === "assistant" ? { kind: it.kind, id: it.id, stopReason: it.stopReason, errorMessage: it.errorMessage } : { kind: it.kind, id: it.id };
    }
    if (it.kind === "user") {
      prompt = it.text;
      break;
    }
  }
  if (!last) return null;
  if (last.kind === "assistant" && last.stopReason === "error") return { kind: "retry", key: last.id, prompt, error: errorInWords(last.errorMessage ?? "The run failed.") };
  if (last.kind === "user" || (last.kind === "tool" && prompt !== null)) return { kind: "continue", key: last.id, prompt };
  return null;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** The bar above the composer that offers Retry / Continue. */
export class RecoveryBar {
  readonly el: HTMLElement;
  private readonly text: HTMLElement;
  private readonly action: HTMLButtonElement;
  private readonly dismiss: HTMLButtonElement;
  private offer: Offer | null = null;
  /** Offers the user dismissed or acted on (by key). */
  private readonly done = new Set<string>();
  /** Failures seen as they happened (their prompt went back to the composer once). */
  private readonly restored = new Set<string>();
  /** The text put back into the composer, while it is still there unchanged. */
  restoredText: string | null = null;

  constructor(
    private readonly host: {
      /** `agent/continue` for the session; rejects with the server's error. */
      continueRun(): Promise<unknown>;
      /** The composer's text now, and a way to set it. */
      composer(): string;
      setComposer(text: string): void;
      showError(message: string): void;
    },
  ) {
    this.el = el("div", "recovery");
    this.el.hidden = true;
    this.el.setAttribute("role", "alert");
    this.text = el("span", "recovery-text");
    this.action = el("button", "primary recovery-action");
    this.action.type = "button";
    this.dismiss = el("button", "link", "Dismiss");
    this.dismiss.type = "button";
    this.el.append(this.text, this.action, this.dismiss);
    this.action.addEventListener("click", () => void this.run());
    this.dismiss.addEventListener("click", () => {
      if (this.offer) this.done.add(this.offer.key);
      this.show(null);
    });
  }

  /** Called after the store changed. `live`: the change came from the session's events (a run
   * that just failed puts its prompt back into an empty composer). */
  update(s: Store, live: boolean): void {
    const o = offerOf(s);
    if (o && o.kind === "retry" && live && !this.restored.has(o.key)) {
      this.restored.add(o.key);
      if (o.prompt && !this.host.composer().trim()) {
        this.host.setComposer(o.prompt);
        this.restoredText = o.prompt;
      }
    }
    if (!live && o) this.restored.add(o.key);
    this.show(o && !this.done.has(o.key) ? o : null);
  }

  private show(o: Offer | null): void {
    if (o?.key === this.offer?.key && o?.kind === this.offer?.kind && !this.el.hidden === !!o) return;
    this.offer = o;
    this.el.hidden = !o;
    if (!o) return;
    this.el.dataset.kind = o.kind;
    this.text.textContent = o.kind === "retry" ? `The run failed: ${o.error}` : "The last run was interrupted before it answered.";
    this.text.title = this.text.textContent;
    this.action.textContent = o.kind === "retry" ? "Retry" : "Continue";
    this.action.title = o.kind === "retry" ? "Send the same message again (it is not added twice)" : "Continue the run from where it stopped";
    this.action.disabled = false;
  }

  private async run(): Promise<void> {
    const o = this.offer;
    if (!o) return;
    this.action.disabled = true;
    try {
      await this.host.continueRun();
      this.done.add(o.key);
      // The prompt put back into the composer is being retried: it goes (unless edited).
      if (this.restoredText !== null && this.host.composer() === this.restoredText) this.host.setComposer("");
      this.restoredText = null;
      this.show(null);
    } catch (e) {
      this.action.disabled = false;
      const m = e !== null && typeof e === "object" && "message" in e && typeof e.message === "string" ? e.message : String(e);
      this.host.showError(`${o.kind === "retry" ? "Retry" : "Continue"}: ${errorInWords(m)}`);
    }
  }
}

/** ↑ / ↓ recall of earlier prompts in the composer. */
export class PromptHistory {
  private list: string[];
  /** Index into `list` being shown (list.length: the draft). */
  private at: number;
  private draft = "";

  constructor(saved: string[] | undefined) {
    this.list = Array.isArray(saved) ? saved.filter((x) => typeof x === "string").slice(-HISTORY_MAX) : [];
    this.at = this.list.length;
  }

  /** The prompts, oldest first (for the webview state). */
  get items(): string[] {
    return this.list;
  }

  /** A prompt was sent. */
  push(text: string): void {
    const t = text.trim();
    if (!t) return;
    if (this.list[this.list.length - 1] !== t) this.list.push(t);
    if (this.list.length > HISTORY_MAX) this.list.splice(0, this.list.length - HISTORY_MAX);
    this.at = this.list.length;
    this.draft = "";
  }

  /** ↑ (`-1`) or ↓ (`+1`) in `input`: replaces its text when the caret is on its first (↑) or
   * last (↓) line and there is a prompt to go to; returns whether it did. */
  move(input: HTMLTextAreaElement, dir: -1 | 1): boolean {
    const v = input.value;
    const caret = input.selectionStart ?? 0;
    if (input.selectionEnd !== input.selectionStart) return false;
    if (dir < 0 && v.slice(0, caret).includes("\n")) return false;
    if (dir > 0 && v.slice(caret).includes("\n")) return false;
    const next = this.at + dir;
    if (next < 0 || next > this.list.length) return false;
    if (this.at === this.list.length) this.draft = v;
    this.at = next;
    input.value = next === this.list.length ? this.draft : this.list[next]!;
    const end = dir < 0 ? 0 : input.value.length;
    input.setSelectionRange(dir < 0 ? input.value.length : end, dir < 0 ? input.value.length : end);
    return true;
  }

}
