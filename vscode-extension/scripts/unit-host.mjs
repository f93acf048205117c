// Bundles the host unit tests (test/host/*.test.ts) with esbuild and runs them with Node's
// test runner. `vscode` (which exists only inside VS Code's extension host) is test/host/fake-vscode.ts.
import * as esbuild from "esbuild";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { spawnSync } from "node:child_process";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dir = join(root, "test/host");
const files = readdirSync(dir).filter((f) => f.endsWith(".test.ts"));
const outdir = join(root, "dist/test-host");
await esbuild.build({
  entryPoints: files.map((f) => join(dir, f)),
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  outdir,
  outExtension: { ".js": ".mjs" },
  plugins: [
    {
      name: "fake-vscode",
      setup(b) {
        b.onResolve({ filter: /^vscode$/ }, () => ({ path: join(dir, "fake-vscode.ts") }));
      },
    },
  ],
  logLevel: "warning",
});
const run = spawnSync(process.execPath, ["--test", ...files.map((f) => join(outdir, f.replace(/\.ts$/, ".mjs")))], { stdio: "inherit" });
process.exit(run.status ?? 1);
