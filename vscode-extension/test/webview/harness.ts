/**
 * Runs the bundled webview (dist/webview.js + dist/webview.css) in headless Chromium with
 * playwright-core: the page is served through `page.route` from a fake `vscode-webview://`
 * origin with the production CSP (src/webview/html.ts), and `acquireVsCodeApi` is stubbed by an
 * init script that records every posted message and state. The test plays the host: it answers
 * `request`s through `onRequest` and injects host messages with `send`.
 *
 * Chromium: `PI_CHROMIUM` or /usr/bin/chromium. Missing Chromium fails the test (never a skip).
 */
import { chromium, type Browser, type Page, type CDPSession } from "playwright-core";
import { readFileSync, existsSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { webviewHtml } from "../../src/webview/html";

export const root = join(dirname(fileURLToPath(import.meta.url)), "../..");
const ORIGIN = "https://webview.test";

export function chromiumPath(): string {
  const p = process.env.PI_CHROMIUM ?? "/usr/bin/chromium";
  if (!existsSync(p)) throw new Error(`Chromium not found at ${p} (install the chromium package or set PI_CHROMIUM)`);
  return p;
}

export async function launch(): Promise<Browser> {
  return chromium.launch({
    executablePath: chromiumPath(),
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
  });
}

export type RequestHandler = (method: string, params: any) => unknown | Promise<unknown>;

export interface Panel {
  page: Page;
  cdp: CDPSession;
  /** Messages the webview posted, in order. */
  posts(): Promise<any[]>;
  /** Sends a host → webview message. */
  send(msg: unknown): Promise<void>;
  /** JSON bytes of every host → webview message sent so far. */
  bytesSent: number;
  /** Answers the webview's `request`s (default: errors `-32601`). */
  onRequest: RequestHandler;
  /** Errors thrown in the page. */
  errors: string[];
  /** Requests the webview sent, in order (`{method, params}`). */
  requests: { method: string; params: any }[];
}

export interface OpenOptions {
  state?: unknown;
  width?: number;
  height?: number;
  onRequest?: RequestHandler;
  /** Wrap requestAnimationFrame/setTimeout/setInterval to count callbacks (idle test). */
  instrumentTimers?: boolean;
  /** Another build of the webview: `<bundle>.js` and `<bundle>.css` (default: dist/webview.*),
   * for comparing two builds in one browser. */
  bundle?: string;
}

export async function openPanel(browser: Browser, opts: OpenOptions = {}): Promise<Panel> {
  const ctx = await browser.newContext({ viewport: { width: opts.width ?? 420, height: opts.height ?? 760 }, deviceScaleFactor: 1 });
  const page = await ctx.newPage();
  const js = readFileSync(opts.bundle ? `${opts.bundle}.js` : join(root, "dist/webview.js"));
  const css = readFileSync(opts.bundle ? `${opts.bundle}.css` : join(root, "dist/webview.css"));
  const theme = readFileSync(join(root, "test/webview/theme-dark.css"));
  const vscodeDefault = readFileSync(join(root, "test/webview/vscode-default.css"));
  const nonce = "dGVzdC1ub25jZS0xMjM0NTY3OA==";
  const html = webviewHtml({ scriptUri: `${ORIGIN}/webview.js`, styleUri: `${ORIGIN}/webview.css`, cspSource: ORIGIN, nonce })
    // VS Code injects its theme variables into the page; the test injects a dark theme's. VS
    // Code also puts its default stylesheet first in the page (code, pre code, blockquote…).
    .replace("</head>", `<link rel="stylesheet" href="${ORIGIN}/theme.css">\n</head>`)
    .replace("<head>", `<head>\n<link rel="stylesheet" href="${ORIGIN}/vscode-default.css">`);
  const blocked: string[] = [];
  await page.route("**/*", async (route) => {
    const url = route.request().url();
    if (url === `${ORIGIN}/index.html`) return route.fulfill({ status: 200, contentType: "text/html", body: html });
    if (url === `${ORIGIN}/webview.js`) return route.fulfill({ status: 200, contentType: "text/javascript", body: js });
    if (url === `${ORIGIN}/webview.css`) return route.fulfill({ status: 200, contentType: "text/css", body: css });
    if (url === `${ORIGIN}/theme.css`) return route.fulfill({ status: 200, contentType: "text/css", body: theme });
    if (url === `${ORIGIN}/vscode-default.css`) return route.fulfill({ status: 200, contentType: "text/css", body: vscodeDefault });
    blocked.push(url);
    return route.abort();
  });
  await page.addInitScript(
    ({ state, instrument }) => {
      const w = window as any;
      w.__posts = [];
      w.__state = state ?? undefined;
      w.__timers = { raf: 0, timeout: 0, interval: 0 };
      if (instrument) {
        const raf = w.requestAnimationFrame.bind(w);
        w.requestAnimationFrame = (cb: FrameRequestCallback) => raf((t: number) => (w.__timers.raf++, cb(t)));
        const st = w.setTimeout.bind(w);
        w.setTimeout = (cb: any, ms?: number, ...a: any[]) => st((...x: any[]) => (w.__timers.timeout++, typeof cb === "function" ? cb(...x) : undefined), ms, ...a);
        const si = w.setInterval.bind(w);
        w.setInterval = (cb: any, ms?: number, ...a: any[]) => si((...x: any[]) => (w.__timers.interval++, typeof cb === "function" ? cb(...x) : undefined), ms, ...a);
      }
      w.acquireVsCodeApi = () => ({
        postMessage: (m: unknown) => {
          w.__posts.push(m);
          if (w.__onPost) w.__onPost(m);
        },
        getState: () => w.__state,
        setState: (s: unknown) => {
          w.__state = s;
        },
      });
    },
    { state: opts.state, instrument: Boolean(opts.instrumentTimers) },
  );
  const panel: Panel = {
    page,
    cdp: await ctx.newCDPSession(page),
    posts: () => page.evaluate(() => (window as any).__posts),
    send: (msg) => {
      panel.bytesSent += Buffer.byteLength(JSON.stringify(msg));
      return page.evaluate((m) => window.postMessage(m, "*"), msg as any);
    },
    bytesSent: 0,
    onRequest: opts.onRequest ?? (() => Promise.reject({ code: -32601, message: "unknown method" })),
    errors: [],
    requests: [],
  };
  page.on("pageerror", (e) => panel.errors.push(String(e)));
  page.on("console", (m) => {
    if (m.type() === "error") panel.errors.push(m.text());
  });
  await page.exposeBinding("__onPostHost", async (_src, m: any) => {
    if (m?.type !== "request") return;
    panel.requests.push({ method: m.method, params: m.params });
    try {
      const result = await panel.onRequest(m.method, m.params);
      await panel.send({ type: "response", requestId: m.requestId, result });
    } catch (e: any) {
      await panel.send({ type: "response", requestId: m.requestId, error: { code: e?.code ?? -32603, message: e?.message ?? String(e) } });
    }
  });
  await page.addInitScript(() => {
    (window as any).__onPost = (m: any) => (window as any).__onPostHost(m);
  });
  await page.goto(`${ORIGIN}/index.html`);
  await page.waitForFunction(() => (window as any).__posts.some((m: any) => m.type === "ready"));
  if (blocked.length) throw new Error(`the page asked for resources outside the webview: ${blocked.join(", ")}`);
  return panel;
}

/** A recorded fixture: JSON lines of `{method, params}` notifications and `{response, result}`. */
export function loadFixture(name: string): { notifications: { method: string; params: any }[]; responses: Map<string, any> } {
  const lines = readFileSync(join(root, "test/fixtures", `${name}.jsonl`), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
  const responses = new Map<string, any>();
  const notifications: { method: string; params: any }[] = [];
  for (const l of lines) {
    if (l.response) responses.set(l.response, l.result);
    else notifications.push(l);
  }
  return { notifications, responses };
}

/** CDP `Performance.getMetrics` as a name → value map. */
export async function metrics(cdp: CDPSession, collect = true): Promise<Record<string, number>> {
  // Count live nodes and heap, not garbage waiting for the collector.
  if (collect) await cdp.send("HeapProfiler.collectGarbage");
  await cdp.send("Performance.enable");
  const { metrics } = await cdp.send("Performance.getMetrics");
  return Object.fromEntries(metrics.map((m: { name: string; value: number }) => [m.name, m.value]));
}

/** One task of the page's main thread (renderer `CrRendererMain`) from a Chromium trace. */
export interface MainTask {
  /** Start, ms on the trace clock. */
  start: number;
  /** Wall-clock duration in ms (includes time the thread was descheduled). */
  wallMs: number;
  /** CPU time of the thread in the task, ms (the work itself; what the long-task bounds use). */
  cpuMs: number;
  /** What the task did, when the trace had `devtools.timeline` events (see
   * {@link startTaskTrace}'s `detail`): its biggest nested events, e.g.
   * `TimerFire 30.1 > FunctionCall onFrame main.ts 29.8 > Layout 12.0`. */
  what?: string;
}

/** Starts a Chromium trace of `page` with the task events (`RunTask`: wall and thread
 * durations) and user-timing marks, cheap enough to leave on during a measurement; `detail`
 * adds the timeline's events inside tasks (script calls, timers, messages, style, layout,
 * paint, GC: a few per task), so the trace says what a long task did ({@link MainTask.what}). */
export async function startTaskTrace(browser: Browser, page: Page, detail = false): Promise<void> {
  await browser.startTracing(page, { categories: ["disabled-by-default-devtools.timeline", "blink.user_timing", ...(detail ? ["devtools.timeline", "v8"] : [])] });
}

/** The tasks of a trace, and where the page's clock is on the trace's clock. */
export interface TaskTrace {
  tasks: MainTask[];
  /** Trace-clock ms minus page-clock ms (`performance.now()`), from a `performance.mark`
   * named "pi-sync" the page made while tracing (undefined without it). */
  offset?: number;
}

/** CPU time the main thread spent in the page-clock interval [from, to] (tasks cut at the
 * edges in proportion to their wall time). */
export function cpuBetween(trace: TaskTrace, from: number, to: number): number {
  const a = from + trace.offset!;
  const b = to + trace.offset!;
  let cpu = 0;
  for (const t of trace.tasks) {
    const overlap = Math.min(b, t.start + t.wallMs) - Math.max(a, t.start);
    if (overlap > 0 && t.wallMs > 0) cpu += (t.cpuMs * overlap) / t.wallMs;
  }
  return cpu;
}

/** Stops the trace and returns the top-level tasks of the page's main thread. Wall time grows
 * with the machine's load (a descheduled task looks long); `cpuMs` does not, so a bound on it
 * catches a task that does too much work without failing because other processes ran. */
export async function stopTaskTrace(browser: Browser, page: Page): Promise<TaskTrace> {
  const buf = await browser.stopTracing();
  const json = JSON.parse(buf.toString("utf8"));
  const events: any[] = Array.isArray(json) ? json : json.traceEvents;
  // The renderer process of the page: the frame with the page's URL in TracingStartedInBrowser.
  const url = page.url();
  let pid: number | undefined;
  for (const e of events) {
    if (e.name !== "TracingStartedInBrowser") continue;
    const f = (e.args?.data?.frames ?? []).find((x: any) => x.url === url && x.processId);
    if (f) pid = f.processId;
  }
  const mains = new Set<string>();
  for (const e of events) {
    if (e.ph === "M" && e.name === "thread_name" && e.args?.name === "CrRendererMain" && (pid === undefined || e.pid === pid)) mains.add(`${e.pid}:${e.tid}`);
  }
  const tasks: MainTask[] = [];
  const inner: any[] = [];
  let offset: number | undefined;
  for (const e of events) {
    if (e.name === "pi-sync" && mains.has(`${e.pid}:${e.tid}`) && typeof e.args?.data?.startTime === "number") offset = e.ts / 1000 - e.args.data.startTime;
    if (e.ph !== "X" || !mains.has(`${e.pid}:${e.tid}`)) continue;
    if (e.name === "RunTask") tasks.push({ start: e.ts / 1000, wallMs: (e.dur ?? 0) / 1000, cpuMs: (e.tdur ?? e.dur ?? 0) / 1000 });
    else inner.push(e);
  }
  if (tasks.length === 0) throw new Error("the trace holds no task of the page's main thread");
  tasks.sort((a, b) => a.start - b.start);
  if (inner.length) describeTasks(tasks, inner);
  return { tasks, offset };
}

/** Sets {@link MainTask.what} of each task from the timeline events nested in it: at each
 * level the event with the most thread time, down three levels, with the others' total. */
function describeTasks(tasks: MainTask[], inner: any[]): void {
  inner.sort((a, b) => a.ts - b.ts || (b.dur ?? 0) - (a.dur ?? 0));
  const label = (e: any) => {
    const d = e.args?.data ?? e.args?.beginData ?? {};
    const fn = d.functionName || d.type || d.stackTrace?.[0]?.functionName || "";
    const where = typeof d.url === "string" && d.url ? `${d.url.split("/").pop()}:${d.lineNumber ?? ""}` : "";
    return [e.name, fn, where].filter(Boolean).join(" ");
  };
  const ms = (e: any) => (e.tdur ?? e.dur ?? 0) / 1000;
  let i = 0;
  for (const t of tasks) {
    const a = t.start * 1000;
    const b = a + t.wallMs * 1000;
    while (i < inner.length && inner[i].ts < a) i++;
    const mine: any[] = [];
    for (let j = i; j < inner.length && inner[j].ts < b; j++) mine.push(inner[j]);
    if (!mine.length) continue;
    // Direct children of [from, to) among `list` (events not inside an earlier sibling).
    const children = (list: any[], from: number, to: number) => {
      const out: any[] = [];
      let end = -Infinity;
      for (const e of list) {
        if (e.ts < from || e.ts >= to) continue;
        if (e.ts >= end) {
          out.push(e);
          end = e.ts + (e.dur ?? 0);
        }
      }
      return out;
    };
    const parts: string[] = [];
    let level = children(mine, a, b);
    for (let depth = 0; depth < 4 && level.length; depth++) {
      const byTime = [...level].sort((x, y) => ms(y) - ms(x));
      const top = byTime[0]!;
      const next = byTime.slice(1, 3).filter((e) => ms(e) >= 0.5);
      const rest = byTime.slice(1 + next.length).reduce((n, e) => n + ms(e), 0);
      const others = [...next.map((e) => `${label(e)} ${ms(e).toFixed(1)}`), ...(rest >= 0.5 ? [`${byTime.length - 1 - next.length} more ${rest.toFixed(1)}`] : [])];
      parts.push(`${label(top)} ${ms(top).toFixed(1)}${others.length ? ` (+ ${others.join(", ")})` : ""}`);
      level = children(mine, top.ts + 1e-3, top.ts + (top.dur ?? 0)).filter((e) => e !== top);
    }
    t.what = parts.join(" > ");
  }
}

/** The median of `xs` (the middle value; the mean of the two middle ones for an even count). */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** Waits until the panel has settled: no render scheduled and none made over two animation
 * frames in a row (a render that filled its window in parts, or that a ResizeObserver asked
 * for, has run). Fails after `timeoutMs`. */
export async function settled(page: Page, timeoutMs = 10_000): Promise<void> {
  await page.evaluate(
    (timeoutMs) =>
      new Promise<void>((resolve, reject) => {
        const pi = (window as any).__pi;
        const t0 = performance.now();
        let quiet = 0;
        let last = pi.renders as number;
        const tick = () => {
          const r = pi.renders as number;
          quiet = !pi.pending && r === last ? quiet + 1 : 0;
          last = r;
          if (quiet >= 2) return resolve();
          if (performance.now() - t0 > timeoutMs) return reject(new Error(`the panel still rendered after ${timeoutMs} ms`));
          requestAnimationFrame(tick);
        };
        requestAnimationFrame(tick);
      }),
    timeoutMs,
  );
}
