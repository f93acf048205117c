/**
 * Server → client questions (`agent/requestPermission`, `agent/ui/request`): shown in every
 * chat panel attached to the asking session; when none of them is visible, also as a VS Code
 * notification with the same actions (CLIENTS.md VF4, VF11). The first answer wins; the other
 * places are told `serverRequestDone`. A `$/cancelRequest` (e.g. after an abort) withdraws the
 * question everywhere. A question asked while a panel showed it gets its notification when
 * that panel is hidden. Notifications have the answers as buttons and never move focus; a
 * quick pick or input box opens only after the user clicks the notification's button. A
 * permission's "(Pi proposes)" diff tab closes when its question is over.
 */
import * as vscode from "vscode";

/** What the broker needs from the panels. */
export interface QuestionPanels {
  /** Panels attached to `sessionId`: `post` a message, `visible` now. */
  panelsOf(sessionId: string): { post(message: unknown): void; visible: boolean }[];
}

interface Pending {
  id: number;
  method: "agent/requestPermission" | "agent/ui/request";
  params: any;
  sessionId: string;
  resolve(result: unknown): void;
  done: boolean;
  /** Its notification was shown. */
  notified?: boolean;
  /** Its file changed while it was open (told once). */
  stale?: boolean;
}

/** The answer that withdraws a question (never runs anything). */
function cancelledAnswer(method: string, reason = "cancelled"): unknown {
  return method === "agent/requestPermission" ? { decision: "reject", reason } : { cancelled: true };
}

export class ServerQuestions {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  /** Called when a question opens or closes (status bar: "waiting"). */
  onChange: (sessionId: string, open: number) => void = () => {};

  constructor(
    private readonly panels: QuestionPanels,
    private readonly log: vscode.LogOutputChannel,
    private readonly openDiff: (toolCallId: string, path: string, sessionId: string) => Promise<unknown>,
    /** Closes the diff tab opened for a permission's proposed edit (proposals.ts). */
    private readonly closeDiff: (toolCallId: string, sessionId: string) => Promise<unknown> = async () => undefined,
  ) {}

  /** Shows `sessionId` in a chat panel (a notification's "Show"; set by the panels' registry). */
  onShow: (sessionId: string) => Promise<unknown> = async () => undefined;

  /** Handles one server request; resolves with the answer to send back. */
  ask(method: Pending["method"], params: any, token: vscode.CancellationToken): Promise<unknown> {
    return new Promise((resolve) => {
      const q: Pending = { id: this.nextId++, method, params, sessionId: String(params?.sessionId ?? ""), resolve, done: false };
      this.pending.set(q.id, q);
      token.onCancellationRequested(() => this.finish(q.id, cancelledAnswer(method), "cancelled"));
      const panels = this.panels.panelsOf(q.sessionId);
      for (const p of panels) p.post({ type: "serverRequest", requestId: q.id, method, params });
      if (!panels.some((p) => p.visible)) void this.notify(q);
      this.onChange(q.sessionId, this.openCount(q.sessionId));
    });
  }

  /** The webview answered (`serverResponse`). */
  answer(requestId: number, result: unknown, from?: { post(message: unknown): void }): void {
    this.finish(requestId, result, "answered", from);
  }

  /** Questions still open for `sessionId`, as `serverRequest` messages (for a panel that just
   * loaded). */
  openFor(sessionId: string): unknown[] {
    return [...this.pending.values()].filter((q) => q.sessionId === sessionId && !q.done).map((q) => ({ type: "serverRequest", requestId: q.id, method: q.method, params: q.params }));
  }

  /** Open questions of `sessionId` by kind (`permission`: agent/requestPermission, `question`:
   * agent/ui/request). */
  openKinds(sessionId: string): { permission: number; question: number } {
    const n = { permission: 0, question: 0 };
    for (const q of this.pending.values()) if (q.sessionId === sessionId && !q.done) n[q.method === "agent/requestPermission" ? "permission" : "question"]++;
    return n;
  }

  openCount(sessionId: string): number {
    return [...this.pending.values()].filter((q) => q.sessionId === sessionId && !q.done).length;
  }

  /** Allowed permission questions by tool call id: what was allowed ("edit conf.txt"). */
  private readonly allowed = new Map<string, string>();

