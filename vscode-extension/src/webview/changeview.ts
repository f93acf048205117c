/**
 * An edit's diff in an approval card, changed lines first (issue 30 item 7): the removed (−)
 * and added (+) lines at the top, each hunk headed by where it is ("line 12"), the unchanged
 * context folded away under "Show with context" (the whole unified diff). Both parts scroll on
 * their own, so a long change never pushes the card's answers out of reach.
 */

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** The class of one line of a unified diff. */
function lineClass(line: string): string {
  return line.startsWith("+++") || line.startsWith("---") ? "diff-file" : line.startsWith("+") ? "diff-add" : line.startsWith("-") ? "diff-del" : line.startsWith("@@") ? "diff-hunk" : "diff-ctx";
}

/** A unified diff, every line, with added / removed lines marked; `cls` is the `<pre>`'s class. */
export function fullDiff(diff: string, cls = "diff"): HTMLPreElement {
  const pre = el("pre", cls);
  for (const line of diff.replace(/\n$/, "").split("\n")) pre.append(el("span", lineClass(line), line), "\n");
  return pre;
}

/** The changed lines of `diff` and, folded, the whole diff with its context. */
export function changedLinesFirst(diff: string): HTMLElement {
  const wrap = el("div", "change-view");
  const changed = el("pre", "diff diff-changes");
  changed.setAttribute("aria-label", "Changed lines");
  changed.tabIndex = 0; // scrollable with the keyboard
  let context = 0;
  let removed = 0;
  let added = 0;
  for (const line of diff.replace(/\n$/, "").split("\n")) {
    const c = lineClass(line);
    if (c === "diff-hunk") {
      const m = /^@@ -(\d+)(?:,\d+)? \+(\d+)/.exec(line);
      if (m) changed.append(el("span", "diff-where", `line ${m[2]}`), "\n");
    } else if (c === "diff-add" || c === "diff-del") {
      changed.append(el("span", c, line), "\n");
      if (c === "diff-add") added++;
      else removed++;
    } else if (c === "diff-ctx") context++;
  }
  wrap.append(changed);
  const folded = el("details", "diff-fold");
  const summary = el("summary", undefined, `Show with context (${context} unchanged line${context === 1 ? "" : "s"})`);
  folded.append(summary);
  // Built when opened: a long file's context costs nothing until the user asks for it.
  folded.addEventListener("toggle", () => {
    if (folded.open && folded.childElementCount === 1) folded.append(fullDiff(diff, "diff-context"));
  });
  wrap.dataset.added = String(added);
  wrap.dataset.removed = String(removed);
  wrap.append(folded);
  return wrap;
}
