// The whole extension in real VS Code (code-server 4.139.1), driven like a person would:
// open the Pi panel, prompt, watch the streamed answer, approve an edit under `ask` and see it
// in the editor, undo it with the editor's undo, abort a long bash run and read the report,
// reload the window mid-run and find the session intact. Real pi-lsp, loopback model server.
import { test, after, afterEach, before, beforeEach } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { activeTab, editorText, runCommand, startWorkbench, until, waitChatFrame } from "./harness.mjs";
import { BIG_TEXT, MANY_WORDS, STORY } from "./model-script.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const shotDir = process.env.PI_E2E_SHOTS ?? path.join(here, "..", "..", "dist", "e2e");
fs.mkdirSync(shotDir, { recursive: true });

let wb;
let page;
let chat;

const NOTES = "alpha\nbeta\ngamma\n";
/** The workspace's files as every step finds them on disk. */
/** A project MCP server that cannot start (the MCP Servers test reads its state and disables it). */
const MCP_JSON = JSON.stringify({ mcpServers: { broken: { command: "/nonexistent/pi-mcp-test-server", exposure: "deferred" } } }, null, 2) + "\n";
const FILES = { "notes.txt": NOTES, "README.md": "# demo\n", "bad.json": '{"a": }\n', "big.txt": BIG_TEXT, "story.txt": STORY, ".pi/mcp.json": MCP_JSON };

before(async () => {
  wb = await startWorkbench({ files: FILES, settings: { "pi.approvalPolicy": "ask" } });
  page = wb.page;
});

// Every step starts from the same workbench, whatever the step before left (a failed step
// included): no run going, no question open, no quick input, menu or notification, no editor
// open, the workspace's files as seeded, and the Pi chat in the shown side bar with an empty
// composer. The sessions made by earlier steps stay (later steps read them, as a user would).
beforeEach(async () => {
  if (!chat) return; // the first step opens the panel itself
  await resetWorkbench();
});

afterEach(async (t) => {
  // What the workbench showed at the end of each step (kept in dist/e2e for failures).
  await page?.screenshot({ path: path.join(shotDir, `step-${t.name.slice(0, 40).replace(/[^a-z0-9]+/gi, "-")}.png`) }).catch(() => {});
});

after(async () => {
  if (wb) {
    if (process.env.PI_E2E_KEEP) console.error(`kept ${wb.root}`);
    await wb.close();
  }
});

async function frameText(frame) {
  return (await frame.locator("body").innerText()).replace(/\u00a0/g, " ");
}

async function send(frame, text) {
  const box = frame.locator('textarea[aria-label="Message"]');
  await box.click();
  await box.fill(text);
  await box.press("Enter");
}

/** The known state every step starts from (see beforeEach). */
async function resetWorkbench() {
  for (let i = 0; i < 2; i++) await page.keyboard.press("Escape");
  await page.locator(".quick-input-widget").waitFor({ state: "hidden", timeout: 5_000 }).catch(() => {});
  // A run left going (and with it any open question): aborted, in every panel's session.
  const going = () => {
    const s = wb.stats().activeStatus;
    return !!s && (s.state !== "idle" || s.questions > 0);
  };
  if (going()) {
    await runCommand(page, "Pi: Abort Run");
    await until("no run going", async () => !going(), 20_000);
  }
  // Editors (a diff, a second chat panel, a changed buffer): reverted and closed.
  for (let k = 0; (await page.locator(".tabs-container .tab").count()) > 0; k++) {
    if (k >= 10) throw new Error(`editors stay open: ${(await page.locator(".tabs-container .tab").allInnerTexts()).join(" | ")}`);
    await runCommand(page, "View: Revert and Close Editor");
  }
  for (const [rel, text] of Object.entries(FILES)) {
    const file = path.join(wb.workspace, rel);
    if (fs.readFileSync(file, "utf8") !== text) fs.writeFileSync(file, text);
  }
  if ((await page.locator(".notification-toast").count()) > 0) await runCommand(page, "Notifications: Clear All Notifications");
  // The chat in the side bar (shown again if a step hid it), the frame of this window.
  await runCommand(page, "Pi: Focus Chat");
  await until("the side bar shown", async () => page.locator(".part.sidebar").isVisible(), 10_000);
  // The Sessions and Changes views collapsed (the chat has the side bar's height).
  for (const name of ["Sessions", "Changes"]) {
    const header = page.locator(".part.sidebar .pane-header", { hasText: name }).first();
    if ((await header.getAttribute("aria-expanded")) === "true") await header.click();
  }
  if (chat.isDetached()) chat = await waitChatFrame(page);
  const box = chat.locator('textarea[aria-label="Message"]');
  await until("the composer in view", async () => {
    const b = await box.boundingBox();
    const v = page.viewportSize();
    return b && b.width > 0 && b.height > 0 && b.y >= 0 && b.y + b.height <= v.height && b.x >= 0 && b.x + b.width <= v.width;
  }, 10_000);
  await box.fill("");
}

/** The chat's attention banner as one line of text (null: not shown). */
async function attentionBanner() {
  const bar = chat.locator(".attention");
  if (!(await bar.isVisible())) return null;
  return (await bar.innerText()).replace(/\s+/g, " ").trim();
}

async function closeAll() {
  await runCommand(page, "File: Save All");
  await runCommand(page, "View: Close All Editors");
  await until("no editor open", async () => (await page.locator(".tabs-container .tab").count()) === 0, 10_000);
}

/** Types `text` at the end of the editor's line that reads `line`. */
async function typeAtEnd(line, text) {
  await page.locator(".editor-instance .monaco-editor .view-line", { hasText: line }).first().click();
  await page.keyboard.press("End");
  await page.keyboard.type(text);
}

/** Puts the cursor on the editor's first line (a click that never scrolls the view). */
async function clickEditor() {
  await page.locator(".editor-instance .monaco-editor .view-line").first().click();
  await page.keyboard.press("Control+Home");
}

