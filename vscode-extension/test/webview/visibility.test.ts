/**
 * The chat view hidden and shown again (the side bar toggled) in headless Chromium, laid out
 * as VS Code does it: the webview is a frame in an overlay sized to its view; hidden, the
 * overlay loses its view (`visibility: hidden`, auto size); shown, it may be laid out at another
 * size before its own (the workbench's layout settling). The browser clamps the transcript's
 * `scrollTop` to such a passing layout: that scroll is not the user's, and the view must come
 * back at the end of the conversation if it was there (VF6: or at the row being read).
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import type { Browser, Frame } from "playwright-core";
import { launch, openPanel, type Panel } from "./harness";
import { sessionEntries, historyPage } from "./generate";

let browser: Browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const SID = "019ad0c1-0000-7000-8000-00000000f1de";
const W = 420;
const H = 760;

async function frames(f: Frame, n = 1): Promise<void> {
  await f.evaluate((k) => new Promise<void>((r) => {
    const step = (i: number) => (i === 0 ? r() : requestAnimationFrame(() => step(i - 1)));
    step(k);
  }), n);
}

/** Where the transcript is: its distance from the bottom and the row at its top. */
function where(f: Frame): Promise<{ fromBottom: number; row: string; rowTop: number }> {
  return f.$eval("#transcript", (s) => {
    const top = s.getBoundingClientRect().top;
    const row = [...s.querySelectorAll<HTMLElement>(".rows > .row")].find((r) => r.getBoundingClientRect().bottom > top + 1)!;
    return { fromBottom: s.scrollHeight - s.scrollTop - s.clientHeight, row: row.dataset.id!, rowTop: row.getBoundingClientRect().top - top };
  });
}

/** A panel on a 200-entry session inside a frame of a workbench-like page, at the bottom. */
async function framedPanel(): Promise<{ panel: Panel; f: Frame }> {
  const entries = sessionEntries(200);
  const panel = await openPanel(browser, {
    onRequest: (method, params) => {
      if (method === "agent/session/history") return historyPage(SID, entries, params);
      throw { code: -32601, message: method };
    },
  });
  const page = panel.page;
  await page.route("https://webview.test/workbench.html", (r) =>
    r.fulfill({
      status: 200,
      contentType: "text/html",
      body: `<!DOCTYPE html><html><body style="margin:0"><div id="overlay" style="position:fixed;top:0;left:0;width:${W}px;height:${H}px"><iframe id="webview" src="https://webview.test/index.html" style="border:0;width:100%;height:100%"></iframe></div></body></html>`,
    }),
  );
  await page.goto("https://webview.test/workbench.html");
  const f = page.frames().find((x) => x.url().endsWith("/index.html"))!;
  await f.waitForFunction(() => (window as any).__posts?.some((m: any) => m.type === "ready"));
  // The test's host answers into the webview's frame.
  panel.send = async (m: any) => {
    await f.evaluate((msg) => window.postMessage(msg, "*"), m);
  };
  await panel.send({ type: "init", sessionId: SID, workspaceName: "demo", capabilities: {} });
  await f.waitForFunction((last) => [...document.querySelectorAll(".rows > .row")].at(-1)?.textContent?.includes(last), (entries.at(-1)!.message.content.find((b: any) => b.type === "text")?.text ?? "").slice(0, 30));
  await frames(f, 3);
  return { panel, f };
}

/** Hides the view and shows it again as VS Code does; shown, the webview is laid out once at
 * a larger size (which clamps its `scrollTop`) before its own size, within one task. */
async function hideAndShow(panel: Panel, f: Frame): Promise<void> {
  await panel.page.evaluate(() => {
    const o = document.getElementById("overlay")!;
    o.style.visibility = "hidden";
    o.style.width = o.style.height = "auto";
  });
  await panel.page.waitForTimeout(200);
  await panel.page.evaluate(([w, h]) => {
    const o = document.getElementById("overlay")!;
    const doc = (document.getElementById("webview") as HTMLIFrameElement).contentDocument!;
    o.style.visibility = "visible";
    o.style.width = "1000px";
    o.style.height = "4000px";
    void doc.getElementById("transcript")!.scrollTop;
    o.style.width = `${w}px`;
    o.style.height = `${h}px`;
  }, [W, H]);
  await frames(f, 5);
}

test("hidden and shown again at the end of the conversation, the view shows its end again", async () => {
  const { panel, f } = await framedPanel();
  const before = await where(f);
  assert.ok(before.fromBottom < 1, `at the bottom before: ${before.fromBottom} px from it`);
  await hideAndShow(panel, f);
  const after = await where(f);
  assert.ok(after.fromBottom < 1, `shown again ${after.fromBottom} px from the bottom`);
  // And it stays pinned: a new message shows at the bottom.
  await panel.send({ type: "notifications", items: [{ method: "agent/event", params: { sessionId: SID, event: { type: "message_start", message: { role: "user", content: [{ type: "text", text: "one more question" }], timestamp: 1 } } } }] });
  await frames(f, 3);
  assert.ok((await where(f)).fromBottom < 1, "pinned after a new message");
  assert.deepEqual(panel.errors, []);
  await panel.page.context().close();
});

test("hidden and shown again scrolled up, the row being read stays where it was (VF6)", async () => {
  const { panel, f } = await framedPanel();
  // The user scrolls up by two screens with the wheel and reads.
  await panel.page.mouse.move(W / 2, 200);
  for (let i = 0; i < 6; i++) {
    await panel.page.mouse.wheel(0, -250);
    await frames(f, 2);
  }
  await frames(f, 3);
  const before = await where(f);
  assert.ok(before.fromBottom > 1000, `scrolled up: ${before.fromBottom} px from the bottom`);
  await hideAndShow(panel, f);
  const after = await where(f);
  assert.equal(after.row, before.row, "the row at the top is the one read before");
  assert.ok(Math.abs(after.rowTop - before.rowTop) < 1, `the row read moved from ${before.rowTop} to ${after.rowTop}`);
  assert.deepEqual(panel.errors, []);
  await panel.page.context().close();
});
