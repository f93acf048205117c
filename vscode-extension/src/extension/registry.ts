/**
 * The panel registry: every open chat panel (the `pi.chat` view and editor-area panels), which one
 * is active, the chat view's badge, and the {@link PanelHost} the panels talk to (requests relayed
 * to the server with the status bar and the session names following them). Registers the chat
 * view's provider and the editor panels' serializer; opens a session in a panel on the user's
 * own action only (no server event moves focus).
 */
import * as vscode from "vscode";
import type { HostToWebview } from "../shared/messages";
import { flagText, viewBadge } from "./attention";
import { ChatPanel, type PanelHost } from "./panels";
import type { Services } from "./services";

/** Workspace-state key of the session the chat view shows. */
const CHAT_SESSION_KEY = "pi.chat.sessionId";

/** What the registry needs from the modules wired after it. */
export interface RegistryDeps {
  /** The running language client (lifecycle.ts). */
  ensureClient(): Promise<{ sendRequest(method: string, params: unknown): Promise<unknown> }>;
  /** The Sessions view is due a refresh (views.ts; debounced there). */
  treeChanged(): void;
}

/** The chat panels of the window. */
export class PanelRegistry {
  readonly panels = new Set<ChatPanel>();
  activePanel: ChatPanel | undefined;
  chatView: ChatPanel | undefined;
  /** The chat view's VS Code view (for its badge), once resolved. */
  chatWebviewView: vscode.WebviewView | undefined;
  /** Panels the host has attached to a session once (see `attach`). */
  private readonly attachedTo = new WeakSet<ChatPanel>();
  /** Editor-area panels (their titles follow the session's name). */
  private readonly editorPanels = new Map<ChatPanel, vscode.WebviewPanel>();
  readonly host: PanelHost;

  constructor(
    private readonly s: Services,
    private readonly deps: RegistryDeps,
  ) {
    const { flags, questions, names, status, changes } = s;
    flags.onChange = () => {
      const f = flagText(flags.list(), (id) => names.get(id));
      status.setFlag(f.text, f.tooltip);
      this.updateBadge();
    };
    questions.onChange = (id, n) => {
      status.questions(id, n);
      flags.questions(id, n);
      this.updateBadge();
    };
    names.onChange = (id) => {
      for (const [p, panel] of this.editorPanels) if (p.sessionId === id) panel.title = `Pi · ${names.get(id)}`;
      changes.refreshNames();
      flags.onChange();
    };
    this.host = this.makeHost();
  }

  /** The session commands act on: the active panel's, else the chat view's. */
  activeSession(): string | null {
    return this.activePanel?.sessionId ?? this.chatView?.sessionId ?? null;
  }

  /** Whether a visible panel shows `sessionId` (the user sees it). */
  seenNow(sessionId: string): boolean {
    return this.s.router.panelsOf(sessionId).some((x) => (x as ChatPanel).visible);
  }

  /** The chat view's badge: what needs the user in the session it shows (attention.ts). */
  updateBadge(): void {
    const view = this.chatWebviewView;
    if (!view) return;
    const { names, questions, flags } = this.s;
    const id = this.chatView?.sessionId;
    const b = id ? viewBadge(names.get(id), questions.openKinds(id), flags.list().find((f) => f.sessionId === id)) : undefined;
    const now = view.badge;
    if (b?.value !== now?.value || b?.tooltip !== now?.tooltip) view.badge = b;
  }

  /** A panel on `sessionId` was hidden: open questions nobody sees now are notified, and flagged. */
  private hidden(sessionId: string | null): void {
    const asked = this.s.questions.visibilityChanged(sessionId);
    if (asked && sessionId) this.s.flags.attention({ sessionId, ...asked }, false, Date.now());
  }

  private makeHost(): PanelHost {
    const { context, output, status, names, router, flags, questions, changes } = this.s;
    const host: PanelHost = {
      extensionUri: context.extensionUri,
      log: output,
      workspaceName: () => vscode.workspace.workspaceFolders?.[0]?.name ?? vscode.workspace.name ?? "",
      request: async (method, params: any) => {
        const c = await this.deps.ensureClient();
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
        const before = this.attachedTo.has(panel) ? panel.sessionId : undefined;
        this.attachedTo.add(panel);
        router.attach(panel, sessionId);
        if (panel === this.activePanel || (!this.activePanel && panel === this.chatView)) status.setActive(sessionId);
        if (panel.visible) flags.seen(sessionId);
        if (panel === this.chatView) this.updateBadge();
        if (before !== sessionId) {
          this.deps.treeChanged();
          // The status bar's model · ctx% · $cost · state (after a reload no agent/usage comes
          // until the next response).
          if (sessionId) void host.request("agent/state", { sessionId }).catch(() => undefined);
          if (sessionId) void host.request("agent/session/stats", { sessionId }).catch(() => undefined);
        }
      },
      answerQuestion: (panel, id, result) => questions.answer(id, result, panel),
      openQuestions: (sessionId) => questions.openFor(sessionId),
      openDiff: (toolCallId, p, sessionId) => changes.openDiff({ toolCallId, path: p, sessionId: sessionId ?? undefined }),
      activated: (panel) => {
        if (panel.visible) flags.seen(panel.sessionId);
        this.activePanel = panel;
        status.setActive(panel.sessionId);
      },
      newSessionParams: () => {
        // pi.thinkingLevel applies to new sessions (clamped by the server to the model).
        const level = vscode.workspace.getConfiguration("pi").get<string>("thinkingLevel", "default");
        return level && level !== "default" ? { thinkingLevel: level } : undefined;
      },
      disposed: (panel) => {
        router.remove(panel);
        this.panels.delete(panel);
        if (this.activePanel === panel) this.activePanel = this.chatView;
        if (this.chatView === panel) this.chatView = undefined;
      },
    };
    return host;
  }

