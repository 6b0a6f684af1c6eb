#!/usr/bin/env python3
"""Writes interfaces/cli/symbol-order.txt, the linker's symbol ordering file (issues 11, 12: RSS).

`awf mcp-serve` and `awf acp-serve` run a small part of the executable's code, but that part
was spread over its whole `.text`: each page fault in the code maps the 64 KiB around it (the
kernel's fault-around), so a session mapped 8 to 10 MB of code. This script records which
functions typical sessions run, and in which order, and writes their symbol names so that the
linker (`-Wl,--symbol-ordering-file`, wired in interfaces/cli/build.rs) puts them next to each
other at the start of `.text`.

How:
  1. an unstripped release executable, whose symbol names are those of the release build
     (`cargo rustc --release -p awf --bin awf -- -C strip=none`: arguments given to `cargo
     rustc` do not enter the `-C metadata` hash that the symbol names carry, the profile
     does; see build.rs), or `--awf PATH`;
  2. each scenario below runs under `valgrind --tool=lackey --trace-superblocks=yes`, which
     prints the address of every block of code executed; the first use of each function of
     the executable is kept, in order;
  3. functions are grouped by the set of scenarios that ran them and the groups laid out so
     that the code of each server is contiguous (the functions both servers run in the
     middle, those of `mcp-serve` alone before them, those of `acp-serve` alone after them;
     see `layout`), first use deciding the order inside a group.

Scenarios (each in a temp dir, with a temp HOME): `awf --version`; an `mcp-serve` session
(initialize, tools/list, Read, a paged Read, Write, Edit, Glob, Grep, Bash); an `acp-serve`
session (initialize, session/new, prompts running /trivial and /hello, a cancelled
/long-running); `awf run` of two workflows; `awf list` and `awf validate`.

Regenerate after a change of the toolchain, of Cargo.lock or of the release profile (every
symbol name changes), or when the servers' code paths changed much. A stale file does not
break the build: names the linker does not find are skipped (`--no-warn-symbol-ordering`).
`--check PATH` prints how many of the file's names an unstripped executable still defines;
`--stale` says whether the file was generated for this tree's Cargo.lock, Cargo.toml files and
toolchain (its header keeps their fingerprint; benches/mcp.py and benches/acp.py print it with
`--smaps`, beside the RSS it explains).

Needs valgrind 3.22 or later (see VALGRIND below) and `nm`.

Usage: python3 scripts/symbol-order.py [--awf target/release/awf] [--out FILE] [--check BIN]
"""
import argparse, bisect, hashlib, json, os, select, shutil, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "interfaces", "cli", "symbol-order.txt")
# Scenario names, in the order their bits are laid out (see `layout`).
SCENARIOS = ["mcp", "acp", "run", "version", "cli"]
# Valgrind 3.19 (Debian 12) answers `openat2` with ENOSYS, and mcp-serve's file tools refuse
# to run unconfined: use 3.22 or later (Debian 13 has 3.24; its lackey tool alone is enough:
# VALGRIND_LIB=<dir of lackey-amd64-linux>).
VALGRIND = os.environ.get("VALGRIND", "valgrind")

WORKFLOWS = {
    "trivial": "name: trivial\ndescription: Does nothing\nstates:\n  initial: run\n  run:\n    type: step\n"
               "    command: \"true\"\n    on_success: done\n  done:\n    type: terminal\n",
    "long-running": "name: long-running\ndescription: Sleeps\nstates:\n  initial: wait\n  wait:\n"
                    "    type: step\n    command: sleep 30\n    on_success: done\n  done:\n    type: terminal\n",
}


def symbols(binary):
    """Sorted (start, end, [names]) of the executable's functions, from its symbol table."""
    out = subprocess.run(["nm", "--defined-only", "-n", "-S", binary], capture_output=True, text=True,
                         check=True).stdout
    by_addr = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 4 or parts[2] not in "tTwW":
            continue
        start, size = int(parts[0], 16), int(parts[1], 16)
        if size == 0:
            continue
        end, names = by_addr.get(start, (start + size, []))
        names.append(parts[3])
        by_addr[start] = (max(end, start + size), names)
    if not by_addr:
        sys.exit(f"{binary} has no function symbols: it is stripped (see --awf)")
    return sorted((s, e, n) for s, (e, n) in by_addr.items())


