/**
 * Going back to an earlier turn (issue 30 item 10). Each user message of the transcript has two
 * actions (shown on hover or focus):
 * - **Edit**: its text goes into the composer, marked "editing an earlier message"; sending it
 *   starts a branch from there — `agent/session/branch` to the message's parent (conversation
 *   only; nothing is deleted), or, when later turns changed files and the user chooses
 *   "conversation and files", `agent/session/rewind` (the agent's later file changes reverted,
 *   refused where the user changed the file since) — then the new prompt;
 * - **Rewind to here**, the turn's checkpoint: `agent/session/rewind` to just before that
 *   message (conversation and files), with a report of the files and *Undo rewind*.
 * A message shown live has no entry id yet: it is looked up in the session's history by its
 * timestamp when asked for.
 */
import type { PanelParams, PanelResult } from "../shared/panelMethods";
import { el } from "./dom";
import { asObject, type Store, type UserItem } from "./store";

/** The server methods turns use. */
type TurnMethod = "agent/session/branch" | "agent/session/rewind" | "agent/session/history";

export interface TurnHost {
  store(): Store;
  request<M extends TurnMethod>(method: M, params: PanelParams<M>): Promise<PanelResult<M>>;
  /** Loads the session again (its new leaf's history). */
  reload(sessionId: string): Promise<void>;
  composer(): HTMLTextAreaElement;
  saveState(): void;
  /** A card in the cards' list. */
  showCard(card: HTMLElement): void;
  showError(message: string): void;
}

/** An earlier message being edited in the composer. */
interface Editing {
  sessionId: string;
  itemId: string;
  /** Later turns changed files: the user chooses conversation only or with the files. */
  filesChanged: boolean;
}

/** The result of `agent/session/rewind` (pi-core's `RewindOutcome`, not in the generated
 * wire types yet: read by {@link rewindResult}). */
interface RewindResult {
  previousLeafId: string | null;
  leafId: string | null;
  files: { path: string; status: string; reason?: string }[];
}

/** The fields of a rewind's answer the report reads (missing or ill-typed ones left out). */
function rewindResult(v: unknown): RewindResult {
  const o = asObject(v);
  const id = (x: unknown) => (typeof x === "string" ? x : null);
  const files = (Array.isArray(o.files) ? o.files : []).map(asObject).map((f) => ({
    path: String(f.path ?? ""),
    status: String(f.status ?? ""),
    ...(typeof f.reason === "string" ? { reason: f.reason } : {}),
  }));
  return { previousLeafId: id(o.previousLeafId), leafId: id(o.leafId), files };
}

/** A thrown value in words (a JSON-RPC error's message, else the value). */
function errorText(e: unknown): string {
  const m = asObject(e).message;
  return typeof m === "string" ? m : String(e);
}

export class Turns {
  /** The "editing an earlier message" bar (above the composer's field). */
  readonly bar: HTMLElement;
  private readonly barText: HTMLElement;
  private readonly choice: HTMLElement;
  private readonly withFiles: HTMLInputElement;
  private editing: Editing | null = null;

  constructor(private readonly host: TurnHost) {
    this.bar = el("div", "edit-bar");
    this.bar.hidden = true;
    this.bar.setAttribute("role", "status");
    this.barText = el("span", "edit-bar-text");
    this.choice = el("span", "edit-bar-choice");
    const name = "pi-edit-scope";
    const radio = (label: string, checked: boolean) => {
      const l = el("label");
      const r = el("input");
      r.type = "radio";
      r.name = name;
      r.checked = checked;
      l.append(r, ` ${label}`);
      this.choice.append(l);
      return r;
    };
    radio("Conversation only", true);
    this.withFiles = radio("Conversation and files", false);
    const cancel = el("button", "link", "Cancel");
    cancel.type = "button";
    cancel.addEventListener("click", () => this.cancelEdit());
    this.bar.append(this.barText, this.choice, cancel);
  }

  /** Installs the row actions' click handling on the transcript's root. */
  install(root: HTMLElement): void {
    root.addEventListener("click", (e) => {
      const b = e.target instanceof Element ? e.target.closest("button[data-turn-action]") : null;
      const row = b?.closest<HTMLElement>(".row-user");
      if (!b || !row?.dataset.id) return;
      e.stopPropagation();
      const action = b.getAttribute("data-turn-action");
      if (action === "edit") this.startEdit(row.dataset.id);
      else if (action === "rewind") void this.rewindTo(row.dataset.id);
    });
  }

  /** Whether a tool call after `itemId` changed a file (edit / write that ran). */
  private filesChangedAfter(s: Store, itemId: string): boolean {
    const at = s.order.indexOf(itemId);
    for (let i = at + 1; at >= 0 && i < s.order.length; i++) {
      const it = s.items.get(s.order[i]!);
      if (it?.kind === "tool" && (it.toolName === "edit" || it.toolName === "write") && it.state === "done") return true;
    }
    return false;
  }

  startEdit(itemId: string): void {
    const s = this.host.store();
    const it = s.items.get(itemId) as UserItem | undefined;
    if (!it || it.kind !== "user" || !s.sessionId) return;
    this.editing = { sessionId: s.sessionId, itemId, filesChanged: this.filesChangedAfter(s, itemId) };
    this.barText.textContent = this.editing.filesChanged ? "Editing an earlier message: sending starts a branch from there, with" : "Editing an earlier message: sending starts a branch from there.";
    this.choice.hidden = !this.editing.filesChanged;
    this.withFiles.checked = false;
    (this.choice.querySelector("input") as HTMLInputElement).checked = true;
    this.bar.hidden = false;
    this.host.composer().value = it.text;
    this.host.composer().focus();
    this.host.saveState();
  }

