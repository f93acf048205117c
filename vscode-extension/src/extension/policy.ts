/**
 * The approval policies as the user reads them: the "Pi: Set Approval Policy" quick pick and
 * the notification after a change, in the words of the `pi.approvalPolicy` setting's
 * descriptions (package.json). What each policy asks about: docs/protocol.md, "The approval
 * policy".
 */

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
