// The attention flag (src/extension/attention.ts) and session display names (names.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { AttentionList, flagText, viewBadge } from "../../src/extension/attention";
import { relativeTime, SessionNames } from "../../src/extension/names";

test("agent/attention flags a session no visible panel shows, until it is seen, runs again or its question is answered", () => {
  const a = new AttentionList();
  let changes = 0;
  a.onChange = () => changes++;
  assert.equal(a.attention({ sessionId: "s1", reason: "finished", message: "Done." }, true, 1), false, "a visible panel: seen already");
  assert.equal(a.size, 0);
  assert.equal(a.attention({ sessionId: "s1", reason: "finished", message: "Done." }, false, 1), true);
  assert.equal(a.attention({ sessionId: "s2", reason: "permission", message: "pi wants to run `ls`" }, false, 2), true);
  assert.deepEqual(a.list(), [
    { sessionId: "s2", reason: "permission", message: "pi wants to run `ls`", at: 2 },
    { sessionId: "s1", reason: "finished", message: "Done.", at: 1 },
  ]);
  a.questions("s1", 0); // not a question's flag
  assert.equal(a.size, 2);
  a.questions("s2", 1);
  assert.equal(a.size, 2);
  a.questions("s2", 0);
  assert.deepEqual(a.list().map((f) => f.sessionId), ["s1"]);
  a.seen("s1");
  assert.equal(a.size, 0);
  a.attention({ sessionId: "s3", reason: "failed", message: "HTTP 500" }, false, 3);
  a.runStarted("s3");
  assert.equal(a.size, 0);
  assert.equal(changes, 6);
  assert.equal(a.attention({ reason: "finished" }, false, 4), false, "no sessionId: nothing to flag");
});

test("the flag's text names one session, or counts several", () => {
  const name = (id: string) => ({ s1: "fix the tests", s2: "hello" })[id] ?? id;
  assert.deepEqual(flagText([], name), { text: "", tooltip: "" });
  assert.deepEqual(flagText([{ sessionId: "s1", reason: "permission", message: "pi wants to edit a.rs", at: 1 }], name), {
    text: "$(bell-dot) Pi: fix the tests waits for your approval",
    tooltip: "fix the tests waits for your approval: pi wants to edit a.rs\nClick to open",
  });
  assert.deepEqual(
    flagText(
      [
        { sessionId: "s2", reason: "finished", message: "", at: 2 },
        { sessionId: "s1", reason: "later-reason", message: "x", at: 1 },
      ],
      name,
    ),
    { text: "$(bell-dot) Pi: 2 sessions need you", tooltip: "hello finished\nfix the tests later-reason: x\nClick to open" },
  );
});

test("the chat view's badge counts the open questions and a finished or failed flag of its session", () => {
  const none = { permission: 0, question: 0 };
  assert.equal(viewBadge("hello", none, undefined), undefined, "nothing needs the user: no badge");
  assert.deepEqual(viewBadge("hello", { permission: 1, question: 0 }, undefined), { value: 1, tooltip: "hello waits for your approval" });
  // A question's own flag (raised when the panel was hidden) is the question: counted once.
  assert.deepEqual(viewBadge("hello", { permission: 1, question: 0 }, { sessionId: "s1", reason: "permission", message: "pi wants to edit a.rs", at: 1 }), {
    value: 1,
    tooltip: "hello waits for your approval",
  });
  assert.deepEqual(viewBadge("hello", { permission: 2, question: 1 }, undefined), { value: 3, tooltip: "hello waits for your approval (2 questions)\nhello asks you" });
  assert.deepEqual(viewBadge("hello", none, { sessionId: "s1", reason: "finished", message: "Done pausing.", at: 1 }), { value: 1, tooltip: "hello finished: Done pausing." });
  assert.deepEqual(viewBadge("hello", { permission: 0, question: 1 }, { sessionId: "s1", reason: "failed", message: "HTTP 500", at: 1 }), { value: 2, tooltip: "hello asks you\nhello failed: HTTP 500" });
  assert.deepEqual(viewBadge("hello", none, { sessionId: "s1", reason: "later-reason", message: "", at: 1 }), { value: 1, tooltip: "hello later-reason" });
});

test("a session's display name: its name, else its first prompt, else its id", () => {
  const n = new SessionNames();
  const changed: string[] = [];
  n.onChange = (id) => changed.push(id);
  assert.equal(n.get("0123456789abcdef"), "session 01234567");
  n.fromEvent({ sessionId: "a", event: { type: "message_start", message: { role: "user", content: [{ type: "text", text: "  fix\nthe   failing tests in the parser module please, all of them" }] } } });
  assert.equal(n.get("a"), "fix the failing tests in the parser mod…");
  n.fromEvent({ sessionId: "a", event: { type: "message_start", message: { role: "user", content: "a later prompt" } } });
  assert.equal(n.get("a"), "fix the failing tests in the parser mod…", "the first prompt names it");
  n.fromState({ sessionId: "a", sessionName: "Parser fixes" });
  assert.equal(n.get("a"), "Parser fixes");
  n.fromList([{ sessionId: "b", firstPrompt: "hello" }, { sessionId: "c", name: "named" }]);
  assert.deepEqual([n.get("b"), n.get("c")], ["hello", "named"]);
  n.setName("c", "named");
  assert.deepEqual(changed, ["a", "a", "b", "c"]);
});

test("session times read as people say them", () => {
  const now = Date.UTC(2026, 11, 2, 12, 0, 0);
  assert.deepEqual(
    [30e3, 5 * 60e3, 3 * 3600e3, 30 * 3600e3].map((d) => relativeTime(now - d, now)),
    ["just now", "5 min ago", "3 h ago", "yesterday"],
  );
  assert.equal(relativeTime(now - 5 * 86400e3, now), new Date(now - 5 * 86400e3).toLocaleDateString());
});
