#!/usr/bin/env python3
"""Start -> ready, A/B: wall and CPU time from spawn to the `initialize` answer of one or more
pi-lsp binaries, alternated start after start (bench.py's driver and workspace).

    python3 bench/start_bench.py BINARY [BINARY ...] [--runs N] [--pi PI_BINARY]

Each run starts every binary in turn (the order rotates from run to run), as `bench/run`'s
"start -> ready" row does: `bench.PiLsp` spawns it in the workspace with the bench's agent
folder (models.json naming the loopback model; no model is called), sends `initialize` and
takes the time when the answer is read (wall, from before the spawn), and the process's CPU
time then (all threads, `bench.cpu_s`); the process is killed after. One untimed start of each
binary comes first (a cold page cache would time the disk). Prints the median and min-max of
each binary's figures, and the ratio of medians against the first binary; with `--pi`, Pi's
time to its first `get_state` answer beside them (as bench.py measures Pi's start).
"""
import argparse, json, statistics, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--pi", help="Pi's binary, started once per run beside the others")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pi-start-bench-"))
    agent = tmp / "agent"
    agent.mkdir()
    (agent / "models.json").write_text(json.dumps({"providers": {"mock": {
        "baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions", "apiKey": "x",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": "mock-1", "contextWindow": 128000, "maxTokens": 4096}]}}}))
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "small.txt").write_text("hello\n" * 5)
    sessions = tmp / "sessions"
    sessions.mkdir()
    for b in args.binaries:
        s = bench.PiLsp(b, ws, agent)
        s.initialize()
        s.close()
    wall = {b: [] for b in args.binaries}
    cpu = {b: [] for b in args.binaries}
    pi_wall = []
    for run in range(args.runs):
        k = run % len(args.binaries)
        for b in args.binaries[k:] + args.binaries[:k]:
            s = bench.PiLsp(b, ws, agent)
            s.initialize()
            wall[b].append(time.perf_counter() - s.t0)
            cpu[b].append(bench.cpu_s(s.p.pid))
            s.close()
        if args.pi:
            q = bench.Pi(args.pi, ws, agent, sessions)
            q.request("get_state")
            pi_wall.append(time.perf_counter() - q.t0)
            q.close()
    base = args.binaries[0]
    for name, fig in (("wall to ready", wall), ("CPU to ready", cpu)):
        print(f"{name} (ms; median [min-max] over {args.runs} starts):")
        for b in args.binaries:
            med = statistics.median(fig[b])
            print(f"  {b}: {med * 1e3:.3f} [{min(fig[b]) * 1e3:.3f}-{max(fig[b]) * 1e3:.3f}]"
                  f"  (first / this: {bench.ratio(statistics.median(fig[base]), med)})")
    if pi_wall:
        med = statistics.median(pi_wall)
        print(f"Pi wall to ready: {med * 1e3:.1f} ms [{min(pi_wall) * 1e3:.1f}-{max(pi_wall) * 1e3:.1f}]; "
              + "; ".join(f"{bench.label(b)} {med / statistics.median(wall[b]):.1f}x" for b in args.binaries))


if __name__ == "__main__":
    main()