  private addPanel(p: ChatPanel): ChatPanel {
    this.panels.add(p);
    this.s.router.add(p);
    return p;
  }

  /** Registers the chat view's provider and the editor panels' serializer. */
  register(): void {
    const { context, flags } = this.s;
    context.subscriptions.push(
      vscode.window.registerWebviewViewProvider(
        "pi.chat",
        {
          resolveWebviewView: (view) => {
            const p = this.addPanel(
              new ChatPanel("view", view.webview, this.host, () => view.visible, context.workspaceState.get<string | null>(CHAT_SESSION_KEY, null), (id) => void context.workspaceState.update(CHAT_SESSION_KEY, id)),
            );
            this.chatView = p;
            this.chatWebviewView = view;
            this.activePanel ??= p;
            this.updateBadge();
            view.onDidChangeVisibility(() => {
              p.visibilityChanged();
              if (view.visible) flags.seen(p.sessionId);
              else this.hidden(p.sessionId);
              if (view.visible) this.host.activated(p);
            });
            view.onDidDispose(() => {
              if (this.chatWebviewView === view) this.chatWebviewView = undefined;
              p.dispose();
            });
            void this.deps.ensureClient().catch(() => undefined);
          },
        },
        { webviewOptions: { retainContextWhenHidden: true } },
      ),
      vscode.window.registerWebviewPanelSerializer("pi.chatPanel", {
        deserializeWebviewPanel: async (panel, state: any) => {
          this.adoptPanel(panel, typeof state?.sessionId === "string" ? state.sessionId : null);
        },
      }),
    );
  }

  /** Makes an editor-area webview panel a chat panel on `sessionId` (null: a new session). */
  adoptPanel(panel: vscode.WebviewPanel, sessionId: string | null): ChatPanel {
    const { names, flags, context } = this.s;
    const title = (id: string | null) => (id ? `Pi · ${names.get(id)}` : "Pi · new session");
    const p = this.addPanel(new ChatPanel("panel", panel.webview, this.host, () => panel.visible, sessionId, (id) => (panel.title = title(id))));
    panel.title = title(sessionId);
    this.editorPanels.set(p, panel);
    panel.iconPath = vscode.Uri.joinPath(context.extensionUri, "resources", "pi.svg");
    panel.onDidChangeViewState(() => {
      p.visibilityChanged();
      if (panel.visible) flags.seen(p.sessionId);
      else this.hidden(p.sessionId);
      if (panel.active) this.host.activated(p);
    });
    panel.onDidDispose(() => {
      this.editorPanels.delete(p);
      p.dispose();
      this.hidden(p.sessionId);
    });
    this.host.activated(p);
    void this.deps.ensureClient().catch(() => undefined);
    return p;
  }

  /** The panel commands go to: the active one, else the chat view (revealed, not focused). */
  async targetPanel(): Promise<ChatPanel | undefined> {
    if (this.activePanel?.ready) return this.activePanel;
    if (this.chatView?.ready) return this.chatView;
    await vscode.commands.executeCommand("workbench.view.extension.pi");
    for (let i = 0; i < 100 && !this.chatView?.ready; i++) await new Promise((r) => setTimeout(r, 50));
    return this.chatView;
  }

  /**
   * Shows `sessionId` in the chat view (or in the active editor panel when that one shows it),
   * revealing the view when it is hidden — only ever on the user's own action. `reload`: the
   * panel reloads the session even when it shows it already (its branch moved: branch, rewind).
   * `text` goes into the composer.
   */
  async openInChatView(sessionId: string | null, text?: string, reload = true): Promise<void> {
    let p = this.activePanel?.kind === "panel" && this.activePanel.sessionId === sessionId ? this.activePanel : this.chatView;
    if (!p?.ready || (p === this.chatView && !p.visible)) {
      await vscode.commands.executeCommand("workbench.view.extension.pi");
      for (let i = 0; i < 100 && !this.chatView?.ready; i++) await new Promise((r) => setTimeout(r, 50));
      p = p?.ready && p.kind === "panel" ? p : this.chatView;
    }
    if (!p) return;
    if (p.sessionId !== sessionId) p.show(sessionId);
    else if (reload) p.post({ type: "init", sessionId, workspaceName: this.host.workspaceName(), capabilities: { followUpKey: "alt+enter", escapeAborts: true, host: "vscode" } });
    if (text) p.post({ type: "command", command: "insertText", text });
    this.host.activated(p);
  }

  /** Tells the panels on `sessionId` that its state changed outside them. */
  stateChanged(sessionId: string): void {
    for (const p of this.s.router.panelsOf(sessionId)) (p as ChatPanel).post({ type: "stateChanged", sessionId } satisfies HostToWebview);
  }
}
