/**
 * The chat webview in headless Chromium, driven by streams recorded from the real server
 * (test/fixtures/*.jsonl, written by test/fixtures/record.mjs): the DOM after a replay, a
 * screenshot against the committed golden image, typing, steering, aborting, permission and
 * extension-UI cards, and the messages the webview posts to the host.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync, existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { Browser } from "playwright-core";
import { launch, openPanel, loadFixture, root, type Panel } from "./harness";

let browser: Browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const SID = "019ad0c1-0000-7000-8000-000000000001";
const outDir = join(root, "test-results");

/** Plays the host for a panel on the recorded session: answers state, history, models. */
function hostFor(name: string, overrides: Record<string, (p: any) => unknown> = {}) {
  const { responses } = loadFixture(name);
  return (method: string, params: any) => {
    if (overrides[method]) return overrides[method]!(params);
    switch (method) {
      case "agent/model/list":
        return { models: [responses.get("agent/state")?.model].filter(Boolean) };
      case "agent/state":
        return responses.get("agent/state");
      case "agent/commands":
        return { commands: [{ name: "review", description: "Review the staged changes", source: "prompt" }, { name: "skill:tests", description: "Write tests", source: "skill" }] };
      case "agent/extension/commands":
        return { commands: [{ name: "tmux", description: "Manage tmux sessions", source: "extension", path: "<builtin:tmux>" }] };
      default:
        throw { code: -32601, message: `unhandled ${method}` };
    }
  };
}

/** A history page from a recorded `agent/messages` answer (servers before paged history). */
function historyFromMessages(m: any): any {
  return { sessionId: m.sessionId, leafId: m.entryIds.at(-1), entries: m.messages.map((message: any, i: number) => ({ type: "message", id: m.entryIds[i], parentId: i ? m.entryIds[i - 1] : null, message })), hasMore: false };
}

/** Sends notifications the way the host does: in order, a few per post. */
async function replay(panel: Panel, items: { method: string; params: any }[], perPost = 16): Promise<void> {
  for (let i = 0; i < items.length; i += perPost) {
    await panel.send({ type: "notifications", items: items.slice(i, i + perPost) });
  }
  await frames(panel, 2);
}

async function frames(panel: Panel, n = 1): Promise<void> {
  await panel.page.evaluate((k) => new Promise<void>((r) => {
    const step = (i: number) => (i === 0 ? r() : requestAnimationFrame(() => step(i - 1)));
    step(k);
  }), n);
}

/** Compares a screenshot with the golden image in the page (canvas pixels): the share of pixels
 * whose channels differ by more than 48 must stay under `maxShare`. Writes the golden when it
 * does not exist yet (then commit it). */
async function matchGolden(panel: Panel, name: string, png: Buffer, maxShare = 0.01): Promise<number> {
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, `${name}.png`), png);
  const golden = join(root, "test/webview/golden", `${name}.png`);
  if (!existsSync(golden)) {
    if (process.env.CI) throw new Error(`golden image ${golden} missing`);
    mkdirSync(join(root, "test/webview/golden"), { recursive: true });
    writeFileSync(golden, png);
    return 0;
  }
  // Compared in a blank page of its own (the panel's CSP forbids loading data: URLs).
  const blank = await panel.page.context().browser()!.newPage();
  const share = await blank.evaluate(async ([a, b]) => {
    const load = async (b64: string) => createImageBitmap(await (await fetch(`data:image/png;base64,${b64}`)).blob());
    const [x, y] = await Promise.all([load(a!), load(b!)]);
    if (x.width !== y.width || x.height !== y.height) return 1;
    const c = new OffscreenCanvas(x.width, x.height);
    const g = c.getContext("2d")!;
    g.drawImage(x, 0, 0);
    const da = g.getImageData(0, 0, x.width, x.height).data;
    g.clearRect(0, 0, x.width, x.height);
    g.drawImage(y, 0, 0);
    const db = g.getImageData(0, 0, x.width, x.height).data;
    let diff = 0;
    for (let i = 0; i < da.length; i += 4) {
      if (Math.abs(da[i]! - db[i]!) > 48 || Math.abs(da[i + 1]! - db[i + 1]!) > 48 || Math.abs(da[i + 2]! - db[i + 2]!) > 48) diff++;
    }
    return diff / (da.length / 4);
  }, [png.toString("base64"), readFileSync(golden).toString("base64")]);
  await blank.close();
  assert.ok(share <= maxShare, `${name}: ${(share * 100).toFixed(2)}% of the pixels differ from the golden image (see test-results/${name}.png)`);
  return share;
}

