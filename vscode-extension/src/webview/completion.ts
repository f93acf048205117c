/**
 * The composer's completion popup: `@` mentions (workspace files, found by the host) and `/`
 * commands (the session's prompt templates, skills and extension commands, and Pi's own
 * `/compact` and `/new`).
 */
import { input } from "./composer";
import { el } from "./dom";
import { post, request } from "./rpc";
import { saveState, store, ui } from "./state";
import { asObject } from "./store";

export const popup = el("ul", "popup");
popup.setAttribute("role", "listbox");
popup.hidden = true;

/** Pi's own `/` commands the panel runs itself (a prompt template, skill or extension command
 * of the same name is the server's and goes first). */
export const BUILTIN_COMMANDS: { name: string; description: string }[] = [
  { name: "compact", description: "Compact the context (optionally: what the summary must keep)" },
  { name: "new", description: "Start a new session" },
];

type PopupItem = { label: string; detail?: string; insert: string; from: number };
let popupItems: PopupItem[] = [];
let popupIndex = 0;
let lastFileQuery: string | null = null;

export function closePopup(): void {
  popup.hidden = true;
  popupItems = [];
}

function showPopup(items: PopupItem[]): void {
  popupItems = items;
  popupIndex = 0;
  popup.textContent = "";
  popup.hidden = items.length === 0;
  items.forEach((it, i) => {
    const li = el("li", i === popupIndex ? "selected" : undefined);
    li.setAttribute("role", "option");
    li.append(el("span", "popup-label", it.label));
    if (it.detail) li.append(el("span", "popup-detail", it.detail));
    li.addEventListener("mousedown", (e) => {
      e.preventDefault();
      popupIndex = i;
      choosePopup();
    });
    popup.append(li);
  });
}

function choosePopup(): void {
  const it = popupItems[popupIndex];
  if (!it) return;
  // `@file`: its content is attached too (a chip), not just its path.
  if (it.insert.startsWith("@") && it.detail) post({ type: "attachFile", path: it.detail });
  const caret = input.selectionStart ?? input.value.length;
  input.value = input.value.slice(0, it.from) + it.insert + input.value.slice(caret);
  const at = it.from + it.insert.length;
  input.setSelectionRange(at, at);
  closePopup();
  saveState();
}

/** Completion for what is typed before the caret (`@…` asks the host for files). */
export async function updateCompletion(): Promise<void> {
  const caret = input.selectionStart ?? 0;
  const before = input.value.slice(0, caret);
  const mention = /(^|\s)@([^\s@]*)$/.exec(before);
  if (mention) {
    const q = mention[2]!;
    lastFileQuery = q;
    post({ type: "pickFiles", query: q });
    return;
  }
  const slash = /^\/([^\s]*)$/.exec(before);
  if (slash) {
    if (!ui.commandsCache) {
      const list: { name: string; description?: string }[] = [];
      try {
        const r = await request("agent/commands", store.sessionId ? { sessionId: store.sessionId } : {});
        for (const c of r.commands ?? []) list.push({ name: c.name, description: c.description ?? undefined });
      } catch {}
      if (store.sessionId) {
        try {
          const r = await request("agent/extension/commands", { sessionId: store.sessionId });
          // pi-core's CommandInfo (not generated yet): `{name, description?}` read as such.
          for (const c of r.commands ?? []) {
            const { name, description } = asObject(c);
            if (typeof name === "string") list.push({ name, ...(typeof description === "string" ? { description } : {}) });
          }
        } catch {}
      }
      ui.commandsCache = list;
    }
    const cache = ui.commandsCache;
    const q = slash[1]!.toLowerCase();
    const now = /^\/([^\s]*)$/.exec(input.value.slice(0, input.selectionStart ?? 0));
    if (!now) return closePopup();
    const all = [...cache, ...BUILTIN_COMMANDS.filter((b) => !cache.some((c) => c.name === b.name))];
    showPopup(
      [
        ...all.filter((c) => c.name.toLowerCase().startsWith(q)),
        ...all.filter((c) => !c.name.toLowerCase().startsWith(q) && c.name.toLowerCase().includes(q)),
      ]
        .slice(0, 30)
        .map((c) => ({ label: `/${c.name}`, detail: c.description, insert: `/${c.name} `, from: 0 })),
    );
    return;
  }
  closePopup();
}

/** The host's files for an `@` query (only the latest query's answer is shown). */
export function showFiles(query: string, items: { label: string; path: string }[]): void {
  if (query !== lastFileQuery) return;
  const caret = input.selectionStart ?? 0;
  const m = /(^|\s)@([^\s@]*)$/.exec(input.value.slice(0, caret));
  if (!m) return closePopup();
  const from = caret - m[2]!.length - 1;
  showPopup(items.slice(0, 30).map((f) => ({ label: f.label, detail: f.path, insert: `@${f.path} `, from })));
}

/** A key in the composer while the popup is open: moves, chooses or closes; true when handled. */
export function popupKey(e: KeyboardEvent): boolean {
  if (popup.hidden || !popupItems.length) return false;
  if (e.key === "ArrowDown" || e.key === "ArrowUp") {
    e.preventDefault();
    popupIndex = (popupIndex + (e.key === "ArrowDown" ? 1 : popupItems.length - 1)) % popupItems.length;
    [...popup.children].forEach((c, i) => c.classList.toggle("selected", i === popupIndex));
    return true;
  }
  if (e.key === "Enter" || e.key === "Tab") {
    e.preventDefault();
    choosePopup();
    return true;
  }
  if (e.key === "Escape") {
    e.preventDefault();
    e.stopPropagation();
    closePopup();
    return true;
  }
  return false;
}
