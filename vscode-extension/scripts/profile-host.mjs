// Where code-server's extension host spends its CPU while a burst streams (VP7): the whole
// extension in code-server as the e2e suite runs it (test/e2e/harness.mjs: the .vsix, the real
// pi-lsp, the loopback model), the e2e burst ("many …": 6,000 one-word deltas at 500 per
// second) sent RUNS times, and for each burst:
//   - the extension host's own figures (PI_VSCODE_STATS: notifications, posts, the measured
//     sections on the exact thread clock, as the VP7 test prints them);
//   - the extension host's main thread's CPU from the kernel (/proc/PID/task/PID/schedstat, in
//     nanoseconds) and the whole process's (every thread: GC helpers, libuv's pool), against the
//     same span with nothing streaming;
//   - a V8 CPU profile of the host (its inspector opened by the workbench URL's `inspect-extensions` payload, sampled every 100 µs),
//     written as HOST-<n>.cpuprofile and summarized: self time per function and per source.
// Usage (the environment of scripts/test: CODE_SERVER_BIN, CODE_SERVER_NODE, PI_VSIX, PI_LSP_BIN,
// PI_MOCK_MODEL_BIN; run it with Node ≥ 22 for its WebSocket, e.g. $CODE_SERVER_NODE):
//   node scripts/profile-host.mjs [--runs N] [--out DIR] [--no-profile]
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import { runCommand, startWorkbench, until, waitChatFrame } from "../test/e2e/harness.mjs";
import { MANY_WORDS } from "../test/e2e/model-script.mjs";

const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const RUNS = Number(arg("--runs", "3"));
const OUT = path.resolve(arg("--out", "dist/profile"));
const PROFILE = !process.argv.includes("--no-profile");
fs.mkdirSync(OUT, { recursive: true });

async function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Processes under `root` (pid → {ppid, cmd}). */
function descendants(root) {
  const all = new Map();
  for (const d of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const cmd = fs.readFileSync(`/proc/${d}/cmdline`, "utf8").replace(/\0/g, " ");
      all.set(Number(d), { ppid, cmd });
    } catch {}
  }
  const out = new Map();
  const walk = (p) => {
    for (const [pid, x] of all) if (x.ppid === p && !out.has(pid)) (out.set(pid, x), walk(pid));
  };
  walk(root);
  return out;
}

/** CPU ns of the main thread and of all threads of `pid` (schedstat: exact run time). */
function cpuNs(pid) {
  const main = Number(fs.readFileSync(`/proc/${pid}/task/${pid}/schedstat`, "utf8").split(" ")[0]);
  let all = 0;
  for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      all += Number(fs.readFileSync(`/proc/${pid}/task/${t}/schedstat`, "utf8").split(" ")[0]);
    } catch {}
  }
  return { main, all };
}

/** A minimal CDP client over the inspector's WebSocket. */
async function cdp(port) {
  const list = await (await fetch(`http://127.0.0.1:${port}/json/list`)).json();
  const ws = new WebSocket(list[0].webSocketDebuggerUrl);
  await new Promise((r, j) => ((ws.onopen = r), (ws.onerror = j)));
  let id = 0;
  const waiting = new Map();
  ws.onmessage = (m) => {
    const msg = JSON.parse(m.data);
    if (msg.id && waiting.has(msg.id)) {
      const w = waiting.get(msg.id);
      waiting.delete(msg.id);
      if (msg.error) w.reject(new Error(JSON.stringify(msg.error)));
      else w.resolve(msg.result);
    }
  };
  return {
    send: (method, params = {}) =>
      new Promise((resolve, reject) => {
        const i = ++id;
        waiting.set(i, { resolve, reject });
        ws.send(JSON.stringify({ id: i, method, params }));
      }),
    close: () => ws.close(),
  };
}

