// Keep / Undo per hunk (src/extension/hunks.ts): agent edits become hunks, the user's own
// typing never does, and Undo never reverts it.
import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { FileChanges, PieceText, type Replacement } from "../../src/extension/hunks";

function apply(text: string, r: Replacement): string {
  return text.slice(0, r.start) + r.text + text.slice(r.end);
}

/** Applies an Undo as the editor would: edit the document, then report the change back. */
function undo(f: FileChanges, index: number): void {
  const r = f.undo(index);
  assert.ok(r);
  f.userChanges([{ offset: r.start, length: r.end - r.start, text: r.text }]);
}

const BEFORE = "one\ntwo\nthree\nfour\nfive\n";

test("an agent edit becomes one hunk with the old and new lines", () => {
  const f = FileChanges.fromAgentEdit(BEFORE, "one\nTWO\nthree\nfour\nfive\n", "call_1");
  assert.deepEqual(
    f.hunks().map((h) => ({ startLine: h.startLine, lineCount: h.lineCount, oldText: h.oldText, newText: h.newText })),
    [{ startLine: 1, lineCount: 1, oldText: "two\n", newText: "TWO\n" }],
  );
  assert.deepEqual(f.toolCallIds, ["call_1"]);
});

test("undo of one hunk restores its lines and leaves the other hunk", () => {
  const f = FileChanges.fromAgentEdit(BEFORE, "one\nTWO\nthree\nfour\nFIVE\nsix\n");
  assert.equal(f.hunks().length, 2);
  undo(f, 1);
  assert.equal(f.current, "one\nTWO\nthree\nfour\nfive\n");
  assert.deepEqual(
    f.hunks().map((h) => h.newText),
    ["TWO\n"],
  );
  undo(f, 0);
  assert.equal(f.current, BEFORE);
  assert.equal(f.settled, true);
});

test("keep settles a hunk without changing the text", () => {
  const f = FileChanges.fromAgentEdit(BEFORE, "one\nTWO\nthree\nfour\nFIVE\n");
  assert.equal(f.keep(0), true);
  assert.equal(f.current, "one\nTWO\nthree\nfour\nFIVE\n");
  assert.deepEqual(
    f.hunks().map((h) => [h.oldText, h.newText]),
    [["five\n", "FIVE\n"]],
  );
  assert.equal(f.base, "one\nTWO\nthree\nfour\nfive\n");
});

test("the user's typing between agent edits is never a hunk and survives undo", () => {
  const f = FileChanges.fromAgentEdit(BEFORE, "one\nTWO\nthree\nfour\nfive\n", "call_1");
  // The user types "!!" at the end of line "four" (offset of "four" + 4).
  const at = "one\nTWO\nthree\nfour".length;
  f.userChanges([{ offset: at, length: 0, text: "!!" }]);
  assert.equal(f.current, "one\nTWO\nthree\nfour!!\nfive\n");
  // A second agent edit of line "one".
  f.agentEdit(f.current, "ONE\nTWO\nthree\nfour!!\nfive\n", "call_2");
  assert.deepEqual(
    f.hunks().map((h) => [h.oldText, h.newText]),
    [["one\ntwo\n", "ONE\nTWO\n"]],
  );
  undo(f, 0);
  assert.equal(f.current, "one\ntwo\nthree\nfour!!\nfive\n");
  assert.equal(f.settled, true);
  assert.deepEqual(f.toolCallIds, ["call_1", "call_2"]);
});

test("typing inside agent lines keeps that hunk: undo cannot revert the user's text", () => {
  const f = FileChanges.fromAgentEdit(BEFORE, "one\nTWO\nthree\nFOUR\nfive\n");
  assert.equal(f.hunks().length, 2);
  // The user edits the agent's "TWO" line.
  f.userChanges([{ offset: "one\nTW".length, length: 1, text: "o" }]);
  assert.equal(f.current, "one\nTWo\nthree\nFOUR\nfive\n");
  assert.deepEqual(
    f.hunks().map((h) => [h.oldText, h.newText]),
    [["four\n", "FOUR\n"]],
  );
  undo(f, 0);
  assert.equal(f.current, "one\nTWo\nthree\nfour\nfive\n");
  assert.equal(f.settled, true);
});

test("lines the user adds above a hunk shift it; undo still hits the agent's lines", () => {
  const f = FileChanges.fromAgentEdit(BEFORE, "one\ntwo\nthree\nfour\nFIVE\n");
  f.userChanges([{ offset: 0, length: 0, text: "zero\n" }]);
  const [h] = f.hunks();
  assert.equal(h.startLine, 5);
  undo(f, 0);
  assert.equal(f.current, "zero\none\ntwo\nthree\nfour\nfive\n");
});

