/**
 * The rows of the Sessions view's "Branches of the Active Session" (`agent/session/tree`), as
 * Pi's /tree draws them: a conversation without forks is one flat list, and indentation comes
 * only where the tree forks. No `vscode` import, so it runs under `node --test`.
 *
 * Rows are the entries worth one ({@link shown}: user messages, branch summaries, compactions,
 * labelled entries, shell commands), each under its nearest shown ancestor. A run of rows where
 * each has exactly one shown child is a chain, drawn as siblings. At a fork (a row with two or
 * more shown children) each branch gets a row of its own under the fork (its first row), and the
 * rest of that branch's chain is drawn under that row.
 */

/** One entry of `agent/session/tree` (docs/protocol.md). */
export interface TreeEntry {
  id: string;
  parentId: string | null;
  type: string;
  timestamp?: string;
  role?: string;
  preview?: string;
  label?: string;
}

/** Entries worth a row in the tree. */
export function shown(e: TreeEntry): boolean {
  return e.role === "user" || e.type === "branch_summary" || e.type === "compaction" || !!e.label || e.role === "bashExecution";
}

export interface BranchRows {
  /** The top-level rows, in order. */
  roots: TreeEntry[];
  /** The rows under a row, by its id (only rows that have some). */
  children: Map<string, TreeEntry[]>;
  /** Ids of the entries from the leaf to the root. */
  activePath: Set<string>;
  /** The shown entry nearest the leaf on the active path (the "● here" row). */
  leafRow: string | undefined;
  /** Rows on or above the active path's rows (expanded in the view), by id. */
  expanded: Set<string>;
}

/** Lays out the rows of `entries` (`leafId`: the session's leaf). */
export function branchRows(entries: TreeEntry[], leafId: string | null): BranchRows {
  const byId = new Map(entries.map((e) => [e.id, e]));
  const activePath = new Set<string>();
  for (let id = leafId; id; id = byId.get(id)?.parentId ?? null) activePath.add(id);
  // Shown entries under their nearest shown ancestor, in file order.
  const kids = new Map<string, TreeEntry[]>();
  const tops: TreeEntry[] = [];
  let leafRow: string | undefined;
  const shownAncestor = (e: TreeEntry): string | null => {
    for (let p = e.parentId; p; p = byId.get(p)?.parentId ?? null) {
      const pe = byId.get(p);
      if (pe && shown(pe)) return p;
    }
    return null;
  };
  for (const e of entries) {
    if (!shown(e)) continue;
    if (activePath.has(e.id)) leafRow = e.id;
    const a = shownAncestor(e);
    if (a === null) tops.push(e);
    else {
      const list = kids.get(a) ?? [];
      list.push(e);
      kids.set(a, list);
    }
  }
  const chain = (start: TreeEntry): TreeEntry[] => {
    const out = [start];
    for (let cur = start; ; ) {
      const k = kids.get(cur.id) ?? [];
      if (k.length !== 1) return out;
      cur = k[0];
      out.push(cur);
    }
  };
  const children = new Map<string, TreeEntry[]>();
  /** `list` is drawn as siblings; the fork at its end (if any) gets its branches. */
  const place = (list: TreeEntry[]): void => {
    const last = list[list.length - 1];
    const forks = kids.get(last.id) ?? [];
    if (forks.length < 2) return;
    children.set(last.id, forks);
    for (const head of forks) branch(head);
  };
  /** A branch drawn as its first row with the rest of its chain under it. */
  const branch = (head: TreeEntry): void => {
    const c = chain(head);
    if (c.length > 1) {
      children.set(head.id, c.slice(1));
      place(c.slice(1));
    } else place([head]);
  };
  let roots: TreeEntry[];
  if (tops.length === 1) {
    roots = chain(tops[0]);
    place(roots);
  } else {
    roots = tops;
    for (const r of tops) branch(r);
  }
  // Rows to expand: those with an active-path row below them.
  const expanded = new Set<string>();
  const walk = (row: TreeEntry): boolean => {
    let active = activePath.has(row.id);
    for (const c of children.get(row.id) ?? []) if (walk(c)) active = true;
    if (active && children.has(row.id)) expanded.add(row.id);
    return active;
  };
  for (const r of roots) walk(r);
  return { roots, children, activePath, leafRow, expanded };
}
