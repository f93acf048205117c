// Bundles the chat webview (src/webview/main.ts → dist/webview.js + dist/webview.css) with
// esbuild. `--tests` also bundles the unit and browser test files (test/unit/*.test.ts,
// test/webview/*.test.ts) into dist-test/ for `node --test`. `--production` minifies.
import { build } from "esbuild";
import { readdirSync, mkdirSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = new Set(process.argv.slice(2));
const production = args.has("--production");

await build({
  entryPoints: { webview: join(root, "src/webview/main.ts") },
  outdir: join(root, "dist"),
  bundle: true,
  format: "iife",
  platform: "browser",
  target: ["chrome114"],
  minify: production,
  sourcemap: production ? false : "inline",
  legalComments: "none",
  loader: { ".css": "css" },
  logLevel: "warning",
});

if (args.has("--tests")) {
  for (const dir of ["unit", "webview"]) {
    const src = join(root, "test", dir);
    let files = [];
    try {
      files = readdirSync(src).filter((f) => f.endsWith(".test.ts"));
    } catch {
      continue;
    }
    mkdirSync(join(root, "dist-test", dir), { recursive: true });
    await build({
      entryPoints: files.map((f) => join(src, f)),
      outdir: join(root, "dist-test", dir),
      outExtension: { ".js": ".mjs" },
      bundle: true,
      format: "esm",
      platform: "node",
      target: "node20",
      packages: "external",
      sourcemap: "inline",
      logLevel: "warning",
    });
  }
}
