import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, existsSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import fc from "fast-check";
import {
  createStore,
  applyNotification as applyServerNotification,
  applyHistoryPage,
  applyAbortReport,
  markStopping,
  promptToRestore,
  snapshot,
  entriesFromMessages,
  questionsAnswered,
  dismissAttention,
  setVisible,
  readableError,
  applyStats,
  type Store,
  type AssistantItem,
  type ToolItem,
} from "../../src/webview/store";
import type { ServerNotification } from "../../src/shared/messages";

const here = dirname(fileURLToPath(import.meta.url));
const fixtures = join(here, "../../test/fixtures");

type N = { method: string; params: any };

/** The recorded (test/fixtures) and hand-made notifications, some deliberately off the wire
 * types (an event type the reducer does not know must be ignored), given to the reducer as
 * the relay hands them over. */
function applyNotification(s: Store, n: unknown): void {
  applyServerNotification(s, n as ServerNotification);
}

function fixture(name: string): { notifications: N[]; responses: Map<string, any> } {
  const path = join(fixtures, `${name}.jsonl`);
  if (!existsSync(path)) throw new Error(`missing recorded fixture ${path} (node test/fixtures/record.mjs <pi-lsp>)`);
  const notifications: N[] = [];
  const responses = new Map<string, any>();
  for (const line of readFileSync(path, "utf8").split("\n").filter(Boolean)) {
    const v = JSON.parse(line);
    if (v.response) responses.set(v.response, v.result);
    else notifications.push(v);
  }
  return { notifications, responses };
}

function run(ns: N[], s: Store = createStore()): Store {
  for (const n of ns) applyNotification(s, n);
  return s;
}

const isDelta = (n: N) => n.method === "agent/event" && n.params.event.type === "message_update" && /_delta$/.test(n.params.event.assistantMessageEvent?.type ?? "");

/** Re-chunks the stream's fragments: consecutive `*_delta` events of one block are joined and
 * split again at the given cut ratios (the server's chunking is arbitrary; the model must not
 * depend on it). */
function rechunk(ns: N[], cuts: number[]): N[] {
  const out: N[] = [];
  let i = 0;
  let c = 0;
  while (i < ns.length) {
    const n = ns[i]!;
    if (!isDelta(n)) {
      out.push(n);
      i++;
      continue;
    }
    const ev = n.params.event.assistantMessageEvent;
    let text = "";
    let j = i;
    while (j < ns.length && isDelta(ns[j]!) && ns[j]!.params.event.assistantMessageEvent.type === ev.type && ns[j]!.params.event.assistantMessageEvent.contentIndex === ev.contentIndex) {
      text += ns[j]!.params.event.assistantMessageEvent.delta;
      j++;
    }
    const points = new Set<number>();
    for (let k = 0; k < 1 + (text.length >> 2); k++) {
      const r = cuts[c++ % Math.max(1, cuts.length)] ?? 0.5;
      points.add(Math.floor(r * text.length));
    }
    const sorted = [0, ...[...points].filter((p) => p > 0 && p < text.length).sort((a, b) => a - b), text.length];
    for (let k = 0; k + 1 < sorted.length; k++) {
      out.push({ method: n.method, params: { ...n.params, event: { ...n.params.event, assistantMessageEvent: { ...ev, delta: text.slice(sorted[k], sorted[k + 1]) } } } });
    }
    i = j;
  }
  return out;
}

/** Drops every event that carries a whole block / message (`*_end`, `message_end`, `done`), so
 * only the fragments build the text: the re-chunking property must hold for them alone too. */
function fragmentsOnly(ns: N[]): N[] {
  return ns.filter((n) => {
    const e = n.params?.event;
    if (!e) return true;
    if (e.type === "message_end" && e.message?.role === "assistant") return false;
    const t = e.assistantMessageEvent?.type;
    return !(t === "text_end" || t === "thinking_end" || t === "done" || t === "toolcall_end");
  });
}

const cutsArb = fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 1, maxLength: 30 });

