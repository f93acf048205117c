// Agent changes taken back with Undo come back under review with Redo (src/extension/undone.ts),
// with the hunks the tracker derives from them (src/extension/hunks.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { FileChanges } from "../../src/extension/hunks";
import { MAX_PER_FILE, UndoneChanges } from "../../src/extension/undone";

const base = "a\nb\nc\n";
const agent = "a\nB\nc\n";

test("Ctrl+Z of an agent edit, then Ctrl+Shift+Z: the redone text is the agent's again, with its hunk", () => {
  const u = new UndoneChanges();
  const f = FileChanges.fromAgentEdit(base, agent, "call_1");
  assert.equal(f.hunks().length, 1);
  // Ctrl+Z: the editor's undo takes the agent's line back; the tracker settles.
  u.taken("file:///w/x.txt", f.current, base, f.toolCallIds, ["s-1"]);
  assert.equal(u.has("file:///w/x.txt"), true);
  // Ctrl+Shift+Z: the document is the agent's text again.
  const back = u.restored("file:///w/x.txt", agent);
  assert.deepEqual(back, { withAgent: agent, without: base, toolCallIds: ["call_1"], sessions: ["s-1"] });
  const again = FileChanges.fromAgentEdit(back!.without, back!.withAgent, back!.toolCallIds[0]);
  assert.deepEqual(again.hunks().map((h) => [h.oldText, h.newText]), [["b\n", "B\n"]]);
  assert.equal(u.has("file:///w/x.txt"), false, "used once");
});

test("the review's Undo of one hunk, then Ctrl+Z: that hunk comes back, the other stays", () => {
  const u = new UndoneChanges();
  const f = FileChanges.fromAgentEdit("1\n2\n3\n4\n5\n6\n", "1\nTWO\n3\n4\n5\nSIX\n", "call_2");
  assert.equal(f.hunks().length, 2);
  const withAgent = f.current;
  const r = f.undo(0)!;
  const without = withAgent.slice(0, r.start) + r.text + withAgent.slice(r.end);
  f.userChanges([{ offset: r.start, length: r.end - r.start, text: r.text }]);
  assert.equal(f.hunks().length, 1);
  u.taken("k", withAgent, without, f.toolCallIds);
  // Ctrl+Z of the review's Undo edit.
  const back = u.restored("k", withAgent)!;
  f.agentEdit(f.current, back.withAgent);
  assert.deepEqual(f.hunks().map((h) => [h.oldText, h.newText]), [["2\n", "TWO\n"], ["6\n", "SIX\n"]]);
});

test("typing drops what Redo could bring back; other texts are not the agent's", () => {
  const u = new UndoneChanges();
  u.taken("k", agent, base, []);
  assert.equal(u.restored("k", "something else"), undefined);
  u.typed("k");
  assert.equal(u.has("k"), false);
  assert.equal(u.restored("k", agent), undefined);
  for (let i = 0; i < MAX_PER_FILE + 5; i++) u.taken("k", `with ${i}`, `without ${i}`, []);
  assert.equal(u.restored("k", "with 0"), undefined, "the oldest went");
  assert.deepEqual(u.restored("k", `with ${MAX_PER_FILE + 4}`), { withAgent: `with ${MAX_PER_FILE + 4}`, without: `without ${MAX_PER_FILE + 4}`, toolCallIds: [], sessions: [] });
  u.taken("k", "same", "same", []);
  assert.equal(u.restored("k", "same"), undefined, "no change, nothing remembered");
});
