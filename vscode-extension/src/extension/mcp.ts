/**
 * The workspace's MCP servers in VS Code (issue 28; docs/protocol.md "MCP servers",
 * docs/mcp.md): the "Pi: MCP Servers" quick pick lists each server with its state, tool count,
 * scope and error, and enables, disables, reconnects it or sets its exposure through
 * `agent/mcp/*` (saved by the server to the file that defines the server, for every session of
 * the workspace); a server's failure, which the server tells once as `window/showMessage`
 * (`MCP server "<name>": …`), comes as a warning with a button to this list; and the
 * `pi.mcp.vscodeServers` setting offers the servers configured for VS Code itself (the
 * workspace's `.vscode/mcp.json` and the user's `mcp.json`, initialization options
 * `vscodeMcpServers` / `vscodeMcpUserConfig`), off by default.
 */
import * as path from "node:path";
import * as vscode from "vscode";

/** One server of `agent/mcp/list` (docs/protocol.md). */
export interface McpServerInfo {
  name: string;
  state: "disabled" | "connecting" | "connected" | "failed" | "disconnected" | "needs-auth" | "closed" | string;
  transport?: string;
  exposure?: string;
  enabled?: boolean;
  scope?: string;
  source?: string;
  toolCount?: number;
  error?: string;
  tools?: { name: string; modelName: string; exposure?: string }[];
}

/** The answer of every `agent/mcp/*` method. */
export interface McpList {
  servers: McpServerInfo[];
  errors: string[];
}

/** The exposures a server may be set to (docs/mcp.md). */
export const EXPOSURES = ["direct", "deferred", "hidden", "codemode"] as const;

/** The user's VS Code `mcp.json` (the profile's folder: two levels above the extension's
 * global storage, `<user data>/User[/profiles/<id>]/globalStorage/<extension>`). */
let userMcpConfig: string | undefined;

/** Remembers where the user's VS Code `mcp.json` is (from the extension's global storage). */
export function setUserMcpConfig(globalStorage: vscode.Uri): void {
  userMcpConfig = path.join(globalStorage.fsPath, "..", "..", "mcp.json");
}

/** The initialization options of `pi.mcp.vscodeServers`: `on` → `vscodeMcpServers: true` and the
 * user's `mcp.json`; `off` → `false`; `default` → nothing (Pi's settings.json decides, else
 * off). */
export function mcpInitializationOptions(config: vscode.WorkspaceConfiguration): Record<string, unknown> {
  const v = config.get<string>("mcp.vscodeServers", "default");
  if (v === "on") return userMcpConfig ? { vscodeMcpServers: true, vscodeMcpUserConfig: userMcpConfig } : { vscodeMcpServers: true };
  if (v === "off") return { vscodeMcpServers: false };
  return {};
}

const ICONS: Record<string, string> = {
  connected: "$(pass-filled)",
  connecting: "$(sync~spin)",
  failed: "$(error)",
  "needs-auth": "$(lock)",
  disabled: "$(circle-slash)",
  disconnected: "$(debug-disconnect)",
  closed: "$(circle-outline)",
};

/** A server's row of the quick pick: label, description, detail. */
export function serverRow(s: McpServerInfo): { label: string; description: string; detail?: string } {
  const tools = typeof s.toolCount === "number" ? `${s.toolCount} tool${s.toolCount === 1 ? "" : "s"}` : "";
  const parts = [s.state, tools, s.exposure, s.scope].filter(Boolean);
  const row: { label: string; description: string; detail?: string } = { label: `${ICONS[s.state] ?? "$(circle-outline)"} ${s.name}`, description: parts.join(" · ") };
  if (s.error) row.detail = s.error.split("\n")[0];
  return row;
}

/** What can be done with `s`: `[action, label]`. */
export function serverActions(s: McpServerInfo): [string, string][] {
  const out: [string, string][] = [];
  if (s.enabled === false || s.state === "disabled") out.push(["enable", "$(check) Enable"]);
  else {
    out.push(["reconnect", "$(refresh) Reconnect"]);
    out.push(["disable", "$(circle-slash) Disable"]);
  }
  out.push(["exposure", "$(eye) Set Exposure…"]);
  if (s.error) out.push(["error", "$(output) Show the Error"]);
  if (s.source) out.push(["source", "$(go-to-file) Open Its Configuration"]);
  return out;
}

