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

    python3 bench/delta_bench.py BINARY [BINARY ...] --callgrind DIR [--answers M]

instead counts instructions (Valgrind's callgrind, every thread): each binary answers 1 + 1 and
1 + 1 + M prompts in two processes started under callgrind, and the difference / M is its
instructions per answer (start, `initialize`, the first answers and the exit cancel out). The
profiles stay in DIR (`cg.<binary>.<answers>.<pid>`) for `callgrind_annotate --inclusive=yes`.
Needs the release `mock-model` (`tests/mock-model-path --release`, or `$PI_MOCK_MODEL_BIN`).
"""
import argparse, json, shutil, statistics, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--answers", type=int, default=bench.DELTA_REPEAT)
    ap.add_argument("--no-coalesce", action="store_true")
    ap.add_argument("--callgrind", metavar="DIR", help="count instructions per answer instead")
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
        if args.callgrind:
            return callgrind(args, ws, agent, options)
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
                print(f"  {b}: {med * 1e3:.2f} [{min(fig[b]) * 1e3:.2f}-{max(fig[b]) * 1e3:.2f}]"
                      f"  (first / this: {bench.ratio(statistics.median(fig[base]), med)})")
    finally:
        model.kill()
        model.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def answered(binary, ws, agent, options, prompts):
    """One process of `binary` answering `prompts` prompts, then shut down as an editor does."""
    s = bench.PiLsp(binary, ws, agent)
    s.initialize(**options)
    for _ in range(prompts):
        s.prompt_to_end("deltas please")
    s.request("shutdown", None)
    s.send({"jsonrpc": "2.0", "method": "exit"})
    s.p.wait(timeout=600)


def totals(path):
    """The instruction count (`Ir`) of one callgrind output file: the `Ir` column of its
    `totals:` (or `summary:`) line, found by the file's `events:` line (Ir is the first event
    unless callgrind was asked for others first)."""
    events, total = None, None
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith(("totals:", "summary:")):
            total = line.split()[1:]
    if total is None:
        raise SystemExit(f"{path}: no totals line")
    column = events.index("Ir") if events and "Ir" in events else 0
    return int(total[column])


def callgrind_counts(index, binary, out, runs, drive):
    """Counts instructions of `binary` (a driver's argument: `PATH` or `VAR=VALUE,...:PATH`)
    under Valgrind's callgrind, the one way both `--callgrind` benches count: for each `n` of
    `runs`, `drive(command, n)` drives one process started through a wrapper script in `out`
    (its profiles `cg.<index>-<name>.<n>.<pid>`, kept for `callgrind_annotate`), and the
    instructions of every profile that process left (every thread: callgrind writes one file
    per process) are summed. Returns {n: instructions}."""
    path, env = bench.binary_env(binary)
    counts = {}
    for n in runs:
        stem = f"cg.{index}-{Path(path).name}.{n}"
        wrapper = out / f"{stem}.sh"
        wrapper.write_text("#!/bin/sh\nexec valgrind -q --tool=callgrind "
                           f"--callgrind-out-file={out}/{stem}.%p {Path(path).resolve()} \"$@\"\n")
        wrapper.chmod(0o755)
        before = set(out.glob(f"{stem}.[0-9]*"))
        head = ",".join(f"{k}={v}" for k, v in env.items())
        drive(f"{head}:{wrapper}" if head else str(wrapper), n)
        made = sorted(set(out.glob(f"{stem}.[0-9]*")) - before)
        if not made:
            raise SystemExit(f"{binary}: callgrind left no profile in {out}")
        counts[n] = sum(totals(f) for f in made)
    return counts


def callgrind(args, ws, agent, options):
    """`--callgrind DIR`: instructions per answer of each binary (see the module's doc)."""
    out = Path(args.callgrind).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for i, b in enumerate(args.binaries):
        counts = callgrind_counts(i, b, out, (2, 2 + args.answers),
                                  lambda cmd, n: answered(cmd, ws, agent, options, n))
        per = (counts[2 + args.answers] - counts[2]) / args.answers
        print(f"{bench.label(b)}: {per / 1e6:.3f} M instructions per answer "
              f"({counts[2] / 1e6:.1f} M for 1 + 1 answers, {counts[2 + args.answers] / 1e6:.1f} M "
              f"for 1 + 1 + {args.answers}); {per / bench.DELTAS:.0f} per delta", flush=True)


if __name__ == "__main__":
    main()
