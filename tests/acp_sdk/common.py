"""Shared by the SDK flows: the loopback scripted model (the `mock-model` binary,
tests/bin/mock_model.rs: $PI_MOCK_MODEL_BIN, else built by tests/mock-model-path) and a
workspace + agent dir whose models.json points at it."""
import atexit
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# new → prompt (a bash call that asks) → a long answer to cancel → continue after a load;
# then, in a client that advertises `terminal`, a bash call run in the client's terminal.
TERMINAL_COMMAND = "printf 'via %s\\n' terminal; echo oops >&2; exit 3"
SCRIPT = {"steps": [
    {"text": "Let me look.", "toolCalls": [{"id": "call_1", "name": "bash", "arguments": {"command": "echo hi"}}]},
    {"text": "It printed hi."},
    {"text": "x" * 400, "chunk": 4, "chunkDelayMs": 50},
    {"text": "Continued."},
    {"toolCalls": [{"id": "call_t", "name": "bash", "arguments": {"command": TERMINAL_COMMAND}}]},
    {"text": "Saw it."},
]}
# What the model gets back from TERMINAL_COMMAND (both streams, Pi's ending words).
TERMINAL_RESULT = "via terminal\noops\n\n\nCommand exited with code 3"


def tool_result_sent(tmp, call_id):
    """The text of the tool result for `call_id` in the last request the model got."""
    last = json.loads((Path(tmp) / "log.jsonl").read_text().splitlines()[-1])
    body = last.get("body", last)
    for m in body["messages"]:
        if m.get("role") == "tool" and m.get("tool_call_id") == call_id:
            c = m["content"]
            return c if isinstance(c, str) else "".join(p.get("text", "") for p in c)
    raise AssertionError(f"no result for {call_id} in {body}")


def setup(name):
    tmp = Path(tempfile.mkdtemp(prefix=f"pi-acp-{name}-"))
    # Removed when this process ends (ts_flow.mjs, which leaves with os._exit, removes it itself).
    atexit.register(shutil.rmtree, tmp, True)
    # The agent's temp folder (a cut command's full output, sandbox folders) inside it.
    (tmp / "tmp").mkdir()
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
    t = str(tmp / "tmp")
    env = dict(os.environ, PI_CODING_AGENT_DIR=str(agent), ANTHROPIC_API_KEY="", OPENAI_API_KEY="",
               TMPDIR=t, TMP=t, TEMP=t)
    return tmp, ws, env, mock