for (const name of ["rich-run", "demo-run"]) {
  test(`${name}: any re-chunking of the recorded deltas gives the same model`, () => {
    const { notifications } = fixture(name);
    const reference = snapshot(run(notifications));
    const refFragments = snapshot(run(fragmentsOnly(notifications)));
    fc.assert(
      fc.property(cutsArb, (cuts) => {
        assert.deepEqual(snapshot(run(rechunk(notifications, cuts))), reference);
        assert.deepEqual(snapshot(run(rechunk(fragmentsOnly(notifications), cuts))), refFragments);
      }),
      { numRuns: 200 },
    );
  });

  test(`${name}: every state-carrying notification applied twice changes nothing`, () => {
    const { notifications } = fixture(name);
    const once = snapshot(run(notifications));
    const twice = run(notifications.flatMap((n) => (isDelta(n) ? [n] : [n, n])));
    assert.deepEqual(snapshot(twice), once);
  });

  test(`${name}: the history page after the run gives the same transcript as the live events`, () => {
    const { notifications, responses } = fixture(name);
    const live = run(notifications);
    // Paged history when the recording server had it, else its agent/messages answer.
    const page = responses.get("agent/session/history") ?? { entries: entriesFromMessages(responses.get("agent/messages")), hasMore: false };
    assert.ok(page.entries.length > 0, "the fixture holds the session's history");
    const loaded = createStore(live.sessionId);
    applyHistoryPage(loaded, page, false);
    const view = (s: Store) =>
      s.order.map((id) => {
        const it = s.items.get(id)!;
        if (it.kind === "assistant") return { id, kind: it.kind, blocks: it.blocks.filter(Boolean).map((b) => ({ type: b!.type, text: b!.text })), toolIds: it.toolIds, stopReason: it.stopReason };
        if (it.kind === "tool") return { id, kind: it.kind, state: it.state, output: it.output, args: it.args };
        if (it.kind === "user") return { id, kind: it.kind, text: it.text };
        return { id, kind: it.kind };
      });
    assert.deepEqual(view(loaded), view(live));
    // Loading the same page again (a reload racing the answer) changes nothing.
    const before = snapshot(loaded);
    applyHistoryPage(loaded, page, false);
    assert.deepEqual(snapshot(loaded), before);
    // Live events merging into a loaded history land on the same items.
    const merged = run(notifications, loaded);
    assert.deepEqual(view(merged), view(live));
  });
}

test("rich-run: the recorded run gives the expected transcript", () => {
  const { notifications } = fixture("rich-run");
  const s = run(notifications);
  const kinds = s.order.map((id) => s.items.get(id)!.kind);
  assert.deepEqual(kinds, ["user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant"]);
  const first = s.items.get(s.order[1]!) as AssistantItem;
  assert.equal(first.blocks[0]!.type, "thinking");
  assert.equal(first.blocks[0]!.text, "The user wants the greeting configurable. I should read the file first, then edit it.");
  assert.match(first.blocks[1]!.text, /^Here is the plan, in three steps:\n\n1\. Read `src\/greet\.py`\./);
  const tools = s.order.map((id) => s.items.get(id)!).filter((i): i is ToolItem => i.kind === "tool");
  assert.deepEqual(
    tools.map((t) => [t.toolCallId, t.toolName, t.state]),
    [
      ["toolu_read1", "read", "done"],
      ["toolu_edit1", "write", "done"],
      ["toolu_bash1", "bash", "done"],
    ],
  );
  assert.equal(tools[2]!.output.trim(), "Hello, world!\ndone");
  assert.equal(s.running, false);
  assert.ok(s.usage && s.usage.contextWindow === 200000 && s.usage.sessionCost > 0);
});

test("abort-run: the stopped run leaves no running card, and the report is one card", () => {
  const { notifications, responses } = fixture("abort-run");
  const s = createStore();
  // Up to the tool start: the run is going.
  const at = notifications.findIndex((n) => n.params?.event?.type === "tool_execution_start");
  run(notifications.slice(0, at + 1), s);
  assert.equal(s.running, true);
  markStopping(s);
  assert.equal(s.stopping, true);
  run(notifications.slice(at + 1), s);
  const report = responses.get("agent/abort");
  assert.equal(report.aborted, true);
  assert.deepEqual(report.stoppedProcesses.map((p: any) => p.command), ["echo started; sleep 30; echo never"]);
  applyAbortReport(s, report);
  applyAbortReport(s, report);
  const items = s.order.map((id) => s.items.get(id)!);
  assert.equal(items.filter((i) => i.kind === "abort").length, 1);
  assert.equal(s.running, false);
  assert.equal(s.stopping, false);
  assert.ok(items.every((i) => i.kind !== "tool" || (i.state !== "running" && i.state !== "pending")));
  // Text streamed before the stop: the prompt is not put back.
  assert.equal(promptToRestore(s), null);
});

