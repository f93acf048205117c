/**
 * The Pi extension's host side: starts pi-lsp (server.ts), relays the agent protocol to the
 * chat panels (panels.ts, relay.ts), answers the server's requests (permissions and extension
 * UI through requests.ts; `agent/saveDocument`; `agent/diagnostics`), tracks the agent's edits
 * for review (changes.ts), and contributes the sessions view, the status bar and the commands
 * of package.json. No server event moves focus or changes the active editor.
 */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as vscode from "vscode";
import { UnsavedChanges } from "./unsaved";
import { type LanguageClient, State } from "vscode-languageclient/node";
import { AttentionList, flagText, viewBadge } from "./attention";
import { ChangeTracker, DIFF_SCHEME, type SavedReview } from "./changes";
import { relativeTime, SessionNames } from "./names";
import type { HostToWebview } from "../shared/messages";
import { ChatPanel, type PanelHost } from "./panels";
import { cpuClock, cpuNow, cpuNowCost, type Note, Router } from "./relay";
import { ServerQuestions } from "./requests";
import { DeltaExpander } from "./deltas";
import { createClient, resolveServerBinary } from "./server";
import { branchRows, type SessionNode, SessionsView, shown, type TreeEntry } from "./sessions";
import { StatusBar } from "./status";
import { POLICY_ITEMS, policyNotice, scopeItems, writePiSetting } from "./policy";
import { setUserMcpConfig, showMcpServers, showServerMessage } from "./mcp";
import { trackActiveEditor } from "./editorcontext";

/** Server notifications relayed to the panels (and watched by the host). */
const NOTIFICATIONS = ["agent/event", "agent/queueUpdate", "agent/usage", "agent/attention", "agent/ui/notification", "agent/didWriteDocument", "agent/plan"];

const CHAT_SESSION_KEY = "pi.chat.sessionId";
/** Workspace-state key of the review state (changes.ts `SavedReview`). */
const REVIEW_KEY = "pi.review";

