// What the whole-extension test's loopback model answers: the script of the one mock model
// (the `mock-model` binary, tests/bin/mock_model.rs; harness.mjs starts it) and the values the
// test compares against. The model answers by the last user message's first word, so the test
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
//   "lens …"   → an `edit` of lens.txt (two → TWO), then "Edited lens.txt."
//   "mine …"   → an `edit` of mine.txt (three → THREE), then "Edited mine.txt."
// Other text gets DEFAULT_ANSWER. Usage is reported (input: the request's length / 4) so the
// context meter moves.

export const HELLO_ANSWER =
  "Hello from the **mock model**. Here is a list:\n\n- one\n- two\n\nand some code:\n\n```js\nconsole.log(\"pi\");\n```\n\nThat is all.";
/** Words of the burst: 6,000 (12 s at 500 per second), enough notifications and posts that the
 * host's CPU per event (summed over each notification's and post's section, relay.ts `cpuNow`)
 * is a steady figure. */
export const MANY_WORDS = 6000;
/** MANY_WORDS words, streamed one per chunk every 2 ms (≈ 500 deltas per second). */
export const MANY_ANSWER = Array.from({ length: MANY_WORDS }, (_, i) => `w${i}`).join(" ") + " END";
export const SLOW_ANSWER = Array.from({ length: 60 }, (_, i) => `Line ${i + 1} of a slow answer.`).join("\n");
export const DEFAULT_ANSWER = "I only know hello, edit, sleep and slow.";

/** story.txt of the Changes view's step: ten lines, of which the agent changes two. */
export const STORY = Array.from({ length: 10 }, (_, i) => `line ${i + 1} of the story`).join("\n") + "\n";

/** big.txt of the typing test: 5,000 lines. */
export const BIG_LINES = 5000;
export const BIG_TEXT = Array.from({ length: BIG_LINES }, (_, i) => `line ${i} of the big file`).join("\n") + "\n";

const call = (name, args) => ({ toolCalls: [{ name, arguments: args }] });
const edit = (path, edits) => call("edit", { path, edits });
/** A rule: the prompt's first word, then the step of each tool round (the last one repeats). */
const rule = (word, ...steps) => ({ when: { firstWord: word }, steps });

/** The mock model's JSON script (tests/support/mock_script.rs). */
export function script() {
  return {
    rules: [
      rule("hello", { text: HELLO_ANSWER, chunk: 6, chunkDelayMs: 15 }),
      rule("edit", edit("notes.txt", [{ oldText: "beta", newText: "BETA" }]), { text: "Edited notes.txt.", chunk: 4, chunkDelayMs: 10 }),
      rule("sleep", call("bash", { command: "sleep 60; echo woke" }), { text: "The command finished.", chunk: 4, chunkDelayMs: 10 }),
      rule("lens", edit("lens.txt", [{ oldText: "two", newText: "TWO" }]), { text: "Edited lens.txt.", chunk: 4, chunkDelayMs: 10 }),
      rule("mine", edit("mine.txt", [{ oldText: "three", newText: "THREE" }]), { text: "Edited mine.txt.", chunk: 4, chunkDelayMs: 10 }),
      rule("slow", { text: SLOW_ANSWER, chunk: 8, chunkDelayMs: 60 }),
      rule("later", { ...edit("notes.txt", [{ oldText: "gamma", newText: "GAMMA" }]), firstDelayMs: 4000 }, { text: "Edited gamma.", chunk: 4, chunkDelayMs: 10 }),
      rule("diag", call("diagnostics", {}), { text: "The editor reports: {lastToolResult}", chunk: 16, chunkDelayMs: 5 }),
      rule("pause", { text: "Done pausing.", chunk: 4, chunkDelayMs: 10, firstDelayMs: 3000 }),
      rule(
        "bigedit",
        edit(
          "big.txt",
          Array.from({ length: BIG_LINES / 100 }, (_, k) => ({ oldText: `line ${k * 100 + 50} of the big file`, newText: `LINE ${k * 100 + 50} OF THE BIG FILE` })),
        ),
        { text: "Edited big.txt.", chunk: 8, chunkDelayMs: 5 },
      ),
      rule(
        "twohunks",
        edit("story.txt", [
          { oldText: "line 2 of the story", newText: "LINE 2 OF THE STORY" },
          { oldText: "line 8 of the story", newText: "LINE 8 OF THE STORY" },
        ]),
        { text: "Edited the story.", chunk: 6, chunkDelayMs: 5 },
      ),
      // Words at one per 2 ms on average by the wall clock: a late timer (a loaded machine)
      // sends the words that are due at once, so the rate holds. Each is its own SSE event.
      rule("many", { text: MANY_ANSWER, words: true, chunkDelayMs: 2, keepRate: true }),
    ],
    default: { text: DEFAULT_ANSWER, chunk: 8, chunkDelayMs: 5 },
    usage: { inputFromBody: true, output: 20 },
  };
}
