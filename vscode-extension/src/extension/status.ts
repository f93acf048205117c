/**
 * The status bar item `model · ctx% · $cost · state` of the active session (CLIENTS.md VF8),
 * fed by `agent/state`, `agent/session/stats`, `agent/usage`, `agent/event` and open questions; plus one item per
 * extension `setStatus` key (`agent/ui/notification`).
 */
import * as vscode from "vscode";

export type RunState = "idle" | "running" | "stopping" | "waiting" | "compacting";

export interface SessionStatus {
  model?: string;
  /** The session's thinking level (`agent/state`), shown in the tooltip. */
  thinkingLevel?: string;
  contextTokens?: number;
  contextWindow?: number;
  cost?: number;
  state: RunState;
  questions: number;
  /** The tool running now (shown as the state while it runs). */
  tool?: string;
  /** A prompt's run is going on (`agent_start` … `agent_end`): what a compaction's end goes
   * back to. A manual compaction is a run of its own without them (protocol.md). */
  inRun?: boolean;
}

/** The item's text for one session's status (no icons; pure, for tests). */
export function statusText(s: SessionStatus | undefined): string {
  if (!s) return "pi · no session";
  const pct = s.contextTokens !== undefined && s.contextWindow ? `${Math.round((100 * s.contextTokens) / s.contextWindow)}%` : "–%";
  const cost = `$${(s.cost ?? 0).toFixed(s.cost && s.cost < 0.1 ? 3 : 2)}`;
  const state = s.questions > 0 ? "waiting" : s.state === "running" && s.tool ? `running ${s.tool}` : s.state;
  return `${s.model ?? "pi"} · ${pct} · ${cost} · ${state}`;
}

/** The state after a compaction ends: the run it came in, if any, else idle. */
function afterCompaction(s: SessionStatus): RunState {
  return s.inRun ? "running" : "idle";
}

/**
 * The status bar tooltip's sandbox line: Windows has no OS sandbox (docs/platforms.md), so the
 * commands the agent runs are not confined there; elsewhere nothing (the server's first `bash`
 * result says when a kernel lacks support).
 */
export function sandboxNote(platform: NodeJS.Platform = process.platform): string {
  return platform === "win32" ? "\nNo OS sandbox on Windows: the agent's commands run with your permissions" : "";
}

