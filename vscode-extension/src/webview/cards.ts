/**
 * Cards for server → client requests shown in the panel: `agent/requestPermission` (tool,
 * reason, arguments, the diff of an edit; allow once / allow always in the offered scopes /
 * reject with a reason) and `agent/ui/request` (select, confirm, input, editor; a visible
 * timeout). Every action is a button reachable with Tab, and the newest card's actions have
 * Alt+letter shortcuts from anywhere in the panel (`pressShortcut`);
 * a card never takes focus by itself (no focus theft). The timeout bar is a CSS animation: no
 * timer runs in the page.
 */
import { changedLinesFirst, fullDiff } from "./changeview";
import { asObject } from "./store";

export interface CardHost {
  answer(requestId: number, result: unknown): void;
  openDiff(toolCallId: string, path: string): void;
}

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** Puts `text` into `parent` with its `backticked` parts as `<code>` (a command or a rule
 * shows as code, not with its backticks); returns `parent`. */
function withCode<E extends HTMLElement>(parent: E, text: string): E {
  text.split("`").forEach((part, i, parts) => {
    if (!part) return;
    // An unpaired last backtick stays as written.
    if (i % 2 === 1 && i < parts.length - 1) parent.append(el("code", undefined, part));
    else parent.append(i % 2 === 1 ? `\`${part}` : part);
  });
  return parent;
}

/** `text` without the backticks of its code parts (for titles and labels read aloud). */
function plain(text: string): string {
  return text.replace(/`([^`]*)`/g, "$1");
}

function button(label: string, cls: string, key: string | null, onClick: () => void): HTMLButtonElement {
  const b = withCode(el("button", cls), label);
  b.type = "button";
  if (key) {
    b.dataset.key = key;
    b.title = `${plain(label)} (Alt+${key.toUpperCase()})`;
    b.setAttribute("aria-keyshortcuts", `Alt+${key.toUpperCase()}`);
  }
  b.addEventListener("click", onClick);
  return b;
}

/** A unified diff with added / removed lines marked. */
export function diffView(diff: string): HTMLPreElement {
  return fullDiff(diff);
}

function describe(tool: unknown, argsValue: unknown): string {
  const args = asObject(argsValue);
  if (tool === "bash" && typeof args.command === "string") return `run \`${args.command}\``;
  if (typeof args.path === "string") return `${tool} ${args.path}`;
  return `call ${tool}`;
}

/** The card of an `agent/requestPermission` (params per docs/protocol.md). */
export function permissionCard(requestId: number, params: unknown, host: CardHost): HTMLElement {
  // `agent/requestPermission` params (the server's permissions module; not generated yet).
  const p = asObject(params);
  const change = asObject(p.change);
  const rule = asObject(p.rule);
  const card = el("div", "card permission");
  card.setAttribute("role", "alertdialog");
  card.setAttribute("aria-label", `Permission: pi wants to ${plain(describe(p.tool, p.arguments))}`);
  card.dataset.requestId = String(requestId);
  card.append(withCode(el("div", "card-title"), `pi wants to ${describe(p.tool, p.arguments)}`));
  if (p.reason) card.append(el("div", "card-reason", String(p.reason)));
  if (change.diff) {
    card.append(changedLinesFirst(String(change.diff)));
  } else if (p.tool !== "bash") {
    const args = el("details", "tool-args");
    args.append(el("summary", undefined, "Arguments"), el("pre", undefined, JSON.stringify(p.arguments ?? {}, null, 2)));
    card.append(args);
  }
  const reason = el("input", "reject-reason");
  reason.type = "text";
  reason.placeholder = "Reason for rejecting (optional)";
  reason.setAttribute("aria-label", "Reason for rejecting");
  const actions = el("div", "card-actions");
  const done = (result: unknown) => {
    card.classList.add("answered");
    for (const b of card.querySelectorAll("button, input")) (b as HTMLButtonElement).disabled = true;
    host.answer(requestId, result);
  };
  actions.append(button("Allow once", "primary", "a", () => done({ decision: "allow" })));
  const scopes: string[] = Array.isArray(p.alwaysScopes) ? p.alwaysScopes.map(String) : [];
  const ruleText = p.rule ? (rule.commandPrefix ? `\`${String(rule.commandPrefix)}\`` : String(rule.tool)) : "";
  if (p.rule && scopes.includes("session")) actions.append(button(`Allow ${ruleText} for this session`, "secondary", "s", () => done({ decision: "allowAlways", scope: "session" })));
  if (p.rule && scopes.includes("workspace")) actions.append(button(`Allow ${ruleText} in this workspace`, "secondary", "w", () => done({ decision: "allowAlways", scope: "workspace" })));
  actions.append(
    button("Reject", "secondary danger", "r", () => {
      const r = reason.value.trim();
      done(r ? { decision: "reject", reason: r } : { decision: "reject" });
    }),
  );
  if (change.path && p.toolCallId) actions.append(button("Open in diff editor", "link", "d", () => host.openDiff(String(p.toolCallId), String(change.path))));
  reason.addEventListener("keydown", (e) => {
    if (e.key === "Enter") {
      e.preventDefault();
      const r = reason.value.trim();
      done(r ? { decision: "reject", reason: r } : { decision: "reject" });
    }
  });
  // The answers stay in view while the diff above them is long (the cards' list scrolls).
  const footer = el("div", "card-footer");
  footer.append(actions, reason);
  card.append(footer);
  return card;
}

