#!/usr/bin/env bash
# Runs the whole test suite. Installs what the tests need by itself:
#   - PyYAML for the shared conformance runner (../shared/conformance/run.py), into .cache/py
#   - the pinned agent CLIs (claude, codex, gemini, opencode) from npm, into .cache/npm
#   - the MCP clients (Python `mcp` SDK, MCP Inspector CLI and Node 22), scripts/install-peers.sh
#   - strace (Debian), which tests/tests/perf_startup.rs traces awf's own system calls with
#   - PostgreSQL (Debian's `postgresql`), started privately by scripts/pg.sh for the shared-store
#     tests (AWF_TEST_PG_URL names it; each test makes its own database) and stopped at the end
# then builds the `awf` binary the end-to-end tests drive and runs every test
# (cargo nextest when installed, else cargo test).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/retry.sh
source scripts/retry.sh

cache="$PWD/.cache"
mkdir -p "$cache/py"
export PYTHONPATH="$cache/py${PYTHONPATH:+:$PYTHONPATH}"
if ! python3 -c 'import yaml' 2>/dev/null; then
  echo "installing PyYAML into $cache/py"
  retry python3 -m pip install --quiet --disable-pip-version-check --target "$cache/py" 'pyyaml==6.0.2'
fi

if ! command -v strace >/dev/null 2>&1; then
  echo "installing strace (Debian)"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get install -y -q strace >/dev/null || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q strace >/dev/null; }
fi

./scripts/install-agents.sh
./scripts/install-peers.sh

# A private PostgreSQL server (scripts/pg.sh), unless the caller names one.
if [ -z "${AWF_TEST_PG_URL:-}" ]; then
  AWF_TEST_PG_URL="$(./scripts/pg.sh start)"
  trap './scripts/pg.sh stop' EXIT
fi
export AWF_TEST_PG_URL

cargo build --locked -p awf
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --locked --workspace --no-fail-fast "$@"
else
  cargo test --locked --workspace --no-fail-fast "$@"
fi
