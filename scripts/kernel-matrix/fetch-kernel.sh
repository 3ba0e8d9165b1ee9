#!/usr/bin/env bash
# One of Debian's cloud kernels for the kernel matrix (test/integration/kernel-matrix.test.ts),
# downloaded from Debian's archive through a PRIVATE apt state (this machine's apt lists and
# sources are not touched) and cached machine-wide: the newest linux-image-<SERIES>…-cloud-amd64
# of the series' suites, its vmlinuz extracted (from linux-binary-* where newer packages keep it).
# Prints the vmlinuz's path last; its package and version are in `source` beside it.
#
#   bash scripts/kernel-matrix/fetch-kernel.sh 6.1          # 6.1 | 6.12 | 6.19 | 5.10
#   KERNEL_MATRIX_REFRESH=1 bash scripts/kernel-matrix/fetch-kernel.sh 6.1   # re-read the archive's index now
#
# The archive's index is read again when it is more than a week old (a point release replaces
# the kernel); a kernel once extracted is kept under its package's name and version, which
# Debian never reuses for other contents, so a rerun reads nothing from the network.
# docs/kernel-matrix.md
set -euo pipefail
series=${1:?usage: fetch-kernel.sh SERIES (6.1, 6.12, 6.19 or 5.10)}
cache=${KERNEL_MATRIX_CACHE:-/var/cache/pg-bpf-stats-kernel-matrix}
# The mirror host this machine's own sources use.
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-${mirror%/debian}/debian-security}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

fail() {
  echo "fetch-kernel: $*" >&2
  exit 2
}
[[ $(id -u) -eq 0 ]] || fail "needs root (the cache is machine-wide: $cache)"
[[ -r $keyring ]] || fail "$keyring is missing: apt-get install debian-archive-keyring"

# Series -> the release whose index holds it (one private apt state per release).
case $series in
  6.1 | 6.12) release=bookworm sources="deb [signed-by=$keyring] $mirror bookworm main
deb [signed-by=$keyring] $security bookworm-security main" ;;
  6.19) release=trixie-backports sources="deb [signed-by=$keyring] $mirror trixie-backports main" ;;
  5.10) release=bullseye sources="deb [signed-by=$keyring] $mirror bullseye main
deb [signed-by=$keyring] $security bullseye-security main" ;;
  *) fail "unknown series $series (6.1, 6.12, 6.19 or 5.10)" ;;
esac

mkdir -p "$cache"
# Two runs at once (two checkouts, a run by hand) share the cache: one writer at a time.
exec 8>"$cache/.lock"
flock 8

state=$cache/apt/$release
mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$cache/kernels"
printf '%s\n' "$sources" >"$state/sources.list.new"
apt_opts=(-o "Dir::Etc::SourceList=$state/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache" -o Dir::State::Status=/dev/null
  -o Acquire::Languages=none -o APT::Get::List-Cleanup=0 -o Debug::NoLocking=1 -q)
stamp=$state/lists/.updated
if ! cmp -s "$state/sources.list.new" "$state/sources.list" 2>/dev/null || [[ ! -e $stamp ]] ||
  [[ -n ${KERNEL_MATRIX_REFRESH:-} ]] || [[ -n $(find "$stamp" -mtime +7) ]]; then
  mv "$state/sources.list.new" "$state/sources.list"
  echo "fetch-kernel: reading $release's index from $mirror" >&2
  ok=
  for attempt in 1 2 3; do
    if apt-get "${apt_opts[@]}" update >"$state/update.log" 2>&1 && ! grep -q '^[WE]:' "$state/update.log"; then
      ok=1
      break
    fi
    sleep $((attempt * 5))
  done
  [[ -n $ok ]] || fail "apt-get update of $release from $mirror failed 3 times: $(grep '^[WE]:' "$state/update.log" | head -n 3)"
  touch "$stamp"
else
  rm -f "$state/sources.list.new"
fi

# The newest image of the series: linux-image-6.1.0-57-cloud-amd64, linux-image-6.12.118+deb12-cloud-amd64, ...
pattern="^linux-image-${series//./\\.}[.-][^ ]*-cloud-amd64$"
package=$(apt-cache "${apt_opts[@]}" pkgnames linux-image- | grep -E "$pattern" | sort -V | tail -n 1)
[[ -n $package ]] || fail "no package matching $pattern in $release's index"
version=$(apt-cache "${apt_opts[@]}" show "$package" | sed -n 's/^Version: //p' | sort -V | tail -n 1)
entry=$cache/kernels/${package}_$version
if [[ -s $entry/vmlinuz && -s $entry/source ]] && (cd "$entry" && sha256sum --quiet -c vmlinuz.sha256); then
  echo "$entry/vmlinuz"
  exit 0
fi

work=$(mktemp -d "$cache/kernels/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
download() { # package=version into $work, retried; apt checks it against the signed index
  local attempt
  for attempt in 1 2 3; do
    (cd "$work" && apt-get "${apt_opts[@]}" download "$1" >>"$work/download.log" 2>&1) && return 0
    sleep $((attempt * 5))
  done
  fail "apt-get download $1 failed 3 times: $(tail -n 3 "$work/download.log")"
}
echo "fetch-kernel: downloading $package $version" >&2
download "$package=$version"
deb=$(ls "$work"/*.deb)
dpkg-deb -x "$deb" "$work/root"
from="$package $version"
if ! compgen -G "$work/root/boot/vmlinuz-*" >/dev/null; then
  # Newer images depend on linux-binary-<abi> for the kernel itself.
  binary=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed -n 's/^ *\(linux-binary-[^ ]*\) (= \([^)]*\)).*/\1=\2/p' | head -n 1)
  [[ -n $binary ]] || fail "$package $version holds no /boot/vmlinuz-* and depends on no linux-binary-*"
  download "$binary"
  dpkg-deb -x "$(ls "$work"/linux-binary-*.deb)" "$work/root"
  from="$from (kernel from ${binary/=/ })"
fi
vmlinuz=$(compgen -G "$work/root/boot/vmlinuz-*" | head -n 1)
[[ -n $vmlinuz ]] || fail "no /boot/vmlinuz-* in $from"
mkdir "$work/entry"
cp "$vmlinuz" "$work/entry/vmlinuz"
(cd "$work/entry" && sha256sum vmlinuz >vmlinuz.sha256)
printf '%s\n' "$from" "$(basename "$vmlinuz")" >"$work/entry/source"
rm -rf "$entry"
mv "$work/entry" "$entry"
echo "$entry/vmlinuz"
