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
import { relativeTime } from "./names";

export interface SessionSummary {
  sessionId: string;
  sessionFile: string;
  name?: string;
  firstPrompt?: string;
  entryCount: number;
  lastActivity: number;
  open: boolean;
}

export interface TreeEntry {
  id: string;
  parentId: string | null;
  type: string;
  timestamp?: string;
  role?: string;
  preview?: string;
  label?: string;
}

export type SessionNode =
  | { kind: "group"; group: "workspace" | "pi" | "branches" }
  | { kind: "session"; session: SessionSummary }
  | { kind: "entry"; sessionId: string; entry: TreeEntry; children: TreeEntry[]; active: boolean; leaf: boolean };

/** Entries worth a row in the tree. */
export function shown(e: TreeEntry): boolean {
  return e.role === "user" || e.type === "branch_summary" || e.type === "compaction" || !!e.label || e.role === "bashExecution";
}

/** Builds the displayed branch tree: every shown entry under its nearest shown ancestor. */
export function branchRows(entries: TreeEntry[], leafId: string | null): { roots: TreeEntry[]; children: Map<string, TreeEntry[]>; activePath: Set<string>; leafRow: string | undefined } {
  const byId = new Map(entries.map((e) => [e.id, e]));
  const activePath = new Set<string>();
  for (let id = leafId; id; id = byId.get(id)?.parentId ?? null) activePath.add(id);
  const children = new Map<string, TreeEntry[]>();
  const roots: TreeEntry[] = [];
  const shownAncestor = (e: TreeEntry): string | null => {
    for (let p = e.parentId; p; p = byId.get(p)?.parentId ?? null) {
      const pe = byId.get(p);
      if (pe && shown(pe)) return p;
    }
    return null;
  };
  let leafRow: string | undefined;
  for (const e of entries) {
    if (!shown(e)) continue;
    if (activePath.has(e.id)) leafRow = e.id;
    const a = shownAncestor(e);
    if (a === null) roots.push(e);
    else {
      const list = children.get(a) ?? [];
      list.push(e);
      children.set(a, list);
    }
  }
  return { roots, children, activePath, leafRow };
}

export class SessionsView implements vscode.TreeDataProvider<SessionNode> {
  private readonly emitter = new vscode.EventEmitter<SessionNode | undefined>();
  readonly onDidChangeTreeData = this.emitter.event;
  private sessions: SessionSummary[] = [];
  private branches: ReturnType<typeof branchRows> | undefined;
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
    return { kind: "entry", sessionId, entry, children: b.children.get(entry.id) ?? [], active: b.activePath.has(entry.id), leaf: b.leafRow === entry.id };
  }

  getTreeItem(node: SessionNode): vscode.TreeItem {
    if (node.kind === "group") {
      const title = node.group === "workspace" ? "This Workspace" : node.group === "pi" ? "Pi's Sessions" : "Branches of the Active Session";
      const item = new vscode.TreeItem(title, node.group === "pi" ? vscode.TreeItemCollapsibleState.Collapsed : vscode.TreeItemCollapsibleState.Expanded);
      item.contextValue = `group.${node.group}`;
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
    const item = new vscode.TreeItem(text, node.children.length ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.None);
    item.description = [e.label ? `🏷 ${e.label}` : "", node.leaf ? "● here" : node.active ? "active" : ""].filter(Boolean).join(" · ");
    item.tooltip = e.preview;
    item.contextValue = "entry";
    item.id = `entry:${node.sessionId}:${e.id}`;
    item.iconPath = new vscode.ThemeIcon(e.role === "user" ? (node.active ? "account" : "git-branch") : e.type === "compaction" ? "fold" : "note");
    return item;
  }
}

function oneLine(s: string | undefined): string {
  return (s ?? "").replace(/\s+/g, " ").trim().slice(0, 80);
}