/** Opens a workspace file with Quick Open (again when a busy workbench dropped the keys). */
async function openFile(name) {
  const input = page.locator(".quick-input-widget input");
  for (let attempt = 0; ; attempt++) {
    try {
      await page.keyboard.press("Control+P");
      await input.waitFor({ state: "visible", timeout: 5_000 });
      await input.fill(name);
      // The list is filtered a moment after the typing: Enter once the first row is the file
      // (before, the first row is the most recently opened one).
      await until(`${name} first in Quick Open`, async () => (await page.locator(".quick-input-list .monaco-list-row").first().getAttribute("aria-label"))?.startsWith(name), 10_000);
      await page.keyboard.press("Enter");
      await page.locator(`.tabs-container .tab.active`, { hasText: name }).waitFor({ timeout: 10_000 });
      return;
    } catch (e) {
      if (attempt >= 2) throw e;
      await page.keyboard.press("Escape");
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}

test("the Pi activity-bar panel opens and shows the chat with the model in the status bar", async () => {
  await page.locator('.activitybar [aria-label^="Pi"]').first().click();
  chat = await waitChatFrame(page);
  // A wider side bar, as a person would drag it (for the screenshot).
  const bar = await page.locator(".part.sidebar").boundingBox();
  const sashes = page.locator(".monaco-sash.vertical");
  for (let i = 0; bar && i < (await sashes.count()); i++) {
    const b = await sashes.nth(i).boundingBox();
    if (!b || b.height < 200 || Math.abs(b.x + b.width / 2 - (bar.x + bar.width)) > 6) continue;
    await page.mouse.move(b.x + b.width / 2, b.y + b.height / 2);
    await page.mouse.down();
    await page.mouse.move(560, b.y + b.height / 2, { steps: 8 });
    await page.mouse.up();
    break;
  }
  await until("the status bar item", async () => (await page.locator(".statusbar-item", { hasText: "pi" }).count()) > 0);
});

test("a prompt streams its answer into the panel", async () => {
  await send(chat, "hello world");
  await until("the streamed answer", async () => (await frameText(chat)).includes("That is all."), 60_000);
  const text = await frameText(chat);
  assert.ok(text.includes("hello world"), "the user's prompt is shown");
  assert.ok(text.includes("mock model"), "the answer's Markdown is rendered");
  assert.equal(await chat.locator("strong", { hasText: "mock model" }).count(), 1, "bold text is rendered as <strong>");
  assert.ok((await chat.locator("pre code").count()) >= 1, "the code block is rendered");
  const status = await page.locator(".statusbar-item", { hasText: "Mock One" }).first().innerText();
  assert.match(status, /Mock One · \d+% · \$\d+\.\d+ · idle/);
  // VP7: the host batches to at most 60 posts per second; its CPU per relayed event.
  const stats = await until("the host's figures", async () => {
    const s = wb.stats();
    return s.notesRelayed > 0 && / · idle$/.test(s.status) && s;
  }, 10_000);
  const view = stats.panels.find((p) => p.kind === "view");
  assert.ok(view.maxPostsPerSecond <= 60, `${view.maxPostsPerSecond} posts in one second`);
  // The run's events (agent_start … agent_settled, usage) and the answer's deltas, which the
  // server joins per 200 ms window (coalesceDeltasMs): a few notifications for 300 ms of text.
  assert.ok(view.notes >= 12, `${view.notes} notifications reached the panel`);
  const perThousand = ((stats.hostCpuMs + view.batchCpuMs) / stats.notesRelayed) * 1000;
  console.error(`host relay: ${stats.notesRelayed} notifications, ${view.posts} posts (max ${view.maxPostsPerSecond}/s), ${perThousand.toFixed(2)} ms host CPU per 1,000 events`);
});

test("an edit under `ask` waits for Allow, lands in the open editor as one undo step, and the editor's undo reverts it", async () => {
  await openFile("notes.txt");
  assert.equal(await editorText(page), "alpha\nbeta\ngamma\n");
  await send(chat, "edit notes.txt please");
  const allow = chat.getByRole("button", { name: /Allow once/ });
  await allow.waitFor({ timeout: 60_000 });
  assert.ok((await frameText(chat)).includes("notes.txt"), "the permission card names the file");
  await page.screenshot({ path: path.join(shotDir, "vscode-panel.png") });
  // The agent's question did not move focus or the active editor.
  assert.equal(await activeTab(page), "notes.txt");
  await allow.click();
  await until("the edit in the editor", async () => (await editorText(page)).includes("BETA"), 30_000);
  await until("the answer after the edit", async () => (await frameText(chat)).includes("Edited notes.txt."), 30_000);
  assert.equal(fs.readFileSync(path.join(wb.workspace, "notes.txt"), "utf8"), "alpha\nBETA\ngamma\n", "saved through agent/saveDocument");
  // "Open diff" on the tool card opens VS Code's diff editor of that edit; focus stays put.
  await chat.getByRole("button", { name: "Open diff" }).first().click().catch(async () => chat.getByText("Open diff").first().click());
  await until("the diff editor", async () => (await page.locator(".tabs-container .tab", { hasText: "(Pi's edit)" }).count()) > 0, 15_000);
  await page.locator(".monaco-diff-editor").first().waitFor({ timeout: 10_000 });
  // A tab of its own, beside notes.txt's (a preview would take the place of the user's own
  // preview tab, and go at the next click).
  const tabs = await page.locator(".tabs-container .tab").evaluateAll((els) => els.map((e) => e.getAttribute("aria-label") ?? ""));
  const diffTab = tabs.find((t) => t.includes("(Pi's edit)"));
  assert.ok(diffTab && !/preview/i.test(diffTab), `the diff tab is not a preview: ${diffTab}`);
  assert.ok(tabs.some((t) => t.startsWith("notes.txt,") || t === "notes.txt"), `notes.txt keeps its tab: ${tabs.join(" | ")}`);
  // The file still holds that edit: the diff's right side is the file itself (editable, as
  // Git's "Open Changes"), the left the text before the edit.
  const sides = await until("the diff's two sides", async () => {
    const uris = await page.locator(".monaco-diff-editor .monaco-editor[data-uri]").evaluateAll((els) => els.map((e) => e.getAttribute("data-uri")));
    return uris.length === 2 && uris;
  }, 10_000);
  // (code-server's window names the workspace's files vscode-remote:, a desktop window file:.)
  const file = sides.find((u) => !u.startsWith("pi-diff:"));
  assert.ok(sides.some((u) => u.startsWith("pi-diff:")) && /^(file|vscode-remote):/.test(file) && file.endsWith("/notes.txt"), sides.join(" "));
  await runCommand(page, "View: Close Editor");
  await openFile("notes.txt");
  // The agent's edit is under review: Keep / Undo CodeLenses on its hunk.
  await until("the Keep/Undo CodeLens", async () => (await page.locator(".contentWidgets .codelens-decoration", { hasText: "Keep" }).count()) > 0, 15_000);
  assert.equal(await activeTab(page), "notes.txt");
  // One editor undo reverts the whole agent edit.
  await clickEditor();
  await page.keyboard.press("Control+Z");
  await until("the undone edit", async () => (await editorText(page)).includes("beta") && !(await editorText(page)).includes("BETA"), 10_000);
  assert.equal(await editorText(page), "alpha\nbeta\ngamma\n");
  await until("the CodeLens to go", async () => (await page.locator(".contentWidgets .codelens-decoration", { hasText: "Keep" }).count()) === 0, 10_000);
  // The editor's redo brings the agent's edit back under review (its Keep / Undo lenses), not
  // as the user's typing; undo takes it away again.
  await page.keyboard.press("Control+Shift+Z");
  await until("the redone edit", async () => (await editorText(page)) === "alpha\nBETA\ngamma\n", 10_000);
  await until("the Keep/Undo CodeLens back after redo", async () => (await page.locator(".contentWidgets .codelens-decoration", { hasText: "Keep" }).count()) > 0, 10_000);
  await page.keyboard.press("Control+Z");
  await until("undone again", async () => (await editorText(page)) === "alpha\nbeta\ngamma\n", 10_000);
  await until("the CodeLens to go again", async () => (await page.locator(".contentWidgets .codelens-decoration", { hasText: "Keep" }).count()) === 0, 10_000);
});

test("Undo on the hunk's CodeLens reverts the agent's lines and keeps the user's own typing", async () => {
  await openFile("notes.txt");
  await send(chat, "edit notes.txt again");
  const allow = chat.getByRole("button", { name: /Allow once/ });
  await allow.waitFor({ timeout: 60_000 });
  await allow.click();
  await until("the edit in the editor", async () => (await editorText(page)).includes("BETA"), 30_000);
  await until("the Keep/Undo CodeLens", async () => (await page.locator(".contentWidgets .codelens-decoration", { hasText: "Keep" }).count()) > 0, 15_000);
  // The user types on line 1 (outside the agent's hunk) and on line 3.
  await page.locator(".editor-instance .monaco-editor .view-line", { hasText: "alpha" }).first().click();
  await page.keyboard.press("End");
  await page.keyboard.type(" (mine)");
  await page.locator(".editor-instance .monaco-editor .view-line", { hasText: "gamma" }).first().click();
  await page.keyboard.press("End");
  await page.keyboard.type("!");
  await until("the user's typing in the editor", async () => (await editorText(page)) === "alpha (mine)\nBETA\ngamma!\n", 10_000);
  await page.locator(".contentWidgets .codelens-decoration a", { hasText: "Undo" }).first().click();
  await until("the hunk undone", async () => (await editorText(page)) === "alpha (mine)\nbeta\ngamma!\n", 10_000);
  await until("the CodeLens to go", async () => (await page.locator(".contentWidgets .codelens-decoration", { hasText: "Keep" }).count()) === 0, 10_000);
  // The Undo is an ordinary editor edit: the editor's undo brings the agent's line back.
  await page.keyboard.press("Control+Z");
  await until("the redo of the agent line", async () => (await editorText(page)).includes("BETA"), 10_000);
  assert.equal(await editorText(page), "alpha (mine)\nBETA\ngamma!\n");
  // …under review again: its Keep / Undo lenses are back.
  await until("the Keep/Undo CodeLens back", async () => (await page.locator(".contentWidgets .codelens-decoration", { hasText: "Keep" }).count()) > 0, 10_000);
  // Leave the buffer as the file started, for the next steps.
  await page.keyboard.press("Control+A");
  await page.keyboard.type("alpha\nbeta\ngamma\n");
  await page.keyboard.press("Control+S");
});

test("the Changes view's Keep / Undo per hunk: Undo reverts only its hunk, never the user's typing; Keep leaves the other", async () => {
  await openFile("story.txt");
  // The user has typed in another place of the file (not saved) when the agent edits it.
  await typeAtEnd("line 5 of the story", " (mine)");
  await until("the user's typing", async () => (await editorText(page)).includes("line 5 of the story (mine)"), 10_000);
  await send(chat, "twohunks in the story");
  const allow = chat.getByRole("button", { name: /Allow once/ });
  await allow.waitFor({ timeout: 60_000 });
  await allow.click();
  await until("the answer after the edit", async () => (await frameText(chat)).includes("Edited the story."), 30_000);
  const edited = STORY.replace("line 2 of the story", "LINE 2 OF THE STORY").replace("line 5 of the story", "line 5 of the story (mine)").replace("line 8 of the story", "LINE 8 OF THE STORY");
  await until("the agent's edit around the user's typing", async () => (await editorText(page)) === edited, 10_000);
  // And more typing after the edit, in a third place.
  await typeAtEnd("line 10 of the story", "!");
  const typed = edited.replace("line 10 of the story", "line 10 of the story!");
  await until("the user's second typing", async () => (await editorText(page)) === typed, 10_000);
  // The Changes view: the session, the file, its two hunks (and only the agent's lines).
  const pane = page.locator(".pane", { has: page.locator(".pane-header", { hasText: "Changes" }) });
  const header = pane.locator(".pane-header").first();
  if ((await header.getAttribute("aria-expanded")) !== "true") await header.click();
  const rows = pane.locator(".monaco-list-row");
  /** The rows under story.txt's row (its hunks), as text. */
  const hunkRows = () =>
    rows.evaluateAll((els) => {
      const text = (e) => (e.textContent ?? "").replace(/\s+/g, " ").trim();
      const level = (e) => Number(e.getAttribute("aria-level"));
      const at = els.findIndex((e) => text(e).includes("story.txt"));
      if (at < 0) return [];
      const out = [];
      const part = (e, cls) => (e.querySelector(cls)?.textContent ?? "").trim();
      for (let i = at + 1; i < els.length && level(els[i]) > level(els[at]); i++) out.push(`${part(els[i], ".label-name")} | ${part(els[i], ".label-description")}`);
      return out;
    });
  await until("the two hunk rows", async () => JSON.stringify(await hunkRows()) === JSON.stringify(["Line 2: LINE 2 OF THE STORY | +1 −1", "Line 8: LINE 8 OF THE STORY | +1 −1"]), 15_000);
  assert.ok((await rows.allInnerTexts()).some((t) => t.includes("story.txt") && t.includes("2 hunks")), (await rows.allInnerTexts()).join(" | "));
  /** Clicks a hunk row's inline action (shown on hover). */
  const act = async (line, action) => {
    const row = rows.filter({ hasText: `Line ${line}:` }).first();
    await row.hover();
    await row.locator(`.action-label[aria-label^="${action}"]`).click();
  };
  // Undo on the first hunk: its old line is back; the user's typing and the other hunk stay.
  await act(2, "Undo Agent Change");
  const undone = typed.replace("LINE 2 OF THE STORY", "line 2 of the story");
  await until("the first hunk undone", async () => (await editorText(page)) === undone, 10_000);
  await until("one hunk row left", async () => JSON.stringify(await hunkRows()) === JSON.stringify(["Line 8: LINE 8 OF THE STORY | +1 −1"]), 10_000);
  // Keep on the other: the text stays as it is and nothing is left to review in the file.
  await act(8, "Keep Agent Change");
  await until("nothing left to review", async () => !wb.stats().changedFiles.some((u) => u.endsWith("/story.txt")) && (await hunkRows()).length === 0, 10_000);
  assert.equal(await editorText(page), undone);
  // (VS Code asks for the CodeLenses again a moment after the provider says they changed.)
  await until("the CodeLenses to go", async () => (await page.locator(".contentWidgets .codelens-decoration", { hasText: "Keep" }).count()) === 0, 10_000);
  // The whole file, in the editor and (saved) on disk.
  await clickEditor();
  await page.keyboard.press("Control+S");
  const expected = STORY.replace("line 5 of the story", "line 5 of the story (mine)").replace("line 8 of the story", "LINE 8 OF THE STORY").replace("line 10 of the story", "line 10 of the story!");
  await until("the file on disk", async () => fs.readFileSync(path.join(wb.workspace, "story.txt"), "utf8") === expected, 10_000);
  assert.equal(fs.readFileSync(path.join(wb.workspace, "story.txt"), "utf8"), expected);
  if ((await header.getAttribute("aria-expanded")) === "true") await header.click();
  await closeAll();
});

test("typing in a 5,000-line file with 50 agent hunks under review costs the host little per keystroke", async () => {
  await openFile("big.txt");
  await send(chat, "bigedit the big file");
  const allow = chat.getByRole("button", { name: /Allow once/ });
  await allow.waitFor({ timeout: 60_000 });
  await allow.click();
  await until("the answer after the edit", async () => (await frameText(chat)).includes("Edited big.txt."), 60_000);
  await until("the Keep/Undo CodeLens", async () => (await page.locator(".contentWidgets .codelens-decoration", { hasText: "Keep" }).count()) > 0, 15_000);
  assert.deepEqual(wb.stats().changedFiles.filter((u) => u.endsWith("/big.txt")).length, 1);
  await clickEditor();
  await page.keyboard.press("End");
  await new Promise((r) => setTimeout(r, 1500));
  const before = wb.stats().typing;
  const text = "typing while pi's changes are under review ".repeat(5);
  await page.keyboard.type(text);
  await until("the typed text", async () => (await editorText(page)).includes("typing while pi"), 10_000);
  // The deferred redraw and re-sync run, VS Code asks for the CodeLenses again: all counted.
  await new Promise((r) => setTimeout(r, 2000));
  const after = wb.stats().typing;
  const keys = after.keystrokes - before.keystrokes;
  const ms = after.changeMs - before.changeMs + (after.redrawMs - before.redrawMs) + (after.lensMs - before.lensMs);
  console.error(
    `typing under review: ${keys} keystrokes, host CPU ${ms.toFixed(1)} ms (change ${(after.changeMs - before.changeMs).toFixed(1)}, ${after.redraws - before.redraws} redraws ${(after.redrawMs - before.redrawMs).toFixed(1)}, ` +
      `${after.lensCalls - before.lensCalls} CodeLens calls ${(after.lensMs - before.lensMs).toFixed(1)}) = ${(ms / keys).toFixed(3)} ms per keystroke`,
  );
  assert.equal(keys, text.length);
  // ≤ 2 ms a keystroke: an eighth of the one-frame keystroke budget (CLIENTS.md), on the
  // thread's exact CPU clock (0.19–0.30 ms measured in code-server on 2 busy cores; the 0.5 ms
  // bound before round 33 was read on a tick-stepped clock that saw 0.035).
  assert.ok(ms / keys <= 2, `${(ms / keys).toFixed(3)} ms per keystroke`);
  // The typing (first line, no agent hunk) is the user's: still 50 hunks, and undoing them all
  // leaves it.
  await runCommand(page, "Pi: Undo All Agent Changes in File");
  await until("the agent's lines undone", async () => !wb.stats().changedFiles.some((u) => u.endsWith("/big.txt")), 10_000);
  assert.ok((await editorText(page)).startsWith(`line 0 of the big file${text}`), "the user's typing stays");
  await runCommand(page, "File: Revert File");
  await until("big.txt reverted", async () => (await editorText(page)).startsWith("line 0 of the big file\n"), 10_000);
  await closeAll();
});

test("a permission question asked in the panel comes as a notification once the panel is hidden", async () => {
  await openFile("notes.txt");
  await send(chat, "later edit gamma");
  await chat.getByRole("button", { name: /Allow once/ }).waitFor({ timeout: 60_000 });
  await runCommand(page, "View: Toggle Primary Side Bar Visibility");
  await until("the side bar hidden", async () => !(await page.locator(".part.sidebar").isVisible()), 10_000);
  const toast = page.locator(".notification-toast", { hasText: "Pi wants to edit notes.txt" });
  await toast.waitFor({ timeout: 30_000 });
  // Its answers are real buttons of the notification.
  assert.deepEqual(
    (await toast.locator(".notification-list-item-buttons-container .monaco-button").allInnerTexts()).map((t) => t.trim()),
    ["Allow Once", "Allow for Session", "Allow in Workspace", "Reject…", "Show"],
  );
  assert.equal(await activeTab(page), "notes.txt", "the question moved no focus");
  // agent/attention "permission": the status bar flag and the chat view's badge (on the
  // activity bar's Pi icon), until the question is answered.
  await until("the attention flag", async () => /hello world waits for your approval/.test(wb.stats().flag), 10_000);
  await page.locator(".statusbar-item", { hasText: "waits for your approval" }).first().waitFor({ timeout: 10_000 });
  assert.deepEqual(wb.stats().chatBadge, { value: 1, tooltip: "hello world waits for your approval" });
  await toast.locator(".notification-list-item-buttons-container .monaco-button", { hasText: /^Allow Once$/ }).click();
  // The answer closes the question's notification, its flag and its badge.
  await toast.waitFor({ state: "hidden", timeout: 10_000 });
  await until("the approval flag to go", async () => !/waits for your approval/.test(wb.stats().flag), 10_000);
  // (The run may end, still hidden, before the figures are written again: then the badge says
  // it finished — see below.)
  await until("the approval's badge to go", async () => !/waits for your approval/.test(wb.stats().chatBadge?.tooltip ?? ""), 10_000);
  await until("the edit in the editor", async () => (await editorText(page)).includes("GAMMA"), 30_000);
  // The run then ends with the panel still hidden: that is the flag now (agent/attention
  // "finished"), until the panel is shown.
  await until("the run's end", async () => / · idle$/.test(wb.stats().status), 30_000);
  await until("the finished flag", async () => wb.stats().flag, 10_000);
  assert.match(wb.stats().flag, /^\$\(bell-dot\) Pi: hello world finished$/);
  assert.deepEqual(wb.stats().chatBadge, { value: 1, tooltip: "hello world finished: Edited gamma." });
  await runCommand(page, "View: Toggle Primary Side Bar Visibility");
  await until("the side bar shown", async () => page.locator(".part.sidebar").isVisible(), 10_000);
  await until("the flag and the badge to go once the panel shows the session", async () => wb.stats().flag === "" && wb.stats().chatBadge === null, 10_000);
  await until("the answer after the edit", async () => (await frameText(chat)).includes("Edited gamma."), 30_000);
  // In the panel: the run finished while it was hidden (a banner, a row at the transcript's end).
  await until("the banner", async () => (await attentionBanner()) === "Finished while the panel was hidden Edited gamma. Dismiss", 10_000);
  assert.equal(await chat.locator(".rows > .row").last().innerText(), "Finished while the panel was hidden.");
  await chat.locator(".attention-action").click();
  await until("the banner to go", async () => (await attentionBanner()) === null, 10_000);
  // Put the buffer back for the next steps.
  await clickEditor();
  await page.keyboard.press("Control+Z");
  await until("the undone edit", async () => (await editorText(page)) === "alpha\nbeta\ngamma\n", 10_000);
  await page.keyboard.press("Control+S");
});

test("a run that ends while the panel is hidden raises the status bar flag and a notification; the flag opens the session", async () => {
  await runCommand(page, "Notifications: Clear All Notifications");
  await send(chat, "pause for three seconds");
  await runCommand(page, "View: Toggle Primary Side Bar Visibility");
  await until("the side bar hidden", async () => !(await page.locator(".part.sidebar").isVisible()), 10_000);
  const toast = page.locator(".notification-toast", { hasText: "Done pausing" }).first();
  await toast.waitFor({ timeout: 30_000 });
  assert.match((await toast.innerText()).replace(/\s+/g, " "), /Pi: hello world finished: Done pausing\./);
  const flag = page.locator(".statusbar-item", { hasText: "hello world finished" });
  await flag.first().waitFor({ timeout: 10_000 });
  await runCommand(page, "Notifications: Clear All Notifications");
  await flag.first().click();
  await until("the chat shown again", async () => page.locator(".part.sidebar").isVisible(), 10_000);
  await until("the flag to go", async () => (await flag.count()) === 0 && wb.stats().flag === "", 10_000);
  // The panel was hidden while the answer came: it got it when shown, and says so until the
  // user is back (typing in the composer).
  await until("the answer in the panel", async () => (await frameText(chat)).includes("Done pausing."), 10_000);
  await until("the banner", async () => (await attentionBanner()) === "Finished while the panel was hidden Done pausing. Dismiss", 10_000);
  await chat.locator('textarea[aria-label="Message"]').click();
  await page.keyboard.type("ok");
  await until("the banner to go", async () => (await attentionBanner()) === null, 10_000);
  await chat.locator('textarea[aria-label="Message"]').fill("");
});

test("the diagnostics tool reads VS Code's problems (agent/diagnostics)", async () => {
  await openFile("bad.json");
  await until("VS Code's JSON problem", async () => /[1-9]/.test(await page.locator(".statusbar-item[id='status.problems']").innerText()), 30_000);
  await send(chat, "diag the workspace");
  const allow = chat.getByRole("button", { name: /Allow once/ });
  await allow.waitFor({ timeout: 60_000 });
  await allow.click();
  await until("the answer quoting the diagnostics", async () => /The editor reports: .*bad\.json:1:\d+ error/s.test(await frameText(chat)), 30_000);
  // "Add Current File to Chat" sends the file's text (the buffer, unsaved typing included).
  await clickEditor();
  await page.keyboard.press("End");
  await page.keyboard.type(" // mine");
  await runCommand(page, "Pi: Add Current File to Chat");
  const asked = wb.model.requests.length;
  await send(chat, "hello with the file");
  const userText = (req) => {
    const last = req.messages.filter((m) => m.role === "user").pop();
    return typeof last.content === "string" ? last.content : last.content.map((b) => b.text ?? "").join("");
  };
  const sent = await until("the prompt at the model", async () => wb.model.requests.slice(asked).map(userText).find((t) => t.includes("hello with the file")), 30_000);
  await until("the run's end", async () => / · idle$/.test(wb.stats().status), 30_000);
  assert.ok(sent.includes('File bad.json:\n```\n{"a": } // mine\n'), `the prompt carries the file's text: ${JSON.stringify(sent)}`);
  await runCommand(page, "File: Revert File");
  await closeAll();
});

test("aborting a long bash run stops it and shows the report", async () => {
  await send(chat, "sleep for a while");
  const allow = chat.getByRole("button", { name: /Allow once/ });
  await allow.waitFor({ timeout: 60_000 });
  await allow.click();
  await until("the running bash tool", async () => (await frameText(chat)).includes("sleep 60"), 20_000);
  await new Promise((r) => setTimeout(r, 1000));
  const started = Date.now();
  await chat.getByRole("button", { name: "Stop" }).click();
  await until("the abort report", async () => (await frameText(chat)).includes("Stopped"), 10_000);
  assert.ok(Date.now() - started < 8000, "the run stopped well before the command would have ended");
  const text = await frameText(chat);
  assert.match(text, /sleep 60/);
});

/** Picks `label` in the open quick pick (waits for it). */
async function pickQuick(label) {
  const row = page.locator(".quick-input-list .monaco-list-row", { hasText: label }).first();
  await row.waitFor({ timeout: 15_000 });
  await row.click();
}

/** Answers the open input box with `text`. */
async function answerInput(text) {
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ state: "visible", timeout: 10_000 });
  await input.fill(text);
  // (VS Code's own file dialog reads a typed path a moment after it changes.)
  await new Promise((r) => setTimeout(r, 400));
  await page.keyboard.press("Enter");
  await page.locator(".quick-input-widget").waitFor({ state: "hidden", timeout: 10_000 }).catch(() => {});
}