test("a recorded run: prompt, streamed markdown, thinking, tool cards, open diff, screenshot", async () => {
  const { notifications } = loadFixture("rich-run");
  const sid = notifications[0]!.params.sessionId;
  const panel = await openPanel(browser, {
    onRequest: hostFor("rich-run", { "agent/prompt": () => ({ sessionId: sid, runId: "r1", queued: false }) }),
  });
  await panel.send({ type: "init", sessionId: null, workspaceName: "demo", capabilities: {} });
  await panel.page.fill("textarea.input", "Make the greeting in src/greet.py configurable.");
  await panel.page.press("textarea.input", "Enter");
  await panel.page.waitForFunction(() => (window as any).__posts.some((m: any) => m.type === "attach"));
  const prompt = panel.requests.find((r) => r.method === "agent/prompt")!;
  assert.deepEqual(prompt.params, { text: "Make the greeting in src/greet.py configurable." });
  assert.equal(await panel.page.inputValue("textarea.input"), "");
  const posts = await panel.posts();
  assert.deepEqual(posts.find((m) => m.type === "attach"), { type: "attach", sessionId: sid });

  await replay(panel, notifications);
  const page = panel.page;
  // The transcript as the user sees it.
  const rows = await page.$$eval(".rows > .row", (els) => els.map((e) => e.className.replace("row ", "")));
  // The third answer is a tool call alone: its row is there but shows nothing (no-content).
  assert.deepEqual(rows, ["row-user", "row-assistant", "row-tool", "row-assistant", "row-tool", "row-assistant no-content", "row-tool", "row-assistant"]);
  assert.equal(await page.textContent(".row-user .user-text"), "Make the greeting in src/greet.py configurable.");
  // Thinking is collapsed once done.
  assert.equal(await page.$eval(".thinking", (d) => (d as HTMLDetailsElement).open), false);
  assert.equal(await page.textContent(".thinking .thinking-text"), "The user wants the greeting configurable. I should read the file first, then edit it.");
  // Markdown: an ordered list, inline code, bold, a highlighted Python block, a table, a quote.
  const md = page.locator(".row-assistant").first().locator(".md");
  assert.deepEqual(await md.locator("ol > li").allTextContents(), ["Read src/greet.py.", "Make the greeting configurable.", "Run it."]);
  assert.equal(await md.locator("strong").first().textContent(), "configurable");
  assert.equal(await md.locator("pre code.language-python").count(), 1);
  assert.ok((await md.locator("pre code.language-python span.hljs-keyword").count()) >= 2, "python keywords are highlighted");
  assert.deepEqual(await md.locator("table td").allTextContents(), ["src/greet.py", "new name parameter"]);
  assert.equal(await md.locator("blockquote").textContent().then((t) => t?.trim()), "The script keeps its old output by default.");
  // Tool cards, done, with arguments and output.
  const cards = await page.$$eval(".row-tool", (els) => els.map((e) => [e.querySelector(".tool-name")!.textContent, e.getAttribute("data-state"), e.querySelector(".tool-summary")!.textContent]));
  assert.deepEqual(cards, [
    ["read", "done", "src/greet.py"],
    ["write", "done", "src/greet.py"],
    ["bash", "done", "python3 src/greet.py && echo done"],
  ]);
  assert.equal((await page.locator(".row-tool").nth(2).locator(".tool-preview").textContent())?.trim(), "Hello, world!\ndone");
  assert.equal(await page.textContent(".status"), "Idle");
  assert.match((await page.textContent(".meter-text")) ?? "", /^\d+% · \$0\.\d{2}$/);
  // "Open diff" on the write posts openDiff for that tool call.
  await page.locator(".row-tool").nth(1).locator("button.open-diff").click();
  const last = (await panel.posts()).at(-1);
  assert.deepEqual(last, { type: "openDiff", toolCallId: "toolu_edit1", path: "src/greet.py" });
  // No rendered element comes from outside the page, nothing unsafe got in.
  assert.equal(await page.locator("script:not([nonce]), iframe, [onclick], [onerror]").count(), 0);
  assert.deepEqual(panel.errors, []);
  await page.locator("#transcript").evaluate((e) => (e.scrollTop = 0));
  await frames(panel, 2);
  const png = await page.screenshot();
  await matchGolden(panel, "webview-run", png);
  await page.context().close();
});

