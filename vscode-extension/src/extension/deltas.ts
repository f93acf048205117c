/**
 * Compact deltas (the server's `initializationOptions.compactDeltas`, docs/protocol.md
 * "Compact deltas"): `agent/delta [ref, seq, contentIndex, delta]` expanded back into the
 * `agent/event` params the server would otherwise have sent, before anything else in the host
 * (status bar, relay, webview) sees them. One expander per language client (connection); every
 * `agent/event` of the connection must pass through {@link DeltaExpander.event}.
 */

/** The delta type a block's `*_start` announces. */
const START_KIND: Record<string, string> = {
  text_start: "text_delta",
  thinking_start: "thinking_delta",
  toolcall_start: "toolcall_delta",
};

interface RefState {
  sessionId: unknown;
  runId: unknown;
  /** contentIndex → delta type, since the session's last `message_start`. */
  kinds: Map<number, string>;
}

export class DeltaExpander {
  private refs = new Map<number, RefState>();
  /** `agent/delta` notifications expanded so far. */
  expanded = 0;

  /**
   * Notes a full `agent/event`'s `ref` (session, run, blocks begun) and returns the params
   * without it: what a client without compact deltas gets.
   */
  event(params: any): any {
    if (!params || typeof params !== "object" || params.ref === undefined) return params;
    const { ref, ...rest } = params;
    let st = this.refs.get(ref);
    if (!st) {
      st = { sessionId: undefined, runId: undefined, kinds: new Map() };
      this.refs.set(ref, st);
    }
    st.sessionId = rest.sessionId;
    st.runId = rest.runId;
    const ev = rest.event;
    if (ev?.type === "message_start") st.kinds.clear();
    const a = ev?.type === "message_update" ? ev.assistantMessageEvent : undefined;
    const kind = a ? START_KIND[a.type] : undefined;
    if (kind && typeof a.contentIndex === "number") st.kinds.set(a.contentIndex, kind);
    return rest;
  }

  /**
   * The `agent/event` params an `agent/delta` stands for, or an `Error` saying why it cannot
   * be expanded (a session or block never announced: the server does not send such a delta).
   */
  expand(params: unknown): any {
    if (!Array.isArray(params) || params.length !== 4) return new Error(`agent/delta: expected [ref, seq, contentIndex, delta], got ${JSON.stringify(params)}`);
    const [ref, seq, contentIndex, delta] = params;
    const st = this.refs.get(ref);
    const type = st?.kinds.get(contentIndex);
    if (!st || !type) return new Error(`agent/delta: unknown session ref ${ref} or block ${contentIndex}`);
    this.expanded++;
    return {
      sessionId: st.sessionId,
      runId: st.runId,
      seq,
      event: { type: "message_update", assistantMessageEvent: { type, contentIndex, delta } },
    };
  }
}
