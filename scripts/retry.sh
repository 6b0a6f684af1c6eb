# shellcheck shell=bash
# Sourced by scripts/install-agents.sh and scripts/install-peers.sh.
#
# retry <command...>: runs the command up to 4 times, waiting 5, 15 and 30 seconds between tries,
# since a registry download (npm, PyPI, Debian) can fail once on a dropped connection or a 5xx
# and succeed the next time. Returns the last try's exit status. After a failed npm command it
# prints the end of npm's newest debug log on stderr, since `--loglevel=error` says only
# "A complete log of this run can be found in ..." and that file is gone with the CI machine.
retry() {
  local waits=(5 15 30) status=0 try
  for try in 0 1 2 3; do
    "$@" && return 0
    status=$?
    if [[ "$1" == npm ]]; then
      local log
      log="$(ls -t "${HOME:-/root}"/.npm/_logs/*-debug-*.log 2>/dev/null | head -n 1 || true)"
      if [[ -n "$log" ]]; then
        echo "retry: the end of $log:" >&2
        grep -E 'verbose (stack|statusCode|url|error|code)|error ' "$log" | tail -n 15 >&2 || true
      fi
    fi
    if ((try < 3)); then
      echo "retry: '$*' failed (exit $status); trying again in ${waits[$try]} s" >&2
      sleep "${waits[$try]}"
    fi
  done
  return "$status"
}
