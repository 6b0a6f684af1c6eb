#!/usr/bin/env python3
"""Orchestration overhead of an agent step (issue: agent steps).

Runs, alternately and against the same scripted LLM server on 127.0.0.1 (awf-mock-llm):
  A. `awf run` of a one-step claude workflow
  B. the same `claude -p <prompt> --output-format stream-json --verbose` command line directly
and prints the median wall time of each and the overhead (A - B), absolute and relative.
Target: overhead under 5% or 20 ms, whichever is larger.

Usage: benches/agent.py [--awf target/release/awf] [--mock target/release/awf-mock-llm] [--reps 9]
Needs the pinned CLIs (scripts/install-agents.sh).
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--awf", default="target/release/awf")
    ap.add_argument("--mock", default="target/release/awf-mock-llm")
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bindir = os.path.join(root, ".cache/npm/node_modules/.bin")
    if not os.path.exists(os.path.join(bindir, "claude")):
        sys.exit("claude not installed: run scripts/install-agents.sh")
    d = tempfile.mkdtemp(prefix="awf-agent-bench-")
    script = os.path.join(d, "script.json")
    with open(script, "w") as f:
        json.dump({"default": {"text": "hello from mock", "usage": {"input": 11, "output": 7}}}, f)
    mock = subprocess.Popen([os.path.abspath(a.mock), "--script", script], stdout=subprocess.PIPE, text=True)
    url = mock.stdout.readline().strip().split()[-1]
    home, tmp, work = (os.path.join(d, x) for x in ("home", "tmp", "work"))
    for x in (home, tmp, work):
        os.makedirs(x)
    env = {"PATH": bindir + ":/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": tmp, "LANG": "C.UTF-8",
           "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-test",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_MAX_RETRIES": "0",
           "XDG_DATA_HOME": os.path.join(d, "data"), "XDG_CONFIG_HOME": os.path.join(d, "config"),
           "NO_COLOR": "1", "AWF_AUDIT_LOG": "off"}
    wf = os.path.join(work, "one.yaml")
    with open(wf, "w") as f:
        f.write("name: one\nstates:\n  initial: ask\n  ask:\n    type: agent\n    provider: claude\n"
                "    prompt: say hi\n    on_success: done\n  done:\n    type: terminal\n")
    direct = ["claude", "-p", "say hi", "--output-format", "stream-json", "--verbose"]
    via_awf = [os.path.abspath(a.awf), "run", wf]

    def once(argv):
        t0 = time.perf_counter()
        p = subprocess.run(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        dt = time.perf_counter() - t0
        if p.returncode != 0:
            sys.exit(f"failed: {argv}\n{p.stderr.decode()[-2000:]}")
        return dt

    try:
        once(direct); once(via_awf)  # warm-up
        ta, tb = [], []
        for _ in range(a.reps):
            tb.append(once(direct))
            ta.append(once(via_awf))
    finally:
        mock.terminate()
        shutil.rmtree(d, ignore_errors=True)
    ma, mb = statistics.median(ta), statistics.median(tb)
    over = ma - mb
    limit = max(0.05 * mb, 0.020)
    print(f"claude -p direct : {mb*1000:8.1f} ms (median of {a.reps})")
    print(f"awf run (1 step) : {ma*1000:8.1f} ms (median of {a.reps})")
    print(f"overhead         : {over*1000:8.1f} ms ({over/mb*100:+.1f}%), target < {limit*1000:.1f} ms: {'OK' if over < limit else 'OVER'}")

if __name__ == "__main__":
    main()
