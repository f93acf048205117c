// Which pi-lsp binary the extension starts (src/extension/binary.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { resolveServerBinary } from "../../src/extension/binary";

const opts = (exists: string[], setting = "") => ({
  setting,
  pathEnv: "/usr/local/bin:/opt/pi/bin",
  workspaceFolders: ["/ws"],
  extensionPath: "/ext",
  isExecutable: (p: string) => exists.includes(p),
});

test("the setting wins, then PATH, then the workspace's release build, then the bundled binary", () => {
  const all = ["/opt/pi/bin/pi-lsp", "/ws/target/release/pi-lsp", "/ext/bin/pi-lsp"];
  assert.deepEqual(resolveServerBinary(opts(all, " /my/pi-lsp ")), { path: "/my/pi-lsp", source: "setting" });
  assert.deepEqual(resolveServerBinary(opts(all)), { path: "/opt/pi/bin/pi-lsp", source: "PATH" });
  assert.deepEqual(resolveServerBinary(opts(all.slice(1))), { path: "/ws/target/release/pi-lsp", source: "workspace" });
  assert.deepEqual(resolveServerBinary(opts(all.slice(2))), { path: "/ext/bin/pi-lsp", source: "bundled" });
  assert.equal(resolveServerBinary(opts([])), undefined);
});
