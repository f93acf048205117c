/**
 * The "<file> (Pi proposes)" diff tabs the extension opened for permission questions
 * (ChangeTracker.openDiff): once the question is answered or withdrawn the proposal is stale,
 * so its tab closes — only a tab whose right side is that proposal's own `pi-diff:` document,
 * never the user's editors, and focus stays where it is.
 */
import * as vscode from "vscode";

export class ProposalTabs {
  /** The proposal's document (`pi-diff:…?<toolCallId>-proposed`) by tool call id. */
  private readonly shown = new Map<string, string>();

  constructor(private readonly log: vscode.LogOutputChannel) {}

  /** The diff tab for `toolCallId`'s question was opened, `modified` its right side. */
  opened(toolCallId: string, modified: vscode.Uri): void {
    this.shown.set(toolCallId, modified.toString());
  }

  /** `toolCallId`'s question is over: closes the tabs showing its proposal (none when the user
   * closed them already). Resolves with how many were closed. */
  async close(toolCallId: string): Promise<number> {
    const key = this.shown.get(toolCallId);
    if (key === undefined) return 0;
    this.shown.delete(toolCallId);
    const tabs = vscode.window.tabGroups.all.flatMap((g) => g.tabs).filter((t) => t.input instanceof vscode.TabInputTextDiff && t.input.modified.toString() === key);
    if (tabs.length === 0) return 0;
    try {
      await vscode.window.tabGroups.close(tabs, true);
    } catch (e) {
      // Closed by the user meanwhile.
      this.log.warn(`closing the proposed diff of ${toolCallId}: ${String(e)}`);
      return 0;
    }
    return tabs.length;
  }
}
