// The Sessions view's branch rows (src/extension/branches.ts): flat without forks, indented
// only at forks, the active branch expanded.
import { test } from "node:test";
import assert from "node:assert/strict";
import { branchRows, type TreeEntry } from "../../src/extension/branches";

/** A user message `id` under `parentId`, with an assistant answer `id.a` after it. */
function turn(id: string, parentId: string | null): TreeEntry[] {
  return [
    { id, parentId, type: "message", role: "user", preview: id },
    { id: `${id}.a`, parentId: id, type: "message", role: "assistant", preview: `answer to ${id}` },
  ];
}

/** The rows as an indented outline (`*` marks an expanded row). */
function outline(entries: TreeEntry[], leaf: string | null): string[] {
  const r = branchRows(entries, leaf);
  const out: string[] = [];
  const draw = (rows: TreeEntry[], depth: number) => {
    for (const e of rows) {
      out.push(`${"  ".repeat(depth)}${e.id}${r.expanded.has(e.id) ? " *" : ""}${r.leafRow === e.id ? " ●" : ""}`);
      draw(r.children.get(e.id) ?? [], depth + 1);
    }
  };
  draw(r.roots, 0);
  return out;
}

test("a conversation without forks is one flat list", () => {
  const entries = [...turn("u1", null), ...turn("u2", "u1.a"), ...turn("u3", "u2.a"), ...turn("u4", "u3.a")];
  assert.deepEqual(outline(entries, "u4.a"), ["u1", "u2", "u3", "u4 ●"]);
});

test("a fork indents its branches once each; the active one is expanded", () => {
  const entries = [
    ...turn("u1", null),
    ...turn("u2", "u1.a"),
    ...turn("b1", "u2.a"), // branch 1 of the fork at u2
    ...turn("b1x", "b1.a"),
    ...turn("b1y", "b1x.a"),
    ...turn("b2", "u2.a"), // branch 2
    ...turn("b2x", "b2.a"),
    { id: "s", parentId: "b2x.a", type: "branch_summary", preview: "summary" },
    ...turn("b2y", "s"),
  ];
  assert.deepEqual(outline(entries, "b2y.a"), ["u1", "u2 *", "  b1", "    b1x", "    b1y", "  b2 *", "    b2x", "    s", "    b2y ●"]);
  // Back at the fork point (the leaf on u2): the fork row is the active row.
  assert.deepEqual(outline(entries, "u2.a"), ["u1", "u2 * ●", "  b1", "    b1x", "    b1y", "  b2", "    b2x", "    s", "    b2y"]);
});

test("a fork inside a branch nests one level deeper", () => {
  const entries = [...turn("u1", null), ...turn("a", "u1.a"), ...turn("b", "u1.a"), ...turn("b1", "b.a"), ...turn("b2", "b.a")];
  assert.deepEqual(outline(entries, "b2.a"), ["u1 *", "  a", "  b *", "    b1", "    b2 ●"]);
});