class Trace:
    """One process under lackey: the executable's functions in order of first use."""

    def __init__(self, argv, cwd, env, funcs):
        self.funcs, self.starts = funcs, [f[0] for f in funcs]
        r, w = os.pipe()
        self.p = subprocess.Popen(
            [VALGRIND, "--tool=lackey", "--basic-counts=no", "--trace-superblocks=yes",
             f"--log-fd={w}"] + argv,
            cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            pass_fds=[w])
        os.close(w)
        self.order, self.seen_blocks, self.seen_funcs = [], set(), set()
        self.reader = threading.Thread(target=self._read, args=(r,), daemon=True)
        self.reader.start()
        self.buf, self.id = b"", 0

    def _read(self, fd):
        with os.fdopen(fd, "rb", buffering=1 << 20) as f:
            for line in f:
                if not line.startswith(b"SB "):
                    continue
                addr = int(line[3:], 16)
                if addr in self.seen_blocks:
                    continue
                self.seen_blocks.add(addr)
                i = bisect.bisect_right(self.starts, addr) - 1
                if i >= 0 and addr < self.funcs[i][1] and i not in self.seen_funcs:
                    self.seen_funcs.add(i)
                    self.order.append(i)

    # Newline-delimited JSON-RPC over the process's stdin/stdout (MCP and ACP alike).
    def send(self, msg):
        self.p.stdin.write(json.dumps(msg).encode() + b"\n")
        self.p.stdin.flush()

    def recv(self, timeout=120):
        end = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.p.stdout], [], [], left)[0]:
                raise TimeoutError("no frame from the server")
            chunk = os.read(self.p.stdout.fileno(), 1 << 16)
            if not chunk:
                raise EOFError("the server closed stdout")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, method, params):
        self.id += 1
        self.send({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        return self.id

    def wait_for(self, pred, timeout=120):
        end = time.monotonic() + timeout
        while True:
            m = self.recv(max(0.1, end - time.monotonic()))
            if m.get("method") == "session/request_permission" and "id" in m:
                self.send({"jsonrpc": "2.0", "id": m["id"], "result": {"outcome": {"outcome": "cancelled"}}})
            if pred(m):
                return m

    def call(self, method, params):
        rid = self.request(method, params)
        m = self.wait_for(lambda m: m.get("id") == rid and "method" not in m)
        if "error" in m:
            raise RuntimeError(f"{method}: {m['error']}")
        return m["result"]

    def finish(self, timeout=120):
        """Closes stdin, waits for the exit and the end of the trace; the function order."""
        if self.p.stdin and not self.p.stdin.closed:
            self.p.stdin.close()
        try:
            self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.reader.join(timeout)
        return self.order


def run_cmd(awf, args, d, env, funcs):
    t = Trace([awf] + args, d, env, funcs)
    t.p.stdin.close()
    return t.finish()


def mcp_session(awf, d, env, funcs):
    cfg = os.path.join(d, "mcp.json")
    with open(cfg, "w") as f:
        json.dump({"root_dir": d}, f)
    small, big = os.path.join(d, "small.txt"), os.path.join(d, "big.txt")
    with open(small, "w") as f:
        f.writelines(f"line {i} of a small file\n" for i in range(50))
    with open(big, "w") as f:
        f.writelines(f"{i:06d} " + "x" * 90 + "\n" for i in range(11000))
    for i in range(40):
        sub = os.path.join(d, "tree", f"d{i % 4}")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"f{i}.{'txt' if i % 3 else 'md'}"), "w") as f:
            f.write(f"file {i}\n" + ("needle here\n" if i % 5 == 0 else "hay\n") * 3)
    t = Trace([awf, "mcp-serve", "--config", cfg], d, env, funcs)
    t.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                          "clientInfo": {"name": "symbol-order", "version": "1"}})
    t.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    t.call("tools/list", {})
    calls = [("Read", {"path": small}), ("Read", {"path": small, "limit": 2000}),
             ("Read", {"path": big, "limit": 600}), ("Read", {"path": big, "offset": 5000, "limit": 600}),
             ("Write", {"path": os.path.join(d, "new.txt"), "content": "one\ntwo\n"}),
             ("Edit", {"path": os.path.join(d, "new.txt"), "old": "two", "new": "three"}),
             ("Glob", {"pattern": "**/*.txt"}), ("Glob", {"pattern": "**/*.txt", "cwd": os.path.join(d, "tree")}),
             ("Grep", {"pattern": "needle", "path": os.path.join(d, "tree"), "output_mode": "content"}),
             ("Grep", {"pattern": "needle", "path": os.path.join(d, "tree")}),
             ("Bash", {"command": "echo hello; ls"}),
             ("Read", {"path": os.path.join(d, "missing.txt")})]
    for name, args in calls * 2:
        r = t.call("tools/call", {"name": name, "arguments": args})
        if "openat2 is unavailable" in json.dumps(r):
            sys.exit("this valgrind has no openat2 (3.22 or later is needed): see VALGRIND above")
    return t.finish()