/** Self time per function and per source file of a .cpuprofile, in ms. */
function summarize(profile) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map();
  const dt = profile.timeDeltas;
  for (let i = 0; i < profile.samples.length; i++) {
    const n = byId.get(profile.samples[i]);
    const next = dt[i + 1] ?? 0;
    self.set(n.id, (self.get(n.id) ?? 0) + next / 1000);
  }
  const fn = new Map();
  const file = new Map();
  for (const [id, ms] of self) {
    const cf = byId.get(id).callFrame;
    const src = cf.url ? cf.url.replace(/^.*\/(node_modules|out|dist|extensions)\//, "$1/") : cf.functionName.startsWith("(") ? cf.functionName : "(native)";
    const k = `${cf.functionName || "(anonymous)"}  ${src}:${cf.lineNumber + 1}`;
    fn.set(k, (fn.get(k) ?? 0) + ms);
    file.set(src, (file.get(src) ?? 0) + ms);
  }
  // Inclusive time per function (a function on the stack twice counted once).
  const incl = new Map();
  const key = (n) => `${n.callFrame.functionName || "(anonymous)"}  ${n.callFrame.url ? n.callFrame.url.replace(/^.*\/(node_modules|out|dist|extensions)\//, "$1/") : ""}:${n.callFrame.lineNumber + 1}`;
  const walk = (n, onStack) => {
    let total = self.get(n.id) ?? 0;
    const k = key(n);
    const fresh = !onStack.has(k);
    if (fresh) onStack.add(k);
    for (const c of n.children ?? []) total += walk(byId.get(c), onStack);
    if (fresh) {
      onStack.delete(k);
      incl.set(k, (incl.get(k) ?? 0) + total);
    }
    return total;
  };
  walk(profile.nodes[0], new Set());
  const top = (m, n) => [...m].sort((a, b) => b[1] - a[1]).slice(0, n);
  return { fn: top(fn, 45), file: top(file, 25), incl: top(incl, 60), total: [...self.values()].reduce((a, b) => a + b, 0) };
}

async function frameText(frame) {
  return (await frame.locator("body").innerText()).replace(/\u00a0/g, " ");
}

async function send(frame, text) {
  const box = frame.locator('textarea[aria-label="Message"]');
  await box.click();
  await box.fill(text);
  await box.press("Enter");
}

