#!/usr/bin/env python3
"""awf side by side with make, just and go-task (issue 9: performance).

Every figure is a ratio measured pair by pair: A and B alternate, REPS times, and the ratio of
each pair's wall times gives min/median/max; the medians of A and B are shown too. Peers: make
(Debian), just and go-task (the PyPI wheels `rust-just` and `go-task-bin`, installed into
.cache/bench by this script), and the spawn floor (a Python loop of posix_spawn of /bin/true and
of `bash -c true`). With --callgrind, instruction counts per step and per loop iteration are
measured with valgrind's callgrind (repeatable on a noisy machine).

Cases and targets (issue 9):
  chain-bash   200 `command: 'true'` steps, recording on, SHELL=/bin/bash  vs make `@true`     <= 1.1x
  chain-sh     200 steps needing the shell (`true;`), SHELL=/bin/sh       vs make `@sh -c true`, just  <= 1.1x
  chain-tpl    the same with a template in each command (`true {{.inputs.x}};`) vs make
               `@sh -c 'true $(X);'`: what rendering a step's command adds     <= 1.1x
  record       the 200-step chain, recording on vs AWF_RECORD=off (CPU time)                   <= 1.1x
  output       a step printing 50 MB                                      vs the command > file  <= 2x,
               peak RSS <= kept output + 20 MB, at most one stored copy
  startup      `awf validate` (10 states) and `awf list` (20 workflows)   vs `just --list` (20) <= 1.5x;
               `awf --version`                                             vs `just --version`   <= 1.2x
  parallel64   a 64-branch parallel block of `sleep 0.2`                  vs make -j64          <= make + 10%
  single       (no target) a one-step run vs make with one recipe: what every run costs besides its steps
  floor        (no target) a Python loop of posix_spawn of `sh -c 'true;'` with stdout and stderr on pipes
               read to their end vs make `@sh -c true`: what capturing output costs any runner
  callgrind    (--callgrind) awf's instructions per step at 100/200/400/800 steps (median of --cg-reps runs): flat within 10%

Usage: benches/peers.py [--awf target/release/awf] [--reps 9] [--only CASE,...] [--callgrind [--cg-reps 3]]
"""
import argparse, atexit, os, shutil, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(ROOT, ".cache", "bench")
PINS = ["rust-just==1.59.0", "go-task-bin==3.54.0"]


def install_peers():
    """just and go-task from their PyPI wheels, into .cache/bench (once)."""
    bindir = os.path.join(CACHE, "bin")
    if not (os.path.exists(os.path.join(bindir, "just")) and os.path.exists(os.path.join(bindir, "task"))):
        os.makedirs(CACHE, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--target", CACHE, "--upgrade"] + PINS, check=True)
    return {"just": os.path.join(bindir, "just"), "task": os.path.join(bindir, "task")}


def wall(argv, cwd, env, stdout=subprocess.DEVNULL):
    t0 = time.perf_counter()
    p = subprocess.run(argv, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.DEVNULL,
                       stdin=subprocess.DEVNULL)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"benchmark command failed ({p.returncode}): {' '.join(argv)}")
    return dt


def cpu(argv, cwd, env):
    """User+system CPU seconds of the command and its children, and its peak RSS (KiB), from
    `wait4`'s resource usage: microsecond fields (the kernel scales them to the scheduler's
    exact runtime), where `/usr/bin/time` prints hundredths, a tenth of a 150 ms run's
    recording cost."""
    devnull = subprocess.DEVNULL
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=devnull, stderr=devnull, stdin=devnull)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"benchmark command failed ({p.returncode}): {' '.join(argv)}")
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss


def pairs(a, b, reps, measure=wall):
    """Alternates A and B, each pair in the other order than the one before (so neither
    always runs first, on caches the other warmed); returns (median A, median B, [ratio A/B
    per pair])."""
    measure(*a)
    measure(*b)
    ta, tb, ratios = [], [], []
    for i in range(reps):
        if i % 2 == 0:
            x = measure(*a)
            y = measure(*b)
        else:
            y = measure(*b)
            x = measure(*a)
        ta.append(x)
        tb.append(y)
        ratios.append(x / y if y > 0 else float("inf"))
    return statistics.median(ta), statistics.median(tb), ratios


ROWS = []


def report(case, label_a, label_b, ta, tb, ratios, target, unit="ms", scale=1000):
    r = sorted(ratios)
    med = statistics.median(r)
    ok = "OK" if med <= target else "OVER"
    ROWS.append((case, label_a, label_b, ta * scale, tb * scale, r[0], med, r[-1], target, ok, unit))


def chain_yaml(n, command, inputs=""):
    lines = [f"name: chain{n}"] + ([inputs] if inputs else []) + ["states:", "  initial: s0"]
    for i in range(n):
        nxt = f"s{i+1}" if i < n - 1 else "done"
        lines += [f"  s{i}:", "    type: step", f"    command: '{command}'", f"    on_success: {nxt}"]
    lines += ["  done:", "    type: terminal"]
    return "\n".join(lines) + "\n"


