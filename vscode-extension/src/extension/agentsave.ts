/**
 * The agent's saves run no save participants (issue 30 item 2; docs/vscode.md "The agent's
 * saves").
 *
 * VS Code's extension API saves a document only through `TextDocument.save()` /
 * `workspace.save()`, and both run every save participant: `editor.formatOnSave`,
 * `editor.codeActionsOnSave`, `files.trimTrailingWhitespace`, other extensions'
 * `onWillSaveTextDocument`. The one save that skips them, `workbench.action.files.saveWithoutFormatting`,
 * takes no resource: it saves the active (or list-selected) editor and the focused code editor,
 * which may be another file with the user's unsaved typing. So an agent edit of a document with
 * no unsaved changes does not go through the buffer at all: the host writes the edited text to
 * disk (`workspace.fs.writeFile`, the bytes the document's own save would write: the file is
 * checked to hold exactly the document's text first), and VS Code reloads the clean document
 * from disk as it does for any change on disk: the document gets the agent's text as one undo
 * step, stays clean, and nothing formats it. The user's own saves later run their participants
 * as always.
 *
 * Every other edit goes through the editor as before (`next`): a document with the user's
 * unsaved changes (`saveUserChanges`, unsaved.ts), resource operations, another encoding than
 * UTF-8, a file whose disk text differs from the document. When the reload does not come (a file
 * no watcher sees) the edit is applied to the buffer and the server's `agent/saveDocument` saves
 * it as before (with its participants); when the user typed into the document in between, the
 * disk gets its text back and the edit is refused as stale, as the editor's own check would.
 */
import * as vscode from "vscode";
import type { ApplyWorkspaceEditParams, ApplyWorkspaceEditResult } from "vscode-languageclient";

/** How long the host waits for VS Code to reload a document from disk after writing it, in ms. */
export const RELOAD_WAIT_MS = 3000;

/** A text edit as LSP sends it (plain or annotated). */
export interface LspTextEdit {
  range: { start: { line: number; character: number }; end: { line: number; character: number } };
  newText: string;
}

/** `edits` (LSP ranges: lines and UTF-16 columns of `text`, none overlapping, as a
 * `TextDocumentEdit` carries them) applied to `text`. `undefined` when a range is outside the
 * text (the edit is then left to the editor, which refuses it). */
export function applyLspEdits(text: string, edits: readonly LspTextEdit[]): string | undefined {
  const starts = [0];
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) starts.push(i + 1);
  const offset = (p: { line: number; character: number }): number | undefined => {
    const ls = starts[p.line];
    if (ls === undefined) return p.line === starts.length && p.character === 0 ? text.length : undefined;
    const next = starts[p.line + 1];
    // The line's end before its line break (`\r\n` too).
    let le = next === undefined ? text.length : next - 1;
    if (next !== undefined && le > ls && text[le - 1] === "\r") le--;
    return ls + p.character <= le ? ls + p.character : undefined;
  };
  const spans: { start: number; end: number; text: string }[] = [];
  for (const e of edits) {
    const start = offset(e.range.start);
    const end = offset(e.range.end);
    if (start === undefined || end === undefined || end < start) return undefined;
    spans.push({ start, end, text: e.newText });
  }
  spans.sort((a, b) => b.start - a.start || b.end - a.end);
  let out = text;
  for (const s of spans) out = out.slice(0, s.start) + s.text + out.slice(s.end);
  return out;
}

/** What the disk route needs of an edit: one `file:` document, its version and its edits. */
interface DiskEdit {
  uri: vscode.Uri;
  version: number | null;
  edits: LspTextEdit[];
}

/** The edit's one text document edit when the edit is nothing else (no resource operations,
 * no `changes` map, one document). */
function diskEditOf(params: ApplyWorkspaceEditParams): DiskEdit | undefined {
  const dc = params.edit.documentChanges;
  if (!dc || dc.length !== 1 || params.edit.changes) return undefined;
  const c = dc[0];
  if (!("textDocument" in c)) return undefined;
  const uri = vscode.Uri.parse(c.textDocument.uri);
  if (uri.scheme !== "file") return undefined;
  const edits: LspTextEdit[] = [];
  for (const te of c.edits) {
    // A snippet edit is the editor's to expand.
    if (!("newText" in te)) return undefined;
    edits.push(te);
  }
  return { uri, version: c.textDocument.version, edits };
}

/** Waits until `doc` holds `text` (VS Code reloaded it from disk) or `ms` passed; whether it does. */
function reloaded(doc: vscode.TextDocument, text: string, ms: number): Promise<boolean> {
  if (doc.getText() === text) return Promise.resolve(true);
  return new Promise((resolve) => {
    const done = (ok: boolean) => {
      clearTimeout(timer);
      sub.dispose();
      resolve(ok);
    };
    const timer = setTimeout(() => done(doc.getText() === text), ms);
    const sub = vscode.workspace.onDidChangeTextDocument((e) => {
      if (e.document !== doc) return;
      if (doc.getText() === text) done(true);
      // The user typed (the reload never comes to a modified document).
      else if (doc.isDirty) done(false);
    });
  });
}

/** What {@link writeThroughDisk} did: `reloaded` (the disk and the clean document hold the new
 * text), `skipped` (nothing written: the document is not one the disk route can take), `noReload`
 * (VS Code did not reload it in time: the disk has its old bytes back, the document is as it
 * was), `typed` (the user typed meanwhile: the disk has its old bytes back). */
