import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { BlockSplitter, blocksOf } from "../../src/webview/blocks";

const pieces = [
  "Some *text* with `code` and a [link](http://x).",
  "# Heading",
  "Setext candidate\n===",
  "- item one\n- item two",
  "1. first\n2. second\n\n   continued",
  "```rust\nfn main() {\n    println!(\"hi\");\n}\n```",
  "```\nunterminated fence\n",
  "| a | b |\n|---|---|\n| 1 | 2 |",
  "> quoted\n> more",
  "    indented code",
  "---",
  "Line one\nline two of the same paragraph",
];

const docArb = fc
  .array(fc.constantFrom(...pieces), { minLength: 1, maxLength: 8 })
  .chain((parts) => fc.tuple(fc.constant(parts), fc.array(fc.constantFrom("\n", "\n\n", "\n\n\n"), { minLength: parts.length, maxLength: parts.length })))
  .map(([parts, seps]) => parts.map((p, i) => p + seps[i]).join(""));

/** Cut points (sorted, unique, inside the text). */
function cuts(text: string, rnd: number[]): number[] {
  const set = new Set(rnd.map((r) => Math.floor(r * text.length)).filter((c) => c > 0 && c < text.length));
  return [...set].sort((a, b) => a - b);
}

test("finished blocks never change as the text grows, and tile the text", () => {
  fc.assert(
    fc.property(docArb, fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 40 }), (text, rnd) => {
      const sp = new BlockSplitter();
      const seen: string[] = [];
      for (const c of [...cuts(text, rnd), text.length]) {
        sp.update(text.slice(0, c));
        // Blocks finished earlier are unchanged (a prefix of the new list).
        for (let i = 0; i < seen.length; i++) assert.equal(sp.finished[i]!.raw, seen[i]);
        for (let i = seen.length; i < sp.finished.length; i++) seen.push(sp.finished[i]!.raw);
      }
      const all = sp.finish();
      assert.equal(all.map((b) => b.raw).join(""), text);
    }),
    { numRuns: 400 },
  );
});

test("a splitter fed any chunking ends with the blocks of the whole text lexed at once", () => {
  fc.assert(
    fc.property(docArb, fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 40 }), (text, rnd) => {
      const sp = new BlockSplitter();
      for (const c of cuts(text, rnd)) sp.update(text.slice(0, c));
      sp.update(text);
      assert.deepEqual(
        sp.finish().map((b) => b.raw),
        blocksOf(text).map((b) => b.raw),
      );
    }),
    { numRuns: 400 },
  );
});

test("a paragraph stays the tail until a later block begins", () => {
  const sp = new BlockSplitter();
  sp.update("Hello");
  assert.equal(sp.finished.length, 0);
  sp.update("Hello\n\n");
  assert.equal(sp.finished.length, 0, "a blank line alone does not finish it");
  sp.update("Hello\n\n# Next");
  assert.equal(sp.finished.map((b) => b.raw).join(""), "Hello\n\n");
  assert.equal(sp.tail(), "# Next");
});

test("an open code fence is one tail block until it closes", () => {
  const sp = new BlockSplitter();
  sp.update("Intro\n\n```js\nlet a = 1;\n");
  assert.equal(sp.tail(), "```js\nlet a = 1;\n");
  sp.update("Intro\n\n```js\nlet a = 1;\n\nlet b = 2;\n");
  assert.equal(sp.tail(), "```js\nlet a = 1;\n\nlet b = 2;\n");
  sp.update("Intro\n\n```js\nlet a = 1;\n\nlet b = 2;\n```\n\nAfter");
  assert.equal(sp.tail(), "After");
  assert.equal(sp.finished.map((b) => b.raw).join(""), "Intro\n\n```js\nlet a = 1;\n\nlet b = 2;\n```\n\n");
});
