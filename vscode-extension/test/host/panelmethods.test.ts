// The host relays only the panel's methods (src/shared/panelMethods.ts): issue "a webview message
// naming a method outside the panel's set is refused by the host".
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { checkPanelRequest, PANEL_METHODS } from "../../src/shared/panelMethods";

test("methods outside the panel's set are refused with a message naming them", () => {
  for (const m of ["agent/bash", "agent/permissions/set", "agent/session/delete", "agent/runTool", "initialize", "agent/promptx", ""]) {
    const refused = checkPanelRequest(m);
    assert.equal(typeof refused, "string", m);
    assert.ok(refused!.startsWith(`the chat panel may not call ${JSON.stringify(m)}; it calls only agent/abort, `), refused!);
  }
  assert.equal(checkPanelRequest(undefined), `the chat panel may not call a method without a name; it calls only ${PANEL_METHODS.join(", ")}`);
  assert.equal(checkPanelRequest({ toString: () => "agent/prompt" }), checkPanelRequest(undefined), "only a string names a method");
});

test("every method the webview requests is in the panel's set, and the set has no method the webview never asks", () => {
  const root = join(import.meta.dirname ?? process.cwd(), "..", "..");
  const dir = join(root, "src/webview");
  const src = readdirSync(dir)
    .filter((f) => f.endsWith(".ts"))
    .map((f) => readFileSync(join(dir, f), "utf8"))
    .join("\n");
  const asked = new Set([...src.matchAll(/request(?:<[^>]*>)?\(\s*"(agent\/[A-Za-z/]+)"/g)].map((m) => m[1]));
  for (const m of asked) assert.equal(checkPanelRequest(m), null, `${m} is requested but refused`);
  assert.deepEqual([...PANEL_METHODS].filter((m) => !asked.has(m)), [], "methods allowed but never requested");
});
