// The MCP servers' quick pick rows and actions, the pi.mcp.vscodeServers initialization
// options, and the server's failure notices (src/extension/mcp.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type * as vscode from "vscode";
import { mcpInitializationOptions, serverActions, serverRow, setUserMcpConfig, showServerMessage } from "../../src/extension/mcp";
import { recorded, reset, Uri } from "./fake-vscode";

const fixture = JSON.parse(readFileSync(join(process.cwd(), "../fixtures/protocol/agent-mcp-list.response.json"), "utf8")).result;

const config = (v: string) => ({ get: (key: string, d: unknown) => (key === "mcp.vscodeServers" ? v : d) }) as unknown as vscode.WorkspaceConfiguration;

test("a server's row: state, tool count, exposure, scope; the error's first line", () => {
  assert.deepEqual(serverRow(fixture.servers[0]), { label: "$(pass-filled) everything", description: "connected · 1 tool · direct · global" });
  assert.deepEqual(serverRow({ name: "web", state: "failed", toolCount: 0, exposure: "deferred", scope: "project", error: "spawn web-mcp: No such file or directory\nstderr: …" }), {
    label: "$(error) web",
    description: "failed · 0 tools · deferred · project",
    detail: "spawn web-mcp: No such file or directory",
  });
});

test("a server's actions: reconnect / disable when enabled, enable when disabled, exposure, its error and its file", () => {
  assert.deepEqual(serverActions(fixture.servers[0]).map(([a]) => a), ["reconnect", "disable", "exposure", "source"]);
  assert.deepEqual(serverActions({ name: "x", state: "disabled", enabled: false }).map(([a]) => a), ["enable", "exposure"]);
  assert.deepEqual(serverActions({ name: "x", state: "failed", enabled: true, error: "boom", source: "/p/.pi/mcp.json" }).map(([a]) => a), ["reconnect", "disable", "exposure", "error", "source"]);
});

test("pi.mcp.vscodeServers: on sends vscodeMcpServers and the profile's mcp.json, off sends false, default nothing", () => {
  setUserMcpConfig(Uri.file("/home/u/.config/Code/User/globalStorage/pi.pi-lsp") as unknown as vscode.Uri);
  assert.deepEqual(mcpInitializationOptions(config("on")), { vscodeMcpServers: true, vscodeMcpUserConfig: "/home/u/.config/Code/User/mcp.json" });
  assert.deepEqual(mcpInitializationOptions(config("off")), { vscodeMcpServers: false });
  assert.deepEqual(mcpInitializationOptions(config("default")), {});
});

test("an MCP failure notice comes as a warning with a button to the servers; other messages as they are", async () => {
  reset();
  let opened = 0;
  recorded.clickWarning = (_t, items) => items[0];
  showServerMessage({ type: 2, message: 'MCP server "web": spawn web-mcp: No such file or directory' }, () => opened++);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(recorded.messages, [{ kind: "warning", text: 'Pi: MCP server "web": spawn web-mcp: No such file or directory', items: ["Show MCP Servers"] }]);
  assert.equal(opened, 1);
  recorded.messages.length = 0;
  showServerMessage({ type: 2, message: "MCP configuration: /p/.pi/mcp.json: mcpServers.x: sse is not supported" }, () => opened++);
  showServerMessage({ type: 3, message: "Model: anthropic/claude" }, () => opened++);
  showServerMessage({ type: 4, message: "a log line" }, () => opened++);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(recorded.messages, [
    { kind: "warning", text: "Pi: MCP configuration: /p/.pi/mcp.json: mcpServers.x: sse is not supported", items: ["Show MCP Servers"] },
    { kind: "info", text: "Model: anthropic/claude" },
  ]);
  assert.equal(opened, 2);
});
