/**
 * The user's unsaved changes when an agent edit lands in their document (`saveUserChanges`).
 *
 * Under `never` (or `ask`, not answered yet) the server writes only the agent's change to disk,
 * merged onto the disk's text, and says so with `agent/didMergeToDisk`; the document stays dirty
 * with the user's changes. VS Code would then refuse the user's next save as a conflict ("the
 * content of the file is newer"), because the file's modification time moved past the one it
 * read. Its check only fires when the file is newer than what it knows, so just before the
 * user's own save (`onWillSaveTextDocument`: every save participant runs before the write) the
 * file's time is set back to the one VS Code read; the save then writes the whole document (all
 * of it is the user's to save).
 */
import * as fs from "node:fs";
import * as vscode from "vscode";

/** A file's modification time as the server sends it. */
export interface FileTime {
  sec: number;
  nsec: number;
}

export class UnsavedChanges implements vscode.Disposable {
  /** Document URI → the file's time before the server's first merge (null: unknown). */
  readonly known = new Map<string, FileTime | null>();
  private readonly sub: vscode.Disposable;

  constructor() {
    this.sub = vscode.workspace.onWillSaveTextDocument((e) => {
      const key = e.document.uri.toString();
      if (!this.known.has(key)) return;
      const t = this.known.get(key);
      this.known.delete(key);
      if (t && e.document.uri.scheme === "file") UnsavedChanges.restore(e.document.uri.fsPath, t);
    });
  }

  /** Sets `path`'s modification time back to `t` (VS Code compares milliseconds). */
  static restore(path: string, t: FileTime): void {
    try {
      const st = fs.statSync(path);
      fs.utimesSync(path, st.atime, t.sec + Math.floor(t.nsec / 1e6) / 1e3);
    } catch {
      // Gone or not ours to touch: VS Code's own question then decides.
    }
  }

  /** `agent/didMergeToDisk` for `uri`: `previous` is the file's time before the server wrote. */
  merged(uri: vscode.Uri, previous?: FileTime): void {
    const key = uri.toString();
    if (!this.known.has(key)) this.known.set(key, previous ?? null);
  }

  /** The disk holds the document's text again (saved by the agent). */
  saved(uri: vscode.Uri): void {
    this.known.delete(uri.toString());
  }

  dispose(): void {
    this.sub.dispose();
  }
}