test("a prompt aborted before anything streamed is given back", () => {
  const s = createStore("s1");
  applyNotification(s, { method: "agent/event", params: { sessionId: "s1", runId: "r1", event: { type: "agent_start" } } });
  applyNotification(s, { method: "agent/event", params: { sessionId: "s1", runId: "r1", event: { type: "message_start", message: { role: "user", content: [{ type: "text", text: "fix the bug" }], timestamp: 5 } } } });
  assert.equal(promptToRestore(s), "fix the bug");
});

test("an extension's hidden message (plan mode's context) is not shown; a shown one is, as the user's line", () => {
  const s = createStore("s1");
  const ev = (event: unknown) => applyNotification(s, { method: "agent/event", params: { sessionId: "s1", runId: "r", event } });
  ev({ type: "agent_start" });
  ev({ type: "message_start", message: { role: "user", content: [{ type: "text", text: "plan it" }], timestamp: 1 } });
  const hidden = { role: "custom", customType: "plan-mode-context", content: "[PLAN MODE ACTIVE]", display: false, timestamp: 1 };
  ev({ type: "message_start", message: hidden });
  ev({ type: "message_end", message: hidden });
  ev({ type: "message_start", message: { role: "custom", customType: "note", content: "a note", display: true, timestamp: 2 } });
  const items = s.order.map((id) => s.items.get(id)!);
  assert.deepEqual(items.map((i) => (i.kind === "user" ? [i.kind, i.text] : [i.kind])), [["user", "plan it"], ["user", "a note"]]);
});

test("notifications of another session are ignored", () => {
  const s = createStore("s1");
  applyNotification(s, { method: "agent/event", params: { sessionId: "s2", runId: "r", event: { type: "agent_start" } } });
  assert.equal(s.running, false);
  assert.equal(s.order.length, 0);
});

test("unknown events become one neutral line, never a crash", () => {
  const s = createStore("s1");
  applyNotification(s, { method: "agent/event", params: { sessionId: "s1", runId: "r", event: { type: "brand_new_event", x: 1 } } });
  const items = s.order.map((id) => s.items.get(id)!);
  assert.deepEqual(items.map((i) => (i.kind === "notice" ? [i.kind, i.level, i.text] : [i.kind])), [["notice", "info", "Event brand_new_event"]]);
});

test("queue updates track each message's state", () => {
  const s = createStore("s1");
  const q = (state: string) => ({ method: "agent/queueUpdate", params: { sessionId: "s1", queueId: "q1", delivery: "steer", state, text: "also tests", steering: [], followUp: [] } });
  applyNotification(s, q("queued"));
  applyNotification(s, q("delivered"));
  applyNotification(s, q("delivered"));
  assert.deepEqual([...s.queue.values()], [{ queueId: "q1", delivery: "steer", state: "delivered", text: "also tests" }]);
});

test("older history pages are prepended once, in order", () => {
  const entry = (i: number) => ({ type: "message", id: `e${i}`, parentId: i ? `e${i - 1}` : null, message: { role: i % 2 ? "assistant" : "user", content: i % 2 ? [{ type: "text", text: `answer ${i}` }] : `question ${i}`, timestamp: 1000 + i, stopReason: "stop" } });
  const s = createStore("s1");
  applyHistoryPage(s, { entries: [4, 5, 6, 7].map(entry), hasMore: true }, false);
  assert.equal(s.oldestEntryId, "e4");
  applyHistoryPage(s, { entries: [0, 1, 2, 3].map(entry), hasMore: false }, true);
  applyHistoryPage(s, { entries: [0, 1, 2, 3].map(entry), hasMore: false }, true);
  assert.deepEqual(s.order, [0, 1, 2, 3, 4, 5, 6, 7].map((i) => `${i % 2 ? "assistant" : "user"}:${1000 + i}`));
  assert.equal(s.hasMore, false);
  assert.equal(s.oldestEntryId, "e0");
});

