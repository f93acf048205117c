#!/usr/bin/env python3
"""MCP figures (docs/mcp.md, docs/benchmarks.md "MCP"), on bench.py's loopback scripted model
with the reference MCP server `@modelcontextprotocol/server-everything` over stdio as server
`everything` (user-level `mcp.json`, so no workspace trust is involved):

- a tool call's harness overhead beyond the server's own time: a prompt of 50 tool rounds
  calling `mcp__everything__echo` against the same prompt calling the built-in `read` (same
  model, same request sizes) gives the extra time per round an MCP call costs; less the
  server's own time for one `tools/call echo` from a bare client (JSON lines over the server's
  stdin/stdout, no SDK), what is left is the harness's own part;
- pi-lsp's own CPU time per round of each prompt (the load of a shared machine does not move
  it): what an MCP call costs the harness in CPU beside a `read`;
- the start of a session's first run (`agent/prompt` → `agent_end` of a one-word answer) with no
  server, with the server `deferred` (no direct tools: must not wait for it) and `direct`;
- idle servers cost no CPU: CPU time of the pi-lsp process and of the server process over 3 s
  of idling after a run, connected.

Usage: bench/mcp_bench.py PI_LSP_BIN SERVER_EVERYTHING_INDEX_JS [--runs N]
(needs `node` on PATH; the server's `dist/index.js`).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench  # noqa: E402

IDLE_S = 3.0


def bare_echo_ms(index_js, calls=50):
    """The server's own time for one `tools/call echo` (median over `calls`, ms): a bare
    client writing JSON-RPC lines to the server's stdin and reading its answers."""
    p = subprocess.Popen(["node", index_js, "stdio"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)

    def call(i, method, params):
        p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n").encode())
        p.stdin.flush()
        while True:
            m = json.loads(p.stdout.readline())
            if m.get("id") == i and "method" not in m:
                return m

    call(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "bench", "version": "0"}})
    p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    p.stdin.flush()
    times = []
    for i in range(1, calls + 1):
        t = time.perf_counter()
        r = call(i, "tools/call", {"name": "echo", "arguments": {"message": "hi"}})
        times.append(time.perf_counter() - t)
        assert "result" in r, r
    p.kill()
    p.wait()
    return statistics.median(times) * 1000


def child_pids(pid):
    """The child processes of `pid` (started by any of its threads)."""
    kids = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids


def main():
    binary, index_js = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
    port, model = bench.start_model()
    tmp = Path(tempfile.mkdtemp(prefix="pi-mcp-bench-"))
    ws, agent = tmp / "ws", tmp / "agent"
    ws.mkdir()
    agent.mkdir()
    (ws / "small.txt").write_text("hello\n" * 5)
    (agent / "models.json").write_text(json.dumps({"providers": {"mock": {
        "baseUrl": f"http://127.0.0.1:{port}/v1", "api": "openai-completions", "apiKey": "k",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": "mock-1", "contextWindow": 128000, "maxTokens": 4096}]}}}))

    def config(exposure):
        f = agent / "mcp.json"
        if exposure is None:
            f.unlink(missing_ok=True)
        else:
            f.write_text(json.dumps({"mcpServers": {"everything": {
                "command": "node", "args": [index_js, "stdio"], "exposure": exposure}}}))

    fig = {k: [] for k in ["bare", "read_round", "mcp_round", "overhead", "first_none", "first_deferred",
                           "first_direct", "idle_ours", "idle_server", "read_cpu", "mcp_cpu"]}
    try:
        for _ in range(runs):
            fig["bare"].append(bare_echo_ms(index_js))
            # The first run's prompt → agent_end, by configuration.
            for exposure, key in [(None, "first_none"), ("deferred", "first_deferred"), ("direct", "first_direct")]:
                config(exposure)
                s = bench.PiLsp(binary, ws, agent)
                s.initialize()
                t = time.perf_counter()
                s.prompt_to_end("hello")
                fig[key].append((time.perf_counter() - t) * 1000)
                s.close()
            # Tool rounds: read against the MCP echo, one server process (connected by the first run).
            config("direct")
            s = bench.PiLsp(binary, ws, agent)
            s.initialize()
            sid = s.prompt_to_end("hello")
            c = bench.cpu_s(s.p.pid)
            t = time.perf_counter()
            s.prompt_to_end("rounds please", sid)
            read_round = (time.perf_counter() - t) * 1000 / bench.ROUNDS
            read_cpu = (bench.cpu_s(s.p.pid) - c) * 1000 / bench.ROUNDS
            c = bench.cpu_s(s.p.pid)
            t = time.perf_counter()
            ends = []

            def on_event(e):
                if e["event"]["type"] == "tool_execution_end":
                    ends.append(e["event"])
                return e["event"]["type"] == "agent_end"

            s.request("agent/prompt", {"text": "mcp rounds please", "model": "mock/mock-1", "sessionId": sid})
            s.until(lambda m: False, on_event)
            mcp_round = (time.perf_counter() - t) * 1000 / bench.MCP_ROUNDS
            mcp_cpu = (bench.cpu_s(s.p.pid) - c) * 1000 / bench.MCP_ROUNDS
            bad = [e for e in ends if e.get("toolName") != "mcp__everything__echo" or e.get("isError")]
            assert len(ends) == bench.MCP_ROUNDS and not bad, (len(ends), bad[:1])
            fig["read_cpu"].append(read_cpu)
            fig["mcp_cpu"].append(mcp_cpu)
            # Idle, connected.
            kids = child_pids(s.p.pid)
            c0 = bench.cpu_s(s.p.pid)
            k0 = sum(bench.cpu_s(k) for k in kids)
            time.sleep(IDLE_S)
            fig["idle_ours"].append((bench.cpu_s(s.p.pid) - c0) * 1000)
            fig["idle_server"].append((sum(bench.cpu_s(k) for k in kids) - k0) * 1000)
            s.close()
            fig["read_round"].append(read_round)
            fig["mcp_round"].append(mcp_round)
            fig["overhead"].append(mcp_round - read_round - fig["bare"][-1])
    finally:
        model.kill()
        config(None)
    med = statistics.median

    def show(key):
        v = fig[key]
        return f"{med(v):.2f} ms ({min(v):.2f}–{max(v):.2f})"

    print(f"load average {os.getloadavg()[0]:.1f}, {runs} runs; medians (min–max)")
    print(f"server-everything's own time per tools/call echo (bare client): {show('bare')}")
    print(f"tool round calling `read`: {show('read_round')}; calling the MCP echo: {show('mcp_round')}")
    print(f"harness overhead of an MCP call beyond the server's own time: {show('overhead')}")
    print(f"pi-lsp's CPU per tool round: `read` {show('read_cpu')}, MCP echo {show('mcp_cpu')}")
    print(f"first run (prompt → agent_end): no server {show('first_none')}, deferred server "
          f"{show('first_deferred')}, direct server {show('first_direct')}")
    print(f"CPU over {IDLE_S:.0f} s idle, connected: pi-lsp {show('idle_ours')}, the server process {show('idle_server')}")


if __name__ == "__main__":
    main()
