/**
 * The `agent/*` requests the extension host itself sends (its commands and views), with the
 * params and results of the generated wire types (wire.ts); the panel's own methods
 * (panelMethods.ts) included. `Record<string, unknown>` params / `unknown` results: the Rust
 * type is not in wire.ts yet (pi-core's types, or not listed in server/lsp/src/wire_ts.rs).
 */
import type { PanelRequests } from "./panelMethods";
import type * as W from "./wire";

export interface HostRequests extends PanelRequests {
  "agent/session/new": { params: W.SessionNewParams; result: W.SessionState };
  "agent/session/list": { params: Record<string, never>; result: W.SessionListResult };
  "agent/session/open": { params: W.SessionOpenParams; result: W.SessionState };
  "agent/session/fork": { params: W.SessionForkParams; result: W.SessionForkResult };
  "agent/session/clone": { params: W.SessionParams; result: W.SessionForkResult };
  "agent/session/tree": { params: W.SessionParams; result: W.SessionTreeResult };
  "agent/session/label": { params: W.SessionLabelParams; result: W.SessionLabelResult };
  "agent/session/name": { params: W.SessionNameParams; result: W.SessionNameResult };
  "agent/session/export": { params: W.SessionExportParams; result: W.SessionExportResult };
  "agent/permissions/set": { params: Record<string, unknown>; result: unknown };
}

/** A method the host sends. */
export type HostMethod = keyof HostRequests;
/** The params of host method `M`. */
export type HostParams<M extends HostMethod> = HostRequests[M]["params"];
/** The result of host method `M`. */
export type HostResult<M extends HostMethod> = HostRequests[M]["result"];
