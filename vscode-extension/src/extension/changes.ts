/**
 * The agent's edits in the editor: every `workspace/applyEdit` is recorded (before / after
 * text per file, the tool call from the edit's label `pi: turn N · edit path (call_id)`), each
 * file's hunks get Keep / Undo CodeLenses and line decorations ({@link FileChanges} decides),
 * the "Changes" view lists the changed files per session, and the `pi-diff:` scheme serves the
 * before / after texts of VS Code's diff editor. Nothing here moves focus or the active editor.
 */
import * as vscode from "vscode";
import { applyPatch } from "diff";
import type { ApplyWorkspaceEditParams, ApplyWorkspaceEditResult } from "vscode-languageclient";
import { writeThroughDisk } from "./agentsave";
import { FileChanges } from "./hunks";
import { UndoneChanges } from "./undone";
import type { UnsavedChanges } from "./unsaved";
import { ProposalTabs } from "./proposals";
import { cpuNow } from "./relay";

/** How long after the last keystroke the review UI (decorations, Changes view, CodeLens
 * refresh) is redrawn when typing changed the hunks, in ms (an agent edit redraws at once). */
export const REDRAW_DELAY_MS = 60;
/** How long after the last keystroke decorations are re-synced when typing only moved the
 * hunks (VS Code moves decorations with the text itself; this only corrects drift), in ms. */
export const RESYNC_DELAY_MS = 750;
/** How long after a change of the review state it is saved for a window reload, in ms. */
export const SAVE_DELAY_MS = 1000;
/** Files whose base and current text are longer than this together are not kept across a
 * reload (in characters). */
export const SAVED_FILE_CHARS = 2_000_000;
/** How long after a file under review is reported deleted it is checked to be still gone
 * before its review is dropped (a save that replaces the file reports a delete too), in ms. */
export const DELETE_CHECK_MS = 300;

/** The review state kept in the workspace state across a window reload. */
export interface SavedReview {
  version: 1;
  files: { uri: string; base: string; current: string; sessions: string[]; toolCallIds: string[] }[];
}

/** One applied agent edit of one file. */
export interface AgentEdit {
  toolCallId: string | undefined;
  sessionId: string | undefined;
  uri: string;
  before: string;
  after: string;
}

interface Tracked {
  uri: vscode.Uri;
  changes: FileChanges;
  sessions: Set<string>;
}

/** A row of the Changes view: a session, a file under review, or one hunk of it (`newText` /
 * `oldText` say which: a Keep / Undo on a row drawn before the hunks changed finds its hunk by
 * its text, or does nothing). */
export type Node =
  | { kind: "session"; sessionId: string }
  | { kind: "file"; key: string }
  | { kind: "hunk"; key: string; index: number; startLine: number; newText: string; oldText: string };

/** A file with at most this many hunks shows them expanded in the Changes view. */
export const EXPANDED_HUNKS_MAX = 10;

export const DIFF_SCHEME = "pi-diff";

/** Whether an applyEdit label is a rewind's (`Pi: rewind <file>` / `Pi: reapply <file>`,
 * docs/protocol.md `agent/session/rewind`). */
export function isRewindLabel(label: string | undefined): boolean {
  return !!label && /^pi: (rewind|reapply)\b/i.test(label);
}

/** The tool call and the session an applyEdit label names (`… (call_1) · session <id>`;
 * docs/protocol.md `workspace/applyEdit`): tool call ids are unique only within a session, so
 * the session is what files the edit (a label without one leaves it `undefined`). */
export function callOfLabel(label: string | undefined): { toolCallId?: string; sessionId?: string } {
  const m = label ? /\(([^()\s]+)\)(?: · session (\S+))?\s*$/.exec(label) : null;
  return m ? { toolCallId: m[1], sessionId: m[2] } : {};
}

/** The tool call id in an applyEdit label (`… (call_1)`, {@link callOfLabel}). */
export function toolCallIdOfLabel(label: string | undefined): string | undefined {
  return callOfLabel(label).toolCallId;
}

/** The key of one tool call among every session's (ids repeat across sessions). */
export function callKey(sessionId: string | undefined, toolCallId: string): string {
  return `${sessionId ?? ""}\u0000${toolCallId}`;
}