def makefile(n, recipe, name):
    body = "all: " + " ".join(f"t{i}" for i in range(n)) + "\n.NOTPARALLEL:\n"
    body += "".join(f"t{i}:\n\t@{recipe}\n" for i in range(n))
    return body


def justfile(n, recipe):
    body = "all: " + " ".join(f"t{i}" for i in range(n)) + "\n"
    body += "".join(f"t{i}:\n    @{recipe}\n" for i in range(n))
    return body


def taskfile(n, recipe):
    body = "version: '3'\ntasks:\n  all:\n    cmds:\n"
    body += "".join(f"      - task: t{i}\n" for i in range(n))
    body += "".join(f"  t{i}:\n    silent: true\n    cmds:\n      - {recipe}\n" for i in range(n))
    return body


def write(d, name, text):
    with open(os.path.join(d, name), "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--awf", default=os.path.join(ROOT, "target", "release", "awf"))
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--only", default="")
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--cg-reps", type=int, default=3, help="callgrind runs per size (the median counts)")
    a = ap.parse_args()
    awf = os.path.abspath(a.awf)
    only = set(filter(None, a.only.split(",")))
    want = lambda c: not only or c in only
    peers = install_peers()
    d = tempfile.mkdtemp(prefix="awf-peers-")
    # The runs' data roots hold 50 MB outputs: the folder goes when the bench ends.
    atexit.register(shutil.rmtree, d, True)
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWF_")}
    base.update({"HOME": d, "XDG_DATA_HOME": os.path.join(d, "data"), "XDG_CONFIG_HOME": os.path.join(d, "config"),
                 "XDG_STATE_HOME": os.path.join(d, "state"), "NO_COLOR": "1", "AWF_WORKFLOWS_PATH": os.path.join(d, "wf")})
    bash = dict(base, SHELL="/bin/bash")
    sh = dict(base, SHELL="/bin/sh")
    off = dict(base, SHELL="/bin/bash", AWF_RECORD="off")
    reps = a.reps

    if want("chain-bash"):
        write(d, "chain.yaml", chain_yaml(200, "true"))
        write(d, "Makefile.true", makefile(200, "true", "true"))
        ta, tb, r = pairs(([awf, "run", "chain.yaml"], d, bash),
                          (["make", "-s", "-f", "Makefile.true", "SHELL=/bin/bash"], d, bash), reps)
        report("chain-bash", "awf 200 x true (recording on)", "make @true", ta, tb, r, 1.1)
        write(d, "Taskfile.yml", taskfile(200, "true"))
        ta, tb, r = pairs(([awf, "run", "chain.yaml"], d, bash), ([peers["task"], "-s", "all"], d, bash), reps)
        report("chain-bash", "awf 200 x true (recording on)", "go-task true", ta, tb, r, 1.1)

    if want("chain-sh"):
        write(d, "chainsh.yaml", chain_yaml(200, "true;"))
        write(d, "Makefile.sh", makefile(200, "sh -c true", "sh"))
        write(d, "justfile", justfile(200, "true"))
        ta, tb, r = pairs(([awf, "run", "chainsh.yaml"], d, sh), (["make", "-s", "-f", "Makefile.sh"], d, sh), reps)
        report("chain-sh", "awf 200 x 'true;' (sh)", "make @sh -c true", ta, tb, r, 1.1)
        ta, tb, r = pairs(([awf, "run", "chainsh.yaml"], d, sh), ([peers["just"], "all"], d, sh), reps)
        report("chain-sh", "awf 200 x 'true;' (sh)", "just (sh -cu)", ta, tb, r, 1.1)

    if want("chain-tpl"):
        write(d, "chaintpl.yaml", chain_yaml(200, "true {{.inputs.x}};", "inputs:\n  - name: x\n    default: hi"))
        write(d, "Makefile.tpl", "X = hi\n" + makefile(200, "sh -c 'true $(X);'", "sh"))
        ta, tb, r = pairs(([awf, "run", "chaintpl.yaml"], d, sh), (["make", "-s", "-f", "Makefile.tpl"], d, sh), reps)
        report("chain-tpl", "awf 200 x 'true {{x}};' (sh)", "make @sh -c 'true $(X);'", ta, tb, r, 1.1)

    if want("single"):
        # A one-step run: what every run costs besides its steps (start-up, opening the
        # store, the final flush and its disk syncs, the sweep), against make with one recipe.
        write(d, "one.yaml", chain_yaml(1, "true"))
        write(d, "Makefile.one", makefile(1, "true", "true"))
        ta, tb, r = pairs(([awf, "run", "one.yaml"], d, bash), (["make", "-s", "-f", "Makefile.one"], d, bash), reps)
        report("single", "awf 1 x true (recording on)", "make 1 x @true", ta, tb, r, 0)
        ROWS[-1] = ROWS[-1][:9] + ("info",) + ROWS[-1][10:]

    if want("record"):
        write(d, "chain.yaml", chain_yaml(200, "true"))
        cpu_only = lambda argv, cwd, env: cpu(argv, cwd, env)[0]
        ta, tb, r = pairs(([awf, "run", "chain.yaml"], d, bash), ([awf, "run", "chain.yaml"], d, off), reps, cpu_only)
        report("record", "recording on (CPU)", "AWF_RECORD=off (CPU)", ta, tb, r, 1.1)

    if want("output"):
        gen = "head -c 52428800 /dev/zero | tr '\\\\0' x"
        write(d, "big.yaml", "name: big\nstates:\n  initial: s\n  s:\n    type: step\n"
              f"    command: \"{gen}\"\n    on_success: done\n  done:\n    type: terminal\n")
        target = os.path.join(d, "big.out")
        data = os.path.join(d, "data", "awf")
        shutil.rmtree(data, ignore_errors=True)
        n = max(3, reps // 3)
        ta, tb, r = pairs(([awf, "run", "big.yaml"], d, bash), (["bash", "-c", f"{gen} > {target}"], d, bash), n)
        report("output", "awf 50 MB step", "cmd > file", ta, tb, r, 2.0)
        _, rss = cpu([awf, "run", "big.yaml"], d, bash)
        stored = sum(os.path.getsize(os.path.join(p, f)) for p, _, fs in os.walk(data) for f in fs) if os.path.isdir(data) else 0
        ROWS.append(("output", "awf peak RSS (MB)", "kept output + 20 MB", rss / 1024, 0, 0, 0, 0, 0, "", "MB"))
        runs = n + 2  # the warm-up, the timed runs and the RSS run
        print(f"(output: the data root holds {stored / 1e6:.1f} MB after {runs} runs of a 52.4 MB output: "
              f"{stored / runs / 52428800:.2f} stored copies per run; target <= 1)")

    if want("startup"):
        os.makedirs(base["AWF_WORKFLOWS_PATH"], exist_ok=True)
        for i in range(20):
            write(base["AWF_WORKFLOWS_PATH"], f"w{i}.yaml", chain_yaml(3, "true").replace("chain3", f"w{i}"))
        write(d, "ten.yaml", chain_yaml(9, "true"))
        write(d, "justfile", justfile(20, "true"))
        ta, tb, r = pairs(([awf, "validate", "ten.yaml"], d, bash), ([peers["just"], "--list"], d, bash), reps * 3)
        report("startup", "awf validate (10 states)", "just --list (20)", ta, tb, r, 1.5)
        ta, tb, r = pairs(([awf, "list"], d, bash), ([peers["just"], "--list"], d, bash), reps * 3)
        report("startup", "awf list (20 workflows)", "just --list (20)", ta, tb, r, 1.5)
        ta, tb, r = pairs(([awf, "--version"], d, bash), ([peers["just"], "--version"], d, bash), reps * 3)
        report("startup", "awf --version", "just --version", ta, tb, r, 1.2)

    if want("parallel64"):
        lines = ["name: p64", "states:", "  initial: p", "  p:", "    type: parallel", "    strategy: all_succeed",
                 "    parallel: [" + ", ".join(f"b{i}" for i in range(64)) + "]", "    on_success: done"]
        for i in range(64):
            lines += [f"  b{i}:", "    type: step", "    command: 'sleep 0.2'"]
        lines += ["  done:", "    type: terminal"]
        write(d, "p64.yaml", "\n".join(lines) + "\n")
        write(d, "Makefile.p64", "all: " + " ".join(f"b{i}" for i in range(64)) + "\n" +
              "".join(f"b{i}:\n\t@sleep 0.2\n" for i in range(64)))
        ta, tb, r = pairs(([awf, "run", "p64.yaml"], d, bash), (["make", "-s", "-j64", "-f", "Makefile.p64"], d, bash), reps)
        # Target: awf's time above the ideal 0.2 s within make's plus 10%.
        report("parallel64", "awf 64 x sleep 0.2", "make -j64", ta, tb, r, (0.2 + (tb - 0.2) * 1.1) / tb)

    if want("floor"):
        n = 200
        def spawn_loop(argv):
            t0 = time.perf_counter()
            for _ in range(n):
                pid = os.posix_spawn(argv[0], argv, os.environ)
                os.waitpid(pid, 0)
            return time.perf_counter() - t0
        def captured_loop(argv):
            # What a runner that keeps each step's output cannot avoid: two pipes a step,
            # read to their end, then the wait.
            t0 = time.perf_counter()
            for _ in range(n):
                (r1, w1), (r2, w2) = os.pipe(), os.pipe()
                acts = [(os.POSIX_SPAWN_DUP2, w1, 1), (os.POSIX_SPAWN_DUP2, w2, 2),
                        (os.POSIX_SPAWN_CLOSE, r1), (os.POSIX_SPAWN_CLOSE, r2)]
                pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=acts, setpgroup=0)
                os.close(w1)
                os.close(w2)
                for r in (r1, r2):
                    while os.read(r, 65536):
                        pass
                    os.close(r)
                os.waitpid(pid, 0)
            return time.perf_counter() - t0
        ft = statistics.median(spawn_loop(["/bin/true"]) for _ in range(reps))
        fb = statistics.median(spawn_loop(["/bin/bash", "-c", "true"]) for _ in range(reps))
        print(f"spawn floor: {n} x posix_spawn /bin/true {ft*1000:.1f} ms ({ft/n*1000:.3f} ms each); "
              f"{n} x bash -c true {fb*1000:.1f} ms ({fb/n*1000:.3f} ms each)")
        write(d, "Makefile.sh", makefile(n, "sh -c true", "sh"))
        ta, tb, r = pairs((lambda: captured_loop(["/bin/sh", "-c", "true;"]),),
                          (lambda: wall(["make", "-s", "-f", "Makefile.sh"], d, sh),), reps,
                          lambda f: f())
        report("floor", f"{n} x sh -c 'true;', 2 pipes read", "make @sh -c true", ta, tb, r, 0)
        ROWS[-1] = ROWS[-1][:9] + ("info",) + ROWS[-1][10:]

    if a.callgrind and shutil.which("valgrind"):
        print("callgrind: awf's own instructions per step (recording on, SHELL=/bin/bash)")
        per = {}
        # A run's count varies by a few percent from one run to the next (how the recorder's
        # batches fall, how much write-ahead log history.db's first reader replays): each
        # size is the median of --cg-reps runs, after one run that creates the data root.
        write(d, "c1.yaml", chain_yaml(1, "true"))
        subprocess.run([awf, "run", "c1.yaml"], cwd=d, env=bash, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)
        for n in (100, 200, 400, 800):
            write(d, f"c{n}.yaml", chain_yaml(n, "true"))
            totals = []
            for rep in range(a.cg_reps):
                outf = os.path.join(d, f"cg.{n}.{rep}")
                subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={outf}", awf, "run", f"c{n}.yaml"],
                               cwd=d, env=bash, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
                totals.append(next((int(l.split()[1]) for l in open(outf) if l.startswith(("summary:", "totals:"))), 0))
            total = statistics.median(totals)
            per[n] = total / n
            spread = f" (runs {min(totals)/1e6:.1f} to {max(totals)/1e6:.1f} M)" if len(totals) > 1 else ""
            print(f"  {n:>4} steps: {total/1e6:9.1f} M instructions, {per[n]/1e3:8.1f} K per step{spread}")
        flat = max(per.values()) / min(per.values())
        print(f"  per-step spread 100..800: {flat:.2f}x (target <= 1.10): {'OK' if flat <= 1.10 else 'OVER'}")
        # The chain that needs the shell (`true;`, SHELL=/bin/sh), 200 steps.
        write(d, "csh200.yaml", chain_yaml(200, "true;"))
        outf = os.path.join(d, "cg.sh200")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={outf}", awf, "run", "csh200.yaml"],
                       cwd=d, env=sh, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        total = next((int(l.split()[1]) for l in open(outf) if l.startswith(("summary:", "totals:"))), 0)
        print(f"  200 steps needing the shell (SHELL=/bin/sh): {total/1e6:9.1f} M instructions, {total/200/1e3:8.1f} K per step")

    print(f"awf: {awf}  reps: {reps}  (A/B alternate; ratio = A/B per pair: min / median / max)")
    print(f"{'case':<11} {'A':<32} {'B':<22} {'A med':>9} {'B med':>9} {'min':>6} {'median':>7} {'max':>6} {'target':>7}")
    for case, la, lb, ta, tb, rmin, rmed, rmax, target, ok, unit in ROWS:
        if ok == "":
            print(f"{case:<11} {la:<32} {lb:<22} {ta:>7.1f}{unit}")
            continue
        if ok == "info":
            print(f"{case:<11} {la:<32} {lb:<22} {ta:>7.1f}{unit} {tb:>7.1f}{unit} {rmin:>6.2f} {rmed:>7.2f} {rmax:>6.2f}   (no target)")
            continue
        print(f"{case:<11} {la:<32} {lb:<22} {ta:>7.1f}{unit} {tb:>7.1f}{unit} {rmin:>6.2f} {rmed:>7.2f} {rmax:>6.2f} {target:>6.2f}x {ok}")


if __name__ == "__main__":
    main()
