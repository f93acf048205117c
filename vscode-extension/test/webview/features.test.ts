/**
 * Round-2 panel features in headless Chromium (issues 30 and 31): the plan strip, the header's
 * plan-mode switch and the plan question; deliberate answers (no stray key answers a card);
 * the approval card's changed lines first; Retry after a failed run, the failed prompt back in
 * the composer and ↑ recall. Each test plays the host (harness.ts) with the server's own
 * notification and answer shapes (docs/protocol.md, fixtures/protocol/*.json) and saves a
 * screenshot under test-results/ to look at.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Browser } from "playwright-core";
import { launch, openPanel, root, type Panel } from "./harness";

let browser: Browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const SID = "01a22d67-d357-722e-afd8-b78dfc6ea512";
const outDir = join(root, "test-results");

async function frames(panel: Panel, n = 2): Promise<void> {
  await panel.page.evaluate((k) => new Promise<void>((r) => {
    const step = (i: number) => (i === 0 ? r() : requestAnimationFrame(() => step(i - 1)));
    step(k);
  }), n);
}

async function shot(panel: Panel, name: string): Promise<void> {
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, `${name}.png`), await panel.page.screenshot());
}

/** The recorded answer of `agent/plan/get` (fixtures/protocol). */
const planFixture = JSON.parse(readFileSync(join(root, "../fixtures/protocol/agent-plan-get.response.json"), "utf8")).result;

function planState(over: Record<string, unknown> = {}): any {
  return { ...structuredClone(planFixture), sessionId: SID, ...over };
}

/** A host answering state, history and the plan methods. */
function host(over: Record<string, (p: any) => unknown> = {}) {
  return (method: string, params: any) => {
    if (over[method]) return over[method]!(params);
    switch (method) {
      case "agent/model/list":
        return { models: [] };
      case "agent/state":
        return { sessionId: SID, isStreaming: false, model: null, thinkingLevel: "off" };
      case "agent/session/stats":
        return {};
      case "agent/session/history":
        return { sessionId: SID, leafId: null, entries: [], hasMore: false };
      default:
        throw { code: -32601, message: `unhandled ${method}` };
    }
  };
}

