/** Small DOM helpers of the webview. */

/** A new element with an optional class and text. */
export function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** Sets an element's text only when it differs (no layout invalidation otherwise). */
export function setText(e: HTMLElement, t: string): void {
  if (e.textContent !== t) e.textContent = t;
}
