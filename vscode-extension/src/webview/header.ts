/**
 * The panel's header: the model and thinking pickers (pickers.ts), the context meter with the
 * session's cost, the run's state ("Waiting for model", "Waiting for you"…), Compact and New
 * session; under it the attention banner (`agent/attention`, store.ts `applyAttention`).
 */
import { compact, modeText, newSession, sendButton, stopButton } from "./composer";
import { el, setText } from "./dom";
import { modelSelect, thinkingSelect } from "./pickers";
import { openQuestions, cards } from "./questions";
import { store, ui } from "./state";
import { dismissAttention, type Attention, type Store } from "./store";
import { app, schedule, sending } from "./view";

export const header = el("div", "header");
const meter = el("div", "meter");
meter.setAttribute("role", "meter");
meter.setAttribute("aria-label", "Context used");
const meterBar = el("div", "meter-bar");
const meterFill = el("div", "meter-fill");
meterBar.append(meterFill);
const meterText = el("span", "meter-text", "ctx –");
meter.append(meterBar, meterText);
/** The run's state in words. */
export const statusText = el("span", "status", "idle");
statusText.setAttribute("role", "status");
// "+" as in the view's title bar (a word would not fit beside the meter in a narrow side bar).
const newButton = el("button", "icon new-session", "+");
newButton.type = "button";
newButton.title = "New session";
newButton.setAttribute("aria-label", "New session");
const compactButton = el("button", "icon", "Compact");
compactButton.type = "button";
compactButton.title = "Compact the context";
newButton.addEventListener("click", () => newSession());
compactButton.addEventListener("click", () => void compact());

/** Lays the header out (at boot: the pickers are another module's). Two rows (a side bar is
 * narrow): the pickers, then the meter, the state and the actions. */
export function layoutHeader(): void {
  const headerTop = el("div", "header-row");
  const headerBottom = el("div", "header-row");
  headerTop.append(modelSelect, thinkingSelect);
  const headerState = el("div", "header-state");
  const headerActions = el("div", "header-actions");
  headerState.append(meter, statusText);
  headerActions.append(compactButton, newButton);
  headerBottom.append(headerState, headerActions);
  header.append(headerTop, headerBottom);
}

/** What needs the user (`agent/attention`, store.ts `applyAttention`): a banner under the
 * header until it is handled. */
export const attentionBar = el("div", "attention");
attentionBar.hidden = true;
attentionBar.setAttribute("role", "status");
const attentionTitle = el("span", "attention-title");
const attentionText = el("span", "attention-text");
const attentionButton = el("button", "link attention-action");
attentionButton.type = "button";
attentionBar.append(attentionTitle, attentionText, attentionButton);
attentionButton.addEventListener("click", () => {
  const a = store.attention;
  if (a && (a.reason === "permission" || a.reason === "question")) {
    // The user's own click: the open question takes focus (the card, not one of its answers:
    // the next key typed must not answer it, deliberate.ts); Tab reaches its answers.
    const b = cards.querySelector<HTMLElement>(".card[data-request-id]:not(.answered)");
    if (b) b.tabIndex = -1;
    b?.scrollIntoView({ block: "nearest" });
    b?.focus();
    return;
  }
  dismissAttention(store);
  schedule();
});

let shownAttention: Attention | null = null;
/** The attention banner for `store.attention` (only when it changed). */
export function renderAttention(): void {
  const a = store.attention;
  if (a === shownAttention) return;
  shownAttention = a;
  attentionBar.hidden = !a;
  if (!a) {
    delete attentionBar.dataset.reason;
    return;
  }
  attentionBar.dataset.reason = a.reason;
  const [title, action] =
    a.reason === "permission"
      ? ["Waiting for your approval", "Show"]
      : a.reason === "question"
        ? ["Pi asks you", "Show"]
        : a.reason === "finished"
          ? ["Finished while the panel was hidden", "Dismiss"]
          : a.reason === "failed"
            ? ["The run failed", "Dismiss"]
            : ["Pi needs you", "Dismiss"];
  attentionBar.setAttribute("role", a.reason === "failed" ? "alert" : "status");
  attentionTitle.textContent = title;
  attentionText.textContent = a.message;
  attentionText.title = a.message;
  attentionButton.textContent = action;
}

/** Whether the run waits on the model with nothing to show yet (no text or thinking of the
 * answer streamed, no tool running): a slow or stalled provider reads as such, not as work. */
function modelSilent(): boolean {
  if (store.streamingId) {
    const a = store.items.get(store.streamingId);
    return !(a?.kind === "assistant" && a.blocks.some((b) => b && (b.type === "thinking" || b.text.length > 0)));
  }
  // The tools of the turn are at the end of the transcript.
  for (let i = store.order.length - 1, n = 0; i >= 0 && n < 30; i--, n++) {
    const it = store.items.get(store.order[i]!);
    if (it?.kind === "tool" && (it.state === "running" || it.state === "pending")) return false;
    if (it?.kind === "user") break;
  }
  return true;
}

/** A cost as the status bar shows it: cents, or four decimals below a cent. */
function dollars(v: number): string {
  return `$${v > 0 && v < 0.01 ? v.toFixed(4) : v.toFixed(2)}`;
}

let lastUsage: Store["usage"] = null;
/** The run's state (header, Stop, Send's label, the mode line) and the context meter. */
export function renderStatus(): void {
  const state = store.stopping ? "stopping" : store.running ? "running" : "idle";
  setText(statusText, state === "stopping" ? "Stopping…" : state === "running" ? (openQuestions.size ? "Waiting for you" : modelSilent() ? "Waiting for model" : "Running") : sending.hidden ? "Idle" : "Sending…");
  if (statusText.title !== statusText.textContent) statusText.title = statusText.textContent ?? "";
  if (app.dataset.state !== state) app.dataset.state = state;
  const stopDisabled = !store.running || store.stopping;
  if (stopButton.disabled !== stopDisabled) stopButton.disabled = stopDisabled;
  setText(sendButton, store.running ? (ui.mode === "followUp" ? "Follow up" : "Steer") : "Send");
  setText(modeText, store.running ? (ui.mode === "followUp" ? "follow-up (Alt+Enter)" : "steer (Enter) · Alt+Enter: follow-up") : "");
  const u = store.usage;
  if (u && u !== lastUsage && u.contextWindow > 0) {
    lastUsage = u;
    const pct = Math.min(100, (u.contextTokens / u.contextWindow) * 100);
    meterFill.style.width = `${pct.toFixed(1)}%`;
    meter.dataset.level = pct > 85 ? "high" : pct > 60 ? "mid" : "low";
    meterText.textContent = `${pct.toFixed(0)}% · ${dollars(u.sessionCost)}`;
    meter.title = `${u.contextTokens.toLocaleString("en-US")} of ${u.contextWindow.toLocaleString("en-US")} tokens in context; last turn $${u.turnCost.toFixed(4)}; session $${u.sessionCost.toFixed(4)} (${u.sessionTokens.toLocaleString("en-US")} tokens)`;
    meter.setAttribute("aria-valuenow", pct.toFixed(0));
  }
}