export class ChangeTracker implements vscode.CodeLensProvider, vscode.TreeDataProvider<Node>, vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly files = new Map<string, Tracked>();
  private readonly edits = new Map<string, AgentEdit>();
  private readonly callSessions = new Map<string, string>();
  private readonly applying = new Set<string>();
  /** Agent changes taken back with Undo, for Redo to bring back under review (undone.ts). */
  private readonly undone = new UndoneChanges();
  private readonly diffTexts = new Map<string, string>();
  /** Pending permission questions' changes by {@link callKey} (`{path, diff}`), for openDiff. */
  readonly pendingChanges = new Map<string, { path: string; diff: string }>();
  /** The diff tabs opened for those, closed when their question is over. */
  readonly proposals: ProposalTabs;
  private readonly lensEmitter = new vscode.EventEmitter<void>();
  private readonly treeEmitter = new vscode.EventEmitter<Node | undefined>();
  private readonly diffEmitter = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChangeCodeLenses = this.lensEmitter.event;
  readonly onDidChangeTreeData = this.treeEmitter.event;
  readonly onDidChange = this.diffEmitter.event;
  private readonly added = vscode.window.createTextEditorDecorationType({
    isWholeLine: true,
    backgroundColor: new vscode.ThemeColor("diffEditor.insertedLineBackground"),
    overviewRulerColor: new vscode.ThemeColor("editorOverviewRuler.addedForeground"),
    overviewRulerLane: vscode.OverviewRulerLane.Left,
  });
  private readonly removed = vscode.window.createTextEditorDecorationType({
    isWholeLine: true,
    borderWidth: "2px 0 0 0",
    borderStyle: "solid",
    borderColor: new vscode.ThemeColor("editorOverviewRuler.deletedForeground"),
    overviewRulerColor: new vscode.ThemeColor("editorOverviewRuler.deletedForeground"),
    overviewRulerLane: vscode.OverviewRulerLane.Left,
  });
  private readonly disposables: vscode.Disposable[] = [];
  /** Called after every recorded agent edit (for the webview's and tests' benefit). */
  onEdit: (edit: AgentEdit) => void = () => {};
  /** Host cost of typing in files under review (the e2e test reads it): user changes seen,
   * CPU ms in the change handler, in redraws, and in CodeLens requests. */
  readonly typing = { keystrokes: 0, changeMs: 0, redraws: 0, redrawMs: 0, lensCalls: 0, lensMs: 0 };
  private redrawTimer: ReturnType<typeof setTimeout> | undefined;
  private resyncTimer: ReturnType<typeof setTimeout> | undefined;
  private readonly dirtyKeys = new Set<string>();
  private hasChangesContext: boolean | undefined;

  /** A session's display name (names.ts), for the Changes view. */
  sessionName: (sessionId: string) => string = (id) => `session ${id.slice(0, 8)}`;
  /** The user's unsaved changes (unsaved.ts): the review's Undo in a document holding them
   * writes only the undo onto the disk's text. */
  unsaved?: UnsavedChanges;

  /** Called (debounced) when the review state changed, to keep it across a window reload. */
  onStateChange: () => void = () => {};
  private saveTimer: ReturnType<typeof setTimeout> | undefined;

  /** The review state to keep across a window reload: every file under review with its base
   * and current text (files over {@link SAVED_FILE_CHARS} are left out). */
  snapshot(): SavedReview {
    const files: SavedReview["files"] = [];
    for (const [uri, t] of this.files) {
      const base = t.changes.base;
      const current = t.changes.current;
      if (base.length + current.length > SAVED_FILE_CHARS) continue;
      files.push({ uri, base, current, sessions: [...t.sessions], toolCallIds: [...t.changes.toolCallIds] });
    }
    return { version: 1, files };
  }

  /** Takes back a {@link snapshot} after a reload: a file whose document differs from the kept
   * `current` keeps its hunks, the difference counted as the user's. */
  async restore(saved: SavedReview | undefined): Promise<void> {
    if (saved?.version !== 1 || !Array.isArray(saved.files)) return;
    for (const f of saved.files) {
      if (this.files.has(f.uri)) continue;
      const uri = vscode.Uri.parse(f.uri);
      let text: string;
      try {
        text = (await vscode.workspace.openTextDocument(uri)).getText();
      } catch {
        continue; // the file is gone
      }
      const changes = new FileChanges(f.base, f.current);
      for (const id of f.toolCallIds) changes.toolCallIds.push(id);
      changes.resync(text);
      if (changes.settled) continue;
      this.files.set(f.uri, { uri, changes, sessions: new Set(f.sessions) });
      this.dirtyKeys.add(f.uri);
    }
    this.log.info(`review state: ${this.files.size} file(s) under review after the reload`);
    this.redraw();
  }

  private saveLater(): void {
    if (this.saveTimer) clearTimeout(this.saveTimer);
    this.saveTimer = setTimeout(() => {
      this.saveTimer = undefined;
      this.onStateChange();
    }, SAVE_DELAY_MS);
  }

  /** Session names changed: redraw the Changes view's session rows. */
  refreshNames(): void {
    this.treeEmitter.fire(undefined);
  }

  constructor(private readonly log: vscode.LogOutputChannel) {
    this.proposals = new ProposalTabs(log);
    // A file under review deleted on disk (by `bash`, another program, the explorer) leaves the
    // review and the Changes view: its changes are no longer anywhere to keep or undo.
    const deletions = vscode.workspace.createFileSystemWatcher("**/*", true, true, false);
    this.disposables.push(
      deletions,
      deletions.onDidDelete((uri) => this.onFileDeleted(uri)),
      vscode.workspace.onDidChangeTextDocument((e) => this.onDocumentChange(e)),
      vscode.window.onDidChangeVisibleTextEditors(() => this.decorate()),
      this.added,
      this.removed,
    );
  }

  /** `uri` (a file or a folder) was deleted: after {@link DELETE_CHECK_MS}, the files under
   * review at or below it that are still gone on disk leave the review. */
  private onFileDeleted(uri: vscode.Uri): void {
    const key = uri.toString();
    const hit = [...this.files.keys()].filter((k) => k === key || k.startsWith(key.endsWith("/") ? key : `${key}/`));
    if (hit.length === 0) return;
    setTimeout(() => void this.dropDeleted(hit), DELETE_CHECK_MS);
  }

  private async dropDeleted(keys: string[]): Promise<void> {
    let dropped = 0;
    for (const k of keys) {
      const t = this.files.get(k);
      if (!t) continue;
      try {
        await vscode.workspace.fs.stat(t.uri);
        continue; // back already (a save that replaced the file)
      } catch {
        // gone
      }
      this.files.delete(k);
      this.undone.typed(k);
      this.dirtyKeys.add(k);
      dropped++;
      this.log.info(`${t.uri.fsPath} was deleted: its agent changes left the review`);
    }
    if (dropped) this.redraw();
  }

  /** Remembers which session a tool call belongs to (from `tool_execution_start`). */
  noteToolCall(toolCallId: string, sessionId: string): void {
    this.callSessions.set(toolCallId, sessionId);
  }

  /** The `workspace/applyEdit` middleware: records before / after of every file it touches. */
  async applyEdit(params: ApplyWorkspaceEditParams, next: (p: ApplyWorkspaceEditParams) => Promise<ApplyWorkspaceEditResult>): Promise<ApplyWorkspaceEditResult> {
    // A rewind (or its undo) is the user's own doing, not an agent edit to review: it goes
    // through as a change of the document, which settles the hunks it reverts.
    if (isRewindLabel(params.label)) return next(params);
    const call = callOfLabel(params.label);
    const toolCallId = call.toolCallId;
    // The label's session; from an older server, the session that announced the call.
    const sessionId = call.sessionId ?? (toolCallId ? this.callSessions.get(toolCallId) : undefined);
    const uris = new Map<string, boolean>(); // uri → created by this edit
    for (const c of params.edit.documentChanges ?? []) {
      if ("textDocument" in c) {
        if (!uris.has(c.textDocument.uri)) uris.set(c.textDocument.uri, false);
      } else if (c.kind === "create") uris.set(c.uri, true);
    }
    for (const u of Object.keys(params.edit.changes ?? {})) if (!uris.has(u)) uris.set(u, false);
    const before = new Map<string, { text: string; version: number | undefined }>();
    for (const [u, created] of uris) {
      const key = vscode.Uri.parse(u).toString();
      this.applying.add(key);
      if (created) {
        before.set(u, { text: "", version: undefined });
        continue;
      }
      try {
        const doc = await vscode.workspace.openTextDocument(vscode.Uri.parse(u));
        before.set(u, { text: doc.getText(), version: doc.version });
      } catch {
        before.set(u, { text: "", version: undefined });
      }
    }
    let result: ApplyWorkspaceEditResult;
    try {
      result = await next(params);
      if (result.applied) {
        for (const [u, b] of before) {
          const uri = vscode.Uri.parse(u);
          const doc = await vscode.workspace.openTextDocument(uri);
          if (b.version !== undefined && doc.version === b.version) await waitForChange(uri, 1000);
          this.record({ toolCallId, sessionId, uri: uri.toString(), before: b.text, after: doc.getText() }, uri);
        }
      }
    } finally {
      for (const u of uris.keys()) this.applying.delete(vscode.Uri.parse(u).toString());
    }
    return result;
  }

  private record(edit: AgentEdit, uri: vscode.Uri): void {
    if (edit.toolCallId) this.edits.set(callKey(edit.sessionId, edit.toolCallId), edit);
    let t = this.files.get(edit.uri);
    if (!t) {
      t = { uri, changes: FileChanges.fromAgentEdit(edit.before, edit.after, edit.toolCallId), sessions: new Set() };
      this.files.set(edit.uri, t);
    } else t.changes.agentEdit(edit.before, edit.after, edit.toolCallId);
    if (edit.sessionId) t.sessions.add(edit.sessionId);
    this.log.debug(`agent edit ${edit.toolCallId ?? "?"} of ${uri.fsPath}: ${t.changes.hunks().length} hunk(s) to review`);
    this.changed(edit.uri);
    this.onEdit(edit);
  }

  /** A change of a document (the user's typing, an Undo, another extension): O(hunks) work
   * for the tracker; the UI is redrawn later, once, and only when the hunks changed shape. */
  private onDocumentChange(e: vscode.TextDocumentChangeEvent): void {
    if (e.contentChanges.length === 0) return;
    const key = e.document.uri.toString();
    if (this.applying.has(key)) return;
    // The editor's Undo / Redo (undone.ts): an agent change taken back is remembered; one that
    // comes back is the agent's again (lenses, Changes view), not the user's typing.
    const undoRedo = e.reason === vscode.TextDocumentChangeReason.Undo || e.reason === vscode.TextDocumentChangeReason.Redo;
    if (undoRedo && this.undone.has(key)) {
      const back = this.undone.restored(key, e.document.getText());
      if (back) {
        const t = this.files.get(key);
        this.carryToDisk(e.document.uri, t ? t.changes.current : back.without, e.contentChanges);
        if (t) {
          t.changes.agentEdit(t.changes.current, back.withAgent);
          for (const id of back.toolCallIds) if (!t.changes.toolCallIds.includes(id)) t.changes.toolCallIds.push(id);
          this.changed(key);
        } else {
          const toolCallId = back.toolCallIds[0];
          const sessionId = back.sessions[0] ?? (toolCallId ? this.callSessions.get(toolCallId) : undefined);
          this.record({ toolCallId, sessionId, uri: key, before: back.without, after: back.withAgent }, e.document.uri);
        }
        return;
      }
    }
    const t = this.files.get(key);
    if (!undoRedo) this.undone.typed(key);
    if (!t) return;
    const t0 = cpuNow();
    // An Undo that takes agent lines back: remembered (O(file) only for Undo / Redo).
    const before = undoRedo && t.changes.hunks().length ? { text: t.changes.current, hunks: t.changes.hunks().length, ids: [...t.changes.toolCallIds] } : undefined;
    const reshaped = t.changes.userChanges(e.contentChanges.map((c) => ({ offset: c.rangeOffset, length: c.rangeLength, text: c.text })));
    if (before && (t.changes.settled || t.changes.hunks().length < before.hunks)) {
      this.undone.taken(key, before.text, e.document.getText(), before.ids, t.sessions);
      this.carryToDisk(e.document.uri, before.text, e.contentChanges);
    }
    if (reshaped) this.changedLater(key);
    else this.resyncLater(key);
    this.typing.keystrokes++;
    this.typing.changeMs += cpuNow() - t0;
  }

  /** The editor's Undo / Redo took agent lines back or brought them back (`changes`, against
   * `before`, the document's text before the event): the same change is carried onto the file's
   * text on disk — only where the disk holds those lines as the document did, never the user's
   * unsaved lines (unsaved.ts `undoneOnDisk`; the user's own save later is no conflict) — so the
   * agent's part of the disk agrees with the buffer and the review (issue 30 item 4): the
   * agent's next `bash` sees what the editor shows. */
  private carryToDisk(uri: vscode.Uri, before: string, changes: readonly vscode.TextDocumentContentChangeEvent[]): void {
    if (uri.scheme !== "file" || !this.unsaved) return;
    try {
      const r = this.unsaved.undoneOnDisk(
        uri,
        before,
        changes.map((c) => ({ start: c.rangeOffset, end: c.rangeOffset + c.rangeLength, text: c.text })),
      );
      this.log.debug(`undo/redo of an agent change in ${uri.fsPath}: disk ${r === "written" ? "updated" : r === "same" ? "already agreed" : "left as it is (the lines differ there)"}`);
    } catch (err) {
      this.log.warn(`undo/redo of an agent change in ${uri.fsPath}: the disk could not be updated: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  /** Redraws the review UI now (an agent edit, Keep, Undo). */
  private changed(key: string): void {
    this.dirtyKeys.add(key);
    this.redraw();
  }

  private changedLater(key: string): void {
    this.dirtyKeys.add(key);
    if (this.redrawTimer) clearTimeout(this.redrawTimer);
    this.redrawTimer = setTimeout(() => this.redraw(), REDRAW_DELAY_MS);
  }

  private resyncLater(key: string): void {
    this.dirtyKeys.add(key);
    if (this.resyncTimer) clearTimeout(this.resyncTimer);
    this.resyncTimer = setTimeout(() => {
      this.resyncTimer = undefined;
      const t0 = cpuNow();
      this.decorate(new Set(this.dirtyKeys));
      this.saveLater();
      this.typing.redrawMs += cpuNow() - t0;
    }, RESYNC_DELAY_MS);
  }

  private redraw(): void {
    const t0 = cpuNow();
    if (this.redrawTimer) clearTimeout(this.redrawTimer);
    this.redrawTimer = undefined;
    const keys = new Set(this.dirtyKeys);
    this.dirtyKeys.clear();
    for (const key of keys) {
      const t = this.files.get(key);
      if (t && t.changes.settled) this.files.delete(key);
    }
    const has = this.files.size > 0;
    if (has !== this.hasChangesContext) {
      this.hasChangesContext = has;
      void vscode.commands.executeCommand("setContext", "pi.hasAgentChanges", has);
    }
    this.lensEmitter.fire();
    this.treeEmitter.fire(undefined);
    this.decorate(keys);
    this.saveLater();
    this.typing.redraws++;
    this.typing.redrawMs += cpuNow() - t0;
  }

  /** Sets the decorations of the visible editors of `keys` (every visible editor: undefined). */
  private decorate(keys?: Set<string>): void {
    for (const editor of vscode.window.visibleTextEditors) {
      const key = editor.document.uri.toString();
      if (keys && !keys.has(key)) continue;
      const t = this.files.get(key);
      const hunks = t?.changes.hunks() ?? [];
      const added: vscode.DecorationOptions[] = [];
      const removed: vscode.DecorationOptions[] = [];
      for (const h of hunks) {
        const hover = h.oldText ? new vscode.MarkdownString().appendText("Pi replaced:\n").appendCodeblock(h.oldText, editor.document.languageId) : undefined;
        if (h.lineCount > 0) added.push({ range: new vscode.Range(h.startLine, 0, h.startLine + h.lineCount - 1, 0), hoverMessage: hover });
        else {
          const line = Math.min(h.startLine, Math.max(0, editor.document.lineCount - 1));
          removed.push({ range: new vscode.Range(line, 0, line, 0), hoverMessage: hover });
        }
      }
      editor.setDecorations(this.added, added);
      editor.setDecorations(this.removed, removed);
    }
  }

  // --- CodeLens: Keep / Undo per hunk -------------------------------------------------------

  provideCodeLenses(document: vscode.TextDocument): vscode.CodeLens[] {
    const t = this.files.get(document.uri.toString());
    if (!t) return [];
    const t0 = cpuNow();
    try {
      return this.lenses(document, t);
    } finally {
      this.typing.lensCalls++;
      this.typing.lensMs += cpuNow() - t0;
    }
  }

  private lenses(document: vscode.TextDocument, t: Tracked): vscode.CodeLens[] {
    const lenses: vscode.CodeLens[] = [];
    for (const h of t.changes.hunks()) {
      const line = Math.min(h.startLine, Math.max(0, document.lineCount - 1));
      const range = new vscode.Range(line, 0, line, 0);
      const what = h.lineCount === 0 ? "deleted lines" : `${h.lineCount} line${h.lineCount === 1 ? "" : "s"}`;
      lenses.push(
        new vscode.CodeLens(range, { title: `$(check) Keep (pi: ${what})`, command: "pi.changes.keepHunk", arguments: [document.uri, h.index] }),
        new vscode.CodeLens(range, { title: "$(discard) Undo", command: "pi.changes.undoHunk", arguments: [document.uri, h.index] }),
      );
    }
    return lenses;
  }

  /** Hunk `index` of `uri`, the hunk of a Changes view row, or the hunk at the active editor's
   * cursor. */
  private target(uri?: vscode.Uri | Node, index?: number): { t: Tracked; index: number } | undefined {
    if (uri && !(uri instanceof vscode.Uri) && uri.kind === "hunk") {
      const node = uri;
      const t = this.files.get(node.key);
      const hunks = t?.changes.hunks() ?? [];
      const same = (h: { newText: string; oldText: string }) => h.newText === node.newText && h.oldText === node.oldText;
      const h = hunks[node.index] && same(hunks[node.index]!) ? hunks[node.index] : hunks.find(same);
      return t && h ? { t, index: h.index } : undefined;
    }
    if (uri instanceof vscode.Uri && typeof index === "number") {
      const t = this.files.get(uri.toString());
      return t ? { t, index } : undefined;
    }
    const editor = vscode.window.activeTextEditor;
    if (!editor) return undefined;
    const t = this.files.get(editor.document.uri.toString());
    const h = t?.changes.hunkAtLine(editor.selection.active.line) ?? t?.changes.hunks()[0];
    return t && h ? { t, index: h.index } : undefined;
  }

  keepHunk(uri?: vscode.Uri | Node, index?: number): boolean {
    const x = this.target(uri, index);
    if (!x || !x.t.changes.keep(x.index)) return false;
    this.changed(x.t.uri.toString());
    return true;
  }

  async undoHunk(uri?: vscode.Uri | Node, index?: number): Promise<boolean> {
    const x = this.target(uri, index);
    if (!x) return false;
    const withAgent = x.t.changes.current;
    const ids = [...x.t.changes.toolCallIds];
    const r = x.t.changes.undo(x.index);
    if (!r) return false;
    return this.undoneByReview(x.t.uri, withAgent, ids, [r], [...x.t.sessions]);
  }

  /** The review's Undo, remembered so that Ctrl+Z of it brings the agent's lines back under
   * review (undone.ts); the disk agrees with the buffer afterwards (the agent's next `bash` sees
   * the lines taken back, not the agent's) and no save participant of the user runs (issue 30
   * items 2 and 4):
   * - a document with no unsaved changes gets the undone text through the disk as an agent
   *   edit does (agentsave.ts `writeThroughDisk`: the file written, the clean document
   *   reloaded, one undo step); the reload's change event is taken as this Undo, never as the
   *   user's typing. When that route cannot be taken (another encoding, the disk differs, no
   *   reload), the replacements are applied as an editor edit and saved (with participants);
   * - a document with the user's unsaved changes is never saved (they are the user's to save):
   *   the replacements are applied in the editor and the undo alone is carried onto the disk's
   *   text and written (unsaved.ts `undoneOnDisk`, the server's `saveUserChanges` merge rule). */
  private async undoneByReview(uri: vscode.Uri, withAgent: string, ids: string[], rs: { start: number; end: number; text: string }[], sessions: string[]): Promise<boolean> {
    const doc = await vscode.workspace.openTextDocument(uri);
    const wasDirty = doc.isDirty;
    const buffer = doc.getText();
    if (!wasDirty) {
      const key = uri.toString();
      const after = replaced(buffer, rs);
      // The reload's change event is this Undo: the tracker takes `rs` below instead.
      this.applying.add(key);
      let r: Awaited<ReturnType<typeof writeThroughDisk>>;
      try {
        r = await writeThroughDisk(doc, buffer, after, this.log, "undo of an agent change");
      } finally {
        this.applying.delete(key);
      }
      const t = this.files.get(key);
      if (r === "reloaded") {
        t?.changes.userChanges(rs.map((x) => ({ offset: x.start, length: x.end - x.start, text: x.text })));
        this.undone.taken(key, withAgent, doc.getText(), ids, sessions);
        this.changed(key);
        return true;
      }
      if (r === "typed") {
        // The user's typing came while the tracker looked away: all of it is theirs.
        t?.changes.resync(doc.getText());
        this.undone.typed(key);
        this.changed(key);
        return false;
      }
    }
    const ok = await this.applyReplacements(uri, rs);
    if (!ok) return false;
    this.undone.taken(uri.toString(), withAgent, doc.getText(), ids, sessions);
    if (!wasDirty && doc.isDirty) await doc.save();
    else if (wasDirty && uri.scheme === "file" && this.unsaved) {
      try {
        const r = this.unsaved.undoneOnDisk(uri, buffer, rs);
        if (r === "overlap") this.log.info(`undo of an agent change in ${uri.fsPath}: its lines are not on disk as in the editor; the disk is left as it is`);
      } catch (e) {
        this.log.warn(`undo of an agent change in ${uri.fsPath}: the disk could not be updated: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    return true;
  }

  keepFile(node?: Node | vscode.Uri): void {
    const t = this.fileOf(node);
    if (!t) return;
    t.changes.keepAll();
    this.changed(t.uri.toString());
  }

  async undoFile(node?: Node | vscode.Uri): Promise<boolean> {
    const t = this.fileOf(node);
    if (!t) return false;
    const withAgent = t.changes.current;
    const ids = [...t.changes.toolCallIds];
    return this.undoneByReview(t.uri, withAgent, ids, t.changes.undoAll(), [...t.sessions]);
  }

  private fileOf(node?: Node | vscode.Uri): Tracked | undefined {
    if (node instanceof vscode.Uri) return this.files.get(node.toString());
    if (node && node.kind === "file") return this.files.get(node.key);
    const editor = vscode.window.activeTextEditor;
    return editor ? this.files.get(editor.document.uri.toString()) : undefined;
  }

  private async applyReplacements(uri: vscode.Uri, rs: { start: number; end: number; text: string }[]): Promise<boolean> {
    const doc = await vscode.workspace.openTextDocument(uri);
    const edit = new vscode.WorkspaceEdit();
    for (const r of rs) edit.replace(uri, new vscode.Range(doc.positionAt(r.start), doc.positionAt(r.end)), r.text);
    return vscode.workspace.applyEdit(edit);
  }

  // --- Changes view ---------------------------------------------------------------------------

  getTreeItem(node: Node): vscode.TreeItem {
    if (node.kind === "session") {
      const item = new vscode.TreeItem(this.sessionName(node.sessionId), vscode.TreeItemCollapsibleState.Expanded);
      item.iconPath = new vscode.ThemeIcon("comment-discussion");
      item.tooltip = `Session ${node.sessionId}`;
      item.contextValue = "changedSession";
      return item;
    }
    if (node.kind === "hunk") return this.hunkItem(node);
    const t = this.files.get(node.key)!;
    const hunks = t.changes.hunks();
    let plus = 0;
    let minus = 0;
    for (const h of hunks) {
      plus += h.lineCount;
      minus += lineCount(h.oldText);
    }
    const item = new vscode.TreeItem(t.uri, hunks.length <= EXPANDED_HUNKS_MAX ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.Collapsed);
    item.description = `+${plus} −${minus} · ${hunks.length} hunk${hunks.length === 1 ? "" : "s"}`;
    item.contextValue = "changedFile";
    item.command = { command: "pi.changes.openDiff", title: "Open Diff", arguments: [node] };
    return item;
  }

  /** A hunk's row: where it is and its first new line; Keep / Undo inline; a click shows it in
   * the editor (the user's own click; focus stays in the view). */
  private hunkItem(node: Extract<Node, { kind: "hunk" }>): vscode.TreeItem {
    const first = (node.newText || node.oldText).split("\n")[0]!.trim();
    const lines = node.newText ? lineCount(node.newText) : 0;
    const where = lines > 1 ? `Lines ${node.startLine + 1}–${node.startLine + lines}` : `Line ${node.startLine + 1}`;
    const item = new vscode.TreeItem(`${where}: ${node.newText ? first : `deleted: ${first}`}`, vscode.TreeItemCollapsibleState.None);
    item.description = `+${lines} −${lineCount(node.oldText)}`;
    const tip = new vscode.MarkdownString();
    if (node.oldText) tip.appendText("Pi replaced:\n").appendCodeblock(node.oldText);
    if (node.newText) tip.appendText("with:\n").appendCodeblock(node.newText);
    item.tooltip = tip;
    item.contextValue = "changedHunk";
    const t = this.files.get(node.key);
    if (t) {
      const at = new vscode.Range(node.startLine, 0, node.startLine, 0);
      item.command = { command: "vscode.open", title: "Show Change", arguments: [t.uri, { selection: at, preserveFocus: true, preview: true }] };
    }
    return item;
  }

  getChildren(node?: Node): Node[] {
    if (!node) {
      const sessions = new Set<string>();
      let orphan = false;
      for (const t of this.files.values()) {
        if (t.sessions.size === 0) orphan = true;
        for (const s of t.sessions) sessions.add(s);
      }
      const roots: Node[] = [...sessions].map((sessionId) => ({ kind: "session", sessionId }));
      if (orphan) for (const [key, t] of this.files) if (t.sessions.size === 0) roots.push({ kind: "file", key });
      return roots;
    }
    if (node.kind === "session") return [...this.files].filter(([, t]) => t.sessions.has(node.sessionId)).map(([key]) => ({ kind: "file", key }));
    if (node.kind === "file") {
      const t = this.files.get(node.key);
      return (t?.changes.hunks() ?? []).map((h) => ({ kind: "hunk", key: node.key, index: h.index, startLine: h.startLine, newText: h.newText, oldText: h.oldText }));
    }
    return [];
  }

  /** Files with agent changes still under review (URI strings). */
  changedFiles(): string[] {
    return [...this.files.keys()];
  }

  // --- Diff editor ---------------------------------------------------------------------------

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.diffTexts.get(uri.toString()) ?? "";
  }

  /** A read-only side of a diff: `pi-diff:/<name>?<key>`, the same URI for the same key (so
   * opening a diff again shows its tab instead of a second one), its text replaced. */
  private diffUri(name: string, key: string, text: string): vscode.Uri {
    const uri = vscode.Uri.from({ scheme: DIFF_SCHEME, path: "/" + name, query: key });
    const k = uri.toString();
    const changed = this.diffTexts.has(k) && this.diffTexts.get(k) !== text;
    this.diffTexts.set(k, text);
    if (changed) this.diffEmitter.fire(uri);
    return uri;
  }

  /** The document of `uri` when it is open, else undefined. */
  private openDoc(uri: vscode.Uri): vscode.TextDocument | undefined {
    const k = uri.toString();
    return vscode.workspace.textDocuments.find((d) => d.uri.toString() === k);
  }

  /**
   * Opens VS Code's diff editor — as a tab of its own (not a preview that a click elsewhere
   * replaces, nor one that replaces the user's preview tab), focus staying where it is:
   * - a tool call's applied edit: before ↔ after; while the file still holds that edit the
   *   right side is the file itself (editable, with the Keep / Undo lenses), as Git's
   *   "Open Changes" shows it;
   * - a tool call waiting for permission: the file now ↔ the file with the proposed diff;
   * - else the file's changes under review: its base ↔ the file.
   */
  async openDiff(arg?: { toolCallId?: string; path?: string; sessionId?: string } | Node | vscode.Uri): Promise<boolean> {
    const rel = (u: vscode.Uri) => vscode.workspace.asRelativePath(u, false);
    const toolCallId = arg && !(arg instanceof vscode.Uri) && "toolCallId" in arg ? arg.toolCallId : undefined;
    const sessionId = arg && !(arg instanceof vscode.Uri) && "sessionId" in arg ? arg.sessionId : undefined;
    const callId = toolCallId ? callKey(sessionId, toolCallId) : undefined;
    const applied = callId ? (this.edits.get(callId) ?? (sessionId === undefined ? undefined : this.edits.get(callKey(undefined, toolCallId!)))) : undefined;
    const pending = callId ? this.pendingChanges.get(callId) : undefined;
    const name = `${sessionId ? `${sessionId}-` : ""}${toolCallId}`;
    let left: vscode.Uri;
    let right: vscode.Uri;
    let title: string;
    if (applied) {
      const uri = vscode.Uri.parse(applied.uri);
      const n = rel(uri);
      left = this.diffUri(n, `${name}-before`, applied.before);
      right = this.openDoc(uri)?.getText() === applied.after ? uri : this.diffUri(n, `${name}-after`, applied.after);
      title = `${n} (Pi's edit${right === uri ? "" : ", as it was"})`;
    } else if (pending) {
      const uri = this.resolvePath(pending.path);
      let current = "";
      try {
        current = (await vscode.workspace.openTextDocument(uri)).getText();
      } catch {
        current = "";
      }
      const proposed = applyPatch(current, pending.diff);
      const n = rel(uri);
      left = this.diffUri(n, `${name}-now`, current);
      right = this.diffUri(n, `${name}-proposed`, proposed === false ? pending.diff : proposed);
      title = `${n} (Pi proposes)`;
    } else {
      let key: string | undefined;
      if (arg instanceof vscode.Uri) key = arg.toString();
      else if (arg && "kind" in arg && arg.kind === "file") key = arg.key;
      else if (arg && "path" in arg && arg.path) key = this.resolvePath(arg.path).toString();
      else if (vscode.window.activeTextEditor) key = vscode.window.activeTextEditor.document.uri.toString();
      const t = key ? this.files.get(key) : undefined;
      if (!t) {
        if (arg && "path" in arg && arg.path) {
          await vscode.window.showTextDocument(this.resolvePath(arg.path), { preserveFocus: true, preview: true });
          return true;
        }
        return false;
      }
      const n = rel(t.uri);
      left = this.diffUri(n, `review-base-${t.uri.toString()}`, t.changes.base);
      right = t.uri;
      title = `${n} (Pi's changes under review)`;
    }
    await vscode.commands.executeCommand("vscode.diff", left, right, title, { preserveFocus: true, preview: false });
    if (pending && callId) {
      this.proposals.opened(callId, right);
      // Answered while the tab opened: stale already.
      if (!this.pendingChanges.has(callId)) await this.proposals.close(callId);
    }
    return true;
  }

  resolvePath(p: string): vscode.Uri {
    if (p.startsWith("/")) return vscode.Uri.file(p);
    const root = vscode.workspace.workspaceFolders?.[0]?.uri;
    return root ? vscode.Uri.joinPath(root, p) : vscode.Uri.file(p);
  }

  dispose(): void {
    if (this.redrawTimer) clearTimeout(this.redrawTimer);
    if (this.resyncTimer) clearTimeout(this.resyncTimer);
    if (this.saveTimer) clearTimeout(this.saveTimer);
    for (const d of this.disposables) d.dispose();
  }
}

/** `text` with `rs` (UTF-16 offsets of `text`, none overlapping) replaced. */
export function replaced(text: string, rs: readonly { start: number; end: number; text: string }[]): string {
  let out = text;
  for (const r of [...rs].sort((a, b) => b.start - a.start)) out = out.slice(0, r.start) + r.text + out.slice(r.end);
  return out;
}

/** Lines of whole-line text (`"a\nb\n"`: 2; `""`: 0). */
function lineCount(text: string): number {
  return text ? text.split("\n").length - (text.endsWith("\n") ? 1 : 0) : 0;
}

function waitForChange(uri: vscode.Uri, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const key = uri.toString();
    const timer = setTimeout(() => {
      sub.dispose();
      resolve();
    }, ms);
    const sub = vscode.workspace.onDidChangeTextDocument((e) => {
      if (e.document.uri.toString() === key) {
        clearTimeout(timer);
        sub.dispose();
        resolve();
      }
    });
  });
}
