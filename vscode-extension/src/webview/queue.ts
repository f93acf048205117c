/**
 * The queue under the transcript: steering and follow-up messages waiting for the run
 * (`agent/queueUpdate`), each editable (`agent/queue/edit`) and removable (`agent/queue/remove`)
 * while it is still queued.
 */
import { el } from "./dom";
import { errorMessage, log, request } from "./rpc";
import { store } from "./state";
import { applyQueueUpdate, type QueueItem } from "./store";
import { schedule } from "./view";

export const queueList = el("ul", "queue");
queueList.setAttribute("aria-label", "Queued messages");

let queueDirty = false;

/** The queue changed outside the store's version (drawn at the next render). */
export function markQueueDirty(): void {
  queueDirty = true;
}

/** Draws the queue when {@link markQueueDirty} said it changed. */
export function renderQueueIfDirty(): void {
  if (!queueDirty) return;
  queueDirty = false;
  renderQueue();
}

/** Draws the queued and delivered messages. */
export function renderQueue(): void {
  queueList.textContent = "";
  const items = [...store.queue.values()].filter((q) => q.state === "queued" || q.state === "delivered");
  queueList.hidden = items.length === 0;
  for (const q of items) queueList.append(queueRow(q));
}

function queueRow(q: QueueItem): HTMLLIElement {
  const li = el("li", "queue-item");
  li.dataset.queueId = q.queueId;
  li.dataset.state = q.state;
  li.append(el("span", "queue-delivery", q.delivery === "followUp" ? "follow-up" : q.delivery), el("span", "queue-text", q.text), el("span", "queue-state", q.state));
  if (q.state === "queued") {
    const edit = el("button", "link", "Edit");
    edit.type = "button";
    edit.addEventListener("click", () => {
      const field = el("input", "queue-edit");
      field.value = q.text;
      field.setAttribute("aria-label", "Edit queued message");
      li.querySelector(".queue-text")!.replaceWith(field);
      field.focus();
      field.addEventListener("keydown", async (e) => {
        if (e.key === "Escape") {
          e.stopPropagation();
          renderQueue();
        } else if (e.key === "Enter") {
          e.preventDefault();
          const text = field.value.trim();
          const sessionId = store.sessionId;
          if (!text || !sessionId) return;
          try {
            const r = await request("agent/queue/edit", { sessionId, queueId: q.queueId, text });
            if (r.edited) applyQueueUpdate(store, { queueId: q.queueId, text });
          } catch (err) {
            log("warn", `agent/queue/edit: ${errorMessage(err)}`);
          }
          queueDirty = true;
          schedule();
        }
      });
    });
    const remove = el("button", "link", "Remove");
    remove.type = "button";
    remove.addEventListener("click", async () => {
      const sessionId = store.sessionId;
      if (!sessionId) return;
      try {
        const r = await request("agent/queue/remove", { sessionId, queueId: q.queueId });
        if (r.removed) applyQueueUpdate(store, { queueId: q.queueId, state: "removed" });
      } catch (err) {
        log("warn", `agent/queue/remove: ${errorMessage(err)}`);
      }
      queueDirty = true;
      schedule();
    });
    li.append(edit, remove);
  }
  return li;
}