/** The card of an `agent/ui/request` (select / confirm / input / editor). */
export function uiCard(requestId: number, params: unknown, host: CardHost): HTMLElement {
  // `agent/ui/request` params (pi-core's extension UI; not generated yet).
  const p = asObject(params);
  const card = el("div", "card ui-request");
  card.setAttribute("role", "dialog");
  card.dataset.requestId = String(requestId);
  card.setAttribute("aria-label", `${p.extension ?? "Extension"}: ${p.title ?? ""}`);
  card.append(el("div", "card-title", `${p.extension ? `${p.extension}: ` : ""}${p.title ?? ""}`));
  const done = (result: unknown) => {
    card.classList.add("answered");
    for (const b of card.querySelectorAll("button, input, textarea")) (b as HTMLButtonElement).disabled = true;
    host.answer(requestId, result);
  };
  const actions = el("div", "card-actions");
  const cancel = button("Cancel", "secondary", "c", () => done({ cancelled: true }));
  switch (p.method) {
    case "select": {
      const opts: string[] = Array.isArray(p.options) ? p.options.map(String) : [];
      opts.forEach((o, i) => actions.append(button(o, i === 0 ? "primary" : "secondary", null, () => done({ value: o }))));
      actions.append(cancel);
      break;
    }
    case "confirm": {
      if (p.message) card.append(el("div", "card-reason", String(p.message)));
      actions.append(button("Yes", "primary", "y", () => done({ confirmed: true })), button("No", "secondary", "n", () => done({ confirmed: false })));
      break;
    }
    case "input":
    case "editor": {
      const field = p.method === "input" ? el("input", "ui-field") : el("textarea", "ui-field");
      if (field instanceof HTMLInputElement) field.type = "text";
      if (p.placeholder) field.placeholder = String(p.placeholder);
      if (p.prefill) field.value = String(p.prefill);
      field.setAttribute("aria-label", String(p.title ?? "Answer"));
      card.append(field);
      const ok = () => done({ value: field.value });
      field.addEventListener("keydown", (e: Event) => {
        const k = e as KeyboardEvent;
        if (k.key === "Enter" && (p.method === "input" || k.ctrlKey || k.metaKey)) {
          e.preventDefault();
          ok();
        }
      });
      actions.append(button("OK", "primary", "o", ok), cancel);
      break;
    }
    default:
      card.append(el("div", "card-reason", `Unsupported request ${String(p.method)}`));
      actions.append(cancel);
  }
  card.append(actions);
  const timeout = Number(p.timeout ?? 0);
  if (timeout > 0) {
    const t = el("div", "timeout");
    const secs = Math.round(timeout / 1000);
    t.append(el("span", "timeout-text", `Cancelled automatically after ${secs} s`));
    const bar = el("div", "timeout-bar");
    bar.style.animationDuration = `${timeout}ms`;
    t.append(bar);
    card.append(t);
  }
  return card;
}

/** Alt+letter on the newest open card: clicks its button with that key. Returns whether a
 * button was pressed. `code` is `KeyboardEvent.code` (layout-independent, `KeyA`). */
export function pressShortcut(container: HTMLElement, code: string): boolean {
  const m = /^Key([A-Z])$/.exec(code);
  if (!m) return false;
  const open = [...container.querySelectorAll(".card:not(.answered)")];
  const card = open[open.length - 1];
  const b = card?.querySelector(`button[data-key="${m[1]!.toLowerCase()}"]`) as HTMLButtonElement | null;
  if (!b || b.disabled) return false;
  b.click();
  return true;
}
