#!/usr/bin/env python3
"""Many `awf serve --store` workers on one PostgreSQL (issue 15, "Proof"): prints

  throughput   short runs (one `true` step) per second with 1, 2 and 4 workers: RUNS runs
               submitted first (`awf run --submit`), then the workers started; runs / (last
               completed_at - first started_at) as the store records them
  claim        submit (HTTP POST to a worker, the row's submitted_at) -> RunStarted (the row's
               started_at_ms), p50 / p95 over CLAIM_RUNS runs submitted one by one to 2 idle
               workers
  failover     SIGKILL of a worker holding 4 runs mid-step -> every one of them resumed by the
               other worker (claimed again and started), with --lease LEASE (the lease bounds it)

Builds nothing: takes the awf binary (--awf, default target/release/awf, else target/debug/awf)
and a PostgreSQL server (--pg URL of a maintenance database, default $AWF_TEST_PG_URL, else
`scripts/pg.sh start`); each measurement gets a database of its own, dropped at the end.
Everything listens on 127.0.0.1; every loop is bounded.

Usage: benches/scale.py [--awf PATH] [--pg URL] [--runs 60] [--claim-runs 30] [--lease 3s]
"""
import os, sys

# benches/http.py would shadow the standard library's http (urllib needs http.client).
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse, json, signal, subprocess, tempfile, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def psql(url, sql):
    out = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", url, "-c", sql],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        sys.exit(f"psql {sql!r}: {out.stderr}")
    return out.stdout.strip()


