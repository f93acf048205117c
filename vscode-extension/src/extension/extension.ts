/**
 * The Pi extension's host side. `activate` only wires the modules:
 * - services.ts: the shared services (logs, router, status bar, review, questions, names, flags);
 * - lifecycle.ts: the language client (pi-lsp found, started once, stopped; the server's requests);
 * - notifications.ts: what the host does with the server's notifications before relaying them;
 * - registry.ts: the chat panels (view and editor panels) and the host the panels talk to;
 * - views.ts: the Sessions and Changes views, CodeLenses, diff documents;
 * - commands.ts: the commands of package.json;
 * - debug.ts: the state tests and benchmarks read.
 * No server event moves focus or changes the active editor.
 */
import type * as vscode from "vscode";
import { registerCommands } from "./commands";
import { registerDebug } from "./debug";
import { ClientLifecycle } from "./lifecycle";
import { ServerNotifications } from "./notifications";
import { PanelRegistry } from "./registry";
import { createServices, type Services } from "./services";
import { Views } from "./views";
import { setUserMcpConfig } from "./mcp";
import { trackActiveEditor } from "./editorcontext";

export { FILE_CONTEXT_CHARS, fileContext } from "./commands";

let lifecycle: ClientLifecycle | undefined;
let services: Services | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<unknown> {
  const s = createServices(context);
  services = s;
  // Built in dependency order; the few links back (a notification refreshes the Sessions view,
  // a panel starts the client) are late-bound callbacks.
  const client = new ClientLifecycle(s, (note) => notes.handle(note));
  lifecycle = client;
  const registry = new PanelRegistry(s, { ensureClient: () => client.ensure(), treeChanged: () => views.scheduleRefresh() });
  registry.register();
  const views = new Views(s, registry);
  const debug = registerDebug(s, registry, () => notes);
  const notes = new ServerNotifications(s, registry, { treeChanged: () => views.scheduleRefresh(), runEnded: () => debug.runEnded() });
  registerCommands(s, registry, client, views);
  // Round-2 features (mcp.ts, editorcontext.ts, requests.ts "Show").
  setUserMcpConfig(context.globalStorageUri);
  trackActiveEditor(() => registry.panels, context.subscriptions);
  s.questions.onShow = (sessionId) => registry.openInChatView(sessionId, undefined, false);

  // Start the server now so a reload mid-run finds the session again at once.
  void client.ensure().catch((e) => s.output.error(String(e?.message ?? e)));

  /** For tests and benchmarks (the e2e test reads it through the `pi._debugState` command). */
  return { state: debug.state };
}

export async function deactivate(): Promise<void> {
  // The server first (it ends a run and writes what it has), the review state meanwhile.
  await Promise.all([lifecycle?.stop(), Promise.resolve(services?.saveReview()).catch(() => undefined)]);
}