  /** What a permission question asks to do, in words. */
  private static what(params: any): string {
    if (params?.change?.path) return `${params.tool ?? "edit"} ${params.change.path}`;
    if (params?.tool === "bash") return `run \`${params?.arguments?.command ?? ""}\``;
    return String(params?.tool ?? "a tool call");
  }

  /** A document changed (the user typed, or the disk under a clean buffer): an open edit
   * question on it goes stale and says so at once, in its card and as a notification. */
  documentChanged(fsPath: string, toAbsolute: (path: string) => string): void {
    for (const q of this.pending.values()) {
      if (q.done || q.stale || q.method !== "agent/requestPermission" || !q.params?.change?.path) continue;
      if (toAbsolute(String(q.params.change.path)) !== fsPath) continue;
      q.stale = true;
      const message = `${q.params.change.path} changed since this question: Allow will not apply it (the agent reads it again).`;
      for (const p of this.panels.panelsOf(q.sessionId)) p.post({ type: "serverRequestStale", requestId: q.id, message });
      void vscode.window.showWarningMessage(`Pi: ${message}`);
    }
  }

  /** A tool call ended: an allowed call that failed anyway (its file changed while the user
   * decided, or the editor refused the edit) is said in words — never "allowed" then a silent
   * ✗. Returns the notification's text, if one was shown. */
  toolEnded(toolCallId: string, isError: boolean, text: string): string | undefined {
    const what = this.allowed.get(toolCallId);
    this.allowed.delete(toolCallId);
    if (!what || !isError) return undefined;
    const first = text.trim().split("\n")[0] ?? "";
    const message = `Pi: ${what} was allowed but not done: ${first}`;
    void vscode.window.showWarningMessage(message);
    return message;
  }

  private finish(id: number, result: unknown, reason: "answered" | "cancelled", from?: { post(message: unknown): void }): void {
    const q = this.pending.get(id);
    if (!q || q.done) return;
    q.done = true;
    if (reason === "answered" && q.method === "agent/requestPermission" && typeof q.params?.toolCallId === "string" && (result as any)?.decision !== "reject") {
      this.allowed.set(q.params.toolCallId, ServerQuestions.what(q.params));
    }
    this.pending.delete(id);
    q.resolve(result);
    // The proposal is stale now (allowed: the file holds it; rejected or withdrawn: it never will).
    if (q.method === "agent/requestPermission" && typeof q.params?.toolCallId === "string") void this.closeDiff(q.params.toolCallId, q.sessionId).catch((e) => this.log.warn(`closing a proposed diff: ${String(e)}`));
    for (const p of this.panels.panelsOf(q.sessionId)) if (p !== from) p.post({ type: "serverRequestDone", requestId: id, reason });
    this.onChange(q.sessionId, this.openCount(q.sessionId));
  }

  /** A panel on `sessionId` was hidden or closed: questions of it no visible panel shows now
   * get their notification (a question asked while the panel was in view, then hidden).
   * Returns what the first of them asks (for the attention flag), if any. */
  visibilityChanged(sessionId: string | null): { reason: "permission" | "question"; message: string } | undefined {
    if (!sessionId) return undefined;
    if (this.panels.panelsOf(sessionId).some((p) => p.visible)) return undefined;
    let first: { reason: "permission" | "question"; message: string } | undefined;
    for (const q of this.pending.values()) {
      if (q.sessionId !== sessionId || q.done || q.notified) continue;
      void this.notify(q);
      first ??= q.method === "agent/requestPermission" ? { reason: "permission", message: `pi wants to ${q.params?.change ? `edit ${q.params.change.path}` : `call ${q.params?.tool}`}` } : { reason: "question", message: `${q.params?.extension ?? "extension"}: ${q.params?.title ?? ""}` };
    }
    return first;
  }

  /** A notification's button was clicked (or `pi.answerQuestion`: id and action key). */
  async notificationAction(id: number, action: string): Promise<void> {
    const q = this.pending.get(id);
    if (!q || q.done) return;
    try {
      const answer = q.method === "agent/requestPermission" ? await this.permissionAction(q, action) : await this.uiAction(q, action);
      if (answer !== undefined) this.finish(q.id, answer, "answered");
    } catch (e) {
      this.log.error(`question ${q.id}: ${String(e)}`);
    }
  }

