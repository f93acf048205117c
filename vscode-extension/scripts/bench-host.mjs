// Bundles and runs the host benchmark (test/host/bench.ts): relay cost per notification and
// review-tracker cost per keystroke. Usage: node scripts/bench-host.mjs
import * as esbuild from "esbuild";
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist/bench-host.mjs");
await esbuild.build({ entryPoints: [join(root, "test/host/bench.ts")], bundle: true, platform: "node", format: "esm", target: "node20", outfile: out, logLevel: "warning" });
process.exit(spawnSync(process.execPath, [out], { stdio: "inherit" }).status ?? 1);
