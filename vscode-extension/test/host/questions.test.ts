// Server questions (src/extension/requests.ts) and the diff tab opened for a permission's
// proposed edit (src/extension/proposals.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import * as vscode from "vscode";
import { ServerQuestions } from "../../src/extension/requests";
import { ProposalTabs } from "../../src/extension/proposals";
import { reset, recorded, tabs, TabInputText, TabInputTextDiff, Uri } from "./fake-vscode";

const log = { error: () => {}, warn: () => {}, info: () => {} } as unknown as vscode.LogOutputChannel;

/** A cancellation token the test cancels (the server's `$/cancelRequest`). */
function token() {
  const listeners: (() => void)[] = [];
  return {
    token: { isCancellationRequested: false, onCancellationRequested: (f: () => void) => (listeners.push(f), { dispose() {} }) } as unknown as vscode.CancellationToken,
    cancel: () => listeners.forEach((f) => f()),
  };
}

const permission = (toolCallId: string, path: string) => ({
  sessionId: "s1",
  toolCallId,
  tool: "edit",
  arguments: { path },
  reason: "edit outside the auto-edit scope",
  alwaysScopes: ["session"],
  change: { path, diff: "@@ -1 +1 @@\n-a\n+b\n" },
});

/** What ChangeTracker.openDiff does for a question's proposed edit, as VS Code answers it:
 * a diff tab of the file now ↔ the proposal opens, and it is recorded. */
function opener(proposals: ProposalTabs) {
  return async (toolCallId: string, path: string) => {
    const now = Uri.from({ scheme: "pi-diff", path: `/${path}`, query: `${toolCallId}-now` });
    const proposed = Uri.from({ scheme: "pi-diff", path: `/${path}`, query: `${toolCallId}-proposed` });
    tabs.push({ label: `${path} (Pi proposes)`, input: new TabInputTextDiff(now, proposed), isActive: false });
    proposals.opened(toolCallId, proposed as unknown as vscode.Uri);
  };
}

test("the diff tab opened for a permission closes when the question is answered or withdrawn, and no other tab", async () => {
  reset();
  const proposals = new ProposalTabs(log);
  const posted: unknown[] = [];
  const panel = { post: (m: unknown) => posted.push(m), visible: true };
  const q = new ServerQuestions({ panelsOf: () => [panel] }, log, opener(proposals), (id) => proposals.close(id));
  // The user's own editors: a file and a diff of the same file (Git's).
  const own = { label: "a.ts", input: new TabInputText(Uri.file("/w/a.ts")), isActive: true };
  const git = { label: "a.ts (Working Tree)", input: new TabInputTextDiff(Uri.parse("git:/w/a.ts"), Uri.file("/w/a.ts")), isActive: false };
  tabs.push(own, git);

  // Answered in the panel.
  const t1 = token();
  const answer1 = q.ask("agent/requestPermission", permission("call-1", "a.ts"), t1.token);
  await q.notificationAction(1, "diff");
  assert.deepEqual(tabs.map((t) => t.label), ["a.ts", "a.ts (Working Tree)", "a.ts (Pi proposes)"]);
  q.answer(1, { decision: "allow" }, panel);
  assert.deepEqual(await answer1, { decision: "allow" });
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(tabs.map((t) => t.label), ["a.ts", "a.ts (Working Tree)"]);
  assert.deepEqual(recorded.closed, [{ label: "a.ts (Pi proposes)", preserveFocus: true }]);

  // Withdrawn by the server (an abort): rejected, its tab closed.
  const t2 = token();
  const answer2 = q.ask("agent/requestPermission", permission("call-2", "b.ts"), t2.token);
  await q.notificationAction(2, "diff");
  t2.cancel();
  assert.deepEqual(await answer2, { decision: "reject", reason: "cancelled" });
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(tabs.map((t) => t.label), ["a.ts", "a.ts (Working Tree)"]);
  assert.deepEqual(recorded.closed.map((c) => c.label), ["a.ts (Pi proposes)", "b.ts (Pi proposes)"]);

  // The user closed the tab already: nothing else is closed.
  const t3 = token();
  const answer3 = q.ask("agent/requestPermission", permission("call-3", "c.ts"), t3.token);
  await q.notificationAction(3, "diff");
  tabs.pop();
  q.answer(3, { decision: "reject" }, panel);
  assert.deepEqual(await answer3, { decision: "reject" });
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(tabs.map((t) => t.label), ["a.ts", "a.ts (Working Tree)"]);
  assert.equal(recorded.closed.length, 2);
});

