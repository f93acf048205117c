/**
 * Questions are answered only on purpose (issue 30 item 5, the VS Code side of Neovim's rule):
 * a card's answer is a click on it, or Enter on the focused answer, or its Alt+letter access
 * key pressed where the user is not typing. Never:
 * - Space on a focused answer (a word typed with the focus on a card must not answer it; a
 *   button would take Space as a click);
 * - a held key's repeats (Enter held in the composer, then a card took its place);
 * - an access key typed into a text field outside the card (the composer, the queue's edit
 *   field: on macOS Option+letter types a character there, e.g. Option+A is "å");
 * - any key during an IME composition.
 * Cards never take focus by themselves (cards.ts); "Show" in the attention banner focuses the
 * card itself, not its first answer.
 */

/** Whether `t` takes typed text (a text field the user writes in). */
export function isTextField(t: EventTarget | null): boolean {
  if (!(t instanceof HTMLElement)) return false;
  if (t instanceof HTMLTextAreaElement) return true;
  if (t instanceof HTMLInputElement) return !["button", "checkbox", "radio", "submit", "reset"].includes(t.type);
  return t.isContentEditable;
}

/** Installs the rule on `card` (capture listeners: they run before the answers' own). */
export function deliberate(card: HTMLElement): HTMLElement {
  const stop = (e: KeyboardEvent) => {
    e.preventDefault();
    e.stopPropagation();
  };
  card.addEventListener(
    "keydown",
    (e) => {
      const t = e.target;
      if (!(t instanceof HTMLButtonElement)) return;
      if (e.isComposing) return stop(e);
      if (e.key === " " || e.key === "Spacebar") return stop(e);
      if (e.key === "Enter" && e.repeat) return stop(e);
    },
    true,
  );
  // Space clicks a button on keyup: stopped there too.
  card.addEventListener(
    "keyup",
    (e) => {
      if (e.target instanceof HTMLButtonElement && (e.key === " " || e.key === "Spacebar")) stop(e);
    },
    true,
  );
  return card;
}

/** Whether a panel-wide access key (Alt+letter) may answer the newest card now: not repeated,
 * not composing, and not typed into a text field outside any card. */
export function accessKeyAllowed(e: KeyboardEvent): boolean {
  if (e.repeat || e.isComposing) return false;
  const t = e.target as HTMLElement | null;
  if (isTextField(t) && !t?.closest(".card")) return false;
  return true;
}
