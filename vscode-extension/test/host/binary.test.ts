// Which pi-lsp binary the extension starts (src/extension/binary.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { resolveServerBinary, serverBinaryName } from "../../src/extension/binary";

const opts = (exists: string[], setting = "") => ({
  setting,
  pathEnv: "/usr/local/bin:/opt/pi/bin",
  workspaceFolders: ["/ws"],
  extensionPath: "/ext",
  isExecutable: (p: string) => exists.includes(p),
  platform: "linux" as const,
});

test("the setting wins, then PATH, then the workspace's release build, then the bundled binary", () => {
  const all = ["/opt/pi/bin/pi-lsp", "/ws/target/release/pi-lsp", "/ext/bin/pi-lsp"];
  assert.deepEqual(resolveServerBinary(opts(all, " /my/pi-lsp ")), { path: "/my/pi-lsp", source: "setting" });
  assert.deepEqual(resolveServerBinary(opts(all)), { path: "/opt/pi/bin/pi-lsp", source: "PATH" });
  assert.deepEqual(resolveServerBinary(opts(all.slice(1))), { path: "/ws/target/release/pi-lsp", source: "workspace" });
  assert.deepEqual(resolveServerBinary(opts(all.slice(2))), { path: "/ext/bin/pi-lsp", source: "bundled" });
  assert.equal(resolveServerBinary(opts([])), undefined);
});

test("on Windows: pi-lsp.exe, a ;-separated PATH (quoted folders too), backslash paths", () => {
  const win = (exists: string[], setting = "") => ({
    setting,
    pathEnv: 'C:\\Windows\\System32;"C:\\Program Files\\pi";C:\\tools',
    workspaceFolders: ["c:\\Users\\me\\ws"],
    extensionPath: "C:\\Users\\me\\.vscode\\extensions\\pi",
    isExecutable: (p: string) => exists.includes(p),
    platform: "win32" as const,
  });
  const onPath = "C:\\Program Files\\pi\\pi-lsp.exe";
  const ws = "c:\\Users\\me\\ws\\target\\release\\pi-lsp.exe";
  const bundled = "C:\\Users\\me\\.vscode\\extensions\\pi\\bin\\pi-lsp.exe";
  assert.deepEqual(resolveServerBinary(win([onPath, ws, bundled])), { path: onPath, source: "PATH" });
  assert.deepEqual(resolveServerBinary(win([ws, bundled])), { path: ws, source: "workspace" });
  assert.deepEqual(resolveServerBinary(win([bundled])), { path: bundled, source: "bundled" });
  // The Unix name is not taken for the Windows one.
  assert.equal(resolveServerBinary(win(["C:\\tools\\pi-lsp", "C:\\Users\\me\\.vscode\\extensions\\pi\\bin\\pi-lsp"])), undefined);
  assert.deepEqual(resolveServerBinary(win([], " D:\\pi\\pi-lsp.exe ")), { path: "D:\\pi\\pi-lsp.exe", source: "setting" });
  assert.equal(serverBinaryName("win32"), "pi-lsp.exe");
  assert.equal(serverBinaryName("darwin"), "pi-lsp");
});

test("on macOS and Linux: pi-lsp with posix paths whatever OS runs the test", () => {
  const mac = { ...opts(["/Users/me/ws/target/release/pi-lsp"]), workspaceFolders: ["/Users/me/ws"], platform: "darwin" as const };
  assert.deepEqual(resolveServerBinary(mac), { path: "/Users/me/ws/target/release/pi-lsp", source: "workspace" });
});
