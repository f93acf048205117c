/**
 * The cards area: the server's questions to the user (`agent/requestPermission`,
 * `agent/ui/request`, built by cards.ts), marked stale when their file changes, removed when
 * answered here or elsewhere; and error cards. While a question is open the header says the
 * run waits for the user and the tool call it is about shows as awaiting.
 */
import type { HostToWebview } from "../shared/messages";
import { permissionCard, uiCard } from "./cards";
import { deliberate } from "./deliberate";
import { plan } from "./features";
import { isPlanQuestion, planQuestionCard } from "./plan";
import { input } from "./composer";
import { el } from "./dom";
import { renderStatus } from "./header";
import { post } from "./rpc";
import { store } from "./state";
import { asObject, questionsAnswered, setAwaiting } from "./store";
import { schedule } from "./view";

export const cards = el("div", "cards");
cards.setAttribute("aria-live", "polite");

/** Open permission questions of this panel: request id → the tool call they are about. */
const awaitingCalls = new Map<number, string>();
/** Every question (permission or extension UI) open in this panel: the header says the run
 * waits for the user. */
export const openQuestions = new Set<number>();

function questionClosed(requestId: number): void {
  if (openQuestions.delete(requestId)) {
    renderStatus();
    if (openQuestions.size === 0) {
      questionsAnswered(store);
      schedule();
    }
  }
  const call = awaitingCalls.get(requestId);
  if (call === undefined) return;
  awaitingCalls.delete(requestId);
  setAwaiting(store, call, false);
  schedule();
}

const cardHost = {
  answer(requestId: number, result: unknown) {
    questionClosed(requestId);
    post({ type: "serverResponse", requestId, result });
    const c = cards.querySelector(`[data-request-id="${requestId}"]`);
    c?.remove();
    input.focus({ preventScroll: true });
  },
  openDiff(toolCallId: string, path: string) {
    post({ type: "openDiff", toolCallId, path });
  },
};

/** Shows a server question (once: the host may post the open ones again, e.g. on a re-attach). */
export function showQuestion(msg: Extract<HostToWebview, { type: "serverRequest" }>): void {
  if (openQuestions.has(msg.requestId)) return;
  const card =
    msg.method === "agent/requestPermission"
      ? permissionCard(msg.requestId, msg.params, cardHost)
      : isPlanQuestion(msg.params)
        ? planQuestionCard(msg.requestId, msg.params, plan.current, (v) => cardHost.answer(msg.requestId, v === null ? { cancelled: true } : { value: v }))
        : uiCard(msg.requestId, msg.params, cardHost);
  // Answered only on purpose (deliberate.ts).
  cards.append(deliberate(card));
  openQuestions.add(msg.requestId);
  renderStatus();
  const call = msg.method === "agent/requestPermission" ? asObject(msg.params).toolCallId : undefined;
  if (typeof call === "string") {
    awaitingCalls.set(msg.requestId, call);
    setAwaiting(store, call, true);
    schedule();
  }
}

/** Says at once, before any answer, that a question's diff no longer matches the file. */
export function questionStale(requestId: number, message: string): void {
  const card = cards.querySelector(`[data-request-id="${requestId}"]`);
  if (card && !card.querySelector(".pi-stale")) {
    const note = document.createElement("div");
    note.className = "pi-stale";
    note.setAttribute("role", "alert");
    note.textContent = message;
    card.insertBefore(note, card.firstChild?.nextSibling ?? null);
  }
}

/** A question answered elsewhere or withdrawn: its card goes. */
export function questionDone(requestId: number): void {
  questionClosed(requestId);
  cards.querySelector(`[data-request-id="${requestId}"]`)?.remove();
}

/** An error card (dismissable). */
export function showError(message: string): void {
  const c = el("div", "card error", message);
  c.setAttribute("role", "alert");
  const x = el("button", "link", "Dismiss");
  x.type = "button";
  x.addEventListener("click", () => c.remove());
  c.append(x);
  cards.append(c);
}