class Bench:
    def __init__(self, awf, server):
        self.awf, self.server, self.n = awf, server, 0
        self.tmp = tempfile.TemporaryDirectory(prefix="awf-scale-")
        d = self.tmp.name
        os.makedirs(os.path.join(d, "wf"))
        with open(os.path.join(d, "wf", "short.yaml"), "w") as f:
            f.write("name: short\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'true'\n"
                    "    on_success: done\n  done: {type: terminal}\n")
        with open(os.path.join(d, "wf", "slow.yaml"), "w") as f:
            steps = "".join(f"  s{i}:\n    type: step\n    command: sleep 2\n    on_success: {'s%d' % (i + 1) if i < 3 else 'done'}\n"
                            for i in range(1, 4))
            f.write("name: slow\nstates:\n  initial: s1\n" + steps + "  done: {type: terminal}\n")
        self.env = dict(os.environ, HOME=d, XDG_DATA_HOME=os.path.join(d, "data"),
                        XDG_CONFIG_HOME=os.path.join(d, "config"), XDG_CACHE_HOME=os.path.join(d, "cache"),
                        XDG_STATE_HOME=os.path.join(d, "state"), AWF_WORKFLOWS_PATH=os.path.join(d, "wf"),
                        NO_COLOR="1")
        self.env.pop("AWF_STORE", None)
        self.procs = []

    def db(self):
        self.n += 1
        name = f"awf_scale_{os.getpid()}_{self.n}"
        psql(self.server, f"CREATE DATABASE {name}")
        base = self.server.rsplit("/", 1)[0]
        return name, f"{base}/{name}"

    def drop(self, name):
        psql(self.server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def worker(self, url, *extra):
        p = subprocess.Popen([self.awf, "--store", url, "serve", "--addr", "127.0.0.1:0", *extra],
                             env=self.env, cwd=self.tmp.name, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        line = p.stdout.readline()
        if "listening on " not in line:
            sys.exit(f"awf serve did not start: {line!r}")
        self.procs.append(p)
        return p, line.strip().rsplit(" ", 1)[-1]

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
        self.procs = []

    def submit(self, url, workflow):
        out = subprocess.run([self.awf, "--store", url, "run", "--submit", workflow], env=self.env,
                             cwd=self.tmp.name, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            sys.exit(f"awf run --submit: {out.stderr}")
        return out.stdout.strip()


def wait(what, limit, f):
    t0 = time.monotonic()
    while not f():
        if time.monotonic() - t0 > limit:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.05)


def throughput(b, workers, runs):
    name, url = b.db()
    for _ in range(runs):
        b.submit(url, "short")
    for _ in range(workers):
        b.worker(url, "--max-runs", "8")
    wait(f"{runs} runs done", 600, lambda: psql(url, "SELECT count(*) FROM awf_runs WHERE queue_state = 'done'") == str(runs))
    span_ms = int(psql(url, "SELECT max(completed_at_ms) - min(started_at_ms) FROM awf_runs"))
    ok = psql(url, "SELECT count(*) FROM awf_runs WHERE status = 'success'")
    b.stop_all()
    b.drop(name)
    return runs / max(span_ms / 1000.0, 1e-3), span_ms, ok


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def claim_latency(b, count):
    name, url = b.db()
    _, base = b.worker(url)
    b.worker(url)
    time.sleep(1)
    ids = []
    for _ in range(count):
        req = urllib.request.Request(f"{base}/api/workflows/env/short/run", data=b"{}", method="POST",
                                     headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            ids.append(json.load(r)["body"]["execution_id"])
        time.sleep(0.1)
    wait("claimed runs done", 300, lambda: psql(url, "SELECT count(*) FROM awf_runs WHERE queue_state = 'done'") == str(count))
    rows = psql(url, "SELECT started_at_ms - (extract(epoch from submitted_at) * 1000)::bigint FROM awf_runs")
    lat = [int(x) for x in rows.split()]
    b.stop_all()
    b.drop(name)
    return pct(lat, 50), pct(lat, 95), len(lat)


def failover(b, lease):
    name, url = b.db()
    a, _ = b.worker(url, "--lease", lease)
    for _ in range(4):
        b.submit(url, "slow")
    wait("worker A to start 4 runs", 120, lambda: psql(url, "SELECT count(*) FROM awf_runs WHERE run_started AND queue_state = 'claimed'") == "4")
    b.worker(url, "--lease", lease)
    time.sleep(1)
    t0 = time.monotonic()
    a.send_signal(signal.SIGKILL)
    a.wait()
    resumed = {}
    def check():
        for line in psql(url, "SELECT run_id FROM awf_runs WHERE epoch >= 2 AND run_started AND snapshot->>'status' = 'running'").split():
            resumed.setdefault(line, time.monotonic() - t0)
        return len(resumed) == 4
    wait("the 4 runs resumed", 120, check)
    wait("the 4 runs done", 300, lambda: psql(url, "SELECT count(*) FROM awf_runs WHERE queue_state = 'done' AND status = 'success'") == "4")
    b.stop_all()
    b.drop(name)
    return max(resumed.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--awf")
    ap.add_argument("--pg", default=os.environ.get("AWF_TEST_PG_URL"))
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--claim-runs", type=int, default=30)
    ap.add_argument("--lease", default="3s")
    args = ap.parse_args()
    awf = args.awf
    if not awf:
        rel, dbg = os.path.join(ROOT, "target/release/awf"), os.path.join(ROOT, "target/debug/awf")
        awf = rel if os.path.exists(rel) else dbg
    if not os.path.exists(awf):
        sys.exit(f"no awf binary at {awf}: build it first (cargo build -p awf)")
    server = args.pg or subprocess.run([os.path.join(ROOT, "scripts/pg.sh"), "start"], capture_output=True,
                                       text=True, check=True).stdout.strip()
    b = Bench(awf, server)
    print(f"awf: {awf}\nPostgreSQL: {server}\n")
    try:
        print(f"throughput ({args.runs} short runs, --max-runs 8 per worker)")
        for w in (1, 2, 4):
            rps, span, ok = throughput(b, w, args.runs)
            print(f"  {w} worker{'s' if w > 1 else ' '}  {rps:7.1f} runs/s   ({span} ms, {ok} succeeded)")
        p50, p95, n = claim_latency(b, args.claim_runs)
        print(f"claim latency (submit -> RunStarted, {n} runs, 2 idle workers)\n  p50 {p50} ms   p95 {p95} ms")
        t = failover(b, args.lease)
        print(f"failover (SIGKILL of a worker holding 4 runs -> all resumed elsewhere, --lease {args.lease})\n  {t:.2f} s")
    finally:
        b.stop_all()


if __name__ == "__main__":
    main()