  cancelEdit(): void {
    this.editing = null;
    this.bar.hidden = true;
  }

  /** The entry id of user item `itemId` (from the history when the message came live). */
  private async entryIdOf(sessionId: string, itemId: string): Promise<string | null> {
    const it = this.host.store().items.get(itemId) as UserItem | undefined;
    if (it?.entryId) return it.entryId;
    const ts = it?.timestamp ?? Number(itemId.split(":")[1]);
    const page = await this.host.request("agent/session/history", { sessionId, limit: 200 });
    const e = (page.entries ?? []).map(asObject).find((x) => {
      const m = asObject(x.message);
      return m.role === "user" && m.timestamp === ts;
    });
    return typeof e?.id === "string" ? e.id : null;
  }

  /** Called by the composer before it sends: moves the session's leaf when an earlier message
   * is being edited. Returns false when that failed (nothing is sent; the text stays). */
  async beforeSend(): Promise<boolean> {
    const ed = this.editing;
    if (!ed) return true;
    const s = this.host.store();
    if (s.sessionId !== ed.sessionId) {
      this.cancelEdit();
      return true;
    }
    try {
      const entryId = await this.entryIdOf(ed.sessionId, ed.itemId);
      if (!entryId) throw new Error("the message is not in the session's history");
      if (ed.filesChanged && this.withFiles.checked) {
        const r = rewindResult(await this.host.request("agent/session/rewind", { sessionId: ed.sessionId, entryId }));
        const refused = r.files.filter((f) => f.status === "refused");
        if (refused.length) this.host.showCard(this.report(ed.sessionId, r));
      } else {
        await this.host.request("agent/session/branch", { sessionId: ed.sessionId, entryId });
      }
      this.cancelEdit();
      await this.host.reload(ed.sessionId);
      return true;
    } catch (e) {
      this.host.showError(`Editing the earlier message: ${errorText(e)}`);
      return false;
    }
  }

  /** The checkpoint: rewind the conversation and the agent's file changes to just before the
   * message `itemId`. */
  async rewindTo(itemId: string): Promise<void> {
    const s = this.host.store();
    const sessionId = s.sessionId;
    if (!sessionId) return;
    if (s.running) {
      this.host.showError("Rewind: stop the run first.");
      return;
    }
    try {
      const entryId = await this.entryIdOf(sessionId, itemId);
      if (!entryId) throw new Error("the message is not in the session's history");
      const r = rewindResult(await this.host.request("agent/session/rewind", { sessionId, entryId }));
      await this.host.reload(sessionId);
      this.host.showCard(this.report(sessionId, r));
    } catch (e) {
      this.host.showError(`Rewind: ${errorText(e)}`);
    }
  }

  /** What a rewind did, in words, with *Undo rewind*. */
  private report(sessionId: string, r: RewindResult): HTMLElement {
    const c = el("div", "card rewind-report");
    c.setAttribute("role", "status");
    const by = (st: string) => r.files.filter((f) => f.status === st);
    const names = (l: { path: string }[]) => l.map((f) => f.path).join(", ");
    const reverted = [...by("reverted"), ...by("reapplied")];
    c.append(el("div", "card-title", reverted.length ? `Rewound: ${reverted.length} file${reverted.length === 1 ? "" : "s"} put back (${names(reverted)})` : "Rewound the conversation (no file to put back)"));
    for (const f of by("refused")) c.append(el("div", "card-reason", `${f.path} was not put back: ${f.reason ?? "it changed since the agent's change"}`));
    const actions = el("div", "card-actions");
    const undo = el("button", "secondary", "Undo rewind");
    undo.type = "button";
    const back = r.previousLeafId;
    // A session rewound from its very start has no leaf to go back to.
    undo.hidden = back === null;
    undo.addEventListener("click", async () => {
      if (back === null) return;
      undo.disabled = true;
      try {
        await this.host.request("agent/session/rewind", { sessionId, entryId: back });
        await this.host.reload(sessionId);
        c.remove();
      } catch (e) {
        undo.disabled = false;
        this.host.showError(`Undo rewind: ${errorText(e)}`);
      }
    });
    const dismiss = el("button", "link", "Dismiss");
    dismiss.type = "button";
    dismiss.addEventListener("click", () => c.remove());
    actions.append(undo, dismiss);
    c.append(actions);
    return c;
  }
}

/** The actions of a user row (rows.ts adds them; {@link Turns.install} handles them). */
export function turnActions(): HTMLElement {
  const bar = el("div", "turn-actions");
  const edit = el("button", "link", "Edit");
  edit.type = "button";
  edit.dataset.turnAction = "edit";
  edit.title = "Edit this message and send it again as a branch from here";
  const rewind = el("button", "link", "Rewind to here");
  rewind.type = "button";
  rewind.dataset.turnAction = "rewind";
  rewind.title = "Checkpoint: go back to before this message, the conversation and the agent's file changes";
  bar.append(edit, rewind);
  return bar;
}
