/**
 * The performance figures of the VS Code issue (CLIENTS.md VP1–VP5), asserted in headless
 * Chromium on the production bundle. Each test prints its measured figures (`# perf …` lines).
 *
 * - 10,000-message session: last screen painted ≤ 400 ms after the history answer arrives,
 *   ≤ 1 MB posted to the webview for it, JS heap ≤ 150 MB, ≤ 5,000 DOM nodes; paging to the top:
 *   no task over PAGING_TASK_CPU_MS of CPU and still ≤ 5,000 nodes.
 * - Streaming 20,000 text deltas at 500/s (posted as the host does, ≤ 60 posts/s): a behaviour
 *   pass (at most one render per animation frame, no task over LONG_TASK_CPU_MS of CPU, DOM
 *   mutations only inside the streaming row, keystroke → next frame ≤ 16 ms median), then cost
 *   passes with nothing else in the page: the median of their main-thread CPU per delta, less
 *   the feeder's own, ≤ PER_DELTA_MS; at the end each finished block was rendered once and the
 *   final DOM equals a from-scratch render.
 *
 * Why CPU time and medians: the tests share two cores with other work. Wall time then measures
 * the machine (a descheduled task looks long, a pass gets fewer frames); the main thread's CPU
 * time measures the page's work, and the median of several passes drops one pass that a burst
 * of load slowed (caches, frequency) without hiding a regression, which slows every pass.
 * Load on the host's other guests slows every pass alike (the CPU time of the same work grew
 * 2.5× in a loaded run): the feeder in a blank page, run next to each cost pass, measures how
 * much slower the machine is than quiet, and the CPU bounds are held in quiet units
 * (FEEDER_QUIET_MS) — a regression still shows, as the panel's cost against the feeder's.
 * - Idle: 0 animation-frame callbacks and 0 timers over 5 s.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import type { Browser, Page, CDPSession } from "playwright-core";
import { launch, openPanel, type Panel, metrics, startTaskTrace, stopTaskTrace, cpuBetween, median, settled } from "./harness";
import { sessionEntries, historyPage, streamedAnswer } from "./generate";

let browser: Browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const SID = "019ad0c1-0000-7000-8000-00000000beef";
const model = { provider: "rec", id: "rec-1", name: "Recorded mock", api: "anthropic-messages", reasoning: true, input: ["text"], contextWindow: 200000, maxTokens: 8192, cost: { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 }, thinkingLevels: ["off", "low", "medium", "high"] };
const state = { sessionId: SID, sessionFile: "x.jsonl", model, thinkingLevel: "off", isStreaming: false, steeringMode: "one-at-a-time", followUpMode: "one-at-a-time", autoRetryEnabled: true, isRetrying: false, autoCompactionEnabled: true, isCompacting: false, isBashRunning: false, messageCount: 10000, pendingMessageCount: 0, approvalPolicy: "auto-edit" };

/** Main-thread CPU per text delta allowed, the median of the cost passes (issue target). */
const PER_DELTA_MS = 0.2;
/** Longest main-thread task allowed, in CPU time (issue target: 50 ms). Wall time grows with
 * the machine's load (CI and the developers share two cores; a descheduled task looks long), so
 * the bound is on the task's thread time from a Chromium trace; the wall figure is printed. */
const LONG_TASK_CPU_MS = 50;
/** Longest task while paging older history, CPU time (issue target: 50 ms). */
const PAGING_TASK_CPU_MS = 50;
/** From the history answer to the last screen painted (VP1), ms. */
const FIRST_SCREEN_MS = 400;
/** Panels opened at most to measure it (the best counts; see VP1). */
const FIRST_SCREEN_TRIES = 3;

function perf(line: string): void {
  console.log(`# perf ${line}`);
}

/** Opens a panel on `entries` and measures VP1's first screen: from the history answer
 * reaching the webview (the host relays the server's answer as it arrives) to the frame after
 * the last entry's row is in the DOM, as wall time and as the main thread's CPU time in it
 * (from a task trace); also from the host's init (two round trips through the test's host,
 * which is slower than VS Code's). */
async function firstScreen(entries: any[]): Promise<{ panel: Panel; ms: number; cpu: number; fromInit: number; posted: number }> {
  const panel = await openPanel(browser, {
    onRequest: (method, params) => {
      if (method === "agent/state") return state;
      if (method === "agent/model/list") return { models: [model] };
      if (method === "agent/session/history") return historyPage(SID, entries, params);
      throw { code: -32601, message: method };
    },
  });
  const page = panel.page;
  await page.evaluate(() => {
    (window as any).__long = [];
    new PerformanceObserver((l) => (window as any).__long.push(...l.getEntries().map((e) => e.duration))).observe({ type: "longtask", buffered: true });
  });
  const bytes0 = panel.bytesSent;
  await startTaskTrace(browser, page);
  const paintP = page.evaluate(
    (lastText) =>
      new Promise<number[]>((resolve) => {
        performance.mark("pi-sync");
        const tInit = performance.now();
        let t0 = -1;
        window.addEventListener(
          "message",
          (e) => {
            if (t0 < 0 && e.data?.type === "response" && Array.isArray(e.data.result?.entries)) t0 = performance.now();
          },
          true,
        );
        const check = () => {
          const rows = document.querySelectorAll(".rows > .row");
          const last = rows[rows.length - 1];
          if (last && last.textContent!.includes(lastText)) requestAnimationFrame(() => resolve([t0, performance.now(), tInit]));
          else requestAnimationFrame(check);
        };
        requestAnimationFrame(check);
      }),
    (entries.at(-1)!.message.content.find((b: any) => b.type === "text")?.text ?? "").slice(0, 30),
  );
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  const [t0, tPaint, tInit] = await paintP;
  const trace = await stopTaskTrace(browser, page);
  return { panel, ms: tPaint - t0, cpu: cpuBetween(trace, t0, tPaint), fromInit: tPaint - tInit, posted: panel.bytesSent - bytes0 };
}

