/**
 * The commands of package.json (`pi.*`): the chat (focus, new session, abort, steer / follow-up
 * mode, compact, model, thinking level, approval policy, context from the editor), the Sessions
 * view's rows (open, branch, fork, clone, label, rename, export, rewind), the Changes view's
 * Keep / Undo, the server (trace, restart). Also the listeners that act like commands: an edit
 * question's file changing, workspace trust granted, the server settings changed.
 */
import * as os from "node:os";
import * as path from "node:path";
import * as vscode from "vscode";
import type { HostMethod, HostParams, HostResult } from "../shared/hostMethods";
import type { ExportFormat, ModelInfo, ThinkingLevel } from "../shared/wire";
import type { ClientLifecycle } from "./lifecycle";
import { relativeTime } from "./names";
import type { ChatPanel } from "./panels";
import { POLICY_ITEMS, SAVE_ITEMS, policyNotice, saveScopeItems, scopeItems, writePiSetting } from "./policy";
import { showMcpServers } from "./mcp";
import type { PanelRegistry } from "./registry";
import type { Services } from "./services";
import { branchRows, type SessionNode, shown, type TreeEntry } from "./sessions";
import type { Views } from "./views";

/** Registers every `pi.*` command (and the listeners that run them); returns the table. */
export function registerCommands(s: Services, registry: PanelRegistry, lifecycle: ClientLifecycle, views: Views): Record<string, (...args: any[]) => unknown> {
  const { context, output, trace, router, questions, flags, names, status, changes } = s;
  const host = registry.host;
  /** A request typed by the generated wire types (hostMethods.ts). */
  const call = <M extends HostMethod>(method: M, params: HostParams<M>): Promise<HostResult<M>> => host.request(method, params) as Promise<HostResult<M>>;
  const panels = registry.panels;
  const { sessions, sessionsTree } = views;
  const activeSession = () => registry.activeSession();
  const targetPanel = () => registry.targetPanel();
  const openInChatView = (sessionId: string | null, text?: string, reload = true) => registry.openInChatView(sessionId, text, reload);
  const stateChanged = (sessionId: string) => registry.stateChanged(sessionId);
  const adoptPanel = (panel: vscode.WebviewPanel, sessionId: string | null) => registry.adoptPanel(panel, sessionId);
  const ensureClient = () => lifecycle.ensure();
  const stopClient = () => lifecycle.stop();

  async function needSession(): Promise<string | undefined> {
    const id = activeSession();
    if (!id) void vscode.window.showInformationMessage("Pi: no session yet — send a prompt in the chat first.");
    return id ?? undefined;
  }

  async function guarded(what: string, fn: () => Promise<unknown>): Promise<unknown> {
    try {
      return await fn();
    } catch (e) {
      const message = String(field(e, "message") ?? e);
      output.error(`${what}: ${message}`);
      void vscode.window.showErrorMessage(`Pi: ${what} failed: ${message}`);
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
    const tree = (await call("agent/session/tree", { sessionId })) as { leafId: string | null; entries: TreeEntry[] };
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
    const { sessions: list } = await call("agent/session/list", {});
    if (list.length === 0) {
      void vscode.window.showInformationMessage("Pi: no sessions yet.");
      return undefined;
    }
    const pick = await vscode.window.showQuickPick(
      list.map((s) => ({ label: s.name || oneLine(s.firstPrompt ?? undefined) || s.sessionId.slice(0, 8), description: `${relativeTime(s.lastActivity)} · ${s.entryCount} entries${s.open ? " · open" : ""}`, detail: s.sessionFile, file: s.sessionFile as string })),
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
      return await call("agent/session/rewind", { sessionId, entryId });
    } catch (e) {
      if (field(e, "code") === -32601) {
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
      else await guarded("abort", () => call("agent/abort", { sessionId: id }));
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
          const r = await call("agent/compact", instructions ? { sessionId, instructions } : { sessionId });
          void vscode.window.showInformationMessage(`Pi: compacted (${String(field(r, "tokensBefore") ?? "?")} tokens before).`);
        }),
      );
    },
    "pi.selectModel": () =>
      guarded("model selection", async () => {
        const active = activeSession();
        const [{ models }, st] = await Promise.all([
          call("agent/model/list", {}),
          active ? call("agent/state", { sessionId: active }).catch(() => undefined) : Promise.resolve(undefined),
        ]);
        const isCurrent = (m: ModelInfo) => st?.model && m.provider === st.model.provider && m.id === st.model.id;
        const items = models.map((m) => ({
          label: `${isCurrent(m) ? "$(check) " : ""}${m.name || m.id}`,
          description: `${m.provider}/${m.id}${isCurrent(m) ? " · current" : ""}`,
          detail: [
            m.contextWindow ? `${Math.round(m.contextWindow / 1000)}k context` : "",
            // pi-ai's ModelCost (not generated yet): US dollars per million tokens.
            field(m.cost, "input") || field(m.cost, "output") ? `$${String(field(m.cost, "input"))} / $${String(field(m.cost, "output"))} per M tokens in / out` : "",
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
          await call("agent/model/set", { sessionId, model: id });
          status.setModel(sessionId, pick.model.name || id, pick.model.contextWindow);
          stateChanged(sessionId);
        } else {
          const level = vscode.workspace.getConfiguration("pi").get<ThinkingLevel | "default">("thinkingLevel", "default");
          const st = await call("agent/session/new", { model: id, ...(level !== "default" ? { thinkingLevel: level } : {}) });
          await openInChatView(st.sessionId);
        }
      }),
    "pi.selectThinkingLevel": () =>
      guarded("thinking level", async () => {
        const sessionId = await needSession();
        if (!sessionId) return;
        const st = await call("agent/state", { sessionId });
        const levels: ThinkingLevel[] = st?.model?.thinkingLevels?.length ? st.model.thinkingLevels : ["off", "minimal", "low", "medium", "high", "xhigh"];
        if (levels.length <= 1) {
          void vscode.window.showInformationMessage(`Pi: ${st?.model?.name || st?.model?.id || "this model"} does not think (its only thinking level is "${levels[0] ?? "off"}"); choose a reasoning model to set one.`);
          return;
        }
        const level = await vscode.window.showQuickPick(
          levels.map((l) => ({ label: `${l === st?.thinkingLevel ? "$(check) " : ""}${l}`, description: l === st?.thinkingLevel ? "current" : undefined, level: l })),
          { title: `Pi: thinking level of ${st?.model?.name || st?.model?.id || "the model"}` },
        );
        if (!level) return;
        const r = await call("agent/thinking/set", { sessionId, level: level.level });
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
          const r = await call("agent/permissions/set", { sessionId, approvalPolicy: value ?? null });
          stateChanged(sessionId);
          void vscode.window.showInformationMessage(policyNotice(field(r, "approvalPolicy")));
          return;
        }
        const file = where.scope === "workspace" ? projectFile : userFile;
        writePiSetting(file, "approvalPolicy", value);
        void vscode.window.showInformationMessage(
          `Pi: approvalPolicy ${value ? `"${value}"` : "removed"} in ${file}; new sessions use it${editorSetting && editorSetting !== "default" ? ` unless the editor's pi.approvalPolicy ("${editorSetting}") is set` : ""}, a session's own choice still wins.`,
        );
      }),
    "pi.setSaveUserChanges": () =>
      guarded("saveUserChanges", async () => {
        const pick = await vscode.window.showQuickPick(
          SAVE_ITEMS.map((p) => ({ ...p })),
          { title: "Pi: your unsaved changes when an agent edits the file" },
        );
        if (!pick) return;
        // Then which Pi settings file (the editor's own pi.saveUserChanges is in Settings).
        const root = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
        const projectFile = root ? path.join(root, ".pi", "settings.json") : "";
        const userFile = path.join(process.env.PI_CODING_AGENT_DIR || path.join(os.homedir(), ".pi", "agent"), "settings.json");
        const editorSetting = vscode.workspace.getConfiguration("pi").get<string>("saveUserChanges");
        const where = await vscode.window.showQuickPick(saveScopeItems(editorSetting, projectFile, userFile), { title: `Pi: saveUserChanges "${pick.label}" for…` });
        if (!where) return;
        const value = pick.label === "default" ? undefined : pick.label;
        const file = where.scope === "workspace" ? projectFile : userFile;
        writePiSetting(file, "saveUserChanges", value);
        void vscode.window.showInformationMessage(
          `Pi: saveUserChanges ${value ? `"${value}"` : "removed"} in ${file}; the next agent edit follows it${editorSetting && editorSetting !== "default" ? ` unless the editor's pi.saveUserChanges ("${editorSetting}") is set` : ""}, a file answered in this session keeps its answer.`,
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
          const { sessions: list } = await call("agent/session/list", {});
          const pick = await vscode.window.showQuickPick(
            [{ label: "$(add) New session", id: null as string | null }, ...list.map((s) => ({ label: s.name || s.firstPrompt || s.sessionId, description: new Date(s.lastActivity).toLocaleString(), id: s.sessionId as string | null }))],
            { title: "Pi: open a session in a new panel" },
          );
          if (!pick) return;
          sessionId = pick.id;
        } else if (node.kind === "session") {
          const st = await call("agent/session/open", { path: node.session.sessionFile });
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
        const st = await call("agent/session/open", { path: file });
        // Another project's session, opened by its path: say whose it is.
        if (typeof st?.otherCwd === "string") void vscode.window.showWarningMessage(`Pi: this session is another project's (${st.otherCwd || "no folder named"}).`);
        await openInChatView(st.sessionId);
        sessions.refresh();
      }),
    "pi.session.branchHere": (node?: SessionNode) =>
      guarded("branching", async () => {
        const e = await entryOf(node, "branch here (the next prompt continues from this message)");
        if (!e) return;
        const r = await call("agent/session/branch", { sessionId: e.sessionId, entryId: e.entry.id });
        await openInChatView(e.sessionId, stringField(r, "editorText"));
        sessions.refresh();
      }),
    "pi.session.branchWithSummary": (node?: SessionNode) =>
      guarded("branching with a summary", async () => {
        const e = await entryOf(node, "branch here with a summary of the branch left");
        if (!e) return;
        const customInstructions = await vscode.window.showInputBox({ prompt: "Instructions for the branch summary (optional)" });
        if (customInstructions === undefined) return;
        const r = await vscode.window.withProgress({ location: vscode.ProgressLocation.Window, title: "Pi: summarising the branch" }, () =>
          call("agent/session/branch", { sessionId: e.sessionId, entryId: e.entry.id, summarize: true, ...(customInstructions ? { customInstructions } : {}) }),
        );
        await openInChatView(e.sessionId, stringField(r, "editorText"));
        sessions.refresh();
      }),
    "pi.session.fork": (node?: SessionNode) =>
      guarded("forking", async () => {
        const e = await entryOf(node, "fork a new session from this message");
        if (!e) return;
        const r = await call("agent/session/fork", { sessionId: e.sessionId, entryId: e.entry.id });
        await openInChatView(r.session.sessionId, r.text ?? undefined);
        sessions.refresh();
      }),
    "pi.session.clone": (node?: SessionNode) =>
      guarded("cloning", async () => {
        const sessionId = sessionOf(node);
        if (!sessionId) return;
        const r = await call("agent/session/clone", { sessionId });
        await openInChatView(r.session.sessionId);
        sessions.refresh();
      }),
    "pi.session.label": (node?: SessionNode) =>
      guarded("labelling", async () => {
        const e = await entryOf(node, "label an entry");
        if (!e) return;
        const label = await vscode.window.showInputBox({ prompt: "Label (empty clears it)", value: e.entry.label ?? "" });
        if (label === undefined) return;
        await call("agent/session/label", { sessionId: e.sessionId, entryId: e.entry.id, label });
        sessions.refresh();
      }),
    "pi.session.rename": (node?: SessionNode) =>
      guarded("renaming", async () => {
        const sessionId = sessionOf(node);
        if (!sessionId) return;
        const name = await vscode.window.showInputBox({ prompt: "Session name", value: node?.kind === "session" ? (node.session.name ?? "") : names.get(sessionId) });
        if (!name) return;
        await call("agent/session/name", { sessionId, name });
        stateChanged(sessionId);
        sessions.refresh();
      }),
    "pi.session.export": (node?: SessionNode) =>
      guarded("exporting", async () => {
        const sessionId = sessionOf(node);
        if (!sessionId) return;
        const picked = await vscode.window.showQuickPick(["markdown", "html"], { title: "Pi: export format" });
        const format: ExportFormat | undefined = picked === "html" || picked === "markdown" ? picked : undefined;
        if (!format) return;
        const root = vscode.workspace.workspaceFolders?.[0]?.uri;
        const target = await vscode.window.showSaveDialog({
          defaultUri: root ? vscode.Uri.joinPath(root, `pi-session-${sessionId.slice(0, 8)}.${format === "html" ? "html" : "md"}`) : undefined,
          filters: format === "html" ? { HTML: ["html"] } : { Markdown: ["md"] },
        });
        if (!target) return;
        const r = await call("agent/session/export", { sessionId, format, outputPath: target.fsPath });
        const open = await vscode.window.showInformationMessage(`Pi: exported to ${r?.path ?? target.fsPath}`, "Open");
        if (open) await vscode.window.showTextDocument(target, { preview: true });
      }),
    "pi.session.rewind": (node?: SessionNode) =>
      guarded("rewinding", async () => {
        const e = await entryOf(node, "rewind to before this message (reverts the agent's later file changes)");
        if (!e) return;
        node = e;
        // pi-core's rewind report (not generated yet): previousLeafId and the files it touched.
        const r = await rewind(e.sessionId, e.entry.id);
        if (!r) return;
        const previous = field(r, "previousLeafId");
        if (typeof previous === "string") lastRewind.set(e.sessionId, previous);
        else lastRewind.delete(e.sessionId);
        const files = field(r, "files");
        const summary = (Array.isArray(files) ? files : []).map((f: unknown) => `${String(field(f, "path"))} ${String(field(f, "status"))}${field(f, "reason") ? ` (${String(field(f, "reason"))})` : ""}`).join(", ") || "no file changes";
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
        const r = await rewind(sessionId, back);
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
  return commands;
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

/** A field of a result whose Rust type is not generated yet (wire.ts: `unknown`). */
function field(v: unknown, key: string): unknown {
  return v !== null && typeof v === "object" && key in v ? (v as Record<string, unknown>)[key] : undefined;
}

/** A string field of such a result, else `undefined`. */
function stringField(v: unknown, key: string): string | undefined {
  const f = field(v, key);
  return typeof f === "string" ? f : undefined;
}
