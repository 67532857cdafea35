# Sourced by the load scripts: `fresh_server BACKEND BIN DBNAME` starts `caseops
# serve` (ports 18080/18081) on a fresh database and sets `pid` (the server),
# `work` (a scratch folder, removed on exit) and `api` (the bench's target flags).
# PostgreSQL: database DBNAME on $CASEOPS_SERIES_PG (default
# postgres://postgres@127.0.0.1:5432) is dropped and created. SQLite:
# $CASEOPS_SQLITE_SETUP, if set, is SQL the `sqlite3` CLI runs on the new file
# before it is migrated (e.g. `PRAGMA page_size = 8192; PRAGMA journal_mode = WAL`,
# to try a page size with the same binary). A caller may set `serve_wrapper`, an
# array put before the serve command (e.g. valgrind), `serve_wait_tries` (tries of
# 0.2 s for the server to answer, 50 unless set) and `also_remove`, an array of
# further paths removed on exit.
fresh_server() {
  local backend=$1 bin=$2 name=$3 db
  local pg=${CASEOPS_SERIES_PG:-postgres://postgres@127.0.0.1:5432}
  work=$(mktemp -d "/tmp/$name.XXXXXX")
  case $backend in
    sqlite) db="sqlite://$work/caseops.db" ;;
    postgres)
      psql -q "$pg/postgres" -c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name" >/dev/null
      db="$pg/$name" ;;
    *) echo "usage: $0 sqlite|postgres …" >&2; exit 2 ;;
  esac
  if [ "$backend" = sqlite ] && [ -n "${CASEOPS_SQLITE_SETUP:-}" ]; then
    sqlite3 "$work/caseops.db" "$CASEOPS_SQLITE_SETUP" >/dev/null
  fi
  "$bin" migrate --database "$db" >/dev/null
  ${serve_wrapper[@]+"${serve_wrapper[@]}"} "$bin" serve --database "$db" --listen 18080 --mcp-listen 18081 --log-level error >"$work/serve.log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work" ${also_remove[@]+"${also_remove[@]}"}' EXIT
  for _ in $(seq 1 "${serve_wait_tries:-50}"); do curl -fs http://127.0.0.1:18080/health/ready >/dev/null 2>&1 && break; sleep 0.2; done
  api=(--api http://127.0.0.1:18080 --mcp http://127.0.0.1:18081/mcp)
}
