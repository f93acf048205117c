/**
 * Messages from the host (`src/shared/messages.ts` `HostToWebview`), each handed to the part it
 * is for: `init` loads the session, `notifications` go into the store, `response` settles a
 * request, server questions become cards, commands and editor context reach the composer.
 */
import type { HostToWebview } from "../shared/messages";
import { abort, compact, input, insertText, newSession, renderChips } from "./composer";
import { showFiles } from "./completion";
import { renderStatus } from "./header";
import { currentModel, loadModels } from "./pickers";
import { markQueueDirty } from "./queue";
import { questionDone, questionStale, showQuestion } from "./questions";
import { post, saved, settle } from "./rpc";
import { loadSession } from "./session";
import { saveState, store, ui } from "./state";
import { applyNotification, eventType, setVisible } from "./store";
import { notification, notificationsApplied, setEditorContext } from "./features";
import { schedule } from "./view";

let firstInit = true;
const decoder = new TextDecoder();

/** Handles one host message. */
export function onHostMessage(msg: HostToWebview): void {
  switch (msg?.type) {
    case "packed": {
      // The host's messages serialised once (messages.ts PackedMessage): handled in order, each
      // as if it had come alone.
      const json = msg.json as Uint8Array | ArrayBuffer | string;
      const text = typeof json === "string" ? json : decoder.decode(json);
      for (const m of JSON.parse(text) as HostToWebview[]) if (m?.type !== "packed") onHostMessage(m);
      return;
    }
    case "init": {
      ui.capabilities = msg.capabilities ?? {};
      // After a reload the host may not know the session yet: the first init falls back to the
      // one kept in webview state, and the panel re-attaches to it.
      const sid = msg.sessionId ?? (firstInit ? (saved?.sessionId ?? null) : null);
      firstInit = false;
      if (sid && !msg.sessionId) post({ type: "attach", sessionId: sid });
      void loadSession(sid);
      void loadModels();
      saveState();
      return;
    }
    case "notifications": {
      for (const n of msg.items) {
        if (n.method === "agent/ui/notification") continue;
        if (notification(n)) continue;
        applyNotification(store, n);
        if (n.method === "agent/queueUpdate") markQueueDirty();
        if (n.method === "agent/event" && eventType(n.params.event) === "agent_start" && !currentModel) void loadModels();
      }
      notificationsApplied();
      schedule();
      return;
    }
    case "response":
      settle(msg);
      return;
    case "serverRequest":
      showQuestion(msg);
      return;
    case "visibility": {
      setVisible(store, msg.visible);
      return;
    }
    case "serverRequestStale":
      questionStale(msg.requestId, msg.message);
      return;
    case "serverRequestDone":
      questionDone(msg.requestId);
      return;
    case "command": {
      switch (msg.command) {
        case "abort":
          void abort();
          return;
        case "focusComposer":
          input.focus();
          return;
        case "newSession":
          newSession();
          return;
        case "steerMode":
          ui.mode = "steer";
          renderStatus();
          return;
        case "followUpMode":
          ui.mode = "followUp";
          renderStatus();
          return;
        case "compact":
          void compact();
          return;
        case "insertText":
          insertText(msg.text ?? "");
          return;
      }
      return;
    }
    case "editorContext":
      setEditorContext(msg.item);
      renderChips();
      return;
    case "context": {
      ui.contextItems.push(...msg.items);
      renderChips();
      saveState();
      return;
    }
    case "files":
      showFiles(msg.query, msg.items);
      return;
  }
}
