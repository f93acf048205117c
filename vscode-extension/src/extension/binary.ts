/**
 * Which pi-lsp binary the extension starts, first found: the `pi.serverPath` setting; `pi-lsp`
 * on `PATH`; the workspace's `target/release/pi-lsp`; the binary bundled in the
 * platform-specific `.vsix` (`bin/pi-lsp`). No `vscode` import (runs under `node --test`).
 */
import * as fs from "node:fs";
import * as path from "node:path";

/** Where a binary was found, for the log. */
export interface ServerBinary {
  path: string;
  source: "setting" | "PATH" | "workspace" | "bundled";
}

/** Finds the pi-lsp binary (see the module doc for the order); `undefined` when none exists. */
export function resolveServerBinary(opts: {
  setting: string;
  pathEnv: string | undefined;
  workspaceFolders: string[];
  extensionPath: string;
  isExecutable?: (p: string) => boolean;
}): ServerBinary | undefined {
  const exe = opts.isExecutable ?? isExecutable;
  if (opts.setting.trim()) return { path: opts.setting.trim(), source: "setting" };
  for (const dir of (opts.pathEnv ?? "").split(path.delimiter)) {
    if (!dir) continue;
    const p = path.join(dir, "pi-lsp");
    if (exe(p)) return { path: p, source: "PATH" };
  }
  for (const ws of opts.workspaceFolders) {
    const p = path.join(ws, "target", "release", "pi-lsp");
    if (exe(p)) return { path: p, source: "workspace" };
  }
  const bundled = path.join(opts.extensionPath, "bin", "pi-lsp");
  if (exe(bundled)) return { path: bundled, source: "bundled" };
  return undefined;
}

function isExecutable(p: string): boolean {
  try {
    fs.accessSync(p, fs.constants.X_OK);
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}

