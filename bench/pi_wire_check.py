#!/usr/bin/env python3
"""Outside check of a provider wire against the real Pi: the same scripted model, the same
prompts, Pi and pi-lsp side by side, and what differs printed field by field.

    bench/pi_wire_check.py --pi PI --pi-lsp PI_LSP [--api anthropic-messages|openai-responses]
                           [--scenario basic|image|529|429|cut|error-event|max-tokens|refusal|
                                       incomplete|failed] [--context-window N] [--keep DIR]
                           [-- PI_LSP_RUN_ARGS...]

A loopback server (this script, stdlib only) answers the i-th request with the scenario's i-th
response (Anthropic Messages or OpenAI Responses SSE, or an HTTP error) and logs every request
(path, headers, body). Each side gets its own workspace (`f.txt`, a 4×4 `img.png`) and agent
dir holding the same models.json (provider `anth`, model `claude-mock`, reasoning, images,
costs), runs `PROMPT` in print mode (Pi `-p`, `pi-lsp run`) and, for `basic`, `-c` a second
prompt. Printed: each request's differing headers and body fields (the SDK's own headers and
`host`/`content-length` left out; `--skip` more), then the stored messages' differing keys
(timestamps and durations left out). Extra arguments go to `pi-lsp run` (e.g. `-t read,bash,
edit,write --thinking medium` to line the tool set and thinking level up with Pi's defaults).
"""
import argparse, base64, json, os, struct, subprocess, sys, tempfile, threading, zlib, glob
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# ---- scripted responses -------------------------------------------------------------------

