// The official TypeScript ACP SDK (@agentclientprotocol/sdk 2.4.0, its app API:
// client()…connectWith()) drives `pi-lsp acp`: new → prompt with a tool call and a permission →
// cancel → list → load in a new process → continue.
// Usage: node ts_flow.mjs PI_LSP_BIN SDK_DIR (the package's folder)
import { spawn, spawnSync } from "node:child_process";
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
print(json.dumps({"ws": str(ws), "agent": env["PI_CODING_AGENT_DIR"], "pid": mock.pid}))
sys.stdout.flush()
import os; os._exit(0)
`], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
const { ws, agent, pid } = JSON.parse(made.stdout.trim().split("\n").pop());
const env = { ...process.env, PI_CODING_AGENT_DIR: agent, ANTHROPIC_API_KEY: "", OPENAI_API_KEY: "" };

function session(state) {
  const child = spawn(bin, ["acp", "--model", "mock/mock-1"], { cwd: ws, env, stdio: ["pipe", "pipe", "inherit"] });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const app = acp.client({ name: "ts-flow" })
    .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
      state.asked.push(params);
      return { outcome: { outcome: "selected", optionId: "allow_once" } };
    })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      state.updates.push(params.update);
    });
  return { child, stream, app };
}
const text = (s, kind) => s.updates.filter((u) => u.sessionUpdate === kind).map((u) => u.content.text).join("");

const s1 = { asked: [], updates: [] };
const a = session(s1);
let sid;
await a.app.connectWith(a.stream, async (cx) => {
  const init = await cx.request(acp.methods.agent.initialize, { protocolVersion: 1, clientCapabilities: {} });
  assert.equal(init.protocolVersion, 1);
  sid = (await cx.request(acp.methods.agent.session.new, { cwd: ws, mcpServers: [] })).sessionId;
  const r = await cx.request(acp.methods.agent.session.prompt, { sessionId: sid, prompt: [{ type: "text", text: "run it" }] });
  assert.equal(r.stopReason, "end_turn");
  assert.deepEqual(s1.asked[0].options.map((o) => o.kind), ["allow_once", "allow_always", "reject_once", "reject_always"]);
  assert.equal(s1.asked[0].toolCall.kind, "execute");
  assert.equal(text(s1, "agent_message_chunk"), "Let me look.It printed hi.");
  const long = cx.request(acp.methods.agent.session.prompt, { sessionId: sid, prompt: [{ type: "text", text: "long" }] });
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
  await cx.request(acp.methods.agent.session.load, { sessionId: sid, cwd: ws, mcpServers: [] });
  assert.equal(text(s2, "user_message_chunk"), "run itlong");
  assert.ok(text(s2, "agent_message_chunk").startsWith("Let me look.It printed hi.xxxx"));
  const r = await cx.request(acp.methods.agent.session.prompt, { sessionId: sid, prompt: [{ type: "text", text: "go on" }] });
  assert.equal(r.stopReason, "end_turn");
  assert.ok(text(s2, "agent_message_chunk").endsWith("Continued."));
});
b.child.stdin.end();
await new Promise((r) => b.child.on("exit", r));
process.kill(pid);
console.log("TypeScript SDK flow: ok");
