/**
 * Brings an element's children to a fresh rendering of them while keeping every node that
 * stays the same (a small DOM diff, as morphdom does). The streaming tail of an answer is
 * rendered again every frame; most of it is what was there before with more text at its end.
 * Keeping the nodes means the browser recomputes style only for nodes that are new and lays
 * out and repaints only what changed, instead of a whole new subtree each time.
 *
 * The result is the same DOM as `target.replaceChildren(fresh)` (same tags, attributes and
 * text, in the same order); `fresh` is consumed (its new nodes are moved into `target`).
 */

/** Makes `target`'s children equal to `fresh`'s. Returns the number of nodes created or
 * replaced (0 when only text grew: a test hook). */
export function morphChildren(target: Node, fresh: Node): number {
  let changed = 0;
  let old = target.firstChild;
  let next = fresh.firstChild;
  while (next) {
    const after = next.nextSibling;
    if (old && same(old, next)) {
      if (old.nodeType === Node.ELEMENT_NODE) {
        syncAttributes(old as Element, next as Element);
        changed += morphChildren(old, next);
      } else if ((old as CharacterData).data !== (next as CharacterData).data) {
        const a = (old as CharacterData).data;
        const b = (next as CharacterData).data;
        if (b.startsWith(a)) (old as CharacterData).appendData(b.slice(a.length));
        else (old as CharacterData).data = b;
      }
      old = old.nextSibling;
    } else {
      target.insertBefore(next, old);
      changed++;
    }
    next = after;
  }
  while (old) {
    const after = old.nextSibling;
    target.removeChild(old);
    old = after;
    changed++;
  }
  return changed;
}

/** Whether `b` can be patched into `a` (same node type; elements of the same tag). */
function same(a: Node, b: Node): boolean {
  if (a.nodeType !== b.nodeType) return false;
  if (a.nodeType === Node.ELEMENT_NODE) return (a as Element).tagName === (b as Element).tagName && (a as Element).namespaceURI === (b as Element).namespaceURI;
  return a.nodeType === Node.TEXT_NODE || a.nodeType === Node.COMMENT_NODE;
}

function syncAttributes(a: Element, b: Element): void {
  const bn = b.attributes;
  const an = a.attributes;
  if (an.length === 0 && bn.length === 0) return;
  for (let i = an.length - 1; i >= 0; i--) {
    const name = an[i]!.name;
    if (!b.hasAttribute(name)) a.removeAttribute(name);
  }
  for (let i = 0; i < bn.length; i++) {
    const { name, value } = bn[i]!;
    if (a.getAttribute(name) !== value) a.setAttribute(name, value);
  }
}
