// Relay batching (src/extension/relay.ts): ≤ 60 posts per second, arrival order, routing by
// sessionId, and the backlog a new session's panel gets.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Batcher, Router, HIDDEN_BACKLOG_MAX, MIN_POST_INTERVAL_MS, STREAM_POST_INTERVAL_MS, wasiThreadClock, type Clock, type Note, type RouteTarget } from "../../src/extension/relay";

/** A virtual clock: timers run when the test advances time. */
class FakeClock implements Clock {
  t = 0;
  private timers: { at: number; fn: () => void; id: number }[] = [];
  private next = 1;
  now() {
    return this.t;
  }
  setTimeout(fn: () => void, ms: number) {
    const id = this.next++;
    this.timers.push({ at: this.t + ms, fn, id });
    return id;
  }
  clearTimeout(h: unknown) {
    this.timers = this.timers.filter((x) => x.id !== h);
  }
  advance(ms: number) {
    const end = this.t + ms;
    for (;;) {
      this.timers.sort((a, b) => a.at - b.at);
      const first = this.timers[0];
      if (!first || first.at > end) break;
      this.timers.shift();
      this.t = Math.max(this.t, first.at);
      first.fn();
    }
    this.t = end;
  }
}

const delta = (i: number, text = `d${i}`, contentIndex = 0, type = "text_delta"): Note => ({
  method: "agent/event",
  params: { sessionId: "s1", runId: "r1", event: { type: "message_update", assistantMessageEvent: { type, contentIndex, delta: text } } },
});
const event = (type: string, extra: Record<string, unknown> = {}): Note => ({ method: "agent/event", params: { sessionId: "s1", runId: "r1", event: { type, ...extra } } });
const toolUpdate = (id: string, out: string): Note => event("tool_execution_update", { toolCallId: id, toolName: "bash", partialResult: { content: [{ type: "text", text: out }] } });

test("500 deltas per second for 2 s: one post per stream interval (5 per second), the text whole and in order, one merged delta per post", () => {
  const clock = new FakeClock();
  const posts: { at: number; message: any }[] = [];
  const b = new Batcher((message) => posts.push({ at: clock.t, message }), clock);
  for (let i = 0; i < 1000; i++) {
    b.push(delta(i));
    clock.advance(2); // 500 per second
  }
  clock.advance(100);
  const seen = posts.flatMap((p) => p.message.items.map((n: Note) => n.params.event.assistantMessageEvent.delta));
  assert.equal(seen.join(""), Array.from({ length: 1000 }, (_, i) => `d${i}`).join(""));
  assert.equal(seen.length, posts.length, "each post carries one delta (the merged ones)");
  assert.equal(STREAM_POST_INTERVAL_MS, 200);
  for (let i = 1; i < posts.length; i++) {
    assert.ok(posts[i].at - posts[i - 1].at >= STREAM_POST_INTERVAL_MS - 1e-9, `posts ${i - 1} and ${i} are ${posts[i].at - posts[i - 1].at} ms apart`);
  }
  // The first delta went at once; any one-second window holds at most 5 posts.
  assert.equal(posts[0].at, 0);
  for (const p of posts) {
    const inWindow = posts.filter((q) => q.at >= p.at && q.at < p.at + 1000).length;
    assert.ok(inWindow <= 5, `${inWindow} posts in the second from ${p.at} ms`);
  }
  assert.ok(posts.length >= 10 && posts.length <= 11, `${posts.length} posts for 2 s of streaming`);
  assert.equal(b.posts, posts.length);
  assert.equal(b.notes, 1000);
  assert.ok(b.maxPostsPerSecond === 5, `max ${b.maxPostsPerSecond} posts in a second`);
});

test("a lone notification after idle is posted in the same tick (no added frame of delay)", () => {
  const clock = new FakeClock();
  const posts: any[] = [];
  const b = new Batcher((m) => posts.push(m), clock);
  clock.advance(1000);
  b.push(delta(0));
  clock.advance(0);
  assert.deepEqual(posts, [{ type: "notifications", items: [delta(0)] }]);
});