test("packed posts (the UTF-8 JSON bytes of several host messages) give the transcript the same messages give posted one by one", async () => {
  const { notifications } = loadFixture("rich-run");
  const sid = notifications[0]!.params.sessionId;
  const rowsOf = async (packed: boolean) => {
    const panel = await openPanel(browser, { onRequest: hostFor("rich-run", { "agent/prompt": () => ({ sessionId: sid, runId: "r1", queued: false }) }) });
    assert.deepEqual((await panel.posts()).find((m) => m.type === "ready")?.accepts, ["visibility", "packed"]);
    await panel.send({ type: "init", sessionId: null, workspaceName: "demo", capabilities: {} });
    await panel.page.fill("textarea.input", "Make the greeting in src/greet.py configurable.");
    await panel.page.press("textarea.input", "Enter");
    await panel.page.waitForFunction(() => (window as any).__posts.some((m: any) => m.type === "attach"));
    const messages: unknown[] = [];
    for (let i = 0; i < notifications.length; i += 16) messages.push({ type: "notifications", items: notifications.slice(i, i + 16) });
    if (packed) {
      // Three messages per post, as bytes (how VS Code hands a Uint8Array over), the last as text.
      for (let i = 0; i < messages.length; i += 3) {
        const json = JSON.stringify(messages.slice(i, i + 3));
        await panel.page.evaluate(([text, last]) => window.postMessage({ type: "packed", json: last ? text : new TextEncoder().encode(text) }, "*"), [json, i + 3 >= messages.length] as const);
      }
    } else for (const m of messages) await panel.send(m);
    await frames(panel, 3);
    const rows = await panel.page.$$eval(".rows > .row", (els) => els.map((e) => [e.className, e.textContent]));
    assert.deepEqual(panel.errors, []);
    await panel.page.context().close();
    return rows;
  };
  const plain = await rowsOf(false);
  assert.equal(plain.length, 8, "the recorded run's rows");
  assert.deepEqual(await rowsOf(true), plain);
});

