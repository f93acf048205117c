/**
 * Which pi-lsp binary the extension starts, first found: the `pi.serverPath` setting; `pi-lsp`
 * on `PATH`; the workspace's `target/release/pi-lsp`; the binary bundled in the
 * platform-specific `.vsix` (`bin/pi-lsp`). On Windows the file is `pi-lsp.exe`, `PATH` is
 * `;`-separated and paths are joined with `\` (docs/platforms.md). No `vscode` import (runs
 * under `node --test`, where `platform` fakes another OS).
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
  /** The OS to look for (default: this one). */
  platform?: NodeJS.Platform;
}): ServerBinary | undefined {
  const exe = opts.isExecutable ?? isExecutable;
  const platform = opts.platform ?? process.platform;
  const p = platform === "win32" ? path.win32 : path.posix;
  const name = serverBinaryName(platform);
  if (opts.setting.trim()) return { path: opts.setting.trim(), source: "setting" };
  for (const dir of (opts.pathEnv ?? "").split(p.delimiter)) {
    const d = dir.trim().replace(/^"(.*)"$/, "$1");
    if (!d) continue;
    const f = p.join(d, name);
    if (exe(f)) return { path: f, source: "PATH" };
  }
  for (const ws of opts.workspaceFolders) {
    const f = p.join(ws, "target", "release", name);
    if (exe(f)) return { path: f, source: "workspace" };
  }
  const bundled = p.join(opts.extensionPath, "bin", name);
  if (exe(bundled)) return { path: bundled, source: "bundled" };
  return undefined;
}

/** The server binary's file name on `platform`: `pi-lsp.exe` on Windows, else `pi-lsp`. */
export function serverBinaryName(platform: NodeJS.Platform = process.platform): string {
  return platform === "win32" ? "pi-lsp.exe" : "pi-lsp";
}

function isExecutable(p: string): boolean {
  try {
    fs.accessSync(p, fs.constants.X_OK);
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}

