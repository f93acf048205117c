/**
 * Per-file review of agent edits: Keep / Undo per hunk that never reverts the user's own typing
 * (CLIENTS.md VF5, pain point 5). No `vscode` import, so it runs under `node --test`.
 *
 * A {@link FileChanges} holds two texts of one file:
 * - `base`: the file as it would be without the agent's edits still under review — the text
 *   before the first agent edit, plus every change the user made since and every hunk kept;
 * - `current`: the buffer as it is now.
 *
 * Hunks are the line differences `base → current` (jsdiff's `diffLines`). Rules:
 * - an agent edit moves `current` only (it becomes a hunk);
 * - a user change outside every hunk is applied to both texts (it is never a hunk, so no Undo
 *   can revert it);
 * - a user change that touches a hunk first keeps that hunk (the user took over those lines),
 *   then applies to both: typing inside agent lines is never reverted either;
 * - Keep sets `base`'s lines of the hunk to the agent's; Undo gives the edit that puts the
 *   hunk's old lines back (an ordinary, undoable editor edit; when it comes back as a change it
 *   touches the hunk, so both texts end with the old lines and the hunk is gone).
 */
import { diffLines } from "diff";

/** One hunk: offsets are UTF-16 code units (VS Code's), lines 0-based, ranges end-exclusive. */
export interface Hunk {
  /** Index among the file's hunks, in order. */
  index: number;
  /** Where the agent's lines are in `current`. */
  start: number;
  end: number;
  startLine: number;
  /** Number of lines of `current` in the hunk (0: a deletion). */
  lineCount: number;
  /** The agent's text (whole lines) and the text it replaced (whole lines). */
  newText: string;
  oldText: string;
  /** Where the old lines are in `base`. */
  baseStart: number;
  baseEnd: number;
}

/** One change of a document event: replace `[offset, offset + length)` of the text before by
 * `text` (VS Code's `TextDocumentContentChangeEvent.rangeOffset` / `rangeLength` / `text`). */
export interface TextChange {
  offset: number;
  length: number;
  text: string;
}

/** A replacement of `current` to apply to the document: `[start, end)` → `text`. */
export interface Replacement {
  start: number;
  end: number;
  text: string;
}

/**
 * A text changed by small replacements without rebuilding the whole string for each one
 * (typing in a large file under review: a keystroke costs O(pieces), not O(file)): the text is
 * a list of pieces — slices of earlier texts (O(1) in V8) and inserted strings — joined only when
 * the whole text is read. At most {@link PieceText.MAX_PIECES} pieces are kept.
 */
export class PieceText {
  static readonly MAX_PIECES = 256;
  private pieces: string[];
  private flat: string | undefined;
  /** Length in UTF-16 code units. */
  length: number;

  constructor(text: string) {
    this.pieces = [text];
    this.flat = text;
    this.length = text.length;
  }

  /** The whole text (joined once, then kept until the next change). */
  toString(): string {
    if (this.flat === undefined) {
      this.flat = this.pieces.join("");
      this.pieces = [this.flat];
    }
    return this.flat;
  }

  /** `[start, end)` of the text, without joining the whole of it. */
  slice(start: number, end: number): string {
    if (this.flat !== undefined) return this.flat.slice(start, end);
    let out = "";
    let at = 0;
    for (const p of this.pieces) {
      const pe = at + p.length;
      if (pe > start && at < end) out += p.slice(Math.max(0, start - at), Math.min(p.length, end - at));
      if (pe >= end) break;
      at = pe;
    }
    return out;
  }

  /** Replaces `[offset, offset + length)` with `text`. */
  replace(offset: number, length: number, text: string): void {
    if (this.flat !== undefined && this.flat.length < 4096) {
      this.flat = this.flat.slice(0, offset) + text + this.flat.slice(offset + length);
      this.pieces = [this.flat];
      this.length = this.flat.length;
      return;
    }
    const ps = this.pieces;
    // The piece holding `offset` (an offset at a piece's end belongs to it: typing on goes on
    // extending the same short piece).
    let i = 0;
    let at = 0;
    while (i < ps.length - 1 && at + ps[i].length < offset) at += ps[i++].length;
    const left = ps[i].slice(0, offset - at);
    // Consume `length` characters from `offset` on.
    let j = i;
    let jat = at;
    const end = offset + length;
    while (j < ps.length - 1 && jat + ps[j].length < end) jat += ps[j++].length;
    const right = ps[j].slice(end - jat);
    const middle: string[] = [];
    if (left.length > 0 && left.length < 64) middle.push(left + text);
    else {
      if (left.length > 0) middle.push(left);
      if (text.length > 0) middle.push(text);
    }
    if (right.length > 0) middle.push(right);
    ps.splice(i, j - i + 1, ...middle);
    if (ps.length === 0) ps.push("");
    this.length += text.length - length;
    this.flat = undefined;
    if (ps.length > PieceText.MAX_PIECES) this.toString();
  }
}

