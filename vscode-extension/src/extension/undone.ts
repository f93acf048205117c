/**
 * Agent changes the user took back with the editor's Undo (Ctrl+Z, or the review's *Undo*),
 * remembered per file so that the editor's Redo (or Ctrl+Z of the review's *Undo*) brings them
 * back **as agent changes under review** — with their Keep / Undo lenses and their Changes
 * entry — rather than as the user's own typing (issue 30 item 4).
 *
 * An entry is the document's text with the agent's lines (`withAgent`) and without them
 * (`without`). When an Undo or Redo of the editor turns the document into an entry's
 * `withAgent`, the change is the agent's again: the tracker records `without → withAgent` as an
 * agent edit (the tool calls it came from kept). When the user types anything else, the entries
 * of that file are dropped (the editor's redo stack is gone too). At most {@link MAX_PER_FILE}
 * entries per file.
 */

export const MAX_PER_FILE = 20;

export interface UndoneChange {
  withAgent: string;
  without: string;
  toolCallIds: string[];
  /** The sessions whose changes they were (the Changes view files them there again). */
  sessions: string[];
}

export class UndoneChanges {
  private readonly files = new Map<string, UndoneChange[]>();

  /** The agent's lines of `uri` were taken back: the text went `withAgent → without`. */
  taken(uri: string, withAgent: string, without: string, toolCallIds: readonly string[], sessions: Iterable<string> = []): void {
    if (withAgent === without) return;
    const l = this.files.get(uri) ?? [];
    l.push({ withAgent, without, toolCallIds: [...toolCallIds], sessions: [...sessions] });
    if (l.length > MAX_PER_FILE) l.splice(0, l.length - MAX_PER_FILE);
    this.files.set(uri, l);
  }

  /** An Undo / Redo made `uri`'s text `text`: the change to bring back as the agent's (removed
   * from the list), if `text` is one with the agent's lines. */
  restored(uri: string, text: string): UndoneChange | undefined {
    const l = this.files.get(uri);
    if (!l) return undefined;
    for (let i = l.length - 1; i >= 0; i--) {
      if (l[i]!.withAgent === text) return l.splice(i, 1)[0];
    }
    return undefined;
  }

  /** Whether anything is remembered for `uri` (only then an Undo / Redo reads the text). */
  has(uri: string): boolean {
    return (this.files.get(uri)?.length ?? 0) > 0;
  }

  /** The user typed in `uri` (not an Undo / Redo): the editor's redo stack is gone. */
  typed(uri: string): void {
    this.files.delete(uri);
  }
}
