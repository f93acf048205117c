/**
 * The composer: the prompt field with its context chips (editor selections, files, problems;
 * pasted or dropped images), Send / Steer / Follow up and Stop. Enter sends (while a run goes on:
 * steers, Alt+Enter queues a follow-up), Esc stops. Also the panel's own actions the header and
 * the host's commands share: a new session, `/compact`, abort.
 */
import type { ImageInput, PromptParams, StreamingBehavior } from "../shared/wire";
import { pressShortcut } from "./cards";
import { accessKeyAllowed } from "./deliberate";
import { autoContext, history, recovery, removeAutoContext, turns } from "./features";
import { BUILTIN_COMMANDS, closePopup, popup, popupKey, updateCompletion } from "./completion";
import { el } from "./dom";
import { renderStatus } from "./header";
import { currentModel, pendingModel, setModel } from "./pickers";
import { markQueueDirty } from "./queue";
import { cards, showError } from "./questions";
import { errorMessage, log, post, request } from "./rpc";
import { loadSession } from "./session";
import { saveState, store, ui } from "./state";
import { addQueued, applyAbortReport, dismissAttention, markStopping, promptToRestore } from "./store";
import { hideSending, schedule, showSending } from "./view";

export const composer = el("div", "composer");
const chips = el("div", "chips");
export const input = el("textarea", "input");
input.rows = 3;
input.placeholder = "Ask pi… (@ for files, / for commands)";
input.setAttribute("aria-label", "Message");
const controls = el("div", "controls");
export const modeText = el("span", "mode");
export const sendButton = el("button", "primary send", "Send");
sendButton.type = "button";
export const stopButton = el("button", "secondary stop", "Stop");
stopButton.type = "button";
stopButton.title = "Stop the run (Esc)";
controls.append(modeText, stopButton, sendButton);

/** Lays the composer out (at boot: the popup is another module's). */
export function layoutComposer(): void {
  composer.append(chips, popup, input, controls);
}

let images: { data: string; mimeType: string; name: string }[] = [];

/** Draws the context and image chips. */
export function renderChips(): void {
  chips.textContent = "";
  // The active editor's context (pi.context.activeEditor): marked "auto", goes with each prompt.
  const auto = autoContext();
  if (auto) {
    const c = chip(auto.label, "auto", () => {
      removeAutoContext();
      renderChips();
    });
    c.title = `${auto.path ?? auto.label}: offered with each prompt (pi.context.activeEditor); × leaves it out`;
    c.firstElementChild?.after(el("span", "chip-auto-mark", "auto"));
    chips.append(c);
  }
  ui.contextItems.forEach((c, i) => chips.append(chip(c.label, c.kind, () => {
    ui.contextItems.splice(i, 1);
    renderChips();
    saveState();
  })));
  // An image the current model cannot take is said at once (its `input` lacks "image").
  const model = currentModel;
  const blind = model !== null && Array.isArray(model.input) && !model.input.includes("image");
  images.forEach((img, i) => {
    const c = chip(img.name, "image", () => {
      images.splice(i, 1);
      renderChips();
    });
    if (blind && model) {
      c.classList.add("chip-refused");
      c.title = `${model.name ?? model.id} does not take images: this one would not reach the model (choose a model that reads images, or remove it)`;
      c.append(el("span", "chip-warning", "model cannot see images"));
    }
    chips.append(c);
  });
  chips.hidden = ui.contextItems.length + images.length === 0 && !auto;
}

function chip(label: string, kind: string, remove: () => void): HTMLElement {
  const c = el("span", `chip chip-${kind}`);
  c.append(el("span", undefined, label));
  const x = el("button", "chip-remove", "×");
  x.type = "button";
  x.setAttribute("aria-label", `Remove ${label}`);
  x.addEventListener("click", remove);
  c.append(x);
  return c;
}

function contextPrefix(): string {
  const auto = autoContext();
  return [...(auto ? [auto] : []), ...ui.contextItems]
    .map((c) => {
      if (c.auto && c.kind === "file") return `The user's active file: ${c.path}\n`;
      const where = c.path ? `${c.path}${c.range ? `:${c.range.startLine}-${c.range.endLine}` : ""}` : c.label;
      const what = c.kind === "diagnostics" ? "Problems in" : c.kind === "selection" ? "Selection from" : "File";
      return `${what} ${where}:\n\`\`\`\n${c.text}\n\`\`\`\n`;
    })
    .join("\n");
}

/** Runs `typed` when it is one of Pi's own `/` commands; true when it was. */
function runBuiltin(typed: string): boolean {
  const m = /^\/([\w-]+)(?:\s+([\s\S]*))?$/.exec(typed);
  if (!m || !BUILTIN_COMMANDS.some((c) => c.name === m[1]) || ui.commandsCache?.some((c) => c.name === m[1])) return false;
  input.value = "";
  closePopup();
  saveState();
  if (m[1] === "new") newSession();
  else void compact(m[2]?.trim() || undefined);
  return true;
}