export class FileChanges {
  private cached: Hunk[] | undefined;
  /** Tool calls whose edits landed in this file, oldest first. */
  readonly toolCallIds: string[] = [];
  private baseText: PieceText;
  private currentText: PieceText;

  constructor(base: string, current: string) {
    this.baseText = new PieceText(base);
    this.currentText = new PieceText(current);
  }

  /** The file as it would be without the agent's edits still under review. */
  get base(): string {
    return this.baseText.toString();
  }

  set base(text: string) {
    this.baseText = new PieceText(text);
  }

  /** The buffer as it is now. */
  get current(): string {
    return this.currentText.toString();
  }

  set current(text: string) {
    this.currentText = new PieceText(text);
  }

  /** Starts tracking a file at an agent edit `before → after`. */
  static fromAgentEdit(before: string, after: string, toolCallId?: string): FileChanges {
    const f = new FileChanges(before, after);
    if (toolCallId) f.toolCallIds.push(toolCallId);
    return f;
  }

  /** An agent edit of the tracked file. `before` should equal `current`; when it does not (a
   * change the tracker missed), the difference is taken as the user's. */
  agentEdit(before: string, after: string, toolCallId?: string): void {
    if (before !== this.current) this.userReplace(before);
    this.current = after;
    this.cached = undefined;
    if (toolCallId && !this.toolCallIds.includes(toolCallId)) this.toolCallIds.push(toolCallId);
  }

  /** The document is `text` now (a reload found it so): any difference from `current` is the
   * user's (never a hunk). */
  resync(text: string): void {
    if (text !== this.current) this.userReplace(text);
  }

  /** The hunks `base → current`, in order. */
  hunks(): Hunk[] {
    if (this.cached) return this.cached;
    const out: Hunk[] = [];
    let cur = 0;
    let base = 0;
    let line = 0;
    let pending: Hunk | undefined;
    const close = () => {
      if (pending) out.push(pending);
      pending = undefined;
    };
    for (const part of diffLines(this.base, this.current)) {
      const len = part.value.length;
      const lines = part.count ?? countLines(part.value);
      if (!part.added && !part.removed) {
        close();
        cur += len;
        base += len;
        line += lines;
        continue;
      }
      pending ??= {
        index: out.length,
        start: cur,
        end: cur,
        startLine: line,
        lineCount: 0,
        newText: "",
        oldText: "",
        baseStart: base,
        baseEnd: base,
      };
      if (part.added) {
        pending.newText += part.value;
        pending.end += len;
        pending.lineCount += lines;
        cur += len;
        line += lines;
      } else {
        pending.oldText += part.value;
        pending.baseEnd += len;
        base += len;
      }
    }
    close();
    this.cached = out;
    return out;
  }

  /** Whether nothing is left to review. */
  get settled(): boolean {
    return this.hunks().length === 0;
  }

  /** The hunk whose lines hold 0-based `line` (a deletion: the line it sits before). */
  hunkAtLine(line: number): Hunk | undefined {
    return this.hunks().find((h) =>
      h.lineCount === 0 ? line === h.startLine || line === h.startLine - 1 : line >= h.startLine && line < h.startLine + h.lineCount,
    );
  }

  /** Keeps hunk `index`: its agent lines become part of `base`. */
  keep(index: number): boolean {
    const h = this.hunks()[index];
    if (!h) return false;
    this.base = this.base.slice(0, h.baseStart) + h.newText + this.base.slice(h.baseEnd);
    this.cached = undefined;
    return true;
  }

  /** Keeps every hunk. */
  keepAll(): void {
    this.base = this.current;
    this.cached = undefined;
  }

