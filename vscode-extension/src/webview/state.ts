/**
 * The panel's state shared by its parts: the session's store (store.ts; replaced when another
 * session loads), what the host said it can do, the composer's context items and mode, and the
 * webview state VS Code keeps for a reload ({@link saveState}).
 */
import type { ContextItem, InitCapabilities, WebviewState } from "../shared/messages";
import { input } from "./composer";
import { saved, vscode } from "./rpc";
import { createStore, type Store } from "./store";
import { transcript } from "./view";

/** The store of the session the panel shows (replaced by {@link replaceStore}). */
export let store: Store = createStore(saved?.sessionId ?? null);

/** Shows another store (another session, or a new one). */
export function replaceStore(s: Store): void {
  store = s;
}

/** Panel-wide settings and the composer's state. */
export const ui = {
  /** What the host said it does (`init`). */
  capabilities: {} as InitCapabilities,
  /** Editor context attached to the next prompt (chips). */
  contextItems: (saved?.context ?? []) as ContextItem[],
  /** What Enter does while a run goes on. */
  mode: "steer" as "steer" | "followUp",
  /** The session's `/` commands, asked for once per session. */
  commandsCache: null as { name: string; description?: string }[] | null,
};

let savedFromBottom = 0;

/** The transcript's distance from the bottom last saved (0: pinned to the end). */
export function savedScroll(): number {
  return savedFromBottom;
}

/** More of the webview state from other parts (features.ts: plan, prompt history, snapshot). */
export const stateParts: (() => Partial<WebviewState>)[] = [];

/** Saves the webview state: session, draft, scroll position, context items, {@link stateParts}. */
export function saveState(): void {
  savedFromBottom = transcript.atBottom ? 0 : transcript.fromBottom();
  const more = Object.assign({}, ...stateParts.map((f) => f()));
  vscode.setState({ ...more, sessionId: store.sessionId, draft: input.value, scrollFromBottom: savedFromBottom, context: ui.contextItems });
}
