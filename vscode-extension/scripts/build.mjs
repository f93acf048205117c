// Bundles the extension host (src/extension/extension.ts → dist/extension.js, CommonJS for
// VS Code's Node, `vscode` external) with esbuild, then the chat webview
// (scripts/build-webview.mjs → dist/webview.js + dist/webview.css). `--production` minifies.
import * as esbuild from "esbuild";
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const production = process.argv.includes("--production");

await esbuild.build({
  entryPoints: [join(root, "src/extension/extension.ts")],
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node20",
  external: ["vscode"],
  outfile: join(root, "dist/extension.js"),
  minify: production,
  sourcemap: production ? false : "inline",
  logLevel: "warning",
});

const webview = spawnSync(process.execPath, [join(root, "scripts/build-webview.mjs"), ...(production ? ["--production"] : [])], { stdio: "inherit" });
process.exit(webview.status ?? 1);
