// Bundles the extension host (src/extension/extension.ts → dist/extension.js, CommonJS for
// VS Code's Node) and the chat webview (src/webview/main.ts → dist/webview.js + webview.css,
// an IIFE for the browser) with esbuild. `--production` minifies; `--test-page` bundles the
// host's minimal test page (test/host-page/main.ts) as the webview instead.
import * as esbuild from "esbuild";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const production = process.argv.includes("--production");
const testPage = process.argv.includes("--test-page");

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

const candidates = testPage
  ? ["test/host-page/main.ts"]
  : ["src/webview/main.ts", "src/webview/main.tsx", "src/webview/index.ts", "src/webview/index.tsx"];
const webviewEntry = candidates.map((p) => join(root, p)).find((p) => existsSync(p));
if (webviewEntry) {
  await esbuild.build({
    entryPoints: [webviewEntry],
    bundle: true,
    platform: "browser",
    format: "iife",
    target: "es2022",
    outfile: join(root, "dist/webview.js"),
    minify: production,
    sourcemap: production ? false : "inline",
    loader: { ".ttf": "file", ".woff": "file", ".woff2": "file" },
    logLevel: "warning",
  });
} else {
  console.error("build: no webview entry (src/webview/main.ts); the panel shows a notice");
}
