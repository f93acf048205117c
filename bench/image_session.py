#!/usr/bin/env python3
"""Case SESS-05's memory figure: the peak RSS of `pi-lsp run --session FILE PROMPT` (and of Pi's
print mode, `pi -p --session FILE PROMPT`, when given) on a generated session of N images of
M MB of base64 each, against the loopback model (`mock-model`).

Two layouts of the same images: `user` (N user turns, one image each: the image window keeps
the last sessions.imageTurns of them in the request) and `tools` (one user turn, N `read`
results with one image each: every image goes to the model, as in Pi).

    bench/image_session.py --bin target/release/pi-lsp [--bin-b OTHER] [--pi PI] [--runs 3]

Prints, per binary and layout, the peak RSS (getrusage's ru_maxrss of the child) and the CPU
and wall time of each run, the median and the spread; binaries alternate within a run.
"""
import argparse
import base64
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def mock_model_bin():
    return subprocess.run([str(ROOT / "tests/mock-model-path"), "--release"], stdout=subprocess.PIPE,
                          text=True, check=True).stdout.strip()


def image_b64(mb, seed):
    """`mb` MB of base64 text (random bytes behind a PNG signature: incompressible, unique)."""
    rnd = random.Random(seed)
    raw = b"\x89PNG\r\n\x1a\n" + rnd.randbytes(int(mb * 1024 * 1024 * 3 / 4) - 8)
    return base64.b64encode(raw).decode()


def write_session(path, ws, layout, n, mb):
    """A Pi v3 session file at `path` for workspace `ws`; returns its size in bytes."""
    ts = "2026-01-01T00:00:00.000Z"
    usage = {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 15,
             "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}
    lines = [{"type": "session", "version": 3, "id": "0197a000-0000-7000-8000-000000000001",
              "timestamp": ts, "cwd": str(ws)}]
    parent = None
    k = 0

    def add(message):
        nonlocal parent, k
        k += 1
        eid = f"{k:08x}"
        lines.append({"type": "message", "id": eid, "parentId": parent, "timestamp": ts,
                      "message": message})
        parent = eid

    def answer(content, stop):
        add({"role": "assistant", "content": content, "api": "openai-completions",
             "provider": "mock", "model": "mock-1", "usage": usage, "stopReason": stop,
             "timestamp": 1})

    if layout == "user":
        for i in range(n):
            add({"role": "user", "content": [{"type": "text", "text": f"look at picture {i}"},
                 {"type": "image", "data": image_b64(mb, i), "mimeType": "image/png"}],
                 "timestamp": 1})
            answer([{"type": "text", "text": f"Picture {i} is noise."}], "stop")
    else:
        add({"role": "user", "content": "look at every picture", "timestamp": 1})
        for i in range(n):
            cid = f"call_{i}"
            answer([{"type": "toolCall", "id": cid, "name": "read",
                     "arguments": {"path": f"p{i}.png"}}], "toolUse")
            add({"role": "toolResult", "toolCallId": cid, "toolName": "read",
                 "content": [{"type": "text", "text": f"Read image file [image/png]"},
                             {"type": "image", "data": image_b64(mb, i), "mimeType": "image/png"}],
                 "isError": False, "timestamp": 1})
        answer([{"type": "text", "text": "All noise."}], "stop")
    with open(path, "w") as f:
        for l in lines:
            f.write(json.dumps(l, separators=(",", ":")) + "\n")
    return path.stat().st_size


def run_once(cmd, env, cwd):
    """(peak RSS MiB, CPU s, wall s, exit code) of one child."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    err = p.stderr.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(f"  exit {code}: {' '.join(map(str, cmd))}\n{err[-2000:]}", file=sys.stderr)
    return ru.ru_maxrss / 1024, ru.ru_utime + ru.ru_stime, wall, code


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--bin-b")
    ap.add_argument("--pi")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--images", type=int, default=30)
    ap.add_argument("--mb", type=float, default=2.0)
    ap.add_argument("--layouts", default="user,tools")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pi-image-session-"))
    script = tmp / "script.json"
    script.write_text(json.dumps({"default": {"text": "done"}, "usage": {"input": 100, "output": 10}}))
    model = subprocess.Popen([mock_model_bin(), str(script)], stdout=subprocess.PIPE)
    port = int(model.stdout.readline())
    try:
        agent = tmp / "agent"
        agent.mkdir()
        (agent / "models.json").write_text(json.dumps({"providers": {"mock": {
            "baseUrl": f"http://127.0.0.1:{port}/v1", "api": "openai-completions", "apiKey": "x",
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": "mock-1", "contextWindow": 1000000, "maxTokens": 4096,
                        "input": ["text", "image"]}]}}}))
        env = dict(os.environ, PI_CODING_AGENT_DIR=str(agent), OPENAI_API_KEY="", ANTHROPIC_API_KEY="",
                   PI_OFFLINE="1")
        bins = [("A", a.bin)] + ([("B", a.bin_b)] if a.bin_b else [])
        print(f"# {a.images} images of {a.mb} MB base64; runs {a.runs}; load {os.getloadavg()[0]:.1f}")
        for layout in a.layouts.split(","):
            ws = tmp / f"ws-{layout}"
            ws.mkdir()
            res = {name: [] for name, _ in bins}
            if a.pi:
                res["pi"] = []
            for r in range(a.runs):
                # A fresh copy per run and binary: `run` appends to the file it continues.
                order = bins if r % 2 == 0 else list(reversed(bins))
                for name, b in order:
                    f = tmp / f"{layout}-{name}-{r}.jsonl"
                    size = write_session(f, ws, layout, a.images, a.mb)
                    res[name].append(run_once([b, "run", "--workspace", str(ws), "--session", str(f),
                                               "--model", "mock/mock-1", "say done"], env, ws))
                if a.pi:
                    f = tmp / f"{layout}-pi-{r}.jsonl"
                    write_session(f, ws, layout, a.images, a.mb)
                    res["pi"].append(run_once([a.pi, "-p", "--provider", "mock", "--model", "mock-1",
                                               "--session", str(f), "say done"], env, ws))
            print(f"\n## layout {layout}: session {size / 1e6:.1f} MB")
            for name, rows in res.items():
                rss = [x[0] for x in rows]
                cpu = [x[1] for x in rows]
                wall = [x[2] for x in rows]
                label = dict(bins).get(name, a.pi)
                print(f"{name} ({label}): peak RSS {statistics.median(rss):.0f} MiB "
                      f"[{min(rss):.0f}-{max(rss):.0f}], CPU {statistics.median(cpu):.2f} s "
                      f"[{min(cpu):.2f}-{max(cpu):.2f}], wall {statistics.median(wall):.2f} s "
                      f"[{min(wall):.2f}-{max(wall):.2f}], exit codes {[x[3] for x in rows]}")
    finally:
        model.kill()
        model.wait()


if __name__ == "__main__":
    main()
