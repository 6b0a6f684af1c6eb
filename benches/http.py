#!/usr/bin/env python3
"""`awf serve` (issue 13, "Proof"): push latency of its SSE, throughput, memory.

A raw HTTP/1.1 client over sockets (no HTTP library in the timed path) drives one `awf serve`
on a free loopback port, over a temp sandbox (HOME, XDG dirs) holding 20 workflows:

  first-frame/1    POST .../trivial/run sent -> the first SSE frame (`run_started`) read on
                   `GET /api/executions/{id}/events`, one subscriber         target  5 ms (p50)
  first-frame/50   the same with 50 subscribers, each subscribing as soon as the 202 is
                   read (sockets opened beforehand, as keep-alive clients hold them); one
                   sample per subscriber                                     target 20 ms (p95)
                   The 50 subscribers live in --procs worker processes (default 5 x 10), each
                   with its own selector, so one Python thread's turns are not the figure;
                   the row below it, "client overhead", is the client's own share: per
                   subscriber, the time from the run id known in the main process to that
                   subscriber's GET written (the pipe to its worker and the GETs its worker
                   wrote before it). Times are CLOCK_MONOTONIC, shared by the processes.
  live-event/50    a run whose step prints `tick`, sleeps 0.3 s and prints `tock`, followed live by
                   50 subscribers: the wall-clock time the `tock` frame arrives at each, less the
                   `at` (ms since the epoch) the engine stamped on that event (the push delay of
                   one event, at 1 ms resolution; a poller every 200 ms adds about 100 ms on
                   average, up to 200 ms)
  wrk              `GET /api/workflows` throughput with `wrk` (Debian's package `wrk`; installed
                   with apt-get when missing and this runs as root, else the row says how)
  rss              awf serve's VmRSS / VmHWM (/proc/<pid>/status) idle after start-up, and
                   under load (after the 50-subscriber rows and wrk)

The figure to beat is AWF (Go)'s documented SSE poll interval, 200 ms (its docs/api.md: "~200 ms
polling"; shared/spec/http-ops.md section 1.5); it is printed beside the latency rows.
Each latency row gives min / p50 / p95 / max over --reps runs (x 50 subscribers for the /50 rows).

Usage: cargo build --release -p awf && python3 benches/http.py [--awf target/release/awf] [--reps 30]
"""
import argparse, json, multiprocessing, os, platform, re, selectors, shutil, socket, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GO_POLL_MS = 200
TARGETS = {"first-frame/1": ("p50", 5.0), "first-frame/50": ("p95", 20.0)}
SUBS = 50

TRIVIAL = """name: trivial
description: does nothing
states:
  initial: run
  run:
    type: step
    command: "true"
    on_success: done
  done:
    type: terminal
"""
TICK = """name: tick
description: two lines 0.3 s apart
states:
  initial: run
  run:
    type: step
    command: "echo tick; sleep 0.3; echo tock"
    on_success: done
  done:
    type: terminal
"""


def sandbox():
    d = tempfile.mkdtemp(prefix="awf-bench-http-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWF_")}
    for sub in ("home", "data", "config", "cache", "state", "wf"):
        os.makedirs(os.path.join(d, sub))
    env.update(HOME=f"{d}/home", XDG_DATA_HOME=f"{d}/data", XDG_CONFIG_HOME=f"{d}/config",
               XDG_CACHE_HOME=f"{d}/cache", XDG_STATE_HOME=f"{d}/state",
               AWF_WORKFLOWS_PATH=f"{d}/wf", NO_COLOR="1")
    for name, text in (("trivial", TRIVIAL), ("tick", TICK)):
        with open(f"{d}/wf/{name}.yaml", "w") as f:
            f.write(text)
    for i in range(18):
        with open(f"{d}/wf/w{i:02d}.yaml", "w") as f:
            f.write(TRIVIAL.replace("name: trivial", f"name: w{i:02d}"))
    return d, env


