"""Second ACP client for the end-to-end tests (tests/tests/acp_sdk.rs): the Python ACP SDK
(PyPI `agent-client-protocol`, pinned by scripts/install-peers.sh into .cache/py) drives
`awf acp-serve` through one scenario. Every message the server sends is parsed by the SDK's
pydantic models and also validated with `jsonschema` against the ACP v1 JSON schema the pinned
TypeScript SDK ships. Prints one JSON verdict on stdout:

  {"scenario", "ok", "checks": [{"name", "ok", "detail"}], "invalid": [...], "received": [...]}

Usage: python3 py_client.py --scenario NAME --schema SCHEMA.json -- AWF ARGS...
Scenarios: initialize, echo, approval, cancel, secret. Reference: shared/spec/acp.md §5.
"""
import asyncio
import json
import os
import sys
import time

import jsonschema
from acp import spawn_agent_process, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    Implementation,
    RequestPermissionResponse,
)

argv = sys.argv[1:]
dash = argv.index("--") if "--" in argv else len(argv)
opts, server = argv[:dash], argv[dash + 1:]


def opt(name):
    return opts[opts.index(name) + 1] if name in opts else None


SCHEMA = json.load(open(opt("--schema")))
AGENT_MESSAGE = jsonschema.Draft202012Validator({**SCHEMA, "anyOf": [SCHEMA["anyOf"][0]]})

checks, invalid, received = [], [], []


def check(name, ok, detail=""):
    checks.append({"name": name, "ok": bool(ok), "detail": detail if isinstance(detail, str) else json.dumps(detail, default=str)})


def observe(event):
    if getattr(event.direction, "value", event.direction) != "incoming":
        return
    msg = event.message
    received.append(msg)
    errs = [e.message[:300] for e in AGENT_MESSAGE.iter_errors(msg)]
    if errs:
        invalid.append({"message": json.dumps(msg)[:600], "errors": errs[:5]})


class Editor:
    def __init__(self):
        self.updates = {}
        self.permission = "allow_once"
        self.asked = []
        self.never_answer = False

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.asked.append([o.kind for o in options])
        if self.never_answer:
            await asyncio.Event().wait()
        for o in options:
            if o.kind == self.permission:
                return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=o.option_id))
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    async def session_update(self, session_id, update, **kwargs):
        self.updates.setdefault(session_id, []).append(update)

    async def write_text_file(self, *a, **k):
        raise NotImplementedError

    async def read_text_file(self, *a, **k):
        raise NotImplementedError

    def text(self, sid):
        out = []
        for u in self.updates.get(sid, []):
            c = getattr(u, "content", None)
            if c is not None and getattr(c, "text", None):
                out.append(c.text)
            for item in c if isinstance(c, list) else []:
                inner = getattr(item, "content", None)
                if inner is not None and getattr(inner, "text", None):
                    out.append(inner.text)
        return "\n".join(out)


async def main():
    editor = Editor()
    scenario = opt("--scenario")
    async with spawn_agent_process(editor, server[0], *server[1:], cwd=os.getcwd(), env=dict(os.environ), observers=[observe]) as (conn, proc):
        init = await asyncio.wait_for(conn.initialize(
            protocol_version=1,
            client_capabilities=ClientCapabilities(),
            client_info=Implementation(name="awf-py-test", version="1.0.0"),
        ), 30)
        check("protocolVersion 1", init.protocol_version == 1, str(init.protocol_version))
        if scenario == "initialize":
            check("agentInfo awf", init.agent_info is not None and init.agent_info.name == "awf", str(init.agent_info))
            return
        sess = await asyncio.wait_for(conn.new_session(cwd=os.getcwd(), mcp_servers=[]), 30)
        sid = sess.session_id
        if scenario == "echo":
            r = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text_block("/input-echo message=python-sdk")]), 60)
            check("end_turn", r.stop_reason == "end_turn", r.stop_reason)
            check("output reached the client", "echo: python-sdk" in editor.text(sid), editor.text(sid))
            kinds = [getattr(u, "session_update", "") for u in editor.updates.get(sid, [])]
            check("tool_call then tool_call_update", "tool_call" in kinds and "tool_call_update" in kinds, kinds)
            check("available_commands_update arrived", "available_commands_update" in kinds, kinds)
        elif scenario == "approval":
            editor.permission = "allow_once"
            r = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text_block("/approval")]), 60)
            check("asked once with four kinds", len(editor.asked) == 1 and sorted(editor.asked[0]) == ["allow_always", "allow_once", "reject_always", "reject_once"], editor.asked)
            check("end_turn", r.stop_reason == "end_turn", r.stop_reason)
            check("the step ran", "deployed" in editor.text(sid), editor.text(sid))
            editor.permission = "reject_once"
            r = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text_block("/approval")]), 60)
            check("rejected: the rejected route ran", "rejected-route" in editor.text(sid), editor.text(sid))
        elif scenario == "cancel":
            task = asyncio.ensure_future(conn.prompt(session_id=sid, prompt=[text_block("/long-running")]))
            t0 = time.monotonic()
            while not any(getattr(u, "status", None) == "in_progress" for u in editor.updates.get(sid, [])):
                if time.monotonic() - t0 > 30:
                    raise TimeoutError("no in_progress update within 30 s")
                await asyncio.sleep(0.05)
            t = time.monotonic()
            await conn.cancel(session_id=sid)
            r = await asyncio.wait_for(task, 30)
            took = time.monotonic() - t
            check("cancelled", r.stop_reason == "cancelled", r.stop_reason)
            check("within 6 s", took < 6, f"{took:.2f} s")
        elif scenario == "secret":
            r = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text_block("/secret")]), 60)
            check("end_turn", r.stop_reason == "end_turn", r.stop_reason)
            check("masked output arrived", "***" in editor.text(sid), editor.text(sid))
        else:
            check("known scenario", False, scenario)


failure = None
try:
    asyncio.run(asyncio.wait_for(main(), 180))
except BaseException as e:  # noqa: BLE001 - the verdict reports whatever stopped the scenario
    failure = f"{type(e).__name__}: {e}"
if failure:
    check("scenario ran to its end", False, failure)
print(json.dumps({
    "scenario": opt("--scenario"),
    "ok": not failure and not invalid and all(c["ok"] for c in checks),
    "checks": checks,
    "invalid": invalid,
    "received": [json.dumps(m)[:20000] for m in received],
}))