test("steer while running, follow-up with Alt+Enter, the queue with remove, abort with its report", async () => {
  const { notifications, responses } = loadFixture("abort-run");
  const sid = notifications[0]!.params.sessionId;
  let queueN = 0;
  let abortAnswer: ((v: unknown) => void) | null = null;
  const panel = await openPanel(browser, {
    onRequest: hostFor("abort-run", {
      "agent/prompt": (p) => (p.streamingBehavior ? { sessionId: sid, runId: "r", queued: true, queueId: `q${++queueN}` } : { sessionId: sid, runId: "r", queued: false }),
      "agent/abort": () => new Promise((r) => (abortAnswer = r)),
      "agent/queue/remove": () => ({ removed: true }),
      "agent/session/history": () => ({ sessionId: sid, leafId: null, entries: [], hasMore: false }),
      "agent/state": () => ({ ...responses.get("agent/state"), isStreaming: false }),
    }),
  });
  await panel.send({ type: "init", sessionId: sid, workspaceName: "demo", capabilities: {} });
  const page = panel.page;
  const at = notifications.findIndex((n) => n.params?.event?.type === "tool_execution_start");
  await replay(panel, notifications.slice(0, at + 1));
  assert.equal(await page.textContent(".status"), "Running");
  assert.equal(await page.locator(".row-tool").getAttribute("data-state"), "running");
  // Enter while running steers; Alt+Enter queues a follow-up.
  await page.fill("textarea.input", "use a shorter sleep");
  await page.press("textarea.input", "Enter");
  await page.fill("textarea.input", "then summarise");
  await page.press("textarea.input", "Alt+Enter");
  await page.waitForFunction(() => document.querySelectorAll(".queue-item").length === 2);
  const prompts = panel.requests.filter((r) => r.method === "agent/prompt").map((r) => r.params);
  assert.deepEqual(prompts, [
    { text: "use a shorter sleep", sessionId: sid, streamingBehavior: "steer" },
    { text: "then summarise", sessionId: sid, streamingBehavior: "followUp" },
  ]);
  assert.deepEqual(await page.$$eval(".queue-item", (els) => els.map((e) => [e.querySelector(".queue-delivery")!.textContent, e.querySelector(".queue-text")!.textContent, e.getAttribute("data-state")])), [
    ["steer", "use a shorter sleep", "queued"],
    ["follow-up", "then summarise", "queued"],
  ]);
  // Remove the follow-up before delivery.
  await page.locator(".queue-item").nth(1).getByText("Remove").click();
  await page.waitForFunction(() => document.querySelectorAll(".queue-item").length === 1);
  assert.deepEqual(panel.requests.at(-1), { method: "agent/queue/remove", params: { sessionId: sid, queueId: "q2" } });
  // Escape stops: "Stopping…" at once (before the server answers).
  await page.locator("#transcript").focus();
  // Measured in the page: from the key event to the status change.
  await page.evaluate(() => {
    const w = window as any;
    document.addEventListener("keydown", (e) => (w.__escAt = e.timeStamp), { capture: true, once: true });
    const status = document.querySelector(".status")!;
    new MutationObserver(() => {
      if (status.textContent === "Stopping…" && w.__stopAt === undefined) w.__stopAt = performance.now();
    }).observe(status, { childList: true, characterData: true, subtree: true });
  });
  await page.keyboard.press("Escape");
  await page.waitForFunction(() => (window as any).__stopAt !== undefined);
  const shownMs = await page.evaluate(() => (window as any).__stopAt - (window as any).__escAt);
  assert.ok(shownMs < 100, `"stopping" shown after ${shownMs} ms`);
  assert.deepEqual(panel.requests.at(-1), { method: "agent/abort", params: { sessionId: sid } });
  assert.equal(await page.locator("button.stop").isDisabled(), true);
  await replay(panel, notifications.slice(at + 1));
  abortAnswer!(responses.get("agent/abort"));
  await page.waitForSelector(".row-abort");
  const report = await page.textContent(".row-abort");
  assert.match(report!, /Stopped tool calls: bash echo started; sleep 30; echo never/);
  assert.match(report!, /Killed process: echo started; sleep 30; echo never/);
  assert.equal(await page.locator('.row-tool[data-state="running"], .row-tool[data-state="pending"]').count(), 0);
  assert.equal(await page.textContent(".status"), "Idle");
  // Text had streamed: the composer is left alone.
  assert.equal(await page.inputValue("textarea.input"), "");
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("abort before anything streamed puts the prompt back; the stop button aborts", async () => {
  const panel = await openPanel(browser, {
    onRequest: (m) => {
      if (m === "agent/prompt") return { sessionId: SID, runId: "r9", queued: false };
      if (m === "agent/abort") return { aborted: true, runId: "r9", stoppedToolCalls: [], stoppedProcesses: [], appliedEdits: [], queuedMessages: [] };
      if (m === "agent/model/list") return { models: [] };
      throw { code: -32601, message: m };
    },
  });
  await panel.send({ type: "init", sessionId: null, workspaceName: "demo", capabilities: {} });
  await panel.page.fill("textarea.input", "explain the build");
  await panel.page.press("textarea.input", "Enter");
  // The prompt shows at once, before the server's events: "Sending…" under the transcript.
  await panel.page.waitForSelector(".sending:not([hidden])");
  assert.equal(await panel.page.textContent(".sending .user-text"), "explain the build");
  assert.equal(await panel.page.textContent(".status"), "Sending…");
  assert.equal(await panel.page.isVisible(".empty"), false);
  const ev = (event: unknown) => ({ method: "agent/event", params: { sessionId: SID, runId: "r9", event } });
  await replay(panel, [ev({ type: "agent_start" }), ev({ type: "turn_start" }), ev({ type: "message_start", message: { role: "user", content: [{ type: "text", text: "explain the build" }], timestamp: 1764600000000 } })]);
  // Its row in the transcript replaces it.
  await panel.page.waitForSelector(".sending", { state: "hidden" });
  assert.equal(await panel.page.textContent(".rows .row-user .user-text"), "explain the build");
  assert.equal(await panel.page.textContent(".status"), "Waiting for model");
  await panel.page.click("button.stop");
  await panel.page.waitForSelector(".row-abort");
  await replay(panel, [ev({ type: "agent_end", messages: [] })]);
  assert.equal(await panel.page.inputValue("textarea.input"), "explain the build");
  await panel.page.context().close();
});

test("a permission card: tool, reason, diff; keyboard only; allow always in the offered scope; reject with a reason", async () => {
  const { notifications } = loadFixture("ask-run");
  const lines = readFileSync(join(root, "test/fixtures/ask-run.jsonl"), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
  const asks = lines.filter((l) => l.serverRequest === "agent/requestPermission").map((l) => l.params);
  assert.equal(asks.length, 3, "the recorded run asked three times (edit, bash, bash outside the sandbox)");
  const panel = await openPanel(browser, { onRequest: hostFor("ask-run", { "agent/session/history": () => ({ sessionId: asks[0].sessionId, leafId: null, entries: [], hasMore: false }) }) });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: asks[0].sessionId, workspaceName: "demo", capabilities: {} });
  // The run as recorded up to its first question (the edit's call has streamed: it has a card).
  const firstAsk = lines.findIndex((l) => l.serverRequest === "agent/requestPermission");
  await replay(panel, notifications.slice(0, lines.slice(0, firstAsk).filter((l) => l.method).length));
  await panel.send({ type: "serverRequest", requestId: 7, method: "agent/requestPermission", params: asks[0] });
  await page.waitForSelector(".card.permission");
  // Posted again (a re-attach): still one card.
  await panel.send({ type: "serverRequest", requestId: 7, method: "agent/requestPermission", params: asks[0] });
  await frames(panel, 2);
  assert.equal(await page.locator(".card.permission").count(), 1);
  // The call's card says it waits for the user, not that it runs.
  const callRow = page.locator(`.row-tool[data-id="tool:${asks[0].toolCallId}"]`);
  await page.waitForFunction((id) => document.querySelector(`.row-tool[data-id="tool:${id}"]`)?.getAttribute("data-state") === "waiting", asks[0].toolCallId);
  assert.equal(await callRow.locator(".tool-state").textContent(), "waiting");
  assert.equal(await page.textContent(".status"), "Waiting for you");
  assert.equal(await page.textContent(".card.permission .card-title"), "pi wants to edit src/greet.py");
  assert.equal(await page.textContent(".card.permission .card-reason"), asks[0].reason);
  assert.deepEqual(await page.$$eval(".card.permission .diff span", (s) => s.map((x) => [x.className, x.textContent])).then((l) => l.filter(([c]) => c === "diff-add" || c === "diff-del")), [
    ["diff-del", "-def greet(name: str) -> str:"],
    ["diff-add", "+def welcome(name: str) -> str:"],
  ]);
  const buttons = await page.$$eval(".card.permission button", (b) => b.map((x) => x.textContent));
  assert.deepEqual(buttons, ["Allow once", "Allow edit for this session", "Allow edit in this workspace", "Reject", "Open in diff editor"]);
  // The card never takes focus by itself.
  assert.equal(await page.evaluate(() => document.activeElement?.closest(".card") ?? null), null);
  // Keyboard: Tab from the composer's predecessor to "Allow edit for this session" and press Enter.
  await page.focus(".card.permission button.primary");
  await page.keyboard.press("Tab");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => !document.querySelector(".card.permission"));
  assert.deepEqual((await panel.posts()).at(-1), { type: "serverResponse", requestId: 7, result: { decision: "allowAlways", scope: "session" } });
  await page.waitForFunction((id) => document.querySelector(`.row-tool[data-id="tool:${id}"]`)?.getAttribute("data-state") !== "waiting", asks[0].toolCallId);
  assert.notEqual(await callRow.locator(".tool-state").textContent(), "waiting");
  assert.equal(await page.textContent(".status"), "Running");
  // The bash question: reject with a reason typed in the card (Enter in the field rejects).
  await panel.send({ type: "serverRequest", requestId: 8, method: "agent/requestPermission", params: asks[1] });
  await page.waitForSelector(".card.permission");
  // The command shows as code (not with its backticks).
  assert.equal(await page.textContent(".card.permission .card-title"), "pi wants to run cargo test -p demo");
  assert.equal(await page.textContent(".card.permission .card-title code"), "cargo test -p demo");
  assert.deepEqual(await page.$$eval(".card.permission button code", (c) => c.map((x) => x.textContent)), ["cargo test", "cargo test"]);
  await page.fill(".card.permission .reject-reason", "not now");
  await page.press(".card.permission .reject-reason", "Enter");
  await page.waitForFunction(() => !document.querySelector(".card.permission"));
  assert.deepEqual((await panel.posts()).at(-1), { type: "serverResponse", requestId: 8, result: { decision: "reject", reason: "not now" } });
  // Answered elsewhere: the host withdraws the card.
  await panel.send({ type: "serverRequest", requestId: 9, method: "agent/requestPermission", params: asks[1] });
  await page.waitForSelector(".card.permission");
  await panel.send({ type: "serverRequestDone", requestId: 9 });
  await page.waitForFunction(() => !document.querySelector(".card.permission"));
  // The sandbox's question offers no rule: allow once or reject. Access keys: Alt+A allows once
  // (not while typing in the composer: there Alt+letter may type a character).
  await panel.send({ type: "serverRequest", requestId: 10, method: "agent/requestPermission", params: asks[2] });
  await page.waitForSelector(".card.permission");
  assert.equal(await page.textContent(".card.permission .card-reason"), "sandbox denied: Permission denied (os error 13)");
  assert.deepEqual(await page.$$eval(".card.permission button", (b) => b.map((x) => x.textContent)), ["Allow once", "Reject"]);
  await page.focus("textarea.input");
  await page.keyboard.press("Alt+a");
  await frames(panel, 2);
  assert.equal(await page.locator(".card.permission").count(), 1);
  await page.click(".card.permission .card-title");
  await page.keyboard.press("Alt+a");
  await page.waitForFunction(() => !document.querySelector(".card.permission"));
  assert.deepEqual((await panel.posts()).at(-1), { type: "serverResponse", requestId: 10, result: { decision: "allow" } });
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("extension UI cards: select, confirm, input with a visible timeout", async () => {
  const panel = await openPanel(browser, { onRequest: () => ({ models: [] }) });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: null, workspaceName: "demo", capabilities: {} });
  const ui = JSON.parse(readFileSync(join(root, "../fixtures/protocol/agent-ui-request.request.json"), "utf8")).params;
  await panel.send({ type: "serverRequest", requestId: 1, method: "agent/ui/request", params: ui });
  await page.waitForSelector(".card.ui-request");
  assert.equal(await page.textContent(".card.ui-request .card-title"), "tmux: Kill which tmux session?");
  await page.getByRole("button", { name: "db" }).click();
  assert.deepEqual((await panel.posts()).at(-1), { type: "serverResponse", requestId: 1, result: { value: "db" } });
  await panel.send({ type: "serverRequest", requestId: 2, method: "agent/ui/request", params: { sessionId: SID, extension: "deploy", method: "input", title: "Tag name", placeholder: "v1.2.3", timeout: 30000 } });
  await page.waitForSelector(".card.ui-request .timeout");
  assert.equal(await page.textContent(".card.ui-request .timeout-text"), "Cancelled automatically after 30 s");
  await page.fill(".card.ui-request .ui-field", "v2.0.0");
  await page.press(".card.ui-request .ui-field", "Enter");
  assert.deepEqual((await panel.posts()).at(-1), { type: "serverResponse", requestId: 2, result: { value: "v2.0.0" } });
  await panel.send({ type: "serverRequest", requestId: 3, method: "agent/ui/request", params: { sessionId: SID, extension: "deploy", method: "confirm", title: "Deploy?", message: "to production" } });
  await page.waitForSelector(".card.ui-request");
  await page.getByRole("button", { name: "No" }).click();
  assert.deepEqual((await panel.posts()).at(-1), { type: "serverResponse", requestId: 3, result: { confirmed: false } });
  await page.context().close();
});

