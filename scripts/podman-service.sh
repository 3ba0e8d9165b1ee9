#!/usr/bin/env bash
# Starts podman's API service on the socket the container tests use, with the project's
# containers.conf, unless one already answers there. It stays up for later runs (no timeout).
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="$PWD/scripts/podman/containers.conf"
socket=/run/pg-bpf-stats/podman.sock
answers() { podman --remote --url "unix://$socket" version >/dev/null 2>&1; }
answers && exit 0
mkdir -p /run/pg-bpf-stats
rm -f "$socket"
echo "bootstrap: starting podman's API service on $socket"
setsid podman system service --time=0 "unix://$socket" </dev/null >>/var/log/pg-bpf-stats-podman.log 2>&1 &
for _ in $(seq 100); do
  answers && exit 0
  sleep 0.2
done
echo "bootstrap: podman's API service did not answer on $socket within 20 s; see /var/log/pg-bpf-stats-podman.log" >&2
exit 2