test("a failed answer that is retried gives way to its retry notice (one per run, updated); the last failure stays", () => {
  const s = createStore("s1");
  const ev = (event: unknown) => applyNotification(s, { method: "agent/event", params: { sessionId: "s1", runId: "r", event } });
  const failed = (ts: number) => ({ role: "assistant", content: [], api: "x", provider: "p", model: "m", stopReason: "error", errorMessage: "connection refused", timestamp: ts });
  ev({ type: "agent_start" });
  ev({ type: "message_start", message: { role: "user", content: "hi", timestamp: 1 } });
  ev({ type: "message_end", message: { role: "user", content: "hi", timestamp: 1 } });
  ev({ type: "message_start", message: failed(2) });
  ev({ type: "message_end", message: failed(2) });
  ev({ type: "auto_retry_start", attempt: 1, maxAttempts: 2, delayMs: 2000, errorMessage: "connection refused" });
  ev({ type: "message_start", message: failed(3) });
  ev({ type: "message_end", message: failed(3) });
  ev({ type: "auto_retry_end", success: false, attempt: 1, finalError: "connection refused" });
  ev({ type: "agent_end", messages: [] });
  const items = s.order.map((id) => s.items.get(id)!);
  assert.deepEqual(
    items.map((i) => (i.kind === "assistant" ? [i.kind, i.errorMessage, !!i.retried] : i.kind === "notice" ? [i.kind, i.text] : [i.kind])),
    [
      ["user"],
      ["assistant", "connection refused", true],
      ["notice", "Gave up after 1 retry."],
      ["assistant", "connection refused", false],
    ],
  );
});

test("agent/attention: what needs the user is shown until handled; a run's end only when the panel was hidden", () => {
  const s = createStore("s1");
  const ev = (event: unknown) => applyNotification(s, { method: "agent/event", params: { sessionId: "s1", runId: "r1", event } });
  const att = (reason: string, message: string, runId?: string) => applyNotification(s, { method: "agent/attention", params: { sessionId: "s1", reason, message, ...(runId ? { runId } : {}) } });
  const attention = () => s.attention;
  const rows = () => s.order.map((id) => s.items.get(id)!).filter((i) => i.kind === "notice").map((i) => [i.id, (i as any).level, (i as any).text]);
  ev({ type: "agent_start" });
  att("permission", "pi wants to edit a.txt (+1 −1)");
  assert.deepEqual(attention(), { reason: "permission", message: "pi wants to edit a.txt (+1 −1)" });
  dismissAttention(s);
  assert.equal(attention()?.reason, "permission", "a question's banner goes with its question, not by a dismiss");
  questionsAnswered(s);
  assert.equal(attention(), null);
  att("question", "tmux: Pick a session");
  ev({ type: "agent_end", messages: [] });
  assert.equal(attention(), null, "no question is open after the run");
  // The run ended in view: seen as it happened, nothing to show.
  att("finished", "Done.", "r1");
  assert.equal(attention(), null);
  assert.deepEqual(rows(), []);
  // Hidden meanwhile: the banner and a marker row; typing (a dismiss of `finished` only) clears it.
  setVisible(s, false);
  ev({ type: "agent_start" });
  ev({ type: "agent_end", messages: [] });
  att("finished", "Done pausing.", "r2");
  setVisible(s, true);
  assert.deepEqual(attention(), { reason: "finished", message: "Done pausing.", runId: "r2" });
  assert.deepEqual(rows(), [["attention:r2:finished", "info", "Finished while the panel was hidden."]]);
  const v = s.version;
  att("finished", "Done pausing.", "r2"); // the same notification again: one row
  assert.equal(rows().length, 1);
  assert.ok(s.version > v);
  dismissAttention(s, true);
  assert.equal(attention(), null);
  // Failed: shown in view too, with a row unless the answer's row shows the error already.
  att("failed", "session no longer saved: disk full", "r3");
  assert.deepEqual(attention(), { reason: "failed", message: "session no longer saved: disk full", runId: "r3" });
  assert.deepEqual(rows().at(-1), ["attention:r3:failed", "error", "Failed: session no longer saved: disk full"]);
  dismissAttention(s, true);
  assert.equal(attention()?.reason, "failed", "typing does not dismiss a failure");
  ev({ type: "agent_start" });
  assert.equal(attention(), null, "the next run clears it");
  ev({ type: "message_start", message: { role: "user", content: "hi", timestamp: 10 } });
  ev({ type: "message_end", message: { role: "user", content: "hi", timestamp: 10 } });
  const failed = { role: "assistant", content: [], stopReason: "error", errorMessage: "HTTP 500: overloaded", timestamp: 11 };
  ev({ type: "message_start", message: failed });
  ev({ type: "message_end", message: failed });
  ev({ type: "agent_end", messages: [] });
  att("failed", "HTTP 500: overloaded", "r4");
  assert.equal(attention()?.reason, "failed");
  assert.equal(rows().length, 2, "the error is on the answer's row already: no second row");
  // A reason this panel does not know: shown until dismissed.
  att("later-reason", "something");
  assert.deepEqual(attention(), { reason: "later-reason", message: "something" });
  dismissAttention(s);
  assert.equal(attention(), null);
});

