// Compact deltas (src/extension/deltas.ts): `agent/delta [ref, seq, contentIndex, delta]`
// expanded by the documented rule give, as whole values, the `agent/event` params a client
// without compact deltas gets; full events lose `ref`. Two sessions interleaved, thinking,
// text and tool-call argument deltas, a new run and a new message.
import { test } from "node:test";
import assert from "node:assert/strict";
import { DeltaExpander } from "../../src/extension/deltas";

const ev = (sessionId: string, runId: string, seq: number, event: unknown) => ({ sessionId, runId, seq, event });
const up = (type: string, contentIndex: number, more: Record<string, unknown> = {}) => ({ type: "message_update", assistantMessageEvent: { type, contentIndex, ...more } });
const assistant = { role: "assistant", content: [], api: "anthropic-messages", provider: "mock", model: "m", usage: {}, stopReason: "stop", timestamp: 1 };

/** What a client without compact deltas receives (agent/event params, in order). */
const FULL = [
  ev("A", "r1", 1, { type: "agent_start" }),
  ev("A", "r1", 2, { type: "message_start", message: assistant }),
  ev("A", "r1", 3, up("thinking_start", 0)),
  ev("A", "r1", 4, up("thinking_delta", 0, { delta: "t0000001" })),
  ev("B", "r9", 1, { type: "agent_start" }),
  ev("B", "r9", 2, { type: "message_start", message: assistant }),
  ev("B", "r9", 3, up("text_start", 0)),
  ev("A", "r1", 5, up("thinking_delta", 0, { delta: "\"é\\\n✓" })),
  ev("B", "r9", 4, up("text_delta", 0, { delta: "b-text01" })),
  ev("A", "r1", 6, up("text_start", 1)),
  ev("A", "r1", 7, up("text_delta", 1, { delta: "a-text01" })),
  ev("A", "r1", 8, up("toolcall_start", 2, { id: "call_1", name: "read" })),
  ev("A", "r1", 9, up("toolcall_delta", 2, { delta: "{\"path\"" })),
  ev("A", "r1", 10, up("toolcall_delta", 2, { delta: ":\"x\"}" })),
  ev("A", "r1", 11, { type: "message_start", message: assistant }),
  ev("A", "r1", 12, up("text_start", 0)),
  ev("A", "r1", 13, up("text_delta", 0, { delta: "second" })),
  ev("A", "r2", 14, { type: "agent_start" }),
  ev("A", "r2", 15, up("text_delta", 0, { delta: "run two" })),
];

/** The same as a client that asked for compact deltas receives it (method, params). */
const COMPACT: { method: string; params: any }[] = [];
{
  const refs: Record<string, number> = { A: 1, B: 2 };
  for (const p of FULL) {
    const a = (p.event as any).assistantMessageEvent;
    if (a?.type?.endsWith("_delta")) COMPACT.push({ method: "agent/delta", params: [refs[p.sessionId], p.seq, a.contentIndex, a.delta] });
    else COMPACT.push({ method: "agent/event", params: { ...p, ref: refs[p.sessionId] } });
  }
}

test("compact deltas expand into the very events a full client gets", () => {
  const x = new DeltaExpander();
  const got = COMPACT.map((n) => (n.method === "agent/delta" ? x.expand(n.params) : x.event(n.params)));
  assert.deepEqual(got, FULL);
  assert.equal(x.expanded, 8);
});

test("a delta whose session or block was never announced is refused, not guessed", () => {
  const x = new DeltaExpander();
  assert.deepEqual(x.expand([1, 4, 0, "x"]), new Error("agent/delta: unknown session ref 1 or block 0"));
  x.event({ sessionId: "A", runId: "r1", seq: 1, ref: 1, event: { type: "message_start", message: assistant } });
  assert.deepEqual(x.expand([1, 2, 0, "x"]), new Error("agent/delta: unknown session ref 1 or block 0"));
  assert.deepEqual(x.expand({ ref: 1 }), new Error('agent/delta: expected [ref, seq, contentIndex, delta], got {"ref":1}'));
  // Full events without ref (a server not asked for compact deltas) pass unchanged.
  const plain = { sessionId: "A", runId: "r1", seq: 3, event: { type: "agent_end", messages: [] } };
  assert.equal(x.event(plain), plain);
});

