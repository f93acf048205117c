#!/usr/bin/env python3
"""Loopback OpenAI-compatible model server for the plugin's tests (stdlib only).

Usage: mock_model.py SCRIPT.json LOG.jsonl
Prints the port on its first stdout line, then serves POST /v1/chat/completions as SSE.
SCRIPT: {"steps": [{"thinking"?, "text"?, "chunk"?, "chunkDelayMs"?, "delayMs"?,
                    "toolCalls"?: [{"id", "name", "arguments"}], "status"?}]}
Request n (0-based, counting chat requests) is answered by step n; past the end: "(script end)".
Every request body is appended to LOG as one JSON line.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

script = json.load(open(sys.argv[1]))
log_path = sys.argv[2]
lock = threading.Lock()
count = [0]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        with lock:
            idx = count[0]
            count[0] += 1
            with open(log_path, "a") as f:
                f.write(body.decode("utf-8", "replace").replace("\n", " ") + "\n")
        steps = script.get("steps", [])
        step = steps[idx] if idx < len(steps) else {"text": "(script end)"}
        if step.get("delayMs"):
            time.sleep(step["delayMs"] / 1000.0)
        if step.get("status"):
            data = json.dumps({"error": {"message": step.get("error", "mock failure")}}).encode()
            self.send_response(step["status"])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()

        def send(obj):
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

        base = {"id": "mock-%d" % idx, "object": "chat.completion.chunk", "model": "mock-1"}
        try:
            thinking = step.get("thinking")
            if thinking:
                size = step.get("chunk", 6)
                for i in range(0, len(thinking), size):
                    send(dict(base, choices=[{"index": 0, "delta": {"reasoning_content": thinking[i:i + size]}}]))
                    if step.get("chunkDelayMs"):
                        time.sleep(step["chunkDelayMs"] / 1000.0)
            text = step.get("text")
            if text:
                size = step.get("chunk", 6)
                for i in range(0, len(text), size):
                    send(dict(base, choices=[{"index": 0, "delta": {"content": text[i:i + size]}}]))
                    if step.get("chunkDelayMs"):
                        time.sleep(step["chunkDelayMs"] / 1000.0)
            for i, c in enumerate(step.get("toolCalls", [])):
                send(dict(base, choices=[{"index": 0, "delta": {"tool_calls": [{
                    "index": i, "id": c.get("id", "call_%d_%d" % (idx, i)), "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))}}]}}]))
            reason = "tool_calls" if step.get("toolCalls") else "stop"
            send(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": reason}]))
            send(dict(base, choices=[], usage={"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020}))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
try:
    server.serve_forever()
except KeyboardInterrupt:
    pass
