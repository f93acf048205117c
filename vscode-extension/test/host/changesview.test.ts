// The Changes view (src/extension/changes.ts) groups the agent's changes by session: two
// sessions in one window, each editing its own file — each session's node lists only its own
// file, never the other session's (issue 30 item 4).
import { test } from "node:test";
import assert from "node:assert/strict";
import * as vscode from "vscode";
import { callOfLabel, ChangeTracker } from "../../src/extension/changes";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DELETE_CHECK_MS } from "../../src/extension/changes";
import { editDocument, fileDeleted, openDocument, Uri } from "./fake-vscode";
import { tempDir } from "./tempdir";

const log = { info() {}, debug() {}, warn() {}, error() {}, trace() {} } as unknown as vscode.LogOutputChannel;

/** `workspace/applyEdit` of the server for `path` by tool call `id`, through the tracker; the
 * label names `session` as the server's does (without it: an older server's label). */
async function agentEdit(c: ChangeTracker, path: string, id: string, text: string, session?: string) {
  const uri = Uri.file(path);
  const params = {
    label: `pi: turn 1 · edit ${path.split("/").pop()} (${id})${session ? ` · session ${session}` : ""}`,
    edit: { changes: { [uri.toString()]: [] } },
  } as unknown as Parameters<ChangeTracker["applyEdit"]>[0];
  return c.applyEdit(params, async () => {
    editDocument(uri, text);
    return { applied: true };
  });
}

test("two sessions, one window: each session's Changes node lists only its own file", async () => {
  openDocument(Uri.file("/w/a.txt"), "a = 1\n");
  openDocument(Uri.file("/w/b.txt"), "b = 1\n");
  const c = new ChangeTracker(log);
  c.noteToolCall("call_1", "session-A");
  assert.deepEqual(await agentEdit(c, "/w/a.txt", "call_1", "a = 2\n"), { applied: true });
  // The second session's model numbers its tool calls the same way.
  c.noteToolCall("call_1", "session-B");
  await agentEdit(c, "/w/b.txt", "call_1", "b = 2\n");
  const roots = c.getChildren();
  assert.deepEqual(roots, [
    { kind: "session", sessionId: "session-A" },
    { kind: "session", sessionId: "session-B" },
  ]);
  assert.deepEqual(c.getChildren(roots[0]), [{ kind: "file", key: "file:/w/a.txt" }]);
  assert.deepEqual(c.getChildren(roots[1]), [{ kind: "file", key: "file:/w/b.txt" }]);
  const [hunkA] = c.getChildren(c.getChildren(roots[0])[0]);
  assert.deepEqual(hunkA, { kind: "hunk", key: "file:/w/a.txt", index: 0, startLine: 0, newText: "a = 2\n", oldText: "a = 1\n" });
  c.dispose();
});

test("two sessions running at once, both on call_1: each edit is filed under the session its label names", async () => {
  openDocument(Uri.file("/w/c.txt"), "c = 1\n");
  openDocument(Uri.file("/w/d.txt"), "d = 1\n");
  const c = new ChangeTracker(log);
  // Both sessions announced their call_1 before either edit came (the last announcement wins
  // the id, so only the label can tell the edits apart).
  c.noteToolCall("call_1", "0195-session-A");
  c.noteToolCall("call_1", "0195-session-B");
  assert.deepEqual(await agentEdit(c, "/w/c.txt", "call_1", "c = 2\n", "0195-session-A"), { applied: true });
  assert.deepEqual(await agentEdit(c, "/w/d.txt", "call_1", "d = 2\n", "0195-session-B"), { applied: true });
  const roots = c.getChildren();
  assert.deepEqual(roots, [
    { kind: "session", sessionId: "0195-session-A" },
    { kind: "session", sessionId: "0195-session-B" },
  ]);
  assert.deepEqual(c.getChildren(roots[0]), [{ kind: "file", key: "file:/w/c.txt" }]);
  assert.deepEqual(c.getChildren(roots[1]), [{ kind: "file", key: "file:/w/d.txt" }]);
  c.dispose();
});

test("callOfLabel reads the tool call and the session of the server's labels", () => {
  assert.deepEqual(callOfLabel("pi: turn 3 · edit notes.txt (call_1) · session 0195a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"), { toolCallId: "call_1", sessionId: "0195a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b" });
  assert.deepEqual(callOfLabel("pi: turn 3 · write a (b).txt (toolu_01) · session s-1"), { toolCallId: "toolu_01", sessionId: "s-1" });
  assert.deepEqual(callOfLabel("pi: turn 3 · edit notes.txt (call_1)"), { toolCallId: "call_1", sessionId: undefined });
  assert.deepEqual(callOfLabel("Pi: rewind notes.txt · session s-1"), {});
  assert.deepEqual(callOfLabel(undefined), {});
});

test("a file under review deleted on disk leaves the Changes view (its session's node too); one replaced at once stays", async () => {
  const dir = tempDir("pi-changes-");
  const gone = join(dir, "gone.txt");
  const replaced = join(dir, "replaced.txt");
  writeFileSync(gone, "g = 1\n");
  writeFileSync(replaced, "r = 1\n");
  openDocument(Uri.file(gone), "g = 1\n");
  openDocument(Uri.file(replaced), "r = 1\n");
  const c = new ChangeTracker(log);
  c.noteToolCall("call_1", "session-A");
  await agentEdit(c, gone, "call_1", "g = 2\n");
  c.noteToolCall("call_2", "session-B");
  await agentEdit(c, replaced, "call_2", "r = 2\n");
  assert.deepEqual(c.changedFiles(), [Uri.file(gone).toString(), Uri.file(replaced).toString()]);
  rmSync(gone);
  fileDeleted(Uri.file(gone));
  // A save that replaces the file reports a delete, and the file is there again.
  fileDeleted(Uri.file(replaced));
  await new Promise((r) => setTimeout(r, DELETE_CHECK_MS + 100));
  assert.deepEqual(c.changedFiles(), [Uri.file(replaced).toString()]);
  assert.deepEqual(c.getChildren(), [{ kind: "session", sessionId: "session-B" }]);
  // A deleted folder takes the files under it.
  rmSync(dir, { recursive: true });
  fileDeleted(Uri.file(dir));
  await new Promise((r) => setTimeout(r, DELETE_CHECK_MS + 100));
  assert.deepEqual(c.changedFiles(), []);
  assert.deepEqual(c.getChildren(), []);
  c.dispose();
});
