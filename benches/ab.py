#!/usr/bin/env python3
"""Two awf builds side by side on one command line (issue 9: did a change move a figure?).

Runs `A args…` and `B args…` alternately (each pair in the other order than the one before),
REPS pairs, in a fresh data root (XDG_DATA_HOME, XDG_CONFIG_HOME under a temp dir, SHELL=/bin/bash),
from the current directory, and prints both medians and the median of the per-pair ratios A/B.
A ratio under 1 means A is faster. Exits non-zero when a command fails.

Usage: benches/ab.py A B REPS ARGS...    e.g. benches/ab.py old/awf new/awf 300 list
"""
import os, shutil, statistics, subprocess, sys, tempfile, time


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    a, b, reps, args = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    d = tempfile.mkdtemp(prefix="awf-ab-")
    env = dict(os.environ, XDG_DATA_HOME=os.path.join(d, "data"),
               XDG_CONFIG_HOME=os.path.join(d, "config"), SHELL="/bin/bash")

    def timed(binary):
        t0 = time.perf_counter()
        subprocess.run([binary] + args, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, check=True)
        return time.perf_counter() - t0

    try:
        timed(a)
        timed(b)
        ta, tb, ratios = [], [], []
        for i in range(reps):
            if i % 2:
                y, x = timed(b), timed(a)
            else:
                x, y = timed(a), timed(b)
            ta.append(x)
            tb.append(y)
            ratios.append(x / y)
        print(f"{' '.join(args)}: A {statistics.median(ta) * 1000:.2f} ms  "
              f"B {statistics.median(tb) * 1000:.2f} ms  A/B median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {reps} pairs)")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
