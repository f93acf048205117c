// A loopback OpenAI-compatible model server (`POST /v1/chat/completions`, streamed SSE) for
// the whole-extension test. It answers by the last user message's first word, so the test
// drives it through the chat panel like a person would:
//   "hello …"  → a streamed Markdown answer (text in small chunks)
//   "edit …"   → an `edit` tool call on notes.txt (beta → BETA), then "Edited notes.txt."
//   "sleep …"  → a `bash` tool call `sleep 60; echo woke`, then "The command finished."
//   "slow …"   → a long answer streamed slowly (≈ 15 s), for the reload-mid-run test
//   "later …"  → after 4 s, an `edit` of notes.txt (gamma → GAMMA), then "Edited gamma."
//   "diag …"   → a `diagnostics` tool call, then "The editor reports: <the tool's text>"
//   "many …"   → MANY_WORDS one-word deltas at ≈ 500 per second (the host's batching figures)
//   "pause …"  → after 3 s, "Done pausing." (a run that ends while the panel is hidden)
//   "bigedit …" → one `edit` of big.txt (BIG_LINES lines) changing every 100th line (50 hunks)
//   "twohunks …" → one `edit` of story.txt changing lines 2 and 8 (two hunks), then "Edited the story."
// Other text gets "I only know hello, edit, sleep and slow."
// Every request is recorded (`requests`); usage is reported so the context meter moves.
import fs from "node:fs";
import http from "node:http";

function chunks(text, size) {
  const out = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

export const HELLO_ANSWER =
  "Hello from the **mock model**. Here is a list:\n\n- one\n- two\n\nand some code:\n\n```js\nconsole.log(\"pi\");\n```\n\nThat is all.";
/** Words of the burst: 6,000 (12 s at 500 per second). The host's CPU per event is read from
 * the thread clock, which Linux advances in scheduler-tick steps: over a burst of a few
 * milliseconds of work a handful of steps decide the figure, so the burst is long enough for
 * many of them (2,000 words gave 1.5–5.3 ms per 1,000 events for the same code). */
export const MANY_WORDS = 6000;
/** MANY_WORDS words, streamed one per chunk every 2 ms (≈ 500 deltas per second). */
export const MANY_ANSWER = Array.from({ length: MANY_WORDS }, (_, i) => `w${i}`).join(" ") + " END";
export const SLOW_ANSWER = Array.from({ length: 60 }, (_, i) => `Line ${i + 1} of a slow answer.`).join("\n");

/** story.txt of the Changes view's step: ten lines, of which the agent changes two. */
export const STORY = Array.from({ length: 10 }, (_, i) => `line ${i + 1} of the story`).join("\n") + "\n";

/** big.txt of the typing test: 5,000 lines. */
export const BIG_LINES = 5000;
export const BIG_TEXT = Array.from({ length: BIG_LINES }, (_, i) => `line ${i} of the big file`).join("\n") + "\n";

/** What to answer for `messages`: `{text?, toolCall?, delayMs}`. */
export function plan(messages) {
  let lastUser = -1;
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i].role === "user") {
    lastUser = i;
    break;
  }
  const u = messages[lastUser];
  // After an abort the server puts a note block before the user's text: read the last block.
  const blocks = typeof u?.content === "string" ? [u.content] : (u?.content ?? []).map((b) => b.text ?? "");
  const text = blocks[blocks.length - 1] ?? "";
  const answered = messages.slice(lastUser + 1).some((m) => m.role === "tool");
  const word = (text.trim().split(/\s+/)[0] ?? "").toLowerCase();
  if (word === "hello") return { text: HELLO_ANSWER, chunk: 6, delayMs: 15 };
  if (word === "edit")
    return answered
      ? { text: "Edited notes.txt.", chunk: 4, delayMs: 10 }
      : { toolCall: { name: "edit", arguments: { path: "notes.txt", edits: [{ oldText: "beta", newText: "BETA" }] } } };
  if (word === "sleep")
    return answered ? { text: "The command finished.", chunk: 4, delayMs: 10 } : { toolCall: { name: "bash", arguments: { command: "sleep 60; echo woke" } } };
  if (word === "slow") return { text: SLOW_ANSWER, chunk: 8, delayMs: 60 };
  if (word === "later")
    return answered
      ? { text: "Edited gamma.", chunk: 4, delayMs: 10 }
      : { toolCall: { name: "edit", arguments: { path: "notes.txt", edits: [{ oldText: "gamma", newText: "GAMMA" }] } }, delayMs: 4000 };
  if (word === "diag") {
    if (!answered) return { toolCall: { name: "diagnostics", arguments: {} } };
    const tool = messages.filter((m) => m.role === "tool").pop();
    const text = typeof tool?.content === "string" ? tool.content : (tool?.content ?? []).map((b) => b.text ?? "").join("");
    return { text: `The editor reports: ${text}`, chunk: 16, delayMs: 5 };
  }
  if (word === "pause") return { text: "Done pausing.", chunk: 4, delayMs: 10, firstDelayMs: 3000 };
  if (word === "bigedit")
    return answered
      ? { text: "Edited big.txt.", chunk: 8, delayMs: 5 }
      : {
          toolCall: {
            name: "edit",
            arguments: { path: "big.txt", edits: Array.from({ length: BIG_LINES / 100 }, (_, k) => ({ oldText: `line ${k * 100 + 50} of the big file`, newText: `LINE ${k * 100 + 50} OF THE BIG FILE` })) },
          },
        };
  if (word === "twohunks")
    return answered
      ? { text: "Edited the story.", chunk: 6, delayMs: 5 }
      : {
          toolCall: {
            name: "edit",
            arguments: {
              path: "story.txt",
              edits: [
                { oldText: "line 2 of the story", newText: "LINE 2 OF THE STORY" },
                { oldText: "line 8 of the story", newText: "LINE 8 OF THE STORY" },
              ],
            },
          },
        };
  if (word === "many") return { text: MANY_ANSWER, words: true, delayMs: 2 };
  return { text: "I only know hello, edit, sleep and slow.", chunk: 8, delayMs: 5 };
}

