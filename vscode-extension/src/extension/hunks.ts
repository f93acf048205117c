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

export class FileChanges {
  private cached: Hunk[] | undefined;
  /** Tool calls whose edits landed in this file, oldest first. */
  readonly toolCallIds: string[] = [];

  constructor(
    public base: string,
    public current: string,
  ) {}

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
   * (non-overlapping, each against the text before the event). */
  userChanges(changes: readonly TextChange[]): void {
    const sorted = [...changes].sort((a, b) => b.offset - a.offset);
    for (const c of sorted) this.userChange(c);
  }

  private userChange(c: TextChange): void {
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
    const removed = this.current.slice(c.offset, c.offset + c.length);
    this.base = this.base.slice(0, b) + c.text + this.base.slice(b + c.length);
    this.current = this.current.slice(0, c.offset) + c.text + this.current.slice(c.offset + c.length);
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
    } else this.cached = undefined;
  }

  private userReplace(text: string): void {
    // A change the tracker missed: treat the whole difference as the user's (never undone).
    const prefix = commonPrefix(this.current, text);
    const suffix = commonSuffix(this.current.slice(prefix), text.slice(prefix));
    this.userChange({
      offset: prefix,
      length: this.current.length - prefix - suffix,
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
