// The review's Undo of an agent hunk in a document that also holds the user's unsaved changes
// (src/extension/unsaved.ts `undoneOnDisk`, wired in changes.ts): the disk gets the disk's text
// minus the agent's hunk — so the agent's next `bash` sees what the session sees — and never the
// user's unsaved lines.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as vscode from "vscode";
import { FileChanges } from "../../src/extension/hunks";
import { mergeOntoDisk, UnsavedChanges } from "../../src/extension/unsaved";
import { Uri, willSaveDocument } from "./fake-vscode";
import { tempDir } from "./tempdir";

const saved = "one\ntwo\nthree\nfour\nfive\n";

/** The document after the user typed a line (unsaved) and the agent changed `four`; the disk
 * as the server's `saveUserChanges` merge left it (agent's change only). */
function scene() {
  const typed = "one\nmine, unsaved\ntwo\nthree\nfour\nfive\n";
  const withAgent = "one\nmine, unsaved\ntwo\nthree\nFOUR (agent)\nfive\n";
  const diskAfterMerge = "one\ntwo\nthree\nFOUR (agent)\nfive\n";
  const f = FileChanges.fromAgentEdit(typed, withAgent, "call_1");
  assert.deepEqual(f.hunks().map((h) => [h.oldText, h.newText]), [["four\n", "FOUR (agent)\n"]]);
  const r = f.undo(0)!;
  return { withAgent, diskAfterMerge, r };
}

test("the review's Undo with unsaved user changes: the disk loses the agent's hunk and gets none of the user's lines", () => {
  const { withAgent, diskAfterMerge, r } = scene();
  const dir = tempDir("pi-undodisk-");
  const file = join(dir, "notes.txt");
  writeFileSync(file, diskAfterMerge);
  utimesSync(file, new Date(1_700_000_000_000), new Date(1_700_000_000_000));
  const u = new UnsavedChanges();
  const uri = Uri.file(file) as unknown as vscode.Uri;
  assert.equal(u.undoneOnDisk(uri, withAgent, [r]), "written");
  assert.equal(readFileSync(file, "utf8"), saved);
  // The file's time VS Code read is kept: the user's own save later is no conflict.
  assert.deepEqual(u.known.get(uri.toString()), { sec: 1_700_000_000, nsec: 0 });
  willSaveDocument(Uri.file(file));
  assert.equal(statSync(file).mtimeMs, 1_700_000_000_000);
  // The same undo again: the agent's lines are no longer on disk, nothing is written twice.
  assert.equal(u.undoneOnDisk(uri, withAgent, [r]), "overlap");
  assert.equal(readFileSync(file, "utf8"), saved);
  u.dispose();
});

test("an agent change kept in the buffer only (not on disk) or next to the user's lines: the disk is left alone", () => {
  const { withAgent, r } = scene();
  // The agent's change never reached the disk.
  assert.equal(mergeOntoDisk(withAgent, saved, [r]), undefined);
  // The agent changed the line the user had changed (overlap kept in the buffer only).
  const buffer = "one\ntwo (mine, agent)\nthree\n";
  const disk = "one\ntwo\nthree\n";
  const start = buffer.indexOf("two");
  assert.equal(mergeOntoDisk(buffer, disk, [{ start, end: start + "two (mine, agent)\n".length, text: "two (mine)\n" }]), undefined);
  const dir = tempDir("pi-undodisk-");
  const file = join(dir, "kept.txt");
  writeFileSync(file, saved);
  const u = new UnsavedChanges();
  assert.equal(u.undoneOnDisk(Uri.file(file) as unknown as vscode.Uri, withAgent, [r]), "overlap");
  assert.equal(readFileSync(file, "utf8"), saved);
  assert.equal(u.known.size, 0);
  u.dispose();
});

test("several hunks undone at once (Undo File) land on the disk's text at their places", () => {
  const disk = "a\nB\nc\nd\nE\n";
  const buffer = "a\nB\nc\nmine\nd\nE\n";
  const b = buffer.indexOf("B");
  const e = buffer.indexOf("E");
  assert.equal(
    mergeOntoDisk(buffer, disk, [
      { start: e, end: e + 2, text: "e\n" },
      { start: b, end: b + 2, text: "b\n" },
    ]),
    "a\nb\nc\nd\ne\n",
  );
  // No trailing newline; an unchanged disk takes the edit as is.
  assert.equal(mergeOntoDisk("x\ny", "x\ny", [{ start: 2, end: 3, text: "Y" }]), "x\nY");
});

