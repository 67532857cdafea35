#!/usr/bin/env bash
# Statements PostgreSQL receives per fresh C-102 run through the API: `caseops
# serve` on a fresh database with `log_statement = 'all'`, RUNS runs at c=1 after
# warm-up, then the lines PostgreSQL logged meanwhile, counted and grouped.
#
#   tests/load/statements.sh [path/to/caseops] [RUNS]
#
# Needs an otherwise idle database server (its log holds every database's
# statements) and its log file in $CASEOPS_PG_LOG (default: Debian's for 15).
# Database `caseops_statements` on $CASEOPS_SERIES_PG is dropped and created.
set -euo pipefail
bin=${1:-target/release/caseops}
n=${2:-10}
pg=${CASEOPS_SERIES_PG:-postgres://postgres@127.0.0.1:5432}
log=${CASEOPS_PG_LOG:-/var/log/postgresql/postgresql-15-main.log}
name=caseops_statements
psql -q "$pg/postgres" -c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name" >/dev/null
"$bin" migrate --database "$pg/$name" >/dev/null
# Set before the server opens its connections: each reads it when it starts.
psql -q "$pg/postgres" -c "ALTER DATABASE $name SET log_statement = 'all'" >/dev/null
"$bin" serve --database "$pg/$name" --listen 18090 --mcp-listen 18091 --log-level error >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do curl -fs http://127.0.0.1:18090/health/ready >/dev/null 2>&1 && break; sleep 0.2; done
api=(--api http://127.0.0.1:18090 --mcp http://127.0.0.1:18091/mcp)
"$bin" bench "${api[@]}" --scenario agent-run --concurrency 1 --requests 3 --warmup 0 --json >/dev/null
sleep 0.5
start=$(wc -l <"$log")
"$bin" bench "${api[@]}" --scenario agent-run --concurrency 1 --requests "$n" --warmup 0 --json >/dev/null
sleep 0.5
lines=$(tail -n +"$((start + 1))" "$log" | grep -E 'LOG:  (statement|execute)' || true)
echo "$lines" | sed -E 's/.*LOG:  (statement|execute [^:]*): //' | cut -c1-70 | sort | uniq -c | sort -rn
total=$(echo "$lines" | grep -c . || true)
runs=$(echo "$lines" | grep -c 'INSERT INTO runs' || true)
# The bench's own first request is a run too, hence the runs counted by creation.
echo "statements: $total, runs created: $runs, per run: $(python3 -c "print(round($total / max($runs, 1), 1))") (background lease and claim statements included)"