let stopClient: (() => Promise<void>) | undefined;
let saveReviewNow: (() => Thenable<void>) | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<unknown> {
  const output = vscode.window.createOutputChannel("Pi", { log: true });
  const trace = vscode.window.createOutputChannel("Pi LSP Trace", { log: true });
  const router = new Router();
  setUserMcpConfig(context.globalStorageUri);
  // pi.context.activeEditor: the active editor's chip in every panel (editorcontext.ts).
  trackActiveEditor(() => panels, context.subscriptions);
  const unsaved = new UnsavedChanges();
  context.subscriptions.push(unsaved);
  const panels = new Set<ChatPanel>();
  let activePanel: ChatPanel | undefined;
  let chatView: ChatPanel | undefined;
  const status = new StatusBar();
  const changes = new ChangeTracker(output);
  // The review state (files under review, their hunks) survives a window reload.
  const saveReview = () => context.workspaceState.update(REVIEW_KEY, changes.snapshot());
  changes.onStateChange = () => void saveReview();
  saveReviewNow = saveReview;
  void changes.restore(context.workspaceState.get<SavedReview>(REVIEW_KEY));
  let client: LanguageClient | undefined;
  let starting: Promise<LanguageClient> | undefined;
  let hostCpuMs = 0;
  let notesRelayed = 0;

  const questions = new ServerQuestions(
    { panelsOf: (id) => router.panelsOf(id) as ChatPanel[] },
    output,
    (toolCallId, p) => changes.openDiff({ toolCallId, path: p }),
    (toolCallId) => changes.proposals.close(toolCallId),
    (sessionId) => openInChatView(sessionId, undefined, false),
  );
  const names = new SessionNames();
  changes.sessionName = (id) => names.get(id);
  const flags = new AttentionList();
  flags.onChange = () => {
    const f = flagText(flags.list(), (id) => names.get(id));
    status.setFlag(f.text, f.tooltip);
    updateBadge();
  };
  questions.onChange = (id, n) => {
    status.questions(id, n);
    flags.questions(id, n);
    updateBadge();
  };
  /** The chat view's VS Code view (for its badge), once resolved. */
  let chatWebviewView: vscode.WebviewView | undefined;
  /** The chat view's badge: what needs the user in the session it shows (attention.ts). */
  function updateBadge(): void {
    if (!chatWebviewView) return;
    const id = chatView?.sessionId;
    const b = id ? viewBadge(names.get(id), questions.openKinds(id), flags.list().find((f) => f.sessionId === id)) : undefined;
    const now = chatWebviewView.badge;
    if (b?.value !== now?.value || b?.tooltip !== now?.tooltip) chatWebviewView.badge = b;
  }
  /** A panel on `sessionId` was hidden: open questions nobody sees now are notified, and flagged. */
  function hidden(sessionId: string | null): void {
    const asked = questions.visibilityChanged(sessionId);
    if (asked && sessionId) flags.attention({ sessionId, ...asked }, false, Date.now());
  }
  /** Whether a visible panel shows `sessionId` (the user sees it). */
  const seenNow = (sessionId: string): boolean => router.panelsOf(sessionId).some((x) => (x as ChatPanel).visible);

  const activeSession = (): string | null => activePanel?.sessionId ?? chatView?.sessionId ?? null;

  async function startClient(): Promise<LanguageClient> {
    const config = vscode.workspace.getConfiguration("pi");
    const binary = resolveServerBinary({
      setting: config.get<string>("serverPath", ""),
      pathEnv: process.env.PATH,
      workspaceFolders: (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath),
      extensionPath: context.extensionPath,
    });
    if (!binary) {
      const msg = "Pi: no pi-lsp binary found (setting pi.serverPath, PATH, the workspace's target/release/pi-lsp, or the one bundled with the extension).";
      void vscode.window.showErrorMessage(msg, "Open Settings").then((c) => c && vscode.commands.executeCommand("workbench.action.openSettings", "pi.serverPath"));
      throw new Error(msg);
    }
    output.info(`starting ${binary.path} (from ${binary.source})`);
    const c = createClient(binary, output, trace, { applyEdit: (p, next) => changes.applyEdit(p, next) });
    c.onRequest("agent/requestPermission", async (params: any, token) => {
      if (params?.change && params.toolCallId) changes.pendingChanges.set(params.toolCallId, params.change);
      try {
        return await questions.ask("agent/requestPermission", params, token);
      } finally {
        if (params?.toolCallId) changes.pendingChanges.delete(params.toolCallId);
      }
    });
    c.onRequest("agent/ui/request", (params: any, token) => questions.ask("agent/ui/request", params, token));
    c.onRequest("agent/saveDocument", async (params: { uri: string }) => {
      const key = vscode.Uri.parse(params.uri).toString();
      const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === key);
      if (!doc) return { saved: false };
      unsaved.saved(doc.uri);
      return { saved: doc.isDirty ? await doc.save() : true };
    });
    // The disk got only the agent's change; the buffer keeps the user's unsaved changes. The
    // user's own save later writes everything: unsaved.ts keeps VS Code from calling it a
    // conflict ("the content of the file is newer").
    c.onNotification("agent/didMergeToDisk", (params: { uri: string; previousMtime?: { sec: number; nsec: number } | null }) => {
      unsaved.merged(vscode.Uri.parse(params.uri), params.previousMtime ?? undefined);
    });
        c.onRequest("agent/diagnostics", async (params: { uris?: string[] }) => {
      const pairs: [vscode.Uri, readonly vscode.Diagnostic[]][] = params?.uris
        ? params.uris.map((u) => {
            const uri = vscode.Uri.parse(u);
            return [uri, vscode.languages.getDiagnostics(uri)] as [vscode.Uri, vscode.Diagnostic[]];
          })
        : vscode.languages.getDiagnostics().filter(([u]) => u.scheme === "file");
      const items = [];
      for (const [uri, diags] of pairs) items.push({ uri: c.code2ProtocolConverter.asUri(uri), diagnostics: await c.code2ProtocolConverter.asDiagnostics([...diags]) });
      return { items };
    });
    // Compact deltas (asked for in server.ts): expanded here, so nothing past this line knows.
    const deltas = new DeltaExpander();
    for (const method of NOTIFICATIONS) {
      if (method === "agent/event") c.onNotification(method, (params: any) => onNotification({ method, params: deltas.event(params) }));
      else c.onNotification(method, (params: any) => onNotification({ method, params }));
    }
    // vscode-jsonrpc hands a notification's positional params to the handler as separate
    // arguments: gather them back into the array.
    c.onNotification("agent/delta", (...params: unknown[]) => {
      const e = deltas.expand(params);
      if (e instanceof Error) output.warn(e.message);
      else onNotification({ method: "agent/event", params: e });
    });
    await c.start();
    // MCP failures come with a button to the servers' list (mcp.ts).
    c.onNotification("window/showMessage", (p: { type: number; message: string }) => void showServerMessage(p, () => void vscode.commands.executeCommand("pi.mcp.servers"), output));
    output.info(`pi-lsp started: ${JSON.stringify(c.initializeResult?.serverInfo ?? {})}`);
    return c;
  }

  async function ensureClient(): Promise<LanguageClient> {
    if (client && client.state === State.Running) return client;
    starting ??= startClient().then(
      (c) => {
        client = c;
        return c;
      },
      (e) => {
        starting = undefined;
        throw e;
      },
    );
    return starting;
  }

  stopClient = async () => {
    const c = client ?? (starting ? await starting.catch(() => undefined) : undefined);
    client = undefined;
    starting = undefined;
    if (c) await c.stop(5000).catch((e) => output.warn(`stopping pi-lsp: ${String(e)}`));
  };

  function onNotification(note: Note): void {
    const t0 = cpuNow();
    notesRelayed++;
    const p = note.params;
    status.notification(note.method, p);
    if (note.method === "agent/event") {
      const ev = p?.event;
      if (ev?.type === "tool_execution_start" && ev.toolCallId && p.sessionId) changes.noteToolCall(ev.toolCallId, p.sessionId);
      if (ev?.type === "agent_end" && p.sessionId === activeSession()) scheduleTreeRefresh();
      if (ev?.type === "agent_start" && p.sessionId) flags.runStarted(p.sessionId);
      if (ev?.type === "tool_execution_end" && ev.toolCallId) {
        const text = (ev.result?.content ?? []).filter((b: any) => b?.type === "text").map((b: any) => b.text).join("\n");
        questions.toolEnded(ev.toolCallId, ev.isError === true, text);
      }
      if (ev?.type === "message_start") names.fromEvent(p);
      if (ev?.type === "agent_end" && process.env.PI_VSCODE_STATS) setTimeout(writeStats, 200);
    }
    router.route(note);
    if (note.method === "agent/attention") attention(p);
    if (note.method === "agent/ui/notification" && p?.method === "notify") {
      const text = `${p.extension ? `${p.extension}: ` : ""}${p.message ?? ""}`;
      if (p.notifyType === "error") void vscode.window.showErrorMessage(text);
      else if (p.notifyType === "warning") void vscode.window.showWarningMessage(text);
      else void vscode.window.showInformationMessage(text);
    }
    hostCpuMs += cpuNow() - t0;
  }

  /** `agent/attention` for a session no visible panel shows: the status bar flag, and for
   * `finished` / `failed` a notification (no focus change; "Open" shows the session in the chat
   * view). Questions (`permission`, `question`) have their own notifications (requests.ts). */
  function attention(p: any): void {
    if (typeof p?.sessionId !== "string") return;
    if (!flags.attention(p, seenNow(p.sessionId), Date.now())) return;
    if (p.reason !== "finished" && p.reason !== "failed") return;
    const show = p.reason === "failed" ? vscode.window.showErrorMessage : vscode.window.showInformationMessage;
    void show(`Pi: ${names.get(p.sessionId)} ${p.reason === "failed" ? "failed" : "finished"}${p.message ? `: ${p.message}` : ""}`, "Open").then((c) => {
      if (c) void openInChatView(p.sessionId, undefined, false);
    });
  }

  let treeTimer: ReturnType<typeof setTimeout> | undefined;
  function scheduleTreeRefresh(): void {
    if (treeTimer) return;
    treeTimer = setTimeout(() => {
      treeTimer = undefined;
      sessions.refresh();
    }, 300);
  }

  /** Panels the host has attached to a session once (see `attach`). */
  const attachedTo = new WeakSet<ChatPanel>();
  const host: PanelHost = {
    extensionUri: context.extensionUri,
    log: output,
    workspaceName: () => vscode.workspace.workspaceFolders?.[0]?.name ?? vscode.workspace.name ?? "",
    request: async (method, params: any) => {
      const c = await ensureClient();
      if (method === "agent/abort" && params?.sessionId) status.stopping(params.sessionId);
      let result: any;
      try {
        result = await c.sendRequest(method, params);
      } finally {
        // The compaction is over (the panel's /compact and the Compact command alike).
        if (method === "agent/compact" && typeof params?.sessionId === "string") status.compacted(params.sessionId);
      }
      if (method === "agent/state" || method === "agent/session/new" || method === "agent/session/open") {
        status.state(result);
        names.fromState(result);
      }
      if (method === "agent/session/stats") status.stats(result);
      // After a compaction the context share is unknown until a response follows.
      if (method === "agent/compact" && typeof params?.sessionId === "string") void host.request("agent/session/stats", { sessionId: params.sessionId }).catch(() => undefined);
      if ((method === "agent/session/fork" || method === "agent/session/clone") && result?.session) names.fromState(result.session);
      if (method === "agent/session/list" && Array.isArray(result?.sessions)) names.fromList(result.sessions);
      if (method === "agent/session/name" && typeof params?.sessionId === "string" && typeof params?.name === "string") names.setName(params.sessionId, params.name);
      // The panel's own pickers: the status bar follows.
      if ((method === "agent/model/set" || method === "agent/thinking/set") && typeof params?.sessionId === "string") void host.request("agent/state", { sessionId: params.sessionId }).catch(() => undefined);
      if (method === "agent/abort" && params?.sessionId) status.notification("agent/event", { sessionId: params.sessionId, event: { type: "agent_end" } });
      return result;
    },
    attach: (panel, sessionId) => {
      // A panel restored after a window reload attaches first to the session it showed
      // (panel.sessionId is that one already): that is a new attachment too.
      const before = attachedTo.has(panel) ? panel.sessionId : undefined;
      attachedTo.add(panel);
      router.attach(panel, sessionId);
      if (panel === activePanel || (!activePanel && panel === chatView)) status.setActive(sessionId);
      if (panel.visible) flags.seen(sessionId);
      if (panel === chatView) updateBadge();
      if (before !== sessionId) {
        scheduleTreeRefresh();
        // The status bar's model · ctx% · $cost · state (after a reload no agent/usage comes
        // until the next response).
        if (sessionId) void host.request("agent/state", { sessionId }).catch(() => undefined);
        if (sessionId) void host.request("agent/session/stats", { sessionId }).catch(() => undefined);
      }
    },
    answerQuestion: (panel, id, result) => questions.answer(id, result, panel),
    openQuestions: (sessionId) => questions.openFor(sessionId),
    openDiff: (toolCallId, p) => changes.openDiff({ toolCallId, path: p }),
    activated: (panel) => {
      if (panel.visible) flags.seen(panel.sessionId);
      activePanel = panel;
      status.setActive(panel.sessionId);
    },
    newSessionParams: () => {
      // pi.thinkingLevel applies to new sessions (clamped by the server to the model).
      const level = vscode.workspace.getConfiguration("pi").get<string>("thinkingLevel", "default");
      return level && level !== "default" ? { thinkingLevel: level } : undefined;
    },
    disposed: (panel) => {
      router.remove(panel);
      panels.delete(panel);
      if (activePanel === panel) activePanel = chatView;
      if (chatView === panel) chatView = undefined;
    },
  };

  function addPanel(p: ChatPanel): ChatPanel {
    panels.add(p);
    router.add(p);
    return p;
  }

  // --- Views --------------------------------------------------------------------------------

  context.subscriptions.push(
    vscode.window.registerWebviewViewProvider(
      "pi.chat",
      {
        resolveWebviewView(view) {
          const p = addPanel(
            new ChatPanel("view", view.webview, host, () => view.visible, context.workspaceState.get<string | null>(CHAT_SESSION_KEY, null), (id) => void context.workspaceState.update(CHAT_SESSION_KEY, id)),
          );
          chatView = p;
          chatWebviewView = view;
          activePanel ??= p;
          updateBadge();
          view.onDidChangeVisibility(() => {
            p.visibilityChanged();
            if (view.visible) flags.seen(p.sessionId);
            else hidden(p.sessionId);
            if (view.visible) host.activated(p);
          });
          view.onDidDispose(() => {
            if (chatWebviewView === view) chatWebviewView = undefined;
            p.dispose();
          });
          void ensureClient().catch(() => undefined);
        },
      },
      { webviewOptions: { retainContextWhenHidden: true } },
    ),
  );

  /** Editor-area panels (their titles follow the session's name). */
  const editorPanels = new Map<ChatPanel, vscode.WebviewPanel>();
  names.onChange = (id) => {
    for (const [p, panel] of editorPanels) if (p.sessionId === id) panel.title = `Pi · ${names.get(id)}`;
    changes.refreshNames();
    flags.onChange();
  };

  function adoptPanel(panel: vscode.WebviewPanel, sessionId: string | null): ChatPanel {
    const title = (id: string | null) => (id ? `Pi · ${names.get(id)}` : "Pi · new session");
    const p = addPanel(new ChatPanel("panel", panel.webview, host, () => panel.visible, sessionId, (id) => (panel.title = title(id))));
    panel.title = title(sessionId);
    editorPanels.set(p, panel);
    panel.iconPath = vscode.Uri.joinPath(context.extensionUri, "resources", "pi.svg");
    panel.onDidChangeViewState(() => {
      p.visibilityChanged();
      if (panel.visible) flags.seen(p.sessionId);
      else hidden(p.sessionId);
      if (panel.active) host.activated(p);
    });
    panel.onDidDispose(() => {
      editorPanels.delete(p);
      p.dispose();
      hidden(p.sessionId);
    });
    host.activated(p);
    void ensureClient().catch(() => undefined);
    return p;
  }

  context.subscriptions.push(
    vscode.window.registerWebviewPanelSerializer("pi.chatPanel", {
      async deserializeWebviewPanel(panel, state: any) {
        adoptPanel(panel, typeof state?.sessionId === "string" ? state.sessionId : null);
      },
    }),
  );

  const sessions = new SessionsView((m, p) => host.request(m, p), activeSession, output);
  const sessionsTree = vscode.window.createTreeView("pi.sessions", { treeDataProvider: sessions, showCollapseAll: true });
  const changesTree = vscode.window.createTreeView("pi.changes", { treeDataProvider: changes });
  context.subscriptions.push(
    sessionsTree,
    changesTree,
    changes.onDidChangeTreeData(() => {
      const n = changes.changedFiles().length;
      changesTree.badge = n ? { value: n, tooltip: `${n} file${n === 1 ? "" : "s"} with Pi's changes to review` } : undefined;
    }),
    vscode.languages.registerCodeLensProvider({ scheme: "file" }, changes),
    vscode.workspace.registerTextDocumentContentProvider(DIFF_SCHEME, changes),
    changes,
    status,
    output,
    trace,
  );

  // --- Commands -----------------------------------------------------------------------------

  /** The panel commands go to: the active one, else the chat view (revealed, not focused). */
  async function targetPanel(): Promise<ChatPanel | undefined> {
    if (activePanel?.ready) return activePanel;
    if (chatView?.ready) return chatView;
    await vscode.commands.executeCommand("workbench.view.extension.pi");
    for (let i = 0; i < 100 && !chatView?.ready; i++) await new Promise((r) => setTimeout(r, 50));
    return chatView;
  }

  /**
   * Shows `sessionId` in the chat view (or in the active editor panel when that one shows it),
   * revealing the view when it is hidden — only ever on the user's own action. `reload`: the
   * panel reloads the session even when it shows it already (its branch moved: branch, rewind).
   * `text` goes into the composer.
   */
  async function openInChatView(sessionId: string | null, text?: string, reload = true): Promise<void> {
    let p = activePanel?.kind === "panel" && activePanel.sessionId === sessionId ? activePanel : chatView;
    if (!p?.ready || (p === chatView && !p.visible)) {
      await vscode.commands.executeCommand("workbench.view.extension.pi");
      for (let i = 0; i < 100 && !chatView?.ready; i++) await new Promise((r) => setTimeout(r, 50));
      p = p?.ready && p.kind === "panel" ? p : chatView;
    }
    if (!p) return;
    if (p.sessionId !== sessionId) p.show(sessionId);
    else if (reload) p.post({ type: "init", sessionId, workspaceName: host.workspaceName(), capabilities: { followUpKey: "alt+enter", escapeAborts: true, host: "vscode" } });
    if (text) p.post({ type: "command", command: "insertText", text });
    host.activated(p);
  }

  /** Tells the panels on `sessionId` that its state changed outside them. */
  function stateChanged(sessionId: string): void {
    for (const p of router.panelsOf(sessionId)) (p as ChatPanel).post({ type: "stateChanged", sessionId } satisfies HostToWebview);
  }

  async function needSession(): Promise<string | undefined> {
    const id = activeSession();
    if (!id) void vscode.window.showInformationMessage("Pi: no session yet — send a prompt in the chat first.");
    return id ?? undefined;
  }

  async function guarded(what: string, fn: () => Promise<unknown>): Promise<unknown> {
    try {
      return await fn();
    } catch (e: any) {
      output.error(`${what}: ${String(e?.message ?? e)}`);
      void vscode.window.showErrorMessage(`Pi: ${what} failed: ${String(e?.message ?? e)}`);
      return undefined;
    }
  }

  /** The session a command acts on: the row's (context menu; a key in the Sessions view
   * passes the focused row), else the active one (the palette). */
  function sessionOf(node: SessionNode | undefined): string | null {
    if (node?.kind === "session") return node.session.sessionId;
    if (node?.kind === "entry") return node.sessionId;
    return activeSession();
  }

  type EntryNode = Extract<SessionNode, { kind: "entry" }>;
  /** The entry a command acts on: the row's (context menu, a key in the Sessions view), else
   * one picked from the session's messages (the palette). */
  async function entryOf(node: SessionNode | undefined, title: string): Promise<EntryNode | undefined> {
    if (node?.kind === "entry") return node;
    const sessionId = node?.kind === "session" ? node.session.sessionId : activeSession();
    if (!sessionId) {
      void vscode.window.showInformationMessage("Pi: no session yet — send a prompt in the chat first.");
      return undefined;
    }
    const tree = (await host.request("agent/session/tree", { sessionId })) as { leafId: string | null; entries: TreeEntry[] };
    const rows = branchRows(tree.entries, tree.leafId);
    const items = tree.entries
      .filter(shown)
      .reverse()
      .map((entry) => ({
        label: `${rows.activePath.has(entry.id) ? "$(account)" : "$(git-branch)"} ${(entry.preview ?? entry.type).replace(/\s+/g, " ").trim().slice(0, 100) || entry.type}`,
        description: [entry.label ? `🏷 ${entry.label}` : "", rows.leafRow === entry.id ? "● here" : rows.activePath.has(entry.id) ? "active branch" : ""].filter(Boolean).join(" · "),
        detail: entry.timestamp ? new Date(entry.timestamp).toLocaleString() : undefined,
        entry,
      }));
    if (items.length === 0) {
      void vscode.window.showInformationMessage("Pi: the session has no messages yet.");
      return undefined;
    }
    const pick = await vscode.window.showQuickPick(items, { title: `Pi: ${title}`, placeHolder: `${names.get(sessionId)} — newest first`, matchOnDescription: true });
    if (!pick) return undefined;
    return { kind: "entry", sessionId, entry: pick.entry, children: [], active: rows.activePath.has(pick.entry.id), leaf: rows.leafRow === pick.entry.id };
  }

  /** A session file picked from `agent/session/list` (for Open Session from the palette). */
  async function pickSessionFile(title: string): Promise<string | undefined> {
    const { sessions: list } = (await host.request("agent/session/list", {})) as { sessions: any[] };
    if (list.length === 0) {
      void vscode.window.showInformationMessage("Pi: no sessions yet.");
      return undefined;
    }
    const pick = await vscode.window.showQuickPick(
      list.map((s) => ({ label: s.name || oneLine(s.firstPrompt) || s.sessionId.slice(0, 8), description: `${relativeTime(s.lastActivity)} · ${s.entryCount} entries${s.open ? " · open" : ""}`, detail: s.sessionFile, file: s.sessionFile as string })),
      { title: `Pi: ${title}`, matchOnDetail: true },
    );
    return pick?.file;
  }

  /** The leaf before the last rewind per session (`agent/session/rewind`'s `previousLeafId`). */
  const lastRewind = new Map<string, string>();
  /** `agent/session/rewind` (moves the leaf, reverts the agent's later file edits as editor
   * edits); a server without it says so instead of failing silently. */
  async function rewind(sessionId: string, entryId: string): Promise<unknown> {
    try {
      return await host.request("agent/session/rewind", { sessionId, entryId });
    } catch (e: any) {
      if (e?.code === -32601) {
        void vscode.window.showWarningMessage("Pi: this pi-lsp has no agent/session/rewind; use Branch Here and the Changes view instead.");
        return undefined;
      }
      throw e;
    }
  }

  const commands: Record<string, (...args: any[]) => unknown> = {
    "pi.mcp.servers": () => showMcpServers((m, p) => host.request(m, p), output),
    /** A question notification's link (requests.ts): not in the palette. */
    "pi.answerQuestion": (id: unknown, action: unknown) => (typeof id === "number" && typeof action === "string" ? questions.notificationAction(id, action) : undefined),
    "pi.openAttention": async () => {
      const list = flags.list();
      if (list.length === 0) return;
      let id: string | undefined = list[0].sessionId;
      if (list.length > 1) {
        const pick = await vscode.window.showQuickPick(
          list.map((f) => ({ label: names.get(f.sessionId), description: f.reason, detail: f.message || undefined, id: f.sessionId })),
          { title: "Pi: sessions that need you" },
        );
        id = pick?.id;
      }
      if (!id) return;
      flags.seen(id);
      await openInChatView(id, undefined, false);
    },
    "pi.focusChat": async () => {
      await vscode.commands.executeCommand("pi.chat.focus");
      (await targetPanel())?.post({ type: "command", command: "focusComposer" });
    },
    "pi.newSession": async () => (await targetPanel())?.post({ type: "command", command: "newSession" }),
    "pi.abort": async () => {
      const id = activeSession();
      if (!id) return;
      const p = router.panelsOf(id)[0] as ChatPanel | undefined;
      if (p?.ready) p.post({ type: "command", command: "abort" });
      else await guarded("abort", () => host.request("agent/abort", { sessionId: id }));
    },
    "pi.steerMode": async () => (await targetPanel())?.post({ type: "command", command: "steerMode" }),
    "pi.followUpMode": async () => (await targetPanel())?.post({ type: "command", command: "followUpMode" }),
    "pi.compact": async () => {
      const sessionId = await needSession();
      if (!sessionId) return;
      const instructions = await vscode.window.showInputBox({ prompt: "Instructions for the summary (optional)", placeHolder: "e.g. keep the list of failing tests" });
      if (instructions === undefined) return;
      await vscode.window.withProgress({ location: vscode.ProgressLocation.Window, title: "Pi: compacting" }, () =>
        guarded("compaction", async () => {
          const r: any = await host.request("agent/compact", instructions ? { sessionId, instructions } : { sessionId });
          void vscode.window.showInformationMessage(`Pi: compacted (${r?.tokensBefore ?? "?"} tokens before).`);
        }),
      );
    },
    "pi.selectModel": () =>
      guarded("model selection", async () => {
        const active = activeSession();
        const [{ models }, st] = await Promise.all([
          host.request("agent/model/list", {}) as Promise<{ models: any[] }>,
          active ? (host.request("agent/state", { sessionId: active }).catch(() => undefined) as Promise<any>) : Promise.resolve(undefined),
        ]);
        const isCurrent = (m: any) => st?.model && m.provider === st.model.provider && m.id === st.model.id;
        const items = models.map((m) => ({
          label: `${isCurrent(m) ? "$(check) " : ""}${m.name || m.id}`,
          description: `${m.provider}/${m.id}${isCurrent(m) ? " · current" : ""}`,
          detail: [
            m.contextWindow ? `${Math.round(m.contextWindow / 1000)}k context` : "",
            m.cost && (m.cost.input || m.cost.output) ? `$${m.cost.input} / $${m.cost.output} per M tokens in / out` : "",
            m.reasoning ? "thinking" : "",
          ]
            .filter(Boolean)
            .join(" · "),
          model: m,
        }));
        items.sort((a, b) => Number(isCurrent(b.model)) - Number(isCurrent(a.model)));
        const pick = await vscode.window.showQuickPick(items, {
          title: "Pi: model",
          placeHolder: active ? `Model for ${names.get(active)}` : "Model of a new session",
          matchOnDescription: true,
        });
        if (!pick) return;
        const id = `${pick.model.provider}/${pick.model.id}`;
        const sessionId = activeSession();
        if (sessionId) {
          await host.request("agent/model/set", { sessionId, model: id });
          status.setModel(sessionId, pick.model.name || id, pick.model.contextWindow);
          stateChanged(sessionId);
        } else {
          const level = vscode.workspace.getConfiguration("pi").get<string>("thinkingLevel", "default");
          const st: any = await host.request("agent/session/new", { model: id, ...(level !== "default" ? { thinkingLevel: level } : {}) });
          await openInChatView(st.sessionId);
        }
      }),
    "pi.selectThinkingLevel": () =>
      guarded("thinking level", async () => {
        const sessionId = await needSession();
        if (!sessionId) return;
        const st: any = await host.request("agent/state", { sessionId });
        const levels: string[] = st?.model?.thinkingLevels?.length ? st.model.thinkingLevels : ["off", "minimal", "low", "medium", "high", "xhigh"];
        if (levels.length <= 1) {
          void vscode.window.showInformationMessage(`Pi: ${st?.model?.name || st?.model?.id || "this model"} does not think (its only thinking level is "${levels[0] ?? "off"}"); choose a reasoning model to set one.`);
          return;
        }
        const level = await vscode.window.showQuickPick(
          levels.map((l) => ({ label: `${l === st?.thinkingLevel ? "$(check) " : ""}${l}`, description: l === st?.thinkingLevel ? "current" : undefined, level: l })),
          { title: `Pi: thinking level of ${st?.model?.name || st?.model?.id || "the model"}` },
        );
        if (!level) return;
        const r: any = await host.request("agent/thinking/set", { sessionId, level: level.level });
        stateChanged(sessionId);
        if (r?.level !== level.level) void vscode.window.showInformationMessage(`Pi: thinking level is ${r?.level} (clamped to what the model supports).`);
      }),
    "pi.setApprovalPolicy": () =>
      guarded("approval policy", async () => {
        const pick = await vscode.window.showQuickPick(
          POLICY_ITEMS.map((p) => ({ ...p })),
          { title: "Pi: approval policy — which one" },
        );
        if (!pick) return;
        // Then where it goes, each place saying what wins over it (one thing per choice).
        const sessionId = activeSession();
        const root = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
        const projectFile = root ? path.join(root, ".pi", "settings.json") : "";
        const userFile = path.join(process.env.PI_CODING_AGENT_DIR || path.join(os.homedir(), ".pi", "agent"), "settings.json");
        const editorSetting = vscode.workspace.getConfiguration("pi").get<string>("approvalPolicy");
        const items = scopeItems(!!sessionId, editorSetting, projectFile, userFile).filter((i) => i.scope !== "workspace" || root);
        const where = await vscode.window.showQuickPick(items, { title: `Pi: set approval policy "${pick.label}" for…` });
        if (!where) return;
        const value = pick.label === "default" ? undefined : pick.label;
        if (where.scope === "session" && sessionId) {
          const r: any = await host.request("agent/permissions/set", { sessionId, approvalPolicy: value ?? null });
          stateChanged(sessionId);
          void vscode.window.showInformationMessage(policyNotice(r?.approvalPolicy));
          return;
        }
        const file = where.scope === "workspace" ? projectFile : userFile;
        writePiSetting(file, "approvalPolicy", value);
        void vscode.window.showInformationMessage(
          `Pi: approvalPolicy ${value ? `"${value}"` : "removed"} in ${file}; new sessions use it${editorSetting && editorSetting !== "default" ? ` unless the editor's pi.approvalPolicy ("${editorSetting}") is set` : ""}, a session's own choice still wins.`,
        );
      }),
    "pi.addSelection": async () => {
      const e = vscode.window.activeTextEditor;
      if (!e || e.selection.isEmpty) return;
      const rel = vscode.workspace.asRelativePath(e.document.uri, false);
      const startLine = e.selection.start.line + 1;
      const endLine = e.selection.end.line + 1 - (e.selection.end.character === 0 && e.selection.end.line > e.selection.start.line ? 1 : 0);
      (await targetPanel())?.post({ type: "context", items: [{ kind: "selection", label: `${path.basename(rel)}:${startLine}-${endLine}`, text: e.document.getText(e.selection), path: rel, range: { startLine, endLine } }] });
    },
    "pi.addFile": async () => {
      const e = vscode.window.activeTextEditor;
      if (!e) return;
      const rel = vscode.workspace.asRelativePath(e.document.uri, false);
      (await targetPanel())?.post({ type: "context", items: [{ kind: "file", label: path.basename(rel), text: fileContext(e.document), path: rel }] });
    },
    "pi.addDiagnostics": async () => {
      const e = vscode.window.activeTextEditor;
      if (!e) return;
      const rel = vscode.workspace.asRelativePath(e.document.uri, false);
      const diags = vscode.languages.getDiagnostics(e.document.uri);
      const sev = ["error", "warning", "info", "hint"];
      const text = diags.map((d) => `${rel}:${d.range.start.line + 1}:${d.range.start.character + 1} ${sev[d.severity]}${d.source ? ` ${d.source}` : ""}: ${d.message}`).join("\n") || `${rel}: no problems`;
      (await targetPanel())?.post({ type: "context", items: [{ kind: "diagnostics", label: `${path.basename(rel)} problems (${diags.length})`, text, path: rel }] });
    },
    "pi.openSessionInPanel": (node?: SessionNode) =>
      guarded("opening a panel", async () => {
        let sessionId: string | null = node?.kind === "session" ? node.session.sessionId : null;
        if (!node) {
          const { sessions: list } = (await host.request("agent/session/list", {})) as { sessions: any[] };
          const pick = await vscode.window.showQuickPick(
            [{ label: "$(add) New session", id: null as string | null }, ...list.map((s) => ({ label: s.name || s.firstPrompt || s.sessionId, description: new Date(s.lastActivity).toLocaleString(), id: s.sessionId as string | null }))],
            { title: "Pi: open a session in a new panel" },
          );
          if (!pick) return;
          sessionId = pick.id;
        } else if (node.kind === "session") {
          const st: any = await host.request("agent/session/open", { path: node.session.sessionFile });
          sessionId = st.sessionId;
        }
        const panel = vscode.window.createWebviewPanel("pi.chatPanel", "Pi", { viewColumn: vscode.ViewColumn.Beside, preserveFocus: false }, { enableScripts: true, retainContextWhenHidden: true });
        adoptPanel(panel, sessionId);
      }),
    "pi.showTrace": async () => {
      const cfg = vscode.workspace.getConfiguration("pi");
      if (cfg.get("trace.server") === "off") {
        await cfg.update("trace.server", "verbose", vscode.ConfigurationTarget.Global);
        void vscode.window.showInformationMessage("Pi: LSP tracing is on (pi.trace.server = verbose); the trace shows every message from now on.");
      }
      trace.show(true);
    },
    "pi.restartServer": () =>
      guarded("restart", async () => {
        await stopClient?.();
        await ensureClient();
        for (const p of panels) p.show(p.sessionId);
      }),
    "pi.sessions.refresh": () => sessions.refresh(),
    "pi.session.open": (node?: SessionNode) =>
      guarded("opening the session", async () => {
        if (node?.kind === "entry" || node?.kind === "group") return;
        const file = node?.kind === "session" ? node.session.sessionFile : await pickSessionFile("open a session");
        if (!file) return;
        const st: any = await host.request("agent/session/open", { path: file });
        // Another project's session, opened by its path: say whose it is.
        if (typeof st?.otherCwd === "string") void vscode.window.showWarningMessage(`Pi: this session is another project's (${st.otherCwd || "no folder named"}).`);
        await openInChatView(st.sessionId);
        sessions.refresh();
      }),
    "pi.session.branchHere": (node?: SessionNode) =>
      guarded("branching", async () => {
        const e = await entryOf(node, "branch here (the next prompt continues from this message)");
        if (!e) return;
        const r: any = await host.request("agent/session/branch", { sessionId: e.sessionId, entryId: e.entry.id });
        await openInChatView(e.sessionId, r?.editorText);
        sessions.refresh();
      }),
    "pi.session.branchWithSummary": (node?: SessionNode) =>
      guarded("branching with a summary", async () => {
        const e = await entryOf(node, "branch here with a summary of the branch left");
        if (!e) return;
        const customInstructions = await vscode.window.showInputBox({ prompt: "Instructions for the branch summary (optional)" });
        if (customInstructions === undefined) return;
        const r: any = await vscode.window.withProgress({ location: vscode.ProgressLocation.Window, title: "Pi: summarising the branch" }, () =>
          host.request("agent/session/branch", { sessionId: e.sessionId, entryId: e.entry.id, summarize: true, ...(customInstructions ? { customInstructions } : {}) }),
        );
        await openInChatView(e.sessionId, r?.editorText);
        sessions.refresh();
      }),
    "pi.session.fork": (node?: SessionNode) =>
      guarded("forking", async () => {
        const e = await entryOf(node, "fork a new session from this message");
        if (!e) return;
        const r: any = await host.request("agent/session/fork", { sessionId: e.sessionId, entryId: e.entry.id });
        await openInChatView(r.session.sessionId, r.text);
        sessions.refresh();
      }),
    "pi.session.clone": (node?: SessionNode) =>
      guarded("cloning", async () => {
        const sessionId = sessionOf(node);
        if (!sessionId) return;
        const r: any = await host.request("agent/session/clone", { sessionId });
        await openInChatView(r.session.sessionId);
        sessions.refresh();
      }),
    "pi.session.label": (node?: SessionNode) =>
      guarded("labelling", async () => {
        const e = await entryOf(node, "label an entry");
        if (!e) return;
        const label = await vscode.window.showInputBox({ prompt: "Label (empty clears it)", value: e.entry.label ?? "" });
        if (label === undefined) return;
        await host.request("agent/session/label", { sessionId: e.sessionId, entryId: e.entry.id, label });
        sessions.refresh();
      }),
    "pi.session.rename": (node?: SessionNode) =>
      guarded("renaming", async () => {
        const sessionId = sessionOf(node);
        if (!sessionId) return;
        const name = await vscode.window.showInputBox({ prompt: "Session name", value: node?.kind === "session" ? (node.session.name ?? "") : names.get(sessionId) });
        if (!name) return;
        await host.request("agent/session/name", { sessionId, name });
        stateChanged(sessionId);
        sessions.refresh();
      }),
    "pi.session.export": (node?: SessionNode) =>
      guarded("exporting", async () => {
        const sessionId = sessionOf(node);
        if (!sessionId) return;
        const format = await vscode.window.showQuickPick(["markdown", "html"], { title: "Pi: export format" });
        if (!format) return;
        const root = vscode.workspace.workspaceFolders?.[0]?.uri;
        const target = await vscode.window.showSaveDialog({
          defaultUri: root ? vscode.Uri.joinPath(root, `pi-session-${sessionId.slice(0, 8)}.${format === "html" ? "html" : "md"}`) : undefined,
          filters: format === "html" ? { HTML: ["html"] } : { Markdown: ["md"] },
        });
        if (!target) return;
        const r: any = await host.request("agent/session/export", { sessionId, format, outputPath: target.fsPath });
        const open = await vscode.window.showInformationMessage(`Pi: exported to ${r?.path ?? target.fsPath}`, "Open");
        if (open) await vscode.window.showTextDocument(target, { preview: true });
      }),
    "pi.session.rewind": (node?: SessionNode) =>
      guarded("rewinding", async () => {
        const e = await entryOf(node, "rewind to before this message (reverts the agent's later file changes)");
        if (!e) return;
        node = e;
        const r: any = await rewind(e.sessionId, e.entry.id);
        if (!r) return;
        lastRewind.set(e.sessionId, r.previousLeafId);
        const files: any[] = r.files ?? [];
        const summary = files.map((f) => `${f.path} ${f.status}${f.reason ? ` (${f.reason})` : ""}`).join(", ") || "no file changes";
        await openInChatView(e.sessionId);
        sessions.refresh();
        const undo = await vscode.window.showInformationMessage(`Pi: rewound — ${summary}.`, "Undo Rewind");
        if (undo) await commands["pi.session.undoRewind"](node);
      }),
    "pi.session.undoRewind": (node?: SessionNode) =>
      guarded("undoing the rewind", async () => {
        const sessionId = sessionOf(node);
        const back = sessionId ? lastRewind.get(sessionId) : undefined;
        if (!sessionId || !back) {
          void vscode.window.showInformationMessage("Pi: nothing to undo (no rewind in this session since the window opened).");
          return;
        }
        const r: any = await rewind(sessionId, back);
        if (!r) return;
        lastRewind.delete(sessionId);
        await openInChatView(sessionId);
        sessions.refresh();
      }),
    "pi.changes.keepHunk": (uri?: any, index?: number) => changes.keepHunk(uri, index),
    "pi.changes.undoHunk": (uri?: any, index?: number) => changes.undoHunk(uri, index),
    "pi.changes.keepFile": (node?: any) => changes.keepFile(node),
    "pi.changes.undoFile": (node?: any) => changes.undoFile(node),
    "pi.changes.openDiff": (node?: any) => changes.openDiff(node),
  };
  for (const [id, fn] of Object.entries(commands)) {
    // Keys in the Sessions view (package.json: `args: {fromSessionsView: true}`) act on the
    // view's selected row: VS Code passes a tree's row to its context menu's commands, not to
    // a key's.
    const run = (...args: any[]) => fn(...(args[0]?.fromSessionsView === true ? [sessionsTree.selection[0]] : args));
    context.subscriptions.push(vscode.commands.registerCommand(id, run));
  }

  context.subscriptions.push(
    // An open edit question whose file changes says so at once (requests.ts).
    vscode.workspace.onDidChangeTextDocument((e) => {
      if (e.contentChanges.length === 0 || e.document.uri.scheme !== "file") return;
      const root = vscode.workspace.getWorkspaceFolder(e.document.uri)?.uri.fsPath ?? vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? "";
      questions.documentChanged(e.document.uri.fsPath, (p) => (path.isAbsolute(p) ? p : path.join(root, p)));
    }),
    vscode.workspace.onDidGrantWorkspaceTrust(() => void commands["pi.restartServer"]()),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("pi.serverPath") || e.affectsConfiguration("pi.model") || e.affectsConfiguration("pi.approvalPolicy") || e.affectsConfiguration("pi.saveUserChanges")) {
        void vscode.window.showInformationMessage("Pi: the server settings changed.", "Restart Server").then((c) => c && commands["pi.restartServer"]());
      }
    }),
  );

  // Start the server now so a reload mid-run finds the session again at once.
  void ensureClient().catch((e) => output.error(String(e?.message ?? e)));

  /** For tests and benchmarks (the e2e test reads it through the `pi._debugState` command). */
  const api = {
    state: () => ({
      activeSession: activeSession(),
      panels: [...panels].map((p) => ({ kind: p.kind, sessionId: p.sessionId, ready: p.ready, visible: p.visible, posts: p.batcher.posts, notes: p.batcher.notes, notesPosted: p.batcher.notesPosted, packedPosts: p.batcher.packedPosts, packedBytes: p.batcher.packedBytes, paused: p.batcher.paused, maxPostsPerSecond: p.batcher.maxPostsPerSecond, postCpuMs: p.postCpuMs })),
      changedFiles: changes.changedFiles(),
      typing: { ...changes.typing },
      status: status.text,
      flag: status.flagText,
      chatBadge: chatWebviewView?.badge ?? null,
      activeStatus: activeSession() ? status.get(activeSession()!) : null,
      notesRelayed,
      hostCpuMs,
      cpuClock,
      cpuCallMs: cpuNowCost(),
    }),
  };
  context.subscriptions.push(vscode.commands.registerCommand("pi._debugState", () => api.state()));
  if (process.env.PI_VSCODE_STATS) {
    // Tests read the figures at any time, not only after a run.
    const timer = setInterval(writeStats, 500);
    context.subscriptions.push({ dispose: () => clearInterval(timer) });
  }
  /** With `PI_VSCODE_STATS=<file>` in the environment, the state is written there after every
   * run (the e2e test reads the relay's figures from it). */
  function writeStats(): void {
    try {
      // Whole or not at all (the test reads it at any time): a temp file renamed over it.
      const file = process.env.PI_VSCODE_STATS!;
      fs.writeFileSync(`${file}.tmp`, JSON.stringify(api.state()));
      fs.renameSync(`${file}.tmp`, file);
    } catch (e) {
      output.warn(`stats: ${String(e)}`);
    }
  }
  return api;
}

export async function deactivate(): Promise<void> {
  // The server first (it ends a run and writes what it has), the review state meanwhile.
  await Promise.all([stopClient?.(), Promise.resolve(saveReviewNow?.()).catch(() => undefined)]);
}

function oneLine(s: string | undefined): string {
  return (s ?? "").replace(/\s+/g, " ").trim().slice(0, 80);
}

/** At most this many characters of a file go into the prompt as context (the rest: the agent's
 * read tool). */
export const FILE_CONTEXT_CHARS = 100_000;

/** The text of a document attached as context: the buffer as it is (unsaved changes too), cut
 * at {@link FILE_CONTEXT_CHARS} on a line end with a note of what is left out. */
export function fileContext(doc: { getText(): string; lineCount: number }): string {
  const text = doc.getText();
  if (text.length <= FILE_CONTEXT_CHARS) return text;
  let cut = text.lastIndexOf("\n", FILE_CONTEXT_CHARS);
  if (cut <= 0) cut = FILE_CONTEXT_CHARS;
  const shownLines = text.slice(0, cut).split("\n").length;
  return `${text.slice(0, cut)}\n… (${doc.lineCount - shownLines} more lines not included: read the file for them)`;
}
