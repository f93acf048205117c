/**
 * The approval policies as the user reads them: the "Pi: Set Approval Policy" quick pick and
 * the notification after a change, in the words of the `pi.approvalPolicy` setting's
 * descriptions (package.json). What each policy asks about: docs/protocol.md, "The approval
 * policy".
 */
import * as fs from "node:fs";
import * as path from "node:path";

/** A session's approval policy (`agent/permissions/set`'s `approvalPolicy`). */
export type ApprovalPolicy = "ask" | "auto-edit" | "approve-all";

/** The quick pick's items: the policies, then "default" (the setting's own order after it). */
export const POLICY_ITEMS: readonly { label: ApprovalPolicy | "default"; description: string }[] = [
  { label: "ask", description: "Ask before every tool call (edits with their diff)" },
  { label: "auto-edit", description: "File edits land in the editor; commands ask" },
  { label: "approve-all", description: "Run every tool call without asking" },
  { label: "default", description: "Settings' approvalPolicy, else auto-edit" },
];

/** The notification once `policy` is in force for the session (the server's answer). */
export function policyNotice(policy: unknown): string {
  switch (policy) {
    case "ask":
      return "Pi will ask before every tool call in this session (edits with their diff).";
    case "auto-edit":
      return "Pi's file edits will land in the editor in this session; Pi will ask before commands.";
    case "approve-all":
      return "Pi will run every tool call in this session without asking.";
    default:
      return `Pi: approval policy "${String(policy)}" is in force for this session.`;
  }
}

/** Where "Pi: Set Approval Policy" puts the choice. Precedence, first to last: the session's
 * own choice, the editor's `pi.approvalPolicy`, the project's `.pi/settings.json`, the user's
 * Pi settings (docs/protocol.md "Permission requests"). */
export type PolicyScope = "session" | "workspace" | "user";

/** The scope picker's items, each saying what it changes and what wins over it. */
export function scopeItems(hasSession: boolean, editorSetting: string | undefined, projectFile: string, userFile: string): { label: string; description: string; detail: string; scope: PolicyScope }[] {
  const editor = editorSetting && editorSetting !== "default" ? ` (now: the editor's pi.approvalPolicy "${editorSetting}" wins over it)` : "";
  const items: { label: string; description: string; detail: string; scope: PolicyScope }[] = [];
  if (hasSession) items.push({ label: "This session only", description: "until it closes", detail: "Wins over every settings file; other and new sessions keep theirs.", scope: "session" });
  items.push({ label: "This workspace", description: projectFile, detail: `approvalPolicy in the project's Pi settings: new sessions of this workspace${editor}.`, scope: "workspace" });
  items.push({ label: "Your Pi settings", description: userFile, detail: `approvalPolicy in your own Pi settings: every workspace without its own${editor}.`, scope: "user" });
  return items;
}

/** Sets `key` to `value` (`undefined`: removes it) in the JSON object of the Pi settings file
 * `file`, keeping every other key; creates the file (and its folder) when missing. A file that
 * is not a JSON object is an error and is left as it is. */
export function writePiSetting(file: string, key: string, value: unknown): void {
  let obj: Record<string, unknown> = {};
  if (fs.existsSync(file)) {
    const text = fs.readFileSync(file, "utf8");
    const parsed: unknown = text.trim() === "" ? {} : JSON.parse(text);
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error(`${file} does not hold a JSON object`);
    obj = parsed as Record<string, unknown>;
  }
  if (value === undefined) delete obj[key];
  else obj[key] = value;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, `${JSON.stringify(obj, null, 2)}\n`);
}

/** `saveUserChanges` (issue 30 item 1): what an agent edit does with the user's unsaved changes
 * in the file it edits. */
export type SaveUserChanges = "ask" | "always" | "never";

/** "Pi: Set What Agent Edits Do With Unsaved Changes"'s items, in the words of the
 * `pi.saveUserChanges` setting's descriptions (package.json), "default" last. */
export const SAVE_ITEMS: readonly { label: SaveUserChanges | "default"; description: string }[] = [
  { label: "ask", description: "Ask once per file per session whether to save your unsaved changes with the agent's edit" },
  { label: "always", description: "Save the buffer: your unsaved changes with the agent's edit" },
  { label: "never", description: "Keep your changes unsaved: the disk gets only the agent's edit" },
  { label: "default", description: "Pi's settings.json saveUserChanges (project over user), else ask" },
];

/** Where `saveUserChanges` goes: Pi's settings files (the server reads them again at the next
 * agent edit). Precedence, first to last (docs/protocol.md "The user's unsaved changes"): the
 * session's answer for the file, the editor's `pi.saveUserChanges`, the project's
 * `.pi/settings.json`, the user's Pi settings. */
export function saveScopeItems(editorSetting: string | undefined, projectFile: string, userFile: string): { label: string; description: string; detail: string; scope: "workspace" | "user" }[] {
  const editor = editorSetting && editorSetting !== "default" ? ` (now: the editor's pi.saveUserChanges "${editorSetting}" wins over it)` : "";
  const items: { label: string; description: string; detail: string; scope: "workspace" | "user" }[] = [];
  if (projectFile) items.push({ label: "This workspace", description: projectFile, detail: `saveUserChanges in the project's Pi settings: from the next agent edit${editor}.`, scope: "workspace" });
  items.push({ label: "Your Pi settings", description: userFile, detail: `saveUserChanges in your own Pi settings: every workspace without its own${editor}.`, scope: "user" });
  return items;
}
