/**
 * Generators for the performance tests: a Pi v3 session of N entries on one branch (user,
 * assistant with Markdown and code, tool calls with 2–50 KB results, thinking, compaction
 * entries) answered page by page as `agent/session/history` does, and a long streamed answer
 * as `agent/event` text deltas. Deterministic (seeded).
 */

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const words = "the agent reads files edits code runs tests and explains what it changed in this workspace while the user reviews each hunk".split(" ");

function sentence(r: () => number, n: number): string {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(words[Math.floor(r() * words.length)]!);
  const s = out.join(" ");
  return s[0]!.toUpperCase() + s.slice(1) + ".";
}

function markdown(r: () => number, i: number): string {
  const parts = [`Step ${i}: ${sentence(r, 12)} ${sentence(r, 9)}`];
  if (r() < 0.5) parts.push(`- ${sentence(r, 5)}\n- \`src/mod_${i % 17}.rs\` ${sentence(r, 4)}`);
  if (r() < 0.4) parts.push("```rust\n" + `fn step_${i}(x: u32) -> u32 {\n    // ${sentence(r, 6)}\n    x.wrapping_mul(${i}) + 1\n}` + "\n```");
  return parts.join("\n\n");
}

/** One Pi v3 entry list of `n` entries (root first). */
export function sessionEntries(n: number, seed = 7): any[] {
  const r = rng(seed);
  const entries: any[] = [];
  let t = Date.UTC(2026, 10, 1);
  let parent: string | null = null;
  const push = (e: any) => {
    const id = `e${entries.length.toString(16).padStart(6, "0")}`;
    t += 1000;
    entries.push({ ...e, id, parentId: parent, timestamp: new Date(t).toISOString() });
    parent = id;
    return t;
  };
  let k = 0;
  let lastCall: { id: string; tool: string } | null = null;
  while (entries.length < n) {
    const phase = k % 4;
    if (k > 0 && k % 997 === 0) {
      push({ type: "compaction", summary: `## Goal\n${sentence(r, 10)}\n\n## Progress\n- ${sentence(r, 8)}`, firstKeptEntryId: entries[entries.length - 1]!.id, tokensBefore: 150000 + k });
    } else if (phase === 0) {
      push({ type: "message", message: { role: "user", content: [{ type: "text", text: sentence(r, 14) }], timestamp: t + 1000 } });
    } else if (phase === 1) {
      const id = `call_${k}`;
      const tool = r() < 0.5 ? "read" : "bash";
      push({
        type: "message",
        message: {
          role: "assistant",
          content: [
            ...(r() < 0.3 ? [{ type: "thinking", thinking: sentence(r, 20) }] : []),
            { type: "text", text: markdown(r, k) },
            { type: "toolCall", id, name: tool, arguments: tool === "read" ? { path: `src/mod_${k % 17}.rs` } : { command: `cargo test -p crate_${k % 5}` } },
          ],
          api: "anthropic-messages", provider: "rec", model: "rec-1", usage: { input: 1000, output: 100, cacheRead: 0, cacheWrite: 0, totalTokens: 1100, cost: { input: 0.003, output: 0.0015, cacheRead: 0, cacheWrite: 0, total: 0.0045 } },
          stopReason: "toolUse", timestamp: t + 1000,
        },
      });
      lastCall = { id, tool };
    } else if (phase === 2 && lastCall) {
      const call = lastCall;
      lastCall = null;
      const size = 2000 + Math.floor(r() * r() * 48000); // 2–50 KB, most of them small
      const line = "test result line: ok — 0 failed; finished in 0.01s\n";
      push({ type: "message", message: { role: "toolResult", toolCallId: call.id, toolName: call.tool, content: [{ type: "text", text: line.repeat(Math.ceil(size / line.length)).slice(0, size) }], isError: false, timestamp: t + 1000 } });
    } else if (phase !== 2) {
      push({ type: "message", message: { role: "assistant", content: [{ type: "text", text: markdown(r, k) }], api: "anthropic-messages", provider: "rec", model: "rec-1", usage: { input: 1200, output: 150, cacheRead: 0, cacheWrite: 0, totalTokens: 1350, cost: { input: 0.0036, output: 0.00225, cacheRead: 0, cacheWrite: 0, total: 0.00585 } }, stopReason: "stop", timestamp: t + 1000 } });
    }
    k++;
  }
  return entries;
}

/** `agent/session/history` over `entries` (the paging the server implements). */
export function historyPage(sessionId: string, entries: any[], params: { beforeEntryId?: string; limit?: number }): any {
  const limit = Math.min(params.limit ?? 50, 500);
  const end = params.beforeEntryId ? entries.findIndex((e) => e.id === params.beforeEntryId) : entries.length;
  const start = Math.max(0, end - limit);
  return { sessionId, leafId: entries[entries.length - 1]?.id ?? null, entries: entries.slice(start, end), hasMore: start > 0 };
}

/** A long answer with paragraphs, lists and code blocks, cut into `n` fragments of 3–40 chars. */
export function streamedAnswer(n: number, seed = 11): { text: string; deltas: string[] } {
  const r = rng(seed);
  const deltas: string[] = [];
  let text = "";
  let i = 0;
  let pending = "";
  while (deltas.length < n) {
    if (pending.length < 64) pending += markdown(r, i++) + "\n\n";
    const len = 3 + Math.floor(r() * 38);
    const d = pending.slice(0, len);
    pending = pending.slice(len);
    deltas.push(d);
    text += d;
  }
  return { text, deltas };
}
