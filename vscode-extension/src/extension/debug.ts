/**
 * The host's state for tests and benchmarks: `activate`'s return value, the `pi._debugState`
 * command (the e2e test reads it), and with `PI_VSCODE_STATS=<file>` in the environment the same
 * state written to that file every 500 ms and after every run.
 */
import * as fs from "node:fs";
import * as vscode from "vscode";
import type { ServerNotifications } from "./notifications";
import type { PanelRegistry } from "./registry";
import { cpuClock, cpuNowCost } from "./relay";
import type { Services } from "./services";

/** The debug API `activate` returns. */
export interface DebugApi {
  /** Panels, relay counters, review, status bar and host CPU figures, as plain JSON. */
  state(): unknown;
  /** A run ended: with `PI_VSCODE_STATS` the state is written 200 ms later. */
  runEnded(): void;
}

/** Registers `pi._debugState` and the stats file writer. */
export function registerDebug(s: Services, registry: PanelRegistry, notes: () => ServerNotifications): DebugApi {
  const { context, changes, status, output } = s;
  const state = () => {
    const active = registry.activeSession();
    return {
      activeSession: active,
      panels: [...registry.panels].map((p) => ({ kind: p.kind, sessionId: p.sessionId, ready: p.ready, visible: p.visible, posts: p.batcher.posts, notes: p.batcher.notes, notesPosted: p.batcher.notesPosted, packedPosts: p.batcher.packedPosts, packedBytes: p.batcher.packedBytes, paused: p.batcher.paused, maxPostsPerSecond: p.batcher.maxPostsPerSecond, batchCpuMs: p.batcher.cpuMs, batchSections: p.batcher.sections })),
      changedFiles: changes.changedFiles(),
      typing: { ...changes.typing },
      status: status.text,
      flag: status.flagText,
      chatBadge: registry.chatWebviewView?.badge ?? null,
      activeStatus: active ? status.get(active) : null,
      notesRelayed: notes().notesRelayed,
      hostCpuMs: notes().hostCpuMs,
      cpuClock,
      cpuCallMs: cpuNowCost(),
    };
  };
  context.subscriptions.push(vscode.commands.registerCommand("pi._debugState", () => state()));
  const file = process.env.PI_VSCODE_STATS;
  /** The state written to `PI_VSCODE_STATS` (the e2e test reads the relay's figures from it). */
  const writeStats = (): void => {
    if (!file) return;
    try {
      // Whole or not at all (the test reads it at any time): a temp file renamed over it.
      fs.writeFileSync(`${file}.tmp`, JSON.stringify(state()));
      fs.renameSync(`${file}.tmp`, file);
    } catch (e) {
      output.warn(`stats: ${String(e)}`);
    }
  };
  if (file) {
    // Tests read the figures at any time, not only after a run.
    const timer = setInterval(writeStats, 500);
    context.subscriptions.push({ dispose: () => clearInterval(timer) });
  }
  return {
    state,
    runEnded: () => {
      if (file) setTimeout(writeStats, 200);
    },
  };
}
