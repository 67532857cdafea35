#!/usr/bin/env bash
# Which pages SQLite writes per commit: `caseops serve` on a fresh file, WARM runs
# at c=8 (default 3,000) to give the B-trees some height, then RUNS C-102 runs at
# c=1 (default 20) with every `pwrite` of the server traced. Each WAL frame starts
# with a 24-byte header naming its page and whether it ends a commit; the pages
# are named by `dbstat` afterwards (a page split between the two may move a few).
# Prints frames per commit and per run, and per commit by table or index.
#
#   WARM=3000 tests/load/wal_frames.sh [path/to/caseops] [RUNS]
#
# Needs `strace` and `sqlite3` (with `dbstat`, as Debian's is) on the path.
set -euo pipefail
bin=${1:-target/release/caseops}
n=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/fresh_server.sh"
fresh_server sqlite "$bin" caseops_frames
"$bin" bench "${api[@]}" --scenario agent-run --concurrency 8 --requests "${WARM:-3000}" --warmup 0 --json >/dev/null
strace -f -e trace=pwrite64 -s 8 -xx -p "$pid" -o "$work/pwrite.txt" 2>/dev/null &
tracer=$!
sleep 1
"$bin" bench "${api[@]}" --scenario agent-run --concurrency 1 --requests "$n" --warmup 0 --json >/dev/null
sleep 0.5
kill "$tracer"; wait "$tracer" 2>/dev/null || true
python3 - "$work/pwrite.txt" "$work/caseops.db" "$n" <<'PY'
import collections, re, sqlite3, sys
frames = []
for line in open(sys.argv[1]):
    m = re.match(r'\d+\s+pwrite64\(\d+, "([^"]*)"\.*, 24, \d+\)', line)
    if m:
        head = bytes(int(x, 16) for x in re.findall(r'\\x([0-9a-f]{2})', m.group(1)))
        frames.append((int.from_bytes(head[:4], "big"), int.from_bytes(head[4:8], "big")))
names = dict(sqlite3.connect(sys.argv[2]).execute("SELECT pageno, name FROM dbstat"))
commits, current = [], []
for page, ends in frames:
    current.append(names.get(page, "?"))
    if ends:
        commits.append(current)
        current = []
runs = int(sys.argv[3])
print(f"{len(commits)} commits, {len(frames)} frames: {len(frames) / len(commits):.2f} per commit, {len(frames) / runs:.1f} per run")
per = collections.Counter(name for c in commits for name in c)
for name, count in per.most_common():
    print(f"  {count / len(commits):5.2f}  {name}")
PY