test("the model and thinking pickers: the current model first, levels of a thinking model, the status bar follows", async () => {
  await runCommand(page, "Pi: Select Model");
  const first = page.locator(".quick-input-list .monaco-list-row").first();
  await first.waitFor({ timeout: 15_000 });
  assert.match((await first.innerText()).replace(/\s+/g, " "), /Mock One ?mock\/mock-1 · current/);
  await pickQuick("Mock Thinker");
  await page.locator(".statusbar-item", { hasText: "Mock Thinker" }).first().waitFor({ timeout: 15_000 });
  await runCommand(page, "Pi: Select Thinking Level");
  await pickQuick("high");
  await until("the thinking level", async () => wb.stats().activeStatus?.thinkingLevel === "high", 10_000);
  // A model that does not think has nothing to pick: it says so.
  await runCommand(page, "Pi: Select Model");
  await pickQuick("Mock One");
  await page.locator(".statusbar-item", { hasText: "Mock One" }).first().waitFor({ timeout: 15_000 });
  await runCommand(page, "Pi: Select Thinking Level");
  const toast = page.locator(".notification-toast", { hasText: "does not think" });
  await toast.waitFor({ timeout: 15_000 });
  await runCommand(page, "Notifications: Clear All Notifications");
});

test("the Sessions view: label, rename, export, fork, clone, branch here, branch with summary, open", async () => {
  const pane = page.locator(".pane", { has: page.locator(".pane-header", { hasText: "Sessions" }) });
  const header = pane.locator(".pane-header").first();
  if ((await header.getAttribute("aria-expanded")) !== "true") await header.click();
  // Room for the tree, as a person would drag the sash between the Chat and Sessions views
  // (the rows of a view too short to show them scroll under the clicks).
  await until("the Sessions view expanded", async () => (await header.getAttribute("aria-expanded")) === "true", 5_000);
  const body = pane.locator(".pane-body");
  for (let attempt = 0; ((await body.boundingBox())?.height ?? 0) < 300; attempt++) {
    if (attempt >= 5) break;
    await new Promise((r) => setTimeout(r, 300)); // the split view settles after the expansion
    const top = (await header.boundingBox()).y;
    const sashes = page.locator(".part.sidebar .monaco-sash.horizontal");
    for (let i = 0; i < (await sashes.count()); i++) {
      const b = await sashes.nth(i).boundingBox();
      if (!b || b.width < 100 || Math.abs(b.y + b.height / 2 - top) > 6) continue;
      await page.mouse.move(b.x + b.width / 2, b.y + b.height / 2);
      await page.mouse.down();
      await page.mouse.move(b.x + b.width / 2, Math.min(top, 420), { steps: 8 });
      await page.mouse.up();
      break;
    }
  }
  await until("room for the Sessions tree", async () => (await pane.locator(".pane-body").boundingBox())?.height >= 300, 5_000);
  const rows = pane.locator(".monaco-list-row");
  const row = (text) => rows.filter({ hasText: text }).first();
  /** A row of the active session's branches: with the session lists collapsed, the rows below
   * the top level (the view draws only the rows in sight: it scrolls down for the others). */
  const entryRow = async (text) => {
    for (let k = 0; ; k++) {
      const found = await rows.evaluateAll((els, text) => els.findIndex((e) => e.getAttribute("aria-level") !== "1" && (e.textContent ?? "").includes(text)), text);
      if (found >= 0) return rows.nth(found);
      if (k >= 10) throw new Error(`no branch row "${text}" in: ${(await rows.allInnerTexts()).join(" | ")}`);
      const box = await pane.locator(".pane-body").boundingBox();
      await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
      await page.mouse.wheel(0, 80);
      await new Promise((r) => setTimeout(r, 200));
    }
  };
  /** Collapses a top-level row of the view (if it is open). */
  const collapse = async (text) => {
    const r = row(text);
    if ((await r.getAttribute("aria-expanded")) === "true") await r.click();
    await until(`${text} collapsed`, async () => (await r.getAttribute("aria-expanded")) === "false", 5_000);
  };
  /** Runs a row's context-menu item (again when a tree refresh swallowed the click). */
  const menu = async (target, item) => {
    for (let attempt = 0; ; attempt++) {
      await new Promise((r) => setTimeout(r, 400)); // let a refresh of the tree settle
      await (typeof target === "function" ? await target() : target).click({ button: "right" });
      const action = page.locator(".context-view .action-label", { hasText: item }).first();
      await action.waitFor({ timeout: 10_000 });
      // The item under the pointer is the menu's focused one; Enter runs it (a click on a menu
      // that opened under a settling tree is sometimes taken as the end of the right-click).
      await action.hover();
      await until(`"${item}" focused in the menu`, async () => action.evaluate((el) => !!el.closest(".action-item.focused")), 5_000);
      await page.keyboard.press("Enter");
      const closed = await page
        .locator(".context-view .monaco-menu")
        .first()
        .waitFor({ state: "hidden", timeout: 2_000 })
        .then(() => true, () => false);
      if (closed) return;
      if (attempt >= 2) throw new Error(`the context menu's "${item}" did not run`);
      await page.keyboard.press("Escape");
    }
  };
  await row("Branches of the Active Session").waitFor({ timeout: 30_000 });
  await row("edit notes.txt please").waitFor({ timeout: 30_000 });
  const main = wb.stats().activeSession;
  // Rename the session (its row under This Workspace).
  await menu(row("hello world"), "Rename Session");
  await answerInput("Main session");
  await row("Main session").waitFor({ timeout: 15_000 });
  await collapse("This Workspace");
  await collapse("Pi's Sessions");
  // Label an entry.
  await menu(() => entryRow("edit notes.txt please"), "Label Entry");
  await answerInput("first edit");
  await until("the label on the row", async () => (await (await entryRow("edit notes.txt please")).innerText()).includes("first edit"), 15_000);
  // Export it to Markdown (from the palette: the active session; VS Code's own save dialog).
  await runCommand(page, "Pi: Export Session");
  await pickQuick("markdown");
  const out = path.join(wb.workspace, "exported.md");
  // VS Code's own save dialog opens with the suggested file name.
  const input = page.locator(".quick-input-widget input");
  await until("the save dialog", async () => /pi-session-[0-9a-f]{8}\.md$/.test(await input.inputValue()), 15_000);
  await answerInput(out);
  await until("the export", async () => fs.existsSync(out), 15_000);
  assert.ok(fs.readFileSync(out, "utf8").includes("edit notes.txt please"), fs.readFileSync(out, "utf8").slice(0, 2000));
  await runCommand(page, "Notifications: Clear All Notifications");
  // Fork from a user message: a new session in the panel with that message in the composer.
  await menu(() => entryRow("edit notes.txt again"), "Fork from Here");
  const composer = chat.locator('textarea[aria-label="Message"]');
  await until("the forked session in the panel", async () => (await composer.inputValue()) === "edit notes.txt again", 20_000);
  await until("the fork's history", async () => {
    const t = await frameText(chat);
    return t.includes("Edited notes.txt.") && !t.includes("sleep for a while");
  }, 20_000);
  const forked = wb.stats().activeSession;
  await composer.fill("");
  // Clone (from the palette: the active session, the fork).
  await runCommand(page, "Pi: Clone Session");
  await until("the clone in the panel", async () => {
    const s = wb.stats().activeSession;
    return s && s !== forked && s;
  }, 20_000);
  // Branch with a summary of the branch left (the model writes it).
  await until("the clone's branches", async () => (await rows.allInnerTexts()).some((t) => t.includes("edit notes.txt please")), 15_000);
  await menu(() => entryRow("edit notes.txt please"), "Branch Here with Summary");
  await answerInput("");
  await until("the branch summary in the tree", async () => (await rows.filter({ hasText: "Branch summary" }).count()) > 0, 30_000);
  await until("the branch's text in the composer", async () => (await composer.inputValue()) === "edit notes.txt please", 20_000);
  await composer.fill("");
  // Branch here, on a key in the focused Sessions view: the message goes to the composer.
  await (await entryRow("hello world")).click();
  await page.keyboard.press("b");
  await until("the branch's text in the composer", async () => (await composer.inputValue()) === "hello world", 20_000);
  await composer.fill("");
  // Open the first session again (from the palette: a list of the sessions).
  await runCommand(page, "Pi: Open Session");
  await pickQuick("Main session");
  await until("the first session in the panel", async () => wb.stats().activeSession === main && !(await frameText(chat)).includes("Branch summary"), 20_000);
});

