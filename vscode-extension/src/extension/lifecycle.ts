/**
 * The language client's lifecycle: finds the `pi-lsp` binary (server.ts), starts the client once
 * however many callers ask at once, answers the server's requests to the editor
 * (`agent/requestPermission` and `agent/ui/request` through requests.ts, `agent/saveDocument`,
 * `agent/diagnostics`), takes its notifications (compact deltas expanded here, deltas.ts) and
 * stops it (deactivate, Restart Server).
 */
import * as vscode from "vscode";
import { type LanguageClient, State } from "vscode-languageclient/node";
import { AgentSaves } from "./agentsave";
import { callKey } from "./changes";
import { DeltaExpander } from "./deltas";
import { showServerMessage } from "./mcp";
import type { Note } from "./relay";
import { createClient, resolveServerBinary } from "./server";
import type { Services } from "./services";

/** Server notifications relayed to the panels (and watched by the host). */
export const NOTIFICATIONS = ["agent/event", "agent/queueUpdate", "agent/usage", "agent/attention", "agent/ui/notification", "agent/didWriteDocument", "agent/plan"];

/** The one language client of the window, started on demand. */
export class ClientLifecycle {
  private client: LanguageClient | undefined;
  private starting: Promise<LanguageClient> | undefined;

  /** `onNotification`: every relayed server notification (notifications.ts). */
  constructor(
    private readonly s: Services,
    private readonly onNotification: (note: Note) => void,
  ) {}

  /** The running client; starts it when there is none (one start for concurrent callers; a
   * failed start is tried again by the next caller). */
  async ensure(): Promise<LanguageClient> {
    if (this.client && this.client.state === State.Running) return this.client;
    this.starting ??= this.start().then(
      (c) => {
        this.client = c;
        return c;
      },
      (e) => {
        this.starting = undefined;
        throw e;
      },
    );
    return this.starting;
  }

  /** Stops the client (waiting for a start under way), at most 5 s. */
  async stop(): Promise<void> {
    const c = this.client ?? (this.starting ? await this.starting.catch(() => undefined) : undefined);
    this.client = undefined;
    this.starting = undefined;
    if (c) await c.stop(5000).catch((e) => this.s.output.warn(`stopping pi-lsp: ${String(e)}`));
  }

  private async start(): Promise<LanguageClient> {
    const { context, output, trace, changes, questions, unsaved } = this.s;
    const config = vscode.workspace.getConfiguration("pi");
    const binary = resolveServerBinary({
      setting: config.get<string>("serverPath", ""),
      pathEnv: process.env.PATH,
      workspaceFolders: (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath),
      extensionPath: context.extensionPath,
    });
    if (!binary) {
      const msg = "Pi: no pi-lsp binary found (setting pi.serverPath, PATH, the workspace's target/release/pi-lsp, or the one bundled with the extension).";
      void vscode.window.showErrorMessage(msg, "Open Settings").then((c) => c && vscode.commands.executeCommand("workbench.action.openSettings", "pi.serverPath"));
      throw new Error(msg);
    }
    output.info(`starting ${binary.path} (from ${binary.source})`);
    // An agent edit of a clean document lands through the disk, so no save participant runs
    // for the agent (agentsave.ts); the tracker records it either way.
    const saves = new AgentSaves(output);
    const c = createClient(binary, output, trace, { applyEdit: (p, next) => changes.applyEdit(p, (q) => saves.applyEdit(q, next)) });
    c.onRequest("agent/requestPermission", async (params: any, token) => {
      const call = params?.toolCallId ? callKey(params.sessionId, params.toolCallId) : undefined;
      if (params?.change && call) changes.pendingChanges.set(call, params.change);
      try {
        return await questions.ask("agent/requestPermission", params, token);
      } finally {
        if (call) changes.pendingChanges.delete(call);
      }
    });
    c.onRequest("agent/ui/request", (params: any, token) => questions.ask("agent/ui/request", params, token));
    c.onRequest("agent/saveDocument", async (params: { uri: string }) => {
      const key = vscode.Uri.parse(params.uri).toString();
      const doc = vscode.workspace.textDocuments.find((d) => d.uri.toString() === key);
      if (!doc) return { saved: false };
      unsaved.saved(doc.uri);
      return { saved: doc.isDirty ? await doc.save() : true };
    });
    // The disk got only the agent's change; the buffer keeps the user's unsaved changes. The
    // user's own save later writes everything: unsaved.ts keeps VS Code from calling it a
    // conflict ("the content of the file is newer").
    c.onNotification("agent/didMergeToDisk", (params: { uri: string; previousMtime?: { sec: number; nsec: number } | null }) => {
      unsaved.merged(vscode.Uri.parse(params.uri), params.previousMtime ?? undefined);
    });
    c.onRequest("agent/diagnostics", async (params: { uris?: string[] }) => {
      const pairs: [vscode.Uri, readonly vscode.Diagnostic[]][] = params?.uris
        ? params.uris.map((u) => {
            const uri = vscode.Uri.parse(u);
            return [uri, vscode.languages.getDiagnostics(uri)] as [vscode.Uri, vscode.Diagnostic[]];
          })
        : vscode.languages.getDiagnostics().filter(([u]) => u.scheme === "file");
      const items = [];
      for (const [uri, diags] of pairs) items.push({ uri: c.code2ProtocolConverter.asUri(uri), diagnostics: await c.code2ProtocolConverter.asDiagnostics([...diags]) });
      return { items };
    });
    // Compact deltas (asked for in server.ts): expanded here, so nothing past this line knows.
    const deltas = new DeltaExpander();
    for (const method of NOTIFICATIONS) {
      if (method === "agent/event") c.onNotification(method, (params: any) => this.onNotification({ method, params: deltas.event(params) }));
      else c.onNotification(method, (params: any) => this.onNotification({ method, params }));
    }
    // vscode-jsonrpc hands a notification's positional params to the handler as separate
    // arguments: gather them back into the array.
    c.onNotification("agent/delta", (...params: unknown[]) => {
      const e = deltas.expand(params);
      if (e instanceof Error) output.warn(e.message);
      else this.onNotification({ method: "agent/event", params: e });
    });
    await c.start();
    // MCP failures come with a button to the servers' list (mcp.ts).
    c.onNotification("window/showMessage", (p: { type: number; message: string }) => void showServerMessage(p, () => void vscode.commands.executeCommand("pi.mcp.servers"), output));
    output.info(`pi-lsp started: ${JSON.stringify(c.initializeResult?.serverInfo ?? {})}`);
    return c;
  }
}