def anth(blocks, stop, usage, out_tokens, mid):
    ev = [["message_start", {"type": "message_start", "message": {"id": mid, "type": "message", "role": "assistant", "model": "claude-mock", "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage}}], ["ping", {"type": "ping"}]]
    for i, b in enumerate(blocks):
        start = lambda cb: ev.append(["content_block_start", {"type": "content_block_start", "index": i, "content_block": cb}])
        delta = lambda d: ev.append(["content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}])
        if b[0] == "thinking":
            start({"type": "thinking", "thinking": "", "signature": ""})
            delta({"type": "thinking_delta", "thinking": b[1]})
            delta({"type": "signature_delta", "signature": b[2]})
        elif b[0] == "redacted":
            start({"type": "redacted_thinking", "data": b[1]})
        elif b[0] == "text":
            start({"type": "text", "text": ""})
            delta({"type": "text_delta", "text": b[1]})
        elif b[0] == "tool":
            start({"type": "tool_use", "id": b[1], "name": b[2], "input": {}})
            delta({"type": "input_json_delta", "partial_json": json.dumps(b[3])})
        ev.append(["content_block_stop", {"type": "content_block_stop", "index": i}])
    ev.append(["message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": out_tokens}}])
    ev.append(["message_stop", {"type": "message_stop"}])
    return {"sse": ev}

def au(i, cw, cr, cw1h=0):
    return {"input_tokens": i, "cache_creation_input_tokens": cw, "cache_read_input_tokens": cr, "output_tokens": 1,
            "cache_creation": {"ephemeral_5m_input_tokens": cw - cw1h, "ephemeral_1h_input_tokens": cw1h}}

def resp(items, rid, usage, status="completed"):
    ev = [["response.created", {"type": "response.created", "response": {"id": rid, "object": "response", "status": "in_progress", "output": []}}]]
    out = []
    for i, it in enumerate(items):
        add = lambda item: ev.append(["response.output_item.added", {"type": "response.output_item.added", "output_index": i, "item": dict(item)}])
        if it[0] == "reasoning":
            item = {"type": "reasoning", "id": f"rs_{rid}_{i}", "summary": [], "encrypted_content": it[2]}
            add(item)
            ev.append(["response.reasoning_summary_part.added", {"type": "response.reasoning_summary_part.added", "item_id": item["id"], "output_index": i, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}])
            ev.append(["response.reasoning_summary_text.delta", {"type": "response.reasoning_summary_text.delta", "item_id": item["id"], "output_index": i, "summary_index": 0, "delta": it[1]}])
            ev.append(["response.reasoning_summary_part.done", {"type": "response.reasoning_summary_part.done", "item_id": item["id"], "output_index": i, "summary_index": 0, "part": {"type": "summary_text", "text": it[1]}}])
            item["summary"] = [{"type": "summary_text", "text": it[1]}]
        elif it[0] == "text":
            item = {"type": "message", "id": f"msg_{rid}_{i}", "role": "assistant", "status": "in_progress", "content": []}
            add(item)
            part = {"type": "output_text", "text": it[1], "annotations": []}
            ev.append(["response.content_part.added", {"type": "response.content_part.added", "item_id": item["id"], "output_index": i, "content_index": 0, "part": {**part, "text": ""}}])
            ev.append(["response.output_text.delta", {"type": "response.output_text.delta", "item_id": item["id"], "output_index": i, "content_index": 0, "delta": it[1]}])
            ev.append(["response.output_text.done", {"type": "response.output_text.done", "item_id": item["id"], "output_index": i, "content_index": 0, "text": it[1]}])
            ev.append(["response.content_part.done", {"type": "response.content_part.done", "item_id": item["id"], "output_index": i, "content_index": 0, "part": part}])
            item.update(status="completed", content=[part])
        elif it[0] == "call":
            item = {"type": "function_call", "id": f"fc_{rid}_{i}", "call_id": it[1], "name": it[2], "arguments": "", "status": "in_progress"}
            add(item)
            ev.append(["response.function_call_arguments.delta", {"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": i, "delta": json.dumps(it[3])}])
            ev.append(["response.function_call_arguments.done", {"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": i, "arguments": json.dumps(it[3])}])
            item.update(arguments=json.dumps(it[3]), status="completed")
        ev.append(["response.output_item.done", {"type": "response.output_item.done", "output_index": i, "item": item}])
        out.append(item)
    kind = "response.completed" if status == "completed" else "response.incomplete"
    extra = {} if status == "completed" else {"incomplete_details": {"reason": "max_output_tokens"}}
    ev.append([kind, {"type": kind, "response": {"id": rid, "object": "response", "status": status, "output": out, "usage": usage, **extra}}])
    return {"sse": ev}

def ru(i, c, o, r):
    return {"input_tokens": i, "input_tokens_details": {"cached_tokens": c}, "output_tokens": o, "output_tokens_details": {"reasoning_tokens": r}, "total_tokens": i + o}

def scenario(api, name):
    """(responses, first prompt, second prompt or None)"""
    if api == "anthropic-messages":
        ok = anth([["text", "Recovered answer."]], "end_turn", au(10, 0, 0), 3, "msg_ok")
        part = anth([["text", "Partial answ"]], "end_turn", au(10, 0, 0), 3, "msg_cut")["sse"][:4]
        err = lambda st, typ, msg, h={}: {"status": st, "headers": h, "body": {"type": "error", "error": {"type": typ, "message": msg}}}
        table = {
            "basic": ([anth([["thinking", "Let me read the file.", "sig-AAA"], ["redacted", "REDACTED-BLOB"], ["text", "Reading."], ["tool", "toolu_01", "read", {"path": "f.txt"}]], "tool_use", au(120, 1000, 0), 42, "msg_1"),
                       anth([["text", "The file says hello."]], "end_turn", au(30, 200, 1000), 7, "msg_2"),
                       anth([["thinking", "Second turn.", "sig-BBB"], ["text", "Again done."]], "end_turn", au(40, 0, 1200), 9, "msg_3")], "Read f.txt", "Again"),
            "image": ([anth([["tool", "toolu_img", "read", {"path": "img.png"}]], "tool_use", au(50, 500, 0, 100), 20, "msg_1"),
                       anth([["text", "A red square."]], "end_turn", au(20, 0, 500), 5, "msg_2")], "Look at img.png", None),
            "529": ([err(529, "overloaded_error", "Overloaded"), ok], "Say hi", None),
            "429": ([err(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", {"retry-after": "2"}), ok], "Say hi", None),
            "cut": ([{"sse": part, "tail": "event: content_block_delta\ndata: {\"type\":\"content_bl"}, ok], "Say hi", None),
            "error-event": ([{"sse": part + [["error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}]]}, ok], "Say hi", None),
            "max-tokens": ([anth([["text", "Truncated becau"]], "max_tokens", au(10, 0, 0), 3, "msg_mt")], "Say hi", None),
            "refusal": ([anth([["text", "I can't"]], "refusal", au(10, 0, 0), 3, "msg_ref")], "Say hi", None),
        }
    else:
        ok = resp([["text", "Recovered."]], "resp_ok", ru(10, 0, 3, 0))
        part = resp([["text", "Partial"]], "resp_cut", ru(10, 0, 3, 0))["sse"][:4]
        table = {
            "basic": ([resp([["reasoning", "Need to read.", "ENC-AAA"], ["text", "Reading."], ["call", "call_1", "read", {"path": "f.txt"}]], "resp_1", ru(300, 100, 40, 12)),
                       resp([["text", "The file says hello."]], "resp_2", ru(350, 300, 8, 0)),
                       resp([["reasoning", "Again.", "ENC-BBB"], ["text", "Again done."]], "resp_3", ru(400, 350, 9, 3))], "Read f.txt", "Again"),
            "429": ([{"status": 429, "headers": {"retry-after": "1"}, "body": {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}}, ok], "Say hi", None),
            "cut": ([{"sse": part, "tail": "event: response.output_text.delta\ndata: {\"type\":\"resp"}, ok], "Say hi", None),
            "failed": ([{"sse": part + [["response.failed", {"type": "response.failed", "response": {"id": "resp_f", "status": "failed", "error": {"code": "server_error", "message": "The server had an error"}}}]]}, ok], "Say hi", None),
            "incomplete": ([resp([["text", "Cut sho"]], "resp_x", ru(10, 0, 3, 0), "incomplete")], "Say hi", None),
        }
    if name not in table:
        sys.exit(f"no scenario {name!r} for {api}: {', '.join(table)}")
    return table[name]

# ---- loopback server ----------------------------------------------------------------------

def serve(responses, log):
    lock, count = threading.Lock(), [0]

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
            with lock:
                i = count[0]
                count[0] += 1
                log.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
            r = responses[min(i, len(responses) - 1)]
            if "status" in r:
                data = json.dumps(r["body"]).encode()
                self.send_response(r["status"])
                for k, v in r.get("headers", {}).items():
                    self.send_header(k, v)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            for ev, data in r["sse"]:
                self.wfile.write(f"event: {ev}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
            if r.get("tail"):
                self.wfile.write(r["tail"].encode())
            self.close_connection = True

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv

# ---- comparison ---------------------------------------------------------------------------

def flat(x, p="", out=None):
    out = {} if out is None else out
    if isinstance(x, dict):
        for k, v in x.items():
            flat(v, f"{p}.{k}", out)
    elif isinstance(x, list):
        out[p + "#len"] = len(x)
        for i, v in enumerate(x):
            flat(v, f"{p}[{i}]", out)
    else:
        out[p] = x
    return out

def diff(a, b, skip, indent="  "):
    fa, fb = flat(a), flat(b)
    for k in sorted(set(fa) | set(fb)):
        if any(s in k for s in skip):
            continue
        va, vb = fa.get(k, "<absent>"), fb.get(k, "<absent>")
        if va != vb:
            print(f"{indent}{k}: pi={repr(va)[:160]} pi-lsp={repr(vb)[:160]}")

SDK_HEADERS = ("x-stainless-", "host", "content-length", "user-agent", "accept", "connection", "sec-fetch-mode", "anthropic-dangerous-direct-browser-access")

def png(w, h):
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * w for _ in range(h))
    ch = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    return b"\x89PNG\r\n\x1a\n" + ch(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + ch(b"IDAT", zlib.compress(raw)) + ch(b"IEND", b"")

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pi", required=True)
    ap.add_argument("--pi-lsp", required=True)
    ap.add_argument("--api", default="anthropic-messages", choices=["anthropic-messages", "openai-responses"])
    ap.add_argument("--scenario", default="basic")
    ap.add_argument("--keep", help="folder to keep the workspaces, logs and session files in")
    ap.add_argument("--skip", action="append", default=[], help="leave out body fields whose path contains this")
    ap.add_argument("--context-window", type=int, default=200000, help="the model's contextWindow (a small one shows the output budget's clamp)")
    ap.add_argument("lsp_args", nargs="*")
    a = ap.parse_args()
    responses, p1, p2 = scenario(a.api, a.scenario)
    root = a.keep or tempfile.mkdtemp(prefix="pi-wire-")
    logs, msgs = {}, {}
    for who in ("pi", "pi-lsp"):
        d = os.path.join(root, who)
        ws, agent, sessions = (os.path.join(d, x) for x in ("ws", "agent", "sessions"))
        for x in (ws, agent, sessions):
            os.makedirs(x, exist_ok=True)
        open(os.path.join(ws, "f.txt"), "w").write("hello\n")
        open(os.path.join(ws, "img.png"), "wb").write(png(4, 4))
        log = []
        srv = serve(responses, log)
        base = f"http://127.0.0.1:{srv.server_address[1]}" + ("/v1" if a.api == "openai-responses" else "")
        json.dump({"providers": {"anth": {"baseUrl": base, "api": a.api, "apiKey": "sk-test-key", "models": [
            {"id": "claude-mock", "name": "Claude Mock", "reasoning": True, "input": ["text", "image"], "contextWindow": a.context_window,
             "maxTokens": 32000, "cost": {"input": 3, "output": 15, "cacheRead": 0.3, "cacheWrite": 3.75}}]}}},
                  open(os.path.join(agent, "models.json"), "w"))
        env = dict(os.environ, PI_OFFLINE="1", PI_CODING_AGENT_DIR=agent)
        for n, prompt in enumerate(p for p in (p1, p2) if p):
            if who == "pi":
                cmd = [a.pi, "-p"] + (["-c"] if n else []) + ["--provider", "anth", "--model", "claude-mock", "--session-dir", sessions, prompt]
            else:
                cmd = [a.pi_lsp, "run", "--approve-all"] + (["-c"] if n else []) + ["--model", "anth/claude-mock"] + a.lsp_args + [prompt]
            r = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=120)
            print(f"--- {who} run {n + 1}: exit {r.returncode}; stdout {r.stdout.strip()[:200]!r}; stderr {r.stderr.strip()[:300]!r}")
        srv.shutdown()
        logs[who] = log
        files = sorted(glob.glob(os.path.join(sessions if who == "pi" else os.path.join(ws, ".pi", "sessions"), "*.jsonl")))
        msgs[who] = [e["message"] for e in map(json.loads, open(files[-1])) if e.get("type") == "message" and e["message"]["role"] != "system"] if files else []
        json.dump(log, open(os.path.join(d, "requests.json"), "w"), indent=1)
    for i in range(max(len(logs["pi"]), len(logs["pi-lsp"]))):
        print(f"=== request {i}")
        if i >= len(logs["pi"]) or i >= len(logs["pi-lsp"]):
            print("  only", "pi" if i < len(logs["pi"]) else "pi-lsp", "sent it")
            continue
        x, y = logs["pi"][i], logs["pi-lsp"][i]
        if x["path"] != y["path"]:
            print(f"  path: pi={x['path']} pi-lsp={y['path']}")
        hx = {k: v for k, v in x["headers"].items() if not k.startswith(SDK_HEADERS)}
        hy = {k: v for k, v in y["headers"].items() if not k.startswith(SDK_HEADERS)}
        diff(hx, hy, [], "  header")
        diff(x["body"], y["body"], a.skip)
    print(f"=== stored messages: pi {len(msgs['pi'])}, pi-lsp {len(msgs['pi-lsp'])}")
    for i in range(max(len(msgs["pi"]), len(msgs["pi-lsp"]))):
        x = msgs["pi"][i] if i < len(msgs["pi"]) else {}
        y = msgs["pi-lsp"][i] if i < len(msgs["pi-lsp"]) else {}
        print(f"  message {i} ({x.get('role')}/{y.get('role')})")
        diff(x, y, ["timestamp", "durationMs"], "    ")
    print(f"(kept in {root})")

if __name__ == "__main__":
    main()