export type DiskWrite = "reloaded" | "skipped" | "noReload" | "typed";

/**
 * Gives the clean document `doc` (holding `before`) the text `after` the way an agent edit of
 * a clean document lands (module docs): the file, checked to hold exactly `before` (UTF-8, no
 * BOM), is written with `after`, and VS Code reloads the document from disk — one undo step, the
 * document clean, no save participant run. Used for the review's *Undo* of agent lines in a
 * clean document (changes.ts), which would otherwise need a save. Errors are logged (`what`
 * names the action) and give `skipped` / `noReload`; nothing is thrown.
 */
export async function writeThroughDisk(doc: vscode.TextDocument, before: string, after: string, log: vscode.LogOutputChannel, what: string): Promise<DiskWrite> {
  if (doc.uri.scheme !== "file" || doc.isDirty || doc.isClosed || doc.getText() !== before || after === before) return "skipped";
  const encoding = (doc as { encoding?: string }).encoding;
  if (encoding !== undefined && encoding !== "utf8") return "skipped";
  let disk: Uint8Array;
  try {
    disk = await vscode.workspace.fs.readFile(doc.uri);
  } catch {
    return "skipped";
  }
  if (new TextDecoder("utf-8", { fatal: false, ignoreBOM: true }).decode(disk) !== before) return "skipped";
  if (doc.isDirty || doc.getText() !== before) return "skipped";
  try {
    await vscode.workspace.fs.writeFile(doc.uri, new TextEncoder().encode(after));
  } catch (err) {
    log.warn(`${what} in ${doc.uri.fsPath}: writing the file failed (${err instanceof Error ? err.message : String(err)}); done in the editor instead`);
    return "skipped";
  }
  if (await reloaded(doc, after, RELOAD_WAIT_MS)) return "reloaded";
  const typed = doc.isDirty || doc.getText() !== before;
  try {
    await vscode.workspace.fs.writeFile(doc.uri, disk);
  } catch (err) {
    log.warn(`${what} in ${doc.uri.fsPath}: the file's text could not be written back (${err instanceof Error ? err.message : String(err)})`);
  }
  if (typed) return "typed";
  log.warn(`${what} in ${doc.uri.fsPath}: VS Code did not reload it from disk within ${RELOAD_WAIT_MS} ms; done in the editor (its save runs the save participants)`);
  return "noReload";
}

/** The `workspace/applyEdit` step that lands an agent edit of a clean document through the
 * disk (module docs). `log` gets one line per fallback. */
export class AgentSaves {
  /** Edits landed through the disk (for the host's tests and the log). */
  throughDisk = 0;

  constructor(private readonly log: vscode.LogOutputChannel) {}

  async applyEdit(params: ApplyWorkspaceEditParams, next: (p: ApplyWorkspaceEditParams) => Promise<ApplyWorkspaceEditResult>): Promise<ApplyWorkspaceEditResult> {
    const e = diskEditOf(params);
    if (!e) return next(params);
    const key = e.uri.toString();
    const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === key);
    if (!doc || doc.isDirty || doc.isClosed || (e.version !== null && e.version !== doc.version)) return next(params);
    const encoding = (doc as { encoding?: string }).encoding;
    if (encoding !== undefined && encoding !== "utf8") return next(params);
    const before = doc.getText();
    const after = applyLspEdits(before, e.edits);
    if (after === undefined || after === before) return next(params);
    let disk: Uint8Array;
    try {
      disk = await vscode.workspace.fs.readFile(e.uri);
    } catch {
      return next(params);
    }
    // Only when the file holds exactly the document's text (no BOM, no change on disk the
    // editor has not seen): the write is then the bytes the document's own save would write.
    if (new TextDecoder("utf-8", { fatal: false, ignoreBOM: true }).decode(disk) !== before) return next(params);
    if (doc.isDirty || doc.getText() !== before) return next(params);
    try {
      await vscode.workspace.fs.writeFile(e.uri, new TextEncoder().encode(after));
    } catch (err) {
      this.log.warn(`agent edit of ${e.uri.fsPath}: writing it failed (${err instanceof Error ? err.message : String(err)}); applied in the editor instead`);
      return next(params);
    }
    if (await reloaded(doc, after, RELOAD_WAIT_MS)) {
      this.throughDisk++;
      return { applied: true };
    }
    if (doc.getText() === before && !doc.isDirty) {
      // No reload came (no watcher sees the file): the edit goes through the editor, and the
      // server's agent/saveDocument saves it, with the save participants.
      this.log.warn(`agent edit of ${e.uri.fsPath}: VS Code did not reload it from disk within ${RELOAD_WAIT_MS} ms; applied in the editor (its save runs the save participants)`);
      const r = await next(params);
      if (!r.applied) await this.restore(e.uri, disk);
      return r;
    }
    // The user typed meanwhile: the disk gets its text back, and the edit is refused as stale.
    await this.restore(e.uri, disk);
    return { applied: false, failureReason: "the document changed while the edit was applied" };
  }

  private async restore(uri: vscode.Uri, bytes: Uint8Array): Promise<void> {
    try {
      await vscode.workspace.fs.writeFile(uri, bytes);
    } catch (err) {
      this.log.warn(`agent edit of ${uri.fsPath}: the file's text could not be written back (${err instanceof Error ? err.message : String(err)})`);
    }
  }
}
