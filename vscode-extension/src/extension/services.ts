/**
 * The host's long-lived services, made once by `activate` (extension.ts) and handed to the
 * modules that wire them: the client lifecycle (lifecycle.ts), the server's notifications
 * (notifications.ts), the panel registry (registry.ts), the views (views.ts) and the commands
 * (commands.ts). Nothing here starts anything: each service is inert until a module uses it.
 */
import * as vscode from "vscode";
import { AttentionList } from "./attention";
import { callKey, ChangeTracker, type SavedReview } from "./changes";
import { SessionNames } from "./names";
import type { ChatPanel } from "./panels";
import { Router } from "./relay";
import { ServerQuestions } from "./requests";
import { StatusBar } from "./status";
import { UnsavedChanges } from "./unsaved";

/** Workspace-state key of the review state (changes.ts `SavedReview`). */
export const REVIEW_KEY = "pi.review";

/** The services every host module shares. */
export interface Services {
  context: vscode.ExtensionContext;
  /** The "Pi" log. */
  output: vscode.LogOutputChannel;
  /** The "Pi LSP Trace" log (`pi.trace.server`). */
  trace: vscode.LogOutputChannel;
  /** Routes the server's notifications to the panels on their session (relay.ts). */
  router: Router;
  unsaved: UnsavedChanges;
  status: StatusBar;
  changes: ChangeTracker;
  questions: ServerQuestions;
  names: SessionNames;
  /** Sessions that need the user (attention.ts). */
  flags: AttentionList;
  /** Writes the review state to the workspace state now (also on deactivate). */
  saveReview(): Thenable<void>;
}

/** Makes the services; the review state (files under review, their hunks) is restored from the
 * workspace state and saved on every change, so it survives a window reload. */
export function createServices(context: vscode.ExtensionContext): Services {
  const output = vscode.window.createOutputChannel("Pi", { log: true });
  const trace = vscode.window.createOutputChannel("Pi LSP Trace", { log: true });
  const router = new Router();
  const unsaved = new UnsavedChanges();
  context.subscriptions.push(unsaved);
  const status = new StatusBar();
  const changes = new ChangeTracker(output);
  changes.unsaved = unsaved;
  const saveReview = () => context.workspaceState.update(REVIEW_KEY, changes.snapshot());
  changes.onStateChange = () => void saveReview();
  void changes.restore(context.workspaceState.get<SavedReview>(REVIEW_KEY));
  const questions = new ServerQuestions(
    { panelsOf: (id) => router.panelsOf(id) as ChatPanel[] },
    output,
    (toolCallId, p, sessionId) => changes.openDiff({ toolCallId, path: p, sessionId }),
    (toolCallId, sessionId) => changes.proposals.close(callKey(sessionId, toolCallId)),
  );
  const names = new SessionNames();
  changes.sessionName = (id) => names.get(id);
  const flags = new AttentionList();
  return { context, output, trace, router, unsaved, status, changes, questions, names, flags, saveReview };
}
