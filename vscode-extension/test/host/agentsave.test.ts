// The text an agent edit gives a document, computed by the host when it writes the edit to disk
// itself (src/extension/agentsave.ts): LSP ranges in lines and UTF-16 columns, CRLF lines, an
// insertion at the end, and ranges outside the text (left to the editor).
import { test } from "node:test";
import assert from "node:assert/strict";
import { applyLspEdits } from "../../src/extension/agentsave";

const r = (l1: number, c1: number, l2: number, c2: number) => ({ start: { line: l1, character: c1 }, end: { line: l2, character: c2 } });

test("edits in lines and UTF-16 columns, applied back to front", () => {
  const text = "alpha\nbeta 🍋 x\ngamma\n";
  assert.equal(
    applyLspEdits(text, [
      { range: r(1, 0, 1, 4), newText: "BETA" },
      { range: r(1, 8, 1, 9), newText: "y" },
      { range: r(2, 0, 3, 0), newText: "" },
    ]),
    "alpha\nBETA 🍋 y\n",
  );
});

test("CRLF lines keep their breaks; a whole-text replace and an insertion at the end", () => {
  assert.equal(applyLspEdits("a\r\nb\r\n", [{ range: r(1, 0, 1, 1), newText: "B" }]), "a\r\nB\r\n");
  assert.equal(applyLspEdits("a\nb", [{ range: r(0, 0, 1, 1), newText: "new" }]), "new");
  assert.equal(applyLspEdits("a\n", [{ range: r(1, 0, 1, 0), newText: "b\n" }]), "a\nb\n");
});

test("a range outside the text is not applied here", () => {
  assert.equal(applyLspEdits("a\nb\n", [{ range: r(0, 0, 0, 5), newText: "x" }]), undefined);
  assert.equal(applyLspEdits("a\nb\n", [{ range: r(5, 0, 5, 0), newText: "x" }]), undefined);
  assert.equal(applyLspEdits("a\r\nb", [{ range: r(0, 0, 0, 2), newText: "x" }]), undefined);
});