test("a second panel on another session streams at the same time as the first", async () => {
  await runCommand(page, "Pi: Open Session in New Panel");
  await page.locator(".quick-input-list .monaco-list-row", { hasText: "New session" }).first().waitFor({ timeout: 10_000 });
  await page.keyboard.press("Enter");
  const second = await waitChatFrame(page, { except: [chat], timeout: 60_000 });
  await send(second, "slow in the second panel");
  await until("the second panel streaming", async () => (await frameText(second)).includes("Line 2 of a slow answer."), 30_000);
  await send(chat, "hello from the first panel");
  await until("the first panel's answer", async () => {
    const t = await frameText(chat);
    return t.slice(t.lastIndexOf("hello from the first panel")).includes("That is all.");
  }, 30_000);
  // The second run is still streaming meanwhile, and the first panel shows none of it.
  const mid = await frameText(second);
  assert.ok(!mid.includes("Line 60 of a slow answer."), "the second run was still going");
  assert.ok(!(await frameText(chat)).includes("slow in the second panel"), "events stay in their own panel");
  await until("the second panel's answer to grow", async () => (await frameText(second)).length > mid.length, 10_000);
  await second.getByRole("button", { name: "Stop" }).click();
  await until("the second run stopped", async () => (await frameText(second)).includes("aborted"), 10_000);
  await closeAll();
});

