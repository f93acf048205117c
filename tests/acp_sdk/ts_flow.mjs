// The official TypeScript ACP SDK (@agentclientprotocol/sdk 2.4.0, its app API:
// client()…connectWith()) drives `pi-lsp acp`: new → prompt with a tool call and a permission →
// cancel → list → load in a new process → continue; then a client that advertises `terminal`
// runs the agent's bash call in its own terminal (terminal/create … terminal/release, the command
// really run here) and the output reaches the model.
// Usage: node ts_flow.mjs PI_LSP_BIN SDK_DIR (the package's folder)
//
// Reading a prompt's updates after its response: the SDK (2.4.0, `core/jsonrpc.js`
// `receiveMessage`) resolves a request's promise as soon as its response is read, but hands
// each notification to the handlers through an async chain (every handler registered before
// `session/update` is awaited in turn). When the agent's last updates and the response come in
// one read (its writes are coalesced whenever the machine is busy), the response can resolve
// before those updates reach `onNotification`: the terminal client, with five terminal
// handlers registered first, saw `''` or `'Saw it'` instead of `'Saw it.'`. The agent's wire
// order is right (`tests/acp_e2e.rs` reads it raw; docs/acp.md "Update order"). So each client
// keeps a barrier in wire order: its stream counts the `session/update`s as they are read and
// notes the count at each response; after a response the client waits until its handler has
// had that many ([`caughtUp`]). The Python SDK (0.12.1) has this barrier itself.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";
import assert from "node:assert/strict";
import path from "node:path";

