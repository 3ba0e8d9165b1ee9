#!/usr/bin/env bash
# The container images the container tests run, built without a registry: Debian root
# filesystems from Debian's archive (debootstrap), imported into podman ONCE per machine and
# reused after (podman's storage is the machine's, not the checkout's), and the collector's
# image from this checkout's npm package (deploy/container/Containerfile), rebuilt only when
# the package changed. Prints the collector image's name last.
#
#   bash scripts/container-images.sh              # the base images, then the collector's
#   bash scripts/container-images.sh --bases      # only the base images (bootstrap)
#
# docs/containers-and-standbys.md#real-containers-podman
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CONTAINERS_CONF="$root/scripts/podman/containers.conf"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Packages two images share (Debian 13's base) are downloaded once.
deb_cache=/var/cache/pg-bpf-stats-debootstrap

# Names the tests use (test/support/container-images.ts).
postgres15=localhost/pg-bpf-stats-test-postgres:15-bookworm
postgres17=localhost/pg-bpf-stats-test-postgres:17-trixie
collector_base=localhost/pg-bpf-stats-base:trixie
collector_repo=localhost/pg-bpf-stats

fail() {
  echo "container-images: $*" >&2
  exit 2
}
command -v podman >/dev/null || fail "podman is not installed (bash scripts/bootstrap.sh installs it)"
command -v debootstrap >/dev/null || fail "debootstrap is not installed (bash scripts/bootstrap.sh installs it)"
[[ $(id -u) -eq 0 ]] || fail "building images needs root (debootstrap, podman's storage)"

# Two checkouts bootstrapping at once build each image once.
exec 9>/run/lock/pg-bpf-stats-container-images.lock
flock 9
mkdir -p "$deb_cache"

# The postgres images start like the official postgres image does (POSTGRES_PASSWORD, then
# `postgres` with its arguments), so the pod spec in docs/ runs against them as written.
postgres_entrypoint() {
  cat <<'EOF'
#!/bin/sh
# Initialises PGDATA on first start (scram-sha-256 with POSTGRES_PASSWORD for network clients),
# then runs the server as the postgres user with the container's arguments.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
if [ "${1:-postgres}" != postgres ]; then exec "$@"; fi
[ "$#" -gt 0 ] && shift
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  [ -n "${POSTGRES_PASSWORD:-}" ] || { echo "entrypoint: POSTGRES_PASSWORD is not set" >&2; exit 2; }
  mkdir -p "$PGDATA" /run/postgresql
  chown postgres:postgres "$PGDATA" /run/postgresql
  chmod 700 "$PGDATA"
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  chown postgres "$pwfile"
  setpriv --reuid=postgres --regid=postgres --init-groups "$PGBIN/initdb" -D "$PGDATA" -U postgres --pwfile="$pwfile" \
    --auth-local=peer --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
fi
mkdir -p /run/postgresql
chown postgres:postgres /run/postgresql
# setpriv executes the server in its place: the postmaster is the container's main process.
exec setpriv --reuid=postgres --regid=postgres --init-groups "$PGBIN/postgres" -D "$PGDATA" -c listen_addresses='*' "$@"
EOF
}

# debootstrap retried (the archive is over the network), then imported with its command.
build_rootfs_image() {
  local name=$1 suite=$2 include=$3
  shift 3
  if podman image exists "$name"; then
    echo "container-images: $name exists, reused"
    return
  fi
  local dir log started=$SECONDS
  dir=$(mktemp -d /var/tmp/pg-bpf-stats-rootfs.XXXXXX)
  log=$(mktemp /tmp/pg-bpf-stats-debootstrap.XXXXXX.log)
  echo "container-images: building $name (debootstrap $suite from $mirror)"
  local attempt
  for attempt in 1 2 3; do
    if debootstrap --variant=minbase --cache-dir="$deb_cache" --include="$include" "$suite" "$dir" "$mirror" >"$log" 2>&1; then
      break
    fi
    if ((attempt == 3)); then
      rm -rf "$dir"
      fail "debootstrap of $suite from $mirror failed 3 times (the Debian archive unreachable?); last log: $log"
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    sleep $((attempt * 10))
  done
  "$@" "$dir"
  # Only what runs: no package lists or caches in the image.
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin "$dir"/var/cache/apt/archives/*.deb
  tar -C "$dir" -c . | podman import --quiet "${import_changes[@]}" - "$name" >/dev/null
  rm -rf "$dir" "$log"
  echo "container-images: $name built in $((SECONDS - started)) s"
}

install_postgres_entrypoint() {
  local major=$1 dir=$2
  postgres_entrypoint >"$dir/usr/local/bin/postgres-entrypoint"
  chmod 755 "$dir/usr/local/bin/postgres-entrypoint"
  test -x "$dir/usr/lib/postgresql/$major/bin/postgres" || fail "the $major image has no /usr/lib/postgresql/$major/bin/postgres"
  # The cluster Debian's package creates at install: the entrypoint makes its own in PGDATA.
  rm -rf "$dir/var/lib/postgresql/$major" "$dir/etc/postgresql/$major"
}

path_env='ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
for pair in "15 bookworm $postgres15" "17 trixie $postgres17"; do
  read -r major suite name <<<"$pair"
  import_changes=(--change "$path_env" --change "ENV PGBIN=/usr/lib/postgresql/$major/bin"
    --change 'ENV PGDATA=/var/lib/postgresql/data' --change 'EXPOSE 5432'
    --change 'ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]' --change 'CMD ["postgres"]')
  build_rootfs_image "$name" "$suite" "postgresql-$major" install_postgres_entrypoint "$major"
done
import_changes=(--change "$path_env")
build_rootfs_image "$collector_base" trixie nodejs,libbpf1,libelf1t64 true

[[ ${1:-} == --bases ]] && exit 0

# The collector: this checkout's npm package (prepack builds), installed as npm installs it.
stage=$(mktemp -d /var/tmp/pg-bpf-stats-image.XXXXXX)
trap 'rm -rf "$stage"' EXIT
tarball=$(npm pack --pack-destination "$stage" --loglevel=error | tail -n 1)
digest=$(sha256sum "$stage/$tarball" | cut -c1-12)
version=$(node -p 'require("./package.json").version')
image="$collector_repo:$version-$digest"
if podman image exists "$image"; then
  echo "container-images: $image exists, reused" >&2
else
  npm install -g --prefix "$stage/prefix" --prefer-offline --no-audit --no-fund --loglevel=error "$stage/$tarball" >&2
  mkdir "$stage/context"
  mv "$stage/prefix/lib/node_modules/pg-bpf-stats" "$stage/context/package"
  podman build --quiet --build-arg "BASE=$collector_base" -f deploy/container/Containerfile -t "$image" "$stage/context" >/dev/null
  echo "container-images: $image built" >&2
  # Bounded storage: the newest few collector images stay (other checkouts may be testing theirs).
  podman images --sort created --format '{{.Repository}}:{{.Tag}}' "$collector_repo" | tail -n +5 |
    xargs -r podman rmi >/dev/null 2>&1 || true
fi
echo "$image"
