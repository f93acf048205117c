// The agent's saves run none of the user's save participants (issue 30 item 2), in real VS Code
// (code-server 4.139.1): `editor.formatOnSave` on, autosave off, and a formatter of plain text
// installed from its own .vsix (test/e2e/formatter: it upper-cases every letter and logs each
// save it takes part in). The agent's edit lands with exactly its text on disk, the editor stays
// clean, one undo step takes it back; the user's own save afterwards is formatted. The review's
// *Undo* on a hunk's CodeLens (issue 30 item 4) lands the same way: the disk gets exactly the
// text without the agent's lines, no save participant runs, the editor stays clean, and Ctrl+Z
// brings the agent's lines back under review. The editor's undo / redo of an agent change carry
// it to disk, so the agent's next command sees what the editor shows. With `pi.saveUserChanges:
// never` (issue 30 item 1) an agent edit of a document holding the user's unsaved typing puts
// only the agent's change on disk, the typing stays unsaved, and the user's own save later is
// no conflict.
import { test, after, before } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { editorText, startWorkbench, until, waitChatFrame } from "./harness.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const shotDir = process.env.PI_E2E_SHOTS ?? path.join(here, "..", "..", "dist", "e2e");
fs.mkdirSync(shotDir, { recursive: true });

const NOTES = "alpha\nbeta\ngamma\n";
const LENS = "one\ntwo\nthree\n";

let wb;
let page;
let vsixDir;

/** The test formatter packaged as a .vsix (vsce from the extension's own dev dependencies). */
function packageFormatter() {
  vsixDir = fs.mkdtempSync(path.join(os.tmpdir(), "pi-formatter-"));
  const out = path.join(vsixDir, "upper-formatter.vsix");
  const vsce = path.join(here, "..", "..", "node_modules", ".bin", "vsce");
  const r = spawnSync(vsce, ["package", "--skip-license", "--allow-missing-repository", "-o", out], { cwd: path.join(here, "formatter"), encoding: "utf8", timeout: 120_000 });
  if (r.status !== 0) throw new Error(`packaging the test formatter failed: ${r.stdout}\n${r.stderr}`);
  return out;
}

before(async () => {
  wb = await startWorkbench({
    files: { "notes.txt": NOTES, "lens.txt": LENS, "mine.txt": LENS },
    settings: { "editor.formatOnSave": true, "pi.saveUserChanges": "never", "[plaintext]": { "editor.defaultFormatter": "pi-lsp-test.upper-formatter" } },
    extensions: [packageFormatter()],
  });
  page = wb.page;
});

after(async () => {
  await page?.screenshot({ path: path.join(shotDir, "agent-save.png") }).catch(() => {});
  if (wb) {
    if (process.env.PI_E2E_KEEP) console.error(`kept ${wb.root}`);
    await wb.close();
  }
  if (vsixDir) fs.rmSync(vsixDir, { recursive: true, force: true });
});

async function frameText(frame) {
  return (await frame.locator("body").innerText()).replace(/\u00a0/g, " ");
}

/** Whether the active editor tab shows unsaved changes. */
async function activeDirty() {
  return (await page.locator(".tabs-container .tab.active.dirty").count()) > 0;
}

