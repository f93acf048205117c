/**
 * What a hand trial in code-server found (the .vsix installed, a model server of its own):
 * each test shows one thing a user saw, in headless Chromium with VS Code's default webview
 * stylesheet loaded first (test/webview/vscode-default.css), as VS Code does.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import type { Browser } from "playwright-core";
import { launch, openPanel, type Panel } from "./harness";

let browser: Browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const SID = "019ad0c1-0000-7000-8000-0000000000aa";

async function frames(panel: Panel, n = 2): Promise<void> {
  await panel.page.evaluate((k) => new Promise<void>((r) => {
    const step = (i: number) => (i === 0 ? r() : requestAnimationFrame(() => step(i - 1)));
    step(k);
  }), n);
}

/** Sends `events` as `agent/event` notifications of one run. */
async function play(panel: Panel, events: any[]): Promise<void> {
  await panel.send({ type: "notifications", items: events.map((event) => ({ method: "agent/event", params: { sessionId: SID, runId: "r1", event } })) });
  await frames(panel);
}

function answer(text: string, ts: number, extra: Record<string, unknown> = {}) {
  return { role: "assistant", content: text ? [{ type: "text", text }] : [], api: "anthropic-messages", provider: "p", model: "m", stopReason: "stop", timestamp: ts, ...extra };
}

/** A run: the user's prompt, then the answers and tool results given. */
function run(prompt: string, ...rest: any[]): any[] {
  const user = { role: "user", content: prompt, timestamp: 1 };
  return [{ type: "agent_start" }, { type: "message_start", message: user }, { type: "message_end", message: user }, ...rest, { type: "agent_end", messages: [] }];
}

const said = (m: any) => [{ type: "message_start", message: m }, { type: "message_end", message: m }];

async function panelWith(width: number, events: any[]): Promise<Panel> {
  const panel = await openPanel(browser, { width });
  await panel.send({ type: "init", sessionId: null, workspaceName: "w", capabilities: {} });
  await play(panel, events);
  return panel;
}

