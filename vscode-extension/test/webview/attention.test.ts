/**
 * `agent/attention` inside the panel (headless Chromium): what needs the user shows as a banner
 * under the header — a permission question (with the run's recorded stream), a run that
 * finished while the panel was hidden (the host's `visibility` messages), a failure — and goes
 * when it is handled: the question answered, the user typing, a dismiss, the next run.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { launch, openPanel, loadFixture, root, type Panel } from "./harness";

let browser: Browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

async function frames(panel: Panel, n = 2): Promise<void> {
  await panel.page.evaluate((k) => new Promise<void>((r) => {
    const step = (i: number) => (i === 0 ? r() : requestAnimationFrame(() => step(i - 1)));
    step(k);
  }), n);
}

/** The banner as the user sees it: null when hidden, else reason, title, text, button. */
function banner(page: Page): Promise<{ reason: string; role: string; title: string; text: string; action: string } | null> {
  return page.$eval(".attention", (b) => {
    const e = b as HTMLElement;
    if (e.hidden || getComputedStyle(e).display === "none") return null;
    const t = (s: string) => e.querySelector(s)?.textContent ?? "";
    return { reason: e.dataset.reason ?? "", role: e.getAttribute("role") ?? "", title: t(".attention-title"), text: t(".attention-text"), action: t(".attention-action") };
  });
}

const notices = (page: Page) => page.$$eval(".row-notice", (rows) => rows.map((r) => [(r as HTMLElement).dataset.level, r.textContent]));

test("agent/attention in the panel: the approval it waits for, a run that finished while hidden, a failure; each goes when handled", async () => {
  const { notifications, responses } = loadFixture("ask-run");
  const lines = readFileSync(join(root, "test/fixtures/ask-run.jsonl"), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
  const ask = lines.find((l) => l.serverRequest === "agent/requestPermission").params;
  const sid = ask.sessionId;
  const panel = await openPanel(browser, {
    onRequest: (method) => {
      if (method === "agent/state") return responses.get("agent/state");
      if (method === "agent/model/list") return { models: [] };
      if (method === "agent/session/history") return { sessionId: sid, leafId: null, entries: [], hasMore: false };
      throw { code: -32601, message: method };
    },
  });
  const page = panel.page;
  // The webview takes the host's visibility messages (and packed posts).
  assert.deepEqual((await panel.posts()).find((m) => m.type === "ready"), { type: "ready", accepts: ["visibility", "packed"] });
  await panel.send({ type: "init", sessionId: sid, workspaceName: "demo", capabilities: {} });
  assert.equal(await banner(page), null, "nothing needs the user");
  // The recorded run up to its first question: agent/attention "permission", then the request.
  const firstAsk = lines.findIndex((l) => l.serverRequest === "agent/requestPermission");
  const upTo = lines.slice(0, firstAsk).filter((l) => l.method).length;
  assert.equal(notifications[upTo - 1].method, "agent/attention", "the server says it needs the user just before it asks");
  for (let i = 0; i < upTo; i += 16) await panel.send({ type: "notifications", items: notifications.slice(i, Math.min(i + 16, upTo)) });
  await panel.send({ type: "serverRequest", requestId: 7, method: "agent/requestPermission", params: ask });
  await page.waitForSelector(".card.permission");
  await frames(panel);
  assert.deepEqual(await banner(page), {
    reason: "permission",
    role: "status",
    title: "Waiting for your approval",
    text: notifications[upTo - 1].params.message,
    action: "Show",
  });
  // The call's card in the transcript says it waits (the in-transcript mark of a question).
  assert.equal(await page.textContent(`.row-tool[data-id="tool:${ask.toolCallId}"] .tool-state`), "waiting");
  // "Show" takes the user to the question (their own click): the card is focused, not an
  // answer, so the next key typed answers nothing; Tab reaches its first answer.
  await page.click(".attention-action");
  assert.equal(await page.evaluate(() => document.activeElement?.classList.contains("permission")), true);
  await page.keyboard.press("Enter");
  await page.keyboard.type("ok ");
  await frames(panel);
  assert.equal(await page.locator(".card.permission").count(), 1);
  // Tab: the changed lines (scrollable), the folded context, then the answers.
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute("aria-label")), "Changed lines");
  await page.keyboard.press("Tab");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement?.textContent), "Allow once");
  // Answered: the banner goes.
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => !document.querySelector(".card.permission"));
  await frames(panel);
  assert.equal(await banner(page), null);
  assert.deepEqual((await panel.posts()).at(-1), { type: "serverResponse", requestId: 7, result: { decision: "allow" } });

  // The rest of the run, in view: its "finished" was seen as it happened — no banner, no row.
  const rest = notifications.slice(upTo).filter((n) => n.method && (n.method !== "agent/attention" || n.params.reason === "finished"));
  for (let i = 0; i < rest.length; i += 16) await panel.send({ type: "notifications", items: rest.slice(i, i + 16) });
  await frames(panel);
  assert.equal(rest.at(-1)!.params.reason, "finished");
  assert.equal(await banner(page), null);
  assert.deepEqual(await notices(page), []);

  // Hidden, a run starts and finishes; shown again: the banner and a marker row at the end.
  const runId = "019ad0c1-0000-7000-8000-0000000000aa";
  const ev = (event: unknown) => ({ method: "agent/event", params: { sessionId: sid, runId, event } });
  await panel.send({ type: "visibility", visible: false });
  await panel.send({
    type: "notifications",
    items: [ev({ type: "agent_start" }), ev({ type: "agent_end", messages: [] }), { method: "agent/attention", params: { sessionId: sid, runId, reason: "finished", message: "Done pausing." } }],
  });
  await panel.send({ type: "visibility", visible: true });
  await frames(panel);
  assert.deepEqual(await banner(page), { reason: "finished", role: "status", title: "Finished while the panel was hidden", text: "Done pausing.", action: "Dismiss" });
  assert.deepEqual(await notices(page), [["info", "Finished while the panel was hidden."]]);
  const rows = await page.$$eval(".rows > .row", (r) => r.map((x) => (x as HTMLElement).dataset.id));
  assert.equal(rows.at(-1), `attention:${runId}:finished`, "the marker is the transcript's last row");
  // The user types: they are back, the banner goes (the row stays).
  await page.click('textarea[aria-label="Message"]');
  await page.keyboard.type("x");
  await frames(panel);
  assert.equal(await banner(page), null);
  assert.deepEqual(await notices(page), [["info", "Finished while the panel was hidden."]]);

  // A failure (the session file can no longer be written) shows in view too, as an alert and a
  // row; typing leaves it, Dismiss clears the banner.
  await panel.send({ type: "notifications", items: [{ method: "agent/attention", params: { sessionId: sid, runId, reason: "failed", message: "The session is no longer being saved: disk full" } }] });
  await frames(panel);
  assert.deepEqual(await banner(page), { reason: "failed", role: "alert", title: "The run failed", text: "The session is no longer being saved: disk full", action: "Dismiss" });
  assert.deepEqual((await notices(page)).at(-1), ["error", "Failed: The session is no longer being saved: disk full"]);
  await page.keyboard.type("y");
  await frames(panel);
  assert.equal((await banner(page))?.reason, "failed");
  await page.click(".attention-action");
  await frames(panel);
  assert.equal(await banner(page), null);
  // Another session's attention is not this panel's.
  await panel.send({ type: "notifications", items: [{ method: "agent/attention", params: { sessionId: "another", reason: "failed", message: "HTTP 500" } }] });
  await frames(panel);
  assert.equal(await banner(page), null);
  assert.deepEqual(panel.errors, []);
  await page.context().close();
});
