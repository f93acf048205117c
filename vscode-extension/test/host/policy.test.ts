// The approval policies' wording (src/extension/policy.ts): the notification after
// "Pi: Set Approval Policy" and the quick pick, in the setting's words.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { POLICY_ITEMS, policyNotice } from "../../src/extension/policy";

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
