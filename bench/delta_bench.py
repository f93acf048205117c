#!/usr/bin/env python3
"""The 4,500-delta answer, A/B: CPU time and harness overhead per answer of one or more pi-lsp
binaries, alternated run after run against one loopback model (bench.py's script and driver).

    python3 bench/delta_bench.py BINARY [BINARY ...] [--runs N] [--answers M] [--no-coalesce]

Each run starts every binary in turn (the order rotates from run to run), answers one untimed
`deltas please` prompt, then M timed ones in the same process: the CPU time per answer (all
threads, `bench.cpu_s`) is the process's CPU over the M answers / M, and the wall time per
answer less the model's floor (a bare HTTP client reading the same response, fastest of three,
measured in every run) is the harness overhead. Prints the median and min-max of each binary's
figures over the runs, and the ratio of medians against the first binary.
`--no-coalesce` sets `coalesceDeltasMs: 0` (one `agent/event` per delta, the slow-stream path).
Needs the release `mock-model` (`tests/mock-model-path --release`, or `$PI_MOCK_MODEL_BIN`).
"""
import argparse, json, statistics, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--answers", type=int, default=bench.DELTA_REPEAT)
    ap.add_argument("--no-coalesce", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pi-delta-bench-"))
    port, model = bench.start_model()
    try:
        agent = tmp / "agent"
        agent.mkdir()
        (agent / "models.json").write_text(json.dumps({"providers": {"mock": {
            "baseUrl": f"http://127.0.0.1:{port}/v1", "api": "openai-completions", "apiKey": "x",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": "mock-1", "contextWindow": 128000, "maxTokens": 4096}]}}}))
        ws = tmp / "ws"
        ws.mkdir()
        options = {"coalesceDeltasMs": 0} if args.no_coalesce else {}
        cpu = {b: [] for b in args.binaries}
        over = {b: [] for b in args.binaries}
        for run in range(args.runs):
            floor = min(bench.prompt_floor(port, "deltas please") for _ in range(3))
            k = run % len(args.binaries)
            for b in args.binaries[k:] + args.binaries[:k]:
                s = bench.PiLsp(b, ws, agent)
                s.initialize(**options)
                s.prompt_to_end("deltas please")
                c, t = bench.cpu_s(s.p.pid), time.perf_counter()
                for _ in range(args.answers):
                    s.prompt_to_end("deltas please")
                t = (time.perf_counter() - t) / args.answers
                cpu[b].append((bench.cpu_s(s.p.pid) - c) / args.answers)
                over[b].append(t - floor)
                # Ended as an editor ends it (a profiler wrapping the binary writes its file).
                s.request("shutdown", None)
                s.send({"jsonrpc": "2.0", "method": "exit"})
                s.p.wait(timeout=60)
            print(f"run {run + 1}/{args.runs}: floor {floor * 1e3:.2f} ms; " + "; ".join(
                f"{bench.label(b)} cpu {cpu[b][-1] * 1e3:.2f} overhead {over[b][-1] * 1e3:.2f}"
                for b in args.binaries), flush=True)
        base = args.binaries[0]
        for name, fig in (("CPU per answer", cpu), ("overhead per answer", over)):
            print(f"{name} (ms; median [min-max] over {args.runs} runs of {args.answers} answers):")
            for b in args.binaries:
                med = statistics.median(fig[b])
                ratio = statistics.median(fig[base]) / med if med > 0 else float("nan")
                print(f"  {b}: {med * 1e3:.2f} [{min(fig[b]) * 1e3:.2f}-{max(fig[b]) * 1e3:.2f}]"
                      f"  (first / this: {ratio:.2f}x)")
    finally:
        model.kill()
        model.wait()


if __name__ == "__main__":
    main()