class Server:
    def __init__(self, awf, d, env):
        self.p = subprocess.Popen([awf, "serve", "--addr", "127.0.0.1:0"], cwd=d, env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        line = self.p.stdout.readline()
        m = re.search(r"http://([0-9.]+):(\d+)", line)
        if not m:
            self.p.kill()
            raise RuntimeError(f"awf serve said {line!r}")
        self.host, self.port = m.group(1), int(m.group(2))

    def status(self, key):
        with open(f"/proc/{self.p.pid}/status") as f:
            for l in f:
                if l.startswith(key + ":"):
                    return int(l.split()[1]) / 1024
        return float("nan")

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


class Conn:
    """One keep-alive HTTP/1.1 connection; responses read by hand (sized or chunked)."""

    def __init__(self, srv):
        self.srv = srv
        self.s = socket.create_connection((srv.host, srv.port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, method, path, body=None, headers=()):
        h = f"{method} {path} HTTP/1.1\r\nHost: {self.srv.host}:{self.srv.port}\r\n"
        for x in headers:
            h += x + "\r\n"
        b = b""
        if body is not None:
            b = json.dumps(body).encode()
            h += f"Content-Type: application/json\r\nContent-Length: {len(b)}\r\n"
        self.s.sendall(h.encode() + b"\r\n" + b)

    def _more(self):
        chunk = self.s.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed")
        self.buf += chunk

    def head(self):
        while b"\r\n\r\n" not in self.buf:
            self._more()
        raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = raw.decode().split("\r\n")
        code = int(lines[0].split()[1])
        hdrs = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        return code, hdrs

    def json_response(self):
        code, hdrs = self.head()
        n = int(hdrs.get("content-length", "0"))
        while len(self.buf) < n:
            self._more()
        body, self.buf = self.buf[:n], self.buf[n:]
        return code, json.loads(body) if body else None

    def close(self):
        self.s.close()


def start_run(c, name):
    c.send("POST", f"/api/workflows/env/{name}/run", {"inputs": {}})
    code, v = c.json_response()
    if code != 202:
        raise RuntimeError(f"POST run: {code} {v}")
    return v["body"]["execution_id"]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def frames_in(data):
    """Complete SSE frames (dicts with id/event/data) in a decoded body buffer, and the rest."""
    out = []
    while b"\n\n" in data:
        block, data = data.split(b"\n\n", 1)
        f = {}
        for l in block.decode().split("\n"):
            if l.startswith(":"):
                continue
            k, _, v = l.partition(":")
            f[k] = v[1:] if v.startswith(" ") else v
        if "data" in f:
            out.append(f)
    return out, data


def dechunk(raw):
    """Decodes the complete chunks at the start of `raw`: (body bytes, rest, ended)."""
    body, ended = b"", False
    while True:
        i = raw.find(b"\r\n")
        if i < 0:
            return body, raw, ended
        n = int(raw[:i].split(b";")[0], 16)
        if n == 0:
            return body, raw[i + 2:], True
        if len(raw) < i + 2 + n + 2:
            return body, raw, ended
        body += raw[i + 2:i + 2 + n]
        raw = raw[i + 2 + n + 2:]


class Subscriber:
    """An SSE subscription on its own connection, read without blocking through a selector."""

    def __init__(self, srv):
        self.c = Conn(srv)
        self.c.s.setblocking(False)
        self.raw, self.body, self.frames, self.times, self.walls = b"", b"", [], [], []
        self.headers_done, self.ended = False, False

    def subscribe(self, run_id):
        self.c.s.setblocking(True)
        self.c.send("GET", f"/api/executions/{run_id}/events", headers=("Accept: text/event-stream",))
        self.c.s.setblocking(False)

    def on_readable(self, now):
        try:
            chunk = self.c.s.recv(65536)
        except BlockingIOError:
            return
        if not chunk:
            self.ended = True
            return
        self.raw += chunk
        if not self.headers_done:
            if b"\r\n\r\n" not in self.raw:
                return
            head, self.raw = self.raw.split(b"\r\n\r\n", 1)
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"subscribe: {head[:80]!r}")
            self.headers_done = True
        data, self.raw, ended = dechunk(self.raw)
        self.body += data
        got, self.body = frames_in(self.body)
        for f in got:
            self.frames.append(f)
            self.times.append(now)
            self.walls.append(time.time())
        if ended:
            self.ended = True

    def close(self):
        self.c.close()


def pump(subs, until, timeout=30.0, stamp=time.perf_counter):
    """Reads every subscriber until `until(sub)` holds for all; stamps each frame on arrival
    (with `stamp()`)."""
    sel = selectors.DefaultSelector()
    for s in subs:
        sel.register(s.c.s, selectors.EVENT_READ, s)
    t_end = time.perf_counter() + timeout
    try:
        while not all(until(s) for s in subs):
            if time.perf_counter() > t_end:
                raise RuntimeError("timed out waiting for SSE frames")
            for key, _ in sel.select(timeout=1.0):
                key.data.on_readable(stamp())
    finally:
        sel.close()


def first_frame(srv, n, reps):
    """ms from sending POST run to each subscriber's first frame, over reps runs."""
    samples = []
    ctl = Conn(srv)
    for _ in range(reps):
        subs = [Subscriber(srv) for _ in range(n)]
        t0 = time.perf_counter()
        run_id = start_run(ctl, "trivial")
        for s in subs:
            s.subscribe(run_id)
        pump(subs, lambda s: len(s.frames) >= 1)
        for s in subs:
            assert s.frames[0]["event"] == "run_started", s.frames[0]
            samples.append((s.times[0] - t0) * 1e3)
        # Follow to the end (every stream ends after the run's final event), then close.
        pump(subs, lambda s: s.ended)
        for s in subs:
            assert s.frames[-1]["event"] == "run_finished", s.frames[-1]
            s.close()
    ctl.close()
    return samples


def now_ms():
    """CLOCK_MONOTONIC in ms: the same clock in every process of the machine."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) / 1e6


def worker(srv_addr, k, conn):
    """One worker process of first_frame_procs: per request, opens `k` subscriber sockets,
    acks, waits for (run_id, t0_ms, t_id_ms), subscribes each, reads to each stream's end and
    sends back [(first frame - t0, GET written - t_id)] per subscriber."""
    class Srv:
        host, port = srv_addr
    while True:
        msg = conn.recv()
        if msg == "stop":
            return
        subs = [Subscriber(Srv) for _ in range(k)]
        conn.send("ready")
        run_id, t0, t_id = conn.recv()
        sent = []
        for s in subs:
            s.subscribe(run_id)
            sent.append(now_ms() - t_id)
        pump(subs, lambda s: len(s.frames) >= 1, stamp=now_ms)
        out = []
        for s, d in zip(subs, sent):
            if s.frames[0]["event"] != "run_started":
                raise RuntimeError(f"first frame {s.frames[0]}")
            out.append((s.times[0] - t0, d))
        pump(subs, lambda s: s.ended, stamp=now_ms)
        for s in subs:
            if s.frames[-1]["event"] != "run_finished":
                raise RuntimeError(f"last frame {s.frames[-1]}")
            s.close()
        conn.send(out)


def first_frame_procs(srv, n, reps, procs):
    """first_frame with the n subscribers spread over `procs` worker processes; returns
    (ms to each first frame, ms of the client's own delay before each GET)."""
    per = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
    ctx = multiprocessing.get_context("fork")
    pipes, workers = [], []
    for k in per:
        a, b = ctx.Pipe()
        p = ctx.Process(target=worker, args=((srv.host, srv.port), k, b), daemon=True)
        p.start()
        pipes.append(a)
        workers.append(p)
    samples, overhead = [], []
    ctl = Conn(srv)
    try:
        for _ in range(reps):
            for a in pipes:
                a.send("go")
            for a in pipes:
                if a.recv() != "ready":
                    raise RuntimeError("worker not ready")
            t0 = now_ms()
            run_id = start_run(ctl, "trivial")
            t_id = now_ms()
            for a in pipes:
                a.send((run_id, t0, t_id))
            for a in pipes:
                for first, d in a.recv():
                    samples.append(first)
                    overhead.append(d)
    finally:
        for a in pipes:
            a.send("stop")
        for p in workers:
            p.join(timeout=10)
        ctl.close()
    return samples, overhead


def live_event(srv, n, reps):
    """ms from the engine's stamp (`at`) of the `tock` output event to its arrival at each
    subscriber (wall clock)."""
    samples = []
    ctl = Conn(srv)
    for _ in range(reps):
        subs = [Subscriber(srv) for _ in range(n)]
        run_id = start_run(ctl, "tick")
        for s in subs:
            s.subscribe(run_id)
        pump(subs, lambda s: s.ended)
        for s in subs:
            for f, wall in zip(s.frames, s.walls):
                d = json.loads(f["data"])
                if f.get("event") == "output_chunk" and "tock" in d["event"]["text"]:
                    samples.append(wall * 1e3 - d["at"])
                    break
            else:
                raise RuntimeError("no `tock` frame")
            s.close()
    ctl.close()
    return samples


def ensure_wrk():
    if shutil.which("wrk"):
        return None
    if os.geteuid() == 0 and shutil.which("apt-get"):
        r = subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        if r.returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    if shutil.which("wrk"):
        return None
    return "wrk missing: `sudo apt-get install wrk` (Debian package wrk)"


def run_wrk(srv, seconds, conns):
    out = subprocess.run(["wrk", "-t2", f"-c{conns}", f"-d{seconds}s", "--latency",
                          f"http://{srv.host}:{srv.port}/api/workflows"],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rps, p50.group(1) if p50 else "?", p99.group(1) if p99 else "?", int(non2xx.group(1)) if non2xx else 0


def version(awf):
    try:
        return subprocess.run([awf, "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--awf", default=os.path.join(ROOT, "target", "release", "awf"))
    ap.add_argument("--reps", type=int, default=30, help="runs per latency row (default 30)")
    ap.add_argument("--wrk-seconds", type=int, default=10)
    ap.add_argument("--wrk-connections", type=int, default=50)
    ap.add_argument("--procs", type=int, default=5,
                    help="worker processes holding the 50 subscribers of first-frame/50 (default 5)")
    a = ap.parse_args()
    a.awf = os.path.abspath(a.awf)
    if not os.path.exists(a.awf):
        sys.exit(f"{a.awf} not found: cargo build --release -p awf")
    d, env = sandbox()
    srv = Server(a.awf, d, env)
    try:
        # Idle: after start-up and one request of each kind.
        c = Conn(srv)
        c.send("GET", "/api/workflows")
        code, v = c.json_response()
        assert code == 200 and len(v["body"]["workflows"]) == 20, (code, v)
        c.close()
        first_frame(srv, 1, 1)
        time.sleep(0.5)
        idle = (srv.status("VmRSS"), srv.status("VmHWM"))

        rows = {}
        first_frame(srv, 1, 3)  # warm-up, untimed
        rows["first-frame/1"] = first_frame(srv, 1, a.reps)
        first_frame_procs(srv, SUBS, 2, a.procs)  # warm-up, untimed
        rows["first-frame/50"], overhead = first_frame_procs(srv, SUBS, a.reps, a.procs)
        rows["first-frame/50, one client thread (before)"] = first_frame(srv, SUBS, a.reps)
        rows["live-event/50"] = live_event(srv, SUBS, max(3, a.reps // 5))

        why_no_wrk = ensure_wrk()
        wrk = None
        if why_no_wrk is None:
            run_wrk(srv, 2, a.wrk_connections)  # warm-up
            wrk = run_wrk(srv, a.wrk_seconds, a.wrk_connections)
        load = (srv.status("VmRSS"), srv.status("VmHWM"))
    finally:
        srv.stop()
        shutil.rmtree(d, ignore_errors=True)

    print(f"awf serve: {version(a.awf)}; {platform.machine()}, {os.cpu_count()} CPUs, "
          f"python {platform.python_version()}; --reps {a.reps}; first-frame/50 over --procs {a.procs}")
    print()
    print(f"| case | min | p50 | p95 | max | target | AWF (Go) |")
    print(f"|---|---|---|---|---|---|---|")
    for name, xs in rows.items():
        if not xs:
            print(f"| {name} | - | - | - | - | - | - |")
            continue
        p50, p95 = pct(xs, 0.5), pct(xs, 0.95)
        tgt = "-"
        if name in TARGETS:
            which, limit = TARGETS[name]
            got = p50 if which == "p50" else p95
            tgt = f"{which} <= {limit:g} ms: {'ok' if got <= limit else 'MISSED'}"
        print(f"| {name} ({len(xs)} samples) | {min(xs):.2f} ms | {p50:.2f} ms | {p95:.2f} ms | "
              f"{max(xs):.2f} ms | {tgt} | polls every {GO_POLL_MS} ms |")
    print(f"| client overhead of first-frame/50 (run id known -> that subscriber's GET written) "
          f"| {min(overhead):.2f} ms | {pct(overhead, 0.5):.2f} ms | {pct(overhead, 0.95):.2f} ms "
          f"| {max(overhead):.2f} ms | - | - |")
    if wrk:
        rps, p50, p99, bad = wrk
        print(f"| GET /api/workflows (20 workflows), wrk -t2 -c{a.wrk_connections} -d{a.wrk_seconds}s "
              f"| | {p50} | | p99 {p99} | {rps:,.0f} req/s, {bad} non-2xx | - |")
    else:
        print(f"| GET /api/workflows, wrk | {why_no_wrk} | | | | | |")
    print(f"| RSS idle (VmRSS / VmHWM) | | {idle[0]:.1f} MB / {idle[1]:.1f} MB | | | | |")
    print(f"| RSS under load (VmRSS / VmHWM) | | {load[0]:.1f} MB / {load[1]:.1f} MB | | | | |")


if __name__ == "__main__":
    main()
