/**
 * The "Sessions" view: this workspace's sessions and Pi's own (`agent/session/list`; a file
 * outside `<workspace>/.pi/sessions/` is Pi's), and the active session's branches
 * (`agent/session/tree`): user messages, summaries, compactions and labelled entries, each
 * under the nearest such ancestor, the active path marked. Actions are commands (open, branch
 * here, branch with summary, fork, clone, label, rename, export) in the context menu and on
 * keys while the view has focus.
 */
import * as path from "node:path";
import * as vscode from "vscode";
import { type BranchRows, branchRows, type TreeEntry } from "./branches";
import { relativeTime } from "./names";

export { branchRows, shown, type TreeEntry } from "./branches";

export interface SessionSummary {
  sessionId: string;
  sessionFile: string;
  name?: string;
  firstPrompt?: string;
  entryCount: number;
  lastActivity: number;
  open: boolean;
}

export type SessionNode =
  | { kind: "group"; group: "workspace" | "pi" | "branches" }
  | { kind: "session"; session: SessionSummary }
  | { kind: "entry"; sessionId: string; entry: TreeEntry; children: TreeEntry[]; active: boolean; leaf: boolean; expanded?: boolean };

export class SessionsView implements vscode.TreeDataProvider<SessionNode> {
  private readonly emitter = new vscode.EventEmitter<SessionNode | undefined>();
  readonly onDidChangeTreeData = this.emitter.event;
  private sessions: SessionSummary[] = [];
  private branches: BranchRows | undefined;
  private branchesOf: string | null = null;

  constructor(
    private readonly request: (method: string, params: unknown) => Promise<any>,
    private readonly activeSession: () => string | null,
    private readonly log: vscode.LogOutputChannel,
  ) {}

  refresh(): void {
    this.sessions = [];
    this.branches = undefined;
    this.emitter.fire(undefined);
  }

  async getChildren(node?: SessionNode): Promise<SessionNode[]> {
    try {
      if (!node) {
        const active = this.activeSession();
        const groups: SessionNode[] = [
          { kind: "group", group: "workspace" },
          { kind: "group", group: "pi" },
        ];
        if (active) groups.push({ kind: "group", group: "branches" });
        return groups;
      }
      if (node.kind === "group" && node.group !== "branches") {
        if (this.sessions.length === 0) this.sessions = ((await this.request("agent/session/list", {})) as any).sessions ?? [];
        const root = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath ?? "";
        const local = path.join(root, ".pi", "sessions") + path.sep;
        return this.sessions.filter((s) => s.sessionFile.startsWith(local) === (node.group === "workspace")).map((session) => ({ kind: "session", session }));
      }
      if (node.kind === "group") {
        const sessionId = this.activeSession();
        if (!sessionId) return [];
        if (!this.branches || this.branchesOf !== sessionId) {
          const tree = (await this.request("agent/session/tree", { sessionId })) as { leafId: string | null; entries: TreeEntry[] };
          this.branches = branchRows(tree.entries, tree.leafId);
          this.branchesOf = sessionId;
        }
        return this.branches.roots.map((e) => this.entryNode(sessionId, e));
      }
      if (node.kind === "entry") return node.children.map((e) => this.entryNode(node.sessionId, e));
      return [];
    } catch (e) {
      this.log.warn(`sessions view: ${String(e)}`);
      return [];
    }
  }

  private entryNode(sessionId: string, entry: TreeEntry): SessionNode {
    const b = this.branches!;
    return { kind: "entry", sessionId, entry, children: b.children.get(entry.id) ?? [], active: b.activePath.has(entry.id), leaf: b.leafRow === entry.id, expanded: b.expanded.has(entry.id) };
  }

  getTreeItem(node: SessionNode): vscode.TreeItem {
    if (node.kind === "group") {
      const title = node.group === "workspace" ? "This Workspace" : node.group === "pi" ? "Pi's Sessions" : "Branches of the Active Session";
      const item = new vscode.TreeItem(title, node.group === "pi" ? vscode.TreeItemCollapsibleState.Collapsed : vscode.TreeItemCollapsibleState.Expanded);
      item.contextValue = `group.${node.group}`;
      item.id = `group:${node.group}`; // a stable id: VS Code keeps the user's collapsing across refreshes
      return item;
    }
    if (node.kind === "session") {
      const s = node.session;
      const item = new vscode.TreeItem(s.name || oneLine(s.firstPrompt) || s.sessionId.slice(0, 8), vscode.TreeItemCollapsibleState.None);
      item.description = `${relativeTime(s.lastActivity)} · ${s.entryCount} entries${s.open ? " · open" : ""}`;
      item.tooltip = `${s.name ? `${s.name}\n` : ""}${s.firstPrompt ?? ""}\n${new Date(s.lastActivity).toLocaleString()} · ${s.sessionFile}`;
      item.contextValue = s.open ? "session.open" : "session";
      item.id = `session:${s.sessionId}`;
      item.iconPath = new vscode.ThemeIcon(node.session.sessionId === this.activeSession() ? "comment-discussion" : "comment");
      item.command = { command: "pi.session.open", title: "Open Session", arguments: [node] };
      return item;
    }
    const e = node.entry;
    const text = e.type === "branch_summary" ? "Branch summary" : e.type === "compaction" ? "Compaction" : oneLine(e.preview) || e.type;
    const state = node.children.length === 0 ? vscode.TreeItemCollapsibleState.None : node.expanded ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.Collapsed;
    const item = new vscode.TreeItem(text, state);
    item.description = [e.label ? `🏷 ${e.label}` : "", node.leaf ? "● here" : ""].filter(Boolean).join(" · ");
    item.tooltip = `${e.preview ?? ""}${e.timestamp ? `\n${new Date(e.timestamp).toLocaleString()}` : ""}${node.active ? "" : "\n(another branch)"}`;
    item.contextValue = "entry";
    // The id carries whether the row opens by default: when that changes (the active branch
    // moved into or out of it) VS Code takes the new state instead of the one it remembers.
    item.id = `entry:${node.sessionId}:${e.id}:${state === vscode.TreeItemCollapsibleState.Expanded ? "open" : state === vscode.TreeItemCollapsibleState.Collapsed ? "closed" : "leaf"}`;
    item.iconPath = new vscode.ThemeIcon(e.role === "user" ? (node.active ? "account" : "git-branch") : e.type === "compaction" ? "fold" : "note");
    return item;
  }
}

function oneLine(s: string | undefined): string {
  return (s ?? "").replace(/\s+/g, " ").trim().slice(0, 80);
}

