/**
 * Server → client questions (`agent/requestPermission`, `agent/ui/request`): shown in every
 * chat panel attached to the asking session; when none of them is visible, also as a VS Code
 * notification with the same actions (CLIENTS.md VF4, VF11). The first answer wins; the other
 * places are told `serverRequestDone`. A `$/cancelRequest` (e.g. after an abort) withdraws the
 * question everywhere. Notifications never move focus; a quick pick or input box opens only
 * after the user clicks the notification's button.
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
}

/** The answer that withdraws a question (never runs anything). */
function cancelledAnswer(method: string): unknown {
  return method === "agent/requestPermission" ? { decision: "reject", reason: "cancelled" } : { cancelled: true };
}

export class ServerQuestions {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  /** Called when a question opens or closes (status bar: "waiting"). */
  onChange: (sessionId: string, open: number) => void = () => {};

  constructor(
    private readonly panels: QuestionPanels,
    private readonly log: vscode.LogOutputChannel,
    private readonly openDiff: (toolCallId: string, path: string) => Promise<unknown>,
  ) {}

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

  openCount(sessionId: string): number {
    return [...this.pending.values()].filter((q) => q.sessionId === sessionId && !q.done).length;
  }

  private finish(id: number, result: unknown, reason: "answered" | "cancelled", from?: { post(message: unknown): void }): void {
    const q = this.pending.get(id);
    if (!q || q.done) return;
    q.done = true;
    this.pending.delete(id);
    q.resolve(result);
    for (const p of this.panels.panelsOf(q.sessionId)) if (p !== from) p.post({ type: "serverRequestDone", requestId: id, reason });
    this.onChange(q.sessionId, this.openCount(q.sessionId));
  }

  private async notify(q: Pending): Promise<void> {
    try {
      const answer = q.method === "agent/requestPermission" ? await this.notifyPermission(q) : await this.notifyUi(q);
      if (answer !== undefined) this.finish(q.id, answer, "answered");
    } catch (e) {
      this.log.error(`question ${q.id}: ${String(e)}`);
    }
  }

  private async notifyPermission(q: Pending): Promise<unknown> {
    const p = q.params;
    const scopes: string[] = p.alwaysScopes ?? [];
    const what = p.change ? `edit ${p.change.path}` : p.tool === "bash" ? `run \`${p.arguments?.command ?? ""}\`` : `call ${p.tool}`;
    const actions = ["Allow", ...(scopes.includes("session") ? ["Allow for Session"] : []), ...(scopes.includes("workspace") ? ["Allow in Workspace"] : []), "Reject"];
    if (p.change) actions.push("Show Diff");
    for (;;) {
      const choice = await vscode.window.showWarningMessage(`Pi wants to ${what}. ${p.reason ?? ""}`, ...actions);
      if (q.done) return undefined;
      switch (choice) {
        case "Allow":
          return { decision: "allow" };
        case "Allow for Session":
          return { decision: "allowAlways", scope: "session" };
        case "Allow in Workspace":
          return { decision: "allowAlways", scope: "workspace" };
        case "Show Diff":
          await this.openDiff(p.toolCallId, p.change.path);
          continue;
        case "Reject": {
          const reason = await vscode.window.showInputBox({ prompt: "Reason for rejecting (optional; the model reads it)", ignoreFocusOut: true });
          return reason ? { decision: "reject", reason } : { decision: "reject" };
        }
        default:
          // Dismissed: the question stays open in the panel (when one shows the session).
          return this.panels.panelsOf(q.sessionId).length > 0 ? undefined : { decision: "reject", reason: "dismissed" };
      }
    }
  }

  private async notifyUi(q: Pending): Promise<unknown> {
    const p = q.params;
    const head = `${p.extension ?? "extension"}: ${p.title ?? ""}`;
    switch (p.method) {
      case "confirm": {
        const c = await vscode.window.showInformationMessage(`${head}${p.message ? ` — ${p.message}` : ""}`, "Yes", "No");
        if (q.done) return undefined;
        return c === undefined ? { cancelled: true } : { confirmed: c === "Yes" };
      }
      case "select": {
        const go = await vscode.window.showInformationMessage(head, "Choose…");
        if (q.done || !go) return go ? undefined : { cancelled: true };
        const v = await vscode.window.showQuickPick((p.options ?? []).map(String), { title: p.title, ignoreFocusOut: true });
        return v === undefined ? { cancelled: true } : { value: v };
      }
      default: {
        const go = await vscode.window.showInformationMessage(head, "Answer…");
        if (q.done || !go) return go ? undefined : { cancelled: true };
        const v = await vscode.window.showInputBox({ title: p.title, placeHolder: p.placeholder, value: p.prefill, ignoreFocusOut: true });
        return v === undefined ? { cancelled: true } : { value: v };
      }
    }
  }
}
