#!/usr/bin/env bash
# One measurement series against a fresh database: `caseops bench` and `wrk` for
# fresh C-102 runs, `caseops bench` and `wrk` for MCP `tools/call`, with the server's CPU time
# per run and per call, its RSS and the bytes stored per run. Prints one line per figure.
#
#   tests/load/series.sh sqlite|postgres [path/to/caseops]
#
# PostgreSQL: a database `caseops_series` on $CASEOPS_SERIES_PG (default
# postgres://postgres@127.0.0.1:5432) is dropped and created. Ports 18080/18081.
set -euo pipefail
backend=$1
bin=${2:-target/release/caseops}
here=$(cd "$(dirname "$0")" && pwd)
for tool in wrk python3; do
  # Without it the series would stop half-way with a line of empty figures.
  command -v "$tool" >/dev/null || { echo "$tool is not installed (Debian: apt-get install $tool)" >&2; exit 2; }
done
dur=${CASEOPS_SERIES_SECONDS:-5}
. "$here/fresh_server.sh"
fresh_server "$backend" "$bin" caseops_series
cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
tick=$(getconf CLK_TCK)
runs() { "$bin" bench "${api[@]}" --scenario agent-run --concurrency 1 --requests 1 --warmup 0 --json >/dev/null; }
runs
for c in 1 8; do
  out=$("$bin" bench "${api[@]}" --scenario agent-run --concurrency $c --duration "$dur" --warmup 1 --json)
  python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(f\"$backend bench agent-run c=$c req/s={r['requests_per_second']:.1f} p50={r['p50_ms']:.3f} p99={r['p99_ms']:.3f} errors={r['errors']}\")" "$out"
done
# The server's CPU time (user + system) over a counted number of runs at c=8.
before=$(cpu)
"$bin" bench "${api[@]}" --scenario agent-run --concurrency 8 --requests 1000 --warmup 0 --json >/dev/null
after=$(cpu)
echo "$backend cpu_ms_per_run=$(python3 -c "print(round(($after - $before) / $tick * 1000 / 1000, 2))")"
for c in 1 8; do
  t=$([ $c = 1 ] && echo 1 || echo 2)
  wrk -t$t -c$c -d${dur}s --latency -s "$here/run.lua" http://127.0.0.1:18080 2>"$work/wrk.err" |
    awk -v b="$backend" -v c="$c" '/Requests\/sec/ {rps=$2} /^ +50%/ {p50=$2} /^ +99%/ {p99=$2} /Non-2xx/ {bad=$5} END {print b " wrk agent-run c=" c " req/s=" rps " p50=" p50 " p99=" p99 " non2xx=" (bad ? bad : 0)}'
done
out=$("$bin" bench "${api[@]}" --scenario mcp-call --concurrency 32 --duration "$dur" --warmup 1 --json)
python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(f\"$backend bench mcp-call c=32 req/s={r['requests_per_second']:.0f} p50={r['p50_ms']:.3f} errors={r['errors']}\")" "$out"
# The same call from wrk, a client lighter than the bench's: on two shared cores
# the load tool's own CPU bounds the rate either measures. The reply is checked
# once first (wrk counts only non-2xx answers, not a tool error inside a 200).
"$bin" bench "${api[@]}" --scenario mcp-call --print-request >"$work/mcp-call.http"
curl -s --max-time 5 "http://127.0.0.1:18081/mcp" -H "$(grep -i '^authorization:' "$work/mcp-call.http" | tr -d '\r')" \
  -H 'accept: application/json, text/event-stream' -H 'content-type: application/json' \
  --data "$(tail -n 1 "$work/mcp-call.http")" | grep -q '"isError":false' ||
  { echo "the printed mcp-call request is not answered with a tool result" >&2; exit 1; }
CASEOPS_WRK_REQUEST="$work/mcp-call.http" wrk -t2 -c32 -d${dur}s --latency -s "$here/fixed.lua" http://127.0.0.1:18081 2>"$work/wrk.err" |
  awk -v b="$backend" '/Requests\/sec/ {rps=$2} /^ +50%/ {p50=$2} /Non-2xx/ {bad=$5} END {print b " wrk mcp-call c=32 req/s=" rps " p50=" p50 " non2xx=" (bad ? bad : 0)}'
# The server's CPU time per `tools/call` over a counted number of calls at c=32.
before=$(cpu)
"$bin" bench "${api[@]}" --scenario mcp-call --concurrency 32 --requests 20000 --warmup 0 --json >/dev/null
after=$(cpu)
echo "$backend cpu_us_per_call=$(python3 -c "print(round(($after - $before) / $tick * 1e6 / 20000, 1))")"
echo "$backend rss_kb=$(awk '/VmRSS/ {print $2}' /proc/$pid/status) hwm_kb=$(awk '/VmHWM/ {print $2}' /proc/$pid/status)"
