#!/usr/bin/env python3
"""CPU a runner's own threads spend per step, apart from its children (issue 9).

Wall-time ratios on this 2-core, shared machine move by several hundredths between runs;
this counts instead, from the scheduler's switch events (`perf record -a -e
sched:sched_switch,...`), how long each thread of the runner was on a CPU, and divides by the
number of steps (children that exec'd the step program). The steps' children (from their
fork, before and after their exec) are left out: they cost the same under any runner. Needs
`perf` with tracepoint access (root, or kernel.perf_event_paranoid <= -1).

Usage:
  benches/own_cpu.py [--reps 5] [--program sh] -- CMD...

  e.g. benches/own_cpu.py -- target/release/awf run chain.yaml
       benches/own_cpu.py -- make -s -f Makefile.chain

Prints the median per-step CPU of the runner's own threads over the runs, each run's figure,
and the busiest threads' per-step share (the engine's thread first, as a rule).
"""
import argparse
import collections
import os
import re
import statistics
import subprocess
import sys
import tempfile

EVENT = re.compile(r"\s(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):(.*)")


def one_run(cmd, program, data):
    """(per-step CPU of the runner's threads in seconds, steps, busiest threads' totals)."""
    subprocess.run(["perf", "record", "-a", "-q", "-o", data, "-e",
                    "sched:sched_switch,sched:sched_process_exec,sched:sched_process_fork", "--"] + cmd,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    text = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True,
                          check=True).stdout
    on_cpu = {}                      # cpu -> (pid, since)
    ran = collections.Counter()      # pid -> seconds on a CPU
    parent = {}                      # child pid -> pid that forked it
    steps = set()                    # pids that exec'd the step program
    root = None
    step_exec = re.compile(r"filename=\S*/" + re.escape(program) + r"\b")
    for line in text.splitlines():
        m = EVENT.search(line)
        if not m:
            continue
        pid, cpu, t, kind, rest = int(m[1]), int(m[2]), float(m[3]), m[4], m[5]
        if kind == "sched_process_exec":
            if step_exec.search(rest):
                steps.add(pid)
            elif root is None:
                root = pid
        elif kind == "sched_process_fork":
            f = re.search(r" pid=(\d+) .*child_pid=(\d+)", rest)
            if f:
                parent[int(f[2])] = int(f[1])
        elif kind == "sched_switch":
            s = re.search(r"prev_pid=(\d+) .*next_pid=(\d+)", rest)
            prev, nxt = int(s[1]), int(s[2])
            if cpu in on_cpu and on_cpu[cpu][0] == prev:
                ran[prev] += t - on_cpu[cpu][1]
            on_cpu[cpu] = (nxt, t)

    def runners(pid):
        seen = 0
        while pid != root and pid in parent and seen < 64:
            pid, seen = parent[pid], seen + 1
        return pid == root

    own = {p: s for p, s in ran.items() if p not in steps and p != 0 and runners(p)}
    n = max(len(steps), 1)
    return sum(own.values()) / n, len(steps), sorted(own.values(), reverse=True)[:4]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--program", default="sh", help="the program each step execs (default sh)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        sys.exit("usage: own_cpu.py [--reps N] [--program sh] -- CMD...")
    with tempfile.TemporaryDirectory() as d:
        runs = [one_run(cmd, a.program, os.path.join(d, "perf.data")) for _ in range(a.reps)]
    per_step = [r[0] for r in runs]
    print(f"{' '.join(cmd)}: {runs[0][1]} steps; own CPU per step median "
          f"{statistics.median(per_step) * 1e6:.1f} us (runs: "
          f"{' '.join(f'{x * 1e6:.0f}' for x in per_step)})")
    print("  busiest threads per step (us): " + " | ".join(
        " ".join(f"{t * 1e6 / max(r[1], 1):.0f}" for t in r[2]) for r in runs))


if __name__ == "__main__":
    main()