test("VP1: a 10,000-message session opens with its last screen first, and pages in older ones", async () => {
  const entries = sessionEntries(10000);
  // Latency only grows with the machine's load (other processes on the two cores): the best of
  // up to FIRST_SCREEN_TRIES panels is compared with the bound; the work in each (CPU) must fit
  // in half of it.
  const tries: Awaited<ReturnType<typeof firstScreen>>[] = [];
  for (let i = 0; i < FIRST_SCREEN_TRIES; i++) {
    const t = await firstScreen(entries);
    tries.push(t);
    if (t.ms <= FIRST_SCREEN_MS) break;
    await t.panel.page.context().close();
  }
  const best = tries.reduce((a, b) => (b.ms < a.ms ? b : a));
  const { panel, ms, fromInit, posted } = tries.at(-1)!;
  const page = panel.page;
  const m = await metrics(panel.cdp);
  const nodes = await page.evaluate(() => document.getElementsByTagName("*").length);
  perf(`VP1 last screen ${ms.toFixed(0)} ms after the history answer (${fromInit.toFixed(0)} ms after init; tries ${tries.map((t) => `${t.ms.toFixed(0)} ms wall / ${t.cpu.toFixed(0)} ms CPU`).join(", ")}), posted ${(posted / 1024).toFixed(0)} KiB, heap ${(m.JSHeapUsedSize! / 1048576).toFixed(1)} MiB, DOM nodes ${m.Nodes} (elements ${nodes})`);
  for (const t of tries) assert.ok(t.cpu <= FIRST_SCREEN_MS / 2, `the last screen took ${t.cpu} ms of CPU`);
  assert.ok(best.ms <= FIRST_SCREEN_MS, `last screen after ${tries.map((t) => t.ms).join(", ")} ms`);
  assert.ok(posted <= 1024 * 1024, `${posted} bytes posted`);
  assert.ok(m.JSHeapUsedSize! <= 150 * 1048576, `heap ${m.JSHeapUsedSize}`);
  assert.ok(m.Nodes! <= 5000, `${m.Nodes} DOM nodes`);
  // At the bottom.
  const atBottom = await page.$eval("#transcript", (e) => e.scrollHeight - e.scrollTop - e.clientHeight < 4);
  assert.ok(atBottom, "opened at the bottom");
  // Scroll up through 40 older pages (2,000 entries), with the main thread's tasks traced.
  await startTaskTrace(browser, page);
  const historyCount = () => panel.requests.filter((q) => q.method === "agent/session/history").length;
  for (let i = 0; i < 40; i++) {
    const n = historyCount();
    await page.$eval("#transcript", (e) => (e.scrollTop = 0));
    const deadline = Date.now() + 2000;
    while (historyCount() === n && Date.now() < deadline) await page.waitForTimeout(20);
    await page.waitForTimeout(40);
  }
  const pages = panel.requests.filter((r) => r.method === "agent/session/history").length;
  const { tasks } = await stopTaskTrace(browser, page);
  const long = await page.evaluate(() => (window as any).__long as number[]);
  const longCpu = Math.max(0, ...tasks.map((t) => t.cpuMs));
  const m2 = await metrics(panel.cdp);
  const loaded = await page.evaluate(() => (window as any).__pi.store.order.length);
  perf(`VP1 paging: ${pages} history pages, ${loaded} items loaded, DOM nodes ${m2.Nodes}, heap ${(m2.JSHeapUsedSize! / 1048576).toFixed(1)} MiB, longest task ${longCpu.toFixed(1)} ms CPU (${Math.max(0, ...tasks.map((t) => t.wallMs)).toFixed(0)} ms wall; PerformanceObserver longtask max ${Math.max(0, ...long).toFixed(0)} ms)`);
  assert.ok(pages >= 20, `only ${pages} pages were loaded while scrolling up`);
  assert.ok(m2.Nodes! <= 5000, `${m2.Nodes} DOM nodes after paging`);
  assert.ok(longCpu <= PAGING_TASK_CPU_MS, `a task took ${longCpu} ms of CPU while paging`);
  // Every history request asked for the page before the oldest loaded entry.
  const reqs = panel.requests.filter((r) => r.method === "agent/session/history").map((r) => r.params);
  assert.deepEqual(reqs[0], { sessionId: SID, limit: 50 });
  for (let i = 1; i < reqs.length; i++) assert.equal(reqs[i].beforeEntryId, entries[entries.length - 50 * i]!.id);
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

/**
 * Installs the in-page host of the streaming tests: `__feed(from, to)` posts the text deltas
 * `[from, to)` at 500/s the way the extension host does (every 16 ms the deltas that are due,
 * ≤ 60 posts/s), then waits 120 ms (the last render lands in the pass) and resolves with the
 * wall time. The notification objects are built once, before any measurement, so a pass costs
 * the feeder only its timer and `postMessage`.
 */
async function installFeeder(page: Page, deltas: string[]): Promise<void> {
  await page.evaluate(
    ({ deltas, sid }) => {
      const w = window as any;
      w.__notes = deltas.map((d: string) => ({ method: "agent/event", params: { sessionId: sid, runId: "run1", event: { type: "message_update", assistantMessageEvent: { type: "text_delta", contentIndex: 0, delta: d } } } }));
      w.__feed = (from: number, to: number) =>
        new Promise<number>((resolve) => {
          const start = performance.now();
          let sent = from;
          const timer = setInterval(() => {
            const due = Math.min(to, from + Math.floor(((performance.now() - start) / 1000) * 500));
            if (due > sent) {
              window.postMessage({ type: "notifications", items: w.__notes.slice(sent, due) }, "*");
              sent = due;
            }
            if (sent >= to) {
              clearInterval(timer);
              const ms = performance.now() - start;
              setTimeout(() => resolve(ms), 120);
            }
          }, 16);
        });
    },
    { deltas, sid: SID },
  );
}

/** Main-thread CPU (CDP `ThreadTime`, ms) spent by `page` while `work` runs; `into` gets the
 * other metrics' differences (ms for durations, counts for counts). */
async function cpuOf(cdp: CDPSession, work: () => Promise<unknown>, into?: Record<string, number>): Promise<number> {
  const m0 = await metrics(cdp, false);
  await work();
  const m1 = await metrics(cdp, false);
  if (into) for (const k of Object.keys(m1)) into[k] = (into[k] ?? 0) + (m1[k]! - (m0[k] ?? 0)) * (k.endsWith("Duration") ? 1000 : 1);
  return (m1.ThreadTime! - m0.ThreadTime!) * 1000;
}

/** Deltas of the behaviour pass (instrumented: frames, mutations, typing, task trace). */
const BEHAVIOUR_DELTAS = 4000;
/** Cost passes after it (uninstrumented), each of PASS_DELTAS: 20,000 deltas in all (VP2). */
const COST_PASSES = 8;
const PASS_DELTAS = 2000;
/** The feeder's own main-thread CPU per delta in a blank page on a quiet machine of the CI's
 * kind (2 virtual cores; medians 0.066–0.100 ms in eight runs of this suite at load < 2), in ms.
 * The CPU time of the same work grows when other guests load the host's cores (shared caches and
 * cores; 0.212 ms at load 5, with the panel's own figure 0.10 → 0.23 ms): each cost pass is
 * paired with a feeder pass, and a pass whose feeder ran `k` > 1 times slower than this has its
 * figure divided by `k` — the bounds hold in this machine's units, never looser than the
 * targets on a machine as fast or faster. */
const FEEDER_QUIET_MS = 0.08;

test("VP2–VP4: 20,000 deltas at 500/s: CPU per delta, one render per frame, only the streaming row changes, typing stays fast", async () => {
  const total = BEHAVIOUR_DELTAS + COST_PASSES * PASS_DELTAS;
  const { text, deltas } = streamedAnswer(total);
  // The feeder's own cost (making the posts is the host's work, not the webview's): a pass in
  // a blank page next to each cost pass, subtracted per delta below; it is also the yardstick
  // of the machine's speed at the time (FEEDER_QUIET_MS).
  const feeder = await browser.newPage();
  await feeder.setContent("<!DOCTYPE html><title>feeder</title>");
  await feeder.evaluate(() => window.addEventListener("message", () => {}));
  await installFeeder(feeder, deltas.slice(0, PASS_DELTAS));
  const feederCdp = await feeder.context().newCDPSession(feeder);
  const feederPass = async () => (await cpuOf(feederCdp, () => feeder.evaluate((n) => (window as any).__feed(0, n), PASS_DELTAS))) / PASS_DELTAS;
  const slowdown = (feederMs: number) => Math.max(1, feederMs / FEEDER_QUIET_MS);
  const feederBefore = await feederPass();

  const panel = await openPanel(browser, {
    onRequest: (method, params) => {
      if (method === "agent/state") return { ...state, isStreaming: true };
      if (method === "agent/model/list") return { models: [model] };
      if (method === "agent/session/history") return historyPage(SID, sessionEntries(40), params);
      throw { code: -32601, message: method };
    },
  });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await page.waitForSelector(".rows > .row");
  const ev = (event: unknown) => ({ method: "agent/event", params: { sessionId: SID, runId: "run1", event } });
  const ts = 1764700000000;
  await panel.send({ type: "notifications", items: [ev({ type: "agent_start" }), ev({ type: "turn_start" }), ev({ type: "message_start", message: { role: "user", content: [{ type: "text", text: "write it all" }], timestamp: ts } }), ev({ type: "message_end", message: { role: "user", content: [{ type: "text", text: "write it all" }], timestamp: ts } }), ev({ type: "message_start", message: { role: "assistant", content: [], api: "x", provider: "rec", model: "rec-1", stopReason: "stop", timestamp: ts + 1 } }), ev({ type: "message_update", assistantMessageEvent: { type: "text_start", contentIndex: 0 } })] });
  await page.waitForSelector(".row-assistant.streaming", { state: "attached" });
  await installFeeder(page, deltas);
  await page.focus("textarea.input");
  const blocksBefore0 = await page.evaluate(() => (window as any).__pi.renderStats.blocks);

  // 1. Behaviour pass: frame counter, long tasks, mutations, keystrokes, and a task trace (with
  // what each task did: the longest is printed).
  await startTaskTrace(browser, page, true);
  const run = page.evaluate((n) => {
    const w = window as any;
    const long: number[] = [];
    const po = new PerformanceObserver((l) => long.push(...l.getEntries().map((e) => e.duration)));
    po.observe({ type: "longtask" });
    const streamingRow = document.querySelector(".row-assistant.streaming")!;
    // VP3: layout shifts of anything but the streaming row (content above the tail moving).
    const shifts: number[] = [];
    const shiftAbove: number[] = [];
    const so = new PerformanceObserver((l) => {
      for (const e of l.getEntries() as any[]) {
        shifts.push(e.value);
        if ((e.sources ?? []).some((src: any) => !src.node || !streamingRow.contains(src.node))) shiftAbove.push(e.value);
      }
    });
    so.observe({ type: "layout-shift" });
    const outside: string[] = [];
    const mo = new MutationObserver((recs) => {
      for (const r of recs) {
        const t = r.target instanceof Element ? r.target : r.target.parentElement;
        if (t && !streamingRow.contains(t) && t.closest(".rows")) outside.push(t.className);
      }
    });
    mo.observe(document.querySelector("#transcript")!, { subtree: true, childList: true, characterData: true, attributes: true });
    let frames = 0;
    let counting = true;
    const tick = () => {
      frames++;
      if (counting) requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
    performance.mark("pi-sync");
    const keys: [number, number][] = [];
    const input = document.querySelector("textarea.input") as HTMLTextAreaElement;
    let kd = 0;
    input.addEventListener("keydown", (e) => (kd = e.timeStamp));
    input.addEventListener("input", () => {
      const t = kd;
      requestAnimationFrame(() => keys.push([t, performance.now()]));
    });
    const renders0 = w.__pi.renders;
    return w.__feed(0, n).then((ms: number) => {
      counting = false;
      mo.disconnect();
      po.disconnect();
      so.disconnect();
      return { ms, frames, renders: w.__pi.renders - renders0, long, outside, keys, shifts, shiftAbove };
    });
  }, BEHAVIOUR_DELTAS);
  // Type while it streams.
  await page.waitForTimeout(1500);
  await page.keyboard.type("typing while the answer streams", { delay: 60 });
  const r = await run;
  const trace = await stopTaskTrace(browser, page);
  const tasks = trace.tasks;

  // 2. Cost passes: nothing but the feeder and the panel run in the page; the main thread's
  // CPU time per pass (ThreadTime: not wall time, which grows with the machine's load).
  if (process.env.PI_PROFILE) {
    await panel.cdp.send("Profiler.enable");
    await panel.cdp.send("Profiler.start");
  }
  const perDelta: number[] = [];
  const feederPerDelta: number[] = [];
  const scaled: number[] = [];
  const sums: Record<string, number> = {};
  if (process.env.PI_TRACE) await browser.startTracing(page, { categories: ["devtools.timeline", "disabled-by-default-devtools.timeline", "v8", "blink"] });
  for (let i = 0; i < COST_PASSES; i++) {
    const from = BEHAVIOUR_DELTAS + i * PASS_DELTAS;
    const cpu = await cpuOf(panel.cdp, () => page.evaluate(([a, b]) => (window as any).__feed(a, b), [from, from + PASS_DELTAS]), sums);
    const feederMs = await feederPass();
    feederPerDelta.push(feederMs);
    perDelta.push(cpu / PASS_DELTAS - feederMs);
    scaled.push(perDelta[i]! / slowdown(feederMs));
  }
  await feeder.close();
  const feederMs = median(feederPerDelta);
  // The behaviour pass ran between the first feeder pass and the cost passes.
  const behaviourSlowdown = slowdown(median([feederBefore, ...feederPerDelta.slice(0, 2)]));
  if (process.env.PI_TRACE) printTrace(await browser.stopTracing());
  if (process.env.PI_PROFILE) printProfile((await panel.cdp.send("Profiler.stop")) as any);
  const n = COST_PASSES * PASS_DELTAS;
  const per = (k: string) => (sums[k]! / n).toFixed(3);
  perf(`VP2 cost passes per delta: task ${per("TaskDuration")} ms wall, script ${per("ScriptDuration")}, style ${per("RecalcStyleDuration")}, layout ${per("LayoutDuration")}, other ${per("TaskOtherDuration")} ms; ${sums.LayoutCount} layouts, ${sums.RecalcStyleCount} style recalcs for ${n} deltas`);
  const perDeltaMs = median(perDelta);
  const scaledMs = median(scaled);
  const longCpu = Math.max(0, ...tasks.map((t) => t.cpuMs));
  const longWall = Math.max(0, ...tasks.map((t) => t.wallMs));
  const longest = [...tasks].sort((a, b) => b.cpuMs - a.cpuMs).slice(0, 3);
  perf(`VP2 longest tasks (CPU ms: what they did): ${longest.map((t) => `${t.cpuMs.toFixed(1)}: ${t.what ?? "?"}`).join(" | ")}`);
  // VP4: keydown → the frame after the character went in, as wall time and as the main
  // thread's CPU time in that interval (the work in the way of the keystroke).
  const keyWall = (r.keys as [number, number][]).map(([a, b]) => b - a).sort((a, b) => a - b);
  const keyCpu = (r.keys as [number, number][]).map(([a, b]) => cpuBetween(trace, a, b)).sort((a, b) => a - b);
  const keyMedian = median(keyWall);
  const keyCpuMedian = median(keyCpu);
  const fps = r.frames / (r.ms / 1000);
  perf(`VP2 ${total} deltas: main-thread CPU per delta over ${COST_PASSES} passes of ${PASS_DELTAS} (feeder alone median ${feederMs.toFixed(3)} ms subtracted, pass by pass): median ${perDeltaMs.toFixed(3)} ms, passes ${perDelta.map((x) => x.toFixed(3)).join(" ")}`);
  perf(`VP2 the machine's speed: feeder ${[feederBefore, ...feederPerDelta].map((x) => x.toFixed(3)).join(" ")} ms per delta against ${FEEDER_QUIET_MS} quiet; per delta in quiet units: median ${scaledMs.toFixed(3)} ms (passes ${scaled.map((x) => x.toFixed(3)).join(" ")}); longest task bound ${(LONG_TASK_CPU_MS * behaviourSlowdown).toFixed(0)} ms`);
  perf(`VP2 behaviour pass (${BEHAVIOUR_DELTAS} deltas in ${(r.ms / 1000).toFixed(1)} s): ${r.renders} renders in ${r.frames} frames, longest task ${longCpu.toFixed(1)} ms CPU (${longWall.toFixed(0)} ms wall; PerformanceObserver longtask max ${Math.max(0, ...r.long).toFixed(0)} ms), mutations outside the streaming row ${r.outside.length}`);
  perf(`VP4 keystroke → next frame: median ${keyMedian.toFixed(1)} ms, p95 ${keyWall[Math.floor(keyWall.length * 0.95)]!.toFixed(1)} ms, max ${keyWall.at(-1)!.toFixed(1)} ms wall; main-thread CPU in it median ${keyCpuMedian.toFixed(1)} ms, max ${keyCpu.at(-1)!.toFixed(1)} ms; over ${keyWall.length} keys at ${fps.toFixed(0)} frames/s`);
  assert.ok(scaledMs <= PER_DELTA_MS, `median ${scaledMs} ms per delta in quiet units (as measured ${perDeltaMs}; passes ${perDelta.join(", ")}; feeder ${feederPerDelta.join(", ")})`);
  assert.ok(r.renders <= r.frames, `${r.renders} renders in ${r.frames} frames`);
  assert.ok(longCpu <= LONG_TASK_CPU_MS * behaviourSlowdown, `a task took ${longCpu} ms of CPU (the machine ${behaviourSlowdown.toFixed(2)}× slower than quiet)`);
  assert.deepEqual(r.outside, [], "DOM mutations outside the streaming row");
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  perf(`VP3 layout shifts while streaming: ${r.shifts.length} entries (sum ${sum(r.shifts).toFixed(4)}), of content outside the streaming row ${r.shiftAbove.length} (sum ${sum(r.shiftAbove).toFixed(4)})`);
  assert.equal(sum(r.shiftAbove), 0, "layout shifts of content above the tail");
  assert.equal(await page.inputValue("textarea.input"), "typing while the answer streams");
  // A browser that did not get 45 frames a second was starved by the machine's load: its wall
  // latency measures the load, and the bound is on the work in the way (CPU) instead.
  if (fps >= 45) assert.ok(keyMedian <= 16, `keystroke median ${keyMedian} ms`);
  else perf(`VP4 the browser got ${fps.toFixed(0)} frames/s (machine load): the bound is on the CPU figure`);
  assert.ok(keyCpuMedian <= 16, `keystroke CPU median ${keyCpuMedian} ms`);
  // End of the message: the final DOM equals a from-scratch render, and each finished block was
  // rendered once.
  await panel.send({ type: "notifications", items: [ev({ type: "message_update", assistantMessageEvent: { type: "text_end", contentIndex: 0, content: text } }), ev({ type: "message_end", message: { role: "assistant", content: [{ type: "text", text }], api: "x", provider: "rec", model: "rec-1", stopReason: "stop", timestamp: ts + 1 } }), ev({ type: "turn_end", message: {}, toolResults: [] }), ev({ type: "agent_end", messages: [] })] });
  await page.waitForFunction(() => !document.querySelector(".row-assistant.streaming"));
  const renderedForRow = (await page.evaluate(() => (window as any).__pi.renderStats.blocks)) - blocksBefore0;
  const [streamed, fresh] = await page.evaluate((t) => {
    const rows = document.querySelectorAll(".row-assistant");
    const md = rows[rows.length - 1]!.querySelector(".md")!;
    return [md.innerHTML, (window as any).__pi.renderFresh(t)];
  }, text);
  assert.equal(streamed, fresh, "the streamed DOM equals a fresh render");
  // Blocks rendered for the streamed row: exactly its block count (none rendered twice).
  const blocks = await page.evaluate((t) => {
    const w = window as any;
    const b0 = w.__pi.renderStats.blocks;
    w.__pi.renderFresh(t);
    return w.__pi.renderStats.blocks - b0;
  }, text);
  perf(`VP2 blocks: ${blocks} blocks in the answer, ${renderedForRow} block renders for the streamed row`);
  assert.equal(renderedForRow, blocks, "every finished block was rendered exactly once");
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

/** Prints the main thread's time per trace event name (PI_TRACE=1; nested events overlap). */
function printTrace(buf: Buffer): void {
  const events: any[] = JSON.parse(buf.toString("utf8")).traceEvents;
  const mains = new Set(events.filter((e) => e.ph === "M" && e.name === "thread_name" && e.args?.name === "CrRendererMain").map((e) => `${e.pid}:${e.tid}`));
  const by = new Map<string, [number, number]>();
  for (const e of events) {
    if (e.ph !== "X" || !mains.has(`${e.pid}:${e.tid}`)) continue;
    const v = by.get(e.name) ?? [0, 0];
    v[0] += (e.tdur ?? e.dur ?? 0) / 1000;
    v[1]++;
    by.set(e.name, v);
  }
  console.log([...by.entries()].sort((a, b) => b[1][0] - a[1][0]).slice(0, 30).map(([k, [ms, c]]) => `${ms.toFixed(0)}ms ×${c} ${k}`).join("\n"));
}

/** Prints the 25 functions with the most self time of a CDP profile (PI_PROFILE=1). */
function printProfile({ profile }: { profile: any }): void {
  const self = new Map<string, number>();
  const dt = profile.timeDeltas as number[];
  const byId = new Map<number, any>(profile.nodes.map((n: any) => [n.id, n]));
  profile.samples.forEach((id: number, i: number) => {
    const n = byId.get(id);
    const k = `${n.callFrame.functionName || "(anon)"} ${n.callFrame.url.split("/").pop()}:${n.callFrame.lineNumber}`;
    self.set(k, (self.get(k) ?? 0) + (dt[i] ?? 0));
  });
  console.log([...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, 25).map(([k, v]) => `${(v / 1000).toFixed(0)}ms ${k}`).join("\n"));
}

test("VP5: nothing runs when idle (0 frame callbacks, 0 timers over 5 s)", async () => {
  const entries = sessionEntries(300);
  const panel = await openPanel(browser, {
    instrumentTimers: true,
    onRequest: (method, params) => {
      if (method === "agent/state") return state;
      if (method === "agent/model/list") return { models: [model] };
      if (method === "agent/session/history") return historyPage(SID, entries, params);
      throw { code: -32601, message: method };
    },
  });
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await panel.page.waitForSelector(".rows > .row");
  await new Promise((r) => setTimeout(r, 500));
  const t0 = await panel.page.evaluate(() => ({ ...(window as any).__timers }));
  await new Promise((r) => setTimeout(r, 5000));
  const t1 = await panel.page.evaluate(() => ({ ...(window as any).__timers }));
  const d = { raf: t1.raf - t0.raf, timeout: t1.timeout - t0.timeout, interval: t1.interval - t0.interval };
  perf(`VP5 idle 5 s: ${d.raf} frame callbacks, ${d.timeout} timeouts, ${d.interval} interval ticks`);
  assert.deepEqual(d, { raf: 0, timeout: 0, interval: 0 });
  await panel.page.context().close();
});

/** Main-thread CPU allowed for a change of the panel's width (VP6), ms. */
const RESIZE_CPU_MS = 50;

test("VP6: a new panel width with 1,000 messages loaded: no message re-rendered, ≤ 50 ms of CPU, the row being read stays put", async () => {
  const entries = sessionEntries(1000);
  const panel = await openPanel(browser, {
    onRequest: (method, params) => {
      if (method === "agent/state") return state;
      if (method === "agent/model/list") return { models: [model] };
      if (method === "agent/session/history") return historyPage(SID, entries, params);
      throw { code: -32601, message: method };
    },
  });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await page.waitForSelector(".rows > .row");
  // Page the whole session in (20 pages of 50), as a user scrolling to its start.
  const historyCount = () => panel.requests.filter((q) => q.method === "agent/session/history").length;
  for (let i = 0; i < 100 && historyCount() < entries.length / 50; i++) {
    const n = historyCount();
    await page.$eval("#transcript", (e) => (e.scrollTop = 0));
    const deadline = Date.now() + 2000;
    while (historyCount() === n && Date.now() < deadline) await page.waitForTimeout(20);
    await page.waitForTimeout(40);
  }
  assert.equal(historyCount(), entries.length / 50, "the whole session was paged in");
  await settled(page);
  // The user reads a row in the middle.
  await page.$eval("#transcript", (e) => (e.scrollTop = e.scrollHeight / 2));
  await settled(page);
  const loaded = await page.evaluate(() => (window as any).__pi.store.order.length);

  /** Resizes the page to `width` and returns what the change cost. */
  const resize = async (width: number) => {
    const before = await page.evaluate(() => {
      const w = window as any;
      const s = document.querySelector("#transcript")!;
      const top = s.getBoundingClientRect().top;
      const rows = [...document.querySelectorAll(".rows > .row")] as HTMLElement[];
      const read = rows.find((r) => r.getBoundingClientRect().bottom > top + 1)!;
      for (const r of rows) (r as any).__old = true;
      w.__oldMutations = 0;
      w.__mo?.disconnect();
      w.__mo = new MutationObserver((recs) => {
        for (const rec of recs) {
          const t = rec.target instanceof Element ? rec.target : rec.target.parentElement;
          const row = t?.closest(".rows > .row") as any;
          if (row?.__old && row !== rec.target) w.__oldMutations++;
        }
      });
      w.__mo.observe(document.querySelector(".rows")!, { subtree: true, childList: true, characterData: true });
      w.__resized = new Promise<number[]>((resolve) => {
        window.addEventListener(
          "resize",
          () => {
            const t0 = performance.now();
            // Settled: no render scheduled and none made over two frames in a row (the
            // transcript renders in the frame after the resize or its ResizeObserver, and
            // fills its window over more frames when rows cost more than its budget).
            let quiet = 0;
            let last = w.__pi.renders as number;
            const tick = () => {
              const r = w.__pi.renders as number;
              quiet = !w.__pi.pending && r === last ? quiet + 1 : 0;
              last = r;
              if (quiet >= 2) resolve([t0, performance.now()]);
              else requestAnimationFrame(tick);
            };
            requestAnimationFrame(tick);
          },
          { once: true },
        );
      });
      const T = w.__pi.transcript;
      return { id: read.dataset.id!, offset: read.getBoundingClientRect().top - top, blocks: w.__pi.renderStats.blocks, rows: rows.length };
    });
    await startTaskTrace(browser, page);
    await page.evaluate(() => performance.mark("pi-sync"));
    await page.setViewportSize({ width, height: 760 });
    const [t0, t1] = await page.evaluate(() => (window as any).__resized as Promise<number[]>);
    const trace = await stopTaskTrace(browser, page);
    const after = await page.evaluate((id) => {
      const w = window as any;
      w.__mo.disconnect();
      const s = document.querySelector("#transcript")!;
      const row = document.querySelector(`.rows > .row[data-id="${id}"]`) as any;
      const rows = [...document.querySelectorAll(".rows > .row")] as any[];
      const T = w.__pi.transcript;
      return {
        offset: row ? row.getBoundingClientRect().top - s.getBoundingClientRect().top : null,
        // The row's box and its bottom margin at the new width: the most of it that can lie
        // above the viewport's top while it is still the row being read (its last pixel).
        below: row ? row.getBoundingClientRect().height + (parseFloat(getComputedStyle(row).marginBottom) || 0) : null,
        same: !!row?.__old,
        kept: rows.filter((r) => r.__old).length,
        added: rows.filter((r) => !r.__old).length,
        oldMutations: w.__oldMutations as number,
        blocks: w.__pi.renderStats.blocks as number,
      };
    }, before.id);
    return { before, after, cpu: cpuBetween(trace, t0!, t1!), wall: t1! - t0! };
  };
  const wide = await resize(640);
  const narrow = await resize(420);
  for (const [name, r] of [["420 → 640 px", wide], ["640 → 420 px", narrow]] as const) {
    perf(
      `VP6 ${name} with ${loaded} items loaded: ${r.cpu.toFixed(1)} ms CPU (${r.wall.toFixed(0)} ms wall, until settled), rows kept ${r.after.kept} of ${r.before.rows} (${r.after.added} new at the window's edges, ` +
        `${r.after.blocks - r.before.blocks} Markdown blocks rendered for them), mutations inside kept rows ${r.after.oldMutations}, row read moved ${((r.after.offset ?? NaN) - r.before.offset).toFixed(1)} px`,
    );
    assert.ok(r.cpu <= RESIZE_CPU_MS, `${name}: ${r.cpu} ms of CPU`);
    assert.equal(r.after.oldMutations, 0, `${name}: rows already shown were re-rendered`);
    assert.ok(r.after.same, `${name}: the row being read was replaced`);
    // The row stays where it was; when the new width made it shorter than the part of it that
    // was above the viewport, it stays the row being read with its last pixel in view.
    const expected = Math.max(r.before.offset, 1 - r.after.below!);
    assert.ok(Math.abs(r.after.offset! - expected) <= 1, `${name}: the row being read moved from ${r.before.offset} to ${r.after.offset} px (expected ${expected}: ${r.after.below} px of it below its top)`);
  }
  assert.ok(loaded >= 500, `${loaded} items loaded`);
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("VP6: the row being read stays put when the viewport's top is in the bottom margin or the last pixel of the row above it", async () => {
  // The row being read is the first one with more than a pixel of its box in view. A row
  // above it that shows only its bottom margin, or less than a pixel, is not read: a new width
  // that rewraps that row must not move the one below it (it did: in CI the viewport's top
  // happened to fall into such a margin and the row read moved 14.5 px, a line of text).
  const entries = sessionEntries(120);
  const panel = await openPanel(browser, {
    onRequest: (method, params) => {
      if (method === "agent/state") return state;
      if (method === "agent/model/list") return { models: [model] };
      if (method === "agent/session/history") return historyPage(SID, entries, params);
      throw { code: -32601, message: method };
    },
  });
  const page = panel.page;
  await page.setViewportSize({ width: 420, height: 760 });
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await page.waitForSelector(".rows > .row");
  await page.waitForFunction(() => (window as any).__pi.store.order.length > 20);
  await settled(page);
  await page.$eval("#transcript", (e) => (e.scrollTop = e.scrollHeight / 2));
  await settled(page);
  /** The first row with more than a pixel of its box in view, and its offset from the top. */
  const reading = () =>
    page.evaluate(() => {
      const top = document.querySelector("#transcript")!.getBoundingClientRect().top;
      const rows = [...document.querySelectorAll(".rows > .row")] as HTMLElement[];
      const read = rows.find((r) => r.getBoundingClientRect().bottom > top + 1)!;
      return { id: read.dataset.id!, offset: read.getBoundingClientRect().top - top };
    });
  // `into`: where the viewport's top goes, measured from the bottom of a user's row's box (its
  // 8 px bottom margin follows); a user's 14 words wrap differently at 420 and 640 px.
  for (const into of [3, 6, -0.5]) {
    await page.setViewportSize({ width: 420, height: 760 });
    await settled(page);
    const placed = await page.evaluate((into) => {
      const s = document.querySelector("#transcript") as HTMLElement;
      const top = s.getBoundingClientRect().top;
      const rows = [...document.querySelectorAll(".rows > .row")] as HTMLElement[];
      const users = rows.filter((r) => r.classList.contains("row-user"));
      const row = users[users.length >> 1]!;
      s.scrollTop = s.scrollTop + (row.getBoundingClientRect().bottom - top) + into;
      return { above: row.dataset.id!, scrollTop: s.scrollTop };
    }, into);
    await settled(page);
    const before = await reading();
    assert.notEqual(before.id, placed.above, `the viewport's top ${into} px below the row's box`);
    for (const width of [640, 420]) {
      await page.setViewportSize({ width, height: 760 });
      await settled(page);
      const after = await reading();
      assert.deepEqual({ id: after.id, moved: Math.abs(after.offset - before.offset) <= 1 }, { id: before.id, moved: true }, `${into} px below a row, now ${width} px wide: the row read moved from ${before.offset} to ${after.offset} px`);
    }
  }
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("VP3: scrolled up, the row being read does not move while an answer streams and a tool card grows", async () => {
  const entries = sessionEntries(200);
  const panel = await openPanel(browser, {
    onRequest: (method, params) => {
      if (method === "agent/state") return { ...state, isStreaming: true };
      if (method === "agent/model/list") return { models: [model] };
      if (method === "agent/session/history") return historyPage(SID, entries, params);
      throw { code: -32601, message: method };
    },
  });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await page.waitForSelector(".rows > .row");
  const ev = (event: unknown) => ({ method: "agent/event", params: { sessionId: SID, runId: "run1", event } });
  const ts = 1764700000000;
  await panel.send({ type: "notifications", items: [ev({ type: "agent_start" }), ev({ type: "turn_start" }), ev({ type: "message_start", message: { role: "user", content: [{ type: "text", text: "go on" }], timestamp: ts } }), ev({ type: "message_end", message: { role: "user", content: [{ type: "text", text: "go on" }], timestamp: ts } }), ev({ type: "message_start", message: { role: "assistant", content: [], api: "x", provider: "rec", model: "rec-1", stopReason: "stop", timestamp: ts + 1 } }), ev({ type: "message_update", assistantMessageEvent: { type: "text_start", contentIndex: 0 } })] });
  await page.waitForSelector(".row-assistant.streaming", { state: "attached" });
  await page.waitForTimeout(300);
  // The user scrolls up by two screens (a wheel, as a person does) and reads.
  await page.mouse.move(200, 300);
  for (let i = 0; i < 6; i++) {
    await page.mouse.wheel(0, -250);
    await page.waitForTimeout(50);
  }
  await page.waitForTimeout(300);
  const probe = () =>
    page.evaluate(() => {
      const s = document.querySelector("#transcript")!;
      const top = s.getBoundingClientRect().top;
      const rows = [...document.querySelectorAll(".rows > .row")] as HTMLElement[];
      const read = rows.find((r) => r.getBoundingClientRect().bottom > top + 1)!;
      return { id: read.dataset.id!, top: read.getBoundingClientRect().top - top, scrollTop: s.scrollTop, fromBottom: s.scrollHeight - s.scrollTop - s.clientHeight };
    });
  const before = await probe();
  assert.ok(before.fromBottom > 500, `scrolled up: ${before.fromBottom} px from the bottom`);
  const { deltas } = streamedAnswer(1000);
  await installFeeder(page, deltas);
  await page.evaluate(() => (window as any).__feed(0, 1000));
  // Then a bash card whose output grows for a second.
  const call = { toolCallId: "call_grow", toolName: "bash", args: { command: "make" } };
  await panel.send({ type: "notifications", items: [ev({ type: "tool_execution_start", ...call })] });
  let out = "";
  for (let i = 0; i < 30; i++) {
    out += `line ${i} of the build\n`;
    await panel.send({ type: "notifications", items: [ev({ type: "tool_execution_update", ...call, partialResult: { content: [{ type: "text", text: out }] } })] });
    await page.waitForTimeout(33);
  }
  await page.waitForTimeout(300);
  const after = await probe();
  perf(`VP3 scrolled up ${before.fromBottom.toFixed(0)} px from the bottom: 1,000 deltas and a growing tool card later the row read moved ${(after.top - before.top).toFixed(2)} px, scrollTop changed ${(after.scrollTop - before.scrollTop).toFixed(2)} px`);
  assert.equal(after.id, before.id, "the same row is at the top of the view");
  assert.ok(Math.abs(after.top - before.top) < 0.5, `the row read moved from ${before.top} to ${after.top} px`);
  assert.ok(Math.abs(after.scrollTop - before.scrollTop) < 0.5, `scrollTop changed from ${before.scrollTop} to ${after.scrollTop}`);
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});
