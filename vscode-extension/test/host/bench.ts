// Host-side benchmark (run with scripts/bench-host.mjs): the relay's cost per notification and
// the review tracker's cost per keystroke in a large file with many agent hunks.
import { Batcher, Router, type Clock, type Note } from "../../src/extension/relay";
import { FileChanges } from "../../src/extension/hunks";

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

// 1. Relay: 100,000 text deltas routed to one of two panels, batched (a virtual clock moving
// 2 ms per event = 500/s) and serialised as postMessage would (JSON.stringify).
function relayRun(n: number): { msPer1000: number; posts: number; maxPerSecond: number } {
  let t = 0;
  const timers: { at: number; fn: () => void }[] = [];
  const clock: Clock = {
    now: () => t,
    setTimeout: (fn, ms) => {
      const x = { at: t + ms, fn };
      timers.push(x);
      return x;
    },
    clearTimeout: (h) => {
      const i = timers.indexOf(h as any);
      if (i >= 0) timers.splice(i, 1);
    },
  };
  let bytes = 0;
  const router = new Router(clock);
  const batchers: Batcher[] = [];
  for (const sessionId of ["s1", "s2"]) {
    const b = new Batcher((m) => (bytes += JSON.stringify(m).length), clock);
    batchers.push(b);
    router.add({ sessionId, awaitingNewSession: false, deliver: (note) => b.push(note) });
  }
  const notes: Note[] = Array.from({ length: n }, (_, i) => ({
    method: "agent/event",
    params: { sessionId: i % 4 === 0 ? "s2" : "s1", runId: "r", event: { type: "message_update", assistantMessageEvent: { type: "text_delta", contentIndex: 0, delta: `word${i} ` } } },
  }));
  const t0 = performance.now();
  for (const note of notes) {
    router.route(note);
    t += 2;
    for (let i = 0; i < timers.length; ) {
      if (timers[i].at <= t) timers.splice(i, 1)[0].fn();
      else i++;
    }
  }
  for (const b of batchers) b.flush();
  const ms = performance.now() - t0;
  if (bytes === 0) throw new Error("nothing posted");
  return { msPer1000: (ms / n) * 1000, posts: batchers.reduce((a, b) => a + b.posts, 0), maxPerSecond: Math.max(...batchers.map((b) => b.maxPostsPerSecond)) };
}

// 2. Review: a 5,000-line file, one agent edit changing every 100th line (50 hunks), then
// 2,000 keystrokes of the user's between the hunks.
function hunksRun(): { msPerKeystroke: number; msHunks: number } {
  const lines = Array.from({ length: 5000 }, (_, i) => `line ${i} of the file with some text`);
  const before = lines.join("\n") + "\n";
  const after = lines.map((l, i) => (i % 100 === 50 ? l.toUpperCase() : l)).join("\n") + "\n";
  const f = FileChanges.fromAgentEdit(before, after, "call_1");
  const t0 = performance.now();
  if (f.hunks().length !== 50) throw new Error(`expected 50 hunks, got ${f.hunks().length}`);
  const msHunks = performance.now() - t0;
  const starts: number[] = [];
  for (let i = 0, at = 0; i < 5000; i++) {
    starts.push(at);
    at = f.current.indexOf("\n", at) + 1;
  }
  const t1 = performance.now();
  const n = 2000;
  for (let k = 0; k < n; k++) {
    // Type at the start of line 10 + (k % 40) * 100 (never a hunk line), then ask for the
    // hunks (as the CodeLens provider does).
    const line = 10 + (k % 40) * 100;
    f.userChanges([{ offset: starts[line], length: 0, text: "x" }]);
    for (let j = line + 1; j < starts.length; j++) starts[j]++;
    f.hunks();
  }
  const msPerKeystroke = (performance.now() - t1) / n;
  if (f.hunks().length !== 50) throw new Error("typing changed the hunks");
  // The shifted hunks equal a fresh diff of the same texts.
  const fresh = new FileChanges(f.base, f.current).hunks();
  if (JSON.stringify(fresh) !== JSON.stringify(f.hunks())) throw new Error("shifted hunks differ from a fresh diff");
  return { msPerKeystroke, msHunks };
}

const relay: ReturnType<typeof relayRun>[] = [];
for (let i = 0; i < 5; i++) relay.push(relayRun(100_000));
const hunks: ReturnType<typeof hunksRun>[] = [];
for (let i = 0; i < 5; i++) hunks.push(hunksRun());
console.log(`relay: ${median(relay.map((r) => r.msPer1000)).toFixed(3)} ms per 1,000 notifications (median of 5; route + batch + JSON serialise), ${relay[0].posts} posts for 200 s of streaming at 500 events/s, max ${relay[0].maxPerSecond} posts/s per panel`);
console.log(`hunks: first diff of a 5,000-line file with 50 hunks ${median(hunks.map((h) => h.msHunks)).toFixed(2)} ms; per keystroke (change + hunks) ${median(hunks.map((h) => h.msPerKeystroke)).toFixed(3)} ms (median of 5)`);
