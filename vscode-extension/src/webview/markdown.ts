/**
 * Markdown → sanitised HTML for the chat: `marked` (GFM) renders, DOMPurify sanitises, and
 * highlight.js (core plus a few languages) colours finished code blocks. The tail of a
 * streaming text is rendered without highlighting (it is re-rendered every frame); a block is
 * highlighted once, when it is finished.
 *
 * `MarkdownView` renders one streaming text into an element block by block: finished blocks
 * (see `BlockSplitter`) are appended once and never touched again; only the tail element is
 * replaced. `renderCount` counts block renders (tests check a finished block is rendered once).
 */
import { Marked, Lexer, type Tokens, type Token, type TokensList } from "marked";
import DOMPurify from "dompurify";
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import javascript from "highlight.js/lib/languages/javascript";
import typescript from "highlight.js/lib/languages/typescript";
import json from "highlight.js/lib/languages/json";
import python from "highlight.js/lib/languages/python";
import rust from "highlight.js/lib/languages/rust";
import diff from "highlight.js/lib/languages/diff";
import { BlockSplitter } from "./blocks";
import { morphChildren } from "./morph";

hljs.registerLanguage("bash", bash);
hljs.registerLanguage("sh", bash);
hljs.registerLanguage("shell", bash);
hljs.registerLanguage("javascript", javascript);
hljs.registerLanguage("js", javascript);
hljs.registerLanguage("typescript", typescript);
hljs.registerLanguage("ts", typescript);
hljs.registerLanguage("json", json);
hljs.registerLanguage("python", python);
hljs.registerLanguage("py", python);
hljs.registerLanguage("rust", rust);
hljs.registerLanguage("rs", rust);
hljs.registerLanguage("diff", diff);

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

function makeMarked(highlight: boolean): Marked {
  return new Marked({
    gfm: true,
    renderer: {
      code(token: Tokens.Code): string {
        const lang = (token.lang ?? "").trim().split(/\s+/)[0] ?? "";
        let body: string;
        if (highlight && lang && hljs.getLanguage(lang)) {
          body = hljs.highlight(token.text, { language: lang, ignoreIllegals: true }).value;
        } else {
          body = escapeHtml(token.text);
        }
        const cls = lang ? ` class="hljs language-${escapeHtml(lang)}"` : ` class="hljs"`;
        // Focusable: it scrolls, and the keyboard reaches its buttons (codeblocks.ts).
        return `<pre tabindex="0"><code${cls}>${body}</code></pre>\n`;
      },
    },
  });
}

const highlighted = makeMarked(true);
const plain = makeMarked(false);

// One DOMPurify configuration, set once (parsing it per call costs more than sanitising a
// small block): no scripts, styles, forms or remote-loading elements; links to http(s),
// mailto and vscode; images only as data: URIs of raster types. Returns DOM fragments, so each
// block's HTML is parsed once.
DOMPurify.setConfig({
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed"],
  FORBID_ATTR: ["style"],
  ALLOWED_URI_REGEXP: /^(?:(?:https?|mailto|vscode):|data:image\/(?:png|jpeg|gif|webp);|[^a-z]|[a-z+.-]+(?:[^a-z+.\-:]|$))/i,
  RETURN_DOM_FRAGMENT: true,
});

/** Sanitised DOM of a Markdown source (`highlight`: colour code blocks). */
export function renderMarkdownFragment(src: string, highlight = true): DocumentFragment {
  const html = (highlight ? highlighted : plain).parse(src, { async: false }) as string;
  return DOMPurify.sanitize(html) as unknown as DocumentFragment;
}

/** Whether tokens can carry markup marked does not escape: raw HTML, or a URL (link, image). */
function needsSanitizing(tokens: readonly Token[]): boolean {
  for (const t of tokens) {
    if (t.type === "html" || t.type === "link" || t.type === "image" || t.type === "tag") return true;
    const kids = (t as { tokens?: Token[] }).tokens;
    if (kids && needsSanitizing(kids)) return true;
    const items = (t as { items?: Token[] }).items;
    if (items && needsSanitizing(items)) return true;
    const table = t as { header?: { tokens: Token[] }[]; rows?: { tokens: Token[] }[][] };
    if (table.header?.some((c) => needsSanitizing(c.tokens))) return true;
    if (table.rows?.some((r) => r.some((c) => needsSanitizing(c.tokens)))) return true;
  }
  return false;
}

const scratch = document.createElement("template");

/** marked's HTML of tokens already lexed (not sanitised: see `needsSanitizing`). */
function tokensHtml(tokens: Token[], highlight: boolean): string {
  const list = Object.assign([...tokens], { links: {} }) as unknown as TokensList;
  return (highlight ? highlighted : plain).parser(list);
}

/** Sanitised DOM of tokens already lexed (reference links are not resolved across blocks).
 * Tokens without raw HTML or URLs render to text marked has escaped and tags it made itself:
 * they skip DOMPurify (the tail of a streaming answer is rendered many times a second).
 * The fragment is the template's own content (valid until the next call). */
function renderTokens(tokens: Token[], highlight: boolean): DocumentFragment {
  const html = tokensHtml(tokens, highlight);
  if (needsSanitizing(tokens)) return DOMPurify.sanitize(html) as unknown as DocumentFragment;
  scratch.innerHTML = html;
  return scratch.content;
}

/** Finished blocks per chunk element. */
const CHUNK = 32;

/** Test hook: how many Markdown blocks were rendered in this document; tail renders, and how
 * many nodes those created or removed (0 for a tail whose text only grew). */
export const renderStats = { blocks: 0, tails: 0, tailNodes: 0 };

