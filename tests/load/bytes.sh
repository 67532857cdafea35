#!/usr/bin/env bash
# Bytes stored per C-102 run, per table: RUNS fresh runs through the API on a fresh
# database, then the size of every stored value (`length()` of each column on
# SQLite, `pg_column_size(row)` on PostgreSQL) divided by the runs, and the file /
# database size per run. On SQLite also the file's pages per run by table and index
# (`dbstat`, so the `sqlite3` CLI must have it, as Debian's does): a table's pages
# can hold much less than a page of values each.
#
#   tests/load/bytes.sh sqlite|postgres [path/to/caseops] [RUNS]
set -euo pipefail
backend=$1
bin=${2:-target/release/caseops}
n=${3:-200}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/fresh_server.sh"
fresh_server "$backend" "$bin" caseops_bytes
url=${CASEOPS_SERIES_PG:-postgres://postgres@127.0.0.1:5432}/caseops_bytes
size_now() {
  case $backend in
    sqlite) sqlite3 "$work/caseops.db" "PRAGMA wal_checkpoint(TRUNCATE)" >/dev/null; stat -c %s "$work/caseops.db" ;;
    postgres) psql -qtA "$url" -c "CHECKPOINT" -c "SELECT pg_database_size(current_database())" | tail -n 1 ;;
  esac
}
base=$(size_now)
"$bin" bench "${api[@]}" --scenario agent-run --concurrency 2 --requests "$n" --warmup 0 --json >/dev/null
case $backend in
  sqlite)
    grown=$(( $(size_now) - base ))
    python3 - "$work/caseops.db" "$grown" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
runs = c.execute("SELECT count(*) FROM runs").fetchone()[0]
total = 0
for (t,) in c.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").fetchall():
    cols = [r[1] for r in c.execute(f"PRAGMA table_info({t})")]
    size = sum(c.execute(f"SELECT coalesce(sum(length(CAST({col} AS BLOB))), 0) FROM {t}").fetchone()[0] for col in cols)
    rows = c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
    if size / runs >= 10:
        print(f"sqlite {t}: {rows / runs:.1f} rows/run, {size / runs:.0f} bytes/run")
    total += size
print(f"sqlite values: {total / runs:.0f} bytes/run over {runs} runs; the file grew {int(sys.argv[2]) / runs / 1024:.1f} KB/run")
PY
    runs=$(sqlite3 "$work/caseops.db" "SELECT count(*) FROM runs")
    sqlite3 -separator ' ' "$work/caseops.db" "SELECT name, count(*), sum(pgsize) FROM dbstat GROUP BY name ORDER BY sum(pgsize) DESC" |
      awk -v runs="$runs" '$3 / runs >= 100 {printf "sqlite file %s: %d pages, %.0f bytes/run\n", $1, $2, $3 / runs}'
    ;;
  postgres)
    runs=$(psql -qtA "$url" -c "SELECT count(*) FROM runs")
    total=0
    for t in $(psql -qtA "$url" -c "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename NOT LIKE '\\_%'"); do
      read -r rows size < <(psql -qtA -F ' ' "$url" -c "SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0) FROM $t t")
      total=$((total + size))
      [ $((size / runs)) -ge 10 ] && echo "postgres $t: $(python3 -c "print(f'{$rows / $runs:.1f} rows/run, {$size / $runs:.0f} bytes/run')")"
    done
    grown=$(( $(size_now) - base ))
    echo "postgres values: $((total / runs)) bytes/run over $runs runs; the database grew $(python3 -c "print(f'{$grown / $runs / 1024:.1f}')") KB/run"
    ;;
esac
