#!/usr/bin/env bash
# Everything pg-bpf-stats needs on a fresh Debian machine: system packages, npm packages, the
# BPF objects, the native binding and the TypeScript build. Each step is skipped when already
# done, so `npm run demo` and `npm test` can both call it every time. `--tests` (npm test) also
# starts podman's API service and builds the container tests' base images.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(clang clang-format llvm libbpf-dev libelf-dev zlib1g-dev pkg-config bpftool binutils make g++ python3 gdb
          postgresql postgresql-contrib postgresql-15-pg-wait-sampling util-linux util-linux-extra systemd prometheus
          sysbench chromium podman runc catatonit debootstrap qemu-system-x86 cpio)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "bootstrap: missing packages ${missing[*]}; run as root (or apt-get install them)" >&2
    exit 2
  fi
  echo "bootstrap: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Pinning BPF links and maps (the native binding's pin/unpin, tested by npm test) needs a BPF
# filesystem at /sys/fs/bpf, which systemd mounts but a fresh VM or container may not.
if [[ $(stat -f -c %T /sys/fs/bpf 2>/dev/null) != bpf_fs ]]; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "bootstrap: /sys/fs/bpf is not a BPF filesystem; as root: mount -t bpf bpf /sys/fs/bpf" >&2
    exit 2
  fi
  echo "bootstrap: mounting the BPF filesystem at /sys/fs/bpf"
  mkdir -p /sys/fs/bpf
  mount -t bpf bpf /sys/fs/bpf
fi

if [[ ! -e node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
  echo "bootstrap: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
fi

bash scripts/build.sh

# Container tests (test/integration/containers.test.ts): podman's API socket, which
# testcontainers speaks Docker's API to, and the base images, built once per machine
# (docs/containers-and-standbys.md#real-containers-podman). Root only, as the tests are.
if [[ ${1:-} == --tests && $(id -u) -eq 0 ]]; then
  bash scripts/podman-service.sh
  bash scripts/container-images.sh --bases
fi
