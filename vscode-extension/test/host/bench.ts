// Host-side benchmark (run with scripts/bench-host.mjs): the relay's cost per notification and
// the review tracker's cost per keystroke in a large file with many agent hunks.
import { Batcher, Router, type Clock, type Note } from "../../src/extension/relay";
import { FileChanges } from "../../src/extension/hunks";
import { vscodePostMessage } from "./vscode-post";

/** CPU time of this thread (process when Node lacks threadCpuUsage), in ms: wall time counts
 * every preemption on a loaded machine. */
const cpu: () => number =
  typeof (process as any).threadCpuUsage === "function"
    ? () => {
        const u = (process as any).threadCpuUsage();
        return (u.user + u.system) / 1000;
      }
    : () => {
        const u = process.cpuUsage();
        return (u.user + u.system) / 1000;
      };

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

// 1. Relay: 100,000 text deltas routed to one of two panels, batched (a virtual clock moving
// 2 ms per event = 500/s) and posted through a replica of VS Code's postMessage serialisation
// (vscode-post.ts). Counted: routing, batching, coalescing, packing and VS Code's serialisation
// of every post (not the socket write nor the webview's side).
function relayRun(n: number, opts: { packing: boolean; hidden?: boolean }): { msPer1000: number; posts: number; notesPosted: number; bytes: number; maxPerSecond: number } {
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
    const b = new Batcher((m) => (bytes += vscodePostMessage(m)), clock);
    b.packing = opts.packing;
    if (opts.hidden && sessionId === "s2") b.pause();
    batchers.push(b);
    router.add({ sessionId, awaitingNewSession: false, deliver: (note) => b.push(note) });
  }
  // Every 50th event ends a text block and starts the next (so merging meets block ends).
  const notes: Note[] = Array.from({ length: n }, (_, i) => ({
    method: "agent/event",
    params: {
      sessionId: i % 4 === 0 ? "s2" : "s1",
      runId: "r",
      event: { type: "message_update", assistantMessageEvent: i % 50 === 49 ? { type: "text_end", contentIndex: 0, content: "…" } : { type: "text_delta", contentIndex: 0, delta: `word${i} ` } },
    },
  }));
  const t0 = cpu();
  for (const note of notes) {
    router.route(note);
    t += 2;
    for (let i = 0; i < timers.length; ) {
      if (timers[i].at <= t) timers.splice(i, 1)[0].fn();
      else i++;
    }
  }
  for (const b of batchers) b.resume();
  for (const b of batchers) b.flush();
  const ms = cpu() - t0;
  if (bytes === 0) throw new Error("nothing posted");
  return {
    msPer1000: (ms / n) * 1000,
    posts: batchers.reduce((a, b) => a + b.posts, 0),
    notesPosted: batchers.reduce((a, b) => a + b.notesPosted, 0),
    bytes,
    maxPerSecond: Math.max(...batchers.map((b) => b.maxPostsPerSecond)),
  };
}

// 2. Review: a 5,000-line file, one agent edit changing every 100th line (50 hunks), then
// 2,000 keystrokes of the user's between the hunks.
function hunksRun(): { msPerKeystroke: number; msHunks: number } {
  const lines = Array.from({ length: 5000 }, (_, i) => `line ${i} of the file with some text`);
  const before = lines.join("\n") + "\n";
  const after = lines.map((l, i) => (i % 100 === 50 ? l.toUpperCase() : l)).join("\n") + "\n";
  const f = FileChanges.fromAgentEdit(before, after, "call_1");
  const t0 = cpu();
  if (f.hunks().length !== 50) throw new Error(`expected 50 hunks, got ${f.hunks().length}`);
  const msHunks = cpu() - t0;
  const starts: number[] = [];
  for (let i = 0, at = 0; i < 5000; i++) {
    starts.push(at);
    at = f.current.indexOf("\n", at) + 1;
  }
  const t1 = cpu();
  const n = 2000;
  for (let k = 0; k < n; k++) {
    // Type at the start of line 10 + (k % 40) * 100 (never a hunk line), then ask for the
    // hunks (as the CodeLens provider does).
    const line = 10 + (k % 40) * 100;
    f.userChanges([{ offset: starts[line], length: 0, text: "x" }]);
    for (let j = line + 1; j < starts.length; j++) starts[j]++;
    f.hunks();
  }
  const msPerKeystroke = (cpu() - t1) / n;
  if (f.hunks().length !== 50) throw new Error("typing changed the hunks");
  // The shifted hunks equal a fresh diff of the same texts.
  const fresh = new FileChanges(f.base, f.current).hunks();
  if (JSON.stringify(fresh) !== JSON.stringify(f.hunks())) throw new Error("shifted hunks differ from a fresh diff");
  return { msPerKeystroke, msHunks };
}

const hunks: ReturnType<typeof hunksRun>[] = [];
for (let i = 0; i < 5; i++) hunks.push(hunksRun());
for (const [name, opts] of [
  ["plain", { packing: false }],
  ["packed", { packing: true }],
  ["packed, s2 hidden", { packing: true, hidden: true }],
] as const) {
  const runs: ReturnType<typeof relayRun>[] = [];
  for (let i = 0; i < 5; i++) runs.push(relayRun(100_000, opts));
  const r = runs[0];
  console.log(
    `relay (${name}): ${median(runs.map((x) => x.msPer1000)).toFixed(3)} ms CPU per 1,000 notifications (median of 5; route + batch + VS Code's postMessage serialisation), ` +
      `${r.posts} posts carrying ${r.notesPosted} notifications (${(r.bytes / 1e6).toFixed(1)} MB) for 200 s of streaming at 500 events/s, max ${r.maxPerSecond} posts/s per panel`,
  );
}
console.log(`hunks: first diff of a 5,000-line file with 50 hunks ${median(hunks.map((h) => h.msHunks)).toFixed(2)} ms; per keystroke (change + hunks) ${median(hunks.map((h) => h.msPerKeystroke)).toFixed(3)} ms CPU (median of 5)`);
