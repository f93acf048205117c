#!/usr/bin/env python3
"""Side-by-side benchmark of pi-lsp against Pi (1.6.0, and 0.73.1 as a second column) on one
loopback scripted model.

Run through `bench/run` (installs Pi, builds pi-lsp's `dist` profile, installs matplotlib). Each
workload runs both harnesses alternately `--runs` times against the same model server; the
report gives medians, min–max spread and the Pi / pi-lsp ratio of each pair of the same run.
Writes `bench/results/latest.json`, `docs/benchmarks.md` and the charts under `docs/bench/`.
"""
import argparse, json, os, platform, queue, random, shutil, statistics, subprocess, sys
import tempfile, threading, time, uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROUNDS, DELTAS, DELTA_CHARS, ANSWER_CHARS, STREAMS = 50, 4500, 8, 36000, 8
# Tool rounds calling an MCP server's tool (bench/mcp_bench.py).
MCP_ROUNDS = 50
# The paced stream: one delta per write every PACE_MS, as real providers send (~80 tokens/s).
PACED_DELTAS, PACE_MS = 300, 12
# Answers of 4,500 deltas timed together for a readable CPU figure per answer.
DELTA_REPEAT = 10

# ---------------------------------------------------------------- scripted model server

def model_script():
    """The loopback model's script (tests/support/mock_script.rs), by the prompt's start:
    `rounds` ROUNDS `read` calls then "done"; `mcp` MCP_ROUNDS calls of server-everything's
    `echo` (bench/mcp_bench.py); `deltas` / `stream` DELTAS deltas of DELTA_CHARS; `answer`
    ANSWER_CHARS in deltas of 100; `paced` PACED_DELTAS deltas one write each, PACE_MS apart.
    Anything else: "done". Every answer but the paced one is one write of known length."""
    def calls(name, args, n):
        return [{"toolCalls": [{"name": name, "arguments": args}], "repeat": n}, {"text": "done"}]
    deltas = "abcdefg " * DELTAS
    return {
        "rules": [
            {"when": {"startsWith": "paced"}, "steps": [
                {"text": "abcdefg " * PACED_DELTAS, "chunk": DELTA_CHARS, "chunkDelayMs": PACE_MS}]},
            {"when": {"startsWith": "mcp"}, "steps": calls("mcp__everything__echo", {"message": "hi"}, MCP_ROUNDS)},
            {"when": {"startsWith": "rounds"}, "steps": calls("read", {"path": "small.txt"}, ROUNDS)},
            {"when": {"startsWith": "deltas"}, "steps": [{"text": deltas, "chunk": DELTA_CHARS}]},
            {"when": {"startsWith": "stream"}, "steps": [{"text": deltas, "chunk": DELTA_CHARS}]},
            {"when": {"startsWith": "answer"}, "steps": [{"text": ("x" * 99 + " ") * (ANSWER_CHARS // 100), "chunk": 100}]},
        ],
        "default": {"text": "done"},
        "usage": {"input": 100, "output": 10},
    }

def mock_model_bin():
    """The `mock-model` binary (tests/bin/mock_model.rs, the one loopback model of every
    suite): $PI_MOCK_MODEL_BIN (CI's smoke: the debug build), else the release build made by
    tests/mock-model-path (0.13 ms of CPU per tool-round request, the debug build 0.6 ms and
    the Python server it replaced 0.2 ms: less floor to subtract, less noise)."""
    return subprocess.run([str(ROOT / "tests/mock-model-path"), "--release"], stdout=subprocess.PIPE,
                          text=True, check=True).stdout.strip()

def model_floor(port):
    """The model server's own time for the requests of the tool rounds (one keep-alive
    connection, the bodies the rounds send: the prompt plus 0..ROUNDS tool results), in s."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port)
    msgs = [{"role": "user", "content": "rounds please"}]
    t = time.perf_counter()
    for k in range(ROUNDS + 1):
        body = json.dumps({"model": "mock-1", "stream": True, "messages": msgs}).encode()
        conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        conn.getresponse().read()
        msgs = msgs + [{"role": "assistant", "tool_calls": [{"id": f"call_{k}", "type": "function",
                        "function": {"name": "read", "arguments": "{\"path\":\"small.txt\"}"}}]},
                       {"role": "tool", "tool_call_id": f"call_{k}", "content": "hello\n" * 5}]
    conn.close()
    return time.perf_counter() - t

def prompt_floor(port, text):
    """The model server's own time for one streamed answer to `text` (a fresh connection, the
    whole body read), in s: the floor of a one-request prompt such as the 4,500-delta answer."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port)
    body = json.dumps({"model": "mock-1", "stream": True,
                       "messages": [{"role": "user", "content": text}]}).encode()
    t = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
    conn.getresponse().read()
    t = time.perf_counter() - t
    conn.close()
    return t

def start_model():
    """Starts the model server in a process of its own on model_script(); returns
    (port, process). The script's folder is removed once the server has read it (it prints
    its port after reading the script)."""
    folder = Path(tempfile.mkdtemp(prefix="pi-bench-model-"))
    try:
        script = folder / "script.json"
        script.write_text(json.dumps(model_script()))
        p = subprocess.Popen([mock_model_bin(), str(script)], stdout=subprocess.PIPE)
        return int(p.stdout.readline()), p
    finally:
        shutil.rmtree(folder, ignore_errors=True)

# ---------------------------------------------------------------- process helpers

def cpu_s(pid):
    """CPU time the process `pid` has used so far, every thread's (ended threads' too), in s,
    exact to the nanosecond (steadier than wall time on a shared machine): the kernel's CPU
    clock of the process, as `clock_getcpuclockid(3)` names it (CPUCLOCK_SCHED: the scheduler's
    run time of the live threads plus what the ended ones ran). One reading of one counter, so
    a later reading is never smaller. (Summing the live threads' `/proc/PID/task/*/schedstat`
    with the ended threads' 10 ms ticks from `/proc/PID/stat`, as this did before, lost up to a
    tick for each thread ending between two readings, and printed a negative answer once.)
    Linux only; raises OSError once the process is gone (never a made-up value)."""
    # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) of the kernel's posix-timers.h.
    return time.clock_gettime(((~pid) << 3) | 2)

def ratio(first, this):
    """`first / this` as printed beside an A/B figure ("1.23x"), or "—" when either is not a
    positive amount (an overhead below the model's floor): never a negative or `nan` ratio."""
    return f"{first / this:.2f}x" if first > 0 and this > 0 else "—"

def peak_rss_mb(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")

class Reader:
    """Reads a child's stdout on a thread: LSP frames or JSON lines, counting bytes."""
    def __init__(self, proc, lsp):
        self.q, self.bytes, self.proc = queue.Queue(), 0, proc
        threading.Thread(target=self._lsp if lsp else self._lines, daemon=True).start()
    def _lines(self):
        for line in self.proc.stdout:
            self.bytes += len(line)
            try:
                self.q.put(json.loads(line))
            except ValueError:
                pass
    def _lsp(self):
        f = self.proc.stdout
        while True:
            n = None
            while True:
                h = f.readline()
                if not h:
                    return
                self.bytes += len(h)
                if h.lower().startswith(b"content-length:"):
                    n = int(h.split(b":")[1])
                if h in (b"\r\n", b"\n"):
                    break
            body = f.read(n)
            self.bytes += len(body)
            self.q.put(json.loads(body))
    def next(self, timeout=120):
        return self.q.get(timeout=timeout)

# What a launcher sets to save the server its start-up `exec` (server/lsp/src/memory.rs): the
# environment glibc's mmap threshold fix would give it.
THRESHOLD_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "PI_LSP_MMAP_THRESHOLD_SET": "1"}

def binary_env(binary):
    """A binary argument of the A/B drivers: `PATH`, or `VAR=VALUE[,VAR=VALUE...]:PATH` to start
    PATH with those variables set (one binary A/B'd against itself under another setting, e.g.
    `TOKIO_WORKER_THREADS=1:target/release/pi-lsp`). Returns (PATH, {VAR: VALUE})."""
    head, sep, path = str(binary).partition(":")
    if not sep or "=" not in head or "/" in head.split("=", 1)[0]:
        return str(binary), {}
    return path, dict(kv.split("=", 1) for kv in head.split(","))


def label(binary):
    """A binary argument's short name in a driver's lines: the file name, after its variables."""
    path, env = binary_env(binary)
    return ",".join(f"{k}={v}" for k, v in env.items()) + (":" if env else "") + Path(path).name


class PiLsp:
    def __init__(self, binary, ws, agent, env=None):
        binary, own = binary_env(binary)
        env = dict(os.environ, PI_CODING_AGENT_DIR=str(agent), OPENAI_API_KEY="", ANTHROPIC_API_KEY="",
                   **own, **(env or {}))
        self.t0 = time.perf_counter()
        self.p = subprocess.Popen([binary], cwd=ws, env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.r, self.next_id, self.ws = Reader(self.p, True), 0, ws
    def send(self, msg):
        b = json.dumps(msg).encode()
        self.p.stdin.write(b"Content-Length: %d\r\n\r\n" % len(b) + b)
        self.p.stdin.flush()
    def request(self, method, params):
        self.next_id += 1
        rid = self.next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return self.until(lambda m: m.get("id") == rid and "method" not in m)
    def until(self, pred, on_event=None):
        while True:
            m = self.r.next()
            if "method" in m and "id" in m:  # a server request: answer it
                self.send({"jsonrpc": "2.0", "id": m["id"], "result": None})
                continue
            if on_event and m.get("method") == "agent/event":
                if on_event(m["params"]):
                    return m
            if pred(m):
                return m
    def initialize(self, **options):
        r = self.request("initialize", {"processId": os.getpid(), "rootUri": Path(self.ws).as_uri(),
            "capabilities": {}, "initializationOptions": dict(options, approvalPolicy="approve-all")})
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        return r
    def prompt_to_end(self, text, sid=None):
        p = {"text": text, "model": "mock/mock-1"}
        if sid:
            p["sessionId"] = sid
        r = self.request("agent/prompt", p)
        sid = r["result"]["sessionId"]
        self.until(lambda m: False, lambda e: e.get("sessionId") == sid and e["event"]["type"] == "agent_end")
        return sid
    def close(self):
        try:
            self.p.kill()
        finally:
            self.p.wait()

class Pi:
    def __init__(self, binary, ws, agent, sessions, session_file=None):
        env = dict(os.environ, PI_OFFLINE="1", PI_CODING_AGENT_DIR=str(agent))
        args = [binary, "--mode", "rpc", "--provider", "mock", "--model", "mock-1", "--session-dir", str(sessions)]
        if session_file:
            args += ["--session", str(session_file)]
        self.t0 = time.perf_counter()
        self.p = subprocess.Popen(args, cwd=ws, env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.r, self.n = Reader(self.p, False), 0
    def send(self, cmd):
        self.p.stdin.write((json.dumps(cmd) + "\n").encode())
        self.p.stdin.flush()
    def request(self, typ, **kw):
        self.n += 1
        rid = str(self.n)
        self.send(dict(kw, id=rid, type=typ))
        while True:
            m = self.r.next()
            if m.get("type") == "response" and m.get("id") == rid:
                return m
    def prompt_to_end(self, text):
        self.send({"id": "p", "type": "prompt", "message": text})
        while self.r.next().get("type") != "agent_end":
            pass
    def close(self):
        try:
            self.p.kill()
        finally:
            self.p.wait()

# ---------------------------------------------------------------- generated sessions

def write_session(path, target_bytes, branchy, cwd):
    """A Pi v3 session of read rounds (~1 KB per entry) up to `target_bytes`; `branchy` starts
    a new branch from 25 entries back every 50 entries. Returns the entry count."""
    ts = "2026-01-01T00:00:00.000Z"
    text = ("lorem ipsum dolor sit amet " * 30)[:800]
    ids, n, size = [], 0, 0
    with open(path, "w") as f:
        def put(obj):
            nonlocal size
            line = json.dumps(obj, separators=(",", ":")) + "\n"
            f.write(line)
            size += len(line)
        put({"type": "session", "version": 3, "id": str(uuid.uuid4()), "timestamp": ts, "cwd": str(cwd)})
        def entry(kind, **fields):
            nonlocal n
            parent = ids[-1] if ids else None
            if branchy and n and n % 50 == 0 and len(ids) > 25:
                parent = ids[-25]
            eid = "%08x" % n
            n += 1
            put(dict({"type": kind, "id": eid, "parentId": parent, "timestamp": ts}, **fields))
            ids.append(eid)
        entry("model_change", provider="mock", modelId="mock-1")
        entry("thinking_level_change", thinkingLevel="off")
        entry("message", message={"role": "user", "content": [{"type": "text", "text": "go"}], "timestamp": 1})
        usage = {"input": 100, "output": 10, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 110,
                 "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}
        k = 0
        while size < target_bytes:
            entry("message", message={"role": "assistant", "content": [{"type": "toolCall", "id": f"c{k}",
                  "name": "read", "arguments": {"path": "small.txt"}}], "api": "openai-completions",
                  "provider": "mock", "model": "mock-1", "usage": usage, "stopReason": "toolUse", "timestamp": 2})
            entry("message", message={"role": "toolResult", "toolCallId": f"c{k}", "toolName": "read",
                  "content": [{"type": "text", "text": text}], "isError": False, "timestamp": 3})
            k += 1
        entry("message", message={"role": "assistant", "content": [{"type": "text", "text": "done"}],
              "api": "openai-completions", "provider": "mock", "model": "mock-1", "usage": usage,
              "stopReason": "stop", "timestamp": 4})
    return n

# ---------------------------------------------------------------- workloads

def measure(args, port, tmp):
    agent = tmp / "agent"
    agent.mkdir(exist_ok=True)
    (agent / "models.json").write_text(json.dumps({"providers": {"mock": {
        "baseUrl": f"http://127.0.0.1:{port}/v1", "api": "openai-completions", "apiKey": "x",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": "mock-1", "contextWindow": 128000, "maxTokens": 4096}]}}}))
    ws = tmp / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "small.txt").write_text("hello\n" * 5)
    sessions = tmp / "pi-sessions"
    files = {}
    for name, size, branchy in [("long", args.session_mb, False), ("branchy", args.session_mb, True),
                                ("1mb", 1, False), ("10mb", 10, False)]:
        p = tmp / f"{name}.jsonl"
        files[name] = (p, write_session(p, size * 1_000_000, branchy, ws))
    # 10,000 messages: small entries.
    p10k = tmp / "10k.jsonl"
    write_session(p10k, 10_000 * 105, False, ws)
    files["10k"] = (p10k, None)
    fig = {}
    npis = len(args.pi)
    def rec(key, ours, pis):
        """One run's figure `key`: pi-lsp's value and each Pi's (in `--pi` order)."""
        fig.setdefault(key, {"ours": [], "pi": [[] for _ in range(npis)]})
        fig[key]["ours"].append(ours)
        for i, v in enumerate(pis):
            fig[key]["pi"][i].append(v)

    # One untimed start of each harness first: the first start of a run otherwise reads its
    # executable (and Node's modules) from a cold page cache, and the first figure of the
    # table would time the disk (the CI smoke read 5.4 ms for the plain start measured first,
    # against 3.6 ms for the start after it).
    s = PiLsp(args.pi_lsp, ws, agent); s.initialize(); s.close()
    for pi in args.pi:
        q = Pi(pi, ws, agent, sessions); q.request("get_state"); q.close()
    for run in range(args.runs):
        print(f"run {run + 1}/{args.runs}", flush=True)
        # Which start is timed first alternates from run to run.
        env_first = run % 2 == 1
        # start -> ready, rounds, RSS, deltas, answer
        floor = min(model_floor(port) for _ in range(3))
        fig.setdefault("floor", []).append(floor)
        dfloor = min(prompt_floor(port, "deltas please") for _ in range(3))
        fig.setdefault("deltas floor", []).append(dfloor)
        def env_start():
            """Started with the threshold already in the environment, as a launcher of the
            version that re-executed itself would (the server now behaves the same)."""
            s2 = PiLsp(args.pi_lsp, ws, agent, THRESHOLD_ENV); s2.initialize()
            r = (time.perf_counter() - s2.t0, cpu_s(s2.p.pid)); s2.close()
            return r
        if env_first:
            t_ready_env, c_ready_env = env_start()
        s = PiLsp(args.pi_lsp, ws, agent); s.initialize(); t_ready = time.perf_counter() - s.t0
        rss_idle = peak_rss_mb(s.p.pid)
        c = cpu_s(s.p.pid)
        c_ready = c
        if not env_first:
            t_ready_env, c_ready_env = env_start()
        t = time.perf_counter(); s.prompt_to_end("rounds please"); t_rounds = time.perf_counter() - t
        c_rounds = cpu_s(s.p.pid) - c
        rss = peak_rss_mb(s.p.pid)
        c = cpu_s(s.p.pid)
        b0 = s.r.bytes; t = time.perf_counter(); s.prompt_to_end("deltas please")
        t_deltas = time.perf_counter() - t; c_deltas = cpu_s(s.p.pid) - c
        b_delta = (s.r.bytes - b0) / DELTAS
        c = cpu_s(s.p.pid)
        t = time.perf_counter(); s.prompt_to_end("answer please"); t_answer = time.perf_counter() - t
        c_answer = cpu_s(s.p.pid) - c
        s.close()
        # The same deltas with coalescing turned off (one event per delta, as a slow stream).
        s = PiLsp(args.pi_lsp, ws, agent); s.initialize(coalesceDeltasMs=0)
        b0 = s.r.bytes; s.prompt_to_end("deltas please"); b_single = (s.r.bytes - b0) / DELTAS
        s.close()
        # The same with compact deltas (`compactDeltas: true`, as our clients ask), coalesced
        # and not; then the paced stream, full and compact (default coalescing).
        s = PiLsp(args.pi_lsp, ws, agent); s.initialize(compactDeltas=True)
        b0 = s.r.bytes; s.prompt_to_end("deltas please"); b_compact = (s.r.bytes - b0) / DELTAS
        s.close()
        s = PiLsp(args.pi_lsp, ws, agent); s.initialize(compactDeltas=True)
        b0 = s.r.bytes; s.prompt_to_end("paced please"); b_paced_compact = (s.r.bytes - b0) / PACED_DELTAS
        s.close()
        s = PiLsp(args.pi_lsp, ws, agent); s.initialize(compactDeltas=True, coalesceDeltasMs=0)
        b0 = s.r.bytes; s.prompt_to_end("deltas please"); b_compact_single = (s.r.bytes - b0) / DELTAS
        s.close()
        s = PiLsp(args.pi_lsp, ws, agent); s.initialize()
        b0 = s.r.bytes; s.prompt_to_end("paced please"); b_paced = (s.r.bytes - b0) / PACED_DELTAS
        s.close()
        # The 4,500-delta answer's CPU, steadier: DELTA_REPEAT answers in one process after a
        # first untimed one (the row above times a process's first), divided.
        s = PiLsp(args.pi_lsp, ws, agent); s.initialize(); s.prompt_to_end("deltas please")
        c = cpu_s(s.p.pid)
        for _ in range(DELTA_REPEAT):
            s.prompt_to_end("deltas please")
        c_deltas_each = (cpu_s(s.p.pid) - c) / DELTA_REPEAT
        s.close()
        q_ready, q_rss_idle, q_rounds, q_c_rounds, q_rss, q_delta, q_answer, q_c_answer = ([] for _ in range(8))
        q_c_ready, q_deltas, q_c_deltas, q_c_deltas_each = [], [], [], []
        for pi in args.pi:
            q = Pi(pi, ws, agent, sessions); q.request("get_state"); q_ready.append(time.perf_counter() - q.t0)
            q_rss_idle.append(peak_rss_mb(q.p.pid))
            c = cpu_s(q.p.pid)
            q_c_ready.append(c)
            t = time.perf_counter(); q.prompt_to_end("rounds please"); q_rounds.append(time.perf_counter() - t)
            q_c_rounds.append(cpu_s(q.p.pid) - c)
            q_rss.append(peak_rss_mb(q.p.pid))
            c = cpu_s(q.p.pid)
            b0 = q.r.bytes; t = time.perf_counter(); q.prompt_to_end("deltas please")
            q_deltas.append(time.perf_counter() - t); q_c_deltas.append(cpu_s(q.p.pid) - c)
            q_delta.append((q.r.bytes - b0) / DELTAS)
            c = cpu_s(q.p.pid)
            t = time.perf_counter(); q.prompt_to_end("answer please"); q_answer.append(time.perf_counter() - t)
            q_c_answer.append(cpu_s(q.p.pid) - c)
            q.close()
            q = Pi(pi, ws, agent, sessions); q.request("get_state"); q.prompt_to_end("deltas please")
            c = cpu_s(q.p.pid)
            for _ in range(DELTA_REPEAT):
                q.prompt_to_end("deltas please")
            q_c_deltas_each.append((cpu_s(q.p.pid) - c) / DELTA_REPEAT)
            q.close()
        rec("start → ready (s)", t_ready, q_ready)
        rec("CPU time to ready (s)", c_ready, q_c_ready)
        rec("start → ready, the mmap threshold set by the launcher (no second exec) (s)", t_ready_env, q_ready)
        rec("CPU time to ready, the same (s)", c_ready_env, q_c_ready)
        rec("peak RSS when ready (MiB)", rss_idle, q_rss_idle)
        rec(f"{ROUNDS} tool rounds, prompt → agent_end (s)", t_rounds, q_rounds)
        rec(f"harness overhead per tool round (s; time − the model's floor, same run)",
            (t_rounds - floor) / ROUNDS, [(x - floor) / ROUNDS for x in q_rounds])
        rec(f"CPU time of the {ROUNDS} tool rounds (s)", c_rounds, q_c_rounds)
        rec(f"peak RSS after the {ROUNDS} rounds (MiB)", rss, q_rss)
        rec(f"bytes to the client per streamed delta ({DELTAS} × {DELTA_CHARS} chars)", b_delta, q_delta)
        rec("the same, one event per delta (`coalesceDeltasMs: 0`)", b_single, q_delta)
        rec("the same deltas, `compactDeltas: true` (as our clients ask)", b_compact, q_delta)
        rec("compact, one event per delta (`coalesceDeltasMs: 0`)", b_compact_single, q_delta)
        rec(f"paced stream ({PACED_DELTAS} deltas, one per write every {PACE_MS} ms; Pi: its figure above)", b_paced, q_delta)
        rec("the paced stream, `compactDeltas: true`", b_paced_compact, q_delta)
        rec(f"{DELTAS:,}-delta answer, prompt → agent_end (s)", t_deltas, q_deltas)
        rec(f"{DELTAS:,}-delta answer: harness overhead (s; time − the model's floor, same run)",
            t_deltas - dfloor, [x - dfloor for x in q_deltas])
        rec(f"CPU time of the {DELTAS:,}-delta answer (s)", c_deltas, q_c_deltas)
        rec(f"CPU time per {DELTAS:,}-delta answer, {DELTA_REPEAT} in one process (s)",
            c_deltas_each, q_c_deltas_each)
        rec(f"{ANSWER_CHARS:,}-character answer, prompt → agent_end (s)", t_answer, q_answer)
        rec(f"CPU time of the {ANSWER_CHARS:,}-character answer (s)", c_answer, q_c_answer)
        # session opens
        for name in ["long", "branchy", "1mb", "10mb", "10k"]:
            path = files[name][0]
            # Memory is read right after the state answers; then the last page of the branch
            # as a client shows it (pi-lsp: agent/session/history; Pi has no paging: its
            # whole get_messages).
            s = PiLsp(args.pi_lsp, ws, agent); s.initialize()
            r = s.request("agent/session/open", {"path": str(path)})
            t_open = time.perf_counter() - s.t0
            c_open = cpu_s(s.p.pid)
            rss = peak_rss_mb(s.p.pid)
            t = time.perf_counter()
            page = s.request("agent/session/history", {"sessionId": r["result"]["sessionId"]})
            t_page = time.perf_counter() - t
            assert page["result"]["entries"], page
            s.close()
            q_open, q_c_open, q_rss, q_page = [], [], [], []
            for pi in args.pi:
                q = Pi(pi, ws, agent, sessions, path); q.request("get_state")
                q_open.append(time.perf_counter() - q.t0)
                q_c_open.append(cpu_s(q.p.pid))
                q_rss.append(peak_rss_mb(q.p.pid))
                t = time.perf_counter(); q.request("get_messages"); q_page.append(time.perf_counter() - t)
                q.close()
            mb = path.stat().st_size / 1e6
            if name in ("long", "branchy", "10mb"):
                label = "long, fixed size" if name == "10mb" else name
                rec(f"open a {mb:.0f} MB session ({label}), spawn → state (s)", t_open, q_open)
                rec(f"CPU time opening it ({label}) (s)", c_open, q_c_open)
                rec(f"peak RSS opening it ({label}) (MiB)", rss, q_rss)
            if name == "10k":
                rec("10,000-message session: last page of history (s)", t_page, q_page)
            rec(f"memory:{mb:.1f}", rss, q_rss)
        # 8 sessions streaming at once: one pi-lsp server; Pi needs one process per session.
        s = PiLsp(args.pi_lsp, ws, agent); s.initialize()
        t = time.perf_counter()
        # The prompts go out together and every reply and `agent_end` is counted in one loop:
        # a session can end while another prompt's reply is still awaited.
        ids = []
        for i in range(STREAMS):
            s.next_id += 1
            ids.append(s.next_id)
            s.send({"jsonrpc": "2.0", "id": s.next_id, "method": "agent/prompt",
                    "params": {"text": f"stream {i}", "model": "mock/mock-1"}})
        replies, done = set(), set()
        def seen(m):
            if m.get("id") in ids and "method" not in m:
                replies.add(m["id"])
            return len(replies) == STREAMS and len(done) == STREAMS
        s.until(seen, lambda e: (e["event"]["type"] == "agent_end" and done.add(e["sessionId"]))
                or (len(replies) == STREAMS and len(done) == STREAMS))
        t8 = time.perf_counter() - t; rss8 = peak_rss_mb(s.p.pid); s.close()
        q8, qrss8 = [], []
        for pi in args.pi:
            qs = [Pi(pi, ws, agent, sessions) for _ in range(STREAMS)]
            for q in qs:
                q.request("get_state")
            t = time.perf_counter()
            for i, q in enumerate(qs):
                q.send({"id": "p", "type": "prompt", "message": f"stream {i}"})
            for q in qs:
                while q.r.next().get("type") != "agent_end":
                    pass
            q8.append(time.perf_counter() - t); qrss8.append(sum(peak_rss_mb(q.p.pid) for q in qs))
            for q in qs:
                q.close()
        rec(f"{STREAMS} sessions streaming at once, wall time (s)", t8, q8)
        rec(f"{STREAMS} sessions streaming at once, peak RSS (MiB; Pi: sum of {STREAMS} processes)", rss8, qrss8)
    return fig

# ---------------------------------------------------------------- report

NOTES_HEADING = "## Profiles, and the goals still missed"

def fmt(v):
    if abs(v) < 0.01:
        return f"{v * 1000:.2f} ms"
    return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s"

def report(fig, args, out_md, chart_dir):
    names = args.pi_name
    rows = []
    for key, v in fig.items():
        if key.startswith("memory:") or key in ("floor", "deltas floor"):
            continue
        show = (lambda x: f"{x:.1f}") if "(s)" not in key and "(s;" not in key else fmt
        row = [key, show(statistics.median(v["ours"])), f"{show(min(v['ours']))}–{show(max(v['ours']))}"]
        for pis in v["pi"]:
            ratios = [p / o for o, p in zip(v["ours"], pis) if o > 0 and p > 0]
            row += [show(statistics.median(pis)), f"{statistics.median(ratios):.1f}× ({min(ratios):.1f}–{max(ratios):.1f}×)"
                    if ratios else "—"]
        rows.append(tuple(row))
    charts = []
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        chart_dir.mkdir(parents=True, exist_ok=True)
        rk = f"{ROUNDS} tool rounds, prompt → agent_end (s)"
        mk = f"peak RSS after the {ROUNDS} rounds (MiB)"
        f, ax = plt.subplots(1, 2, figsize=(9, 3.5))
        colors = ["#2a7", "#888", "#bbb", "#ddd"][: len(names) + 1]
        ax[0].bar(["pi-lsp"] + names, [statistics.median(fig[rk]["ours"]) / ROUNDS * 1000] +
                  [statistics.median(p) / ROUNDS * 1000 for p in fig[rk]["pi"]], color=colors)
        ax[0].set_ylabel("ms per tool round"); ax[0].set_title("Time per tool round")
        ax[1].bar(["pi-lsp"] + names, [statistics.median(fig[mk]["ours"])] + [statistics.median(p) for p in fig[mk]["pi"]],
                  color=colors)
        ax[1].set_ylabel("peak RSS (MiB)"); ax[1].set_title(f"Memory after {ROUNDS} rounds")
        f.tight_layout(); f.savefig(chart_dir / "rounds.png", dpi=110); plt.close(f)
        mem = sorted((float(k.split(":")[1]), statistics.median(v["ours"]), [statistics.median(p) for p in v["pi"]])
                     for k, v in fig.items() if k.startswith("memory:"))
        f, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot([m[0] for m in mem], [m[1] for m in mem], "o-", label="pi-lsp", color="#2a7")
        for i, name in enumerate(names):
            ax.plot([m[0] for m in mem], [m[2][i] for m in mem], "o-", label=name, color=colors[i + 1])
        ax.set_xscale("log"); ax.set_xlabel("session file (MB)"); ax.set_ylabel("peak RSS opening it (MiB)")
        ax.legend(); ax.set_title("Memory against session size"); f.tight_layout()
        f.savefig(chart_dir / "session-memory.png", dpi=110); plt.close(f)
        charts = ["bench/rounds.png", "bench/session-memory.png"]
    except ImportError:
        print("matplotlib not installed: no charts", file=sys.stderr)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    mem = next((l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")), "0")
    lines = [f"# Benchmarks: pi-lsp against {' and '.join(names)}", "",
             "Generated by `bench/run` (options `--runs N`, `--session-mb M`; the workloads are listed in `bench/bench.py`); re-run it to refresh this page.", "",
             f"Machine: {cpu}, {os.cpu_count()} CPUs, {int(mem) // 1024} MB RAM, {platform.system()} {platform.release()}; "
             f"pi-lsp built with the `{args.profile}` profile; "
             f"{args.runs} runs, the harnesses in turn against the same loopback scripted model "
             f"(the `mock-model` binary, one HTTP response per request). Load average at the start: {os.getloadavg()[0]:.1f}.", "",
             "| figure | pi-lsp (median) | pi-lsp spread | " +
             " | ".join(f"{n} (median) | {n} / pi-lsp (median of pairs, spread)" for n in names) + " |",
             "|---|---|---|" + "---|---|" * len(names)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", "Ratios are taken pair by pair within one run, then the median. Memory is the peak "
              "resident set (`VmHWM`) of the server process (Pi: the node process), read right "
              "after the answer the row names (for a session open: right after the state), in MiB "
              "(2^20 bytes: 17 MiB = 17.8 MB).", ""]
    rk = f"{ROUNDS} tool rounds, prompt → agent_end (s)"
    if fig.get("floor") and rk in fig:
        floor = statistics.median(fig["floor"])
        ours = statistics.median(fig[rk]["ours"])
        others = ", ".join(f"{n} {(statistics.median(p) - floor) / ROUNDS * 1000:.2f} ms"
                           for n, p in zip(names, fig[rk]["pi"]))
        lines += [f"Harness overhead: the model server's own time for the {ROUNDS + 1} requests of the tool rounds "
                  f"(measured in the same run by a bare HTTP client: a Python client on one keep-alive "
                  f"connection, the same bodies) is {fmt(floor)} (median); beyond it pi-lsp spends "
                  f"{(ours - floor) / ROUNDS * 1000:.2f} ms per round, {others}.", ""]
    lines += [f"![chart]({c})" for c in charts]
    # The hand-written analysis below the table (from its heading on) is kept.
    notes = ""
    if out_md.exists():
        old = out_md.read_text()
        at = old.find("\n" + NOTES_HEADING)
        if at >= 0:
            notes = "\n" + old[at + 1:]
    out_md.write_text("\n".join(lines) + "\n" + notes)
    return rows

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pi", action="append", required=True,
                    help="a Pi binary; repeat for more columns (the first is the reference)")
    ap.add_argument("--pi-name", action="append", default=[],
                    help="the column name of each --pi, in order (default: Pi N)")
    ap.add_argument("--pi-lsp", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--session-mb", type=int, default=100)
    ap.add_argument("--out", default=str(ROOT / "docs/benchmarks.md"))
    ap.add_argument("--profile", default="release", help="the cargo profile pi-lsp was built with (for the page)")
    args = ap.parse_args()
    # Both are spawned in the workspace folder: relative paths are the caller's.
    args.pi = [os.path.abspath(p) for p in args.pi]
    args.pi_lsp = os.path.abspath(args.pi_lsp)
    args.pi_name = (args.pi_name + [f"Pi {i + 1}" for i in range(len(args.pi))])[: len(args.pi)]
    port, model = start_model()
    tmp = Path(tempfile.mkdtemp(prefix="pi-bench-"))
    try:
        fig = measure(args, port, tmp)
    finally:
        model.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    res = ROOT / "bench/results"
    res.mkdir(exist_ok=True)
    (res / "latest.json").write_text(json.dumps(fig, indent=1))
    out = Path(args.out)
    for r in report(fig, args, out, out.parent / "bench"):
        print(" | ".join(r))

if __name__ == "__main__":
    main()
