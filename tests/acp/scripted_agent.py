#!/usr/bin/env python3
"""A tiny scripted ACP v1 agent (stdio, newline-delimited JSON-RPC) for awf's `provider: acp`
tests (tests/tests/acp_provider.rs and the unit tests of infrastructure/acp/src/client).

What a prompt does is chosen by words in its text:
  REFUSE          a message chunk, then stopReason "refusal"
  MAXTOK          a message chunk, then stopReason "max_tokens"
  TOKERR          a message chunk, then a -32603 error about the output token maximum (as
                  claude-agent-acp answers when claude runs out of output tokens)
  MAXTURNS        stopReason "max_turn_requests"
  PERMIT:<kind>   a tool_call of that kind, then session/request_permission with its options in
                  the order reject_always, allow_always, reject_once, allow_once (so picking by
                  position is wrong); the answer is reported as "permission: <optionId>"
                  (with ABORT a rejection ends the turn "cancelled", as codex-acp does)
  HANG            a message chunk, then waits for session/cancel and answers "cancelled"
                  (with env AGENT_IGNORE_CANCEL=1 it never answers)
  FS              asks the client fs/read_text_file and reports the JSON-RPC error code
  THINK           a thought chunk before the answer
  NOTICE          a notice, a chunk with a messageId, one without, a notice (the notices as
                  `notice` updates when the client advertised `session.notices`, else as
                  message chunks without an id, as the real adapters do)
  MIXED:<k>       three chunks "part one. ", "part two. ", "part three."; only chunk k (0-2)
                  carries a messageId (k = -1: none)
  TOOLSTREAM      a tool_call with an empty rawInput, its input in a tool_call_update, then
                  completed (as claude-agent-acp reports a call whose input streams)
  EXIT            the process closes stdout, then says why on stderr and exits
  otherwise       "echo: <prompt text>" and "end_turn"
Blocks other than text in a prompt are echoed first, as one chunk "blocks: <JSON list>" (each
block as received).

$AGENT_AUTH_METHODS (comma-separated ids) are the authMethods it advertises; with
$AGENT_REQUIRE_AUTH=1 session/new answers -32000 (auth required) until an `authenticate` with
one of them succeeded ($AGENT_AUTH_FAIL=1: every authenticate fails -32000).

$AGENT_PROMPT_CAPS (comma-separated: image, audio, embeddedContext) sets the
promptCapabilities it advertises (none by default).

Every frame received is appended to $AGENT_LOG (JSON lines) when set; each line carries the
agent's pid. $AGENT_PROTO overrides the protocol version it answers; with
$AGENT_IGNORE_EOF=1 it does not exit when its stdin ends.
"""
import json
import os
import queue
import sys
import threading
import time

LOG = os.environ.get("AGENT_LOG")
PID = os.getpid()
inbox = queue.Queue()
next_id = [1000]
sessions = {}


def log(frame):
    if LOG:
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps({"pid": PID, "frame": frame}) + "\n")


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def reader():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            frame = json.loads(line)
        except ValueError:
            continue
        log(frame)
        inbox.put(frame)
    if os.environ.get("AGENT_IGNORE_EOF") == "1":
        # Stands for an agent that does not notice its client went away.
        while True:
            time.sleep(3600)
    inbox.put(None)


def update(sid, upd):
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": upd}})


def chunk(sid, text, kind="agent_message_chunk", message_id=None):
    upd = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
    if message_id:
        upd["messageId"] = message_id
    update(sid, upd)


def notice(sid, title, description):
    if client_caps.get("session", {}).get("notices") is not None:
        update(sid, {"sessionUpdate": "notice", "severity": "warning", "title": title,
                     "description": description})
    else:
        chunk(sid, "**%s:** %s" % (title, description))


cancelled = set()
client_caps = {}


def wait_response(rid):
    """Frames until the response to our request `rid`; a session/cancel on the way is noted."""
    while True:
        f = inbox.get()
        if f is None:
            sys.exit(0)
        if f.get("id") == rid and "method" not in f:
            return f
        if f.get("method") == "session/cancel":
            cancelled.add(f["params"]["sessionId"])


def ask(method, params):
    next_id[0] += 1
    rid = next_id[0]
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    return wait_response(rid)