test("three failed attempts of one run: one retry notice that follows the attempts, one error row, errors in the user's words", () => {
  const s = createStore("s1");
  const ev = (event: unknown) => applyNotification(s, { method: "agent/event", params: { sessionId: "s1", runId: "r", event } });
  const body = 'HTTP 500: {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}';
  const failed = (ts: number) => ({ role: "assistant", content: [], api: "x", provider: "p", model: "m", stopReason: "error", errorMessage: body, timestamp: ts });
  const notices = () => s.order.map((id) => s.items.get(id)!).filter((i) => i.kind === "notice").map((i: any) => [i.level, i.text]);
  ev({ type: "agent_start" });
  ev({ type: "message_start", message: { role: "user", content: "hi", timestamp: 1 } });
  ev({ type: "message_end", message: { role: "user", content: "hi", timestamp: 1 } });
  for (let a = 1; a <= 3; a++) {
    ev({ type: "message_start", message: failed(1 + a) });
    ev({ type: "message_end", message: failed(1 + a) });
    ev({ type: "auto_retry_start", attempt: a, maxAttempts: 3, delayMs: 1000 * 2 ** a, errorMessage: body });
    assert.deepEqual(notices(), [["warning", `Retrying (attempt ${a} of 3) in ${2 ** a} s: Internal server error (HTTP 500)`]]);
  }
  ev({ type: "message_start", message: failed(5) });
  ev({ type: "message_end", message: failed(5) });
  ev({ type: "auto_retry_end", success: false, attempt: 3, finalError: body });
  ev({ type: "agent_end", messages: [] });
  assert.deepEqual(notices(), [["warning", "Gave up after 3 retries."]]);
  const shown = s.order.map((id) => s.items.get(id)!).filter((i) => i.kind === "assistant" && !i.retried);
  assert.deepEqual(shown.map((i: any) => i.errorMessage), [body]);
});

test("provider errors read as their message and status; other text is left alone", () => {
  assert.equal(readableError('HTTP 500: {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}'), "Internal server error (HTTP 500)");
  assert.equal(readableError('HTTP 429: {"error": {"message": "Rate limit reached for gpt-4.1", "type": "requests"}}'), "Rate limit reached for gpt-4.1 (HTTP 429)");
  assert.equal(readableError('HTTP 404: {"message": "model not found"}'), "model not found (HTTP 404)");
  assert.equal(readableError('HTTP 400: {"error": "bad request"}'), "bad request (HTTP 400)");
  assert.equal(readableError("HTTP 502: <html>Bad gateway</html>"), "HTTP 502: <html>Bad gateway</html>");
  // Pi 1.6's wording per wire.
  assert.equal(readableError('400: {"message": "bad tool schema", "type": "invalid_request_error"}'), "bad tool schema (HTTP 400)");
  assert.equal(readableError('529 {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'), "Overloaded (HTTP 529)");
  assert.equal(readableError('OpenAI API error (429): {"error": {"message": "Slow down"}}'), "Slow down (HTTP 429)");
  assert.equal(readableError("500 status code (no body)"), "500 status code (no body)");
  assert.equal(readableError('200: {"message": "not an error"}'), '200: {"message": "not an error"}');
  assert.equal(readableError('HTTP 500: {"detail": 1}'), 'HTTP 500: {"detail": 1}');
  assert.equal(readableError("connection refused"), "connection refused");
});