test("a direct post (a response) flushes waiting notifications first", () => {
  const clock = new FakeClock();
  const posts: any[] = [];
  const b = new Batcher((m) => posts.push(m), clock);
  b.push(delta(0));
  clock.advance(0);
  b.push(delta(1));
  b.push(delta(2));
  b.direct({ type: "response", requestId: 7, result: { ok: true } });
  clock.advance(100);
  assert.deepEqual(posts, [
    { type: "notifications", items: [delta(0)] },
    { type: "notifications", items: [delta(1, "d1d2")] },
    { type: "response", requestId: 7, result: { ok: true } },
  ]);
});

test("while notifications wait for the stream interval, an answer goes within 18 ms, after them", () => {
  const clock = new FakeClock();
  const posts: { at: number; message: any }[] = [];
  const b = new Batcher((message) => posts.push({ at: clock.t, message }), clock);
  b.push(delta(0));
  clock.advance(5);
  b.push(delta(1));
  clock.advance(5);
  b.direct({ type: "response", requestId: 1, result: {} });
  clock.advance(30);
  assert.deepEqual(posts, [
    { at: 0, message: { type: "notifications", items: [delta(0)] } },
    { at: MIN_POST_INTERVAL_MS, message: { type: "notifications", items: [delta(1)] } },
    { at: MIN_POST_INTERVAL_MS, message: { type: "response", requestId: 1, result: {} } },
  ]);
  // Those two posts used two gaps; the next notification waits a whole stream interval.
  b.push(delta(2));
  clock.advance(STREAM_POST_INTERVAL_MS / 2);
  assert.equal(posts.length, 3);
  clock.advance(STREAM_POST_INTERVAL_MS);
  assert.deepEqual(posts[3], { at: MIN_POST_INTERVAL_MS * 2 + STREAM_POST_INTERVAL_MS, message: { type: "notifications", items: [delta(2)] } });
});

test("deltas merge only within one content block, and the shared notifications are never changed", () => {
  const clock = new FakeClock();
  const posts: any[] = [];
  const b = new Batcher((m) => posts.push(m), clock);
  b.push(event("turn_start"));
  clock.advance(0);
  const shared = [delta(0, "a"), delta(1, "b"), delta(2, "c", 1), delta(3, "t", 2, "thinking_delta"), delta(4, "u", 2, "thinking_delta"), event("message_end"), delta(5, "x"), delta(6, "y")];
  const copy = structuredClone(shared);
  for (const n of shared) b.push(n);
  const other = { ...delta(7, "z"), params: { ...delta(7, "z").params, runId: "r2" } };
  b.push(other);
  clock.advance(STREAM_POST_INTERVAL_MS);
  assert.deepEqual(posts, [
    { type: "notifications", items: [event("turn_start")] },
    { type: "notifications", items: [delta(0, "ab"), delta(2, "c", 1), delta(3, "tu", 2, "thinking_delta"), event("message_end"), delta(5, "xy"), other] },
  ]);
  assert.deepEqual(shared, copy, "a notification another panel also holds is left as it came");
  assert.equal(b.notes, 10);
  assert.equal(b.notesPosted, 7);
});

test("a tool's newer output replaces its older one that was not posted yet", () => {
  const clock = new FakeClock();
  const posts: any[] = [];
  const b = new Batcher((m) => posts.push(m), clock);
  b.push(event("turn_start"));
  clock.advance(0);
  b.push(toolUpdate("A", "1"));
  b.push(toolUpdate("B", "1"));
  b.push(toolUpdate("A", "1 2"));
  b.push(event("tool_execution_end", { toolCallId: "B" }));
  b.push(toolUpdate("A", "1 2 3"));
  clock.advance(STREAM_POST_INTERVAL_MS);
  assert.deepEqual(posts[1], { type: "notifications", items: [toolUpdate("B", "1"), toolUpdate("A", "1 2"), event("tool_execution_end", { toolCallId: "B" }), toolUpdate("A", "1 2 3")] });
});

