/**
 * A command's output as a terminal shows it (issue 30 item 12): carriage-return progress lines
 * collapsed to what the terminal would show last (`Downloading 10%\rDownloading 50%` is one
 * line, "Downloading 50%"), and ANSI SGR colours and styles (ECMA-48 `ESC [ … m`: 30–37 /
 * 90–97 foreground, 40–47 / 100–107 background, 38;5;n and 38;2;r;g;b, bold, dim, italic,
 * underline, inverse) rendered with the theme's terminal colours (`--vscode-terminal-ansi*`).
 * Every other escape sequence (cursor movement, erase, OSC titles and links) is dropped. Text
 * goes into the DOM as text nodes only: output cannot inject markup.
 */

/** CSI (`ESC [` … final byte), OSC (`ESC ]` … BEL or ST) and other two-byte escapes. */
const ESCAPE = /\x1b(?:\[([0-?]*)[ -/]*([@-~])|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])/g;

/** Whether `s` needs {@link renderTerminal} (it has an escape or a carriage return). */
export function hasControls(s: string): boolean {
  return s.includes("\x1b") || s.includes("\r");
}

/**
 * Collapses carriage returns as a terminal would: on each line, text after a `\r` overwrites the
 * line from its first column (a shorter rewrite leaves the end of the longer one, as a terminal
 * does). `\r\n` is a line end. Escape sequences count as zero columns and are kept with the
 * text written after them.
 */
export function collapseReturns(s: string): string {
  if (!s.includes("\r")) return s;
  return s
    .split("\n")
    .map((line) => {
      if (!line.includes("\r")) return line;
      const parts = line.split("\r");
      if (parts[parts.length - 1] === "") parts.pop(); // "\r\n"
      let shown = "";
      for (const p of parts) {
        const width = visibleLength(p);
        shown = width >= visibleLength(shown) ? p : p + dropColumns(shown, width);
      }
      return shown;
    })
    .join("\n");
}

function visibleLength(s: string): number {
  return s.replace(ESCAPE, "").length;
}

/** `s` without its first `n` visible columns (escapes before them dropped too). */
function dropColumns(s: string, n: number): string {
  const plain = s.replace(ESCAPE, "");
  return plain.slice(n);
}

/** Text without any escape sequence and with carriage returns collapsed (for copying). */
export function plainText(s: string): string {
  return collapseReturns(s).replace(ESCAPE, "");
}

interface Style {
  fg?: string;
  bg?: string;
  bold?: boolean;
  dim?: boolean;
  italic?: boolean;
  underline?: boolean;
  inverse?: boolean;
}

const NAMES = ["Black", "Red", "Green", "Yellow", "Blue", "Magenta", "Cyan", "White"];

/** A colour of the 256-colour palette as CSS: the 16 theme colours, the 6×6×6 cube, the greys. */
function palette(n: number): string | undefined {
  if (n < 0 || n > 255 || !Number.isInteger(n)) return undefined;
  if (n < 16) return `var(--vscode-terminal-ansi${n >= 8 ? "Bright" : ""}${NAMES[n % 8]})`;
  if (n < 232) {
    const c = n - 16;
    const v = (x: number) => (x === 0 ? 0 : 55 + x * 40);
    return `rgb(${v(Math.floor(c / 36))}, ${v(Math.floor(c / 6) % 6)}, ${v(c % 6)})`;
  }
  const g = 8 + (n - 232) * 10;
  return `rgb(${g}, ${g}, ${g})`;
}

/** Applies one SGR parameter list to `st`. */
function sgr(st: Style, params: string): void {
  const p = params === "" ? [0] : params.split(/[;:]/).map((x) => (x === "" ? 0 : Number(x)));
  for (let i = 0; i < p.length; i++) {
    const c = p[i]!;
    if (c === 0) {
      for (const k of Object.keys(st)) delete st[k as keyof Style];
    } else if (c === 1) st.bold = true;
    else if (c === 2) st.dim = true;
    else if (c === 3) st.italic = true;
    else if (c === 4) st.underline = true;
    else if (c === 7) st.inverse = true;
    else if (c === 22) delete st.bold, delete st.dim;
    else if (c === 23) delete st.italic;
    else if (c === 24) delete st.underline;
    else if (c === 27) delete st.inverse;
    else if (c >= 30 && c <= 37) st.fg = palette(c - 30);
    else if (c >= 90 && c <= 97) st.fg = palette(c - 90 + 8);
    else if (c === 39) delete st.fg;
    else if (c >= 40 && c <= 47) st.bg = palette(c - 40);
    else if (c >= 100 && c <= 107) st.bg = palette(c - 100 + 8);
    else if (c === 49) delete st.bg;
    else if ((c === 38 || c === 48) && p[i + 1] === 5) {
      const col = palette(p[i + 2] ?? -1);
      if (col) st[c === 38 ? "fg" : "bg"] = col;
      i += 2;
    } else if ((c === 38 || c === 48) && p[i + 1] === 2) {
      const [r, g, b] = [p[i + 2], p[i + 3], p[i + 4]].map((x) => Math.max(0, Math.min(255, Number(x) || 0)));
      st[c === 38 ? "fg" : "bg"] = `rgb(${r}, ${g}, ${b})`;
      i += 4;
    }
  }
}

function styled(st: Style): boolean {
  return Object.keys(st).length > 0;
}

function span(text: string, st: Style): Node {
  if (!styled(st)) return document.createTextNode(text);
  const e = document.createElement("span");
  e.textContent = text;
  const cls = ["ansi"];
  if (st.bold) cls.push("ansi-bold");
  if (st.dim) cls.push("ansi-dim");
  if (st.italic) cls.push("ansi-italic");
  if (st.underline) cls.push("ansi-underline");
  e.className = cls.join(" ");
  const fg = st.inverse ? (st.bg ?? "var(--vscode-editor-background)") : st.fg;
  const bg = st.inverse ? (st.fg ?? "var(--vscode-editor-foreground)") : st.bg;
  // CSSOM properties (not a style attribute): allowed by the page's CSP.
  if (fg) e.style.color = fg;
  if (bg) e.style.backgroundColor = bg;
  return e;
}

/** The output as DOM nodes: carriage returns collapsed, SGR styles as spans, other escapes
 * dropped. */
export function renderTerminal(s: string): DocumentFragment {
  const out = document.createDocumentFragment();
  const text = collapseReturns(s);
  const st: Style = {};
  let at = 0;
  ESCAPE.lastIndex = 0;
  for (let m = ESCAPE.exec(text); m; m = ESCAPE.exec(text)) {
    if (m.index > at) out.append(span(text.slice(at, m.index), { ...st }));
    if (m[2] === "m") sgr(st, m[1] ?? "");
    at = m.index + m[0].length;
  }
  if (at < text.length) out.append(span(text.slice(at), { ...st }));
  return out;
}

/** What each element shows (its source text). */
const shown = new WeakMap<HTMLElement, string>();

/** Sets `pre`'s content to `s` rendered as a terminal would show it (plain text when it has
 * no control characters), only when it changed. */
export function setTerminalText(pre: HTMLElement, s: string): void {
  if (shown.get(pre) === s) return;
  shown.set(pre, s);
  if (!hasControls(s)) {
    pre.textContent = s;
    return;
  }
  pre.textContent = "";
  pre.append(renderTerminal(s));
}
