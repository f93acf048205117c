/**
 * Code blocks and file references in answers (issue 30 item 14):
 * - each finished code block gets Copy / Insert at Cursor / New File buttons when the pointer
 *   or the keyboard focus reaches it (the block is focusable: Tab reaches it, then its
 *   buttons); the host does the work (`codeAction`): VS Code's clipboard, an edit at the
 *   active editor's selections (never saved), an untitled document in the block's language;
 * - a relative link (`[greet](src/greet.py#L12)`) or an inline code path (`src/greet.py:12`,
 *   `README.md`) opens the file at that line in the editor (`openFile`).
 * Nothing is added while a row streams: the buttons come with the finished answer.
 */
import type { WebviewToHost } from "../shared/messages";

function button(label: string, title: string, onClick: () => void): HTMLButtonElement {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "link code-action";
  b.textContent = label;
  b.title = title;
  b.setAttribute("aria-label", title);
  b.addEventListener("click", (e) => {
    e.stopPropagation();
    onClick();
  });
  return b;
}

/** The block's language from its `language-<id>` class (empty when none). */
function languageOf(code: Element | null): string {
  const m = /(?:^|\s)language-([\w+#.-]+)/.exec(code?.className ?? "");
  return m?.[1] ?? "";
}

/** A file reference: `path`, `path:line`, `path:line:col`, `path#L12`, `path#L12-L20`. */
export function parseFileRef(text: string): { path: string; line?: number } | null {
  const t = text.trim();
  if (!t || /^[a-z][a-z0-9+.-]*:\/\//i.test(t) || /^(mailto|vscode|data|javascript):/i.test(t) || t.startsWith("#")) return null;
  const m = /^((?:\.{0,2}\/)?[\w@.+-]+(?:\/[\w@.+-]+)*\.[\w]+)(?::(\d+)(?::\d+)?|#L(\d+)(?:-L?\d+)?)?$/.exec(t);
  if (!m) return null;
  const line = Number(m[2] ?? m[3]);
  return line > 0 ? { path: m[1]!, line } : { path: m[1]! };
}

/** Whether inline code text names a file: it has a directory or a line (`a/b.ts`, `b.ts:3`),
 * or is a file name with a common extension (`README.md`); not a version or a number. */
function looksLikePath(text: string): boolean {
  const r = parseFileRef(text);
  if (!r) return false;
  if (r.line || r.path.includes("/")) return true;
  return /\.(rs|ts|tsx|js|jsx|mjs|cjs|py|go|java|kt|c|h|cc|cpp|hpp|cs|rb|php|swift|lua|vim|sh|toml|json|yaml|yml|md|txt|html|css|scss|sql|lock)$/i.test(r.path);
}

/** Installs the code block buttons and file links on the transcript's `root`. */
export function installCodeActions(root: HTMLElement, post: (m: WebviewToHost) => void): void {
  const decorate = (target: EventTarget | null) => {
    if (!(target instanceof Element)) return;
    const pre = target.closest(".md pre");
    if (pre instanceof HTMLElement) {
      if (pre.closest(".row.streaming") || pre.querySelector(":scope > .code-actions")) return;
      const code = pre.querySelector("code");
      const text = () => code?.textContent ?? pre.textContent ?? "";
      const language = languageOf(code);
      const bar = document.createElement("div");
      bar.className = "code-actions";
      bar.setAttribute("role", "toolbar");
      bar.setAttribute("aria-label", "Code block");
      bar.append(
        button("Copy", "Copy the code", () => post({ type: "codeAction", action: "copy", code: text(), language })),
        button("Insert", "Insert the code at the cursor of the active editor", () => post({ type: "codeAction", action: "insert", code: text(), language })),
        button("New File", "Open the code in a new untitled file", () => post({ type: "codeAction", action: "newFile", code: text(), language })),
      );
      pre.append(bar);
      return;
    }
    const c = target.closest(".md :not(pre) > code");
    if (c instanceof HTMLElement && !c.dataset.file && looksLikePath(c.textContent ?? "")) {
      const r = parseFileRef(c.textContent ?? "")!;
      c.dataset.file = r.path;
      c.classList.add("file-link");
      c.setAttribute("role", "link");
      c.tabIndex = 0;
      c.title = `Open ${r.path}${r.line ? ` at line ${r.line}` : ""}`;
    }
  };
  root.addEventListener("mouseover", (e) => decorate(e.target));
  root.addEventListener("focusin", (e) => decorate(e.target));
  const open = (e: Event): boolean => {
    const t = e.target instanceof Element ? e.target : null;
    const a = t?.closest(".md a[href]");
    if (a) {
      const r = parseFileRef(decodeURIComponent(a.getAttribute("href") ?? ""));
      if (!r) return false;
      e.preventDefault();
      post({ type: "openFile", path: r.path, ...(r.line ? { line: r.line } : {}) });
      return true;
    }
    const c = t?.closest(".md code.file-link");
    if (c instanceof HTMLElement) {
      const r = parseFileRef(c.textContent ?? "");
      if (!r) return false;
      e.preventDefault();
      post({ type: "openFile", path: r.path, ...(r.line ? { line: r.line } : {}) });
      return true;
    }
    return false;
  };
  root.addEventListener("click", (e) => void open(e));
  root.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && e.target instanceof HTMLElement && e.target.matches(".md code.file-link")) void open(e);
  });
}
