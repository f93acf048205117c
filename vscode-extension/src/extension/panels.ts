/**
 * Chat panels: the activity-bar webview view (`pi.chat`) and editor-area webview panels on
 * other sessions (`pi.chatPanel`, restored after a window reload by a serializer). Each panel
 * speaks the host ↔ webview contract (src/shared/messages.ts): requests are relayed to the
 * server as-is, the attached session's notifications arrive batched (relay.ts), server
 * questions go through {@link ServerQuestions}.
 */
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as vscode from "vscode";
import type { HostToWebview, WebviewToHost } from "../shared/messages";
import { checkPanelRequest, isPanelMethod, METHOD_NOT_ALLOWED, REWIND_CONFIRM, type PanelMethod, type PanelResult } from "../shared/panelMethods";
import type { SessionState } from "../shared/wire";
import { webviewHtml } from "../webview/html";
import { Batcher, type Note, type RouteTarget } from "./relay";
import { codeAction } from "./codeactions";
import { activeEditorItem, attachedFile, contextMode, findSymbols } from "./editorcontext";

/** What a panel needs from the extension. */
export interface PanelHost {
  extensionUri: vscode.Uri;
  log: vscode.LogOutputChannel;
  workspaceName(): string;
  /** Sends a request to the server (waits for the client to run). */
  request(method: string, params: unknown): Promise<unknown>;
  attach(panel: ChatPanel, sessionId: string | null): void;
  answerQuestion(panel: ChatPanel, requestId: number, result: unknown): void;
  openQuestions(sessionId: string): unknown[];
  /** `sessionId`: the panel's session (tool call ids repeat across sessions). */
  openDiff(toolCallId: string, path: string, sessionId: string | null): Promise<unknown>;
  /** The panel was focused or shown: it becomes the active one (status bar, commands). */
  activated(panel: ChatPanel): void;
  disposed(panel: ChatPanel): void;
  /** Params of `agent/session/new` for a panel's first prompt when settings ask for more than
   * the server's defaults (`pi.thinkingLevel`), else `undefined` (the prompt creates it). */
  newSessionParams(): Record<string, unknown> | undefined;
}

/** One chat panel (view or editor panel) around a webview. */
export class ChatPanel implements RouteTarget {
  sessionId: string | null = null;
  awaitingNewSession = false;
  readonly batcher: Batcher;
  private readonly subs: vscode.Disposable[] = [];
  private isReady = false;
  /** The webview takes `visibility` messages (its `ready` listed them). */
  private acceptsVisibility = false;
  /** Messages posted (for the e2e test's and benchmarks' counters). */
  posted = 0;

  constructor(
    readonly kind: "view" | "panel",
    private readonly webview: vscode.Webview,
    private readonly host: PanelHost,
    private readonly isVisible: () => boolean,
    initialSession: string | null,
    private readonly remember: (sessionId: string | null) => void,
  ) {
    this.sessionId = initialSession;
    // (The batcher times each post with what it does before it: Batcher.cpuMs.)
    this.batcher = new Batcher((m) => {
      this.posted++;
      void this.webview.postMessage(m);
    });
    this.batcher.onOverflow = () => this.sendInit();
    if (!isVisible()) this.batcher.pause();
    webview.options = { enableScripts: true, localResourceRoots: [vscode.Uri.joinPath(host.extensionUri, "dist"), vscode.Uri.joinPath(host.extensionUri, "resources")] };
    webview.html = html(webview, host.extensionUri);
    this.subs.push(webview.onDidReceiveMessage((m: WebviewToHost) => this.onMessage(m)));
  }

  get visible(): boolean {
    return this.isVisible();
  }

  /** The view or panel was shown or hidden: a hidden panel gets nothing posted; what comes
   * meanwhile waits, coalesced, and is posted in one go when it is shown again. The webview is
   * told (`visibility`) in order with the notifications: `visible: false` goes out before the
   * pause, `visible: true` right after the backlog. */
  visibilityChanged(): void {
    const tell = this.acceptsVisibility && this.isReady;
    if (this.isVisible()) this.batcher.resumeWith(tell ? ({ type: "visibility", visible: true } satisfies HostToWebview) : undefined);
    else this.batcher.pauseAfter(tell ? ({ type: "visibility", visible: false } satisfies HostToWebview) : undefined);
  }