test("the plan strip: steps, done/total, the current step highlighted, collapsible; updated in place; the header switch turns plan mode on", async () => {
  let mode = "executing";
  const panel = await openPanel(browser, {
    onRequest: host({
      "agent/plan/get": () => planState({ mode }),
      "agent/plan/set": (p) => {
        assert.equal(p.sessionId, SID);
        mode = p.enabled ? "plan" : "off";
        return planState({ mode, todos: p.enabled ? planFixture.todos.map((t: any) => ({ ...t, status: t.done ? "completed" : "pending" })) : planFixture.todos });
      },
    }),
  });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  // The session's plan is asked for when the panel opens it.
  await page.waitForSelector(".plan:not([hidden]) .plan-step");
  assert.ok(panel.requests.some((r) => r.method === "agent/plan/get" && r.params.sessionId === SID));
  assert.equal(await page.textContent(".plan-title"), "Plan");
  assert.equal(await page.textContent(".plan-count"), "1/2");
  assert.deepEqual(
    await page.$$eval(".plan-step", (l) => l.map((x) => [x.getAttribute("data-status"), x.querySelector(".plan-text")!.textContent, x.getAttribute("aria-current")])),
    [
      ["completed", "Read the config", null],
      ["in_progress", "Change the greeting", "step"],
    ],
  );
  // Above the composer (and below the transcript).
  const [stripBox, composerBox] = await Promise.all([page.locator(".plan").boundingBox(), page.locator(".composer").boundingBox()]);
  assert.ok(stripBox!.y + stripBox!.height <= composerBox!.y + 1, "the strip sits above the composer");
  await shot(panel, "plan-strip");
  // An `agent/plan` notification replaces the list (the model added a step and finished one).
  const next = planState({
    todos: [
      { id: 1, text: "Read the config", done: true, status: "completed", priority: "medium" },
      { id: 2, text: "Change the greeting", done: true, status: "completed", priority: "medium" },
      { id: 3, text: "Run the tests", done: false, status: "in_progress", priority: "high" },
    ],
    nextId: 4,
    completed: 2,
    total: 3,
  });
  await panel.send({ type: "notifications", items: [{ method: "agent/plan", params: next }] });
  await page.waitForFunction(() => document.querySelector(".plan-count")?.textContent === "2/3");
  assert.equal(await page.locator(".plan-step").count(), 3);
  assert.equal(await page.textContent(".plan-step[aria-current=step] .plan-text"), "Run the tests");
  assert.equal(await page.textContent(".plan-step[aria-current=step] .plan-priority"), "high");
  // Another session's plan is not shown here.
  await panel.send({ type: "notifications", items: [{ method: "agent/plan", params: { ...next, sessionId: "other", completed: 0, total: 9 } }] });
  await frames(panel);
  assert.equal(await page.textContent(".plan-count"), "2/3");
  // Collapsed: one line with the current step; kept in the webview state.
  await page.click(".plan-head");
  assert.equal(await page.getAttribute(".plan-head", "aria-expanded"), "false");
  assert.equal(await page.isHidden(".plan-steps"), true);
  assert.equal(await page.textContent(".plan-count"), "2/3 · Run the tests");
  assert.equal(await page.evaluate(() => (window as any).__state.planCollapsed), true);
  await shot(panel, "plan-strip-collapsed");
  await page.click(".plan-head");
  assert.equal(await page.isVisible(".plan-steps"), true);
  // The header's switch: off → plan mode (agent/plan/set), pressed, the strip says so.
  const toggle = page.locator(".header .plan-toggle");
  assert.equal(await toggle.getAttribute("aria-pressed"), "false");
  await toggle.click();
  await page.waitForFunction(() => document.querySelector(".header .plan-toggle")?.getAttribute("aria-pressed") === "true");
  assert.deepEqual(panel.requests.filter((r) => r.method === "agent/plan/set").map((r) => r.params), [{ sessionId: SID, enabled: true }]);
  assert.equal(await page.textContent(".plan-title"), "Plan mode");
  assert.equal(await page.locator(".plan-step[aria-current=step]").count(), 0);
  await shot(panel, "plan-mode-on");
  await toggle.click();
  await page.waitForFunction(() => document.querySelector(".header .plan-toggle")?.getAttribute("aria-pressed") === "false");
  assert.deepEqual(panel.requests.filter((r) => r.method === "agent/plan/set").at(-1)!.params, { sessionId: SID, enabled: false });
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("the plan question is a card with the plan and its three choices; a choice answers the select", async () => {
  const panel = await openPanel(browser, { onRequest: host({ "agent/plan/get": () => planState({ mode: "plan", todos: planFixture.todos.map((t: any) => ({ ...t, done: false, status: "pending" })), completed: 0 }) }) });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await page.waitForSelector(".plan:not([hidden]) .plan-step");
  const question = { sessionId: SID, extension: "plan-mode", method: "select", title: "Plan mode - what next?", options: ["Execute the plan (track progress)", "Stay in plan mode", "Refine the plan"] };
  await panel.send({ type: "serverRequest", requestId: 4, method: "agent/ui/request", params: question });
  await page.waitForSelector(".card.plan-question");
  assert.equal(await page.textContent(".card.plan-question .card-title"), "Plan mode - what next?");
  assert.deepEqual(await page.$$eval(".card.plan-question .plan-question-steps li", (l) => l.map((x) => x.textContent)), ["Read the config", "Change the greeting"]);
  assert.deepEqual(await page.$$eval(".card.plan-question button", (b) => b.map((x) => x.textContent)), ["Execute the plan (track progress)", "Stay in plan mode", "Refine the plan", "Cancel"]);
  assert.deepEqual(await page.$$eval(".card.plan-question .plan-choice-why", (b) => b.map((x) => x.textContent)), [
    "Restore the tools and carry out the steps; progress shows in the plan.",
    "Keep planning read-only; nothing is changed.",
    "Say what to change; the agent plans again.",
  ]);
  await shot(panel, "plan-question");
  await page.getByRole("button", { name: "Execute the plan (track progress)" }).click();
  await page.waitForFunction(() => !document.querySelector(".card.plan-question"));
  assert.deepEqual((await panel.posts()).at(-1), { type: "serverResponse", requestId: 4, result: { value: "Execute the plan (track progress)" } });
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

/** The recorded edit question (fixtures/protocol). */
const editAsk = JSON.parse(readFileSync(join(root, "../fixtures/protocol/agent-requestPermission.edit.request.json"), "utf8")).params;

test("deliberate answers: keys typed in the composer, Space and typing on a focused answer answer nothing; Enter on it or a click does", async () => {
  const panel = await openPanel(browser, { onRequest: host() });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  const answers = async () => (await panel.posts()).filter((m) => m.type === "serverResponse");
  // The user is typing when the question comes.
  await page.focus("textarea.input");
  await page.keyboard.type("rename greet ");
  await panel.send({ type: "serverRequest", requestId: 1, method: "agent/requestPermission", params: editAsk });
  await page.waitForSelector(".card.permission");
  // Alt+letter typed in the composer (Option+A types "å" on a Mac) and more text: no answer.
  await page.keyboard.press("Alt+a");
  await page.keyboard.press("Alt+s");
  await page.keyboard.press("Alt+r");
  await page.keyboard.type("to welcome");
  await frames(panel);
  assert.deepEqual(await answers(), []);
  assert.equal(await page.inputValue("textarea.input"), "rename greet to welcome");
  // A focused answer: Space and letters answer nothing (a sentence typed with the focus there).
  await page.focus(".card.permission button.primary");
  await page.keyboard.type("yes please ");
  await page.keyboard.press(" ");
  await frames(panel);
  assert.deepEqual(await answers(), []);
  assert.equal(await page.locator(".card.permission").count(), 1);
  // Enter on the focused answer is deliberate.
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => !document.querySelector(".card.permission"));
  assert.deepEqual(await answers(), [{ type: "serverResponse", requestId: 1, result: { decision: "allow" } }]);
  // An extension question's options: the same rule; a click answers.
  await panel.send({ type: "serverRequest", requestId: 2, method: "agent/ui/request", params: { sessionId: SID, extension: "tmux", method: "select", title: "Kill which tmux session?", options: ["web", "db"] } });
  await page.waitForSelector(".card.ui-request");
  await page.focus(".card.ui-request button.primary");
  await page.keyboard.press(" ");
  await frames(panel);
  assert.equal((await answers()).length, 1);
  await page.getByRole("button", { name: "db" }).click();
  assert.deepEqual((await answers()).at(-1), { type: "serverResponse", requestId: 2, result: { value: "db" } });
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("the approval card shows the changed lines first, context folded, scrollable, the answers in reach", async () => {
  const panel = await openPanel(browser, { onRequest: host(), height: 600 });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await panel.send({ type: "serverRequest", requestId: 1, method: "agent/requestPermission", params: editAsk });
  await page.waitForSelector(".card.permission");
  assert.deepEqual(await page.$$eval(".card.permission .diff-changes span", (s) => s.map((x) => [x.className, x.textContent])), [
    ["diff-where", "line 1"],
    ["diff-del", "-def greet(name):"],
    ["diff-add", "+def welcome(name):"],
  ]);
  assert.equal(await page.textContent(".card.permission .diff-fold summary"), "Show with context (1 unchanged line)");
  assert.equal(await page.locator(".card.permission .diff-context").count(), 0);
  await page.click(".card.permission .diff-fold summary");
  // The context is built on the `toggle` event, which the browser fires in a task after the
  // click: wait for it, not for the click.
  await page.waitForSelector(".card.permission .diff-context span");
  assert.deepEqual(await page.$$eval(".card.permission .diff-context span", (s) => s.map((x) => x.textContent)), [
    "--- src/greet.py",
    "+++ src/greet.py",
    "@@ -1,2 +1,2 @@",
    "-def greet(name):",
    "+def welcome(name):",
    '     return f"Hello, {name}"',
  ]);
  await panel.send({ type: "serverRequestDone", requestId: 1 });
  // A long change: 60 changed lines in two hunks far apart, 200 lines of context between.
  const ctx = (from: number, n: number) => Array.from({ length: n }, (_, i) => `     line ${from + i}`);
  const diff = [
    "--- src/big.py",
    "+++ src/big.py",
    "@@ -10,23 +10,23 @@",
    ...ctx(10, 3),
    ...Array.from({ length: 20 }, (_, i) => `-old ${i}`),
    ...Array.from({ length: 20 }, (_, i) => `+new ${i}`),
    ...ctx(33, 100),
    "@@ -300,13 +300,13 @@",
    ...ctx(300, 100),
    ...Array.from({ length: 10 }, (_, i) => `-tail ${i}`),
    ...Array.from({ length: 10 }, (_, i) => `+TAIL ${i}`),
  ].join("\n");
  await panel.send({ type: "serverRequest", requestId: 2, method: "agent/requestPermission", params: { ...editAsk, change: { ...editAsk.change, path: "src/big.py", diff } } });
  // The first card goes and the second comes on later frames: wait for the second card's lines, not for any card.
  await page.waitForFunction(() => document.querySelectorAll(".card.permission").length === 1 && document.querySelectorAll(".card.permission .diff-changes span").length === 62);
  const spans = await page.$$eval(".card.permission .diff-changes span", (s) => s.map((x) => x.textContent));
  assert.equal(spans.length, 62);
  assert.deepEqual([spans[0], spans[1], spans[21], spans[41], spans[42]], ["line 10", "-old 0", "+new 0", "line 300", "-tail 0"]);
  assert.equal(await page.textContent(".card.permission .diff-fold summary"), "Show with context (203 unchanged lines)");
  const scroll = await page.$eval(".card.permission .diff-changes", (e) => ({ sh: e.scrollHeight, ch: e.clientHeight }));
  assert.ok(scroll.sh > scroll.ch, `the changed lines scroll (${scroll.sh} > ${scroll.ch})`);
  // The answers are on screen.
  const allow = await page.locator(".card.permission button.primary").boundingBox();
  assert.ok(allow && allow.y >= 0 && allow.y + allow.height <= 600, `Allow once in view at ${allow?.y}`);
  await shot(panel, "approval-changed-lines-first");
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

const RUN = "01a22d68-0c11-7e0a-9a55-5b7c2f3d4e61";
const ev = (event: unknown, runId = RUN) => ({ method: "agent/event", params: { sessionId: SID, runId, event } });
const userMsg = (text: string, ts: number) => ({ role: "user", content: text, timestamp: ts });

test("Retry after a failed run: the error in words, the prompt back in the composer, agent/continue (no second user message); ↑ / ↓ recall earlier prompts", async () => {
  const panel = await openPanel(browser, {
    onRequest: host({
      "agent/continue": (p) => ({ sessionId: p.sessionId, runId: "r2" }),
      "agent/prompt": (p) => ({ sessionId: SID, runId: `r-${p.text}`, queued: false }),
    }),
  });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await frames(panel);
  const failed = {
    role: "assistant",
    content: [],
    stopReason: "error",
    errorMessage: "error sending request for url (http://127.0.0.1:9/v1/chat/completions): client error (Connect): tcp connect error: Connection refused (os error 111)",
    timestamp: 1796157095000,
  };
  await panel.send({
    type: "notifications",
    items: [
      ev({ type: "agent_start" }),
      ev({ type: "message_start", message: userMsg("Rename greet to welcome", 1796157094000) }),
      ev({ type: "message_end", message: userMsg("Rename greet to welcome", 1796157094000) }),
      ev({ type: "message_start", message: { ...failed, errorMessage: undefined, stopReason: undefined } }),
      ev({ type: "message_end", message: failed }),
      ev({ type: "agent_end", messages: [] }),
    ],
  });
  await page.waitForSelector(".recovery:not([hidden])");
  assert.equal(await page.textContent(".recovery-text"), "The run failed: The model server refused the connection at 127.0.0.1:9 (is it running?).");
  assert.equal(await page.textContent(".recovery-action"), "Retry");
  assert.equal(await page.inputValue("textarea.input"), "Rename greet to welcome");
  // The answer's row says it in words too (no "os error 111").
  assert.equal(await page.textContent(".row-assistant .assistant-error"), "The model server refused the connection at 127.0.0.1:9 (is it running?).");
  await shot(panel, "retry");
  await page.click(".recovery-action");
  await page.waitForSelector(".recovery", { state: "hidden" });
  assert.deepEqual(panel.requests.filter((r) => r.method === "agent/continue").map((r) => r.params), [{ sessionId: SID }]);
  assert.equal(panel.requests.filter((r) => r.method === "agent/prompt").length, 0, "Retry sends no new user message");
  assert.equal(await page.inputValue("textarea.input"), "", "the retried prompt left the composer");
  // The retry's run succeeds: nothing offered, one user row.
  await panel.send({
    type: "notifications",
    items: [
      ev({ type: "agent_start" }, "r2"),
      ev({ type: "message_start", message: { role: "assistant", content: [{ type: "text", text: "Renamed." }], stopReason: "stop", timestamp: 1796157099000 } }, "r2"),
      ev({ type: "message_end", message: { role: "assistant", content: [{ type: "text", text: "Renamed." }], stopReason: "stop", timestamp: 1796157099000 } }, "r2"),
      ev({ type: "agent_end", messages: [] }, "r2"),
    ],
  });
  await frames(panel, 3);
  assert.equal(await page.isHidden(".recovery"), true);
  assert.equal(await page.locator(".row-user").count(), 1);
  // ↑ / ↓ recall.
  for (const t of ["first prompt", "second prompt"]) {
    await page.fill("textarea.input", t);
    await page.press("textarea.input", "Enter");
    await page.waitForFunction((x) => (window as any).__posts.some((m: any) => m.type === "request" && m.method === "agent/prompt" && m.params.text === x), t);
  }
  await page.focus("textarea.input");
  await page.keyboard.type("draft");
  await page.keyboard.press("ArrowUp");
  assert.equal(await page.inputValue("textarea.input"), "second prompt");
  await page.keyboard.press("ArrowUp");
  assert.equal(await page.inputValue("textarea.input"), "first prompt");
  await page.keyboard.press("ArrowUp");
  assert.equal(await page.inputValue("textarea.input"), "first prompt", "nothing older");
  await page.keyboard.press("ArrowDown");
  assert.equal(await page.inputValue("textarea.input"), "second prompt");
  await page.keyboard.press("ArrowDown");
  assert.equal(await page.inputValue("textarea.input"), "draft");
  // Kept in the webview state (a reload recalls them too).
  assert.deepEqual(await page.evaluate(() => (window as any).__state.history), ["first prompt", "second prompt"]);
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("a session whose run was interrupted (the branch ends with the user's message) offers Continue when opened", async () => {
  const entries = [{ type: "message", id: "e1", parentId: null, message: userMsg("Add tests for greet", 1796157094000) }];
  const panel = await openPanel(browser, {
    onRequest: host({
      "agent/session/history": () => ({ sessionId: SID, leafId: "e1", entries, hasMore: false }),
      "agent/continue": () => ({ sessionId: SID, runId: "r3" }),
    }),
  });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await page.waitForSelector(".recovery:not([hidden])");
  assert.equal(await page.textContent(".recovery-text"), "The last run was interrupted before it answered.");
  assert.equal(await page.textContent(".recovery-action"), "Continue");
  // Opened (not a live failure): the composer is left alone.
  assert.equal(await page.inputValue("textarea.input"), "");
  await page.click(".recovery-action");
  await page.waitForSelector(".recovery", { state: "hidden" });
  assert.deepEqual(panel.requests.filter((r) => r.method === "agent/continue").map((r) => r.params), [{ sessionId: SID }]);
  // A running session offers nothing.
  const running = await openPanel(browser, {
    onRequest: host({
      "agent/session/history": () => ({ sessionId: SID, leafId: "e1", entries, hasMore: false }),
      "agent/state": () => ({ sessionId: SID, isStreaming: true, runId: "r9", model: null, thinkingLevel: "off" }),
    }),
  });
  await running.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await running.page.waitForSelector(".row-user");
  await frames(running, 3);
  assert.equal(await running.page.isHidden(".recovery"), true);
  await running.page.context().close();
  await page.context().close();
});

test("a running command's output shows live in its card: ANSI colours rendered, \\r progress lines collapsed, updated in place", async () => {
  const panel = await openPanel(browser, { onRequest: host() });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  const call = { type: "toolCall", id: "call_1", name: "bash", arguments: { command: "cargo test" } };
  const update = (text: string) => ev({ type: "tool_execution_update", toolCallId: "call_1", toolName: "bash", args: call.arguments, partialResult: { content: [{ type: "text", text }] } });
  await panel.send({
    type: "notifications",
    items: [
      ev({ type: "agent_start" }),
      ev({ type: "message_start", message: userMsg("run the tests", 1796157094000) }),
      ev({ type: "message_end", message: userMsg("run the tests", 1796157094000) }),
      ev({ type: "message_start", message: { role: "assistant", content: [call], timestamp: 1796157095000 } }),
      ev({ type: "message_end", message: { role: "assistant", content: [call], stopReason: "toolUse", timestamp: 1796157095000 } }),
      ev({ type: "tool_execution_start", toolCallId: "call_1", toolName: "bash", args: call.arguments }),
      update("\x1b[1m\x1b[32m   Compiling\x1b[0m demo v0.1.0\nDownloading  10%\rDownloading  55%"),
    ],
  });
  const out = page.locator('.row-tool[data-id="tool:call_1"] .tool-preview');
  await page.waitForFunction(() => document.querySelector('.row-tool[data-id="tool:call_1"] .tool-preview')?.textContent?.includes("55%"));
  assert.equal(await page.getAttribute('.row-tool[data-id="tool:call_1"]', "data-state"), "running");
  assert.equal(await out.textContent(), "   Compiling demo v0.1.0\nDownloading  55%");
  // While it runs, the next output replaces the card's text (no line per progress step).
  await panel.send({ type: "notifications", items: [update("\x1b[1m\x1b[32m   Compiling\x1b[0m demo v0.1.0\nDownloading  10%\rDownloading  55%\rDownloading 100%\n\x1b[31mtest greet ... FAILED\x1b[0m\n\x1b[38;5;208mwarning\x1b[0m: \x1b]0;title\x07unused \x1b[4mvariable\x1b[24m\x1b[K")] });
  await page.waitForFunction(() => document.querySelector('.row-tool[data-id="tool:call_1"] .tool-preview')?.textContent?.includes("FAILED"));
  assert.equal(await out.textContent(), "   Compiling demo v0.1.0\nDownloading 100%\ntest greet ... FAILED\nwarning: unused variable");
  const spans = await out.evaluate((pre) =>
    [...pre.querySelectorAll("span")].map((s) => [s.textContent, s.className, getComputedStyle(s).color, getComputedStyle(s).fontWeight, getComputedStyle(s).textDecorationLine]),
  );
  assert.deepEqual(spans, [
    ["   Compiling", "ansi ansi-bold", "rgb(13, 188, 121)", "700", "none"],
    ["test greet ... FAILED", "ansi", "rgb(205, 49, 49)", "400", "none"],
    ["warning", "ansi", "rgb(255, 135, 0)", "400", "none"],
    ["variable", "ansi ansi-underline", "rgb(204, 204, 204)", "400", "underline"],
  ]);
  await shot(panel, "live-output-ansi");
  // Markup in output stays text.
  await panel.send({ type: "notifications", items: [update("\x1b[31m<img src=x onerror=alert(1)>\x1b[0m")] });
  await page.waitForFunction(() => document.querySelector('.row-tool[data-id="tool:call_1"] .tool-preview')?.textContent === "<img src=x onerror=alert(1)>");
  assert.equal(await out.locator("img").count(), 0);
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("code blocks: Copy / Insert / New File buttons on hover or focus post codeAction; file paths and relative links open the file at the line", async () => {
  const panel = await openPanel(browser, { onRequest: host() });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  const text = "Change `src/greet.py:2` (see [the test](tests/test_greet.py#L14) and `README.md`, not `v1.2` or [docs](https://example.com)):\n\n```py\ndef welcome(name):\n    return f\"Hello, {name}\"\n```\n\nThen run:\n\n```\npytest -q\n```";
  const answer = { role: "assistant", content: [{ type: "text", text }], stopReason: "stop", timestamp: 1796157095000 };
  await panel.send({
    type: "notifications",
    items: [
      ev({ type: "agent_start" }),
      ev({ type: "message_start", message: userMsg("rename it", 1796157094000) }),
      ev({ type: "message_end", message: userMsg("rename it", 1796157094000) }),
      ev({ type: "message_start", message: answer }),
      ev({ type: "message_end", message: answer }),
      ev({ type: "agent_end", messages: [] }),
    ],
  });
  await page.waitForSelector(".row-assistant .md pre");
  const posts = async (type: string) => (await panel.posts()).filter((m) => m.type === type);
  // Hover: the buttons of that block.
  await page.hover(".row-assistant .md pre >> nth=0");
  await page.waitForSelector(".row-assistant .md pre >> nth=0 >> .code-actions");
  assert.deepEqual(await page.$$eval(".row-assistant .md pre:first-of-type .code-action", (b) => b.map((x) => x.textContent)), ["Copy", "Insert", "New File"]);
  await shot(panel, "code-block-actions");
  await page.click(".row-assistant .md pre >> nth=0 >> .code-action >> text=Copy");
  await page.click(".row-assistant .md pre >> nth=0 >> .code-action >> text=Insert");
  await page.click(".row-assistant .md pre >> nth=0 >> .code-action >> text=New File");
  const code = 'def welcome(name):\n    return f"Hello, {name}"';
  assert.deepEqual(await posts("codeAction"), [
    { type: "codeAction", action: "copy", code, language: "py" },
    { type: "codeAction", action: "insert", code, language: "py" },
    { type: "codeAction", action: "newFile", code, language: "py" },
  ]);
  // Keyboard: Tab reaches the second block, then its buttons; Enter on one.
  await page.focus(".row-assistant .md pre >> nth=1");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement?.textContent), "Copy");
  await page.keyboard.press("Enter");
  assert.deepEqual((await posts("codeAction")).at(-1), { type: "codeAction", action: "copy", code: "pytest -q", language: "" });
  // A path in inline code opens the file at its line; a relative link too; a URL is left to VS Code.
  await page.hover(".row-assistant .md p code >> nth=0");
  assert.equal(await page.getAttribute(".row-assistant .md p code >> nth=0", "title"), "Open src/greet.py at line 2");
  await page.click(".row-assistant .md p code >> nth=0");
  await page.click(".row-assistant .md a >> text=the test");
  await page.hover(".row-assistant .md p code >> nth=1");
  await page.click(".row-assistant .md p code >> nth=1");
  await page.hover(".row-assistant .md p code >> nth=2");
  assert.equal(await page.getAttribute(".row-assistant .md p code >> nth=2", "role"), null, "a version is not a path");
  assert.deepEqual(await posts("openFile"), [
    { type: "openFile", path: "src/greet.py", line: 2 },
    { type: "openFile", path: "tests/test_greet.py", line: 14 },
    { type: "openFile", path: "README.md" },
  ]);
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("after Reload Window the panel shows the session's last screen at once, and the server's page replaces it in place (never blank, no duplicates)", async () => {
  const entry = (id: string, parentId: string | null, message: any) => ({ type: "message", id, parentId, message });
  const e1 = entry("e1", null, userMsg("What is in this workspace?", 1796157094000));
  const e2 = entry("e2", "e1", { role: "assistant", content: [{ type: "text", text: "A Python package with one module." }], stopReason: "stop", timestamp: 1796157095000 });
  const e3 = entry("e3", "e2", userMsg("Add a test", 1796157096000));
  const e4 = entry("e4", "e3", { role: "assistant", content: [{ type: "text", text: "Added tests/test_greet.py." }], stopReason: "stop", timestamp: 1796157097000 });
  let release: (v: unknown) => void = () => {};
  const page = new Promise((r) => (release = r));
  const panel = await openPanel(browser, {
    state: { sessionId: SID, draft: "", scrollFromBottom: 0, snapshot: { sessionId: SID, entries: [e1, e2] } },
    onRequest: host({ "agent/session/history": () => page }),
  });
  const p = panel.page;
  // Before the host says anything: the last screen is there.
  await p.waitForSelector(".row-assistant .md-block");
  assert.deepEqual(await p.$$eval(".row-user .user-text", (l) => l.map((x) => x.textContent)), ["What is in this workspace?"]);
  assert.equal(await p.isHidden(".empty"), true, "no empty new-session hint");
  await shot(panel, "reload-snapshot");
  // Count the rows on every change from now on: they never drop to none.
  await p.evaluate(() => {
    const w = window as any;
    w.__minRows = document.querySelectorAll(".rows > .row").length;
    new MutationObserver(() => (w.__minRows = Math.min(w.__minRows, document.querySelectorAll(".rows > .row").length))).observe(document.body, { childList: true, subtree: true });
  });
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await frames(panel, 3);
  release({ sessionId: SID, leafId: "e4", entries: [e1, e2, e3, e4], hasMore: false });
  await p.waitForFunction(() => document.querySelectorAll(".row-user").length === 2);
  await frames(panel, 2);
  assert.deepEqual(await p.$$eval(".row-user .user-text", (l) => l.map((x) => x.textContent)), ["What is in this workspace?", "Add a test"]);
  assert.equal(await p.locator(".row-assistant").count(), 2);
  assert.ok((await p.evaluate(() => (window as any).__minRows)) >= 2, "the rows never went away");
  // The copy kept for the next reload: the newest entries.
  assert.deepEqual((await p.evaluate(() => (window as any).__state.snapshot)).entries.map((e: any) => e.id), ["e1", "e2", "e3", "e4"]);
  assert.deepEqual(panel.errors, []);
  await p.context().close();
});

test("editor context as chips: the active editor's selection offered with each prompt (removable), @file attaches the file's content", async () => {
  const panel = await openPanel(browser, { onRequest: host({ "agent/prompt": () => ({ sessionId: SID, runId: "r", queued: false }) }) });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  const prompts = () => panel.requests.filter((r) => r.method === "agent/prompt").map((r) => r.params.text);
  const send = async (text: string) => {
    const n = prompts().length;
    await page.fill("textarea.input", text);
    await page.press("textarea.input", "Enter");
    await page.waitForFunction((k) => (window as any).__posts.filter((m: any) => m.type === "request" && m.method === "agent/prompt").length === k, n + 1);
  };
  // The host offers the active editor's selection (pi.context.activeEditor).
  const sel = { kind: "selection", label: "greet.py:1-2", text: 'def greet(name):\n    return f"Hello, {name}"', path: "src/greet.py", range: { startLine: 1, endLine: 2 }, auto: true };
  await panel.send({ type: "editorContext", item: sel });
  await page.waitForSelector(".chip-auto");
  assert.equal(await page.textContent(".chip-auto"), "greet.py:1-2auto×");
  await shot(panel, "context-chips");
  await send("rename it");
  await send("and document it");
  // Offered with each prompt.
  const withSel = 'Selection from src/greet.py:1-2:\n```\ndef greet(name):\n    return f"Hello, {name}"\n```\n';
  assert.deepEqual(prompts(), [`${withSel}\nrename it`, `${withSel}\nand document it`]);
  // Removed: left out of the next prompt; a new selection is offered again.
  await page.click(".chip-auto .chip-remove");
  assert.equal(await page.locator(".chip-auto").count(), 0);
  await send("thanks");
  assert.equal(prompts().at(-1), "thanks");
  await panel.send({ type: "editorContext", item: { kind: "file", label: "greet.py", text: "", path: "src/greet.py", auto: true } });
  await page.waitForSelector(".chip-auto");
  await send("what does it do?");
  assert.equal(prompts().at(-1), "The user's active file: src/greet.py\n\nwhat does it do?");
  await panel.send({ type: "editorContext", item: null });
  await page.waitForFunction(() => !document.querySelector(".chip-auto"));
  // @file: choosing a file asks the host for its content, which comes back as a chip.
  await page.focus("textarea.input");
  await page.keyboard.type("explain @gre");
  await page.waitForFunction(() => (window as any).__posts.some((m: any) => m.type === "pickFiles" && m.query === "gre"));
  await panel.send({ type: "files", query: "gre", items: [{ path: "src/greet.py", label: "greet.py" }] });
  await page.waitForSelector(".popup li");
  await page.keyboard.press("Enter");
  assert.deepEqual((await panel.posts()).filter((m) => m.type === "attachFile"), [{ type: "attachFile", path: "src/greet.py" }]);
  await panel.send({ type: "context", items: [{ kind: "file", label: "greet.py", text: "def greet(name):\n    return name\n", path: "src/greet.py" }] });
  await page.waitForSelector(".chip-file");
  await page.press("textarea.input", "Enter");
  await page.waitForFunction(() => (window as any).__posts.filter((m: any) => m.type === "request" && m.method === "agent/prompt").length === 5);
  assert.equal(prompts().at(-1), "File src/greet.py:\n```\ndef greet(name):\n    return name\n\n```\n\nexplain @src/greet.py");
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("edit an earlier message and resend it as a branch (conversation only, or with the files); Rewind to here with its report and Undo", async () => {
  const entry = (id: string, parentId: string | null, message: any) => ({ type: "message", id, parentId, message });
  const call = { type: "toolCall", id: "call_e", name: "edit", arguments: { path: "src/greet.py", edits: [] } };
  const e1 = entry("e1", null, userMsg("Rename greet", 1796157094000));
  const e2 = entry("e2", "e1", { role: "assistant", content: [call], stopReason: "toolUse", timestamp: 1796157095000 });
  const e3 = entry("e3", "e2", { role: "toolResult", toolCallId: "call_e", toolName: "edit", content: [{ type: "text", text: "Edited src/greet.py" }], isError: false, timestamp: 1796157096000 });
  const e4 = entry("e4", "e3", { role: "assistant", content: [{ type: "text", text: "Renamed." }], stopReason: "stop", timestamp: 1796157097000 });
  const e5 = entry("e5", "e4", userMsg("Now add a docstring", 1796157098000));
  const e6 = entry("e6", "e5", { role: "assistant", content: [{ type: "text", text: "Added." }], stopReason: "stop", timestamp: 1796157099000 });
  let entries = [e1, e2, e3, e4, e5, e6];
  const panel = await openPanel(browser, {
    onRequest: host({
      "agent/session/history": () => ({ sessionId: SID, leafId: entries.at(-1)?.id ?? null, entries, hasMore: false }),
      "agent/session/branch": (p) => {
        entries = entries.slice(0, entries.findIndex((e) => e.id === p.entryId));
        return { leafId: entries.at(-1)?.id ?? null, editorText: "x", messageCount: entries.length };
      },
      "agent/session/rewind": (p) => {
        if (p.entryId === "e6") {
          entries = [e1, e2, e3, e4, e5, e6];
          return { previousLeafId: null, leafId: "e6", files: [{ path: "src/greet.py", status: "reapplied" }] };
        }
        entries = entries.slice(0, entries.findIndex((e) => e.id === p.entryId));
        return { previousLeafId: "e6", leafId: entries.at(-1)?.id ?? null, files: [{ path: "src/greet.py", status: "reverted" }, { path: "README.md", status: "refused", reason: "README.md changed since the agent's change (lines 3–4 differ)" }] };
      },
      "agent/prompt": (p) => ({ sessionId: p.sessionId, runId: "r", queued: false }),
    }),
  });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await page.waitForFunction(() => document.querySelectorAll(".row-user").length === 2);
  // The second message: edited and sent again (no file changed after it: conversation only).
  const second = page.locator(".row-user").nth(1);
  await second.hover();
  assert.deepEqual(await second.locator(".turn-actions button").allTextContents(), ["Edit", "Rewind to here"]);
  await shot(panel, "turn-actions");
  await second.locator("button[data-turn-action=edit]").click();
  assert.equal(await page.inputValue("textarea.input"), "Now add a docstring");
  assert.equal(await page.textContent(".edit-bar-text"), "Editing an earlier message: sending starts a branch from there.");
  assert.equal(await page.isHidden(".edit-bar-choice"), true);
  await page.fill("textarea.input", "Now add type hints");
  await page.press("textarea.input", "Enter");
  await page.waitForFunction(() => (window as any).__posts.some((m: any) => m.type === "request" && m.method === "agent/prompt"));
  const calls = () => panel.requests.filter((r) => r.method !== "agent/session/history" && r.method !== "agent/state" && r.method !== "agent/session/stats" && r.method !== "agent/plan/get" && r.method !== "agent/model/list");
  assert.deepEqual(calls().map((r) => [r.method, r.params]), [
    ["agent/session/branch", { sessionId: SID, entryId: "e5" }],
    ["agent/prompt", { text: "Now add type hints", sessionId: SID }],
  ]);
  await page.waitForFunction(() => document.querySelectorAll(".row-user").length === 1);
  assert.equal(await page.isHidden(".edit-bar"), true);
  // The first message: a later turn edited a file, so the choice is offered; with the files.
  entries = [e1, e2, e3, e4, e5, e6];
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await page.waitForFunction(() => document.querySelectorAll(".row-user").length === 2);
  const first = page.locator(".row-user").first();
  await first.hover();
  await first.locator("button[data-turn-action=edit]").click();
  assert.equal(await page.isVisible(".edit-bar-choice"), true);
  assert.deepEqual(await page.$$eval(".edit-bar-choice label", (l) => l.map((x) => x.textContent!.trim())), ["Conversation only", "Conversation and files"]);
  await shot(panel, "edit-earlier-message");
  await page.check(".edit-bar-choice label:nth-child(2) input");
  await page.press("textarea.input", "Enter");
  await page.waitForFunction(() => (window as any).__posts.filter((m: any) => m.type === "request" && m.method === "agent/prompt").length === 2);
  assert.deepEqual(calls().slice(2).map((r) => [r.method, r.params]), [
    ["agent/session/rewind", { sessionId: SID, entryId: "e1" }],
    ["agent/prompt", { text: "Rename greet", sessionId: SID }],
  ]);
  // A refused file is said in words.
  await page.waitForSelector(".card.rewind-report");
  assert.deepEqual(await page.$$eval(".card.rewind-report .card-reason", (l) => l.map((x) => x.textContent)), ["README.md was not put back: README.md changed since the agent's change (lines 3–4 differ)"]);
  await page.click(".card.rewind-report >> text=Dismiss");
  // Rewind to here (the checkpoint) on the second message, then Undo rewind.
  entries = [e1, e2, e3, e4, e5, e6];
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await page.waitForFunction(() => document.querySelectorAll(".row-user").length === 2);
  await page.locator(".row-user").nth(1).hover();
  await page.locator(".row-user").nth(1).locator("button[data-turn-action=rewind]").click();
  await page.waitForSelector(".card.rewind-report");
  assert.equal(await page.textContent(".card.rewind-report .card-title"), "Rewound: 1 file put back (src/greet.py)");
  assert.equal(await page.locator(".row-user").count(), 1);
  await page.click(".card.rewind-report >> text=Undo rewind");
  await page.waitForFunction(() => document.querySelectorAll(".row-user").length === 2);
  assert.deepEqual(calls().slice(4).map((r) => [r.method, r.params]), [
    ["agent/session/rewind", { sessionId: SID, entryId: "e5" }],
    ["agent/session/rewind", { sessionId: SID, entryId: "e6" }],
  ]);
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("an image pasted for a model that cannot take images says so on its chip at once", async () => {
  const textOnly = { provider: "mock", id: "mock-1", name: "Mock 1", input: ["text"], reasoning: false, contextWindow: 8000, maxTokens: 1000 };
  const panel = await openPanel(browser, {
    onRequest: host({
      "agent/model/list": () => ({ models: [textOnly] }),
      "agent/state": () => ({ sessionId: SID, isStreaming: false, model: textOnly, thinkingLevel: "off" }),
    }),
  });
  const page = panel.page;
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await page.waitForFunction(() => (document.querySelector(".model-select") as HTMLSelectElement | null)?.value?.includes("mock-1"));
  const imgDir = join(root, "../fixtures/images");
  const { readdirSync } = await import("node:fs");
  const png = readFileSync(join(imgDir, readdirSync(imgDir).find((f) => f.endsWith(".png"))!), "base64");
  await page.evaluate((b64) => {
    const bin = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const dt = new DataTransfer();
    dt.items.add(new File([bin], "shot.png", { type: "image/png" }));
    document.querySelector("textarea.input")!.dispatchEvent(new ClipboardEvent("paste", { clipboardData: dt, bubbles: true, cancelable: true }));
  }, png);
  await page.waitForSelector(".chip-image.chip-refused");
  assert.equal(await page.textContent(".chip-image .chip-warning"), "model cannot see images");
  assert.equal(await page.getAttribute(".chip-image", "title"), "Mock 1 does not take images: this one would not reach the model (choose a model that reads images, or remove it)");
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});