  /** The edit that undoes hunk `index` in the document (apply it, then feed the resulting
   * change back through {@link userChanges}). */
  undo(index: number): Replacement | undefined {
    const h = this.hunks()[index];
    if (!h) return undefined;
    return { start: h.start, end: h.end, text: h.oldText };
  }

  /** Edits undoing every hunk, last first (so each offset still holds when applied in order
   * to the same text; a WorkspaceEdit takes them all against the original text). */
  undoAll(): Replacement[] {
    return this.hunks()
      .map((h) => ({ start: h.start, end: h.end, text: h.oldText }))
      .reverse();
  }

  /** The user (or an Undo) changed the document: `changes` as one VS Code event gives them
   * (non-overlapping, each against the text before the event). Returns whether the hunks
   * changed other than by moving with the text (then the review UI must be redrawn; when they
   * only moved, VS Code's decorations and CodeLenses move with the text by themselves). */
  userChanges(changes: readonly TextChange[]): boolean {
    const sorted = changes.length > 1 ? [...changes].sort((a, b) => b.offset - a.offset) : changes;
    let reshaped = false;
    for (const c of sorted) if (this.userChange(c)) reshaped = true;
    return reshaped;
  }

  /** Applies one change; true when the hunks changed other than by moving (a hunk kept, or
   * they must be diffed again), false when they only moved with the text. */
  private userChange(c: TextChange): boolean {
    // Keep every hunk the change touches: the user took over those lines.
    const touched = this.hunks().filter((h) => touches(h, c));
    for (const h of [...touched].reverse()) {
      this.base = this.base.slice(0, h.baseStart) + h.newText + this.base.slice(h.baseEnd);
    }
    if (touched.length) this.cached = undefined;
    const shifted = touched.length === 0 && this.cached ? this.cached : undefined;
    // Now the change lies where base and current agree: map its offset into base.
    let delta = 0;
    for (const h of this.hunks()) {
      if (h.end <= c.offset && !(h.start === h.end && h.start === c.offset)) delta += h.oldText.length - h.newText.length;
      else break;
    }
    const b = c.offset + delta;
    const removed = c.length > 0 ? this.currentText.slice(c.offset, c.offset + c.length) : "";
    this.baseText.replace(b, c.length, c.text);
    this.currentText.replace(c.offset, c.length, c.text);
    if (shifted) {
      // Both texts changed alike outside every hunk: the hunks after it only move (no new diff;
      // typing stays cheap in large files).
      const d = c.text.length - c.length;
      const lines = countNewlines(c.text) - countNewlines(removed);
      const cEnd = c.offset + c.length;
      this.cached = shifted.map((h) =>
        h.start >= cEnd && !(h.start === h.end && h.start === c.offset)
          ? { ...h, start: h.start + d, end: h.end + d, baseStart: h.baseStart + d, baseEnd: h.baseEnd + d, startLine: h.startLine + lines }
          : h,
      );
      return false;
    }
    this.cached = undefined;
    return true;
  }

  private userReplace(text: string): void {
    // A change the tracker missed: treat the whole difference as the user's (never undone).
    const prefix = commonPrefix(this.current, text);
    const suffix = commonSuffix(this.current.slice(prefix), text.slice(prefix));
    this.userChange({
      offset: prefix,
      length: this.currentText.length - prefix - suffix,
      text: text.slice(prefix, text.length - suffix),
    });
  }
}

/** Whether change `c` touches hunk `h`'s lines in `current`. An insertion at a hunk's first
 * offset touches it; one at its end (the start of the next line) does not, unless the hunk is
 * a deletion (no lines of its own), which any change at its place touches. */
export function touches(h: Hunk, c: TextChange): boolean {
  const cEnd = c.offset + c.length;
  if (h.start === h.end) return c.offset <= h.start && cEnd >= h.start;
  if (c.length === 0) return c.offset >= h.start && c.offset < h.end;
  return c.offset < h.end && cEnd > h.start;
}

function countNewlines(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) === 10) n++;
  return n;
}

function countLines(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) === 10) n++;
  return s.length > 0 && s.charCodeAt(s.length - 1) !== 10 ? n + 1 : n;
}

function commonPrefix(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

function commonSuffix(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a.charCodeAt(a.length - 1 - i) === b.charCodeAt(b.length - 1 - i)) i++;
  return i;
}
