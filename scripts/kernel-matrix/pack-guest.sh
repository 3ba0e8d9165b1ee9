#!/usr/bin/env bash
# The kernel matrix's second initramfs archive, made per run: the npm package as a DBA installs
# it on a host without compilers (`npm install -g` of the packed tarball, as
# test/integration/pack.test.ts does, here into /usr/local of the guest), and the guest's /init
# with the script it runs. Small (a few MB), so a rebuilt package costs seconds.
#
#   bash scripts/kernel-matrix/pack-guest.sh pg-bpf-stats-0.1.0.tgz OUT.cpio.gz
# docs/kernel-matrix.md
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tarball=$(readlink -f "${1:?usage: pack-guest.sh PACKAGE.tgz OUT.cpio.gz}")
out=${2:?usage: pack-guest.sh PACKAGE.tgz OUT.cpio.gz}
[[ -s $tarball ]] || { echo "pack-guest: $tarball is missing" >&2; exit 2; }
stage=$(mktemp -d /tmp/pg-bpf-stats-guest.XXXXXX)
trap 'rm -rf "$stage"' EXIT
# Its dependencies from the npm registry or npm's cache, as any install.
npm install -g --prefix "$stage/usr/local" --prefer-offline --no-audit --no-fund --loglevel=error "$tarball" >&2
mkdir -p "$stage/kernel-matrix"
install -m 755 "$here/guest-init.sh" "$stage/init"
install -m 644 "$here/guest-run.mjs" "$stage/kernel-matrix/guest-run.mjs"
chmod 755 "$stage" "$stage/usr" "$stage/usr/local"
(cd "$stage" && find . -print0 | cpio --null -o -H newc --quiet -R 0:0) | gzip -1 >"$out.tmp"
mv "$out.tmp" "$out"
echo "$out"
