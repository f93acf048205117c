/**
 * The header's model and thinking-level pickers: the models from `agent/model/list`, the
 * session's model and level from `agent/state`; a choice is `agent/model/set` /
 * `agent/thinking/set` (before the session exists the model goes with the first prompt).
 */
import { el } from "./dom";
import { errorMessage, log, request } from "./rpc";
import { store } from "./state";
import { asObject } from "./store";
import type { ModelInfo, ThinkingLevel } from "../shared/wire";

export const modelSelect = el("select", "model-select");
modelSelect.setAttribute("aria-label", "Model");
export const thinkingSelect = el("select", "thinking-select");
thinkingSelect.setAttribute("aria-label", "Thinking level");

let models: ModelInfo[] = [];
/** The session's model (or the one chosen for the next new session). */
export let currentModel: ModelInfo | null = null;
/** The model chosen before the session exists (`provider/id`), sent with the first prompt. */
export let pendingModel: string | null = null;

/** Asks the server for its models and shows them. */
export async function loadModels(): Promise<void> {
  try {
    const r = await request("agent/model/list", {});
    models = r.models ?? [];
  } catch (e) {
    log("warn", `agent/model/list: ${errorMessage(e)}`);
  }
  renderModels();
}

function modelKey(m: ModelInfo): string {
  return `${m.provider}/${m.id}`;
}

function renderModels(): void {
  modelSelect.textContent = "";
  const list = [...models];
  const current = currentModel;
  if (current && !list.some((m) => modelKey(m) === modelKey(current))) list.unshift(current);
  for (const m of list) {
    const o = el("option", undefined, m.name || modelKey(m));
    o.value = modelKey(m);
    // pi-ai's ModelCost (not generated yet): US dollars per million tokens in / out.
    const cost = asObject(m.cost);
    const price = m.cost ? ` · $${String(cost.input)}/$${String(cost.output)} per Mtok` : "";
    o.title = `${modelKey(m)} · ${Number(m.contextWindow ?? 0).toLocaleString("en-US")} tokens${price}`;
    modelSelect.append(o);
  }
  if (currentModel) modelSelect.value = modelKey(currentModel);
  else if (pendingModel) modelSelect.value = pendingModel;
  renderThinking(thinkingSelect.value || "off");
}

/** The levels the select offers (the model's, as `agent/model/list` sends them). */
let shownLevels: ThinkingLevel[] = ["off"];

function renderThinking(level: string): void {
  const m = currentModel ?? models.find((x) => modelKey(x) === modelSelect.value);
  const levels: ThinkingLevel[] = m?.thinkingLevels?.length ? m.thinkingLevels : m?.reasoning ? ["off", "minimal", "low", "medium", "high"] : ["off"];
  shownLevels = levels;
  thinkingSelect.textContent = "";
  for (const l of levels) {
    const o = el("option", undefined, `thinking: ${l}`);
    o.value = l;
    thinkingSelect.append(o);
  }
  thinkingSelect.value = levels.find((l) => l === level) ?? levels[0]!;
  thinkingSelect.disabled = levels.length < 2;
}

/** Shows the session's model and thinking level (from `agent/state` or `agent/model/set`). */
export function setModel(model: ModelInfo | null | undefined, level?: string): void {
  if (model) currentModel = model;
  renderModels();
  if (level) renderThinking(level);
}

modelSelect.addEventListener("change", async () => {
  const key = modelSelect.value;
  if (!store.sessionId) {
    pendingModel = key;
    currentModel = models.find((m) => modelKey(m) === key) ?? null;
    renderThinking(thinkingSelect.value);
    return;
  }
  try {
    const r = await request("agent/model/set", { sessionId: store.sessionId, model: key });
    setModel(r.model, r.thinkingLevel);
  } catch (e) {
    log("warn", `agent/model/set: ${errorMessage(e)}`);
    renderModels();
  }
});

thinkingSelect.addEventListener("change", async () => {
  if (!store.sessionId) return;
  try {
    const level = shownLevels.find((l) => l === thinkingSelect.value);
    if (!level) return;
    const r = await request("agent/thinking/set", { sessionId: store.sessionId, level });
    if (r?.level) renderThinking(r.level);
  } catch (e) {
    log("warn", `agent/thinking/set: ${errorMessage(e)}`);
  }
});