test("a window reload mid-run finds the session intact, and the edits under review with it", async () => {
  await openFile("notes.txt");
  await send(chat, "edit notes.txt before the reload");
  const allow = chat.getByRole("button", { name: /Allow once/ });
  await allow.waitFor({ timeout: 60_000 });
  await allow.click();
  await until("the edit under review", async () => wb.stats().changedFiles.some((u) => u.endsWith("/notes.txt")), 30_000);
  await until("the run's end", async () => / · idle$/.test(wb.stats().status), 30_000);
  await send(chat, "slow answer please");
  await until("the slow answer streaming", async () => (await frameText(chat)).includes("Line 3 of a slow answer."), 30_000);
  await runCommand(page, "Developer: Reload Window");
  await page.locator(".monaco-workbench").waitFor({ timeout: 60_000 });
  // The panel was open before the reload: VS Code restores it (no click needed).
  chat = await waitChatFrame(page, { timeout: 20_000 }).catch(() => null);
  if (!chat) {
    await runCommand(page, "Pi: Focus Chat");
    chat = await waitChatFrame(page, { timeout: 60_000 });
  }
  await until(
    "the history after the reload",
    async () => {
      const t = await frameText(chat);
      // (The last page of the session: older messages load when scrolled to.)
      const missing = ["edit notes.txt before the reload", "Edited notes.txt.", "slow answer please", "Line 3 of a slow answer."].filter((x) => !t.includes(x));
      if (missing.length) throw new Error(`the panel lacks ${JSON.stringify(missing)}; it shows: …${JSON.stringify(t.slice(-600))}`);
      return true;
    },
    60_000,
  );
  // The review state came back: notes.txt's agent hunk still has its Keep / Undo.
  await until("the review state after the reload", async () => wb.stats().changedFiles.some((u) => u.endsWith("/notes.txt")), 30_000);
  await openFile("notes.txt");
  await until("the Keep/Undo CodeLens after the reload", async () => (await page.locator(".contentWidgets .codelens-decoration", { hasText: "Keep" }).count()) > 0, 20_000);
  // The session goes on after the reload.
  await send(chat, "hello again");
  await until("an answer after the reload", async () => {
    const t = await frameText(chat);
    return t.slice(t.lastIndexOf("hello again")).includes("That is all.");
  }, 60_000);
});