export async function startMockModel() {
  const requests = [];
  let calls = 0;
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", async () => {
      if (req.method !== "POST" || !req.url.endsWith("/chat/completions")) {
        res.writeHead(404).end();
        return;
      }
      const json = JSON.parse(body);
      requests.push(json);
      if (process.env.PI_E2E_MOCK_LOG) fs.appendFileSync(process.env.PI_E2E_MOCK_LOG, JSON.stringify(json.messages) + "\n");
      const p = plan(json.messages ?? []);
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
      res.socket?.setNoDelay(true);
      const id = `chatcmpl-${requests.length}`;
      const send = (delta, finish = null) =>
        res.write(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`);
      let closed = false;
      res.on("close", () => (closed = true));
      send({ role: "assistant", content: "" });
      if (p.firstDelayMs) await new Promise((r) => setTimeout(r, p.firstDelayMs));
      if (p.toolCall) {
        if (p.delayMs) await new Promise((r) => setTimeout(r, p.delayMs));
        const cid = `call_${++calls}`;
        send({ tool_calls: [{ index: 0, id: cid, type: "function", function: { name: p.toolCall.name, arguments: "" } }] });
        send({ tool_calls: [{ index: 0, function: { arguments: JSON.stringify(p.toolCall.arguments) } }] });
        send({}, "tool_calls");
      } else {
        const parts = p.words ? p.text.split(/(?<= )/) : chunks(p.text, p.chunk);
        if (p.words) {
          // Words at one per delayMs on average by the wall clock: a late timer (a loaded
          // machine) sends the words that are due at once, so the rate holds. Each is its own
          // SSE event, as a provider sends them.
          const start = Date.now();
          for (let i = 0; i < parts.length; ) {
            if (closed) return;
            const due = Math.min(parts.length, Math.floor((Date.now() - start) / p.delayMs) + 1);
            for (; i < due; i++) send({ content: parts[i] });
            await new Promise((r) => setTimeout(r, p.delayMs));
          }
        } else
          for (const c of parts) {
            if (closed) return;
            send({ content: c });
            await new Promise((r) => setTimeout(r, p.delayMs));
          }
        send({}, "stop");
      }
      const prompt = Math.round(body.length / 4);
      res.write(`data: ${JSON.stringify({ id, choices: [], usage: { prompt_tokens: prompt, completion_tokens: 20, total_tokens: prompt + 20 } })}\n\n`);
      res.end("data: [DONE]\n\n");
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address();
  return {
    requests,
    baseUrl: `http://127.0.0.1:${port}/v1`,
    modelsJson() {
      return {
        providers: {
          mock: {
            baseUrl: `http://127.0.0.1:${port}/v1`,
            api: "openai-completions",
            apiKey: "test-key",
            compat: { supportsDeveloperRole: false },
            models: [
              { id: "mock-1", name: "Mock One", contextWindow: 128000, maxTokens: 4096, cost: { input: 3, output: 15, cacheRead: 0, cacheWrite: 0 } },
              { id: "mock-think", name: "Mock Thinker", reasoning: true, contextWindow: 200000, maxTokens: 8192, cost: { input: 1, output: 5, cacheRead: 0, cacheWrite: 0 } },
            ],
          },
        },
      };
    },
    close: () => new Promise((r) => server.close(r)),
  };
}