const inspectPort = await freePort();
const wb = await startWorkbench({ files: { "notes.txt": "alpha\n" }, payload: PROFILE ? [["inspect-extensions", String(inspectPort)]] : null });
try {
  const { page } = wb;
  await page.locator('.activitybar [aria-label^="Pi"]').first().click();
  let chat = await waitChatFrame(page);
  await until("the status bar item", async () => (await page.locator(".statusbar-item", { hasText: "pi" }).count()) > 0);
  await send(chat, "hello world");
  await until("the first answer", async () => (await frameText(chat)).includes("That is all."), 60_000);
  const hosts = [...descendants(wb.serverPid)].filter(([, x]) => /extensionHost/.test(x.cmd));
  if (hosts.length !== 1) throw new Error(`extension hosts: ${hosts.map(([p, x]) => `${p} ${x.cmd}`).join("; ")}`);
  const host = hosts[0][0];
  console.log(`extension host ${host}: ${hosts[0][1].cmd.slice(0, 200)}`);
  // The inspector: on the payload's port when the workbench passed it on, else opened by
  // SIGUSR1 (Node's default port 9229).
  let client = null;
  if (PROFILE) {
    try {
      client = await cdp(inspectPort);
    } catch {
      process.kill(host, "SIGUSR1");
      client = await until("the host's inspector", () => cdp(9229).catch(() => null), 10_000);
    }
  }
  // Idle: the same host with nothing streaming, 5 s.
  const i0 = cpuNs(host);
  await new Promise((r) => setTimeout(r, 5000));
  const i1 = cpuNs(host);
  const idlePerS = { main: (i1.main - i0.main) / 5e6, all: (i1.all - i0.all) / 5e6 };
  console.log(`idle: main thread ${idlePerS.main.toFixed(2)} ms/s, process ${idlePerS.all.toFixed(2)} ms/s`);
  for (let run = 1; run <= RUNS; run++) {
    await runCommand(page, "Pi: New Session");
    await new Promise((r) => setTimeout(r, 1000));
    chat = chat.isDetached() ? await waitChatFrame(page) : chat;
    const before = wb.stats();
    const vb = before.panels.find((p) => p.kind === "view");
    if (client) {
      await client.send("Profiler.enable");
      await client.send("Profiler.setSamplingInterval", { interval: 100 });
      await client.send("Profiler.start");
    }
    const c0 = cpuNs(host);
    const t0 = Date.now();
    await send(chat, "many words please");
    await until("the end of the burst", async () => (await frameText(chat)).includes(`w${MANY_WORDS - 1} END`), 120_000);
    const stats = await until("the host's figures", async () => {
      const s = wb.stats();
      return s.notesRelayed > before.notesRelayed && / · idle$/.test(s.status) && s;
    }, 10_000);
    const c1 = cpuNs(host);
    const secs = (Date.now() - t0) / 1000;
    let prof = null;
    if (client) {
      prof = (await client.send("Profiler.stop")).profile;
      fs.writeFileSync(path.join(OUT, `HOST-${run}.cpuprofile`), JSON.stringify(prof));
    }
    const v = stats.panels.find((p) => p.kind === "view");
    const notes = stats.notesRelayed - before.notesRelayed;
    const posts = v.posts - vb.posts;
    const routing = stats.hostCpuMs - before.hostCpuMs;
    const postMs = (v.batchCpuMs ?? v.postCpuMs) - (vb.batchCpuMs ?? vb.postCpuMs);
    // One clock call per section (the main build timed each notification and each post).
    const clockMs = (notes + (v.batchSections === undefined ? posts : v.batchSections - vb.batchSections)) * stats.cpuCallMs;
    const mainMs = (c1.main - c0.main) / 1e6;
    const allMs = (c1.all - c0.all) / 1e6;
    console.log(
      `run ${run}: ${secs.toFixed(1)} s, ${notes} notifications → ${v.notesPosted - vb.notesPosted} posted in ${posts} posts (${v.packedPosts - vb.packedPosts} packed, ${((v.packedBytes - vb.packedBytes) / 1e3).toFixed(0)} kB), max ${v.maxPostsPerSecond}/s\n` +
        `  sections: routing ${routing.toFixed(1)} ms + batching and posting ${postMs.toFixed(1)} ms − clock ${clockMs.toFixed(1)} ms = ${(routing + postMs - clockMs).toFixed(1)} ms → ${(((routing + postMs - clockMs) / MANY_WORDS) * 1000).toFixed(2)} ms per 1,000 deltas, ${(((routing + postMs - clockMs) / notes) * 1000).toFixed(2)} per 1,000 notifications\n` +
        `  kernel: main thread ${mainMs.toFixed(1)} ms (idle for as long: ${(idlePerS.main * secs).toFixed(1)}), process ${allMs.toFixed(1)} ms (idle ${(idlePerS.all * secs).toFixed(1)}) → main thread above idle ${(((mainMs - idlePerS.main * secs) / MANY_WORDS) * 1000).toFixed(2)} ms per 1,000 deltas`,
    );
    if (prof) {
      const s = summarize(prof);
      console.log(`  profile: ${s.total.toFixed(1)} ms sampled; by source:`);
      for (const [k, ms] of s.file) console.log(`    ${ms.toFixed(1).padStart(8)}  ${k}`);
      console.log(`  by function (self):`);
      for (const [k, ms] of s.fn) console.log(`    ${ms.toFixed(1).padStart(8)}  ${k}`);
      console.log(`  by function (inclusive):`);
      for (const [k, ms] of s.incl) console.log(`    ${ms.toFixed(1).padStart(8)}  ${k}`);
    }
  }
  client?.close();
} finally {
  await wb.close();
}