test("6,000 deltas at 500 per second reach the panel in at most 60 posts per second (VP7)", async () => {
  // The previous run's figures are written 200 ms after it ended: wait for them, so the
  // baseline is this extension host's.
  await new Promise((r) => setTimeout(r, 1000));
  const before = wb.stats();
  const viewBefore = before.panels.find((p) => p.kind === "view");
  const sent = Date.now();
  await send(chat, "many words please");
  await until("the end of the burst", async () => (await frameText(chat)).includes(`w${MANY_WORDS - 1} END`), 90_000);
  const seconds = (Date.now() - sent) / 1000;
  // The server coalesces the deltas of one frame (initializationOptions.coalesceDeltasMs,
  // 16 ms by default), so fewer notifications than words arrive: the figures are final once the
  // host has seen the run end.
  const stats = await until("the host's figures for the burst", async () => {
    const s = wb.stats();
    return s.notesRelayed > before.notesRelayed && / · idle$/.test(s.status) && s;
  }, 10_000);
  const view = stats.panels.find((p) => p.kind === "view");
  const notes = stats.notesRelayed - before.notesRelayed;
  const posts = view.posts - viewBefore.posts;
  const routing = stats.hostCpuMs - before.hostCpuMs;
  // The batcher's sections: each post's batch built, serialised and handed to VS Code's
  // postMessage.
  const batching = view.batchCpuMs - viewBefore.batchCpuMs;
  const cpu = routing + batching;
  // The clock itself is read twice per measured section: its calibrated cost (one call per
  // section: each notification's and each batch's) is taken off (both figures printed).
  const sections = notes + (view.batchSections - viewBefore.batchSections);
  const clockCost = sections * stats.cpuCallMs;
  const net = cpu - clockCost;
  const delivered = view.notesPosted - viewBefore.notesPosted;
  console.error(
    `host relay (burst): ${MANY_WORDS} deltas → ${notes} notifications → ${delivered} after coalescing, in ${posts} posts (${view.packedPosts - viewBefore.packedPosts} packed, ${((view.packedBytes - viewBefore.packedBytes) / 1000).toFixed(0)} kB) over ${seconds.toFixed(1)} s (max ${view.maxPostsPerSecond}/s); ` +
      `host CPU ${cpu.toFixed(1)} ms (routing ${routing.toFixed(1)} ms, batching and posting ${batching.toFixed(1)} ms, ${stats.cpuClock} clock) = ${((cpu / MANY_WORDS) * 1000).toFixed(2)} ms per 1,000 events; ` +
      `less the clock's own ${clockCost.toFixed(1)} ms: ${((net / MANY_WORDS) * 1000).toFixed(2)} ms per 1,000 events (${((net / notes) * 1000).toFixed(2)} ms per 1,000 notifications)`,
  );
  assert.ok(view.maxPostsPerSecond <= 60, `${view.maxPostsPerSecond} posts in one second`);
  assert.ok(posts <= 60 * Math.ceil(seconds) + 5, `${posts} posts in ${seconds.toFixed(1)} s`);
  assert.ok(posts < MANY_WORDS / 2, `${posts} posts for ${MANY_WORDS} streamed deltas: batched`);
  // VP7's CPU half: ≤ 5 ms of host CPU per 1,000 events (the streamed deltas), read on the
  // thread's exact CPU clock (relay.ts `pickClock`) over every section the host spends on the
  // stream (each notification handled, each post built and handed to postMessage), less the
  // clock's own calibrated cost. Round 33 measured 23–57 ms here (a post every 18 ms, one
  // notification each: VS Code's postMessage is an RPC call of 0.13–0.2 ms whatever it
  // carries); now a post every 200 ms (the server's delta window the same), packed as JSON
  // text: 3.0–4.5 ms at load 10–13 (docs/benchmarks.md, round 34).
  assert.ok((net / MANY_WORDS) * 1000 <= 5, `${((net / MANY_WORDS) * 1000).toFixed(2)} ms of host CPU per 1,000 streamed deltas (VP7: ≤ 5)`);
  assert.equal(stats.cpuClock, "thread", "the exact thread clock (WASI) in code-server's extension host");
  assert.ok(net > 0 && Number.isFinite(net), `host CPU ${net} ms`);
});