test("@ mentions, / completion, context chips and a pasted image go into the prompt", async () => {
  const { notifications } = loadFixture("rich-run");
  const sid = notifications[0]!.params.sessionId;
  const panel = await openPanel(browser, {
    onRequest: hostFor("rich-run", {
      "agent/prompt": () => ({ sessionId: sid, runId: "r", queued: false }),
      "agent/session/history": () => ({ sessionId: sid, leafId: null, entries: [], hasMore: false }),
    }),
  });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: sid, workspaceName: "demo", capabilities: {} });
  await page.focus("textarea.input");
  await page.keyboard.type("look at @gre");
  await page.waitForFunction(() => (window as any).__posts.some((m: any) => m.type === "pickFiles" && m.query === "gre"));
  await panel.send({ type: "files", query: "gre", items: [{ path: "src/greet.py", label: "greet.py" }] });
  await page.waitForSelector(".popup li");
  await page.keyboard.press("Enter");
  assert.equal(await page.inputValue("textarea.input"), "look at @src/greet.py ");
  await page.fill("textarea.input", "");
  await page.keyboard.type("/t");
  await page.waitForSelector(".popup li");
  assert.deepEqual(await page.$$eval(".popup .popup-label", (l) => l.map((x) => x.textContent)), ["/tmux", "/skill:tests", "/compact"]);
  await page.keyboard.press("Tab");
  assert.equal(await page.inputValue("textarea.input"), "/tmux ");
  await page.fill("textarea.input", "");
  await panel.send({ type: "context", items: [{ kind: "selection", label: "greet.py:1-2", text: "def greet(name: str) -> str:\n    return f\"Hello, {name}!\"", path: "src/greet.py", range: { startLine: 1, endLine: 2 } }] });
  await page.waitForSelector(".chip-selection");
  // A pasted PNG becomes an image of the prompt.
  const imgDir = join(root, "../fixtures/images");
  const png = readFileSync(join(imgDir, readdirSync(imgDir).find((f) => f.endsWith(".png"))!), "base64");
  await page.evaluate((b64) => {
    const bin = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const dt = new DataTransfer();
    dt.items.add(new File([bin], "shot.png", { type: "image/png" }));
    document.querySelector("textarea.input")!.dispatchEvent(new ClipboardEvent("paste", { clipboardData: dt, bubbles: true, cancelable: true }));
  }, png);
  await page.waitForSelector(".chip-image");
  await page.fill("textarea.input", "why is this slow?");
  await page.press("textarea.input", "Enter");
  await page.waitForFunction(() => (window as any).__posts.filter((m: any) => m.type === "request" && m.method === "agent/prompt").length === 1);
  const p = panel.requests.find((r) => r.method === "agent/prompt")!.params;
  assert.equal(p.text, "Selection from src/greet.py:1-2:\n```\ndef greet(name: str) -> str:\n    return f\"Hello, {name}!\"\n```\n\nwhy is this slow?");
  assert.deepEqual(p.images, [{ type: "image", data: png, mimeType: "image/png" }]);
  assert.equal(p.sessionId, sid);
  await page.context().close();
});

