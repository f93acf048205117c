// The status bar item (src/extension/status.ts): `model · ctx% · $cost · state` of the active
// session, from what the host learns of it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { StatusBar, sandboxNote } from "../../src/extension/status";

const state = (extra: Record<string, unknown> = {}) => ({
  sessionId: "s1",
  model: { provider: "anthropic", id: "claude-sonnet-4-5", name: "Claude Sonnet 4.5", contextWindow: 200000 },
  thinkingLevel: "medium",
  isStreaming: false,
  isCompacting: false,
  ...extra,
});
const stats = (contextUsage: unknown, sessionCost = 0.4567) => ({
  sessionId: "s1",
  sessionFile: "/w/.pi/sessions/s1.jsonl",
  userMessages: 3,
  assistantMessages: 3,
  toolCalls: 2,
  toolResults: 2,
  totalMessages: 10,
  tokens: { input: 30000, output: 2000, cacheRead: 0, cacheWrite: 0, total: 32000 },
  cost: 0.3,
  sessionTokens: { input: 50000, output: 3000, cacheRead: 0, cacheWrite: 0, total: 53000 },
  sessionCost,
  contextUsage,
});

test("a session attached after a window reload: its context share and cost come from agent/session/stats", () => {
  const bar = new StatusBar();
  bar.setActive("s1");
  bar.state(state());
  assert.equal(bar.text, "$(hubot) Claude Sonnet 4.5 · –% · $0.00 · idle", "before the stats: nothing known yet");
  bar.stats(stats({ tokens: 45000, contextWindow: 200000, percent: 22.5 }));
  assert.equal(bar.text, "$(hubot) Claude Sonnet 4.5 · 23% · $0.46 · idle");
  // After a compaction the context is unknown until a response follows (nulls): "–%", the cost kept.
  bar.stats(stats({ tokens: null, contextWindow: 200000, percent: null }, 0.5));
  assert.equal(bar.text, "$(hubot) Claude Sonnet 4.5 · –% · $0.50 · idle");
  // Another session's stats change nothing shown.
  bar.stats({ ...stats({ tokens: 1000, contextWindow: 1000, percent: 100 }, 9), sessionId: "s2" });
  assert.equal(bar.text, "$(hubot) Claude Sonnet 4.5 · –% · $0.50 · idle");
  bar.dispose();
});

const ev = (type: string, extra: Record<string, unknown> = {}, runId = "r1") => ({ sessionId: "s1", runId, event: { type, ...extra } });

test("a manual compaction (a run of its own, no agent_end) ends idle; one inside a run goes back to running", () => {
  const bar = new StatusBar();
  bar.setActive("s1");
  bar.state(state());
  bar.notification("agent/event", ev("compaction_start", { reason: "manual" }, "c1"));
  assert.equal(bar.text, "$(sync~spin) Claude Sonnet 4.5 · –% · $0.00 · compacting");
  bar.notification("agent/event", ev("compaction_end", { reason: "manual", aborted: false, willRetry: false }, "c1"));
  assert.equal(bar.text, "$(hubot) Claude Sonnet 4.5 · –% · $0.00 · idle");
  // An automatic one inside a run.
  bar.notification("agent/event", ev("agent_start"));
  bar.notification("agent/event", ev("compaction_start", { reason: "threshold" }));
  assert.equal(bar.text, "$(sync~spin) Claude Sonnet 4.5 · –% · $0.00 · compacting");
  bar.notification("agent/event", ev("compaction_end", { reason: "threshold", aborted: false, willRetry: false }));
  assert.equal(bar.text, "$(sync~spin) Claude Sonnet 4.5 · –% · $0.00 · running");
  bar.notification("agent/event", ev("agent_end"));
  assert.equal(bar.text, "$(hubot) Claude Sonnet 4.5 · –% · $0.00 · idle");
  // A session opened while compacting (agent/state), then the compact request's answer.
  bar.state(state({ isCompacting: true }));
  assert.equal(bar.text, "$(sync~spin) Claude Sonnet 4.5 · –% · $0.00 · compacting");
  bar.compacted("s1");
  assert.equal(bar.text, "$(hubot) Claude Sonnet 4.5 · –% · $0.00 · idle");
  bar.dispose();
});

test("the tooltip says Windows has no sandbox, and nothing elsewhere", () => {
  assert.equal(sandboxNote("win32"), "\nNo OS sandbox on Windows: the agent's commands run with your permissions");
  assert.equal(sandboxNote("darwin"), "");
  assert.equal(sandboxNote("linux"), "");
});
