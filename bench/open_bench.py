#!/usr/bin/env python3
"""Opening a 100 MB session, A/B: spawn → `initialize` → `agent/session/open` answered (the state),
for one or more pi-lsp binaries and optionally Pi, alternated run after run (bench.py's driver
and its `write_session` files: "long" and "branchy").

    python3 bench/open_bench.py BINARY [BINARY ...] [--pi PI] [--runs N] [--mb M] [--files long,branchy]

Each run opens every file with every harness in turn (the order rotates from run to run), each
in a fresh process: wall time from spawn to the open's answer (Pi: to `get_state`'s, as
bench.py times it), the process's CPU time (`bench.cpu_s`, all threads) and its peak resident
set (`VmHWM`) right after. Prints, per file and harness, the median and min-max of each figure
over the runs, and Pi's median over each binary's (the ratio the goal is stated in).

With `--held`, each file is held open by another pi-lsp process (the first binary) for the whole
run, so every open continues the session in a fork (case SESS-04): the figures are then those of
opening a held file (wait for its release included in the wall time; each fork is deleted after
its run). Pi takes no lock, so `--pi` is not timed then.

With `--exit`, each pi-lsp process is then ended as an editor ends it (`shutdown`, `exit`) instead
of being killed, and two more figures are printed per binary: the time from `exit` sent to the
process gone, and the process's whole CPU time (user + system of all its threads, from
`wait4`), spawn to exit.
"""
import argparse, json, os, statistics, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--pi", help="Pi's `pi` launcher, timed in the same runs")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--files", default="long,branchy")
    ap.add_argument("--dir", help="where the session files are written (kept for the next run)")
    ap.add_argument("--held", action="store_true", help="time opening each file while another process holds it")
    ap.add_argument("--exit", action="store_true", help="end each pi-lsp with shutdown/exit and time that too")
    args = ap.parse_args()
    tmp = Path(args.dir or tempfile.mkdtemp(prefix="pi-open-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    agent = tmp / "agent"
    agent.mkdir(exist_ok=True)
    # Nothing is sent to a model: the port is never connected to.
    (agent / "models.json").write_text(json.dumps({"providers": {"mock": {
        "baseUrl": "http://127.0.0.1:9/v1", "api": "openai-completions", "apiKey": "x",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": "mock-1", "contextWindow": 128000, "maxTokens": 4096}]}}}))
    ws = tmp / "ws"
    ws.mkdir(exist_ok=True)
    sessions = tmp / "pi-sessions"
    files = {}
    for name in args.files.split(","):
        p = tmp / f"{name}-{args.mb}.jsonl"
        if not p.exists():
            bench.write_session(p, args.mb * 1_000_000, name == "branchy", ws)
        files[name] = p
    harnesses = list(args.binaries) + ([args.pi] if args.pi and not args.held else [])
    holder = None
    if args.held:
        holder = bench.PiLsp(args.binaries[0], ws, agent)
        holder.initialize()
        for p in files.values():
            assert "result" in holder.request("agent/session/open", {"path": str(p)})
    fig = {(f, h): {"wall": [], "cpu": [], "rss": [], "exit": [], "total": []} for f in files for h in harnesses}

    def once(h, path):
        if h == args.pi:
            q = bench.Pi(h, ws, agent, sessions, path)
            q.request("get_state")
            out = time.perf_counter() - q.t0, bench.cpu_s(q.p.pid), bench.peak_rss_mb(q.p.pid)
            q.close()
            return out
        s = bench.PiLsp(h, ws, agent)
        s.initialize()
        r = s.request("agent/session/open", {"path": str(path)})
        out = time.perf_counter() - s.t0, bench.cpu_s(s.p.pid), bench.peak_rss_mb(s.p.pid)
        assert "result" in r, r
        if args.exit:
            assert "result" in s.request("shutdown", None)
            t = time.perf_counter()
            s.send({"jsonrpc": "2.0", "method": "exit"})
            _, status, ru = os.wait4(s.p.pid, 0)
            s.p.returncode = os.waitstatus_to_exitcode(status)
            assert s.p.returncode == 0, s.p.returncode
            out += (time.perf_counter() - t, ru.ru_utime + ru.ru_stime)
        s.close()
        forked = Path(r["result"]["sessionFile"])
        if args.held:
            assert forked != path, "the held file was not forked"
            forked.unlink()
            forked.with_name(forked.name + ".lock").unlink(missing_ok=True)
        return out

    # Untimed: executables and files into the page cache.
    for h in harnesses:
        for p in files.values():
            once(h, p)
    for run in range(args.runs):
        k = run % len(harnesses)
        line = []
        for f, p in files.items():
            for h in harnesses[k:] + harnesses[:k]:
                w, c, r, *ex = once(h, p)
                d = fig[(f, h)]
                d["wall"].append(w), d["cpu"].append(c), d["rss"].append(r)
                line.append(f"{f}/{Path(h).name}: {w * 1e3:.0f} ms cpu {c * 1e3:.0f} {r:.1f} MiB")
                if ex:
                    d["exit"].append(ex[0]), d["total"].append(ex[1])
                    line[-1] += f" exit {ex[0] * 1e3:.0f} ms total cpu {ex[1] * 1e3:.0f}"
        print(f"run {run + 1}/{args.runs} (load {os.getloadavg()[0]:.1f}): " + "; ".join(line), flush=True)
    if holder:
        holder.close()
    med = lambda xs: statistics.median(xs)
    for f in files:
        print(f"\n{f} ({files[f].stat().st_size / 1e6:.0f} MB), medians [min-max] over {args.runs} runs:")
        for h in harnesses:
            d = fig[(f, h)]
            print(f"  {h}: wall {med(d['wall']) * 1e3:.1f} ms [{min(d['wall']) * 1e3:.1f}-{max(d['wall']) * 1e3:.1f}]"
                  f"  cpu {med(d['cpu']) * 1e3:.1f} ms [{min(d['cpu']) * 1e3:.1f}-{max(d['cpu']) * 1e3:.1f}]"
                  f"  rss {med(d['rss']):.1f} MiB [{min(d['rss']):.1f}-{max(d['rss']):.1f}]")
            if d["exit"]:
                print(f"    exit {med(d['exit']) * 1e3:.1f} ms [{min(d['exit']) * 1e3:.1f}-{max(d['exit']) * 1e3:.1f}]"
                      f"  cpu spawn→exit {med(d['total']) * 1e3:.1f} ms [{min(d['total']) * 1e3:.1f}-{max(d['total']) * 1e3:.1f}]")
        if args.pi:
            pi = fig[(f, args.pi)]
            for h in args.binaries:
                d = fig[(f, h)]
                print(f"  Pi / {h}: wall {med(pi['wall']) / med(d['wall']):.1f}x"
                      f"  cpu {med(pi['cpu']) / med(d['cpu']):.1f}x  memory {med(pi['rss']) / med(d['rss']):.1f}x")


if __name__ == "__main__":
    main()
