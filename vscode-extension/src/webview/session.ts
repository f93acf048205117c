/**
 * Loading a session into the panel: a fresh store, then its state (`agent/state`), its last
 * usage (`agent/session/stats`) and the last page of its history (`agent/session/history`,
 * older pages as the user scrolls up) asked for at once.
 */
import type { HistoryParams } from "../shared/wire";
import { setModel } from "./pickers";
import { renderQueue } from "./queue";
import { errorCode, errorMessage, log, request, saved } from "./rpc";
import { replaceStore, store, ui } from "./state";
import { applyHistoryPage, applyStats, createStore, entriesFromMessages, historyEntry } from "./store";
import { renderFrame, resetRender, schedule, transcript } from "./view";
import { keepSnapshotFor, newestPage, sessionLoaded } from "./features";

/** History entries asked for per page. */
const PAGE = 50;
let loadingOlder = false;

/** Shows `sessionId` (null: a new session) from its first screen. */
export async function loadSession(sessionId: string | null): Promise<void> {
  const hidden = store.hidden;
  // After a reload the snapshot's rows stay until the server's page replaces them (no blank).
  if (!keepSnapshotFor(sessionId)) {
    replaceStore(createStore(sessionId));
    transcript.clear();
    resetRender();
  }
  store.hidden = hidden;
  ui.commandsCache = null;
  renderQueue();
  schedule();
  if (!sessionId) return;
  // State and the last page are asked for at once (the last screen is one round trip away).
  const stateP = request("agent/state", { sessionId }).then(
    (state) => {
      if (store.sessionId !== sessionId) return;
      // Run events that arrived meanwhile are newer than this answer.
      if (!store.runSeen) {
        store.running = Boolean(state.isStreaming);
        store.runId = state.runId ?? null;
      }
      store.version++;
      setModel(state.model, state.thinkingLevel);
      schedule();
    },
    (e: unknown) => log("warn", `agent/state: ${errorMessage(e)}`),
  );
  // The meter of a session opened again (window reload, another session): its last usage.
  const statsP = request("agent/session/stats", { sessionId }).then(
    (st) => {
      if (store.sessionId !== sessionId) return;
      applyStats(store, st);
      schedule();
    },
    (e: unknown) => log("warn", `agent/session/stats: ${errorMessage(e)}`),
  );
  await Promise.all([stateP, statsP, loadPage(sessionId, false)]);
  sessionLoaded(sessionId);
  if (saved?.sessionId === sessionId && saved.scrollFromBottom > 0) {
    renderFrame();
    transcript.restore(saved.scrollFromBottom);
  }
}

async function loadPage(sessionId: string, older: boolean): Promise<void> {
  const params: HistoryParams = { sessionId, limit: PAGE };
  if (older && store.oldestEntryId) params.beforeEntryId = store.oldestEntryId;
  try {
    const page = await request("agent/session/history", params);
    if (store.sessionId !== sessionId) return;
    applyHistoryPage(store, { entries: page.entries ?? [], hasMore: Boolean(page.hasMore) }, older);
    if (!older) newestPage(sessionId, (page.entries ?? []).map(historyEntry));
  } catch (e) {
    if (errorCode(e) === -32601 && !older) {
      // A server without paged history: show the active branch's messages.
      const m = await request("agent/messages", { sessionId });
      applyHistoryPage(store, { entries: entriesFromMessages(m), hasMore: false }, false);
    } else log("warn", `agent/session/history: ${errorMessage(e)}`);
  }
  schedule();
}

/** The transcript reached its top: the page before it (one at a time). */
export function loadOlder(): void {
  if (loadingOlder || !store.hasMore || !store.sessionId) return;
  loadingOlder = true;
  const sid = store.sessionId;
  void loadPage(sid, true).finally(() => {
    loadingOlder = false;
  });
}
