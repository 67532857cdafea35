#!/usr/bin/env bash
# What PostgreSQL itself spends on fresh C-102 runs through the API: `caseops
# serve` on a fresh database, 300 warm-up runs, then RUNS runs at concurrency C
# with the CPU time of every `postgres` process and of the server per run, the
# runs table's updates and HOT updates and its TOAST rows inserted and deleted
# (counted over the RUNS runs only), the WAL records and bytes per run, and from
# `pg_stat_statements` each statement's calls, execution time and WAL records.
#
#   C=8 tests/load/pg_cost.sh [path/to/caseops] [RUNS]
#
# Needs `pg_stat_statements` preloaded (`ALTER SYSTEM SET shared_preload_libraries
# = 'pg_stat_statements'`, then a restart of the database server; `ALTER SYSTEM
# RESET …` and a restart undo it) and an otherwise idle machine: the CPU figures
# count every `postgres` process. $CASEOPS_PG_SETUP, if set, is SQL run on the
# fresh database before the first run (to compare a schema change by hand).
# Database `caseops_series` on $CASEOPS_SERIES_PG is dropped and created.
set -euo pipefail
bin=${1:-target/release/caseops}
n=${2:-2000}
c=${C:-8}
here=$(cd "$(dirname "$0")" && pwd)
pg=${CASEOPS_SERIES_PG:-postgres://postgres@127.0.0.1:5432}
if ! psql -Atq "$pg/postgres" -c "SHOW shared_preload_libraries" | grep -q pg_stat_statements; then
  echo "pg_stat_statements is not preloaded: see the comment at the top of $0" >&2
  exit 2
fi
. "$here/fresh_server.sh"
fresh_server postgres "$bin" caseops_series
if [ -n "${CASEOPS_PG_SETUP:-}" ]; then
  # After the migrations, before any run is written.
  psql -q "$pg/caseops_series" -c "$CASEOPS_PG_SETUP" >/dev/null
fi
"$bin" bench "${api[@]}" --scenario agent-run --concurrency "$c" --requests 300 --warmup 0 --json >/dev/null
psql -q "$pg/caseops_series" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT pg_stat_statements_reset()" -c "SELECT pg_stat_reset()" >/dev/null
tick=$(getconf CLK_TCK)
pg_cpu() { local t=0; for p in $(pgrep -u postgres postgres); do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0))); done; echo $t; }
server_cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
pg0=$(pg_cpu); s0=$(server_cpu)
out=$("$bin" bench "${api[@]}" --scenario agent-run --concurrency "$c" --requests "$n" --warmup 0 --json)
pg1=$(pg_cpu); s1=$(server_cpu)
python3 - "$out" "$pg0" "$pg1" "$s0" "$s1" "$tick" "$n" "$c" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
pg0, pg1, s0, s1, tick, n = (int(x) for x in sys.argv[2:8])
ms = lambda a, b: (b - a) / tick * 1000 / n
print(f"c={sys.argv[8]} runs/s={r['requests_per_second']:.1f} p50={r['p50_ms']:.2f} "
      f"postgres_cpu_ms_per_run={ms(pg0, pg1):.2f} server_cpu_ms_per_run={ms(s0, s1):.2f}")
PY
psql -Atq "$pg/caseops_series" -F ' ' \
  -c "SELECT 'runs_updates=' || n_tup_upd, 'hot=' || n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'runs'" \
  -c "SELECT 'toast_rows_written_per_run=' || round((n_tup_ins + n_tup_del) / $n.0, 2) FROM pg_stat_all_tables WHERE relid = (SELECT reltoastrelid FROM pg_class WHERE relname = 'runs')" \
  -c "SELECT 'wal_records_per_run=' || round(sum(wal_records) / $n.0, 1), 'wal_bytes_per_run=' || round(sum(wal_bytes) / $n.0) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'caseops_series')"
echo "calls exec_ms_per_call wal_records statement"
psql -Atq "$pg/caseops_series" -F ' ' -c "SELECT calls, round((total_exec_time / calls)::numeric, 3), wal_records, left(regexp_replace(query, '\s+', ' ', 'g'), 90)
  FROM pg_stat_statements WHERE calls > 0 AND dbid = (SELECT oid FROM pg_database WHERE datname = 'caseops_series')
  ORDER BY total_exec_time DESC LIMIT 12"