  get ready(): boolean {
    return this.isReady;
  }

  /** RouteTarget: a server notification for this panel's session. */
  deliver(note: Note): void {
    this.batcher.push(note);
  }

  /** Posts a host → webview message (after the notifications waiting before it). */
  post(message: HostToWebview | unknown): void {
    this.batcher.direct(message);
  }

  /** Shows another session (or a new one with `null`): the webview reloads for it. */
  show(sessionId: string | null): void {
    this.host.attach(this, sessionId);
    this.remember(sessionId);
    this.sendInit();
  }

  private sendInit(): void {
    this.post({
      type: "init",
      sessionId: this.sessionId,
      workspaceName: this.host.workspaceName(),
      capabilities: { followUpKey: "alt+enter", escapeAborts: true, host: "vscode" },
    } satisfies HostToWebview);
    if (this.sessionId) for (const q of this.host.openQuestions(this.sessionId)) this.post(q);
    if (contextMode() !== "off") this.post({ type: "editorContext", item: activeEditorItem(vscode.window.activeTextEditor, contextMode()) } satisfies HostToWebview);
  }

  private async onMessage(m: WebviewToHost): Promise<void> {
    switch (m.type) {
      case "ready":
        this.isReady = true;
        this.batcher.packing = Array.isArray(m.accepts) && m.accepts.includes("packed");
        this.acceptsVisibility = Array.isArray(m.accepts) && m.accepts.includes("visibility");
        this.host.attach(this, this.sessionId);
        this.sendInit();
        if (this.acceptsVisibility && !this.isVisible()) this.post({ type: "visibility", visible: false } satisfies HostToWebview);
        return;
      case "attach": {
        // Questions of a session the panel already shows were posted to it when asked.
        const already = this.sessionId === m.sessionId;
        this.host.attach(this, m.sessionId);
        this.remember(m.sessionId);
        if (m.sessionId && !already) for (const q of this.host.openQuestions(m.sessionId)) this.post(q);
        return;
      }
      case "request": {
        const refused = checkPanelRequest(m.method);
        if (refused !== null || !isPanelMethod(m.method)) {
          const message = refused ?? `the chat panel may not call ${JSON.stringify(m.method)}`;
          this.host.log.warn(`refused a panel request: ${message}`);
          this.post({ type: "response", requestId: m.requestId, error: { code: METHOD_NOT_ALLOWED, message } });
          return;
        }
        const method: PanelMethod = m.method;
        // A rewind rewrites files: only after the user's own confirmation (page script cannot
        // answer a modal dialog).
        if (method === "agent/session/rewind") {
          const ok = await vscode.window.showWarningMessage(REWIND_CONFIRM.message, { modal: true, detail: REWIND_CONFIRM.detail }, REWIND_CONFIRM.button);
          if (ok !== REWIND_CONFIRM.button) {
            this.post({ type: "response", requestId: m.requestId, error: { code: -32800, message: "the rewind was cancelled" } });
            return;
          }
        }
        // The page's params as sent (the server checks them against the method's type).
        let params: unknown = m.params ?? {};
        const sessionOf = (p: unknown): unknown => (typeof p === "object" && p !== null && "sessionId" in p ? p.sessionId : undefined);
        const pre = method === "agent/prompt" && !sessionOf(params) ? this.host.newSessionParams() : undefined;
        if (pre) {
          try {
            const st = (await this.host.request("agent/session/new", pre)) as SessionState;
            this.host.attach(this, st.sessionId);
            this.remember(st.sessionId);
            params = { ...(params as object), sessionId: st.sessionId };
          } catch (e) {
            this.host.log.warn(`creating the session with ${JSON.stringify(pre)}: ${errorText(e)}`);
          }
        }
        const creates = method === "agent/prompt" && !sessionOf(params);
        if (creates) this.awaitingNewSession = true;
        try {
          const result = (await this.host.request(method, params)) as PanelResult<PanelMethod>;
          const created = sessionOf(result);
          if (creates && typeof created === "string" && (this.sessionId === null || this.awaitingNewSession)) {
            this.host.attach(this, created);
            this.remember(created);
          }
          this.post({ type: "response", requestId: m.requestId, result });
        } catch (e) {
          if (creates) this.awaitingNewSession = false;
          const err = e as { code?: unknown; data?: unknown } | undefined;
          this.post({ type: "response", requestId: m.requestId, error: { code: typeof err?.code === "number" ? err.code : -32603, message: errorText(e), data: err?.data } });
        }
        return;
      }
      case "serverResponse":
        this.host.answerQuestion(this, m.requestId, m.result);
        return;
      case "openDiff":
        await this.host.openDiff(m.toolCallId, m.path, this.sessionId);
        return;
      case "openFile": {
        const root = vscode.workspace.workspaceFolders?.[0]?.uri;
        const uri = m.path.startsWith("/") || !root ? vscode.Uri.file(m.path) : vscode.Uri.joinPath(root, m.path);
        const line = Math.max(0, (m.line ?? 1) - 1);
        await vscode.window.showTextDocument(uri, { preserveFocus: true, preview: true, selection: new vscode.Range(line, 0, line, 0) });
        return;
      }
      case "pickFiles": {
        // Files, then workspace symbols (`@symbol`: attached as its lines).
        const items = [...(await findFiles(m.query)).slice(0, 20), ...(await findSymbols(m.query).catch(() => []))];
        this.post({ type: "files", query: m.query, items });
        return;
      }
      case "attachFile":
        try {
          this.post({ type: "context", items: [await attachedFile(m.path)] } satisfies HostToWebview);
        } catch (e) {
          void vscode.window.showWarningMessage(`Pi: @${m.path}: ${errorText(e)}`);
        }
        return;
      case "codeAction":
        await codeAction(m);
        return;
      case "log": {
        const level = m.level === "warn" ? "warn" : m.level;
        this.host.log[level](`webview: ${m.message}`);
        return;
      }
    }
  }

