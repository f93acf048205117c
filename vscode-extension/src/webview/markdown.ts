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
import { Marked, Lexer, type Tokens } from "marked";
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
        return `<pre><code${cls}>${body}</code></pre>\n`;
      },
    },
  });
}

const highlighted = makeMarked(true);
const plain = makeMarked(false);

const purifyConfig = {
  // No scripts, styles, forms or remote-loading elements; images only as data: URIs.
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed"],
  FORBID_ATTR: ["style"],
  ALLOWED_URI_REGEXP: /^(?:(?:https?|mailto|vscode):|data:image\/(?:png|jpeg|gif|webp);|[^a-z]|[a-z+.-]+(?:[^a-z+.\-:]|$))/i,
};

/** Sanitised HTML of a Markdown source (`highlight`: colour code blocks). */
export function renderMarkdown(src: string, highlight = true): string {
  const html = (highlight ? highlighted : plain).parse(src, { async: false }) as string;
  return DOMPurify.sanitize(html, purifyConfig) as unknown as string;
}

/** Test hook: how many Markdown blocks were rendered in this document. */
export const renderStats = { blocks: 0, tails: 0 };

export class MarkdownView {
  readonly el: HTMLDivElement;
  private readonly splitter = new BlockSplitter();
  private readonly tailEl: HTMLDivElement;
  private rendered = 0;
  private lastText = "";
  private lastDone = false;

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
    if (!text.startsWith(this.lastText)) this.reset();
    this.lastText = text;
    this.lastDone = done;
    this.splitter.update(text);
    const blocks = done ? this.splitter.finish() : this.splitter.finished;
    for (; this.rendered < blocks.length; this.rendered++) {
      const raw = blocks[this.rendered]!.raw;
      if (raw.trim() === "") continue;
      const div = document.createElement("div");
      div.className = "md-block";
      div.innerHTML = renderMarkdown(raw, true);
      renderStats.blocks++;
      this.el.insertBefore(div, this.tailEl);
    }
    const tail = done ? "" : this.splitter.tail();
    if (tail.trim() === "") {
      if (this.tailEl.firstChild) this.tailEl.textContent = "";
    } else {
      this.tailEl.innerHTML = renderMarkdown(tail, false);
      renderStats.tails++;
    }
  }

  private reset(): void {
    this.splitter.reset();
    this.rendered = 0;
    while (this.el.firstChild !== this.tailEl) this.el.firstChild!.remove();
    this.tailEl.textContent = "";
  }
}

/** For tests: the top-level block sources of a text (the lexer's raws). */
export function lexRaws(src: string): string[] {
  return Lexer.lex(src).map((t) => t.raw);
}