test("the agent's edit is saved without the user's format-on-save; the user's own save is formatted", async () => {
  const file = path.join(wb.workspace, "notes.txt");
  const saves = path.join(wb.workspace, "formatter-saves.txt");
  await page.locator('.activitybar [aria-label^="Pi"]').first().click();
  const chat = await waitChatFrame(page);
  // notes.txt open in the editor, with no unsaved changes.
  await page.keyboard.press("Control+P");
  await page.locator(".quick-input-widget input").fill("notes.txt");
  await until("notes.txt first in Quick Open", async () => (await page.locator(".quick-input-list .monaco-list-row").first().getAttribute("aria-label"))?.startsWith("notes.txt"), 10_000);
  await page.keyboard.press("Enter");
  await page.locator(".tabs-container .tab.active", { hasText: "notes.txt" }).waitFor({ timeout: 10_000 });
  assert.equal(await editorText(page), "alpha\nbeta\ngamma\n");
  // The formatter is active before the agent's edit (it would format any save from now on).
  await until("the test formatter activated", async () => fs.existsSync(path.join(wb.workspace, ".formatter-active")), 20_000);

  const box = chat.locator('textarea[aria-label="Message"]');
  await box.click();
  await box.fill("edit notes.txt please");
  await box.press("Enter");
  await until("the answer after the edit", async () => (await frameText(chat)).includes("Edited notes.txt."), 60_000);
  await until("the edit in the editor", async () => (await editorText(page)) === "alpha\nBETA\ngamma\n", 10_000);
  // The disk holds exactly the agent's text (the formatter would have upper-cased all of it),
  // no save participant ran, and the editor has nothing unsaved.
  assert.equal(fs.readFileSync(file, "utf8"), "alpha\nBETA\ngamma\n");
  assert.equal(fs.existsSync(saves), false, `a save participant ran for the agent's save: ${fs.existsSync(saves) ? fs.readFileSync(saves, "utf8") : ""}`);
  assert.equal(await activeDirty(), false, "the editor shows no unsaved changes after the agent's edit");

  // One undo step takes the agent's edit back; redo brings it back, clean again.
  await page.locator(".editor-instance .monaco-editor .view-line").first().click();
  await page.keyboard.press("Control+Home");
  await page.keyboard.press("Control+Z");
  await until("the undone edit", async () => (await editorText(page)) === "alpha\nbeta\ngamma\n", 10_000);
  assert.equal(await activeDirty(), true, "the undone edit is an unsaved change");
  // The agent's part of the disk follows the editor's undo and redo (issue 30 item 4).
  await until("the undo on disk", async () => fs.readFileSync(file, "utf8") === "alpha\nbeta\ngamma\n", 5_000);
  await page.keyboard.press("Control+Shift+Z");
  await until("the redone edit", async () => (await editorText(page)) === "alpha\nBETA\ngamma\n", 10_000);
  await until("the redo on disk", async () => fs.readFileSync(file, "utf8") === "alpha\nBETA\ngamma\n", 5_000);
  await until("clean after redo", async () => !(await activeDirty()), 5_000);

  // The user's own save afterwards runs their format-on-save.
  await page.locator(".editor-instance .monaco-editor .view-line", { hasText: "gamma" }).first().click();
  await page.keyboard.press("End");
  await page.keyboard.type(" delta");
  await until("the user's typing", async () => (await editorText(page)) === "alpha\nBETA\ngamma delta\n", 5_000);
  await page.keyboard.press("Control+S");
  await until("the user's save on disk, formatted", async () => fs.readFileSync(file, "utf8") === "ALPHA\nBETA\nGAMMA DELTA\n", 15_000);
  await until("the formatted text in the editor", async () => (await editorText(page)) === "ALPHA\nBETA\nGAMMA DELTA\n", 5_000);
  assert.equal(fs.readFileSync(saves, "utf8"), "notes.txt reason=1\n", "the user's save (and only it) ran the save participants");
  assert.equal(await activeDirty(), false);
});

/** Opens `name` through Quick Open and waits for its tab. */
async function openFile(name) {
  await page.keyboard.press("Control+P");
  await page.locator(".quick-input-widget input").fill(name);
  await until(`${name} first in Quick Open`, async () => (await page.locator(".quick-input-list .monaco-list-row").first().getAttribute("aria-label"))?.startsWith(name), 10_000);
  await page.keyboard.press("Enter");
  await page.locator(".tabs-container .tab.active", { hasText: name }).waitFor({ timeout: 10_000 });
}

/** The Keep / Undo CodeLenses shown in the editor. */
async function lensCount() {
  return page.locator(".contentWidgets .codelens-decoration", { hasText: "Keep" }).count();
}

test("Undo on a hunk's CodeLens puts the disk back without the user's format-on-save; Ctrl+Z brings the hunk back under review", async () => {
  const file = path.join(wb.workspace, "lens.txt");
  const saves = path.join(wb.workspace, "formatter-saves.txt");
  const savesBefore = fs.existsSync(saves) ? fs.readFileSync(saves, "utf8") : "";
  const chat = await waitChatFrame(page);
  await openFile("lens.txt");
  assert.equal(await editorText(page), LENS);
  const box = chat.locator('textarea[aria-label="Message"]');
  await box.click();
  await box.fill("lens edit please");
  await box.press("Enter");
  await until("the answer after the edit", async () => (await frameText(chat)).includes("Edited lens.txt."), 60_000);
  await until("the edit in the editor", async () => (await editorText(page)) === "one\nTWO\nthree\n", 10_000);
  assert.equal(fs.readFileSync(file, "utf8"), "one\nTWO\nthree\n");
  await until("the Keep/Undo CodeLens", async () => (await lensCount()) > 0, 15_000);

  await page.locator(".contentWidgets .codelens-decoration a", { hasText: "Undo" }).first().click();
  await until("the hunk undone in the editor", async () => (await editorText(page)) === LENS, 10_000);
  // The disk holds exactly the text without the agent's line: the formatter (which upper-cases
  // every letter) did not run, and no save participant ran at all.
  await until("the undone text on disk", async () => fs.readFileSync(file, "utf8") === LENS, 10_000);
  assert.equal(fs.existsSync(saves) ? fs.readFileSync(saves, "utf8") : "", savesBefore, "no save participant ran for the review's Undo");
  await until("the CodeLens to go", async () => (await lensCount()) === 0, 10_000);
  assert.equal(await activeDirty(), false, "the editor shows no unsaved changes after the review's Undo");
  await until("nothing of lens.txt left in the Changes view", async () => !wb.stats().changedFiles.some((u) => u.endsWith("/lens.txt")), 5_000);
  await page.screenshot({ path: path.join(shotDir, "agent-save-lens-undo.png") });

  // The editor's undo of the review's Undo: the agent's line is back, as the agent's (its
  // Keep / Undo lenses and its Changes entry), not as the user's typing.
  await page.locator(".editor-instance .monaco-editor .view-line", { hasText: "three" }).first().click();
  await page.keyboard.press("Control+Z");
  await until("the agent's line back", async () => (await editorText(page)) === "one\nTWO\nthree\n", 10_000);
  await until("the Keep/Undo CodeLens back", async () => (await lensCount()) > 0, 10_000);
  await until("lens.txt under review again", async () => wb.stats().changedFiles.filter((u) => u.endsWith("/lens.txt")).length === 1, 5_000);
  await until("the agent's line back on disk", async () => fs.readFileSync(file, "utf8") === "one\nTWO\nthree\n", 5_000);
  // Redo takes it back again: clean, nothing under review, the disk as it was.
  await page.keyboard.press("Control+Shift+Z");
  await until("redone", async () => (await editorText(page)) === LENS, 10_000);
  await until("clean after redo", async () => !(await activeDirty()), 5_000);
  await until("the CodeLens to go again", async () => (await lensCount()) === 0, 10_000);
  assert.equal(fs.readFileSync(file, "utf8"), LENS);
  assert.equal(fs.existsSync(saves) ? fs.readFileSync(saves, "utf8") : "", savesBefore);
});