def prompt(rid, params):
    sid = params["sessionId"]
    text = "".join(b.get("text", "") for b in params.get("prompt", []) if b.get("type") == "text")
    sessions.setdefault(sid, []).append(text)
    others = [b for b in params.get("prompt", []) if b.get("type") != "text"]
    if others:
        chunk(sid, "blocks: %s\n" % json.dumps(others))
    stop = "end_turn"
    if "EXIT" in text:
        # stdout ends first and the reason reaches stderr later, as with an agent whose
        # exit handler logs: the error must still carry it.
        sys.stdout.flush()
        os.close(1)
        time.sleep(0.2)
        sys.stderr.write("scripted agent: exiting mid-turn as asked\n")
        sys.stderr.flush()
        os._exit(3)
    if "TOKERR" in text:
        chunk(sid, "long answ")
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603,
              "message": "Internal error: API Error: Claude's response exceeded the 128000 output token maximum."}})
        return
    if "THINK" in text:
        chunk(sid, "let me think", "agent_thought_chunk")
    if "REFUSE" in text:
        chunk(sid, "I started, but ")
        stop = "refusal"
    elif "MAXTOK" in text:
        chunk(sid, "truncated answ")
        stop = "max_tokens"
    elif "MAXTURNS" in text:
        stop = "max_turn_requests"
    elif "PERMIT:" in text:
        kind = text.split("PERMIT:", 1)[1].split()[0]
        call = {"toolCallId": "call-1", "title": "Touch marker", "kind": kind, "status": "pending",
                "rawInput": {"path": "marker.txt"}}
        update(sid, dict(call, sessionUpdate="tool_call"))
        options = [
            {"optionId": "no-ever", "name": "Never", "kind": "reject_always"},
            {"optionId": "yes-ever", "name": "Always", "kind": "allow_always"},
            {"optionId": "no", "name": "No", "kind": "reject_once"},
            {"optionId": "yes", "name": "Yes", "kind": "allow_once"},
        ]
        r = ask("session/request_permission", {"sessionId": sid, "toolCall": {"toolCallId": "call-1"}, "options": options})
        outcome = r.get("result", {}).get("outcome", {})
        chosen = outcome.get("optionId") if outcome.get("outcome") == "selected" else "cancelled"
        allowed = chosen in ("yes", "yes-ever")
        update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "call-1",
                     "status": "completed" if allowed else "failed",
                     "content": [{"type": "content", "content": {"type": "text", "text": "touched" if allowed else "rejected"}}]})
        chunk(sid, "permission: %s" % chosen)
        if "ABORT" in text and not allowed:
            stop = "cancelled"
    elif "HANG" in text:
        chunk(sid, "working")
        while sid not in cancelled:
            f = inbox.get()
            if f is None:
                sys.exit(0)
            if f.get("method") == "session/cancel":
                cancelled.add(f["params"]["sessionId"])
        if os.environ.get("AGENT_IGNORE_CANCEL") == "1":
            while inbox.get() is not None:
                pass
            sys.exit(0)
        stop = "cancelled"
    elif "TOOLSTREAM" in text:
        # As claude-agent-acp reports a tool call: first with an empty rawInput (the model
        # started it), then its input in a tool_call_update, then its end.
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": "call-s", "title": "Terminal",
                     "kind": "execute", "status": "pending", "rawInput": {}})
        update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "call-s",
                     "title": "`echo streamed-args`",
                     "rawInput": {"command": "echo streamed-args", "description": "say it"}})
        update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "call-s", "status": "completed",
                     "content": [{"type": "content", "content": {"type": "text", "text": "streamed-args"}}]})
        chunk(sid, "ran it")
    elif "NOTICE" in text:
        notice(sid, "Heads up", "a notice before")
        chunk(sid, "the answer", message_id="m1")
        chunk(sid, ", and more")
        notice(sid, "Warning", "an adapter notice")
    elif "MIXED:" in text:
        k = int(text.split("MIXED:", 1)[1].split()[0])
        for i, part in enumerate(["part one. ", "part two. ", "part three."]):
            chunk(sid, part, message_id="m%d" % i if i == k else None)
    elif "FS" in text:
        r = ask("fs/read_text_file", {"sessionId": sid, "path": "/etc/hostname"})
        chunk(sid, "fs: %s" % r.get("error", {}).get("code"))
    else:
        chunk(sid, "echo: ")
        chunk(sid, text)
    send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": stop}})


authed = [False]


def auth_methods():
    return [m.strip() for m in os.environ.get("AGENT_AUTH_METHODS", "").split(",") if m.strip()]


def prompt_caps():
    named = [c.strip() for c in os.environ.get("AGENT_PROMPT_CAPS", "").split(",") if c.strip()]
    return {c: True for c in named}


def main():
    threading.Thread(target=reader, daemon=True).start()
    n = 0
    while True:
        f = inbox.get()
        if f is None:
            return
        m, rid, p = f.get("method"), f.get("id"), f.get("params") or {}
        if m == "initialize":
            client_caps.update(p.get("clientCapabilities") or {})
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": int(os.environ.get("AGENT_PROTO", "1")),
                "agentCapabilities": {"loadSession": False, "promptCapabilities": prompt_caps(), "mcpCapabilities": {},
                                      "sessionCapabilities": {"close": {}}},
                "authMethods": [{"id": m, "name": "Method " + m, "description": None}
                                for m in auth_methods()]}})
        elif m == "authenticate":
            if os.environ.get("AGENT_AUTH_FAIL") == "1":
                send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "bad credentials"}})
            elif p.get("methodId") in auth_methods():
                authed[0] = True
                send({"jsonrpc": "2.0", "id": rid, "result": {}})
            else:
                send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": "unknown method"}})
        elif m == "session/new" and os.environ.get("AGENT_REQUIRE_AUTH") == "1" and not authed[0]:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "Authentication required"}})
        elif m == "session/new":
            n += 1
            sid = "sess-%d-%d" % (PID, n)
            send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": sid, "modes": {
                "currentModeId": "default",
                "availableModes": [{"id": "default", "name": "Default"}, {"id": "plan", "name": "Plan"}]}}})
        elif m == "session/close":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif m == "session/set_mode":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        elif m == "session/prompt":
            prompt(rid, p)
        elif m == "session/cancel":
            cancelled.add(p.get("sessionId"))
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}})


if __name__ == "__main__":
    main()
