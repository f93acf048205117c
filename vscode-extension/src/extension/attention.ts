/**
 * Which sessions need the user (`agent/attention`, docs/protocol.md): the status bar's flag
 * (CLIENTS.md VF4, as NF5's statusline flag in Neovim) and the notifications for a session no
 * visible panel shows. No `vscode` import, so it runs under `node --test`.
 *
 * Rules:
 * - `agent/attention` for a session a visible panel shows is seen already: no flag.
 * - Otherwise the session is flagged with the reason and message (a later one replaces it).
 * - A flag goes when a panel on the session is shown, when its run starts again
 *   (`agent_start`), when the last question of a `permission` / `question` flag is answered
 *   (the answer may come from the notification), or when the user opens it from the flag.
 * - The chat view's badge ({@link viewBadge}; VS Code shows it on the activity bar's Pi icon)
 *   counts what needs the user in the session the view shows: its open questions, and its flag
 *   (a run that finished or failed while no visible panel showed it).
 */

/** One flagged session. */
export interface Flag {
  sessionId: string;
  /** `finished`, `failed`, `permission`, `question`, or a reason this client does not know. */
  reason: string;
  message: string;
  /** When the flag was raised (ms, the caller's clock). */
  at: number;
}

export class AttentionList {
  private readonly flags = new Map<string, Flag>();
  /** Called after every change of the list. */
  onChange: () => void = () => {};

  /** An `agent/attention` notification; `seen`: a visible panel shows that session. Returns
   * whether it raised a flag. */
  attention(params: { sessionId?: unknown; reason?: unknown; message?: unknown }, seen: boolean, now: number): boolean {
    if (typeof params.sessionId !== "string" || seen) return false;
    this.flags.set(params.sessionId, { sessionId: params.sessionId, reason: String(params.reason ?? "attention"), message: String(params.message ?? ""), at: now });
    this.onChange();
    return true;
  }

  /** The session is in front of the user (a panel on it was shown or focused). */
  seen(sessionId: string | null): void {
    if (sessionId && this.flags.delete(sessionId)) this.onChange();
  }

  /** A run of the session started: what it asked for before is over. */
  runStarted(sessionId: string): void {
    if (this.flags.delete(sessionId)) this.onChange();
  }

  /** The session's open questions changed to `open`: with none left, a question's flag goes. */
  questions(sessionId: string, open: number): void {
    const f = this.flags.get(sessionId);
    if (open === 0 && f && (f.reason === "permission" || f.reason === "question")) {
      this.flags.delete(sessionId);
      this.onChange();
    }
  }

  /** Flagged sessions, newest first. */
  list(): Flag[] {
    return [...this.flags.values()].sort((a, b) => b.at - a.at);
  }

  get size(): number {
    return this.flags.size;
  }
}

/** The flag's status bar text and tooltip (empty text: no flag shown). `name` gives a session's
 * display name. */
export function flagText(flags: Flag[], name: (sessionId: string) => string): { text: string; tooltip: string } {
  if (flags.length === 0) return { text: "", tooltip: "" };
  const what = (f: Flag) =>
    f.reason === "finished" ? "finished" : f.reason === "failed" ? "failed" : f.reason === "permission" ? "waits for your approval" : f.reason === "question" ? "asks you" : f.reason;
  const text = flags.length === 1 ? `$(bell-dot) Pi: ${name(flags[0].sessionId)} ${what(flags[0])}` : `$(bell-dot) Pi: ${flags.length} sessions need you`;
  const tooltip = flags.map((f) => `${name(f.sessionId)} ${what(f)}${f.message ? `: ${f.message}` : ""}`).join("\n") + "\nClick to open";
  return { text, tooltip };
}

/** The chat view's badge (`WebviewView.badge`) for the session it shows, named `name`: one for
 * each open question (`permission` / `question`, answered or withdrawn: gone) and one for a
 * `finished` / `failed` (or unknown) flag; `undefined` when nothing needs the user. */
export function viewBadge(name: string, open: { permission: number; question: number }, flag: Flag | undefined): { value: number; tooltip: string } | undefined {
  const lines: string[] = [];
  if (open.permission) lines.push(`${name} waits for your approval${open.permission > 1 ? ` (${open.permission} questions)` : ""}`);
  if (open.question) lines.push(`${name} asks you${open.question > 1 ? ` (${open.question} questions)` : ""}`);
  const flagged = flag && flag.reason !== "permission" && flag.reason !== "question" ? flag : undefined;
  if (flagged) lines.push(`${name} ${flagged.reason}${flagged.message ? `: ${flagged.message}` : ""}`);
  const value = open.permission + open.question + (flagged ? 1 : 0);
  return value ? { value, tooltip: lines.join("\n") } : undefined;
}
