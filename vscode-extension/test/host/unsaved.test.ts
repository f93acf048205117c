// The user's unsaved changes kept by an agent edit (src/extension/unsaved.ts): the user's own
// save later is not a "file is newer" conflict, because the file's time goes back to the one
// VS Code read just before that save writes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as vscode from "vscode";
import { UnsavedChanges } from "../../src/extension/unsaved";
import { Uri, willSaveDocument } from "./fake-vscode";
import { tempDir } from "./tempdir";

test("the user's own save after agent/didMergeToDisk finds the file at the time VS Code read; the agent's save forgets it", () => {
  const dir = tempDir("pi-unsaved-");
  const file = join(dir, "notes.md");
  writeFileSync(file, "read by the editor\n");
  utimesSync(file, new Date(1_700_000_000_123), new Date(1_700_000_000_123));
  const read = statSync(file).mtimeMs;
  // The server merges the agent's change onto the disk (a newer time).
  writeFileSync(file, "merged by the server\n");
  utimesSync(file, new Date(1_700_000_500_000), new Date(1_700_000_500_000));
  const u = new UnsavedChanges();
  const uri = Uri.file(file) as unknown as vscode.Uri;
  u.merged(uri, { sec: 1_700_000_000, nsec: 123_456_789 });
  // A second merge keeps the first time (the one VS Code read).
  u.merged(uri, { sec: 1_700_000_400, nsec: 0 });
  willSaveDocument(Uri.file(file));
  assert.equal(Math.floor(statSync(file).mtimeMs), Math.floor(read));
  assert.equal(u.known.size, 0);
  // Another save of the same file (nothing merged since) leaves its time alone.
  utimesSync(file, new Date(1_700_000_900_000), new Date(1_700_000_900_000));
  willSaveDocument(Uri.file(file));
  assert.equal(statSync(file).mtimeMs, 1_700_000_900_000);
  // Merged, then saved by the agent: nothing to restore at the user's save.
  u.merged(uri, { sec: 1_700_000_000, nsec: 0 });
  u.saved(uri);
  willSaveDocument(Uri.file(file));
  assert.equal(statSync(file).mtimeMs, 1_700_000_900_000);
  u.dispose();
});
