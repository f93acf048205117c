#!/usr/bin/env python3
"""`pi-lsp acp` figures (docs/acp.md "Performance"), on bench.py's loopback scripted model:

- first `agent_message_chunk` after the model's first byte: (prompt sent → first chunk) less
  (the same request from a plain HTTP client → its first body byte), median of N;
- bytes on stdout per character for the 4,500 × 8-character stream (36,000 characters; the
  LSP edge's row "bytes per streamed delta" / 8 is its figure per character);
- bytes per character of the 36,000-character answer (deltas of 100 characters);
- `agent_message_chunk` updates per second while a paced stream (one delta every 12 ms)
  streams: at most about 60 (chunks coalesced as the LSP edge coalesces deltas);
- `session/load` of a 10,000-message session: request sent → answer (its replay included).

Usage: bench/acp_bench.py PI_LSP_BIN [--runs N]
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import http.client
import statistics
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench  # noqa: E402


class Acp:
    def __init__(self, binary, cwd, env):
        self.p = subprocess.Popen([binary, "acp", "--model", "mock/mock-1"], cwd=cwd, env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next = 0
        self.lines = []  # (time, bytes, message)
        self.answered = {}  # request id → time its answer arrived
        self.cv = threading.Condition()
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for raw in self.p.stdout:
            t = time.perf_counter()
            msg = json.loads(raw)
            if "method" in msg and "id" in msg:  # the agent asks: allow once
                self.send({"jsonrpc": "2.0", "id": msg["id"],
                           "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})
            with self.cv:
                self.lines.append((t, len(raw), msg))
                if "id" in msg and "method" not in msg:
                    self.answered[msg["id"]] = t
                    self.cv.notify_all()

    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def request(self, method, params):
        self.next += 1
        i = self.next
        mark = len(self.lines)
        t = time.perf_counter()
        self.send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
        with self.cv:
            self.cv.wait_for(lambda: i in self.answered)
        return t, mark

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


def first_byte_floor(port):
    body = json.dumps({"model": "mock-1", "stream": True,
                       "messages": [{"role": "user", "content": "answer"}]}).encode()
    c = http.client.HTTPConnection("127.0.0.1", port)
    t = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
    r = c.getresponse()
    r.read(1)
    dt = time.perf_counter() - t
    c.close()
    return dt


def main():
    binary = sys.argv[1]
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
    port, model = bench.start_model()
    tmp = Path(tempfile.mkdtemp(prefix="pi-acp-bench-"))
    ws, agent = tmp / "ws", tmp / "agent"
    ws.mkdir()
    agent.mkdir()
    (agent / "models.json").write_text(json.dumps({"providers": {"mock": {
        "baseUrl": f"http://127.0.0.1:{port}/v1", "api": "openai-completions", "apiKey": "k",
        "compat": {"supportsDeveloperRole": False},
        "models": [{"id": "mock-1", "contextWindow": 128000, "maxTokens": 4096}]}}}))
    env = dict(os.environ, PI_CODING_AGENT_DIR=str(agent), ANTHROPIC_API_KEY="", OPENAI_API_KEY="")
    first, per_char, per_char_answer, rate, load, resume = [], [], [], [], [], []
    try:
        for _ in range(runs):
            a = Acp(binary, ws, env)
            a.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            t, mark = a.request("session/new", {"cwd": str(ws), "mcpServers": []})
            sid = next(m for _, _, m in reversed(a.lines) if m.get("id") == a.next)["result"]["sessionId"]
            floor = statistics.median(first_byte_floor(port) for _ in range(5))
            t, mark = a.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "answer"}]})
            t_chunk = next(tt for tt, _, m in a.lines[mark:]
                           if m.get("params", {}).get("update", {}).get("sessionUpdate") == "agent_message_chunk")
            first.append((t_chunk - t - floor) * 1000)
            t, mark = a.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "deltas"}]})
            size = sum(n for _, n, _ in a.lines[mark:])
            per_char.append(size / (bench.DELTAS * bench.DELTA_CHARS))
            t, mark = a.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "answer"}]})
            size = sum(n for _, n, _ in a.lines[mark:])
            per_char_answer.append(size / bench.ANSWER_CHARS)
            # A stream paced as a real provider's (one delta per write every PACE_MS): chunk
            # updates per second while it streams.
            t, mark = a.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "paced"}]})
            ts = [tt for tt, _, m in a.lines[mark:]
                  if m.get("params", {}).get("update", {}).get("sessionUpdate") == "agent_message_chunk"]
            rate.append((len(ts) - 1) / (ts[-1] - ts[0]) if len(ts) > 1 else 0.0)
            a.close()
        # 10,000 messages, loaded in a new process.
        path = ws / ".pi" / "sessions"
        path.mkdir(parents=True, exist_ok=True)
        f = path / "big.jsonl"
        n = 0
        size = 600_000
        while True:
            n = bench.write_session(f, size, False, ws)
            if n >= 10_000:
                break
            size = int(size * 10_000 / max(n, 1) * 1.02)
        sid = json.loads(f.read_text().split("\n", 1)[0])["id"]
        for _ in range(runs):
            a = Acp(binary, ws, env)
            a.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            t, mark = a.request("session/load", {"sessionId": sid, "cwd": str(ws), "mcpServers": []})
            load.append(a.answered[a.next] - t)
            replayed = sum(1 for _, _, m in a.lines[mark:] if m.get("method") == "session/update")
            a.close()
            a = Acp(binary, ws, env)
            a.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            t, mark = a.request("session/resume", {"sessionId": sid, "cwd": str(ws), "mcpServers": []})
            resume.append(a.answered[a.next] - t)
            a.close()
        med = statistics.median
        print(f"load average {os.getloadavg()[0]:.1f}, {runs} runs")
        print(f"first agent_message_chunk after the model's first byte: {med(first):.2f} ms (median of {runs}; spread {min(first):.2f}–{max(first):.2f})")
        print(f"bytes on stdout per character, 4,500 × 8-character stream: {med(per_char):.2f} (LSP edge, docs/benchmarks.md: 41.2 per 8-char delta = {41.2 / 8:.2f} per character)")
        print(f"bytes on stdout per character, 36,000-character answer in deltas of 100: {med(per_char_answer):.2f}")
        print(f"agent_message_chunk updates per second, paced stream ({bench.PACED_DELTAS} deltas, one every {bench.PACE_MS} ms): {med(rate):.1f} (max {max(rate):.1f})")
        print(f"session/resume of it (no replay): {med(resume) * 1000:.1f} ms")
        print(f"session/load of a {n}-entry session ({replayed} updates replayed): {med(load) * 1000:.1f} ms (median of {runs}; spread {min(load) * 1000:.1f}–{max(load) * 1000:.1f})")
    finally:
        model.kill()


if __name__ == "__main__":
    main()
