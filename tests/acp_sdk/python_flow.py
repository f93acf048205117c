#!/usr/bin/env python3
"""The official Python ACP SDK (agent-client-protocol 0.12.1) drives `pi-lsp acp`: new →
prompt with a tool call and a permission → cancel → list → load in a new process → continue;
then a client that advertises `terminal` runs the agent's bash call in its own terminal
(`terminal/create` … `terminal/release`, the command really run here) and the output reaches
the model. Its pydantic models validate every message we send. Usage: python_flow.py PI_LSP_BIN"""
import asyncio
import os
import sys

from acp import PROTOCOL_VERSION, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    CreateTerminalResponse,
    KillTerminalResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    TerminalExitStatus,
    TerminalOutputResponse,
    WaitForTerminalExitResponse,
)
from acp.stdio import spawn_agent_process

from common import TERMINAL_COMMAND, TERMINAL_RESULT, setup, tool_result_sent

BIN = sys.argv[1]


class Client:
    def __init__(self):
        self.updates = []
        self.asked = []

    async def request_permission(self, session_id, tool_call, options, **kw):
        self.asked.append((tool_call, [(o.option_id, o.kind) for o in options]))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id="allow_once"))

    async def session_update(self, session_id, update, **kw):
        self.updates.append(update)

    def text(self, kind):
        return "".join(u.content.text for u in self.updates if u.session_update == kind)

    async def ext_method(self, method, params):
        raise NotImplementedError(method)

    async def ext_notification(self, method, params):
        pass


class TerminalClient(Client):
    """A client whose terminals really run the command line they are given (stdin closed,
    stdout and stderr in one buffer, its environment plus the request's `env`, in `cwd`)."""

    def __init__(self):
        super().__init__()
        self.calls = []
        self.terms = {}

    async def create_terminal(self, session_id, command, args=None, env=None, cwd=None, output_byte_limit=None, **kw):
        self.calls.append(("create", command, list(args or [])))
        proc = await asyncio.create_subprocess_exec(
            command, *(args or []), cwd=cwd, env=dict(os.environ, **{e.name: e.value for e in env or []}),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out = bytearray()

        async def read():
            while chunk := await proc.stdout.read(65536):
                out.extend(chunk)
            await proc.wait()

        tid = f"term-{len(self.terms) + 1}"
        self.terms[tid] = (proc, out, asyncio.create_task(read()))
        return CreateTerminalResponse(terminal_id=tid)

    def _status(self, proc):
        code = proc.returncode
        return (code, None) if code >= 0 else (None, f"signal {-code}")

    async def terminal_output(self, session_id, terminal_id, **kw):
        self.calls.append(("output", terminal_id))
        proc, out, reader = self.terms[terminal_id]
        status = None
        if reader.done():
            code, signal = self._status(proc)
            status = TerminalExitStatus(exit_code=code, signal=signal)
        return TerminalOutputResponse(output=out.decode("utf-8", "replace"), truncated=False, exit_status=status)

    async def wait_for_terminal_exit(self, session_id, terminal_id, **kw):
        self.calls.append(("wait_for_exit", terminal_id))
        proc, _, reader = self.terms[terminal_id]
        await reader
        code, signal = self._status(proc)
        return WaitForTerminalExitResponse(exit_code=code, signal=signal)

    async def kill_terminal(self, session_id, terminal_id, **kw):
        self.calls.append(("kill", terminal_id))
        self.terms[terminal_id][0].kill()
        return KillTerminalResponse()

    async def release_terminal(self, session_id, terminal_id, **kw):
        self.calls.append(("release", terminal_id))
        proc, _, reader = self.terms.pop(terminal_id)
        if not reader.done():
            proc.kill()
        return ReleaseTerminalResponse()


async def terminal_flow(env, ws, tmp):
    c = TerminalClient()
    async with spawn_agent_process(c, BIN, "acp", "--model", "mock/mock-1", env=env, cwd=str(ws)) as (conn, _):
        await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities(terminal=True))
        sid = (await conn.new_session(cwd=str(ws), mcp_servers=[])).session_id
        r = await conn.prompt(session_id=sid, prompt=[text_block("use the terminal")])
        assert r.stop_reason == "end_turn", r
        # The command ran in our terminal, through pi-lsp's own sandbox launcher.
        creates = [x for x in c.calls if x[0] == "create"]
        assert len(creates) == 1, c.calls
        _, command, args = creates[0]
        assert os.path.samefile(command, BIN) and args[0] == "sandbox-exec" and args[-1] == TERMINAL_COMMAND, creates
        kinds = [x[0] for x in c.calls]
        assert "wait_for_exit" in kinds and kinds[-1] == "release" and "kill" not in kinds, kinds
        assert c.terms == {}, "every terminal released"
        # The tool call shows the terminal, then fails with the command's exit code.
        updates = [u for u in c.updates if u.session_update == "tool_call_update" and u.tool_call_id == "call_t"]
        assert updates[0].status == "in_progress", updates
        shown = [[(b.type, b.terminal_id) for b in u.content] for u in updates[1:]]
        assert shown == [[("terminal", "term-1")]] * 2, updates
        last = updates[-1]
        assert last.status == "failed", last
        assert last.raw_output == {"content": TERMINAL_RESULT, "isError": True, "details": {"exitCode": 3}}, last
        assert c.text("agent_message_chunk") == "Saw it.", c.text("agent_message_chunk")
    # The model got the terminal's output, as for a command run by the agent itself.
    sent = tool_result_sent(tmp, "call_t")
    assert sent == TERMINAL_RESULT, repr(sent)


