#!/usr/bin/env python3
"""Writes server/lsp/symbol-order.txt: the functions of pi-lsp that a start and the benchmark's
workloads run, for the linker to place together (server/lsp/build.rs says why).

Runs the given release binary under Valgrind's callgrind (function names as the linker knows
them) through bench.py's workloads against its loopback model: a start, the 50 tool rounds,
the 4,500-delta answer (full and compact deltas), the 36,000-character answer, a session
opened and its history paged, then `shutdown`. Every function of the executable that ran is
listed, in the order callgrind first met it.

    python3 bench/symbol_order.py target/release/pi-lsp

Needs `valgrind`. Re-run it after large changes; a stale list is still correct (only the layout
is less tight), and names it lists that no longer exist are ignored by the linker.
"""
import json, os, subprocess, sys, tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402
from bench import PiLsp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "server/lsp/symbol-order.txt"


def executed(binary, outputs):
    """The executable's functions named in callgrind's `outputs`, first met first."""
    name = Path(binary).name
    seen, names = set(), []
    for f in outputs:
        ob = None
        for line in open(f, errors="replace"):
            if line.startswith("ob="):
                ob = line[3:].strip()
            elif line.startswith("fn=") and ob and ob.endswith(name):
                fn = line[3:].strip()
                if fn not in seen and not fn.startswith("0x"):
                    seen.add(fn)
                    names.append(fn)
    return names


def main():
    binary = os.path.abspath(sys.argv[1])
    port, model = bench.start_model()
    tmp = Path(tempfile.mkdtemp(prefix="symbol-order-"))
    try:
        agent, ws = tmp / "agent", tmp / "ws"
        agent.mkdir()
        ws.mkdir()
        (agent / "models.json").write_text(json.dumps({"providers": {"mock": {
            "baseUrl": f"http://127.0.0.1:{port}/v1", "api": "openai-completions", "apiKey": "x",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": "mock-1", "contextWindow": 128000, "maxTokens": 4096}]}}}))
        (ws / "small.txt").write_text("hello\n" * 5)
        session = tmp / "s.jsonl"
        bench.write_session(session, 300_000, True, ws)
        wrapper = tmp / "pi-lsp-under-callgrind"
        wrapper.write_text("#!/bin/sh\nexec valgrind -q --tool=callgrind "
                           f"--callgrind-out-file={tmp}/cg.%p --compress-strings=no "
                           f"--compress-pos=no --demangle=no {binary} \"$@\"\n")
        wrapper.chmod(0o755)
        for options, prompts in [({}, ["rounds please", "deltas please", "answer please"]),
                                 ({"compactDeltas": True}, ["deltas please"])]:
            s = PiLsp(str(wrapper), ws, agent)
            s.initialize(**options)
            for p in prompts:
                s.prompt_to_end(p)
            if not options:
                r = s.request("agent/session/open", {"path": str(session)})
                s.request("agent/session/history", {"sessionId": r["result"]["sessionId"]})
            s.request("shutdown", None)
            s.send({"jsonrpc": "2.0", "method": "exit"})
            s.p.wait(timeout=120)
        names = executed(binary, sorted(tmp.glob("cg.*")))
        OUT.write_text("\n".join(names) + "\n")
        print(f"{len(names)} functions → {OUT.relative_to(ROOT)}")
    finally:
        model.kill()
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    main()
