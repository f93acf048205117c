// `@file` / `@symbol` references (src/extension/editorcontext.ts): a symbol's `path#Lstart-Lend`
// attaches those lines.
import { test } from "node:test";
import assert from "node:assert/strict";
import { sliceLines, splitRef } from "../../src/extension/editorcontext";

test("a symbol's reference names its file and lines; a file's names only the file", () => {
  assert.deepEqual(splitRef("src/greet.py#L3-L5"), { path: "src/greet.py", range: { startLine: 3, endLine: 5 } });
  assert.deepEqual(splitRef("src/greet.py#L7"), { path: "src/greet.py", range: { startLine: 7, endLine: 7 } });
  assert.deepEqual(splitRef("src/a#b.py"), { path: "src/a#b.py" });
  assert.deepEqual(splitRef("README.md"), { path: "README.md" });
});

test("the lines of a symbol, 1-based and inclusive", () => {
  const text = "import os\n\ndef greet(name):\n    return name\n\nx = 1\n";
  assert.equal(sliceLines(text, 3, 4), "def greet(name):\n    return name");
  assert.equal(sliceLines(text, 6, 9), "x = 1\n");
});
