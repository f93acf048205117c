/**
 * Starting pi-lsp with vscode-languageclient: which binary, what the client advertises, and the
 * initialization options.
 *
 * Binary, first found (README "VS Code"): the `pi.serverPath` setting; `pi-lsp` on `PATH`; the
 * workspace's `target/release/pi-lsp`; the binary bundled in the platform-specific `.vsix`
 * (`bin/pi-lsp`).
 *
 * Capabilities: `experimental.agent.{requestPermission, saveDocument, ui, diagnostics,
 * syncsAllDocuments}` (docs/protocol.md "Lifecycle and capabilities"); the document selector
 * covers every `file` document, so the server always sees real buffers.
 */
import * as vscode from "vscode";
import { LanguageClient, type LanguageClientOptions, type ServerOptions, type StaticFeature, TransportKind } from "vscode-languageclient/node";
import type { ApplyWorkspaceEditParams, ApplyWorkspaceEditResult } from "vscode-languageclient";

export { resolveServerBinary, type ServerBinary } from "./binary";
import type { ServerBinary } from "./binary";
import { mcpInitializationOptions } from "./mcp";
import { STREAM_POST_INTERVAL_MS } from "./relay";

/** The `experimental.agent` capabilities this client implements. */
export const AGENT_CLIENT_CAPABILITIES = {
  requestPermission: true,
  saveDocument: true,
  ui: true,
  diagnostics: true,
  syncsAllDocuments: true,
} as const;

class AgentCapabilities implements StaticFeature {
  getState() {
    return { kind: "static" as const };
  }
  fillClientCapabilities(capabilities: any): void {
    capabilities.experimental ??= {};
    capabilities.experimental.agent = { ...AGENT_CLIENT_CAPABILITIES };
    // The `pi.saveUserChanges` setting (docs/protocol.md "agent/didMergeToDisk"): the editor's
    // own choice, over Pi's settings files.
    const save = vscode.workspace.getConfiguration("pi").get<string>("saveUserChanges");
    if (save && save !== "default") capabilities.experimental.agent.saveUserChanges = save;
    // No work-done progress: the status bar item shows the run's state (status.ts); the
    // server's progress reports (fragments of the streamed text) would add a second, noisy one.
    capabilities.window ??= {};
    capabilities.window.workDoneProgress = false;
  }
  initialize(): void {}
  clear(): void {}
  dispose(): void {}
}

/** The initialization options from the settings (`null` values are left out). */
export function initializationOptions(config: vscode.WorkspaceConfiguration): Record<string, unknown> {
  // compactDeltas: streamed deltas as `agent/delta`, expanded by deltas.ts (~3x fewer bytes).
  // coalesceDeltasMs: the server joins a block's deltas for as long as the host holds a batch
  // anyway (relay.ts STREAM_POST_INTERVAL_MS), so one notification fills one post.
  const out: Record<string, unknown> = { workspaceTrusted: vscode.workspace.isTrusted, compactDeltas: true, coalesceDeltasMs: STREAM_POST_INTERVAL_MS };
  const model = config.get<string>("model", "").trim();
  if (model) out.model = model;
  const policy = config.get<string>("approvalPolicy", "default");
  if (policy && policy !== "default") out.approvalPolicy = policy;
  Object.assign(out, mcpInitializationOptions(config));
  return out;
}

export interface ClientHooks {
  /** Wraps every `workspace/applyEdit` (for the changes tracker). */
  applyEdit(params: ApplyWorkspaceEditParams, next: (p: ApplyWorkspaceEditParams) => Promise<ApplyWorkspaceEditResult>): Promise<ApplyWorkspaceEditResult>;
}

/** Creates (does not start) the client for `binary`. */
export function createClient(binary: ServerBinary, output: vscode.LogOutputChannel, trace: vscode.LogOutputChannel, hooks: ClientHooks): LanguageClient {
  const cwd = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  const run = { command: binary.path, transport: TransportKind.stdio, options: { cwd, env: { ...process.env } } };
  const serverOptions: ServerOptions = { run, debug: run };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: "file" }],
    outputChannel: output,
    traceOutputChannel: trace,
    initializationOptions: () => initializationOptions(vscode.workspace.getConfiguration("pi")),
    middleware: {
      workspace: {
        handleApplyEdit: async (params, next) => {
          const call = async (p: ApplyWorkspaceEditParams) => (await next(p, new vscode.CancellationTokenSource().token)) as ApplyWorkspaceEditResult;
          return hooks.applyEdit(params, call);
        },
      },
    },
  };
  const client = new LanguageClient("pi", "Pi", serverOptions, clientOptions);
  client.registerFeature(new AgentCapabilities());
  return client;
}
