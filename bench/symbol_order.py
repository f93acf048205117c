#!/usr/bin/env python3
"""Writes server/lsp/symbol-order.txt: the functions of pi-lsp that a start and the benchmark's
workloads run, for the linker to place together (server/lsp/build.rs says why), and checks that
a release binary was laid out by it.

Runs the given release binary under Valgrind's callgrind (function names as the linker knows
them) through bench.py's workloads against its loopback model: a start, the 50 tool rounds,
the 4,500-delta answer (full and compact deltas), the 36,000-character answer, a session
opened and its history paged, then `shutdown`. Every function of the executable that ran is
listed, in the order callgrind first met it.

    python3 bench/symbol_order.py target/release/pi-lsp

Needs `valgrind`. Re-run it after large changes; a stale list is still correct (only the layout
is less tight), and names it lists that no longer exist are ignored by the linker.

The list holds names WITHOUT their hashes, so it survives a change of a crate's dependency set
(Rust's legacy symbol hash follows each crate's `-C metadata`): a legacy name
`_ZN…17h<16 hex digits>E` is written `_ZN…17h*`, and LTO's uniquing suffix (`.123`,
`.llvm.123`) and callgrind's recursion mark (`'2`) are dropped. Each line is a glob that
build.rs turns into a linker-script rule for the function's section.

    python3 bench/symbol_order.py --check target/release/pi-lsp [--min 0.9]

checks a release binary: the share of the list's lines that name a function of the binary, and
that those functions sit in `.text.hot` (where build.rs has the linker put them). Exits 1 when
the share is under `--min` (default 0.9) or nothing was placed.
"""
import bisect, fnmatch, json, os, re, subprocess, sys, tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402
from bench import PiLsp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "server/lsp/symbol-order.txt"


def pattern(name):
    """The hash-free glob written to the list for a symbol `name` (see the module's text)."""
    name = re.sub(r"'\d+$", "", name)
    m = re.match(r"^(_ZN.*17h)[0-9a-f]{16}E(\..*)?$", name)
    if m:
        return m.group(1) + "*"
    m = re.match(r"^(.*?)\.(llvm\.)?\d+$", name)
    return m.group(1) if m else name


def patterns(names):
    """`names` as the list's globs, first met first, each once."""
    seen, out = set(), []
    for n in map(pattern, names):
        # Callgrind's own entries ("(below main)") are no symbols.
        if n not in seen and re.fullmatch(r"[A-Za-z0-9_.$]+\*?", n):
            seen.add(n)
            out.append(n)
    return out


def check(binary, minimum):
    """Prints how much of the list the release `binary` resolves and places; 1 when too little."""
    lines = [l.strip() for l in open(OUT) if l.strip()]
    out = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True,
                         check=True).stdout
    syms = {}
    for row in out.splitlines():
        parts = row.split()
        if len(parts) == 3 and parts[1] in "tTwW":
            syms.setdefault(parts[2], int(parts[0], 16))
    hot = None
    sections = subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True,
                              check=True).stdout
    for row in sections.splitlines():
        m = re.search(r"\]\s+\.text\.hot\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", row)
        if m:
            hot = (int(m.group(1), 16), int(m.group(1), 16) + int(m.group(2), 16))
    ordered = sorted(syms)
    found = placed = 0
    for line in lines:
        # The same two section names build.rs gives the linker: the glob, and the glob + ".*".
        globs = [line] if line.endswith("*") else [line, line + ".*"]
        hits = []
        for g in globs:
            prefix = re.split(r"[*?\[]", g, maxsplit=1)[0]
            i = bisect.bisect_left(ordered, prefix)
            while i < len(ordered) and ordered[i].startswith(prefix):
                if fnmatch.fnmatchcase(ordered[i], g):
                    hits.append(ordered[i])
                i += 1
        if hits:
            found += 1
            if hot and all(hot[0] <= syms[h] < hot[1] for h in hits):
                placed += 1
    share = found / len(lines) if lines else 0.0
    size = f"{(hot[1] - hot[0]) / 1048576:.2f} MiB" if hot else "missing"
    print(f"{found} of {len(lines)} names in the list ({share:.1%}) name a function of {binary}; "
          f"{placed} of them sit in .text.hot ({size})")
    if share < minimum:
        print(f"the list is stale: under {minimum:.0%} resolve; run bench/symbol_order.py", file=sys.stderr)
        return 1
    if placed < found * minimum:
        print("the linker did not place the list's functions in .text.hot (server/lsp/build.rs)",
              file=sys.stderr)
        return 1
    return 0


def executed(binary, outputs):
    """The executable's functions named in callgrind's `outputs`, first met first."""
    name = Path(binary).name
    seen, names = set(), []
    for f in outputs:
        ob = None
        for line in open(f, errors="replace"):
            if line.startswith("ob="):
                ob = line[3:].strip()
            # Valgrind names no object ("???") for code outside the `.text` section, as in
            # `.text.hot` of a binary built with the list: those functions are the binary's.
            elif line.startswith("fn=") and ob and (ob.endswith(name) or ob == "???"):
                fn = line[3:].strip()
                if fn not in seen and not fn.startswith("0x"):
                    seen.add(fn)
                    names.append(fn)
    return names


def main():
    if sys.argv[1:2] == ["--check"]:
        minimum = float(sys.argv[sys.argv.index("--min") + 1]) if "--min" in sys.argv else 0.9
        sys.exit(check(sys.argv[2], minimum))
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
        names = patterns(executed(binary, sorted(tmp.glob("cg.*"))))
        OUT.write_text("\n".join(names) + "\n")
        print(f"{len(names)} functions → {OUT.relative_to(ROOT)}")
    finally:
        model.kill()
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    main()