async def main():
    tmp, ws, env, mock = setup("py")
    try:
        c = Client()
        async with spawn_agent_process(c, BIN, "acp", "--model", "mock/mock-1", env=env, cwd=str(ws)) as (conn, _):
            init = await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities())
            assert init.protocol_version == 1, init
            assert init.agent_capabilities.load_session is True
            new = await conn.new_session(cwd=str(ws), mcp_servers=[])
            sid = new.session_id
            r = await conn.prompt(session_id=sid, prompt=[text_block("run it")])
            assert r.stop_reason == "end_turn", r
            call, opts = c.asked[0]
            assert call.tool_call_id == "call_1" and call.kind == "execute", call
            assert [k for _, k in opts] == ["allow_once", "allow_always", "reject_once", "reject_always"], opts
            assert c.text("agent_message_chunk") == "Let me look.It printed hi.", c.text("agent_message_chunk")
            statuses = [u.status for u in c.updates if u.session_update == "tool_call_update"]
            assert statuses[0] == "in_progress" and statuses[-1] == "completed", statuses
            # Cancel the long answer once it streams.
            task = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block("long")]))
            while "xxxx" not in c.text("agent_message_chunk"):
                await asyncio.sleep(0.02)
            await conn.cancel(session_id=sid)
            r = await task
            assert r.stop_reason == "cancelled", r
            listed = await conn.list_sessions(cwd=str(ws))
            assert [s.session_id for s in listed.sessions] == [sid], listed
            assert listed.sessions[0].title == "run it", listed
            await conn.close_session(session_id=sid)
        c2 = Client()
        async with spawn_agent_process(c2, BIN, "acp", "--model", "mock/mock-1", env=env, cwd=str(ws)) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities())
            await conn.load_session(session_id=sid, cwd=str(ws), mcp_servers=[])
            assert c2.text("user_message_chunk") == "run itlong", c2.text("user_message_chunk")
            assert c2.text("agent_message_chunk").startswith("Let me look.It printed hi.xxxx")
            r = await conn.prompt(session_id=sid, prompt=[text_block("go on")])
            assert r.stop_reason == "end_turn", r
            assert c2.text("agent_message_chunk").endswith("Continued.")
        await terminal_flow(env, ws, tmp)
        print("python SDK flow: ok (with a client terminal)")
    finally:
        mock.kill()


asyncio.run(main())
