#!/usr/bin/env bash
# Where PostgreSQL's own CPU goes during fresh C-102 runs: `caseops serve` on a
# fresh database, 300 warm-up runs, then `perf record -a -g` for SECONDS of runs at
# concurrency C. Prints, for the `postgres` processes only, the share of their
# samples spent in the kernel and in each of a few stages of a statement (a
# stage's share includes what it calls; frame-pointer call chains, so a share is
# a lower bound where a frame is missing).
#
#   C=8 tests/load/pg_profile.sh [path/to/caseops] [SECONDS]
#
# Needs `perf` (Debian: linux-perf) and the right to record every CPU (root, or
# kernel.perf_event_paranoid ≤ 0). Database `caseops_series` on
# $CASEOPS_SERIES_PG is dropped and created.
set -euo pipefail
bin=${1:-target/release/caseops}
secs=${2:-7}
c=${C:-8}
here=$(cd "$(dirname "$0")" && pwd)
command -v perf >/dev/null || { echo "perf is not installed (Debian: apt-get install linux-perf)" >&2; exit 2; }
. "$here/fresh_server.sh"
fresh_server postgres "$bin" caseops_series
"$bin" bench "${api[@]}" --scenario agent-run --concurrency "$c" --requests 300 --warmup 0 --json >/dev/null
perf record -q -F 499 -g -a -o "$work/perf.data" -- sleep "$secs" >/dev/null 2>&1 &
recorder=$!
out=$("$bin" bench "${api[@]}" --scenario agent-run --concurrency "$c" --duration "$secs" --warmup 0 --json)
wait "$recorder" || true
python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(f\"c=$c runs/s={r['requests_per_second']:.1f} p50={r['p50_ms']:.2f}\")" "$out"
perf script -i "$work/perf.data" --comm postgres -F ip,sym 2>/dev/null | python3 -c '
import sys
stages = [
    ("kernel (leaf frame)", None),
    ("statements (PortalRun)", "PortalRun"),
    ("  executor start-up (standard_ExecutorStart)", "standard_ExecutorStart"),
    ("  row updates (heap_update)", "heap_update"),
    ("  row inserts (heap_insert)", "heap_insert"),
    ("  TOAST: compressing or moving long values (heap_toast_insert_or_update)", "heap_toast_insert_or_update"),
    ("    of which pglz compression (pglz_compress)", "pglz_compress"),
    ("  index entries (ExecInsertIndexTuples)", "ExecInsertIndexTuples"),
    ("finding the cached plan (GetCachedPlan)", "GetCachedPlan"),
    ("commits (CommitTransactionCommand)", "CommitTransactionCommand"),
    ("  WAL flush (XLogFlush)", "XLogFlush"),
    ("reading client messages (pq_getbyte)", "pq_getbyte"),
    ("sending to the client (sendto)", "__x64_sys_sendto"),
    ("WAL writer process (WalWriterMain)", "WalWriterMain"),
]
counts = {name: 0 for name, _ in stages}
total = 0
for sample in sys.stdin.read().split("\n\n"):
    frames = [l.split(None, 1) for l in sample.strip().split("\n") if l.strip()]
    if not frames:
        continue
    total += 1
    names = {f[1] for f in frames if len(f) == 2}
    for name, sym in stages:
        if sym is None:
            counts[name] += frames[0][0].startswith("ffffffff")
        elif sym in names:
            counts[name] += 1
print(f"postgres samples: {total}")
for name, _ in stages:
    print(f"{100 * counts[name] / max(total, 1):5.1f}%  {name}")
'