test("saveUserChanges never: the agent's edit reaches the disk without the user's unsaved typing; the user's save later is no conflict", async () => {
  const file = path.join(wb.workspace, "mine.txt");
  const saves = path.join(wb.workspace, "formatter-saves.txt");
  const savesBefore = fs.existsSync(saves) ? fs.readFileSync(saves, "utf8") : "";
  const chat = await waitChatFrame(page);
  await openFile("mine.txt");
  await page.locator(".editor-instance .monaco-editor .view-line", { hasText: "one" }).first().click();
  await page.keyboard.press("End");
  await page.keyboard.type(" (mine)");
  await until("the user's typing", async () => (await editorText(page)) === "one (mine)\ntwo\nthree\n", 5_000);
  assert.equal(await activeDirty(), true);
  const box = chat.locator('textarea[aria-label="Message"]');
  await box.click();
  await box.fill("mine edit please");
  await box.press("Enter");
  await until("the answer after the edit", async () => (await frameText(chat)).includes("Edited mine.txt."), 60_000);
  await until("the agent's edit in the editor, with the user's typing", async () => (await editorText(page)) === "one (mine)\ntwo\nTHREE\n", 10_000);
  // The disk: the agent's change only, merged onto the disk's text; no save participant ran;
  // the typing stays unsaved in the editor.
  await until("the agent's change on disk", async () => fs.readFileSync(file, "utf8") === "one\ntwo\nTHREE\n", 10_000);
  assert.equal(fs.existsSync(saves) ? fs.readFileSync(saves, "utf8") : "", savesBefore, "no save participant ran");
  assert.equal(await activeDirty(), true, "the user's typing stays unsaved");
  await page.screenshot({ path: path.join(shotDir, "agent-save-never.png") });
  // The user's own save: no "the content of the file is newer" conflict; it is formatted.
  await page.locator(".editor-instance .monaco-editor .view-line", { hasText: "two" }).first().click();
  await page.keyboard.press("Control+S");
  await until("the user's save on disk, formatted", async () => fs.readFileSync(file, "utf8") === "ONE (MINE)\nTWO\nTHREE\n", 15_000);
  await until("clean after the user's save", async () => !(await activeDirty()), 5_000);
  assert.equal(await page.locator(".notifications-toasts .notification-toast", { hasText: /newer|conflict/i }).count(), 0, "no save conflict");
});

test("a file under review deleted on disk leaves the review", async () => {
  const file = path.join(wb.workspace, "lens.txt");
  const chat = await waitChatFrame(page);
  await openFile("lens.txt");
  assert.equal(fs.readFileSync(file, "utf8"), LENS);
  const box = chat.locator('textarea[aria-label="Message"]');
  await box.click();
  await box.fill("lens edit again");
  await box.press("Enter");
  await until("the edit in the editor", async () => (await editorText(page)) === "one\nTWO\nthree\n", 60_000);
  await until("lens.txt under review", async () => wb.stats().changedFiles.some((u) => u.endsWith("/lens.txt")), 10_000);
  // Deleted by another program (as `rm` in the agent's bash would).
  fs.unlinkSync(file);
  await until("lens.txt out of the review", async () => !wb.stats().changedFiles.some((u) => u.endsWith("/lens.txt")), 10_000);
  await until("its CodeLenses gone", async () => (await lensCount()) === 0, 10_000);
});
