#!/usr/bin/env python3
"""Runs acplint 0.1.0 against `pi-lsp acp` on the loopback scripted model and prints its score.
acplint predates parts of ACP v1: the checks it fails on a correct v1 agent are listed in
KNOWN (each explained in docs/acp.md, "acplint"); any other failure fails this script.
Usage: acplint_run.py PI_LSP_BIN ACPLINT_BIN"""
import json
import subprocess
import sys
from pathlib import Path

import common

BIN, ACPLINT = sys.argv[1], sys.argv[2]
common.SCRIPT["steps"] = [{"text": "Hello from the scripted model."}] * 200

# acplint's checks that a correct ACP v1 agent fails (docs/acp.md explains each).
KNOWN = set(json.loads((Path(__file__).parent / "acplint_known.json").read_text()))

tmp, ws, env, mock = common.setup("acplint")
try:
    out = tmp / "acplint.json"
    p = subprocess.run(
        [ACPLINT, "--agent", BIN, "--agent-args", "acp --model mock/mock-1", "--cwd", str(ws),
         "--output", "json", "--output-file", str(out), "--timeout", "20"],
        env=env, capture_output=True, text=True, timeout=900)
    report = json.loads(out.read_text())
    if len(sys.argv) > 3:
        Path(sys.argv[3]).write_text(json.dumps(report, indent=1))
    results = report["results"]
    passed = sum(r["status"] == "PASS" for r in results)
    print(f"acplint 0.1.0: {passed}/{len(results)} checks pass; conformance level: {report.get('conformance_level')}")
    unexpected = []
    for r in results:
        if r["status"] != "PASS":
            tag = "known" if r["name"] in KNOWN else "UNEXPECTED"
            print(f"  {r['status']} [{tag}] {r['category']}/{r['name']}: {r['message'][:200]}")
            if r["name"] not in KNOWN:
                unexpected.append(r["name"])
    if unexpected:
        sys.exit(f"acplint: failures not explained in docs/acp.md: {unexpected}")
finally:
    mock.kill()
