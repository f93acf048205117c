/**
 * The chat panel (webview side); this file only boots it. The parts:
 * - rpc.ts: the line to the host (messages, requests relayed to the server, webview state);
 * - inbox.ts: host messages handed to the part they are for;
 * - state.ts: the session's store (store.ts) and the panel-wide state;
 * - view.ts: the transcript area (transcript.ts, rows.ts) and the frame loop;
 * - header.ts: context meter, run state, attention banner; pickers.ts: model and thinking level;
 * - composer.ts: the prompt field, chips, send / steer / follow-up / stop; completion.ts: `@`, `/`;
 * - queue.ts: queued messages; questions.ts: the server's questions as cards (cards.ts);
 * - session.ts: loading a session and its history pages.
 * Notifications go into the normalized store, and one animation frame after a change renders
 * what changed. The composer, the queue, the request cards and the header are their own DOM
 * that no stream update touches (typing stays fast while text streams). Nothing runs while
 * nothing changes: no intervals, no polling; a frame is requested only when the store or the
 * scroll position changed.
 */
import "./webview.css";
import type { HostToWebview } from "../shared/messages";
import { composer, input, layoutComposer, renderChips } from "./composer";
import { attentionBar, header, layoutHeader, renderStatus } from "./header";
import { onHostMessage } from "./inbox";
import { MarkdownView, renderStats, warmUpSteps } from "./markdown";
import { queueList, renderQueue } from "./queue";
import { cards } from "./questions";
import { log, post, saved } from "./rpc";
import { loadOlder } from "./session";
import { saveState, store } from "./state";
import { app, empty, jumpButton, main, renderPending, renders, sending, transcript } from "./view";
import { installCodeActions } from "./codeblocks";
import { plan, recovery, showSnapshotAtBoot, turns } from "./features";

layoutHeader();
layoutComposer();
main.append(empty, jumpButton);
installCodeActions(main, post);
turns.install(main);
composer.insertBefore(turns.bar, input);
document.body.append(app);
// Retry / Continue and the plan strip above the questions and the composer; the plan-mode
// switch in the header (features.ts).
header.querySelector(".header-actions")?.prepend(plan.toggle);
app.append(header, attentionBar, main, sending, recovery.el, plan.el, cards, queueList, composer);
input.value = saved?.draft ?? "";

transcript.onNeedOlder = loadOlder;
window.addEventListener("message", (ev: MessageEvent<HostToWebview>) => onHostMessage(ev.data));
// The user's scrolling is kept in the webview state (our own pinning and anchoring is not a
// change of position: saving it would post the state to VS Code on every streaming render).
transcript.onUserScroll = () => saveState();

renderChips();
renderQueue();
renderStatus();
showSnapshotAtBoot();
post({ type: "ready", accepts: ["visibility", "packed"] });

// While the host and the server answer, make the Markdown and highlighting code warm (one
// small step per idle callback; done long before the panel is idle).
{
  const steps = warmUpSteps();
  const idle: (cb: () => void) => void = typeof requestIdleCallback === "function" ? (cb) => requestIdleCallback(cb, { timeout: 500 }) : (cb) => setTimeout(cb, 0);
  const next = () => {
    const step = steps.shift();
    if (!step) return;
    try {
      step();
    } catch (e) {
      log("warn", `warm-up: ${e}`);
    }
    idle(next);
  };
  idle(next);
}

/** Test hooks (read-only views for the browser tests). */
(window as unknown as { __pi: unknown }).__pi = {
  get store() {
    return store;
  },
  transcript,
  renderStats,
  get renders() {
    return renders();
  },
  /** A render is scheduled (see view.ts `renderPending`). */
  get pending() {
    return renderPending();
  },
  /** The HTML a fresh render of a finished text gives (to compare with a streamed one). */
  renderFresh(text: string): string {
    const v = new MarkdownView();
    v.update(text, true);
    return v.el.innerHTML;
  },
};