  /**
   * The notification of a question nobody sees in a panel: a warning notification with the
   * answers as real buttons (permissions: Allow Once / Allow for Session / Allow in Workspace /
   * Reject… / Show; extension questions: Yes / No, Choose…, Answer… and Show). It never takes
   * focus; "Show" opens the session's chat panel with the question's card (the user's own
   * click). A notification that was closed without an answer leaves the question open in the
   * panel (with no panel on the session, a permission is rejected). A button of a question
   * answered meanwhile does nothing.
   */
  private async notify(q: Pending): Promise<void> {
    q.notified = true;
    const p = q.params;
    const { title, detail, actions } = notificationOf(q.method, p);
    const labels = actions.map(([, label]) => label);
    const picked = await vscode.window.showWarningMessage(detail ? `${title} — ${detail}` : title, ...labels);
    if (q.done) return;
    const key = actions.find(([, label]) => label === picked)?.[0];
    if (key === undefined) {
      if (this.panels.panelsOf(q.sessionId).length === 0) this.finish(q.id, cancelledAnswer(q.method, "dismissed"), "answered");
      return;
    }
    if (key === "show") {
      await this.onShow(q.sessionId);
      return;
    }
    await this.notificationAction(q.id, key);
  }

  private async permissionAction(q: Pending, action: string): Promise<unknown> {
    switch (action) {
      case "allow":
        return { decision: "allow" };
      case "session":
        return { decision: "allowAlways", scope: "session" };
      case "workspace":
        return { decision: "allowAlways", scope: "workspace" };
      case "diff":
        await this.openDiff(q.params.toolCallId, q.params.change.path, q.sessionId);
        return undefined;
      case "reject": {
        const reason = await vscode.window.showInputBox({ prompt: "Reason for rejecting (optional; the model reads it)", ignoreFocusOut: true });
        if (reason === undefined || q.done) return undefined;
        return reason ? { decision: "reject", reason } : { decision: "reject" };
      }
    }
    return undefined;
  }

  private async uiAction(q: Pending, action: string): Promise<unknown> {
    const p = q.params;
    switch (action) {
      case "yes":
        return { confirmed: true };
      case "no":
        return { confirmed: false };
      case "cancel":
        return { cancelled: true };
      case "choose": {
        const v = await vscode.window.showQuickPick((p.options ?? []).map(String), { title: p.title, ignoreFocusOut: true });
        return q.done || v === undefined ? undefined : { value: v };
      }
      case "answer": {
        const v = await vscode.window.showInputBox({ title: p.title, placeHolder: p.placeholder, value: p.prefill, ignoreFocusOut: true });
        return q.done || v === undefined ? undefined : { value: v };
      }
    }
    return undefined;
  }
}

/** A question's notification: its title, detail and buttons (`[action key, label]`; the keys
 * are those of {@link ServerQuestions.notificationAction}, plus `show`). */
export function notificationOf(method: string, p: any): { title: string; detail: string; actions: [string, string][] } {
  let title: string;
  let detail: string;
  let actions: [string, string][];
  if (method === "agent/requestPermission") {
    const scopes: string[] = Array.isArray(p?.alwaysScopes) ? p.alwaysScopes : [];
    title = `Pi wants to ${p?.change ? `edit ${p.change.path}` : p?.tool === "bash" ? `run \`${p?.arguments?.command ?? ""}\`` : `call ${p?.tool}`}`;
    detail = p?.reason ?? "";
    actions = [["allow", "Allow Once"]];
    if (p?.rule && scopes.includes("session")) actions.push(["session", "Allow for Session"]);
    if (p?.rule && scopes.includes("workspace")) actions.push(["workspace", "Allow in Workspace"]);
    actions.push(["reject", "Reject…"], ["show", "Show"]);
  } else {
    title = `${p?.extension ?? "extension"}: ${p?.title ?? ""}`;
    detail = p?.message ?? "";
    actions = p?.method === "confirm" ? [["yes", "Yes"], ["no", "No"]] : p?.method === "select" ? [["choose", "Choose…"]] : [["answer", "Answer…"]];
    actions.push(["show", "Show"]);
  }
  return { title, detail, actions };
}
