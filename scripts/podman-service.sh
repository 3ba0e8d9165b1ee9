#!/usr/bin/env bash
# Starts podman's API service on the socket the container tests use, with the project's
# containers.conf, unless one already answers there. It stays up for later runs (no timeout).
set -euo pipefail
cd "$(dirname "$0")/.."
socket=/run/pg-bpf-stats/podman.sock
# A copy beside the socket: the service outlives the checkout that started it (a CI clone).
mkdir -p /run/pg-bpf-stats
cp scripts/podman/containers.conf /run/pg-bpf-stats/containers.conf
export CONTAINERS_CONF=/run/pg-bpf-stats/containers.conf
answers() { podman --remote --url "unix://$socket" version >/dev/null 2>&1; }
answers && exit 0
rm -f "$socket"
echo "bootstrap: starting podman's API service on $socket"
setsid podman system service --time=0 "unix://$socket" </dev/null >>/var/log/pg-bpf-stats-podman.log 2>&1 &
for _ in $(seq 100); do
  answers && exit 0
  sleep 0.2
done
echo "bootstrap: podman's API service did not answer on $socket within 20 s; see /var/log/pg-bpf-stats-podman.log" >&2
exit 2