test("Pi: MCP Servers lists the servers with their state, and disables one (saved to the file that defines it)", async () => {
  await runCommand(page, "Pi: MCP Servers");
  const row = page.locator(".quick-input-widget .quick-input-list .monaco-list-row", { hasText: "broken" });
  await row.first().waitFor({ timeout: 20_000 });
  const text = (await row.first().innerText()).replace(/\s+/g, " ");
  assert.match(text, /broken/);
  assert.match(text, /failed · 0 tools · deferred · project|failed · deferred · project/, text);
  await page.keyboard.press("Enter");
  const actions = page.locator(".quick-input-widget .quick-input-list .monaco-list-row");
  await until("the server's actions", async () => (await actions.allInnerTexts()).some((t) => t.includes("Disable")), 10_000);
  assert.deepEqual((await actions.allInnerTexts()).map((t) => t.trim()), ["Reconnect", "Disable", "Set Exposure…", "Show the Error", "Open Its Configuration"]);
  await page.locator(".quick-input-widget .quick-input-list .monaco-list-row", { hasText: "Disable" }).click();
  // The list again: the server is disabled, and the project's file says so.
  await until("the disabled server", async () => (await page.locator(".quick-input-widget .quick-input-list .monaco-list-row", { hasText: "broken" }).allInnerTexts()).some((t) => /disabled/.test(t)), 20_000);
  const saved = JSON.parse(fs.readFileSync(path.join(wb.workspace, ".pi/mcp.json"), "utf8"));
  assert.equal(saved.mcpServers.broken.enabled, false);
  await page.keyboard.press("Escape");
});

