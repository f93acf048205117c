/**
 * The last screen of the session, kept in the webview state (issue 30 item 11): after Reload
 * Window the panel shows the session it showed at once, from this copy, before the host and the
 * server answer; the server's history page then replaces it in place (same rows, keyed by the
 * messages' ids), so nothing blank and no "new session" is seen meanwhile.
 *
 * Kept small: the newest {@link SNAPSHOT_ENTRIES} history entries, a tool result's text cut to
 * {@link SNAPSHOT_TEXT} characters, at most {@link SNAPSHOT_BYTES} of JSON (the oldest entries
 * go first).
 */
import { asObject, type HistoryEntry } from "./store";

export const SNAPSHOT_ENTRIES = 30;
export const SNAPSHOT_TEXT = 4000;
export const SNAPSHOT_BYTES = 200_000;

/** The copy kept in the webview state. */
export interface Snapshot {
  sessionId: string;
  entries: HistoryEntry[];
}

function cut(text: unknown): unknown {
  return typeof text === "string" && text.length > SNAPSHOT_TEXT ? `${text.slice(0, SNAPSHOT_TEXT)}…` : text;
}

/** An entry made small: long texts of tool results and bash executions cut, images left out. */
function small(e: HistoryEntry): HistoryEntry {
  if (e.message === null || typeof e.message !== "object") return e;
  const m = asObject(e.message);
  if (m.role !== "toolResult" && m.role !== "bashExecution") return e;
  const content = Array.isArray(m.content) ? m.content.map(asObject).filter((b) => b.type === "text").map((b) => ({ ...b, text: cut(b.text) })) : m.content;
  return { ...e, message: { ...m, content, output: cut(m.output), details: undefined } };
}

/** The snapshot of a session's newest entries (oldest first), within the size limits. */
export function takeSnapshot(sessionId: string, entries: HistoryEntry[]): Snapshot {
  const out: HistoryEntry[] = [];
  let bytes = 0;
  for (let i = entries.length - 1; i >= 0 && out.length < SNAPSHOT_ENTRIES; i--) {
    const e = small(entries[i]!);
    const n = JSON.stringify(e).length;
    if (bytes + n > SNAPSHOT_BYTES) break;
    bytes += n;
    out.push(e);
  }
  return { sessionId, entries: out.reverse() };
}
