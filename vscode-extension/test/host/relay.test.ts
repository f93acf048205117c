// Relay batching (src/extension/relay.ts): ≤ 60 posts per second, arrival order, routing by
// sessionId, and the backlog a new session's panel gets.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Batcher, Router, MIN_POST_INTERVAL_MS, type Clock, type Note, type RouteTarget } from "../../src/extension/relay";

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

const delta = (i: number): Note => ({
  method: "agent/event",
  params: { sessionId: "s1", runId: "r1", event: { type: "message_update", assistantMessageEvent: { type: "text_delta", delta: `d${i}` } } },
});

test("500 deltas per second for 2 s: at most 60 posts per second, every delta once, in order", () => {
  const clock = new FakeClock();
  const posts: { at: number; message: any }[] = [];
  const b = new Batcher((message) => posts.push({ at: clock.t, message }), clock);
  for (let i = 0; i < 1000; i++) {
    b.push(delta(i));
    clock.advance(2); // 500 per second
  }
  clock.advance(100);
  const seen = posts.flatMap((p) => p.message.items.map((n: Note) => n.params.event.assistantMessageEvent.delta));
  assert.deepEqual(seen, Array.from({ length: 1000 }, (_, i) => `d${i}`));
  for (let i = 1; i < posts.length; i++) {
    assert.ok(posts[i].at - posts[i - 1].at >= MIN_POST_INTERVAL_MS - 1e-9, `posts ${i - 1} and ${i} are ${posts[i].at - posts[i - 1].at} ms apart`);
  }
  // Any one-second window holds at most 60 posts.
  for (const p of posts) {
    const inWindow = posts.filter((q) => q.at >= p.at && q.at < p.at + 1000).length;
    assert.ok(inWindow <= 60, `${inWindow} posts in the second from ${p.at} ms`);
  }
  assert.ok(posts.length >= 110 && posts.length <= 122, `${posts.length} posts for 2 s of streaming`);
  assert.equal(b.posts, posts.length);
  assert.equal(b.notes, 1000);
  assert.ok(b.maxPostsPerSecond <= 60 && b.maxPostsPerSecond >= 55, `max ${b.maxPostsPerSecond} posts in a second`);
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
    { type: "notifications", items: [delta(1), delta(2)] },
    { type: "response", requestId: 7, result: { ok: true } },
  ]);
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