test("an open edit question whose file changes says so at once; an allowed call refused anyway is said in words", async () => {
  reset();
  const posted: any[] = [];
  const panel = { post: (m: unknown) => posted.push(m), visible: true };
  const q = new ServerQuestions({ panelsOf: () => [panel] }, log, async () => undefined);
  const t = token();
  const answer = q.ask("agent/requestPermission", permission("call-9", "conf.txt"), t.token);
  const abs = (p: string) => `/w/${p}`;
  // Another file changing says nothing.
  q.documentChanged("/w/other.txt", abs);
  assert.deepEqual(posted.filter((m) => m.type === "serverRequestStale"), []);
  // The question's file changes (twice): one card update and one notification, at once.
  q.documentChanged("/w/conf.txt", abs);
  q.documentChanged("/w/conf.txt", abs);
  const stale = "conf.txt changed since this question: Allow will not apply it (the agent reads it again).";
  assert.deepEqual(posted.filter((m) => m.type === "serverRequestStale"), [{ type: "serverRequestStale", requestId: 1, message: stale }]);
  assert.deepEqual(recorded.messages, [{ kind: "warning", text: `Pi: ${stale}` }]);
  // Allowed; the server refuses the change (the file changed): said in words, with no hash.
  q.answer(1, { decision: "allow" }, panel);
  assert.deepEqual(await answer, { decision: "allow" });
  const refused = "conf.txt changed while the user was deciding (line 2 differs); nothing was changed. What was approved is not what would land.";
  assert.equal(q.toolEnded("call-9", true, refused), `Pi: edit conf.txt was allowed but not done: ${refused}`);
  assert.deepEqual(recorded.messages.at(-1), { kind: "warning", text: `Pi: edit conf.txt was allowed but not done: ${refused}` });
  // Told once; a call that was never asked says nothing.
  assert.equal(q.toolEnded("call-9", true, refused), undefined);
  assert.equal(q.toolEnded("call-other", true, "failed"), undefined);
});

test("a question nobody sees comes as a notification with real buttons; a button answers it, Show opens the session and leaves it open", async () => {
  reset();
  const hidden = { post: (_m: unknown) => {}, visible: false };
  const shown: string[] = [];
  let click: string | undefined = "Allow for Session";
  recorded.clickWarning = () => click;
  const q = new ServerQuestions({ panelsOf: () => [hidden] }, log, async () => undefined, async () => undefined);
  q.onShow = async (sid) => shown.push(sid);
  const ask = { ...permission("call-9", "conf.txt"), rule: { tool: "edit" }, alwaysScopes: ["session", "workspace"] };
  const answer = q.ask("agent/requestPermission", ask, token().token);
  assert.deepEqual(await answer, { decision: "allowAlways", scope: "session" });
  assert.deepEqual(recorded.messages, [
    { kind: "warning", text: "Pi wants to edit conf.txt — edit outside the auto-edit scope", items: ["Allow Once", "Allow for Session", "Allow in Workspace", "Reject…", "Show"] },
  ]);
  // No rule offered (a sandbox question): Allow Once, Reject…, Show.
  recorded.messages.length = 0;
  click = "Show";
  let settled = false;
  const second = q.ask("agent/requestPermission", { ...permission("call-10", "b.txt"), alwaysScopes: [] }, token().token).then((r) => ((settled = true), r));
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(recorded.messages[0]!.items, ["Allow Once", "Reject…", "Show"]);
  assert.deepEqual(shown, ["s1"]);
  assert.equal(settled, false, "Show answers nothing: the question stays open in the panel");
  q.answer(2, { decision: "allow" });
  assert.deepEqual(await second, { decision: "allow" });
  // An extension question: its own buttons.
  recorded.messages.length = 0;
  click = "No";
  assert.deepEqual(await q.ask("agent/ui/request", { sessionId: "s1", extension: "deploy", method: "confirm", title: "Deploy?", message: "to production" }, token().token), { confirmed: false });
  assert.deepEqual(recorded.messages, [{ kind: "warning", text: "deploy: Deploy? — to production", items: ["Yes", "No", "Show"] }]);
});
