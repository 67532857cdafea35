#!/usr/bin/env bash
# Instructions the server executes per fresh C-102 run and per MCP `tools/call`,
# counted by valgrind's callgrind: the same binary and inputs give the same count
# whatever else the machine is doing, so a change worth 2% shows where wall-clock
# series on two shared cores cannot. Also prints the functions with the largest
# inclusive share of a run, to say where the instructions go.
#
#   tests/load/instructions.sh sqlite|postgres [path/to/caseops] [RUNS] [CALLS]
#
# The server runs under callgrind (≈ 50× slower); it is warmed up with 20 runs,
# then its counters are zeroed and dumped around RUNS runs at c=1 and CALLS calls.
# A release build with line tables names functions and lines:
# `CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release …`.
# CASEOPS_CALLGRIND_KEEP=DIR keeps the two dumps there (runs first), for
# `callgrind_annotate` or kcachegrind.
set -euo pipefail
backend=$1
bin=${2:-target/release/caseops}
runs=${3:-200}
calls=${4:-2000}
here=$(cd "$(dirname "$0")" && pwd)
for tool in valgrind callgrind_control callgrind_annotate; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed (Debian: apt-get install valgrind)" >&2; exit 2; }
done
case $backend in
  sqlite|postgres) ;;
  *) echo "usage: $0 sqlite|postgres [BIN] [RUNS] [CALLS]" >&2; exit 2 ;;
esac
out=$(mktemp -d /tmp/caseops_instructions.XXXXXX)
serve_wrapper=(valgrind --tool=callgrind --callgrind-out-file="$out/cg.out")
# Under callgrind the server takes far longer to start.
serve_wait_tries=600
also_remove=("$out")
. "$here/fresh_server.sh"
fresh_server "$backend" "$bin" caseops_instructions
bench() { "$bin" bench "${api[@]}" --concurrency 1 --warmup 0 --json "$@" >/dev/null; }

bench --scenario agent-run --requests 20
bench --scenario mcp-call --requests 200
callgrind_control --zero "$pid" >/dev/null
bench --scenario agent-run --requests "$runs"
callgrind_control --dump=runs "$pid" >/dev/null
callgrind_control --zero "$pid" >/dev/null
bench --scenario mcp-call --requests "$calls"
callgrind_control --dump=calls "$pid" >/dev/null

# Each dump is a file of its own beside the output file, named by its number.
dumps=("$out"/cg.out.*)
if [ -n "${CASEOPS_CALLGRIND_KEEP:-}" ]; then
  mkdir -p "$CASEOPS_CALLGRIND_KEEP" && cp "${dumps[@]}" "$CASEOPS_CALLGRIND_KEEP/"
fi
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}'; }
# SQLite's WAL checkpoints run on a thread woken by writes after a fixed 20 ms:
# under callgrind a run takes ≈ 50× longer, so each checkpoint covers far fewer
# runs than at full speed. The second figure leaves them out.
checkpoints() {
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk '/sqlite3\.c:sqlite3WalCheckpoint / {gsub(",", "", $1); if ($1 > m) m = $1} END {print m + 0}'
}
run_ir=$(total "${dumps[0]}")
call_ir=$(total "${dumps[1]}")
run_cp=$(checkpoints "${dumps[0]}")
echo "$backend instructions_per_run=$((run_ir / runs)) without_wal_checkpoints=$(((run_ir - run_cp) / runs)) instructions_per_call=$((call_ir / calls))"
echo "-- largest inclusive shares of a run's instructions (callgrind_annotate --inclusive=yes)"
callgrind_annotate --inclusive=yes --threshold=99 "${dumps[0]}" 2>/dev/null |
  awk -v total="$run_ir" '/^ *[0-9,]+ \(/ && n < 60 {ir = $1; gsub(",", "", ir); $1 = ""; $2 = ""; printf "%5.1f%%  %s\n", 100 * ir / total, $0; n++}'
