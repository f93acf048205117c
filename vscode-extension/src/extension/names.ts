/**
 * Display names of sessions for the host's UI (panel titles, the Changes view, the attention
 * flag): the session's name (`agent/session/name`), else its first prompt, else the start of
 * its id. Fed by `agent/state` answers, `agent/session/list` and the first user message of a
 * run. No `vscode` import, so it runs under `node --test`.
 */

/** At most this many characters of a first prompt name a session. */
export const NAME_CHARS = 40;

export class SessionNames {
  private readonly named = new Map<string, string>();
  private readonly prompts = new Map<string, string>();
  /** Called with the session whose display name changed. */
  onChange: (sessionId: string) => void = () => {};

  /** The display name of `sessionId`. */
  get(sessionId: string): string {
    return this.named.get(sessionId) ?? this.prompts.get(sessionId) ?? `session ${sessionId.slice(0, 8)}`;
  }

  /** From `agent/state` (and `agent/session/new|open`, `session` of fork/clone answers). */
  fromState(st: { sessionId?: unknown; sessionName?: unknown } | undefined): void {
    if (typeof st?.sessionId !== "string") return;
    if (typeof st.sessionName === "string" && st.sessionName) this.setName(st.sessionId, st.sessionName);
  }

  /** From `agent/session/list`'s sessions. */
  fromList(sessions: { sessionId: string; name?: string; firstPrompt?: string }[]): void {
    for (const s of sessions) {
      if (s.name) this.setName(s.sessionId, s.name);
      else if (s.firstPrompt && !this.prompts.has(s.sessionId)) this.setPrompt(s.sessionId, s.firstPrompt);
    }
  }

  /** A session was renamed here. */
  setName(sessionId: string, name: string): void {
    const n = oneLine(name);
    if (!n || this.named.get(sessionId) === n) return;
    this.named.set(sessionId, n);
    this.onChange(sessionId);
  }

  /** From an `agent/event` notification: the first user message names an unnamed session. */
  fromEvent(params: any): void {
    const ev = params?.event;
    if (ev?.type !== "message_start" || ev.message?.role !== "user" || typeof params.sessionId !== "string") return;
    if (this.prompts.has(params.sessionId)) return;
    const c = ev.message.content;
    const text = typeof c === "string" ? c : Array.isArray(c) ? c.map((b: any) => (b?.type === "text" ? b.text : "")).join(" ") : "";
    if (text.trim()) this.setPrompt(params.sessionId, text);
  }

  private setPrompt(sessionId: string, text: string): void {
    const n = oneLine(text);
    if (!n) return;
    this.prompts.set(sessionId, n.length > NAME_CHARS ? `${n.slice(0, NAME_CHARS - 1)}…` : n);
    if (!this.named.has(sessionId)) this.onChange(sessionId);
  }
}

function oneLine(s: string): string {
  return s.replace(/\s+/g, " ").trim();
}

/** "just now", "5 min ago", "3 h ago", "yesterday", else the date (for session lists). */
export function relativeTime(ms: number, now = Date.now()): string {
  const d = Math.max(0, now - ms);
  if (d < 60_000) return "just now";
  if (d < 3_600_000) return `${Math.floor(d / 60_000)} min ago`;
  if (d < 86_400_000) return `${Math.floor(d / 3_600_000)} h ago`;
  if (d < 2 * 86_400_000) return "yesterday";
  return new Date(ms).toLocaleDateString();
}
