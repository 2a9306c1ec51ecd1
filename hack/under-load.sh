#!/usr/bin/env bash
# Run the README's test command (tox) several times in a row while stress-ng keeps every core
# busy: a test that only passes on an idle machine fails here. Stops at the first failing run.
#
#   hack/under-load.sh [RUNS] [tox arguments...]      e.g. hack/under-load.sh 3 -e unit,integration
#
# RUNS defaults to 3; the load to one stress-ng CPU worker per core (UNDER_LOAD_WORKERS to change).
# Each run's outcome and duration go to stdout and to $CACHE_ROOT/under-load.log.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
cd "$REPO_ROOT"

runs=${1:-3}
[[ $# -gt 0 ]] && shift
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive number (got '$runs'); usage: hack/under-load.sh [RUNS] [tox arguments...]"
workers=${UNDER_LOAD_WORKERS:-$(nproc)}
if ! command -v stress-ng >/dev/null; then
  [[ $(id -u) == 0 ]] || die "stress-ng is not installed: sudo apt-get install stress-ng"
  log "installing stress-ng (Debian)"
  apt-get install -y -q stress-ng >/dev/null || die "apt-get install stress-ng failed: run 'apt-get update' first"
fi
command -v tox >/dev/null || die "tox is not installed: python3 -m pip install 'tox>=4,<5'"
mkdir -p "$CACHE_ROOT"
record="$CACHE_ROOT/under-load.log"

stress_pid=
stop_load() { [[ -n $stress_pid ]] && kill "$stress_pid" 2>/dev/null && wait "$stress_pid" 2>/dev/null; stress_pid=; }
trap stop_load EXIT

for run in $(seq 1 "$runs"); do
  stress-ng --cpu "$workers" --timeout 0 --quiet &
  stress_pid=$!
  log "run $run of $runs: tox $* with $workers stress-ng CPU workers busy (pid $stress_pid)"
  started=$(date +%s)
  if tox "$@"; then outcome=passed; else outcome=failed; fi
  stop_load
  line="$(date -u +%FT%TZ) run $run of $runs ${outcome} in $(( $(date +%s) - started )) s: tox $*, $workers stress-ng CPU workers, $(git rev-parse --short HEAD)"
  echo "$line" | tee -a "$record"
  [[ $outcome == passed ]] || die "run $run failed under load: its output is above; the runs so far are in $record"
done
log "all $runs runs passed under load ($record)"