test("through the review (ChangeTracker.undoHunk): a dirty document's Undo writes only the undo to disk and is not saved", async () => {
  const { ChangeTracker } = await import("../../src/extension/changes");
  const { editDocument, openDocument } = await import("./fake-vscode");
  const dir = tempDir("pi-undodisk-");
  const file = join(dir, "notes.txt");
  const uri = Uri.file(file);
  const typed = "one\nmine, unsaved\ntwo\nthree\nfour\nfive\n";
  const withAgent = "one\nmine, unsaved\ntwo\nthree\nFOUR (agent)\nfive\n";
  // The disk as the server's saveUserChanges merge left it; the document with the user's line.
  writeFileSync(file, "one\ntwo\nthree\nFOUR (agent)\nfive\n");
  const doc = openDocument(uri, saved);
  editDocument(uri, typed);
  const log = { info() {}, debug() {}, warn() {}, error() {}, trace() {} } as unknown as vscode.LogOutputChannel;
  const c = new ChangeTracker(log);
  c.unsaved = new UnsavedChanges();
  c.noteToolCall("call_1", "session-A");
  const params = { label: "pi: turn 1 · edit notes.txt (call_1)", edit: { changes: { [uri.toString()]: [] } } } as unknown as Parameters<InstanceType<typeof ChangeTracker>["applyEdit"]>[0];
  await c.applyEdit(params, async () => {
    editDocument(uri, withAgent);
    return { applied: true };
  });
  assert.equal(await c.undoHunk(uri as unknown as vscode.Uri, 0), true);
  assert.equal(doc.getText(), typed, "the document: the agent's line taken back, the user's line kept");
  assert.equal(doc.isDirty, true, "the user's changes stay unsaved");
  assert.equal(doc.saves, 0, "never saved");
  assert.equal(readFileSync(file, "utf8"), saved, "the disk: the agent's line taken back, none of the user's");
  assert.equal(c.unsaved.known.has(uri.toString()), true, "the user's own save later is no conflict");
  c.unsaved.dispose();
  c.dispose();
});

/** A clean document of `file` under review with one agent hunk (`four` → `FOUR (agent)`), the
 * disk holding the document's text as the agent's disk write left it. */
async function cleanScene(name: string) {
  const { ChangeTracker } = await import("../../src/extension/changes");
  const { openDocument } = await import("./fake-vscode");
  const dir = tempDir("pi-undodisk-");
  const file = join(dir, name);
  const uri = Uri.file(file);
  const withAgent = "one\ntwo\nthree\nFOUR (agent)\nfive\n";
  writeFileSync(file, withAgent);
  const doc = openDocument(uri, saved);
  const log = { info() {}, debug() {}, warn() {}, error() {}, trace() {} } as unknown as vscode.LogOutputChannel;
  const c = new ChangeTracker(log);
  c.unsaved = new UnsavedChanges();
  c.noteToolCall("call_1", "session-A");
  const params = { label: "pi: turn 1 · edit notes.txt (call_1) · session session-A", edit: { changes: { [uri.toString()]: [] } } } as unknown as Parameters<InstanceType<typeof ChangeTracker>["applyEdit"]>[0];
  await c.applyEdit(params, async () => {
    // The agent's edit as the disk route lands it: the clean document reloaded.
    doc.text = withAgent;
    doc.version++;
    return { applied: true };
  });
  assert.deepEqual(c.changedFiles(), [uri.toString()]);
  return { c, doc, uri, file, withAgent };
}

