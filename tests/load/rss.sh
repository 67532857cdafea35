#!/usr/bin/env bash
# The server's resident memory as fresh C-102 runs accumulate: `caseops serve` on a
# fresh database, then RUNS runs through the API (`caseops bench` agent-run, c=8) in
# ten slices, printing runs done, RSS and peak RSS after each.
#
#   tests/load/rss.sh sqlite|postgres [path/to/caseops] [RUNS]   (default 100000)
#
# PostgreSQL: a database `caseops_rss` on $CASEOPS_SERIES_PG (default
# postgres://postgres@127.0.0.1:5432) is dropped and created. Ports 18080/18081.
set -euo pipefail
backend=$1
bin=${2:-target/release/caseops}
total=${3:-100000}
. "$(cd "$(dirname "$0")" && pwd)/fresh_server.sh"
fresh_server "$backend" "$bin" caseops_rss
rss() { awk '/VmRSS/ {r=$2} /VmHWM/ {h=$2} END {print "rss_kb=" r " hwm_kb=" h}' "/proc/$pid/status"; }
echo "$backend runs=0 $(rss)"
slice=$((total / 10))
done_runs=0
for _ in $(seq 1 10); do
  out=$("$bin" bench "${api[@]}" --scenario agent-run --concurrency 8 --requests "$slice" --warmup 0 --json)
  done_runs=$((done_runs + slice))
  errors=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['errors'])" "$out")
  echo "$backend runs=$done_runs $(rss) errors=$errors"
done