export class MarkdownView {
  readonly el: HTMLDivElement;
  private readonly splitter = new BlockSplitter();
  private readonly tailEl: HTMLDivElement;
  private rendered = 0;
  private lastText = "";
  private lastDone = false;
  private chunk: HTMLDivElement | null = null;

  constructor() {
    this.el = document.createElement("div");
    this.el.className = "md";
    this.tailEl = document.createElement("div");
    this.tailEl.className = "md-tail";
    this.el.appendChild(this.tailEl);
  }

  /** Shows `text` (the whole text so far); `done`: it will not grow. */
  update(text: string, done: boolean): void {
    if (text === this.lastText && done === this.lastDone) return;
    if (!extends_(text, this.lastText, done)) this.reset();
    this.lastText = text;
    this.lastDone = done;
    this.splitter.update(text);
    const blocks = done ? this.splitter.finish() : this.splitter.finished;
    // Finished blocks go into chunks of CHUNK blocks: a long answer's layout and paint then
    // walk a few chunks (out-of-view ones skipped), not thousands of blocks, per frame. Blocks
    // marked renders without raw HTML or URLs are parsed together, one string per chunk (a
    // history message costs one HTML parse, not one per paragraph); the others one by one,
    // sanitised.
    let html = "";
    let pending = 0;
    const flush = () => {
      if (!pending) return;
      scratch.innerHTML = html;
      this.chunk!.append(scratch.content);
      html = "";
      pending = 0;
    };
    for (; this.rendered < blocks.length; this.rendered++) {
      const b = blocks[this.rendered]!;
      if (b.raw.trim() === "") continue;
      renderStats.blocks++;
      if (!this.chunk || this.chunk.childElementCount + pending >= CHUNK) {
        flush();
        this.chunk = document.createElement("div");
        this.chunk.className = "md-chunk";
        this.el.insertBefore(this.chunk, this.tailEl);
      }
      if (b.token && !needsSanitizing([b.token])) {
        html += `<div class="md-block">${tokensHtml([b.token], true)}</div>`;
        pending++;
        continue;
      }
      flush();
      const div = document.createElement("div");
      div.className = "md-block";
      div.append(b.token ? renderTokens([b.token], true) : renderMarkdownFragment(b.raw, true));
      this.chunk.append(div);
    }
    flush();
    const tail = done ? "" : this.splitter.tail();
    if (tail.trim() === "") {
      if (this.tailEl.firstChild) this.tailEl.textContent = "";
    } else {
      const tokens = this.splitter.tailTokens;
      // The tail's nodes are kept where they did not change: text that grew is appended.
      renderStats.tailNodes += morphChildren(this.tailEl, tokens ? renderTokens(tokens, false) : renderMarkdownFragment(tail, false));
      renderStats.tails++;
    }
  }

  private reset(): void {
    this.splitter.reset();
    this.rendered = 0;
    this.chunk = null;
    while (this.el.firstChild !== this.tailEl) this.el.firstChild!.remove();
    this.tailEl.textContent = "";
  }
}

/** Whether `text` continues `prev`. While a text streams it only grows (deltas append), so
 * the check compares the end of `prev` (cheap on a long answer, no flattening of the whole
 * string); a finished text (`done`, it may replace what streamed) is compared in full. */
function extends_(text: string, prev: string, done: boolean): boolean {
  if (text.length < prev.length) return false;
  if (done || prev.length <= 256) return text.startsWith(prev);
  return text.startsWith(prev.slice(-256), prev.length - 256);
}

/**
 * Work that makes the first rendering fast, in small steps: marked's lexer rules and
 * highlight.js's grammars are regular expressions compiled (and their code optimised) on first
 * use, which costs a cold first render of a session tens of milliseconds more than a warm one.
 * The panel runs these steps in idle callbacks while it waits for the host and the server
 * (each a few ms; nothing is shown or kept).
 */
export function warmUpSteps(): (() => void)[] {
  const md = (src: string) => () => {
    const tokens = Lexer.lex(src, { gfm: true });
    tokensHtml(tokens, false);
  };
  const code = (lang: string, src: string) => () => {
    hljs.highlight(src, { language: lang, ignoreIllegals: true });
  };
  return [
    md("A paragraph with *emphasis*, **strong**, `code`, ~~gone~~ and a [link](https://example.com) <https://example.com>.\nSecond line."),
    md("# Heading\n\nSetext\n===\n\n---\n\n> quoted *text*\n> more"),
    md("- item one\n- item `two`\n  - nested\n\n1. first\n2. second\n\n- [ ] task"),
    md("| a | b |\n|---|:-:|\n| 1 | `2` |\n\n    indented code\n\n```ts\nconst x = 1;\n```"),
    md("<div>raw html</div>\n\nText with <b>inline</b> html &amp; entities\\* and a footnote-like [ref]."),
    () => void DOMPurify.sanitize("<p>x <a href=\"https://example.com\">y</a></p>"),
    code("rust", "fn main() -> Result<(), String> { let x: u32 = 1; println!(\"{x}\"); Ok(()) }"),
    code("typescript", "export async function f(a: number): Promise<string> { return `${a}`; }"),
    code("python", "def f(x: int) -> str:\n    return f\"{x}\"  # comment"),
    code("bash", "for f in *.rs; do echo \"$f\" | grep -c fn; done"),
    code("json", "{\"a\": [1, true, null, \"s\"]}"),
    code("diff", "--- a\n+++ b\n@@ -1 +1 @@\n-old\n+new"),
  ];
}

/** For tests: the top-level block sources of a text (the lexer's raws). */
export function lexRaws(src: string): string[] {
  return Lexer.lex(src).map((t) => t.raw);
}