const [bin, sdkDir] = process.argv.slice(2);
const acp = await import(pathToFileURL(path.join(sdkDir, "dist/v1/stable/acp.js")).href);
const here = path.dirname(new URL(import.meta.url).pathname);
// The workspace, agent dir and loopback model, made by common.py.
const made = spawnSync("python3", ["-c", `
import json, sys
sys.path.insert(0, ${JSON.stringify(here)})
from common import setup
tmp, ws, env, mock = setup("ts")
from common import TERMINAL_COMMAND, TERMINAL_RESULT
print(json.dumps({"ws": str(ws), "tmp": str(tmp), "agent": env["PI_CODING_AGENT_DIR"], "pid": mock.pid,
                  "command": TERMINAL_COMMAND, "result": TERMINAL_RESULT}))
sys.stdout.flush()
import os; os._exit(0)
`], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
const { ws, tmp, agent, pid, command: terminalCommand, result: terminalResult } = JSON.parse(made.stdout.trim().split("\n").pop());
// The loopback model and the folders go with this process, whatever ends it (a failed
// assertion too).
process.on("exit", () => {
  try {
    process.kill(pid);
  } catch {}
  fs.rmSync(tmp, { recursive: true, force: true });
});
const agentTmp = path.join(tmp, "tmp");
const env = { ...process.env, PI_CODING_AGENT_DIR: agent, ANTHROPIC_API_KEY: "", OPENAI_API_KEY: "", TMPDIR: agentTmp, TMP: agentTmp, TEMP: agentTmp };

// A client's terminals: each really runs the command line it is given (stdin closed, stdout
// and stderr in one buffer, the client's environment plus the request's env, in its cwd).
function terminals(state) {
  const terms = new Map();
  const status = (t) => ({ exitCode: t.code, signal: t.signal });
  return {
    terms,
    create: ({ params }) => {
      state.calls.push(["create", params.command, params.args ?? []]);
      const extra = Object.fromEntries((params.env ?? []).map((e) => [e.name, e.value]));
      const child = spawn(params.command, params.args ?? [], { cwd: params.cwd, env: { ...process.env, ...extra }, stdio: ["ignore", "pipe", "pipe"] });
      const t = { child, out: "", done: false, code: null, signal: null };
      child.stdout.on("data", (d) => { t.out += d; });
      child.stderr.on("data", (d) => { t.out += d; });
      t.exited = new Promise((r) => child.on("close", (code, signal) => { Object.assign(t, { done: true, code, signal }); r(); }));
      const id = `term-${terms.size + 1}`;
      terms.set(id, t);
      return { terminalId: id };
    },
    output: ({ params }) => {
      state.calls.push(["output", params.terminalId]);
      const t = terms.get(params.terminalId);
      return { output: t.out, truncated: false, ...(t.done ? { exitStatus: status(t) } : {}) };
    },
    waitForExit: async ({ params }) => {
      state.calls.push(["wait_for_exit", params.terminalId]);
      const t = terms.get(params.terminalId);
      await t.exited;
      return status(t);
    },
    kill: ({ params }) => {
      state.calls.push(["kill", params.terminalId]);
      terms.get(params.terminalId).child.kill("SIGKILL");
      return {};
    },
    release: ({ params }) => {
      state.calls.push(["release", params.terminalId]);
      const t = terms.get(params.terminalId);
      if (!t.done) t.child.kill("SIGKILL");
      terms.delete(params.terminalId);
      return {};
    },
  };
}

function session(state, term) {
  const child = spawn(bin, ["acp", "--model", "mock/mock-1"], { cwd: ws, env, stdio: ["pipe", "pipe", "inherit"] });
  const raw = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  // In wire order: the updates read so far, and how many were read before the latest response.
  state.wire = { updates: 0, beforeResponse: 0 };
  const counted = new TransformStream({
    transform(message, out) {
      if (message?.method === "session/update") state.wire.updates += 1;
      else if (message && !("method" in message) && "id" in message) state.wire.beforeResponse = state.wire.updates;
      out.enqueue(message);
    },
  });
  const stream = { readable: raw.readable.pipeThrough(counted), writable: raw.writable };
  let app = acp.client({ name: "ts-flow" });
  if (term) {
    const t = acp.methods.client.terminal;
    app = app.onRequest(t.create, term.create).onRequest(t.output, term.output)
      .onRequest(t.waitForExit, term.waitForExit).onRequest(t.kill, term.kill).onRequest(t.release, term.release);
  }
  app = app
    .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
      state.asked.push(params);
      return { outcome: { outcome: "selected", optionId: "allow_once" } };
    })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      state.updates.push(params.update);
    });
  return { child, stream, app };
}
// Resolves when the client's handler has had every `session/update` read before the latest
// response (see the top of this file); fails after 5 s.
async function caughtUp(state) {
  const want = state.wire.beforeResponse;
  for (let i = 0; state.updates.length < want; i++) {
    if (i > 5000) throw new Error(`only ${state.updates.length} of ${want} updates reached the handler`);
    await new Promise((r) => setTimeout(r, 1));
  }
}
// `method` with `params`, answered, once every update read before its response is handled.
async function call(cx, state, method, params) {
  const r = await cx.request(method, params);
  await caughtUp(state);
  return r;
}
const text = (s, kind) => s.updates.filter((u) => u.sessionUpdate === kind).map((u) => u.content.text).join("");