test("webview state keeps the draft and the session across a reload; the panel re-attaches", async () => {
  const { responses } = loadFixture("rich-run");
  const page0 = responses.get("agent/session/history") ?? historyFromMessages(responses.get("agent/messages"));
  const sid = page0.sessionId;
  const panel = await openPanel(browser, {
    state: { sessionId: sid, draft: "half-typed idea", scrollFromBottom: 0 },
    onRequest: hostFor("rich-run", { "agent/session/history": () => page0 }),
  });
  await panel.send({ type: "init", sessionId: null, workspaceName: "demo", capabilities: {} });
  await panel.page.waitForSelector(".row-assistant .md-block");
  assert.equal(await panel.page.inputValue("textarea.input"), "half-typed idea");
  assert.ok((await panel.posts()).some((m) => m.type === "attach" && m.sessionId === sid));
  assert.deepEqual(panel.requests.filter((r) => r.method === "agent/session/history").map((r) => r.params), [{ sessionId: sid, limit: 50 }]);
  await panel.page.keyboard.type("");
  await panel.page.fill("textarea.input", "half-typed idea, more");
  await panel.page.dispatchEvent("textarea.input", "input");
  const state = await panel.page.evaluate(() => (window as any).__state);
  assert.equal(state.draft, "half-typed idea, more");
  assert.equal(state.sessionId, sid);
  await panel.page.context().close();
});

