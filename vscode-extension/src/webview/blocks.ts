/**
 * Block-wise streaming Markdown (Cline's approach, CLIENTS.md anchor 2): a streaming text is
 * split into top-level Markdown blocks with `marked`'s lexer; every block but the last is
 * *finished* and is rendered once, never again; only the tail block is re-rendered as text
 * arrives.
 *
 * `BlockSplitter` keeps the finished blocks' raw source and the offset where the tail begins;
 * `update(text)` lexes only `text.slice(stableEnd)`, so a frame costs the size of the tail block,
 * not of the message. A block becomes finished only when a later block that is not blank space
 * has begun (a paragraph can still turn into a setext heading, a list can still continue), and
 * the finished blocks of a prefix are always a prefix of the finished blocks of the whole text
 * (the property the unit tests check over random chunkings).
 */
import { Lexer, type Token, type TokensList } from "marked";

/** One top-level Markdown block: its source text (the lexer's `raw`). */
export interface Block {
  raw: string;
  /** Offset of `raw` in the whole text. */
  start: number;
}

function lex(src: string): TokensList {
  return Lexer.lex(src, { gfm: true });
}

/** Whether a token can still change when more text follows it and something non-blank
 * after it already began: tables and lists absorb lines that follow without a blank line,
 * lists even across blank lines when the next line is indented. */
function isSpace(t: Token): boolean {
  return t.type === "space";
}

export class BlockSplitter {
  /** Finished blocks, in order. */
  readonly finished: Block[] = [];
  /** Where the unfinished tail begins. */
  stableEnd = 0;
  /** The text last seen. */
  private text = "";

  /**
   * Takes the whole text so far (it must extend the previous text; anything else resets the
   * splitter). Returns the number of blocks that became finished by this call.
   */
  update(text: string): number {
    if (!text.startsWith(this.text.slice(0, this.stableEnd))) this.reset();
    this.text = text;
    const tail = text.slice(this.stableEnd);
    if (tail.length === 0) return 0;
    const tokens = lex(tail);
    // The last non-space token is the growing tail; everything before it is finished, except
    // a trailing blank run (kept with the tail so the tail's offset starts on content).
    let last = tokens.length - 1;
    while (last >= 0 && isSpace(tokens[last]!)) last--;
    if (last <= 0) return 0;
    let added = 0;
    let off = this.stableEnd;
    for (let i = 0; i < last; i++) {
      const raw = tokens[i]!.raw;
      this.finished.push({ raw, start: off });
      off += raw.length;
      added++;
    }
    // Sanity: the raws must tile the source; if the lexer dropped characters, keep it unsplit.
    if (text.slice(this.stableEnd, off) !== tokens.slice(0, last).map((t) => t.raw).join("")) {
      this.finished.splice(this.finished.length - added, added);
      return 0;
    }
    this.stableEnd = off;
    return added;
  }

  /** The unfinished tail's source. */
  tail(): string {
    return this.text.slice(this.stableEnd);
  }

  /** All blocks of the final text (when it is complete: the tail lexed into its blocks). */
  finish(): Block[] {
    const out = [...this.finished];
    let off = this.stableEnd;
    for (const t of lex(this.tail())) {
      out.push({ raw: t.raw, start: off });
      off += t.raw.length;
    }
    return out;
  }

  reset(): void {
    this.finished.length = 0;
    this.stableEnd = 0;
    this.text = "";
  }
}

/** The blocks of a whole text lexed at once (the reference the splitter must agree with). */
export function blocksOf(text: string): Block[] {
  const out: Block[] = [];
  let off = 0;
  for (const t of lex(text)) {
    out.push({ raw: t.raw, start: off });
    off += t.raw.length;
  }
  return out;
}
