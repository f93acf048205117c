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
}

export async function openPanel(browser: Browser, opts: OpenOptions = {}): Promise<Panel> {
  const ctx = await browser.newContext({ viewport: { width: opts.width ?? 420, height: opts.height ?? 760 }, deviceScaleFactor: 1 });
  const page = await ctx.newPage();
  const js = readFileSync(join(root, "dist/webview.js"));
  const css = readFileSync(join(root, "dist/webview.css"));
  const theme = readFileSync(join(root, "test/webview/theme-dark.css"));
  const nonce = "dGVzdC1ub25jZS0xMjM0NTY3OA==";
  const html = webviewHtml({ scriptUri: `${ORIGIN}/webview.js`, styleUri: `${ORIGIN}/webview.css`, cspSource: ORIGIN, nonce })
    // VS Code injects its theme variables into the page; the test injects a dark theme's.
    .replace("</head>", `<link rel="stylesheet" href="${ORIGIN}/theme.css">\n</head>`);
  const blocked: string[] = [];
  await page.route("**/*", async (route) => {
    const url = route.request().url();
    if (url === `${ORIGIN}/index.html`) return route.fulfill({ status: 200, contentType: "text/html", body: html });
    if (url === `${ORIGIN}/webview.js`) return route.fulfill({ status: 200, contentType: "text/javascript", body: js });
    if (url === `${ORIGIN}/webview.css`) return route.fulfill({ status: 200, contentType: "text/css", body: css });
    if (url === `${ORIGIN}/theme.css`) return route.fulfill({ status: 200, contentType: "text/css", body: theme });
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
export async function metrics(cdp: CDPSession): Promise<Record<string, number>> {
  // Count live nodes and heap, not garbage waiting for the collector.
  await cdp.send("HeapProfiler.collectGarbage");
  await cdp.send("Performance.enable");
  const { metrics } = await cdp.send("Performance.getMetrics");
  return Object.fromEntries(metrics.map((m: { name: string; value: number }) => [m.name, m.value]));
}