test("model text cannot inject markup: raw HTML and javascript: links are sanitised, while streaming and after", async () => {
  const panel = await openPanel(browser, { onRequest: (m) => (m === "agent/model/list" ? { models: [] } : Promise.reject({ code: -32601, message: m })) });
  await panel.send({ type: "init", sessionId: null, workspaceName: "demo", capabilities: {} });
  const ev = (event: unknown) => ({ method: "agent/event", params: { sessionId: SID, runId: "rx", event } });
  const evil = 'Look <img src=x onerror="window.__pwned=1"> and [click](javascript:window.__pwned=2) <script>window.__pwned=3</script>\n\nnext';
  const upd = (e: unknown) => ev({ type: "message_update", assistantMessageEvent: e });
  await replay(panel, [ev({ type: "agent_start" }), ev({ type: "message_start", message: { role: "assistant", content: [], stopReason: "stop", timestamp: 42 } }), upd({ type: "text_start", contentIndex: 0 }), upd({ type: "text_delta", contentIndex: 0, delta: evil.slice(0, 60) })]);
  await frames(panel, 4);
  const check = () => panel.page.evaluate(() => ({ pwned: (window as any).__pwned ?? null, onerror: document.querySelectorAll("[onerror]").length, js: [...document.querySelectorAll("a")].filter((a) => /^javascript:/i.test(a.getAttribute("href") ?? "")).length, scripts: document.querySelectorAll(".md script").length }));
  assert.deepEqual(await check(), { pwned: null, onerror: 0, js: 0, scripts: 0 });
  await replay(panel, [upd({ type: "text_delta", contentIndex: 0, delta: evil.slice(60) }), ev({ type: "message_end", message: { role: "assistant", content: [{ type: "text", text: evil }], stopReason: "stop", timestamp: 42 } }), ev({ type: "agent_end", messages: [] })]);
  await frames(panel, 4);
  assert.deepEqual(await check(), { pwned: null, onerror: 0, js: 0, scripts: 0 });
  assert.equal(await panel.page.locator(".row-assistant .md img").count(), 1, "the image stays, without its handler");
  await panel.page.context().close();
});