test("the review's Undo in a clean document goes through the disk: never saved (no save participant), clean, and Ctrl+Z brings the hunk back under review", async () => {
  const { fsWatch, undoDocument, TextDocumentChangeReason } = await import("./fake-vscode");
  const { c, doc, uri, file, withAgent } = await cleanScene("clean.txt");
  const writes = fsWatch.writes;
  assert.equal(await c.undoHunk(uri as unknown as vscode.Uri, 0), true);
  assert.equal(doc.getText(), saved, "the document: the agent's line taken back");
  assert.equal(readFileSync(file, "utf8"), saved, "the disk agrees with the document");
  assert.equal(doc.saves, 0, "not saved through the editor: no save participant ran");
  assert.equal(doc.isDirty, false, "the document is clean");
  assert.equal(fsWatch.writes - writes, 1);
  // The reload's whole-text change event was taken as the review's Undo, not the user's typing:
  // nothing is left under review…
  assert.deepEqual(c.changedFiles(), []);
  // …and the editor's undo of it brings the agent's line back as the agent's, under review.
  undoDocument(uri, withAgent, TextDocumentChangeReason.Undo);
  assert.deepEqual(c.changedFiles(), [uri.toString()]);
  assert.equal(readFileSync(file, "utf8"), withAgent, "the agent's line back on disk too");
  assert.deepEqual(c.getChildren({ kind: "file", key: uri.toString() }).map((n) => (n.kind === "hunk" ? [n.oldText, n.newText] : [])), [["four\n", "FOUR (agent)\n"]]);
  c.unsaved!.dispose();
  c.dispose();
});

test("the review's Undo in a clean document whose file differs on disk, or that no reload reaches: done in the editor and saved as before", async () => {
  const { fsWatch } = await import("./fake-vscode");
  {
    const { c, doc, uri, file } = await cleanScene("changed-on-disk.txt");
    writeFileSync(file, "changed by someone else\n");
    const writes = fsWatch.writes;
    assert.equal(await c.undoHunk(uri as unknown as vscode.Uri, 0), true);
    assert.equal(fsWatch.writes - writes, 0, "the disk route is not taken over a file the editor has not seen");
    assert.equal(doc.getText(), saved);
    assert.equal(doc.saves, 1);
    await new Promise((r) => setTimeout(r, 150)); // the debounced redraw drops a settled file
    assert.deepEqual(c.changedFiles(), []);
    c.unsaved!.dispose();
    c.dispose();
  }
  fsWatch.reload = false;
  try {
    const { c, doc, uri, file } = await cleanScene("unwatched.txt");
    assert.equal(await c.undoHunk(uri as unknown as vscode.Uri, 0), true);
    assert.equal(doc.getText(), saved);
    assert.equal(readFileSync(file, "utf8"), saved);
    assert.equal(doc.saves, 1, "no reload within the wait: the editor's edit, saved");
    await new Promise((r) => setTimeout(r, 150));
    assert.deepEqual(c.changedFiles(), []);
    c.unsaved!.dispose();
    c.dispose();
  } finally {
    fsWatch.reload = true;
  }
});

test("the editor's Undo / Redo of an agent edit carries it to disk, never the user's unsaved lines", async () => {
  const { ChangeTracker } = await import("../../src/extension/changes");
  const { editDocument, openDocument, undoDocument, TextDocumentChangeReason } = await import("./fake-vscode");
  const { withAgent, diskAfterMerge } = scene();
  const typed = "one\nmine, unsaved\ntwo\nthree\nfour\nfive\n";
  const dir = tempDir("pi-undodisk-");
  const file = join(dir, "undo-redo.txt");
  const uri = Uri.file(file);
  writeFileSync(file, diskAfterMerge);
  const doc = openDocument(uri, saved);
  editDocument(uri, typed);
  const log = { info() {}, debug() {}, warn() {}, error() {}, trace() {} } as unknown as vscode.LogOutputChannel;
  const c = new ChangeTracker(log);
  c.unsaved = new UnsavedChanges();
  const params = { label: "pi: turn 1 · edit undo-redo.txt (call_1) · session session-A", edit: { changes: { [uri.toString()]: [] } } } as unknown as Parameters<InstanceType<typeof ChangeTracker>["applyEdit"]>[0];
  await c.applyEdit(params, async () => {
    editDocument(uri, withAgent);
    return { applied: true };
  });
  // Ctrl+Z: the agent's line leaves the buffer and the disk; the user's line stays unsaved.
  undoDocument(uri, typed, TextDocumentChangeReason.Undo);
  assert.equal(doc.getText(), typed);
  assert.equal(readFileSync(file, "utf8"), saved);
  await new Promise((r) => setTimeout(r, 150));
  assert.deepEqual(c.changedFiles(), []);
  // Ctrl+Shift+Z: back in both, under review again.
  undoDocument(uri, withAgent, TextDocumentChangeReason.Redo);
  assert.equal(readFileSync(file, "utf8"), diskAfterMerge);
  assert.deepEqual(c.changedFiles(), [uri.toString()]);
  assert.equal(doc.saves, 0, "never saved");
  c.unsaved.dispose();
  c.dispose();
});
