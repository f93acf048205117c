/**
 * The session's plan (docs/protocol.md "Plan and todos"): a strip pinned above the composer
 * with the steps, done/total and the current step highlighted, collapsible; the plan-mode
 * switch of the header (`agent/plan/set`); and the plan question of the built-in `plan-mode`
 * extension ("Plan mode - what next?", an `agent/ui/request` `select`) as a card that shows the
 * plan with its three choices.
 *
 * The state comes whole each time (`agent/plan` notification, `agent/plan/get` answer), so
 * every update replaces the strip's rows: nothing is appended twice.
 */

import type { PlanParams } from "../shared/wire";
import { asObject } from "./store";

/** The plan state as `agent/plan` / `agent/plan/get` / `agent/plan/set` carry it (the generated
 * wire type): `mode` `off`, `plan` (read-only planning) or `executing`; `todos[].status` uses
 * ACP's names, `in_progress` is the current step. */
export type PlanState = PlanParams;
/** One item of the list (`todos[]` of the plan state). */
export type PlanTodo = PlanState["todos"][number];

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** A thrown value in words (a JSON-RPC error's message, else the value). */
function errorText(e: unknown): string {
  const m = asObject(e).message;
  return typeof m === "string" ? m : String(e);
}

/** Whether `p` has the plan state's shape (the fields the view reads). */
export function isPlanState(p: unknown): p is PlanState {
  const o = asObject(p);
  return typeof o.sessionId === "string" && Array.isArray(o.todos) && typeof o.mode === "string";
}

/** The step to highlight: the `in_progress` one, else none. */
function currentId(s: PlanState): number | null {
  return s.todos.find((t) => t.status === "in_progress")?.id ?? null;
}

/** The plan strip above the composer and the header's plan-mode switch. */
export class PlanView {
  /** The strip (hidden while there is nothing to show). */
  readonly el: HTMLElement;
  /** The header's switch (`aria-pressed`: plan mode on). */
  readonly toggle: HTMLButtonElement;
  private readonly head: HTMLButtonElement;
  private readonly title: HTMLElement;
  private readonly count: HTMLElement;
  private readonly list: HTMLOListElement;
  private state: PlanState | null = null;
  private collapsed: boolean;

  /** `setMode` asks the server to switch plan mode (resolves with the new state or rejects
   * with the error the user reads); `collapsed` is the strip's kept state; `onCollapse` keeps
   * it. */
  constructor(
    private readonly setMode: (enabled: boolean) => Promise<PlanState>,
    collapsed: boolean,
    private readonly onCollapse: (collapsed: boolean) => void,
    private readonly onError: (message: string) => void,
  ) {
    this.collapsed = collapsed;
    this.el = el("section", "plan");
    this.el.setAttribute("aria-label", "Plan");
    this.el.hidden = true;
    this.head = el("button", "plan-head");
    this.head.type = "button";
    this.title = el("span", "plan-title", "Plan");
    this.count = el("span", "plan-count");
    this.head.append(el("span", "plan-chevron"), this.title, this.count);
    this.list = el("ol", "plan-steps");
    this.list.id = "pi-plan-steps";
    this.head.setAttribute("aria-controls", this.list.id);
    this.el.append(this.head, this.list);
    this.head.addEventListener("click", () => {
      this.collapsed = !this.collapsed;
      this.render();
      this.onCollapse(this.collapsed);
    });
    this.toggle = el("button", "icon plan-toggle", "Plan");
    this.toggle.type = "button";
    this.toggle.hidden = true;
    this.toggle.addEventListener("click", () => void this.switchMode());
  }

  /** The state shown (null: none yet). */
  get current(): PlanState | null {
    return this.state;
  }

  /** Shows `s` (a newer state of the panel's session), or nothing with `null`. */
  update(s: PlanState | null): void {
    this.state = s;
    this.render();
  }

  private async switchMode(): Promise<void> {
    const s = this.state;
    if (!s) return;
    const enable = s.mode !== "plan";
    this.toggle.disabled = true;
    try {
      this.update(await this.setMode(enable));
    } catch (e) {
      this.onError(`Plan mode: ${errorText(e)}`);
    } finally {
      this.toggle.disabled = false;
    }
  }

  private render(): void {
    const s = this.state;
    // The header's switch: shown when plan mode can be switched in this workspace.
    const canSwitch = !!s && s.available && s.planModeAvailable;
    this.toggle.hidden = !canSwitch;
    if (s) {
      const on = s.mode === "plan";
      this.toggle.setAttribute("aria-pressed", String(on));
      this.toggle.dataset.mode = s.mode;
      this.toggle.title = on ? "Plan mode is on: the agent reads and plans, it changes nothing (click to leave plan mode)" : "Plan mode: the agent only reads and plans until you accept the plan";
    }
    const show = !!s && s.available && (s.todos.length > 0 || s.mode === "plan");
    this.el.hidden = !show;
    if (!s || !show) return;
    this.el.dataset.mode = s.mode;
    this.el.classList.toggle("collapsed", this.collapsed);
    this.head.setAttribute("aria-expanded", String(!this.collapsed));
    const cur = currentId(s);
    const curText = s.todos.find((t) => t.id === cur)?.text;
    this.title.textContent = s.mode === "plan" ? "Plan mode" : "Plan";
    this.count.textContent = s.total > 0 ? `${s.completed}/${s.total}${this.collapsed && curText ? ` · ${curText}` : ""}` : s.mode === "plan" ? "read-only: the agent plans, nothing is changed" : "";
    this.head.title = `${this.collapsed ? "Show" : "Hide"} the plan`;
    this.list.hidden = this.collapsed || s.todos.length === 0;
    this.list.textContent = "";
    for (const t of s.todos) {
      const li = el("li", "plan-step");
      const status = t.status ?? (t.done ? "completed" : "pending");
      li.dataset.status = status;
      li.dataset.id = String(t.id);
      if (t.id === cur) li.setAttribute("aria-current", "step");
      const mark = el("span", "plan-mark", status === "completed" ? "✓" : status === "in_progress" ? "▶" : "○");
      mark.setAttribute("aria-hidden", "true");
      const text = el("span", "plan-text", t.text);
      li.append(mark, text);
      li.setAttribute("aria-label", `${t.id}. ${t.text} (${status === "completed" ? "done" : status === "in_progress" ? "current step" : "to do"})`);
      if (t.priority === "high") li.append(el("span", "plan-priority", "high"));
      this.list.append(li);
    }
  }
}

/** Whether an `agent/ui/request` is the plan question of the `plan-mode` extension. */
export function isPlanQuestion(p: unknown): boolean {
  const o = asObject(p);
  return o.extension === "plan-mode" && o.method === "select" && Array.isArray(o.options);
}

/** What each of the plan question's answers does, said under it. */
const EXPLAIN: [RegExp, string][] = [
  [/^Execute/, "Restore the tools and carry out the steps; progress shows in the plan."],
  [/^Refine/, "Say what to change; the agent plans again."],
  [/^Stay/, "Keep planning read-only; nothing is changed."],
];

/** The plan question as a card: the plan's steps, then the three choices as buttons with
 * what each does. `answer` gets the chosen option's text (the `select` value), or null to
 * cancel. */
export function planQuestionCard(requestId: number, params: unknown, plan: PlanState | null, answer: (value: string | null) => void): HTMLElement {
  const p = asObject(params);
  const card = el("div", "card ui-request plan-question");
  card.setAttribute("role", "dialog");
  card.dataset.requestId = String(requestId);
  card.setAttribute("aria-label", `Plan mode: ${String(p.title ?? "what next?")}`);
  card.append(el("div", "card-title", String(p.title ?? "Plan mode - what next?")));
  if (plan && plan.todos.length) {
    const ol = el("ol", "plan-question-steps");
    for (const t of plan.todos) ol.append(el("li", undefined, t.text));
    card.append(ol);
  }
  const done = (v: string | null) => {
    card.classList.add("answered");
    for (const b of card.querySelectorAll("button")) (b as HTMLButtonElement).disabled = true;
    answer(v);
  };
  const actions = el("div", "card-actions plan-choices");
  (Array.isArray(p.options) ? p.options : []).map(String).forEach((o, i) => {
    const b = el("button", i === 0 ? "primary" : "secondary", o);
    b.type = "button";
    const why = EXPLAIN.find(([re]) => re.test(o))?.[1];
    if (why) {
      b.title = why;
      const d = el("span", "plan-choice-why", why);
      d.id = `pi-plan-why-${requestId}-${i}`;
      b.setAttribute("aria-describedby", d.id);
      const wrap = el("div", "plan-choice");
      wrap.append(b, d);
      actions.append(wrap);
    } else actions.append(b);
    b.addEventListener("click", () => done(o));
  });
  const cancel = el("button", "link", "Cancel");
  cancel.type = "button";
  cancel.addEventListener("click", () => done(null));
  actions.append(cancel);
  card.append(actions);
  return card;
}
