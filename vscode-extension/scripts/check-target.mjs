// `node scripts/check-target.mjs TARGET BINARY`: prints the binary's file name in bin/ for TARGET,
// or why BINARY is not one for TARGET (exit 1). Used by scripts/package.
import { readFileSync } from "node:fs";
import { TARGETS, mismatch } from "./target.mjs";

const [target, bin] = process.argv.slice(2);
const why = TARGETS[target] ? mismatch(target, readFileSync(bin).subarray(0, 4096)) : mismatch(target, Buffer.alloc(0));
if (why) {
  console.error(`package: ${bin}: ${why}`);
  process.exit(1);
}
console.log(TARGETS[target].bin);
