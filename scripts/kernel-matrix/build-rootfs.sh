#!/usr/bin/env bash
# The kernel matrix's root filesystem as an initramfs (the whole root is the initramfs: no disk,
# so no virtio_blk or 9p module is needed in the guest): the container tests' Debian 12 image
# with PostgreSQL 15 (localhost/pg-bpf-stats-test-postgres:15-bookworm, built by
# scripts/container-images.sh --bases), plus what the npm package needs to run there:
#   - Node.js >= 20.19: this machine's node binary (NodeSource's build for Debian 12; Debian 12's
#     own nodejs is 18), with any shared library it links that the image lacks;
#   - libbpf1 and libelf1: the files of this machine's Debian 12 packages (what
#     `apt-get install libbpf1 libelf1` puts on a Debian 12 host; zlib is in the image);
#   - a cluster in /var/lib/postgresql/data, made by the image's own initdb (trust, local only).
# The package itself and the guest's /init are a second, small archive the test makes per run
# (scripts/kernel-matrix/boot.sh appends it), so a rebuilt package does not rebuild this one.
#
# Cached machine-wide under a key of everything it is made of (the image's id, node's and the
# libraries' contents, this script), so a rerun only prints the path; prints the path last.
#
#   bash scripts/kernel-matrix/build-rootfs.sh
# docs/kernel-matrix.md
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${KERNEL_MATRIX_CACHE:-/var/cache/pg-bpf-stats-kernel-matrix}
image=localhost/pg-bpf-stats-test-postgres:15-bookworm
export CONTAINERS_CONF="$root/scripts/podman/containers.conf"

fail() {
  echo "build-rootfs: $*" >&2
  exit 2
}
[[ $(id -u) -eq 0 ]] || fail "needs root (podman's storage, the cache $cache)"
for tool in podman cpio gzip; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (apt-get install podman cpio)"
done
node=$(readlink -f "$(command -v node)") || fail "node is not on PATH"
"$node" -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)' ||
  fail "$node is $("$node" --version): the package needs Node.js >= 20.19"

if ! podman image exists "$image"; then
  echo "build-rootfs: $image is missing: building the base images (scripts/container-images.sh --bases)" >&2
  bash "$root/scripts/container-images.sh" --bases >&2
fi

# The library files of Debian's packages, as this machine has them installed.
libs=()
for pkg in libbpf1 libelf1; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
    fail "$pkg is not installed here (apt-get install $pkg)"
  while IFS= read -r f; do
    [[ -f $f || -L $f ]] && [[ $f == */lib/* ]] && libs+=("$f")
  done < <(dpkg -L "$pkg")
done

mkdir -p "$cache/rootfs"
exec 8>"$cache/.lock"
flock 8

image_id=$(podman image inspect --format '{{.Id}}' "$image")
key=$( {
  echo "$image_id"
  sha256sum "$node" "${libs[@]}" "$here/build-rootfs.sh" | cut -d' ' -f1
} | sha256sum | cut -c1-16)
out=$cache/rootfs/rootfs-$key.cpio
if [[ -s $out ]]; then
  echo "$out"
  exit 0
fi

started=$SECONDS
echo "build-rootfs: building $out (from $image, $node $("$node" --version))" >&2
tmp=$(mktemp -d "$cache/rootfs/.work.XXXXXX")
mounted=
cleanup() {
  [[ -n $mounted ]] && podman image unmount "$image" >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
mnt=$(podman image mount "$image")
mounted=1

# What the image lacks: node, the libraries node links that are not in the image, libbpf, libelf.
extra=$tmp/extra
mkdir -p "$extra/usr/local/bin" "$extra/sys/fs/bpf"
cp "$node" "$extra/usr/local/bin/node"
while read -r lib; do
  [[ -e $mnt$lib ]] && continue
  mkdir -p "$extra$(dirname "$lib")"
  cp -L "$lib" "$extra$lib"
done < <(ldd "$node" | grep -o '/[^ ]*' | sort -u)
for f in "${libs[@]}"; do
  mkdir -p "$extra$(dirname "$f")"
  cp -a "$f" "$extra$f"
done

# The cluster the guest starts, made here with the image's own initdb (a chroot into the
# image; only the data directory is written): initdb under TCG took 10-40 s of each guest.
pgdata=$tmp/pgdata
mkdir -p "$pgdata/var/lib/postgresql"
unshare -m sh -ec '
  mnt=$1 out=$2
  mount -t tmpfs -o mode=755 tmpfs "$mnt/var/lib/postgresql"
  mount -t tmpfs tmpfs "$mnt/tmp"
  mount --rbind /dev "$mnt/dev"
  mount -t proc proc "$mnt/proc"
  chroot "$mnt" chown postgres:postgres /var/lib/postgresql
  chroot "$mnt" setpriv --reuid=postgres --regid=postgres --init-groups /usr/lib/postgresql/15/bin/initdb \
    -D /var/lib/postgresql/data -U postgres --auth=trust --no-locale -E UTF8 --no-sync >/dev/null
  tar -C "$mnt/var/lib/postgresql" -cf - . | tar -C "$out" -xpf -
' sh "$mnt" "$pgdata/var/lib/postgresql" || fail "initdb in $image failed"

# Three archives in one file: the kernel unpacks each in turn (the image's root first). Not
# compressed: under TCG the guest's gunzip of the root took most of its boot. Left out of the
# image's root, to halve what the guest unpacks: documentation, locales, and LLVM with
# PostgreSQL's JIT bitcode (the guest's server runs with jit=off).
skip=(./usr/share/doc ./usr/share/man ./usr/share/info ./usr/share/locale ./usr/share/i18n
  ./usr/lib/postgresql/15/lib/bitcode ./usr/lib/postgresql/15/lib/llvmjit.so
  './usr/lib/x86_64-linux-gnu/libLLVM-*' './usr/lib/x86_64-linux-gnu/libz3.so*')
prune=()
for p in "${skip[@]}"; do prune+=(-path "$p" -o); done
{
  (cd "$mnt" && find . \( "${prune[@]}" -false \) -prune -o -print0 | cpio --null -o -H newc --quiet)
  (cd "$extra" && find . -print0 | cpio --null -o -H newc --quiet -R 0:0)
  (cd "$pgdata" && find . -print0 | cpio --null -o -H newc --quiet)
} >"$tmp/rootfs.cpio"
mv "$tmp/rootfs.cpio" "$out"
# Bounded: the newest three root filesystems stay (another checkout may use its own).
ls -t "$cache"/rootfs/rootfs-*.cpio* | tail -n +4 | xargs -r rm -f
echo "build-rootfs: built in $((SECONDS - started)) s ($(du -m "$out" | cut -f1) MB)" >&2
echo "$out"