test("the failed attempts of a retried answer are hidden when the session is opened again (history), the last one is shown", () => {
  const s = createStore("s1");
  const err = (ts: number) => ({ role: "assistant", content: [], api: "x", provider: "p", model: "m", stopReason: "error", errorMessage: "HTTP 500: {}", timestamp: ts });
  const entries = entriesFromMessages({
    messages: [{ role: "user", content: "hi", timestamp: 1 }, err(2), err(3), err(4), { role: "user", content: "again", timestamp: 5 }, err(6), { role: "assistant", content: [{ type: "text", text: "ok" }], api: "x", provider: "p", model: "m", stopReason: "stop", timestamp: 7 }],
    entryIds: ["e1", "e2", "e3", "e4", "e5", "e6", "e7"],
  });
  applyHistoryPage(s, { entries, hasMore: false }, false);
  const rows = s.order.map((id) => s.items.get(id)!).map((i: any) => [i.kind, i.entryId, !!i.retried]);
  assert.deepEqual(rows, [
    ["user", "e1", false],
    ["assistant", "e2", true],
    ["assistant", "e3", true],
    ["assistant", "e4", false],
    ["user", "e5", false],
    ["assistant", "e6", true],
    ["assistant", "e7", false],
  ]);
});

test("a response without usage (aborted, failed) leaves the context meter where the last answer put it", () => {
  const s = createStore("s1");
  const usage = (contextTokens: number, totalTokens: number, cost: number) =>
    applyNotification(s, { method: "agent/usage", params: { sessionId: "s1", runId: "r", contextTokens, contextWindow: 200000, turn: { totalTokens, cost: 0 }, session: { totalTokens: 9000, cost } } });
  usage(2400, 2500, 0.01);
  assert.deepEqual(s.usage, { contextTokens: 2400, contextWindow: 200000, sessionCost: 0.01, turnCost: 0, sessionTokens: 9000 });
  usage(0, 0, 0.01);
  assert.deepEqual(s.usage, { contextTokens: 2400, contextWindow: 200000, sessionCost: 0.01, turnCost: 0, sessionTokens: 9000 });
  usage(3100, 700, 0.02);
  assert.equal(s.usage!.contextTokens, 3100);
});

test("a session opened again takes its meter from agent/session/stats, unless a live answer reported usage first", () => {
  const stats = { sessionId: "s1", cost: 0.01, sessionCost: 0.0426, tokens: { total: 3000 }, sessionTokens: { total: 9100 }, contextUsage: { tokens: 2400, contextWindow: 200000, percent: 1.2 } };
  const s = createStore("s1");
  applyStats(s, stats);
  assert.deepEqual(s.usage, { contextTokens: 2400, contextWindow: 200000, sessionCost: 0.0426, turnCost: 0, sessionTokens: 9100 });
  const t = createStore("s1");
  applyNotification(t, { method: "agent/usage", params: { sessionId: "s1", contextTokens: 5000, contextWindow: 200000, turn: { totalTokens: 10, cost: 0.001 }, session: { totalTokens: 9200, cost: 0.05 } } });
  applyStats(t, stats);
  assert.deepEqual(t.usage, { contextTokens: 5000, contextWindow: 200000, sessionCost: 0.05, turnCost: 0.001, sessionTokens: 9200 });
  // After a compaction Pi has no estimate (contextUsage.tokens null): 0 until an answer.
  const u = createStore("s1");
  applyStats(u, { ...stats, contextUsage: { tokens: null, contextWindow: 200000, percent: null } });
  assert.equal(u.usage!.contextTokens, 0);
});
