/**
 * The server's notifications as the host sees them before relaying them to the panels: the
 * status bar, the review of the agent's edits, the session names, open questions whose tool call
 * ended, the attention flags and notifications (`agent/attention`), extension notifications
 * (`agent/ui/notification` `notify`). Counts what it relays and the host CPU time it spends.
 */
import * as vscode from "vscode";
import type { Note } from "./relay";
import { cpuNow } from "./relay";
import type { PanelRegistry } from "./registry";
import type { Services } from "./services";

/** What the notification handler needs from the modules wired after it. */
export interface NotificationDeps {
  /** The Sessions view is due a refresh (views.ts). */
  treeChanged(): void;
  /** A run ended (the stats file is written, debug.ts). */
  runEnded(): void;
}

/** Handles every relayed server notification (lifecycle.ts calls {@link handle}). */
export class ServerNotifications {
  /** Host CPU time spent on notifications, in ms (relay.ts `cpuNow`). */
  hostCpuMs = 0;
  /** Notifications handled. */
  notesRelayed = 0;

  constructor(
    private readonly s: Services,
    private readonly registry: PanelRegistry,
    private readonly deps: NotificationDeps,
  ) {}

  handle(note: Note): void {
    const { status, changes, flags, questions, names, router } = this.s;
    const t0 = cpuNow();
    this.notesRelayed++;
    const p = note.params;
    status.notification(note.method, p);
    if (note.method === "agent/event") {
      const ev = p?.event;
      if (ev?.type === "tool_execution_start" && ev.toolCallId && p.sessionId) changes.noteToolCall(ev.toolCallId, p.sessionId);
      // Pi 1.6 ends a run before its automatic retry (`willRetry`): the run goes on.
      const ended = ev?.type === "agent_end" && ev.willRetry !== true;
      if (ended && p.sessionId === this.registry.activeSession()) this.deps.treeChanged();
      if (ev?.type === "agent_start" && p.sessionId) flags.runStarted(p.sessionId);
      if (ev?.type === "tool_execution_end" && ev.toolCallId) {
        const text = (ev.result?.content ?? []).filter((b: any) => b?.type === "text").map((b: any) => b.text).join("\n");
        questions.toolEnded(ev.toolCallId, ev.isError === true, text);
      }
      if (ev?.type === "message_start") names.fromEvent(p);
      if (ended) this.deps.runEnded();
    }
    router.route(note);
    if (note.method === "agent/attention") this.attention(p);
    if (note.method === "agent/ui/notification" && p?.method === "notify") {
      const text = `${p.extension ? `${p.extension}: ` : ""}${p.message ?? ""}`;
      if (p.notifyType === "error") void vscode.window.showErrorMessage(text);
      else if (p.notifyType === "warning") void vscode.window.showWarningMessage(text);
      else void vscode.window.showInformationMessage(text);
    }
    this.hostCpuMs += cpuNow() - t0;
  }

  /** `agent/attention` for a session no visible panel shows: the status bar flag, and for
   * `finished` / `failed` a notification (no focus change; "Open" shows the session in the chat
   * view). Questions (`permission`, `question`) have their own notifications (requests.ts). */
  private attention(p: any): void {
    const { flags, names } = this.s;
    if (typeof p?.sessionId !== "string") return;
    if (!flags.attention(p, this.registry.seenNow(p.sessionId), Date.now())) return;
    if (p.reason !== "finished" && p.reason !== "failed") return;
    const show = p.reason === "failed" ? vscode.window.showErrorMessage : vscode.window.showInformationMessage;
    void show(`Pi: ${names.get(p.sessionId)} ${p.reason === "failed" ? "failed" : "finished"}${p.message ? `: ${p.message}` : ""}`, "Open").then((c) => {
      if (c) void this.registry.openInChatView(p.sessionId, undefined, false);
    });
  }
}