test("a hidden panel gets nothing posted; on show, the coalesced backlog comes in one post", () => {
  const clock = new FakeClock();
  const posts: any[] = [];
  const b = new Batcher((m) => posts.push(m), clock);
  b.pause();
  for (let i = 0; i < 5000; i++) {
    b.push(delta(i, "w "));
    clock.advance(2);
  }
  b.push(event("message_end"));
  clock.advance(1000);
  assert.deepEqual(posts, []);
  b.resume();
  assert.deepEqual(posts, [{ type: "notifications", items: [delta(0, "w ".repeat(5000)), event("message_end")] }]);
  // A message to a hidden panel (an answer, a question) posts everything before it, in order.
  b.pause();
  b.push(event("turn_end"));
  b.direct({ type: "serverRequest", requestId: 1 });
  assert.deepEqual(posts.slice(1), [{ type: "notifications", items: [event("turn_end")] }, { type: "serverRequest", requestId: 1 }]);
});

test("the panel is told it was hidden and shown in order with the notifications (what came between was not seen)", () => {
  const clock = new FakeClock();
  const posts: any[] = [];
  const b = new Batcher((m) => posts.push(m), clock);
  b.push(event("agent_start"));
  clock.advance(MIN_POST_INTERVAL_MS + 1);
  b.push(delta(1)); // waits for the next window when the panel is hidden
  b.pauseAfter({ type: "visibility", visible: false });
  assert.deepEqual(posts, [
    { type: "notifications", items: [event("agent_start")] },
    { type: "notifications", items: [delta(1)] },
    { type: "visibility", visible: false },
  ]);
  assert.equal(b.paused, true);
  b.pauseAfter({ type: "visibility", visible: false }); // hidden already: nothing again
  b.push(event("agent_end"));
  const attention: Note = { method: "agent/attention", params: { sessionId: "s1", runId: "r1", reason: "finished", message: "Done." } };
  b.push(attention);
  clock.advance(1000);
  assert.equal(posts.length, 3, "nothing posted while hidden");
  b.resumeWith({ type: "visibility", visible: true });
  b.push(event("agent_start")); // after the show: after the message
  clock.advance(1000);
  assert.deepEqual(posts.slice(3), [
    { type: "notifications", items: [event("agent_end"), attention] },
    { type: "visibility", visible: true },
    { type: "notifications", items: [event("agent_start")] },
  ]);
  b.resumeWith({ type: "visibility", visible: true }); // shown already: nothing
  assert.equal(posts.length, 6);
  // Without a message (a webview that does not take them) the same as pause / resume.
  b.pauseAfter();
  b.push(event("turn_end"));
  assert.equal(posts.length, 6);
  b.resumeWith();
  assert.deepEqual(posts.slice(6), [{ type: "notifications", items: [event("turn_end")] }]);
});

test("a hidden backlog past its limit is dropped and the panel reloads its session when shown", () => {
  const clock = new FakeClock();
  const posts: any[] = [];
  let reloads = 0;
  const b = new Batcher((m) => posts.push(m), clock);
  b.onOverflow = () => {
    reloads++;
    b.direct({ type: "init" });
  };
  b.pause();
  for (let i = 0; i < HIDDEN_BACKLOG_MAX + 10; i++) b.push(event("turn_start", { i }));
  b.resume();
  clock.advance(100);
  assert.equal(reloads, 1);
  assert.deepEqual(posts, [{ type: "init" }]);
});

test("packed: one post carries the batch and the messages after it as JSON text", () => {
  const clock = new FakeClock();
  const posts: any[] = [];
  const b = new Batcher((m) => posts.push(m), clock);
  b.packing = true;
  const unpack = (m: any) => (m.type === "packed" ? JSON.parse(m.json) : [m]);
  b.push(event("turn_start"));
  clock.advance(0);
  // A lone notification is packed too (VS Code walks an object message value by value).
  assert.equal(posts.length, 1);
  assert.deepEqual(unpack(posts[0]), [{ type: "notifications", items: [event("turn_start")] }]);
  for (const t of ["a", "b", "c", "d"]) b.push(event("tool_execution_start", { toolCallId: t }));
  b.direct({ type: "response", requestId: 3, result: { text: "é ✓" } });
  clock.advance(100);
  assert.equal(posts.length, 2);
  assert.equal(typeof (posts[1] as any).json, "string");
  assert.deepEqual(unpack(posts[1]), [
    { type: "notifications", items: ["a", "b", "c", "d"].map((t) => event("tool_execution_start", { toolCallId: t })) },
    { type: "response", requestId: 3, result: { text: "é ✓" } },
  ]);
  assert.equal(b.packedPosts, 2);
  assert.equal(b.packedBytes, (posts[0] as any).json.length + (posts[1] as any).json.length);
});