def acp_session(awf, d, env, funcs):
    t = Trace([awf, "acp-serve"], d, env, funcs)
    t.call("initialize", {"protocolVersion": 1, "clientCapabilities": {
        "fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}})
    sid = t.call("session/new", {"cwd": d, "mcpServers": []})["sessionId"]
    for text in ["/trivial", "/hello name=Ada", "/trivial"]:
        t.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
    rid = t.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "/long-running"}]})
    t.wait_for(lambda m: m.get("method") == "session/update"
               and m["params"]["update"].get("status") == "in_progress")
    t.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    t.wait_for(lambda m: m.get("id") == rid and "method" not in m)
    return t.finish()


def layout(firsts, sigs):
    """Function indices in link order: groups by the set of scenarios that ran them.

    A group's key is its membership bits in SCENARIOS order, and groups follow the reflected
    Gray code of that key: `mcp` alone, then `mcp` with `acp`, then `acp` alone, so that each
    server's code is one contiguous run; the later bits (run, version, cli) order the groups
    inside those runs the same way. Inside a group, first use across the scenarios decides."""
    def gray_rank(bits):
        # Inverse of g = b ^ (b >> 1): the position of code `bits` in the Gray sequence.
        b, shift = bits, 1
        while (bits >> shift) > 0:
            b ^= bits >> shift
            shift += 1
        return b

    n = len(SCENARIOS)

    def key(i):
        bits = sum(1 << (n - 1 - k) for k, s in enumerate(SCENARIOS) if s in sigs[i])
        # Gray order starting from the top bit set (mcp alone first): rank of the code, with
        # the mcp bit flipped so that mcp-only groups come before the shared ones.
        return (gray_rank(bits ^ (1 << (n - 1))), firsts[i])

    return sorted(firsts, key=key)


def build_unstripped():
    print("building an unstripped release executable (cargo rustc --release ... -C strip=none)",
          file=sys.stderr)
    subprocess.run(["cargo", "rustc", "--release", "-p", "awf", "--bin", "awf", "--", "-C", "strip=none"],
                   cwd=ROOT, check=True)
    return os.path.join(ROOT, "target", "release", "awf")