const s1 = { asked: [], updates: [] };
const a = session(s1);
let sid;
await a.app.connectWith(a.stream, async (cx) => {
  const init = await cx.request(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
  assert.equal(init.protocolVersion, 1);
  sid = (await cx.request(acp.methods.agent.session.new, { cwd: ws, mcpServers: [] })).sessionId;
  const r = await call(cx, s1, acp.methods.agent.session.prompt, { sessionId: sid, prompt: [{ type: "text", text: "run it" }] });
  assert.equal(r.stopReason, "end_turn");
  assert.deepEqual(s1.asked[0].options.map((o) => o.kind), ["allow_once", "allow_always", "reject_once", "reject_always"]);
  assert.equal(s1.asked[0].toolCall.kind, "execute");
  assert.equal(text(s1, "agent_message_chunk"), "Let me look.It printed hi.");
  const long = call(cx, s1, acp.methods.agent.session.prompt, { sessionId: sid, prompt: [{ type: "text", text: "long" }] });
  while (!text(s1, "agent_message_chunk").includes("xxxx")) await new Promise((r) => setTimeout(r, 20));
  await cx.notify(acp.methods.agent.session.cancel, { sessionId: sid });
  assert.equal((await long).stopReason, "cancelled");
  const listed = await cx.request(acp.methods.agent.session.list, { cwd: ws });
  assert.deepEqual(listed.sessions.map((s) => [s.sessionId, s.title]), [[sid, "run it"]]);
  await cx.request(acp.methods.agent.session.close, { sessionId: sid });
});
a.child.stdin.end();
await new Promise((r) => a.child.on("exit", r));

const s2 = { asked: [], updates: [] };
const b = session(s2);
await b.app.connectWith(b.stream, async (cx) => {
  await cx.request(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
  await call(cx, s2, acp.methods.agent.session.load, { sessionId: sid, cwd: ws, mcpServers: [] });
  assert.equal(text(s2, "user_message_chunk"), "run itlong");
  assert.ok(text(s2, "agent_message_chunk").startsWith("Let me look.It printed hi.xxxx"));
  const r = await call(cx, s2, acp.methods.agent.session.prompt, { sessionId: sid, prompt: [{ type: "text", text: "go on" }] });
  assert.equal(r.stopReason, "end_turn");
  assert.ok(text(s2, "agent_message_chunk").endsWith("Continued."));
});
b.child.stdin.end();
await new Promise((r) => b.child.on("exit", r));

// A client with terminals: the agent's bash call runs in ours.
const s3 = { asked: [], updates: [], calls: [] };
const term = terminals(s3);
const c3 = session(s3, term);
await c3.app.connectWith(c3.stream, async (cx) => {
  await cx.request(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: { terminal: true } });
  const id = (await cx.request(acp.methods.agent.session.new, { cwd: ws, mcpServers: [] })).sessionId;
  const r = await call(cx, s3, acp.methods.agent.session.prompt, { sessionId: id, prompt: [{ type: "text", text: "use the terminal" }] });
  assert.equal(r.stopReason, "end_turn");
  const creates = s3.calls.filter((c) => c[0] === "create");
  assert.equal(creates.length, 1, JSON.stringify(s3.calls));
  const [, command, args] = creates[0];
  assert.equal(fs.realpathSync(command), fs.realpathSync(bin));
  assert.equal(args[0], "sandbox-exec");
  assert.equal(args.at(-1), terminalCommand);
  const kinds = s3.calls.map((c) => c[0]);
  assert.ok(kinds.includes("wait_for_exit") && !kinds.includes("kill") && kinds.at(-1) === "release", kinds.join());
  assert.equal(term.terms.size, 0, "every terminal released");
  const updates = s3.updates.filter((u) => u.sessionUpdate === "tool_call_update" && u.toolCallId === "call_t");
  assert.equal(updates[0].status, "in_progress");
  const shown = updates.slice(1).map((u) => u.content);
  assert.deepEqual(shown, [[{ type: "terminal", terminalId: "term-1" }], [{ type: "terminal", terminalId: "term-1" }]]);
  assert.equal(updates.at(-1).status, "failed");
  assert.deepEqual(updates.at(-1).rawOutput, { content: terminalResult, isError: true, details: { exitCode: 3 } });
  assert.equal(text(s3, "agent_message_chunk"), "Saw it.");
});
c3.child.stdin.end();
await new Promise((r) => c3.child.on("exit", r));
// The model got the terminal's output, as for a command run by the agent itself.
const last = JSON.parse(fs.readFileSync(path.join(tmp, "log.jsonl"), "utf8").trim().split("\n").at(-1));
const sent = (last.body ?? last).messages.find((m) => m.role === "tool" && m.tool_call_id === "call_t");
assert.ok(sent, "the result was sent");
assert.equal(typeof sent.content === "string" ? sent.content : sent.content.map((p) => p.text ?? "").join(""), terminalResult);
console.log("TypeScript SDK flow: ok (with a client terminal)");
