/**
 * The tree views and editor contributions: the Sessions view (sessions.ts), the Changes view
 * with its badge, the agent-change CodeLenses and the diff documents (changes.ts).
 */
import * as vscode from "vscode";
import { DIFF_SCHEME } from "./changes";
import type { PanelRegistry } from "./registry";
import type { Services } from "./services";
import { SessionsView, type SessionNode } from "./sessions";

/** The Sessions and Changes views of the window. */
export class Views {
  readonly sessions: SessionsView;
  readonly sessionsTree: vscode.TreeView<SessionNode>;
  private treeTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(s: Services, registry: PanelRegistry) {
    const { changes, status, output, trace, context } = s;
    this.sessions = new SessionsView((m, p) => registry.host.request(m, p), () => registry.activeSession(), output);
    this.sessionsTree = vscode.window.createTreeView("pi.sessions", { treeDataProvider: this.sessions, showCollapseAll: true });
    const changesTree = vscode.window.createTreeView("pi.changes", { treeDataProvider: changes });
    context.subscriptions.push(
      this.sessionsTree,
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
  }

  /** Refreshes the Sessions view within 300 ms (one refresh for a burst of changes). */
  scheduleRefresh(): void {
    if (this.treeTimer) return;
    this.treeTimer = setTimeout(() => {
      this.treeTimer = undefined;
      this.sessions.refresh();
    }, 300);
  }
}