def fingerprint():
    """What the names' hashes depend on, as one hex digest: Cargo.lock, every Cargo.toml of the
    workspace (dependencies, features, the release profile) and the toolchain (`rustc -vV`).
    A change of any of them can change every symbol name (a stale file is not an error, but
    the names the linker does not find lose their place: 1,021 of 2,953 names after one new
    dependency of awf-exec, and `mcp-serve`'s peak RSS went from 7.6 to 11.6 MB)."""
    h = hashlib.sha256()
    tomls = subprocess.run(["git", "ls-files", "Cargo.lock", "Cargo.toml", "*/Cargo.toml"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for rel in sorted(tomls):
        h.update(rel.encode() + b"\0")
        with open(os.path.join(ROOT, rel), "rb") as f:
            h.update(f.read() + b"\0")
    h.update(subprocess.run(["rustc", "-vV"], cwd=ROOT, capture_output=True, check=True).stdout)
    return h.hexdigest()[:16]


def recorded_fingerprint(path=OUT):
    """The fingerprint written in the file's header, or None."""
    try:
        with open(path) as f:
            for line in f:
                if not line.startswith("#"):
                    break
                if line.startswith("# fingerprint: "):
                    return line.split()[2]
    except OSError:
        pass
    return None


def staleness(path=OUT):
    """None when the file was generated from this tree's Cargo files and toolchain, else why not."""
    rec, now = recorded_fingerprint(path), fingerprint()
    if rec == now:
        return None
    return (f"{os.path.relpath(path, ROOT)} was generated for fingerprint {rec}, this tree is {now}: "
            "Cargo.lock, a Cargo.toml or the toolchain changed since, so part of its names may no "
            "longer match and the release build's RSS grows; regenerate it (python3 "
            "scripts/symbol-order.py, see its doc)")


def check(path, binary):
    with open(path) as f:
        names = [l.strip() for l in f if l.strip() and not l.startswith("#")]
    defined = {n for _, _, ns in symbols(binary) for n in ns}
    found = sum(n in defined for n in names)
    print(f"{found} of {len(names)} names of {path} are defined in {binary}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--awf", help="an unstripped awf release executable (default: build one)")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--check", metavar="BIN", help="only count the names of --out defined in BIN")
    ap.add_argument("--stale", action="store_true",
                    help="only say whether --out was generated for this tree's Cargo files and toolchain "
                         "(exit status 1 when not)")
    a = ap.parse_args()
    if a.stale:
        why = staleness(a.out)
        print(why or f"{os.path.relpath(a.out, ROOT)} matches this tree ({fingerprint()})")
        sys.exit(1 if why else 0)
    if a.check:
        return check(a.out, a.check)
    if not shutil.which(VALGRIND):
        sys.exit("valgrind is needed (3.22 or later: see VALGRIND in this script)")
    awf = os.path.abspath(a.awf) if a.awf else build_unstripped()
    funcs = symbols(awf)
    d = os.path.realpath(tempfile.mkdtemp(prefix="awf-symbol-order-"))
    try:
        wf = os.path.join(d, "workflows")
        os.makedirs(wf)
        for name, text in WORKFLOWS.items():
            with open(os.path.join(wf, f"{name}.yaml"), "w") as f:
                f.write(text)
        for name in ["hello.yaml", "batch-files.yaml"]:
            shutil.copy(os.path.join(ROOT, "workflows", name), wf)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWF_")}
        env.update({"HOME": os.path.join(d, "home"), "XDG_DATA_HOME": os.path.join(d, "data"),
                    "XDG_CONFIG_HOME": os.path.join(d, "config"), "XDG_STATE_HOME": os.path.join(d, "state"),
                    "XDG_CACHE_HOME": os.path.join(d, "cache"), "AWF_WORKFLOWS_PATH": wf, "NO_COLOR": "1"})
        os.makedirs(env["HOME"])
        traces = [
            ("version", run_cmd(awf, ["--version"], d, env, funcs)),
            ("mcp", mcp_session(awf, d, env, funcs)),
            ("acp", acp_session(awf, d, env, funcs)),
            ("run", run_cmd(awf, ["run", os.path.join(wf, "hello.yaml"), "--input", "name=Ada"], d, env, funcs)),
            ("run", run_cmd(awf, ["run", os.path.join(wf, "batch-files.yaml"), "-o", "buffered"], d, env, funcs)),
            ("cli", run_cmd(awf, ["list"], d, env, funcs)),
            ("cli", run_cmd(awf, ["validate", os.path.join(wf, "hello.yaml")], d, env, funcs)),
        ]
    finally:
        shutil.rmtree(d, ignore_errors=True)
    firsts, sigs = {}, {}
    for name, order in traces:
        print(f"{name}: {len(order)} functions, "
              f"{sum(funcs[i][1] - funcs[i][0] for i in order) / 1024:.0f} KiB", file=sys.stderr)
        for i in order:
            firsts.setdefault(i, len(firsts))
            sigs.setdefault(i, set()).add(name)
    for s in SCENARIOS:
        if not any(s in v for v in sigs.values()):
            sys.exit(f"scenario {s} ran no function of {awf}")
    order = layout(firsts, sigs)
    size = sum(funcs[i][1] - funcs[i][0] for i in order)
    with open(a.out, "w") as f:
        f.write("# Linker symbol ordering file (-Wl,--symbol-ordering-file; interfaces/cli/build.rs).\n"
                "# Generated by scripts/symbol-order.py: do not edit; regenerate after a toolchain,\n"
                f"# Cargo.lock or release profile change. {len(order)} functions, {size // 1024} KiB.\n"
                f"# fingerprint: {fingerprint()}\n")
        for i in order:
            for name in funcs[i][2]:
                f.write(name + "\n")
    print(f"wrote {a.out}: {len(order)} functions, {size / 1024:.0f} KiB of code", file=sys.stderr)


if __name__ == "__main__":
    main()