type Request = (method: string, params: unknown) => Promise<unknown>;

/** The "Pi: MCP Servers" quick pick. `request` sends to the server (starting it if needed). */
export async function showMcpServers(request: Request, log: vscode.LogOutputChannel): Promise<void> {
  for (;;) {
    let list: McpList;
    try {
      list = (await request("agent/mcp/list", {})) as McpList;
    } catch (e) {
      void vscode.window.showErrorMessage(`Pi: MCP servers: ${e instanceof Error ? e.message : String(e)}`);
      return;
    }
    type Item = vscode.QuickPickItem & { server?: McpServerInfo };
    const items: Item[] = list.servers.map((s) => ({ ...serverRow(s), server: s }));
    for (const e of list.errors ?? []) items.push({ label: "$(warning) Configuration error", description: "", detail: e });
    if (items.length === 0) items.push({ label: "No MCP servers", description: "", detail: "Configure them in ~/.pi/agent/mcp.json or .pi/mcp.json (or turn on pi.mcp.vscodeServers for VS Code's mcp.json)" });
    const pick = await vscode.window.showQuickPick(items, { title: "Pi: MCP Servers", placeHolder: "Choose a server to enable, disable, reconnect or set its exposure", matchOnDescription: true, matchOnDetail: true });
    if (!pick?.server) return;
    const s = pick.server;
    const acts = serverActions(s).map(([action, label]) => ({ label, action }));
    const act = await vscode.window.showQuickPick(acts, { title: `Pi: MCP server ${s.name}`, placeHolder: serverRow(s).description });
    if (!act) continue;
    try {
      switch (act.action) {
        case "enable":
        case "disable":
        case "reconnect": {
          const r = (await request(`agent/mcp/${act.action}`, { server: s.name })) as McpList;
          const now = r.servers.find((x) => x.name === s.name);
          if (now?.state === "failed" && now.error) void vscode.window.showWarningMessage(`Pi: MCP server "${s.name}": ${now.error.split("\n")[0]}`);
          break;
        }
        case "exposure": {
          const e = await vscode.window.showQuickPick(
            EXPOSURES.map((x) => ({ label: x, description: x === s.exposure ? "current" : "" })),
            { title: `Pi: exposure of ${s.name}`, placeHolder: "direct: declared to the model; deferred: loaded by tool_search; hidden: not offered" },
          );
          if (e) await request("agent/mcp/setExposure", { server: s.name, exposure: e.label });
          break;
        }
        case "error":
          log.warn(`MCP server "${s.name}": ${s.error}`);
          log.show(true);
          break;
        case "source":
          if (s.source) await vscode.window.showTextDocument(vscode.Uri.file(s.source), { preview: true });
          return;
      }
    } catch (e) {
      void vscode.window.showErrorMessage(`Pi: MCP server ${s.name}: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
}

/** `window/showMessage` from the server: an MCP failure (`MCP server "…": …`, `MCP
 * configuration: …`) as a warning with "Show MCP Servers"; any other message as VS Code shows
 * it. Returns the text shown (for tests). */
export function showServerMessage(params: { type: number; message: string }, openList: () => void, log?: vscode.LogOutputChannel): string {
  const text = String(params?.message ?? "");
  // Log messages go to the output channel only (as vscode-languageclient does).
  if (params?.type === 4) {
    log?.info(text);
    return "";
  }
  const mcp = /^MCP (server "|configuration: )/.test(text);
  const show = params?.type === 1 ? vscode.window.showErrorMessage : params?.type === 2 ? vscode.window.showWarningMessage : vscode.window.showInformationMessage;
  if (mcp) {
    void show(`Pi: ${text}`, "Show MCP Servers").then((c) => c && openList());
    return `Pi: ${text}`;
  }
  void show(text);
  return text;
}
