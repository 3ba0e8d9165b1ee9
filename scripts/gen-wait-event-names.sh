#!/usr/bin/env bash
# Derives the wait event names of PostgreSQL major versions from their own binaries: for each
# PG_BIN_DIR, starts a throwaway cluster, and in one idle backend calls, through gdb, the
# functions pg_stat_activity calls to name wait_event_info (pgstat_get_wait_event_type,
# pgstat_get_wait_event) for every class and every id below 256. Each version's table
# ({ serverVersionNum, classes: { <class id>: { type, events: { <id>: name } } or { type, every: name } } })
# is then merged by scripts/merge-wait-event-names.mjs into one TypeScript module, each name with
# the range of majors giving it (VersionedWaitEventTable, src/families/waits/wait-event-names.ts).
#   usage: scripts/gen-wait-event-names.sh PG_BIN_DIR... > src/families/waits/wait-event-table.ts
# Give one binary per consecutive major (14 to 18). Run as root (gdb attaches to the backend; the
# cluster runs as the postgres OS user).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: gen-wait-event-names.sh PG_BIN_DIR..." >&2; exit 2; }
for dir in "$@"; do [ -x "$dir/postgres" ] || { echo "gen-wait-event-names: $dir/postgres not found" >&2; exit 2; }; done
# Any psql talks to any of these servers (the embedded builds ship none).
psql=$(command -v psql)
tables=$(mktemp -d /tmp/wait-event-tables.XXXXXX)
work=""
bin=""
cleanup() {
  if [ -n "$work" ]; then
    runuser -u postgres -- "$bin/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
    if [ -n "${held:-}" ]; then kill "$held" 2>/dev/null || true; fi
    rm -rf "$work"
  fi
  held=""
  work=""
}
trap 'cleanup; rm -rf "$tables"' EXIT
# One version's table as JSON, into $tables/<server_version_num>.json.
extract() {
bin=$(realpath "$1")
work=$(mktemp -d /tmp/wait-event-names.XXXXXX)
chown postgres "$work"
runuser -u postgres -- "$bin/initdb" -D "$work/data" -A trust >/dev/null
port=$((20000 + RANDOM % 10000))
runuser -u postgres -- "$bin/pg_ctl" -D "$work/data" -o "-p $port -k $work -c listen_addresses=''" -l "$work/log" -w start >/dev/null
# One backend kept asleep in pg_sleep while gdb calls into it.
runuser -u postgres -- "$psql" -h "$work" -p "$port" -d postgres -Atc "select pg_sleep(600)" >/dev/null 2>&1 &
held=$!
for _ in $(seq 50); do
  pid=$(runuser -u postgres -- "$psql" -h "$work" -p "$port" -d postgres -Atc "select pid from pg_stat_activity where query = 'select pg_sleep(600)'")
  [ -n "$pid" ] && break; sleep 0.1
done
version=$(runuser -u postgres -- "$psql" -h "$work" -p "$port" -d postgres -Atc "show server_version_num")
# Classes 1..10 (0x01..0x0A); 17+ also have 0x0B (InjectionPoint), whose ids are all custom (never asked:
# naming an unregistered custom id raises an error inside the backend), as are Extension ids above 0 on 17+.
major=$((version / 10000))
cat > "$work/gdb" <<GDB
set pagination off
set confirm off
set \$class = 1
while \$class <= 11
  set \$type = ((const char *(*)(unsigned int)) pgstat_get_wait_event_type)(\$class << 24)
  printf "T\t%u\t%s\n", \$class, \$type
  set \$last = 255
  if (\$class == 7 || \$class == 11) && $major >= 17
    set \$last = 0
  end
  if \$class == 11 && $major < 17
    set \$last = -1
  end
  set \$id = 0
  while \$id <= \$last
    set \$name = ((const char *(*)(unsigned int)) pgstat_get_wait_event)((\$class << 24) | \$id)
    if \$name != 0
      printf "E\t%u\t%u\t%s\n", \$class, \$id, \$name
    end
    set \$id = \$id + 1
  end
  set \$class = \$class + 1
end
detach
GDB
gdb -q -batch -nx -p "$pid" -x "$work/gdb" 2>/dev/null | grep -P '^[TE]\t' | node -e '
  const lines = require("fs").readFileSync(0, "utf8").trim().split("\n").map((l) => l.split("\t"));
  const unknown = new Set(["???", "unknown wait event", "extension"]);
  const classes = {};
  for (const [kind, cls, a, b] of lines) {
    if (kind === "T") { if (!unknown.has(a)) classes[cls] = { type: a, events: {} }; continue; }
    if (classes[cls] && !unknown.has(b)) classes[cls].events[a] = b;
  }
  for (const c of Object.values(classes)) {
    // A class whose every id gets one name (BufferPin, Extension on 14-16) is named so whatever the id.
    const names = new Set(Object.values(c.events));
    if (Object.keys(c.events).length === 256 && names.size === 1) { c.every = [...names][0]; delete c.events; }
  }
  process.stdout.write(JSON.stringify({ serverVersionNum: Number(process.argv[1]), classes }));
' "$version" > "$tables/$version.json"
cleanup
}
for dir in "$@"; do extract "$dir"; done
node "$(dirname "$0")/merge-wait-event-names.mjs" "$tables"/*.json
