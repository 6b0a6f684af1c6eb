#!/usr/bin/env bash
# Installs the pinned AI coding-agent CLIs (claude, codex, gemini, opencode) from npm into
# .cache/npm, for the offline end-to-end tests (see ../shared/spec/agents-offline.md).
#
# Idempotent: when every pinned package is already installed at the pinned version, nothing is
# downloaded. Prints the bin directory (absolute path) as the last stdout line.
#
# Exit status: 0 when all four CLIs are installed. When the install fails, the script exits 1
# if CI is set (so a CI job fails loudly); otherwise it warns on stderr and exits 0 so that a
# developer machine without network can still run the tests that do not need the CLIs.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/retry.sh
source scripts/retry.sh

prefix="$PWD/.cache/npm"
bin="$prefix/node_modules/.bin"

# package@version pins; keep in sync with infrastructure/agents/tests/fixtures/README.md
pins=(
  "@anthropic-ai/claude-code@2.1.197"
  "@openai/codex@0.171.0"
  "@google/gemini-cli@0.61.0"
  "opencode-ai@1.18.33"
)

fail() {
  echo "install-agents: $*" >&2
  if [[ -n "${CI:-}" ]]; then
    exit 1
  fi
  echo "install-agents: continuing without the agent CLIs (set CI to make this fatal)" >&2
  exit 0
}

# installed_version <package>: prints the version recorded in its package.json, or nothing.
installed_version() {
  local manifest="$prefix/node_modules/$1/package.json"
  [[ -f "$manifest" ]] || return 0
  node -e 'try { process.stdout.write(require(process.argv[1]).version || "") } catch (e) {}' "$manifest"
}

missing=()
for pin in "${pins[@]}"; do
  name="${pin%@*}"
  want="${pin##*@}"
  have="$(installed_version "$name")"
  if [[ "$have" != "$want" ]]; then
    missing+=("$pin")
  fi
done
# The bin links must exist too (a half-finished install can leave manifests behind).
for b in claude codex gemini opencode; do
  if [[ ! -x "$bin/$b" ]]; then
    missing=("${pins[@]}")
    break
  fi
done

if ((${#missing[@]} > 0)); then
  command -v npm >/dev/null 2>&1 || fail "npm not found on PATH"
  mkdir -p "$prefix"
  echo "install-agents: installing ${missing[*]} into $prefix" >&2
  # Install all pins together so the prefix's package.json lists every one of them.
  if ! retry npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "${pins[@]}" >&2; then
    fail "npm install failed"
  fi
  for pin in "${pins[@]}"; do
    name="${pin%@*}"
    want="${pin##*@}"
    have="$(installed_version "$name")"
    [[ "$have" == "$want" ]] || fail "$name: installed '$have', wanted '$want'"
  done
  for b in claude codex gemini opencode; do
    [[ -x "$bin/$b" ]] || fail "binary $bin/$b missing after install"
  done
else
  echo "install-agents: all pinned CLIs already installed" >&2
fi

# The ACP adapters of `provider: acp` (tests/tests/acp_provider.rs): their own prefix, since
# they bring their own claude and codex builds (about 800 MB). They run on Node 22
# (scripts/install-peers.sh puts it in .cache/mcp-npm); `gemini --acp` is the gemini above.
acp_prefix="$PWD/.cache/acp-agents"
acp_pins=(
  "@agentclientprotocol/claude-agent-acp@0.101.0"
  "@agentclientprotocol/codex-acp@2.6.0"
)
acp_missing=0
for pin in "${acp_pins[@]}"; do
  name="${pin%@*}"
  [[ -f "$acp_prefix/node_modules/$name/package.json" ]] || { acp_missing=1; continue; }
  have="$(node -e 'try { process.stdout.write(require(process.argv[1]).version || "") } catch (e) {}' "$acp_prefix/node_modules/$name/package.json")"
  [[ "$have" == "${pin##*@}" ]] || acp_missing=1
done
for b in claude-agent-acp codex-acp; do
  [[ -x "$acp_prefix/node_modules/.bin/$b" ]] || acp_missing=1
done
if ((acp_missing)); then
  mkdir -p "$acp_prefix"
  echo "install-agents: installing ${acp_pins[*]} into $acp_prefix" >&2
  retry npm install --prefix "$acp_prefix" --no-audit --no-fund --loglevel=error "${acp_pins[@]}" >&2 \
    || fail "npm install ${acp_pins[*]} failed"
fi

echo "$bin"
