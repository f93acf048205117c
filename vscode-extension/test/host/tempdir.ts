// A test file's temporary folders: made in the system's temp folder and removed when the
// file's tests are done (node:test's `after`), so no run leaves them behind.
import { after } from "node:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const made: string[] = [];
// Registered when the file is loaded, so the hook is the file's (one registered inside a test
// would be that test's, run before the later tests make theirs).
after(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** A fresh folder named `prefix` + six random characters, removed after the file's tests. */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
}
