/**
 * Editor context offered with each prompt (issue 30 item 13):
 * - `pi.context.activeEditor` (`off` by default; `selection`: the selection when there is one;
 *   `file`: the active file's path, with its selection): the panels show it as a chip marked
 *   "auto", kept up to date as the active editor and its selection change, removable for the
 *   next prompt (`editorContext` messages);
 * - `@file` in the composer attaches the file's content (the open buffer's text when the file is
 *   open, so unsaved changes are what the model reads), not just its path (`attachFile`).
 */
import * as path from "node:path";
import * as vscode from "vscode";
import type { ContextItem } from "../shared/messages";

/** Characters of a file's content attached at most (the rest: "read the file"). */
export const ATTACH_CHARS = 40_000;

/** The setting's value. */
export function contextMode(): "off" | "selection" | "file" {
  const v = vscode.workspace.getConfiguration("pi").get<string>("context.activeEditor", "off");
  return v === "selection" || v === "file" ? v : "off";
}

/** The item offered for `editor` under `mode` (null: nothing). */
export function activeEditorItem(editor: vscode.TextEditor | undefined, mode: "off" | "selection" | "file"): ContextItem | null {
  if (!editor || mode === "off" || editor.document.uri.scheme !== "file") return null;
  const rel = vscode.workspace.asRelativePath(editor.document.uri, false);
  const sel = editor.selection;
  if (!sel.isEmpty) {
    const startLine = sel.start.line + 1;
    const endLine = sel.end.line + 1 - (sel.end.character === 0 && sel.end.line > sel.start.line ? 1 : 0);
    return { kind: "selection", label: `${path.basename(rel)}:${startLine}-${endLine}`, text: editor.document.getText(sel), path: rel, range: { startLine, endLine }, auto: true };
  }
  if (mode !== "file") return null;
  return { kind: "file", label: path.basename(rel), text: "", path: rel, auto: true };
}

/** `path#L12-L20` (an `@symbol`'s lines) → the path and the 1-based line range. */
export function splitRef(ref: string): { path: string; range?: { startLine: number; endLine: number } } {
  const m = /^(.*)#L(\d+)(?:-L?(\d+))?$/.exec(ref);
  if (!m) return { path: ref };
  const startLine = Number(m[2]);
  return { path: m[1]!, range: { startLine, endLine: Math.max(startLine, Number(m[3] ?? m[2])) } };
}

/** Lines `startLine..endLine` (1-based, inclusive) of `text`. */
export function sliceLines(text: string, startLine: number, endLine: number): string {
  return text.split("\n").slice(startLine - 1, endLine).join("\n");
}

/** Workspace symbols matching `query` for `@` (VS Code's symbol providers), as `@` items whose
 * path is `file#Lstart-Lend` (attached as those lines). */
export async function findSymbols(query: string): Promise<{ path: string; label: string }[]> {
  if (query.length < 2) return [];
  const found = (await vscode.commands.executeCommand<vscode.SymbolInformation[]>("vscode.executeWorkspaceSymbolProvider", query)) ?? [];
  return found
    .filter((s) => s.location?.uri?.scheme === "file")
    .slice(0, 10)
    .map((s) => {
      const rel = vscode.workspace.asRelativePath(s.location.uri, false);
      const a = s.location.range.start.line + 1;
      const b = s.location.range.end.line + 1;
      return { path: `${rel}#L${a}-L${b}`, label: `${s.name} (${vscode.SymbolKind[s.kind]?.toLowerCase() ?? "symbol"})` };
    });
}

/** Text of a file for `@file`: the open document's (unsaved changes included), else the disk's;
 * cut at {@link ATTACH_CHARS}. `path#L12-L20` (an `@symbol`) attaches those lines. Rejects with a
 * message a user reads. */
export async function attachedFile(ref: string): Promise<ContextItem> {
  const { path: rel, range } = splitRef(ref);
  const root = vscode.workspace.workspaceFolders?.[0]?.uri;
  const uri = rel.startsWith("/") || !root ? vscode.Uri.file(rel) : vscode.Uri.joinPath(root, rel);
  const open = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri.toString());
  let text: string;
  if (open) text = open.getText();
  else {
    const bytes = await vscode.workspace.fs.readFile(uri);
    if (bytes.subarray(0, 8000).includes(0)) throw new Error(`${rel} is a binary file; only its path is in the prompt`);
    text = new TextDecoder().decode(bytes);
  }
  if (range) {
    return { kind: "selection", label: `${path.basename(rel)}:${range.startLine}-${range.endLine}`, text: sliceLines(text, range.startLine, range.endLine), path: rel, range };
  }
  if (text.length > ATTACH_CHARS) {
    const cut = Math.max(text.lastIndexOf("\n", ATTACH_CHARS), 1);
    const more = text.slice(cut).split("\n").length - 1;
    text = `${text.slice(0, cut)}\n… (${more} more lines not included: read the file for them)`;
  }
  return { kind: "file", label: path.basename(rel), text, path: rel };
}

/** Posts the active editor's item to the panels as it changes (debounced: selections change on
 * every keystroke). Returns the current item for a panel that just loaded. */
export function trackActiveEditor(panels: () => Iterable<{ post(m: unknown): void }>, subs: vscode.Disposable[]): () => ContextItem | null {
  let last = "";
  let timer: ReturnType<typeof setTimeout> | undefined;
  const current = () => activeEditorItem(vscode.window.activeTextEditor, contextMode());
  const push = () => {
    timer = undefined;
    const item = current();
    const key = JSON.stringify(item);
    if (key === last) return;
    last = key;
    for (const p of panels()) p.post({ type: "editorContext", item });
  };
  const soon = () => {
    if (timer) clearTimeout(timer);
    timer = setTimeout(push, 250);
  };
  subs.push(
    vscode.window.onDidChangeActiveTextEditor((e) => {
      // Focus moving to the chat (no text editor) keeps the last editor's item.
      if (e) soon();
    }),
    vscode.window.onDidChangeTextEditorSelection(() => soon()),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("pi.context.activeEditor")) soon();
    }),
    { dispose: () => timer && clearTimeout(timer) },
  );
  return current;
}
