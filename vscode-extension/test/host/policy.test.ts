// The approval policies' wording (src/extension/policy.ts): the notification after
// "Pi: Set Approval Policy" and the quick pick, in the setting's words.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { POLICY_ITEMS, policyNotice } from "../../src/extension/policy";
import { tempDir } from "./tempdir";

test("the notification after setting a session's approval policy says in plain words what Pi will do", () => {
  assert.deepEqual(
    ["ask", "auto-edit", "approve-all"].map(policyNotice),
    [
      "Pi will ask before every tool call in this session (edits with their diff).",
      "Pi's file edits will land in the editor in this session; Pi will ask before commands.",
      "Pi will run every tool call in this session without asking.",
    ],
  );
});

test("the approval policy quick pick uses the pi.approvalPolicy setting's descriptions", () => {
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"));
  const setting = pkg.contributes.configuration.properties["pi.approvalPolicy"];
  const fromSetting = new Map<string, string>(setting.enum.map((v: string, i: number) => [v, setting.enumDescriptions[i]]));
  assert.deepEqual(
    POLICY_ITEMS.map((p) => [p.label, p.description]),
    ["ask", "auto-edit", "approve-all", "default"].map((v) => [v, fromSetting.get(v)]),
  );
});

test("Set Approval Policy says where the choice goes and what wins over it; the settings files keep their other keys", async () => {
  const { scopeItems, writePiSetting } = await import("../../src/extension/policy");
  const { writeFileSync } = await import("node:fs");
  const { join } = await import("node:path");
  assert.deepEqual(
    scopeItems(true, "ask", "/w/.pi/settings.json", "/h/.pi/agent/settings.json").map((i) => [i.label, i.description, i.detail, i.scope]),
    [
      ["This session only", "until it closes", "Wins over every settings file; other and new sessions keep theirs.", "session"],
      ["This workspace", "/w/.pi/settings.json", `approvalPolicy in the project's Pi settings: new sessions of this workspace (now: the editor's pi.approvalPolicy "ask" wins over it).`, "workspace"],
      ["Your Pi settings", "/h/.pi/agent/settings.json", `approvalPolicy in your own Pi settings: every workspace without its own (now: the editor's pi.approvalPolicy "ask" wins over it).`, "user"],
    ],
  );
  // No session open: no session scope; no editor setting: nothing wins over the files.
  assert.deepEqual(scopeItems(false, "default", "/w/p", "/h/u").map((i) => [i.scope, i.detail.includes("wins over it")]), [["workspace", false], ["user", false]]);
  const dir = tempDir("pi-policy-");
  const file = join(dir, ".pi", "settings.json");
  writePiSetting(file, "approvalPolicy", "ask");
  assert.equal(readFileSync(file, "utf8"), '{\n  "approvalPolicy": "ask"\n}\n');
  writeFileSync(file, '{"defaultModel": "m", "approvalPolicy": "ask"}');
  writePiSetting(file, "approvalPolicy", "approve-all");
  assert.deepEqual(JSON.parse(readFileSync(file, "utf8")), { defaultModel: "m", approvalPolicy: "approve-all" });
  writePiSetting(file, "approvalPolicy", undefined);
  assert.deepEqual(JSON.parse(readFileSync(file, "utf8")), { defaultModel: "m" });
  writeFileSync(file, "[1]");
  assert.throws(() => writePiSetting(file, "approvalPolicy", "ask"), /does not hold a JSON object/);
  assert.equal(readFileSync(file, "utf8"), "[1]");
});

test("Set What Agent Edits Do With Unsaved Changes uses the pi.saveUserChanges setting's words and says which file and what wins over it", async () => {
  const { SAVE_ITEMS, saveScopeItems } = await import("../../src/extension/policy");
  const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"));
  const setting = pkg.contributes.configuration.properties["pi.saveUserChanges"];
  const fromSetting = new Map<string, string>(setting.enum.map((v: string, i: number) => [v, setting.enumDescriptions[i]]));
  assert.deepEqual(
    SAVE_ITEMS.map((p) => [p.label, p.description]),
    ["ask", "always", "never", "default"].map((v) => [v, fromSetting.get(v)]),
  );
  assert.deepEqual(
    pkg.contributes.commands.filter((c: { command: string }) => c.command === "pi.setSaveUserChanges"),
    [{ command: "pi.setSaveUserChanges", title: "Set What Agent Edits Do With Unsaved Changes", category: "Pi" }],
  );
  assert.deepEqual(
    saveScopeItems("never", "/w/.pi/settings.json", "/h/.pi/agent/settings.json").map((i) => [i.label, i.description, i.detail, i.scope]),
    [
      ["This workspace", "/w/.pi/settings.json", `saveUserChanges in the project's Pi settings: from the next agent edit (now: the editor's pi.saveUserChanges "never" wins over it).`, "workspace"],
      ["Your Pi settings", "/h/.pi/agent/settings.json", `saveUserChanges in your own Pi settings: every workspace without its own (now: the editor's pi.saveUserChanges "never" wins over it).`, "user"],
    ],
  );
  // No folder open: the user's settings only; the editor's setting at "default" wins over nothing.
  assert.deepEqual(saveScopeItems("default", "", "/h/u").map((i) => [i.scope, i.detail.includes("wins over it")]), [["user", false]]);
});
