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
import { diffArrays } from "diff";
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

  /** The review's *Undo* of agent lines in a document holding the user's unsaved changes:
   * `rs` (byte offsets of `buffer`, the document's text before the undo) are carried onto the
   * file's text on disk ({@link mergeOntoDisk}) and written, so the disk agrees with the
   * session (the agent's next `bash` no longer sees the lines taken back) while the user's
   * unsaved text stays only in the document. The file's time before the write is kept as for
   * `agent/didMergeToDisk`, so the user's own save later is no conflict. Returns `"written"`,
   * `"same"` (the disk already agreed) or `"overlap"` (the lines are not on disk as in the
   * document — the agent's change was kept in the buffer only, or the user changed lines next to
   * it: nothing is written). Errors reading or writing the file are thrown. */
  undoneOnDisk(uri: vscode.Uri, buffer: string, rs: readonly Replacement[]): "written" | "same" | "overlap" {
    const path = uri.fsPath;
    const disk = fs.readFileSync(path, "utf8");
    const next = mergeOntoDisk(buffer, disk, rs);
    if (next === undefined) return "overlap";
    if (next === disk) return "same";
    const ns = fs.statSync(path, { bigint: true }).mtimeNs;
    const previous = { sec: Number(ns / 1_000_000_000n), nsec: Number(ns % 1_000_000_000n) };
    fs.writeFileSync(path, next);
    this.merged(uri, previous);
    return "written";
  }

  /** The disk holds the document's text again (saved by the agent). */
  saved(uri: vscode.Uri): void {
    this.known.delete(uri.toString());
  }

  dispose(): void {
    this.sub.dispose();
  }
}

/** A replacement of `text[start, end)` (UTF-16 offsets) by `text`. */
export interface Replacement {
  start: number;
  end: number;
  text: string;
}

/** `text` split into lines, each with its `\n` (the last one may lack it). */
function lines(text: string): string[] {
  return text.match(/[^\n]*\n|[^\n]+$/g) ?? [];
}

/**
 * The disk's new text when `edits` (offsets in `buffer`, the document's text, which holds the
 * user's unsaved changes) are carried onto `disk` (the file's text, without them) — the same
 * line-based rule as the server's merge for `saveUserChanges` (`server/core/src/unsaved.rs`,
 * `merge_onto_disk`): the lines `buffer` and `disk` share carry each edit over; an edit that
 * touches a line only the buffer has (the user's, or the agent's kept in the buffer only) gives
 * `undefined` and nothing is merged.
 */
export function mergeOntoDisk(buffer: string, disk: string, edits: readonly Replacement[]): string | undefined {
  // Spans of `buffer` equal to a span of `disk`: [buffer start, buffer end, disk start].
  const same: [number, number, number][] = [];
  let b = 0;
  let d = 0;
  for (const part of diffArrays(lines(disk), lines(buffer))) {
    const len = part.value.reduce((n, l) => n + l.length, 0);
    if (part.added) b += len;
    else if (part.removed) d += len;
    else {
      same.push([b, b + len, d]);
      b += len;
      d += len;
    }
  }
  const moved: Replacement[] = [];
  for (const e of edits) {
    const span = same.find(([bs, be]) => bs <= e.start && e.end <= be && (e.start < be || e.end < be || be === buffer.length));
    if (!span) return undefined;
    const [bs, , ds] = span;
    moved.push({ start: ds + (e.start - bs), end: ds + (e.end - bs), text: e.text });
  }
  moved.sort((x, y) => y.start - x.start);
  let out = disk;
  for (const r of moved) out = out.slice(0, r.start) + r.text + out.slice(r.end);
  return out;
}