async function send(behavior?: StreamingBehavior): Promise<void> {
  const typed = input.value.trim();
  if (!typed && images.length === 0) return;
  if (images.length === 0 && runBuiltin(typed)) return;
  // An earlier message edited: the session's leaf moves there first (turns.ts).
  if (!(await turns.beforeSend())) return;
  const prefix = contextPrefix();
  const text = prefix ? `${prefix}\n${typed}` : typed;
  const imgs: ImageInput[] = images.map((i) => ({ type: "image", data: i.data, mimeType: i.mimeType }));
  const params: PromptParams = { text };
  if (imgs.length) params.images = imgs;
  if (store.sessionId) params.sessionId = store.sessionId;
  else if (pendingModel) params.model = pendingModel;
  const queued = store.running;
  if (queued) params.streamingBehavior = behavior ?? ui.mode;
  history.push(typed);
  recovery.restoredText = null;
  input.value = "";
  ui.contextItems = [];
  images = [];
  renderChips();
  closePopup();
  saveState();
  if (!queued) showSending(typed || `${imgs.length} image${imgs.length === 1 ? "" : "s"}`);
  try {
    const r = await request("agent/prompt", params);
    if (!store.sessionId && r.sessionId) {
      store.sessionId = r.sessionId;
      post({ type: "attach", sessionId: r.sessionId });
      saveState();
      if (!currentModel) void request("agent/state", { sessionId: r.sessionId }).then((s) => setModel(s.model, s.thinkingLevel), () => {});
    }
    if (r.queued && r.queueId) {
      addQueued(store, r.queueId, params.streamingBehavior ?? ui.mode, typed);
      markQueueDirty();
      schedule();
    }
  } catch (e) {
    // Nothing was sent: the text goes back to the composer.
    hideSending();
    if (!input.value) input.value = typed;
    log("error", `agent/prompt: ${errorMessage(e)}`);
    showError(errorMessage(e) ?? String(e));
  }
}

/** Stops the run (`agent/abort`); the prompt that never reached the model comes back. */
export async function abort(): Promise<void> {
  if (!store.running || !store.sessionId) return;
  markStopping(store);
  renderStatus(); // "stopping" at once, not at the next frame
  try {
    const report = await request("agent/abort", { sessionId: store.sessionId });
    const restore = promptToRestore(store);
    applyAbortReport(store, report);
    if (restore !== null && !input.value.trim()) {
      input.value = restore;
      saveState();
    }
  } catch (e) {
    log("error", `agent/abort: ${errorMessage(e)}`);
    store.stopping = false;
    store.version++;
  }
  schedule();
}

/** Shows a new session (created by its first prompt). */
export function newSession(): void {
  post({ type: "attach", sessionId: null });
  void loadSession(null);
  saveState();
}

/** `agent/compact` with optional instructions of what the summary must keep. */
export async function compact(instructions?: string): Promise<void> {
  if (!store.sessionId) return;
  try {
    await request("agent/compact", instructions ? { sessionId: store.sessionId, instructions } : { sessionId: store.sessionId });
  } catch (e) {
    showError(`Compaction: ${errorMessage(e) ?? e}`);
  }
}

/** Inserts text at the caret (the host's `insertText` command). */
export function insertText(t: string): void {
  const at = input.selectionStart ?? input.value.length;
  input.value = input.value.slice(0, at) + t + input.value.slice(input.selectionEnd ?? at);
  input.setSelectionRange(at + t.length, at + t.length);
  saveState();
}

sendButton.addEventListener("click", () => void send());
stopButton.addEventListener("click", () => void abort());

input.addEventListener("input", () => {
  saveState();
  // Typing here: the user is back (a run that finished while the panel was hidden is seen).
  if (store.attention?.reason === "finished") {
    dismissAttention(store, true);
    schedule();
  }
  if (/[@/]/.test(input.value) || !popup.hidden) void updateCompletion();
});

input.addEventListener("keydown", (e) => {
  if (popupKey(e)) return;
  // ↑ / ↓ on the first / last line: earlier prompts (recovery.ts).
  if ((e.key === "ArrowUp" || e.key === "ArrowDown") && !e.shiftKey && !e.altKey && !e.ctrlKey && !e.metaKey && !e.isComposing && history.move(input, e.key === "ArrowUp" ? -1 : 1)) {
    e.preventDefault();
    saveState();
    return;
  }
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    const behavior = store.running ? (e.altKey || e.metaKey ? "followUp" : ui.mode) : undefined;
    void send(behavior);
  }
});

input.addEventListener("paste", (e) => {
  const files = [...(e.clipboardData?.files ?? [])].filter((f) => /^image\/(png|jpeg|gif|webp)$/.test(f.type));
  if (!files.length) return;
  e.preventDefault();
  for (const f of files) addImage(f);
});
composer.addEventListener("dragover", (e) => e.preventDefault());
composer.addEventListener("drop", (e) => {
  const files = [...(e.dataTransfer?.files ?? [])].filter((f) => /^image\/(png|jpeg|gif|webp)$/.test(f.type));
  if (!files.length) return;
  e.preventDefault();
  for (const f of files) addImage(f);
});

function addImage(f: File): void {
  const reader = new FileReader();
  reader.onload = () => {
    const url = String(reader.result);
    const comma = url.indexOf(",");
    images.push({ data: url.slice(comma + 1), mimeType: f.type, name: f.name || `image.${f.type.split("/")[1]}` });
    renderChips();
  };
  reader.readAsDataURL(f);
}

document.addEventListener("keydown", (e) => {
  if (e.altKey && !e.ctrlKey && !e.metaKey && !e.shiftKey && accessKeyAllowed(e) && pressShortcut(cards, e.code)) {
    e.preventDefault();
    return;
  }
  if (e.key === "Escape" && store.running && ui.capabilities.escapeAborts !== false) {
    const t = e.target as HTMLElement | null;
    if (t && t.closest(".card")) return;
    e.preventDefault();
    void abort();
  }
});
