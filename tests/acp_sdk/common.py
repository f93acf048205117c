"""Shared by the SDK flows: the loopback scripted model (the `mock-model` binary,
tests/bin/mock_model.rs: $PI_MOCK_MODEL_BIN, else built by tests/mock-model-path) and a
workspace + agent dir whose models.json points at it."""
import json
import os
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# new → prompt (a bash call that asks) → a long answer to cancel → continue after a load.
SCRIPT = {"steps": [
    {"text": "Let me look.", "toolCalls": [{"id": "call_1", "name": "bash", "arguments": {"command": "echo hi"}}]},
    {"text": "It printed hi."},
    {"text": "x" * 400, "chunk": 4, "chunkDelayMs": 50},
    {"text": "Continued."},
]}


def setup(name):
    tmp = Path(tempfile.mkdtemp(prefix=f"pi-acp-{name}-"))
    ws = tmp / "ws"
    ws.mkdir()
    agent = tmp / "agent"
    agent.mkdir()
    (tmp / "script.json").write_text(json.dumps(dict({"usage": {"input": 1000, "output": 20}}, **SCRIPT)))
    model = subprocess.run([str(ROOT / "tests/mock-model-path")], stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    mock = subprocess.Popen([model, str(tmp / "script.json"), str(tmp / "log.jsonl")], stdout=subprocess.PIPE, text=True)
    port = int(mock.stdout.readline().strip())
    (agent / "models.json").write_text(json.dumps({"providers": {"mock": {
        "baseUrl": f"http://127.0.0.1:{port}/v1", "api": "openai-completions", "apiKey": "k",
        "compat": {"supportsDeveloperRole": False},
        "models": [{"id": "mock-1", "contextWindow": 128000, "maxTokens": 4096}]}}}))
    env = dict(os.environ, PI_CODING_AGENT_DIR=str(agent), ANTHROPIC_API_KEY="", OPENAI_API_KEY="")
    return tmp, ws, env, mock
