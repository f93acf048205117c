// `node --test` over directories on every Node version: Node 20 searches a directory argument
// for tests, Node 22+ reads each argument as a file or glob and fails on a directory. This
// expands each directory argument into its test files (`*.test.mjs`, `*.test.js`, `*.test.cjs`,
// searched recursively, sorted) and runs `node --test` with the other arguments as given
// (options such as `--test-concurrency=1`). A directory without test files is an error, so a
// suite never passes by running nothing.
//
//   node scripts/node-test.mjs [node --test options] <dir | file>...
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";

const TEST = /\.test\.(mjs|cjs|js)$/;

/** The test files under `dir`, recursively, sorted. */
function testsIn(dir) {
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...testsIn(p));
    else if (TEST.test(e.name)) out.push(p);
  }
  return out.sort();
}

const args = [];
for (const a of process.argv.slice(2)) {
  if (a.startsWith("-")) {
    args.push(a);
    continue;
  }
  let st;
  try {
    st = statSync(a);
  } catch {
    console.error(`node-test: ${a} does not exist`);
    process.exit(1);
  }
  if (!st.isDirectory()) {
    args.push(a);
    continue;
  }
  const files = testsIn(a);
  if (files.length === 0) {
    console.error(`node-test: no test files (*.test.mjs|js|cjs) under ${a}`);
    process.exit(1);
  }
  args.push(...files);
}
const run = spawnSync(process.execPath, ["--test", ...args], { stdio: "inherit" });
process.exit(run.status ?? 1);
