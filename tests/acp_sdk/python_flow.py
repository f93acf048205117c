#!/usr/bin/env python3
"""The official Python ACP SDK (agent-client-protocol 0.12.1) drives `pi-lsp acp`: new →
prompt with a tool call and a permission → cancel → list → load in a new process → continue.
Its pydantic models validate every message we send. Usage: python_flow.py PI_LSP_BIN"""
import asyncio
import sys

from acp import PROTOCOL_VERSION, text_block
from acp.schema import AllowedOutcome, ClientCapabilities, RequestPermissionResponse
from acp.stdio import spawn_agent_process

from common import setup

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
        print("python SDK flow: ok")
    finally:
        mock.kill()


asyncio.run(main())