function target(sessionId: string | null, got: Note[]): RouteTarget {
  return { sessionId, awaitingNewSession: false, deliver: (n) => got.push(n) };
}

test("notifications go to the panels of their session only", () => {
  const r = new Router({ now: () => 0 });
  const a: Note[] = [];
  const b: Note[] = [];
  const c: Note[] = [];
  r.add(target("s1", a));
  r.add(target("s2", b));
  r.add(target("s1", c));
  const n1 = { method: "agent/usage", params: { sessionId: "s1" } };
  const n2 = { method: "agent/usage", params: { sessionId: "s2" } };
  assert.equal(r.route(n1), 2);
  assert.equal(r.route(n2), 1);
  assert.deepEqual(a, [n1]);
  assert.deepEqual(c, [n1]);
  assert.deepEqual(b, [n2]);
});

test("a panel waiting for its new session gets the events that came before it attached", () => {
  let now = 0;
  const r = new Router({ now: () => now });
  const got: Note[] = [];
  const t = target(null, got);
  t.awaitingNewSession = true;
  r.add(t);
  const early = { method: "agent/event", params: { sessionId: "new", runId: "r", event: { type: "agent_start" } } };
  assert.equal(r.route(early), 0);
  assert.deepEqual(r.backlogOf("new"), [early]);
  r.attach(t, "new");
  const later = { method: "agent/event", params: { sessionId: "new", runId: "r", event: { type: "turn_start" } } };
  r.route(later);
  assert.deepEqual(got, [early, later]);
  assert.deepEqual(r.backlogOf("new"), []);
  // A panel that merely switches to a session (it loads history) gets no backlog.
  const other: Note[] = [];
  const t2 = target("s9", other);
  r.add(t2);
  r.route({ method: "agent/usage", params: { sessionId: "old" } });
  r.attach(t2, "old");
  assert.deepEqual(other, []);
  // Backlogs expire.
  r.route({ method: "agent/usage", params: { sessionId: "gone" } });
  now = 31_000;
  r.route({ method: "agent/usage", params: { sessionId: "other" } });
  assert.deepEqual(r.backlogOf("gone"), []);
});

test("answers posted during a stream still keep the panel within 60 posts per second", () => {
  const clock = new FakeClock();
  const b = new Batcher(() => {}, clock);
  for (let i = 0; i < 2000; i++) {
    b.push(delta(i));
    if (i % 100 === 0) b.direct({ type: "response", requestId: i, result: {} }); // 2.5 per second
    clock.advance(2);
  }
  clock.advance(100);
  assert.ok(b.maxPostsPerSecond <= 60, `${b.maxPostsPerSecond} posts in one second`);
});

test("the exact thread clock (WASI) times sections of microseconds, and a longer stretch within its wall time", () => {
  const now = wasiThreadClock();
  assert.ok(now, "node:wasi gives the thread's CPU-time clock");
  const spin = (ms: number) => {
    const end = performance.now() + ms;
    while (performance.now() < end);
  };
  // 200 sections of 20 µs of work each: every one reads more than 0 and less than a tick
  // (a preempted one could read less than its wall time, never more).
  const reads: number[] = [];
  for (let i = 0; i < 200; i++) {
    const t0 = now!();
    spin(0.02);
    reads.push(now!() - t0);
  }
  const sorted = [...reads].sort((a, b) => a - b);
  assert.ok(sorted[0]! > 0, `a 20 µs section read ${sorted[0]} ms`);
  assert.ok(sorted[100]! >= 0.01 && sorted[100]! < 0.5, `median section ${sorted[100]} ms`);
  // A longer stretch: within the wall time it took.
  const w0 = performance.now();
  const c0 = now!();
  spin(20);
  const cpu = now!() - c0;
  const wall = performance.now() - w0;
  // (Not much less either: on a loaded machine the thread gets a share of a core, so the floor
  // is low — a clock that never moved would read 0.)
  assert.ok(cpu <= wall + 0.05 && cpu >= 1, `20 ms of spinning: ${cpu} ms of CPU in ${wall} ms`);
});