  dispose(): void {
    this.batcher.dispose();
    for (const s of this.subs) s.dispose();
    this.host.disposed(this);
  }
}

/** Workspace files whose path contains the query's characters in order (for `@` mentions). */
async function findFiles(query: string): Promise<{ path: string; label: string }[]> {
  const files = await vscode.workspace.findFiles("**/*", "{**/node_modules/**,**/.git/**,**/target/**,**/.pi/sessions/**}", 5000);
  const q = query.toLowerCase();
  const scored: { path: string; label: string; score: number }[] = [];
  for (const f of files) {
    const rel = vscode.workspace.asRelativePath(f, false);
    const s = fuzzyScore(rel.toLowerCase(), q);
    if (s >= 0) scored.push({ path: rel, label: rel.split("/").pop() ?? rel, score: s });
  }
  scored.sort((a, b) => a.score - b.score || a.path.length - b.path.length || a.path.localeCompare(b.path));
  return scored.slice(0, 50).map(({ path, label }) => ({ path, label }));
}

/** Lower is better; -1: not a match (the query's characters must appear in order). */
export function fuzzyScore(text: string, query: string): number {
  let at = 0;
  let gaps = 0;
  for (const ch of query) {
    const i = text.indexOf(ch, at);
    if (i < 0) return -1;
    gaps += i - at;
    at = i + 1;
  }
  const base = text.lastIndexOf("/") + 1;
  return gaps + (text.indexOf(query, base) >= 0 ? 0 : 1000);
}

/** The webview's page (src/webview/html.ts: strict CSP, no remote resources, script by nonce). */
function html(webview: vscode.Webview, extensionUri: vscode.Uri): string {
  const dist = vscode.Uri.joinPath(extensionUri, "dist");
  const script = vscode.Uri.joinPath(dist, "webview.js");
  if (!fs.existsSync(script.fsPath)) return `<!DOCTYPE html><html><body><p>The chat view was not built (dist/webview.js is missing).</p></body></html>`;
  return webviewHtml({
    scriptUri: webview.asWebviewUri(script).toString(),
    styleUri: webview.asWebviewUri(vscode.Uri.joinPath(dist, "webview.css")).toString(),
    cspSource: webview.cspSource,
    nonce: crypto.randomBytes(18).toString("base64"),
  });
}

/** An error's message (a JSON-RPC error's, an Error's, or the value in words). */
function errorText(e: unknown): string {
  return e && typeof e === "object" && "message" in e && e.message != null ? String(e.message) : String(e);
}
