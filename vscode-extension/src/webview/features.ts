/**
 * Round-2 parts of the panel (issues 30 and 31), wired into the others by small hooks: the plan
 * strip and its header switch (plan.ts), Retry / Continue and ↑ recall (recovery.ts), the
 * session's last screen kept for a reload (snapshot.ts), and the active editor's "auto" chip
 * (`editorContext`, the `pi.context.activeEditor` setting).
 */
import type { ContextItem, ServerNotification } from "../shared/messages";
import { input } from "./composer";
import { isPlanState, PlanView } from "./plan";
import { showError } from "./questions";
import { PromptHistory, RecoveryBar } from "./recovery";
import { errorMessage, log, request, saved } from "./rpc";
import { takeSnapshot, type Snapshot } from "./snapshot";
import { saveState, stateParts, store, replaceStore } from "./state";
import { applyHistoryPage, asObject, createStore, eventType, historyEntry, type HistoryEntry } from "./store";
import { cards } from "./questions";
import { loadSession } from "./session";
import { Turns } from "./turns";
import { schedule } from "./view";

/** The plan strip above the composer; `plan.toggle` is the header's switch. */
export const plan = new PlanView(
  (enabled) => (store.sessionId ? request("agent/plan/set", { sessionId: store.sessionId, enabled }) : Promise.reject(new Error("no session"))),
  saved?.planCollapsed ?? false,
  () => saveState(),
  (m) => showError(m),
);

/** Prompts sent before, for ↑ / ↓. */
export const history = new PromptHistory(saved?.history);

/** Retry / Continue above the composer. */
export const recovery = new RecoveryBar({
  continueRun: () => (store.sessionId ? request("agent/continue", { sessionId: store.sessionId }) : Promise.reject(new Error("no session"))),
  composer: () => input.value,
  setComposer: (t) => {
    input.value = t;
    saveState();
  },
  showError: (m) => showError(m),
});

/** Edit an earlier message / Rewind to here (turns.ts). */
export const turns = new Turns({
  store: () => store,
  request: (method, params) => request(method, params),
  reload: (sessionId) => loadSession(sessionId),
  composer: () => input,
  saveState: () => saveState(),
  showCard: (c) => cards.append(c),
  showError: (m) => showError(m),
});

/** The session's last screen kept for a reload. */
let lastScreen: Snapshot | null = saved?.snapshot && saved.snapshot.sessionId === saved.sessionId ? { sessionId: saved.snapshot.sessionId, entries: saved.snapshot.entries.map(historyEntry) } : null;
/** The session whose snapshot the store shows until the server's page replaces it. */
let showingSnapshot: string | null = null;

stateParts.push(() => ({ planCollapsed: plan.el.classList.contains("collapsed"), history: history.items, ...(lastScreen ? { snapshot: lastScreen } : {}) }));

/** At boot, after a reload: the session's last screen at once, before the host answers. */
export function showSnapshotAtBoot(): void {
  if (!lastScreen || saved?.sessionId !== lastScreen.sessionId) return;
  replaceStore(createStore(lastScreen.sessionId));
  applyHistoryPage(store, { entries: lastScreen.entries, hasMore: false }, false);
  showingSnapshot = lastScreen.sessionId;
  schedule();
}

/** A session starts loading: true when the store shows its snapshot (keep it: the page
 * replaces its rows in place). */
export function keepSnapshotFor(sessionId: string | null): boolean {
  const keep = !!sessionId && showingSnapshot === sessionId;
  showingSnapshot = null;
  if (keep) {
    store.oldestEntryId = null;
    store.hasMore = false;
  }
  plan.update(null);
  if (sessionId) {
    void request("agent/plan/get", { sessionId }).then(
      (p) => void (store.sessionId === sessionId && isPlanState(p) && plan.update(p)),
      (e: unknown) => log("info", `agent/plan/get: ${errorMessage(e) ?? String(e)}`),
    );
  }
  return keep;
}

/** The newest page of `sessionId` arrived. */
export function newestPage(sessionId: string, entries: HistoryEntry[]): void {
  lastScreen = takeSnapshot(sessionId, entries);
  saveState();
}

/** The session finished loading (its state and last page). */
export function sessionLoaded(sessionId: string): void {
  if (store.sessionId === sessionId) recovery.update(store, false);
}

/** Keeps the session's newest entries for a reload (after each run). */
function refreshSnapshot(sessionId: string): void {
  void request("agent/session/history", { sessionId, limit: 30 }).then(
    (page) => {
      if (store.sessionId === sessionId) newestPage(sessionId, (page.entries ?? []).map(historyEntry));
    },
    () => {},
  );
}

/** A batch of notifications: `agent/plan` for the strip (false: not the store's). */
export function notification(n: ServerNotification): boolean {
  if (n.method === "agent/plan") {
    if (isPlanState(n.params) && (n.params.sessionId === store.sessionId || !store.sessionId)) plan.update(n.params);
    return true;
  }
  if (n.method === "agent/event" && eventType(n.params.event) === "agent_end" && store.sessionId && n.params.sessionId === store.sessionId) refreshSnapshot(store.sessionId);
  return false;
}

/** After a batch of notifications was applied. */
export function notificationsApplied(): void {
  recovery.update(store, true);
}

// ---- the active editor's chip ---------------------------------------------------------------
let autoItem: ContextItem | null = null;
let autoRemoved: string | null = null;
const autoKey = (c: ContextItem) => `${c.kind}:${c.path}:${c.range?.startLine}-${c.range?.endLine}`;

/** The host's `editorContext`. */
export function setEditorContext(item: ContextItem | null): void {
  autoItem = item;
}

/** The active editor's item when it goes with the next prompt (not removed). */
export function autoContext(): ContextItem | null {
  return autoItem && autoKey(autoItem) !== autoRemoved ? autoItem : null;
}

/** The user removed the auto chip: it stays out until the editor's context changes. */
export function removeAutoContext(): void {
  if (autoItem) autoRemoved = autoKey(autoItem);
}
