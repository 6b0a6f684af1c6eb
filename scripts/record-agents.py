#!/usr/bin/env python3
"""Record the real stdout of the agent CLIs (claude, codex, gemini, opencode) against awf-mock-llm.

For every CLI and scenario this runs the CLI headless (fresh HOME and TMPDIR, stdin </dev/null,
a minimal environment, a wall-clock timeout) against a freshly started mock, and writes

    infrastructure/agents/tests/fixtures/<cli>/<scenario>.ndjson   stdout, verbatim
    infrastructure/agents/tests/fixtures/<cli>/<scenario>.stderr   stderr, verbatim
    infrastructure/agents/tests/fixtures/<cli>/<scenario>.exit     exit code (one line)

Scenarios: text, tool, error, resume-1 + resume-2 (the second turn resumes the first's session).
The exact environment, flags and config are documented in the fixtures README.

Usage: scripts/record-agents.py [--only claude,codex] [--scenarios text,tool] [--keep]
Needs: scripts/install-agents.sh (run automatically) and `cargo build -p awf-mock-llm` (run automatically).
Source: ../shared/spec/agents-offline.md
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "infrastructure" / "agents" / "tests" / "fixtures"
WORK = Path(os.environ.get("AWF_RECORD_DIR", "/tmp/awf-record"))
TIMEOUT = 120
API_KEY = "sk-test"

TEXT = "hello from mock"
TOOL_TEXT = "done after tool"
P_TEXT = "say hi"
P_TOOL = "run the marker tool"
P_ERROR = "trigger the error"
P_R1 = "remember the word ZEBRA"
P_R2 = "what word?"

# The tool each CLI is asked to call (name as offered by that CLI, with arguments it accepts).
TOOLS = {
    "claude": {"name": "Bash", "args": {"command": "echo hi-from-tool", "description": "echo marker"}},
    "codex": {"name": "exec_command", "args": {"cmd": "echo hi-from-tool"}},
    "gemini": {"name": "run_shell_command", "args": {"command": "echo hi-from-tool", "description": "echo marker"}},
    "opencode": {"name": "bash", "args": {"command": "echo hi-from-tool", "description": "echo marker"}},
}


def script_for(cli):
    """One script serves every scenario: rules keyed on the prompt text, never on order."""
    return {
        "rules": [
            {"when_last_user_contains": P_TOOL, "when_has_tools": True,
             "reply": {"text": TOOL_TEXT, "tool": TOOLS[cli]}},
            {"when_last_user_contains": P_ERROR, "reply": {"status": 400, "error_message": "mock bad request"}},
            {"when_last_user_contains": "what word", "when_any_user_contains": "ZEBRA",
             "reply": {"text": "the word was ZEBRA", "usage": {"input": 23, "output": 5}}},
            {"when_last_user_contains": "what word", "reply": {"text": "no earlier turn was sent"}},
            {"when_last_user_contains": "ZEBRA", "reply": {"text": "first answer ALPHA", "usage": {"input": 13, "output": 3}}},
        ],
        "default": {"text": TEXT},
    }


def base_env(home, tmp, bin_dir):
    return {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
    }


def setup_claude(ctx):
    ctx["env"].update({
        "ANTHROPIC_BASE_URL": ctx["url"],
        "ANTHROPIC_API_KEY": API_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    })


def argv_claude(ctx, prompt, scenario, session):
    a = ["claude", "-p", prompt, "--output-format", "stream-json", "--verbose"]
    if session:
        a += ["-r", session]
    return a


def codex_flags(ctx):
    return [
        "-c", "model_provider=mock",
        "-c", "model=mock-model",
        "-c", "model_providers.mock.name=Mock",
        "-c", f"model_providers.mock.base_url={ctx['url']}/v1",
        "-c", "model_providers.mock.env_key=MOCK_API_KEY",
        "-c", "model_providers.mock.wire_api=responses",
        "-c", "analytics.enabled=false",
        "--disable", "plugins",
    ]


def setup_codex(ctx):
    ctx["env"]["MOCK_API_KEY"] = API_KEY


def argv_codex(ctx, prompt, scenario, session):
    if session:
        # awf's order: `codex exec resume <id> --json <prompt>`; the provider flags are repeated.
        return ["codex", "exec", *codex_flags(ctx), "--skip-git-repo-check", "resume", session, "--json", prompt]
    return ["codex", "exec", "--json", "--skip-git-repo-check", *codex_flags(ctx), prompt]


def setup_gemini(ctx):
    gdir = ctx["home"] / ".gemini"
    gdir.mkdir(parents=True, exist_ok=True)
    (gdir / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
    }))
    ctx["env"].update({
        "GEMINI_API_KEY": API_KEY,
        "GOOGLE_GEMINI_BASE_URL": ctx["url"],
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    })


def argv_gemini(ctx, prompt, scenario, session):
    a = ["gemini", "-p", prompt, "-o", "stream-json", "-m", "gemini-2.5-flash"]
    if scenario == "tool":
        a.append("--approval-mode=yolo")
    if session:
        a += ["--resume", session]
    return a


def setup_opencode(ctx):
    cfg = ctx["base"] / "opencode.json"  # outside the cwd's ancestors (cwd is base/work)
    cfg.write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json",
        "model": "mock/mock-model",
        "small_model": "mock/mock-model",
        "autoupdate": False,
        "share": "disabled",
        "provider": {"mock": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Mock",
            "options": {"baseURL": f"{ctx['url']}/v1", "apiKey": API_KEY},
            "models": {"mock-model": {"name": "Mock Model", "tool_call": True,
                                      "limit": {"context": 200000, "output": 8192}}},
        }},
    }, indent=2))
    ctx["env"].update({
        "OPENCODE_CONFIG": str(cfg),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
    })


def argv_opencode(ctx, prompt, scenario, session):
    a = ["opencode", "run", "--format", "json"]
    if session:
        a += ["-s", session]
    return a + [prompt]


def session_of(cli, stdout):
    for line in stdout.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if cli == "claude" and ev.get("type") == "result":
            return ev.get("session_id")
        if cli == "codex" and ev.get("type") == "thread.started":
            return ev.get("thread_id")
        if cli == "gemini" and ev.get("type") == "init":
            return ev.get("session_id")
        if cli == "opencode" and ev.get("sessionID"):
            return ev["sessionID"]
    return None


CLIS = {
    "claude": (setup_claude, argv_claude),
    "codex": (setup_codex, argv_codex),
    "gemini": (setup_gemini, argv_gemini),
    "opencode": (setup_opencode, argv_opencode),
}
PROMPTS = {"text": P_TEXT, "tool": P_TOOL, "error": P_ERROR}


def start_mock(mock_bin, script_path, log_path):
    p = subprocess.Popen([str(mock_bin), "--script", str(script_path), "--log", str(log_path)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    if not line.startswith("listening on "):
        p.kill()
        sys.exit(f"mock did not start: {line!r}")
    return p, line[len("listening on "):]


def run(ctx, argv, out_stem):
    t0 = time.monotonic()
    try:
        cp = subprocess.run(argv, cwd=ctx["cwd"], env=ctx["env"], stdin=subprocess.DEVNULL,
                            capture_output=True, timeout=TIMEOUT)
        rc, out, err = cp.returncode, cp.stdout, cp.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, e.stdout or b"", (e.stderr or b"") + b"\n[record-agents: timed out]\n"
    dt = time.monotonic() - t0
    out_stem.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{out_stem}.ndjson").write_bytes(out)
    Path(f"{out_stem}.stderr").write_bytes(err)
    Path(f"{out_stem}.exit").write_text(f"{rc}\n")
    return rc, out.decode("utf-8", "replace"), dt


def summarize_log(log_path, since):
    rows = []
    if log_path.exists():
        for line in log_path.read_text().splitlines()[since:]:
            r = json.loads(line)
            rows.append(f"{r['method']} {r['path']} -> {r['status']} [{r.get('matched')}]")
    return rows


def record(cli, scenarios, mock_bin, bin_dir, keep):
    setup, argv_fn = CLIS[cli]
    results = []
    for scenario in scenarios:
        base = WORK / cli / scenario
        shutil.rmtree(base, ignore_errors=True)
        home, tmp, cwd = base / "home", base / "tmp", base / "work"
        for d in (home, tmp, cwd):
            d.mkdir(parents=True)
        script_path = base / "script.json"
        script_path.write_text(json.dumps(script_for(cli), indent=2))
        log_path = base / "requests.jsonl"
        mock, url = start_mock(mock_bin, script_path, log_path)
        try:
            ctx = {"base": base, "home": home, "cwd": cwd, "url": url,
                   "env": base_env(home, tmp, bin_dir)}
            setup(ctx)
            out_dir = FIXTURES / cli
            if scenario == "resume":
                rc1, out1, dt1 = run(ctx, argv_fn(ctx, P_R1, scenario, None), out_dir / "resume-1")
                n1 = len(summarize_log(log_path, 0))
                sid = session_of(cli, out1)
                results.append((cli, "resume-1", rc1, dt1, summarize_log(log_path, 0)))
                if not sid:
                    results.append((cli, "resume-2", None, 0, ["no session id in turn 1"]))
                    continue
                rc2, _, dt2 = run(ctx, argv_fn(ctx, P_R2, scenario, sid), out_dir / "resume-2")
                results.append((cli, "resume-2", rc2, dt2, summarize_log(log_path, n1)))
            else:
                rc, _, dt = run(ctx, argv_fn(ctx, PROMPTS[scenario], scenario, None), out_dir / scenario)
                results.append((cli, scenario, rc, dt, summarize_log(log_path, 0)))
        finally:
            mock.kill()
            mock.wait()
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    if not keep:
        shutil.rmtree(WORK / cli, ignore_errors=True)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="claude,codex,gemini,opencode")
    ap.add_argument("--scenarios", default="text,tool,error,resume")
    ap.add_argument("--keep", action="store_true", help=f"keep the work dirs under {WORK}")
    a = ap.parse_args()

    bin_dir = subprocess.run([str(ROOT / "scripts" / "install-agents.sh")], check=True,
                             capture_output=True, text=True).stdout.strip().splitlines()[-1]
    subprocess.run(["cargo", "build", "-q", "-p", "awf-mock-llm"], cwd=ROOT, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    mock_bin = target / "debug" / "awf-mock-llm"

    all_results = []
    for cli in a.only.split(","):
        all_results += record(cli, a.scenarios.split(","), mock_bin, bin_dir, a.keep)
    for cli, scenario, rc, dt, reqs in all_results:
        print(f"{cli:9} {scenario:9} exit={rc} {dt:5.1f}s")
        for r in reqs:
            print(f"    {r}")


if __name__ == "__main__":
    main()