export class StatusBar implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem("pi.status", vscode.StatusBarAlignment.Right, 100);
  private readonly extensionItems = new Map<string, vscode.StatusBarItem>();
  private readonly sessions = new Map<string, SessionStatus>();
  active: string | null = null;
  private shown = "";
  private shownTooltip = "";

  /** The attention flag (attention.ts): shown while a session no visible panel shows needs the
   * user; click → that session. */
  private readonly flag = vscode.window.createStatusBarItem("pi.attention", vscode.StatusBarAlignment.Right, 101);

  constructor() {
    this.flag.name = "Pi: needs you";
    this.flag.command = "pi.openAttention";
    this.flag.backgroundColor = new vscode.ThemeColor("statusBarItem.warningBackground");
    this.item.name = "Pi";
    this.item.command = "pi.selectModel";
    this.render();
    this.item.show();
  }

  get(sessionId: string): SessionStatus {
    let s = this.sessions.get(sessionId);
    if (!s) {
      s = { state: "idle", questions: 0 };
      this.sessions.set(sessionId, s);
    }
    return s;
  }

  setActive(sessionId: string | null): void {
    this.active = sessionId;
    this.render();
  }

  /** From `agent/state` (or a session/new|open answer). */
  state(st: any): void {
    if (!st?.sessionId) return;
    const s = this.get(st.sessionId);
    if (st.model) s.model = st.model.name || `${st.model.provider}/${st.model.id}`;
    if (st.model?.contextWindow) s.contextWindow = st.model.contextWindow;
    if (typeof st.thinkingLevel === "string") s.thinkingLevel = st.thinkingLevel;
    s.inRun = !!st.isStreaming;
    s.state = st.isCompacting ? "compacting" : st.isStreaming ? "running" : "idle";
    this.render();
  }

  /**
   * From `agent/session/stats` (asked when the host attaches to a session, e.g. after a window
   * reload, when no `agent/usage` has come yet): `contextUsage.{tokens, contextWindow}` (tokens
   * `null` after a compaction until a response follows: "–%") and `sessionCost` (US dollars,
   * every response in the file).
   */
  stats(st: any): void {
    if (!st?.sessionId) return;
    const s = this.get(st.sessionId);
    const cu = st.contextUsage;
    if (cu && typeof cu === "object") {
      s.contextTokens = typeof cu.tokens === "number" ? cu.tokens : undefined;
      if (typeof cu.contextWindow === "number" && cu.contextWindow > 0) s.contextWindow = cu.contextWindow;
    }
    const cost = typeof st.sessionCost === "number" ? st.sessionCost : st.cost;
    if (typeof cost === "number") s.cost = cost;
    if (st.sessionId === this.active) this.render();
  }

  /** One server notification. */
  notification(method: string, params: any): void {
    const id = params?.sessionId;
    if (typeof id !== "string") return;
    const s = this.get(id);
    if (method === "agent/usage") {
      // A response that reported no usage (aborted, failed) says nothing about the context.
      if (!(params.turn && params.turn.totalTokens === 0 && params.contextTokens === 0)) s.contextTokens = params.contextTokens;
      s.contextWindow = params.contextWindow ?? s.contextWindow;
      s.cost = params.session?.cost ?? s.cost;
    } else if (method === "agent/event") {
      const t = params.event?.type;
      if (t === "agent_start") {
        s.state = "running";
        s.inRun = true;
      } else if (t === "agent_end" && params.event.willRetry !== true) {
        s.state = "idle";
        s.inRun = false;
        s.tool = undefined;
      } else if (t === "tool_execution_start") s.tool = String(params.event.toolName ?? "tool");
      else if (t === "tool_execution_end") s.tool = undefined;
      else if (t === "compaction_start") s.state = "compacting";
      else if (t === "compaction_end") s.state = afterCompaction(s);
      // Deltas and the rest change nothing shown here: no render per event.
      else return;
    } else if (method === "agent/ui/notification" && params.method === "setStatus") {
      this.extensionStatus(String(params.statusKey ?? ""), params.statusText);
    } else return;
    if (id === this.active) this.render();
  }

  /** The `agent/compact` request was answered (or failed): the compaction is over, whether or
   * not its `compaction_end` came. */
  compacted(sessionId: string): void {
    const s = this.get(sessionId);
    if (s.state !== "compacting") return;
    s.state = afterCompaction(s);
    if (sessionId === this.active) this.render();
  }

  stopping(sessionId: string): void {
    this.get(sessionId).state = "stopping";
    this.render();
  }

  questions(sessionId: string, open: number): void {
    this.get(sessionId).questions = open;
    this.render();
  }

  /** Shows the attention flag (`text` empty: hides it). */
  setFlag(text: string, tooltip: string): void {
    this.flagVisible = !!text;
    if (!text) {
      this.flag.hide();
      return;
    }
    this.flag.text = text;
    this.flag.tooltip = tooltip;
    this.flag.show();
  }

  /** The attention flag's text ("" when hidden; for tests). */
  get flagText(): string {
    return this.flagVisible ? this.flag.text : "";
  }
  private flagVisible = false;

  setModel(sessionId: string, model: string, contextWindow?: number): void {
    const s = this.get(sessionId);
    s.model = model;
    if (contextWindow) s.contextWindow = contextWindow;
    this.render();
  }

  private extensionStatus(key: string, text: string | undefined): void {
    let item = this.extensionItems.get(key);
    if (!text) {
      item?.dispose();
      this.extensionItems.delete(key);
      return;
    }
    if (!item) {
      item = vscode.window.createStatusBarItem(`pi.status.${key}`, vscode.StatusBarAlignment.Right, 99);
      item.name = `Pi: ${key}`;
      this.extensionItems.set(key, item);
    }
    item.text = text;
    item.show();
  }

  private render(): void {
    const s = this.active ? this.sessions.get(this.active) : undefined;
    const text = statusText(this.active ? (s ?? { state: "idle", questions: 0 }) : undefined);
    const state = s ? (s.questions > 0 ? "waiting" : s.state) : "idle";
    const icon = state === "running" || state === "stopping" || state === "compacting" ? "$(sync~spin)" : state === "waiting" ? "$(bell-dot)" : "$(hubot)";
    const shown = `${icon} ${text}`;
    const tooltip = `Pi — ${text}${s?.thinkingLevel ? `\nthinking: ${s.thinkingLevel}` : ""}${sandboxNote()}\nClick to choose the model`;
    // Setting the item is a message to the window: only when the text changes (a text delta
    // changes nothing here).
    if (shown === this.shown && tooltip === this.shownTooltip) return;
    this.shown = shown;
    this.shownTooltip = tooltip;
    this.item.text = shown;
    this.item.tooltip = tooltip;
  }

  /** The current text (for tests). */
  get text(): string {
    return this.item.text;
  }

  dispose(): void {
    this.item.dispose();
    this.flag.dispose();
    for (const i of this.extensionItems.values()) i.dispose();
  }
}