/** Picks `label` in the open quick pick with the keyboard, as a user filtering it does (a
 * click can land on a description's hover that covers the row). */
async function typeQuick(label) {
  const rows = page.locator(".quick-input-widget .quick-input-list .monaco-list-row");
  await page.keyboard.type(label);
  await until(`the quick pick filtered to ${label}`, async () => {
    const t = await rows.allInnerTexts();
    return t.length >= 1 && t[0].replace(/\s+/g, " ").trim().startsWith(label);
  }, 10_000);
  await page.keyboard.press("Enter");
}

test("Pi: Set What Agent Edits Do With Unsaved Changes writes saveUserChanges in the file picked, its other keys kept; default takes it out", async () => {
  const file = path.join(wb.workspace, ".pi/settings.json");
  const existed = fs.existsSync(file);
  const before = existed ? JSON.parse(fs.readFileSync(file, "utf8")) : {};
  const read = () => (fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, "utf8")) : null);
  await runCommand(page, "Pi: Set What Agent Edits Do With Unsaved Changes");
  const rows = page.locator(".quick-input-widget .quick-input-list .monaco-list-row");
  await until("the values", async () => (await rows.allInnerTexts()).length === 4, 15_000);
  // Each row: the value, then the pi.saveUserChanges setting's description of it.
  assert.deepEqual(
    (await rows.allInnerTexts()).map((t) => t.replace(/\s+/g, " ").trim()),
    [
      "askAsk once per file per session whether to save your unsaved changes with the agent's edit",
      "alwaysSave the buffer: your unsaved changes with the agent's edit",
      "neverKeep your changes unsaved: the disk gets only the agent's edit",
      "defaultPi's settings.json saveUserChanges (project over user), else ask",
    ],
  );
  await typeQuick("never");
  await until("the places", async () => (await rows.allInnerTexts()).some((t) => t.includes("This workspace")), 15_000);
  await typeQuick("This workspace");
  await until("the project's settings", async () => read()?.saveUserChanges === "never", 15_000);
  assert.deepEqual(read(), { ...before, saveUserChanges: "never" });
  await runCommand(page, "Pi: Set What Agent Edits Do With Unsaved Changes");
  await until("the values", async () => (await rows.allInnerTexts()).length === 4, 15_000);
  await typeQuick("default");
  await until("the places", async () => (await rows.allInnerTexts()).some((t) => t.includes("This workspace")), 15_000);
  await typeQuick("This workspace");
  await until("the key taken out", async () => read() !== null && !("saveUserChanges" in read()), 15_000);
  assert.deepEqual(read(), before);
  if (!existed) fs.rmSync(file);
});