test("an inserted block and a deleted block undo to the original", () => {
  const f = FileChanges.fromAgentEdit(BEFORE, "one\nnew a\nnew b\ntwo\nthree\nfive\n");
  assert.deepEqual(
    f.hunks().map((h) => [h.startLine, h.lineCount, h.oldText, h.newText]),
    [
      [1, 2, "", "new a\nnew b\n"],
      [5, 0, "four\n", ""],
    ],
  );
  // Typing at the start of the line after the inserted block does not take the block over.
  f.userChanges([{ offset: "one\nnew a\nnew b\n".length, length: 0, text: "// " }]);
  assert.equal(f.hunks().length, 2);
  for (const r of f.undoAll()) f.userChanges([{ offset: r.start, length: r.end - r.start, text: r.text }]);
  assert.equal(f.current, "one\n// two\nthree\nfour\nfive\n");
  assert.equal(f.settled, true);
});

test("a change the tracker missed is taken as the user's", () => {
  const f = FileChanges.fromAgentEdit(BEFORE, "one\nTWO\nthree\nfour\nfive\n");
  f.agentEdit("one\nTWO\nthree\nfour\nfive\nuser line\n", "one\nTWO\nthree\nfour\nfive\nuser line\nagent line\n");
  assert.deepEqual(
    f.hunks().map((h) => h.newText),
    ["TWO\n", "agent line\n"],
  );
  for (const r of f.undoAll()) f.userChanges([{ offset: r.start, length: r.end - r.start, text: r.text }]);
  assert.equal(f.current, "one\ntwo\nthree\nfour\nfive\nuser line\n");
});

test("hunkAtLine finds the hunk under the cursor", () => {
  const f = FileChanges.fromAgentEdit(BEFORE, "one\nTWO\nthree\nfour\nfive\n");
  assert.equal(f.hunkAtLine(1)?.newText, "TWO\n");
  assert.equal(f.hunkAtLine(3), undefined);
});

test("typing between hunks moves them exactly as a fresh diff of the same texts would", () => {
  const lines = Array.from({ length: 300 }, (_, i) => `line ${i}`);
  const f = FileChanges.fromAgentEdit(lines.join("\n") + "\n", lines.map((l, i) => (i % 30 === 15 ? l.toUpperCase() : i === 200 ? `${l}\nadded` : l)).join("\n") + "\n");
  const count = f.hunks().length;
  assert.equal(count, 11);
  for (let k = 0; k < 50; k++) {
    // The start of line (k * 37) % 300 (agent lines included: touching one keeps it).
    let at = 0;
    for (let l = (k * 37) % 300; l > 0; l--) at = f.current.indexOf("\n", at) + 1;
    f.userChanges([{ offset: at, length: k % 3 === 0 ? 1 : 0, text: k % 2 ? "ab\n" : "z" }]);
    assert.deepEqual(f.hunks(), new FileChanges(f.base, f.current).hunks(), `after keystroke ${k}`);
  }
  for (const r of f.undoAll()) f.userChanges([{ offset: r.start, length: r.end - r.start, text: r.text }]);
  assert.equal(f.settled, true);
  assert.equal(f.current, f.base);
  // Hunks the typing touched were kept (the user took those lines over); the others are undone.
  assert.ok(!f.current.includes("LINE 75\n"), "an untouched agent line is undone");
});

test("a PieceText edited by any replacements reads as the same edits on a plain string", () => {
  const base = Array.from({ length: 400 }, (_, i) => `line ${i} ${"x".repeat(i % 7)}`).join("\n");
  fc.assert(
    fc.property(
      fc.array(fc.record({ at: fc.nat(), len: fc.nat({ max: 40 }), text: fc.string({ maxLength: 12 }), read: fc.nat({ max: 60 }) }), { maxLength: 400 }),
      (ops) => {
        const p = new PieceText(base);
        let ref = base;
        for (const op of ops) {
          const offset = op.at % (ref.length + 1);
          const length = Math.min(op.len, ref.length - offset);
          p.replace(offset, length, op.text);
          ref = ref.slice(0, offset) + op.text + ref.slice(offset + length);
          assert.equal(p.length, ref.length);
          const from = Math.max(0, offset - 5);
          assert.equal(p.slice(from, from + op.read), ref.slice(from, from + op.read));
        }
        assert.equal(p.toString(), ref);
      },
    ),
    { numRuns: 200 },
  );
});

test("typing a thousand characters in a 5,000-line file under review keeps the hunks a fresh diff finds", () => {
  const lines = Array.from({ length: 5000 }, (_, i) => `line ${i} of the file with some text`);
  const f = FileChanges.fromAgentEdit(lines.join("\n") + "\n", lines.map((l, i) => (i % 100 === 50 ? l.toUpperCase() : l)).join("\n") + "\n");
  assert.equal(f.hunks().length, 50);
  let at = f.current.indexOf("line 10 ");
  for (let k = 0; k < 1000; k++) {
    f.userChanges([{ offset: at, length: 0, text: k % 40 === 39 ? "\n" : "y" }]);
    at++;
  }
  assert.equal(f.hunks().length, 50);
  assert.deepEqual(f.hunks(), new FileChanges(f.base, f.current).hunks());
  assert.equal(f.current.split("\n").length, 5001 + 25);
});
