#!/usr/bin/env bash
# A flame graph of the server's own CPU while it serves fresh C-102 runs one at a
# time: `caseops serve` on a fresh database, 300 runs of warm-up, then `perf
# record --call-graph dwarf` on the server for SECONDS of `caseops bench
# --concurrency 1`, folded and drawn by inferno. The database server's own work is
# not in it; frames under 1% of the samples are left out. Prints the bench's rate and p50 while recorded.
#
#   tests/load/flamegraph.sh sqlite|postgres [path/to/caseops] [OUT.svg] [SECONDS]
#
# Needs `perf` and inferno (`cargo install inferno`; its binaries on PATH). A
# release build with line tables names frames well:
# `CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release …`.
set -euo pipefail
backend=$1
bin=${2:-target/release/caseops}
out=${3:-$backend-c102.svg}
seconds=${4:-7}
for tool in perf inferno-collapse-perf inferno-flamegraph; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed (perf: Debian's linux-perf; inferno: cargo install inferno)" >&2; exit 2; }
done
. "$(cd "$(dirname "$0")" && pwd)/fresh_server.sh"
fresh_server "$backend" "$bin" caseops_flamegraph
"$bin" bench "${api[@]}" --scenario agent-run --concurrency 1 --requests 300 --warmup 0 --json >/dev/null
perf record -F 499 --call-graph dwarf -o "$work/perf.data" -p "$pid" -- sleep "$seconds" 2>/dev/null &
recorder=$!
sleep 0.5
bench=$("$bin" bench "${api[@]}" --scenario agent-run --concurrency 1 --duration "$((seconds - 1))" --warmup 0 --json)
wait "$recorder"
perf script -i "$work/perf.data" 2>/dev/null | inferno-collapse-perf | inferno-flamegraph --minwidth 1 --title "caseops serve, C-102 runs at c=1, $backend" >"$out"
python3 -c "import json,sys; b=json.loads(sys.argv[1]); print(f\"runs/s while recorded: {b['requests_per_second']:.1f}, p50 {b['p50_ms']:.3f} ms, errors: {b['errors']}\")" "$bench"