test("a code block has one background: VS Code's inline-code background does not band its lines", async () => {
  const md = "Some `inline` code, then a block:\n\n```python\ndef main(argv):\n    return 0\n```\n";
  const panel = await panelWith(300, run("md", ...said(answer(md, 2))));
  const page = panel.page;
  const bg = await page.$eval(".md pre", (pre) => {
    const code = pre.querySelector("code")!;
    const cs = getComputedStyle(code);
    return { pre: getComputedStyle(pre).backgroundColor, code: cs.backgroundColor, padding: cs.padding };
  });
  // The block's code element paints nothing of its own: the <pre>'s background shows through.
  assert.deepEqual(bg, { pre: "rgb(43, 43, 43)", code: "rgba(0, 0, 0, 0)", padding: "0px" });
  // Inline code keeps its chip.
  assert.equal(await page.$eval(".md p code", (c) => getComputedStyle(c).backgroundColor), "rgb(43, 43, 43)");
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("a table wider than a narrow panel scrolls sideways instead of being cut off at the edge", async () => {
  const md = [
    "| File | Lines | Status | Notes |",
    "|------|------:|:------:|-------|",
    "| `src/parser_with_a_long_name.rs` | 1,204 | needs work | the tokenizer mixes `&str` and `String` |",
    "| `src/ast/mod.rs` | 2,911 | needs work | a very long note that goes on and on to see how the table wraps |",
  ].join("\n");
  const panel = await panelWith(300, run("md", ...said(answer(md, 2))));
  const page = panel.page;
  const m = await page.$eval(".md table", (t) => {
    const box = t.getBoundingClientRect();
    const tr = document.getElementById("transcript")!.getBoundingClientRect();
    const last = t.querySelector("tr:last-child td:last-child")!;
    return { right: box.right, panelRight: tr.right, scrollable: t.scrollWidth > t.clientWidth, overflowX: getComputedStyle(t).overflowX, lastCell: last.textContent };
  });
  assert.ok(m.right <= m.panelRight, `the table ends inside the panel (${m.right} > ${m.panelRight})`);
  assert.equal(m.scrollable, true, "the table is wider than the panel");
  assert.equal(m.overflowX, "auto");
  // Scrolling the table brings its last column into view.
  const shown = await page.$eval(".md table", (t) => {
    t.scrollLeft = t.scrollWidth;
    const cell = t.querySelector("tr:last-child td:last-child")!.getBoundingClientRect();
    return cell.right <= t.getBoundingClientRect().right + 1 && cell.left >= t.getBoundingClientRect().left;
  });
  assert.equal(shown, true);
  await page.context().close();
});

test("tool output wraps between words, not inside them", async () => {
  const out = "Successfully replaced 1 block(s) in app.py.";
  const panel = await panelWith(300, run(
    "edit",
    ...said(answer("", 2, { content: [{ type: "toolCall", id: "t1", name: "edit", arguments: { path: "app.py" } }], stopReason: "toolUse" })),
    { type: "tool_execution_start", toolCallId: "t1", toolName: "edit", args: { path: "app.py" } },
    { type: "tool_execution_end", toolCallId: "t1", toolName: "edit", result: { content: [{ type: "text", text: out }] }, isError: false },
  ));
  const page = panel.page;
  // Every word of the output lies on one line (a word broken across lines has two boxes).
  const broken = await page.$eval(".row-tool .tool-preview", (pre) => {
    const text = pre.firstChild as Text;
    const words: string[] = [];
    let at = 0;
    for (const w of text.data.split(" ")) {
      const r = document.createRange();
      r.setStart(text, at);
      r.setEnd(text, at + w.length);
      const tops = new Set([...r.getClientRects()].map((b) => Math.round(b.top)));
      if (tops.size > 1) words.push(w);
      at += w.length + 1;
    }
    return { words, lines: Math.round(pre.getBoundingClientRect().height), text: text.data };
  });
  assert.equal(broken.text, out);
  assert.deepEqual(broken.words, []);
  await page.context().close();
});

test("a session opened again (window reload) shows its context and cost at once, from agent/session/stats", async () => {
  const entries = [
    { type: "message", id: "e1", parentId: null, message: { role: "user", content: "hi", timestamp: 1 } },
    { type: "message", id: "e2", parentId: "e1", message: answer("hello", 2) },
  ];
  const panel = await openPanel(browser, {
    width: 300,
    state: { sessionId: SID, draft: "", scrollFromBottom: 0 },
    onRequest: (method) => {
      switch (method) {
        case "agent/state":
          return { sessionId: SID, isStreaming: false, thinkingLevel: "off", model: { provider: "p", id: "m", name: "M", contextWindow: 200000 } };
        case "agent/session/history":
          return { sessionId: SID, leafId: "e2", entries, hasMore: false };
        case "agent/session/stats":
          return { sessionId: SID, cost: 0.01, sessionCost: 0.0426, tokens: { total: 3000 }, sessionTokens: { total: 9100 }, contextUsage: { tokens: 2400, contextWindow: 200000, percent: 1.2 } };
        case "agent/model/list":
          return { models: [] };
        default:
          throw { code: -32601, message: `unhandled ${method}` };
      }
    },
  });
  await panel.send({ type: "init", sessionId: null, workspaceName: "w", capabilities: {} });
  await panel.page.waitForSelector(".row-assistant .md-block");
  await panel.page.waitForFunction(() => document.querySelector(".meter-text")?.textContent !== "ctx –", null, { timeout: 5000 }).catch(() => {});
  assert.equal(await panel.page.textContent(".meter-text"), "1% · $0.04");
  assert.deepEqual(panel.requests.filter((r) => r.method === "agent/session/stats").map((r) => r.params), [{ sessionId: SID }]);
  await panel.page.context().close();
});

test("Pi's own /compact and /new work from the composer (offered in / completion), instead of going to the model as text", async () => {
  const requests: string[] = [];
  const panel = await openPanel(browser, {
    width: 300,
    state: { sessionId: SID, draft: "", scrollFromBottom: 0 },
    onRequest: (method, params) => {
      requests.push(method);
      switch (method) {
        case "agent/state":
          return { sessionId: SID, isStreaming: false, thinkingLevel: "off", model: { provider: "p", id: "m", name: "M", contextWindow: 200000 } };
        case "agent/session/history":
          return { sessionId: SID, leafId: null, entries: [], hasMore: false };
        case "agent/commands":
          return { commands: [{ name: "review", description: "Review the staged changes", source: "prompt" }] };
        case "agent/extension/commands":
          return { commands: [] };
        case "agent/compact":
          return { summary: "s", firstKeptEntryId: "e1", tokensBefore: 100, details: { readFiles: [], modifiedFiles: [] }, params };
        default:
          throw { code: -32601, message: `unhandled ${method}` };
      }
    },
  });
  await panel.send({ type: "init", sessionId: null, workspaceName: "w", capabilities: {} });
  const page = panel.page;
  await page.click("textarea.input");
  await page.keyboard.type("/");
  await page.waitForSelector(".popup li");
  assert.deepEqual(await page.$$eval(".popup .popup-label", (l) => l.map((x) => x.textContent)), ["/review", "/compact", "/new"]);
  await page.keyboard.type("comp");
  await page.waitForFunction(() => document.querySelectorAll(".popup li").length === 1);
  await page.keyboard.press("Enter");
  assert.equal(await page.inputValue("textarea.input"), "/compact ");
  await page.keyboard.type("keep the API notes");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => (window as any).__posts.some((m: any) => m.type === "request" && m.method === "agent/compact"));
  assert.deepEqual(panel.requests.filter((r) => r.method === "agent/compact").map((r) => r.params), [{ sessionId: SID, instructions: "keep the API notes" }]);
  assert.equal(panel.requests.filter((r) => r.method === "agent/prompt").length, 0);
  assert.equal(await page.inputValue("textarea.input"), "");
  // /new starts a new session (the panel detaches from this one).
  await page.keyboard.type("/new");
  await page.keyboard.press("Escape");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => (window as any).__posts.some((m: any) => m.type === "attach" && m.sessionId === null));
  assert.equal(panel.requests.filter((r) => r.method === "agent/prompt").length, 0);
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("in a 290 px side bar the header is two rows: the thinking level is not cut, the model's name shows, nothing is alone on a third row", async () => {
  const model = { provider: "trial", id: "trial-claude", name: "Trial Claude", reasoning: true, contextWindow: 200000 };
  const panel = await openPanel(browser, {
    width: 290,
    state: { sessionId: SID, draft: "", scrollFromBottom: 0 },
    onRequest: (method) => {
      switch (method) {
        case "agent/state":
          return { sessionId: SID, isStreaming: false, thinkingLevel: "medium", model };
        case "agent/session/history":
          return { sessionId: SID, leafId: null, entries: [], hasMore: false };
        case "agent/model/list":
          return { models: [model] };
        default:
          throw { code: -32601, message: `unhandled ${method}` };
      }
    },
  });
  await panel.send({ type: "init", sessionId: null, workspaceName: "w", capabilities: {} });
  const page = panel.page;
  await page.waitForFunction(() => (document.querySelector(".thinking-select") as HTMLSelectElement)?.value === "medium");
  const m = await page.evaluate(() => {
    const ctx = document.createElement("canvas").getContext("2d")!;
    const textWidth = (sel: HTMLSelectElement) => {
      ctx.font = getComputedStyle(sel).font;
      return ctx.measureText(sel.selectedOptions[0]!.textContent!).width;
    };
    const thinking = document.querySelector(".thinking-select") as HTMLSelectElement;
    const model = document.querySelector(".model-select") as HTMLSelectElement;
    const items = [...document.querySelectorAll(".header-row > *")].filter((e) => (e as HTMLElement).offsetHeight > 0) as HTMLElement[];
    return {
      // Rows: items whose vertical middles are more than 10 px apart.
      rows: items
        .map((e) => { const r = e.getBoundingClientRect(); return (r.top + r.bottom) / 2; })
        .sort((a, b) => a - b)
        .filter((y, i, ys) => i === 0 || y - ys[i - 1]! > 10).length,
      thinkingRoom: thinking.clientWidth - textWidth(thinking),
      modelRoom: model.clientWidth - textWidth(model),
      thinking: thinking.selectedOptions[0]!.textContent,
      layout: items.map((e) => `${e.className}@${Math.round(e.getBoundingClientRect().top)}+${Math.round(e.getBoundingClientRect().width)}`).join(" "),
    };
  });
  assert.equal(m.thinking, "thinking: medium");
  assert.equal(m.rows, 2, `two rows of header (${m.layout})`);
  // The select's arrow takes about 16 px of its width.
  assert.ok(m.thinkingRoom >= 16, `the thinking level fits its picker (${m.thinkingRoom.toFixed(1)} px to spare)`);
  assert.ok(m.modelRoom >= 16, `the model's name fits its picker (${m.modelRoom.toFixed(1)} px to spare)`);
  // The widest state: a run waiting for the user's answer, a session that cost over $10.
  await panel.send({ type: "notifications", items: [
    { method: "agent/event", params: { sessionId: SID, runId: "r1", event: { type: "agent_start" } } },
    { method: "agent/usage", params: { sessionId: SID, runId: "r1", contextTokens: 150000, contextWindow: 200000, turn: { totalTokens: 10, cost: 0.5 }, session: { totalTokens: 9e6, cost: 12.3456 } } },
  ] });
  await panel.send({ type: "serverRequest", requestId: 1, method: "agent/requestPermission", params: { sessionId: SID, runId: "r1", toolCallId: "t1", toolName: "bash", args: { command: "make" }, title: "pi wants to run `make`", reason: "asks", options: [{ optionId: "allow_once", name: "Allow once", kind: "allow_once" }, { optionId: "reject", name: "Reject", kind: "reject_once" }] } });
  await page.waitForFunction(() => document.querySelector(".status")?.textContent === "Waiting for you");
  await frames(panel);
  const w = await page.evaluate(() => {
    const items = [...document.querySelectorAll(".header-row > *")].filter((e) => (e as HTMLElement).offsetHeight > 0) as HTMLElement[];
    const text = document.querySelector(".meter-text") as HTMLElement;
    return {
      rows: items.map((e) => { const r = e.getBoundingClientRect(); return (r.top + r.bottom) / 2; }).sort((a, b) => a - b).filter((y, i, ys) => i === 0 || y - ys[i - 1]! > 10).length,
      meter: text.textContent,
      meterLines: text.getClientRects().length,
      meterHeight: text.getBoundingClientRect().height,
      lineHeight: parseFloat(getComputedStyle(text).lineHeight) || 0,
      status: (document.querySelector(".status") as HTMLElement).title,
      layout: items.map((e) => `${e.className}@${Math.round(e.getBoundingClientRect().top)}+${Math.round(e.getBoundingClientRect().width)}`).join(" "),
    };
  });
  assert.equal(w.meter, "75% · $12.35");
  assert.equal(w.rows, 2, `two rows of header (${w.layout})`);
  assert.ok(w.meterHeight < 24, `the meter's text is one line (${w.meterHeight} px high)`);
  assert.equal(w.status, "Waiting for you");
  // In a very narrow panel the buttons move to a row of their own: never cut off.
  await page.setViewportSize({ width: 180, height: 760 });
  await frames(panel, 3);
  const cut = await page.evaluate(() => {
    const h = document.querySelector(".header")!.getBoundingClientRect();
    return [...document.querySelectorAll(".header button, .header select, .meter-text")].filter((e) => {
      const r = e.getBoundingClientRect();
      return r.right > h.right + 0.5 || r.left < h.left - 0.5;
    }).map((e) => e.className);
  });
  assert.deepEqual(cut, []);
  await page.context().close();
});

test("a run the user stopped is said quietly, not in the error colour", async () => {
  const partial = answer("Starting to answer", 2, { stopReason: "aborted", errorMessage: "Request was aborted" });
  const failed = answer("", 3, { stopReason: "error", errorMessage: "connection refused" });
  const panel = await panelWith(300, [...run("go", ...said(partial)), ...run("again", ...said(failed))]);
  const colors = await panel.page.$$eval(".assistant-error", (els) => els.map((e) => [e.textContent, getComputedStyle(e).color]));
  assert.deepEqual(colors, [
    ["Request was aborted", "rgb(157, 157, 157)"],
    ["The model server refused the connection (is it running?).", "rgb(248, 81, 73)"],
  ]);
  await panel.page.context().close();
});

test("scrolled up while an answer streams, a ↓ button brings the view back to the end (and the view follows again)", async () => {
  const long = Array.from({ length: 60 }, (_, i) => `Paragraph ${i + 1}: the agent reads files, edits them and reports back.`).join("\n\n");
  const user = { role: "user", content: "long", timestamp: 1 };
  const panel = await panelWith(300, [{ type: "agent_start" }, { type: "message_start", message: user }, { type: "message_end", message: user }, { type: "message_start", message: answer("", 2) }, { type: "message_update", assistantMessageEvent: { type: "text_start", contentIndex: 0 } }, { type: "message_update", assistantMessageEvent: { type: "text_delta", contentIndex: 0, delta: long } }]);
  const page = panel.page;
  const jump = page.locator("button.jump-latest");
  assert.equal(await jump.isVisible(), false, "at the end: no button");
  await page.locator("#transcript").hover();
  await page.mouse.wheel(0, -800);
  await page.waitForFunction(() => !(document.querySelector("button.jump-latest") as HTMLElement).hidden);
  const before = await page.$eval("#transcript", (t) => t.scrollTop);
  // More text streams below: the reader's view stays, the button stays.
  await play(panel, [{ type: "message_update", assistantMessageEvent: { type: "text_delta", contentIndex: 0, delta: "\n\nMore text below the fold." } }]);
  assert.equal(await page.$eval("#transcript", (t) => t.scrollTop), before);
  assert.equal(await jump.isVisible(), true);
  await jump.click();
  await frames(panel, 3);
  const gap = () => page.$eval("#transcript", (t) => t.scrollHeight - t.scrollTop - t.clientHeight);
  assert.ok((await gap()) < 4, "at the end after the click");
  assert.equal(await jump.isVisible(), false);
  // Pinned again: what streams next stays in view.
  await play(panel, [{ type: "message_update", assistantMessageEvent: { type: "text_delta", contentIndex: 0, delta: "\n\nAnd the last line." } }]);
  await frames(panel, 3);
  assert.ok((await gap()) < 4, "the view follows the answer again");
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});

test("an edit's permission card with a long diff keeps Allow and Reject in view in a short panel", async () => {
  const diff = ["--- app.py", "+++ app.py", "@@ -1,40 +1,40 @@", ...Array.from({ length: 40 }, (_, i) => (i % 3 ? ` line ${i}` : `-old ${i}\n+new ${i}`))].join("\n");
  const panel = await panelWith(300, [{ type: "agent_start" }]);
  await panel.page.setViewportSize({ width: 200, height: 420 });
  await panel.send({
    type: "serverRequest",
    requestId: 3,
    method: "agent/requestPermission",
    params: { sessionId: SID, runId: "r1", toolCallId: "t9", tool: "edit", arguments: { path: "app.py" }, reason: 'approvalPolicy "ask": every tool call asks', alwaysScopes: ["session", "workspace"], rule: { tool: "edit" }, change: { path: "app.py", diff } },
  });
  const page = panel.page;
  await page.waitForSelector(".card.permission");
  await frames(panel);
  const seen = await page.evaluate(() => {
    const box = document.querySelector(".cards")!.getBoundingClientRect();
    const inView = (e: Element) => {
      const r = e.getBoundingClientRect();
      return r.top >= box.top - 0.5 && r.bottom <= box.bottom + 0.5 && r.bottom <= window.innerHeight;
    };
    return [...document.querySelectorAll(".card.permission .card-title, .card.permission button, .card.permission input")].map((e) => [(e as HTMLElement).textContent || (e as HTMLInputElement).placeholder, inView(e)]);
  });
  assert.deepEqual(seen, [
    ["pi wants to edit app.py", true],
    ["Allow once", true],
    ["Allow edit for this session", true],
    ["Allow edit in this workspace", true],
    ["Reject", true],
    ["Open in diff editor", true],
    ["Reason for rejecting (optional)", true],
  ]);
  // The diff is there, scrollable within its box.
  assert.ok(await page.$eval(".card .diff", (d) => d.scrollHeight > d.clientHeight));
  await page.context().close();
});

test("a run that waits on the model (slow or stalled provider) says so, not just \"Running\"", async () => {
  const user = { role: "user", content: "hang", timestamp: 1 };
  const panel = await panelWith(300, [{ type: "agent_start" }, { type: "message_start", message: user }, { type: "message_end", message: user }]);
  // A streamed delta is drawn after the stream's pause (a timer), not at the next frame.
  const status = async (want: string) => {
    await panel.page.waitForFunction((t) => document.querySelector(".status")?.textContent === t, want, { timeout: 3000 }).catch(() => {});
    return panel.page.textContent(".status");
  };
  assert.equal(await status("Waiting for model"), "Waiting for model");
  // The answer starts: an empty message is still waiting; its first text is work.
  await play(panel, [{ type: "message_start", message: answer("", 2) }]);
  assert.equal(await status("Waiting for model"), "Waiting for model");
  await play(panel, [{ type: "message_update", assistantMessageEvent: { type: "text_delta", contentIndex: 0, delta: "Let me run it." } }]);
  assert.equal(await status("Running"), "Running", "text streams");
  // A tool runs: work. It ends and the next request is out: waiting again.
  const call = answer("Let me run it.", 2, { content: [{ type: "text", text: "Let me run it." }, { type: "toolCall", id: "b1", name: "bash", arguments: { command: "make" } }], stopReason: "toolUse" });
  await play(panel, [
    { type: "message_end", message: call },
    { type: "tool_execution_start", toolCallId: "b1", toolName: "bash", args: { command: "make" } },
  ]);
  assert.equal(await status("Running"), "Running", "a tool runs");
  await play(panel, [{ type: "tool_execution_end", toolCallId: "b1", toolName: "bash", result: { content: [{ type: "text", text: "ok" }] }, isError: false }]);
  assert.equal(await status("Waiting for model"), "Waiting for model");
  await play(panel, [{ type: "agent_end", messages: [] }]);
  assert.equal(await status("Idle"), "Idle");
  await panel.page.context().close();
});

test("\"Open diff\" is offered for an edit that was applied or is asked about, not for one that failed or was stopped before it ran", async () => {
  const call = (id: string) => ({ type: "toolCall", id, name: "write", arguments: { path: `${id}.md`, content: "x" } });
  const panel = await panelWith(300, run(
    "write",
    ...said(answer("", 2, { content: [call("ok"), call("bad"), call("asked")], stopReason: "toolUse" })),
    { type: "tool_execution_start", toolCallId: "ok", toolName: "write", args: { path: "ok.md", content: "x" } },
    { type: "tool_execution_end", toolCallId: "ok", toolName: "write", result: { content: [{ type: "text", text: "Successfully wrote to ok.md" }] }, isError: false },
    { type: "tool_execution_start", toolCallId: "bad", toolName: "write", args: { path: "bad.md", content: "x" } },
    { type: "tool_execution_end", toolCallId: "bad", toolName: "write", result: { content: [{ type: "text", text: "Tool execution was aborted by the user." }] }, isError: true },
  ).slice(0, -1));
  const visible = () => panel.page.$$eval(".row-tool", (rows) => rows.map((r) => [r.querySelector(".tool-summary")!.textContent, (r.querySelector(".open-diff") as HTMLElement | null)?.offsetParent !== null && !!r.querySelector(".open-diff"), !!(r.querySelector(".open-file") as HTMLElement | null)?.offsetParent]));
  assert.deepEqual(await visible(), [
    ["ok.md", true, true],
    ["bad.md", false, true],
    ["asked.md", false, true],
  ]);
  // The third call is asked about: its proposal can be opened.
  await panel.send({ type: "serverRequest", requestId: 4, method: "agent/requestPermission", params: { sessionId: SID, runId: "r1", toolCallId: "asked", tool: "write", arguments: { path: "asked.md" }, reason: "asks", change: { path: "asked.md", diff: "--- asked.md\n+++ asked.md\n@@ -0,0 +1 @@\n+x" } } });
  await panel.page.waitForSelector(".row-tool[data-state=waiting]");
  assert.deepEqual(await visible(), [
    ["ok.md", true, true],
    ["bad.md", false, true],
    ["asked.md", true, true],
  ]);
  await panel.page.context().close();
});

test("a queued message in a narrow panel shows its text, and its Edit and Remove are not cut off", async () => {
  const panel = await panelWith(200, [{ type: "agent_start" }]);
  await panel.send({ type: "notifications", items: [
    { method: "agent/queueUpdate", params: { sessionId: SID, runId: "r1", queueId: "q1", delivery: "steer", state: "queued", text: "and mention the tests please", steering: ["and mention the tests please"], followUp: [] } },
    { method: "agent/queueUpdate", params: { sessionId: SID, runId: "r1", queueId: "q2", delivery: "followUp", state: "queued", text: "slow count afterwards", steering: [], followUp: ["slow count afterwards"] } },
  ] });
  await panel.page.waitForSelector(".queue-item");
  await frames(panel);
  const items = await panel.page.$$eval(".queue-item", (lis) => lis.map((li) => {
    const edge = document.body.getBoundingClientRect().right;
    const text = li.querySelector(".queue-text") as HTMLElement;
    return {
      text: text.textContent,
      textWidth: Math.round(text.getBoundingClientRect().width),
      cut: [...li.querySelectorAll("button")].filter((b) => b.getBoundingClientRect().right > edge + 0.5).map((b) => b.textContent),
    };
  }));
  for (const it of items) {
    assert.ok(it.textWidth >= 80, `"${it.text}" shows at least a few words (${it.textWidth} px)`);
    assert.deepEqual(it.cut, [], `"${it.text}": no button cut off`);
  }
  assert.deepEqual(items.map((i) => i.text), ["and mention the tests please", "slow count afterwards"]);
  await panel.page.context().close();
});

test("while a run goes on in a narrow panel, the steer/follow-up hint gets the panel's width above the buttons, not a sliver beside them", async () => {
  const panel = await panelWith(200, [{ type: "agent_start" }]);
  const page = panel.page;
  await page.waitForFunction(() => (document.querySelector(".mode")?.textContent ?? "") !== "");
  const m = await page.$eval(".mode", (e) => ({ h: e.getBoundingClientRect().height, line: parseFloat(getComputedStyle(e).fontSize) * 1.6, text: e.textContent, w: e.getBoundingClientRect().width, panel: document.querySelector(".composer")!.clientWidth }));
  assert.equal(m.text, "steer (Enter) · Alt+Enter: follow-up");
  assert.ok(m.h <= 2 * m.line, `two lines at most (${m.h} px high)`);
  assert.ok(m.w >= m.panel - 20, `the hint has the composer's width (${m.w} of ${m.panel} px)`);
  // The buttons stay inside the panel.
  const cut = await page.$$eval(".controls button", (bs) => bs.filter((b) => (b as HTMLElement).offsetParent && b.getBoundingClientRect().right > document.body.getBoundingClientRect().right + 0.5).map((b) => b.textContent));
  assert.deepEqual(cut, []);
  await page.context().close();
});
