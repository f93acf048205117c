#!/usr/bin/env python3
"""The 50 tool rounds, A/B: CPU time and harness overhead per tool round of one or more pi-lsp
binaries, alternated run after run against one loopback model (bench.py's script and driver).

    python3 bench/round_bench.py BINARY [BINARY ...] [--runs N] [--prompts M]

Each run starts every binary in turn (the order rotates from run to run) and sends M
`rounds please` prompts in the same process, each in a session of its own: bench.py's
workload (ROUNDS `read` calls of a small file, then "done"), the first one a fresh process's
as `bench/run` measures it (the argument schema's first compile included). The CPU time per
round (all threads, `bench.cpu_s`) is the process's CPU over the M prompts / (M × ROUNDS),
and the wall time per round less the model's floor (bench.model_floor: a bare HTTP client
sending the rounds' requests, fastest of three, measured in every run) is the harness
overhead. Prints the median and min-max of each binary's figures over the runs, and the
ratio of medians against the first binary.

    python3 bench/round_bench.py BINARY [BINARY ...] --callgrind DIR [--prompts M]

instead counts instructions (Valgrind's callgrind, every thread): each binary answers 1 and
1 + M prompts (M = 2 unless given) in two processes started under callgrind, and the
difference / M is its instructions per prompt of ROUNDS rounds (start, `initialize`, the first
prompt and the exit cancel out). The profiles stay in DIR (`cg.<binary>.<prompts>.<pid>`) for
`callgrind_annotate --inclusive=yes`.
Needs the release `mock-model` (`tests/mock-model-path --release`, or `$PI_MOCK_MODEL_BIN`).
"""
import argparse, json, shutil, statistics, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402
import delta_bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=None)
    ap.add_argument("--callgrind", metavar="DIR", help="count instructions per prompt instead")
    args = ap.parse_args()
    if args.prompts is None:
        args.prompts = 2 if args.callgrind else 1
    tmp = Path(tempfile.mkdtemp(prefix="pi-round-bench-"))
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
        (ws / "small.txt").write_text("hello\n" * 5)
        if args.callgrind:
            return callgrind(args, ws, agent)
        rounds = args.prompts * bench.ROUNDS
        cpu = {b: [] for b in args.binaries}
        over = {b: [] for b in args.binaries}
        for run in range(args.runs):
            floor = min(bench.model_floor(port) for _ in range(3)) / bench.ROUNDS
            k = run % len(args.binaries)
            for b in args.binaries[k:] + args.binaries[:k]:
                s = bench.PiLsp(b, ws, agent)
                s.initialize()
                c, t = bench.cpu_s(s.p.pid), time.perf_counter()
                for _ in range(args.prompts):
                    s.prompt_to_end("rounds please")
                t = (time.perf_counter() - t) / rounds
                cpu[b].append((bench.cpu_s(s.p.pid) - c) / rounds)
                over[b].append(t - floor)
                # Ended as an editor ends it (a profiler wrapping the binary writes its file).
                s.request("shutdown", None)
                s.send({"jsonrpc": "2.0", "method": "exit"})
                s.p.wait(timeout=60)
            print(f"run {run + 1}/{args.runs}: floor {floor * 1e3:.3f} ms/round; " + "; ".join(
                f"{bench.label(b)} cpu {cpu[b][-1] * 1e3:.3f} overhead {over[b][-1] * 1e3:.3f}"
                for b in args.binaries), flush=True)
        base = args.binaries[0]
        for name, fig in (("CPU per round", cpu), ("overhead per round", over)):
            print(f"{name} (ms; median [min-max] over {args.runs} runs of {rounds} rounds):")
            for b in args.binaries:
                med = statistics.median(fig[b])
                print(f"  {b}: {med * 1e3:.3f} [{min(fig[b]) * 1e3:.3f}-{max(fig[b]) * 1e3:.3f}]"
                      f"  (first / this: {bench.ratio(statistics.median(fig[base]), med)})")
    finally:
        model.kill()
        model.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def prompted(binary, ws, agent, prompts):
    """One process of `binary` answering `prompts` `rounds please` prompts, then shut down as an
    editor does."""
    s = bench.PiLsp(binary, ws, agent)
    s.initialize()
    for _ in range(prompts):
        s.prompt_to_end("rounds please")
    s.request("shutdown", None)
    s.send({"jsonrpc": "2.0", "method": "exit"})
    s.p.wait(timeout=1200)


def callgrind(args, ws, agent):
    """`--callgrind DIR`: instructions per prompt of each binary (see the module's doc)."""
    out = Path(args.callgrind).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for i, b in enumerate(args.binaries):
        counts = delta_bench.callgrind_counts(i, b, out, (1, 1 + args.prompts),
                                              lambda cmd, n: prompted(cmd, ws, agent, n))
        per = (counts[1 + args.prompts] - counts[1]) / args.prompts
        print(f"{bench.label(b)}: {per / 1e6:.3f} M instructions per prompt of {bench.ROUNDS} rounds, "
              f"{per / bench.ROUNDS / 1e6:.4f} M a round ({counts[1] / 1e6:.1f} M for 1 prompt, "
              f"{counts[1 + args.prompts] / 1e6:.1f} M for 1 + {args.prompts})", flush=True)


if __name__ == "__main__":
    main()
