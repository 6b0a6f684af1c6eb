#!/usr/bin/env python3
"""Engine overhead benchmark for `awf run` (issue: awf run, the workflow engine).

Prints, each measured in the same run on this machine:
  1. `awf run` of a one-step `true` workflow   vs  `sh -c true`
  2. a 200-step linear workflow of `true` steps vs  a Makefile of 200 sequential `true` recipes run by make
  3. a for_each over 1,000 items running `true` vs  a shell `for` loop running `sh -c true` 1,000 times
  and the peak RSS of each (max over repetitions, from GNU time's %M).
Per-step engine overhead = (awf time - baseline time) / steps.
Targets: overhead per step under 1 ms beyond the shell's own fork+exec and no more than make's;
peak RSS of awf under 15 MB.

Usage: benches/engine.py [--awf target/release/awf] [--reps 7]
Both sides use SHELL=/bin/sh so the same shell is started per step.
"""
import argparse, os, statistics, subprocess, sys, tempfile, time

TIME = "/usr/bin/time"  # GNU time: reports the measured command's own peak RSS (%M, KiB)

def run(argv, cwd, env):
    # Peak RSS comes from GNU time, not from our own wait4: a child forked by Python keeps
    # Python's resident set until exec, which would inflate every figure.
    rss_file = os.path.join(cwd, ".rss")
    t0 = time.perf_counter()
    p = subprocess.run([TIME, "-o", rss_file, "-f", "%M"] + argv, cwd=cwd, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"benchmark command failed: {argv}")
    with open(rss_file) as f:
        rss = int(f.read().split()[-1])
    return dt, rss  # KiB

def measure(argv, cwd, env, reps):
    run(argv, cwd, env)  # warm-up
    times, rss = [], 0
    for _ in range(reps):
        dt, r = run(argv, cwd, env)
        times.append(dt)
        rss = max(rss, r)
    return statistics.median(times), rss

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--awf", default="target/release/awf")
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    awf = os.path.abspath(a.awf)
    d = tempfile.mkdtemp(prefix="awf-bench-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWF_")}
    env.update({"SHELL": "/bin/sh", "HOME": d, "XDG_DATA_HOME": os.path.join(d, "data"),
                "XDG_CONFIG_HOME": os.path.join(d, "config"), "NO_COLOR": "1", "AWF_RECORD": "off"})

    with open(os.path.join(d, "one.yaml"), "w") as f:
        f.write("name: one\nstates:\n  initial: s\n  s:\n    type: step\n    command: 'true'\n    on_success: done\n  done:\n    type: terminal\n")
    lines = ["name: linear200", "states:", "  initial: s0"]
    for i in range(200):
        nxt = f"s{i+1}" if i < 199 else "done"
        lines += [f"  s{i}:", "    type: step", "    command: 'true'", f"    on_success: {nxt}"]
    lines += ["  done:", "    type: terminal"]
    with open(os.path.join(d, "linear200.yaml"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(d, "Makefile"), "w") as f:
        f.write("all: " + " ".join(f"t{i}" for i in range(200)) + "\n.NOTPARALLEL:\n")
        for i in range(200):
            f.write(f"t{i}:\n\t@sh -c true\n")
    with open(os.path.join(d, "each1000.yaml"), "w") as f:
        f.write("name: each1000\nstates:\n  initial: loop\n  loop:\n    type: for_each\n"
                "    items: '[" + ",".join(str(i) for i in range(1000)) + "]'\n"
                "    max_iterations: 1000\n    body: [s]\n    on_complete: done\n"
                "  s:\n    type: step\n    command: 'true'\n  done:\n    type: terminal\n")

    rows = []
    def pair(label, steps, awf_args, base_argv, base_label):
        ta, ra = measure([awf] + awf_args, d, env, a.reps)
        tb, rb = measure(base_argv, d, env, a.reps)
        per = (ta - tb) / steps * 1000
        rows.append((label, steps, ta, ra, tb, rb, base_label, per))

    pair("1 step", 1, ["run", "one.yaml"], ["sh", "-c", "true"], "sh -c true")
    pair("200 linear steps", 200, ["run", "linear200.yaml"], ["make", "-s", "-f", "Makefile"], "make (200 recipes of sh -c true)")
    pair("for_each 1000", 1000, ["run", "each1000.yaml"], ["sh", "-c", "for i in $(seq 1000); do sh -c true; done"], "sh for-loop of sh -c true")

    print(f"awf: {awf}   reps: {a.reps} (median wall time, max peak RSS)")
    print(f"{'case':<18} {'awf':>10} {'awf RSS':>9} {'baseline':>10} {'base RSS':>9} {'ratio':>7} {'overhead/step':>14}  baseline")
    for label, steps, ta, ra, tb, rb, bl, per in rows:
        print(f"{label:<18} {ta*1000:>8.1f}ms {ra/1024:>7.1f}MB {tb*1000:>8.1f}ms {rb/1024:>7.1f}MB {ta/tb:>6.2f}x {per:>11.3f} ms  {bl}")
    worst_rss = max(r[3] for r in rows) / 1024
    per_step = max(r[7] for r in rows[1:])
    print(f"peak RSS of awf: {worst_rss:.1f} MB (target < 15 MB): {'OK' if worst_rss < 15 else 'OVER'}")

    # Persistence cost: the same 200-step workflow with state files, history, audit trail and
    # transcript on (the default) against AWF_RECORD=off.
    rec_env = dict(env)
    rec_env.pop("AWF_RECORD", None)
    t_off, rss_off = measure([awf, "run", "linear200.yaml"], d, env, a.reps)
    t_on, rss_on = measure([awf, "run", "linear200.yaml"], d, rec_env, a.reps)
    ratio = t_on / t_off
    print(f"200 steps, recording on: {t_on*1000:.1f} ms ({rss_on/1024:.1f} MB) vs off: {t_off*1000:.1f} ms "
          f"({rss_off/1024:.1f} MB): {ratio:.2f}x (target < 1.5x): {'OK' if ratio < 1.5 else 'OVER'}")
    print(f"worst engine overhead per step vs baseline: {per_step:.3f} ms (target < 1 ms): {'OK' if per_step < 1 else 'OVER'}")

if __name__ == "__main__":
    main()