test("model and thinking pickers send agent/model/set and agent/thinking/set; the level shown is the server's clamped one; the meter follows agent/usage", async () => {
  const { responses } = loadFixture("rich-run");
  const state = responses.get("agent/state");
  const other = { ...state.model, provider: "mock", id: "small-1", name: "Small", reasoning: false, thinkingLevels: [] };
  const panel = await openPanel(browser, {
    onRequest: hostFor("rich-run", {
      "agent/model/list": () => ({ models: [state.model, other] }),
      "agent/session/history": () => ({ sessionId: state.sessionId, leafId: null, entries: [], hasMore: false }),
      "agent/model/set": (p) => ({ model: p.model === "mock/small-1" ? other : state.model, thinkingLevel: "off" }),
      "agent/thinking/set": () => ({ level: "medium" }),
    }),
  });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: state.sessionId, workspaceName: "demo", capabilities: {} });
  await page.waitForFunction(() => document.querySelectorAll(".model-select option").length === 2);
  assert.equal(await page.inputValue(".model-select"), `${state.model.provider}/${state.model.id}`);
  const levels = await page.$$eval(".thinking-select option", (o) => o.map((x) => (x as HTMLOptionElement).value));
  assert.ok(levels.length > 1 && levels.includes("high"), `levels ${levels}`);
  await page.selectOption(".thinking-select", "high");
  await page.waitForFunction(() => (document.querySelector(".thinking-select") as HTMLSelectElement).value === "medium");
  assert.deepEqual(panel.requests.filter((r) => r.method === "agent/thinking/set").map((r) => r.params), [{ sessionId: state.sessionId, level: "high" }]);
  await page.selectOption(".model-select", "mock/small-1");
  await page.waitForFunction(() => (document.querySelector(".thinking-select") as HTMLSelectElement).disabled);
  assert.deepEqual(panel.requests.filter((r) => r.method === "agent/model/set").map((r) => r.params), [{ sessionId: state.sessionId, model: "mock/small-1" }]);
  await replay(panel, [{ method: "agent/usage", params: { sessionId: state.sessionId, runId: "r", turn: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2, cost: 0.01 }, session: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 150000, cost: 1.5 }, contextTokens: 150000, contextWindow: 200000 } }]);
  assert.equal(await page.textContent(".meter-text"), "75% · $1.50");
  assert.equal(await page.getAttribute(".meter", "data-level"), "mid");
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});
