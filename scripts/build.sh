#!/usr/bin/env bash
# Builds everything that is not plain npm: the BPF objects, the native binding, the TypeScript.
# Safe to re-run; each step is skipped when its output is newer than its inputs.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p build/bpf

# vmlinux.h is generated from the running kernel, not committed: it is 2.8 MB of generated
# text, and CO-RE relocations make the object portable across kernels anyway. The collector
# needs /sys/kernel/btf/vmlinux at run time, so every host that runs it can also build it.
if [[ ! -s build/vmlinux.h ]]; then
  if [[ ! -r /sys/kernel/btf/vmlinux ]]; then
    echo "build: this kernel has no BTF (/sys/kernel/btf/vmlinux); pg-bpf-stats needs CONFIG_DEBUG_INFO_BTF=y" >&2
    exit 2
  fi
  bpftool btf dump file /sys/kernel/btf/vmlinux format c > build/vmlinux.h.tmp
  mv build/vmlinux.h.tmp build/vmlinux.h
fi

for src in bpf/*.bpf.c; do
  obj="build/bpf/$(basename "${src%.c}").o"
  if [[ ! -e "$obj" || -n "$(find "$src" bpf/*.h -newer "$obj" 2>/dev/null)" ]]; then
    echo "build: $src -> $obj"
    bash scripts/build-bpf-object.sh "$src" "$obj"
  fi
done

# The TypeScript side's names for the object's programs, maps, globals, enums and records. The
# contract is committed (a clone type-checks before any build); the stamp records when it was
# last checked against the object, and gen-contract.mjs rewrites it only when its text changes,
# so a rebuilt but identical object leaves it (and its mtime) alone.
contract=src/bpf/contract.ts
stamp=build/contract.stamp
if [[ ! -e $stamp || ! -e $contract || build/bpf/pgstats.bpf.o -nt $stamp || scripts/gen-contract.mjs -nt $stamp || $contract -nt $stamp ]]; then
  echo "build: $contract from build/bpf/pgstats.bpf.o"
  node scripts/gen-contract.mjs build/bpf/pgstats.bpf.o bpf "$contract"
  touch "$stamp"
fi

# The addon is built as the npm package ships it: one N-API build (any Node >= the engines
# floor) in prebuilds/<platform>-<arch>/, where node-gyp-build finds it at run time. The local
# prebuildify and node-gyp (devDependencies) do it: no npx, nothing fetched.
prebuilds="prebuilds/$(node -p 'process.platform + "-" + process.arch')"
addon=$(ls "$prebuilds"/*.node 2>/dev/null | head -1 || true)
if [[ -z $addon || -n "$(find native/src native/binding.gyp -newer "$addon" 2>/dev/null)" ]]; then
  for tool in prebuildify node-gyp; do
    if [[ ! -x node_modules/.bin/$tool ]]; then
      echo "build: node_modules/.bin/$tool is missing: run npm ci first (it is a devDependency)" >&2
      exit 2
    fi
  done
  # node-gyp compiles against the running node's own headers when they are installed (Debian's
  # nodejs ships them in /usr/include/node), rather than downloading them.
  prefix=$(dirname "$(dirname "$(node -p process.execPath)")")
  if [[ -z ${npm_config_nodedir:-} && -e $prefix/include/node/node_api.h ]]; then export npm_config_nodedir=$prefix; fi
  echo "build: native addon -> $prebuilds/"
  rm -rf "$prebuilds"
  if ! PREBUILD_NODE_GYP="$PWD/node_modules/.bin/node-gyp" node_modules/.bin/prebuildify \
      --napi --strip --cwd native --out . --target "node@$(node -p process.versions.node)" >build/native.log 2>&1; then
    tail -30 build/native.log >&2
    echo "build: the native addon failed to build (full log: build/native.log)" >&2
    exit 1
  fi
fi

echo "build: typescript"
node_modules/.bin/tsc -p tsconfig.json

# The command the package runs: the CLI and its dependencies in one file (scripts/bundle.mjs).
echo "build: bundle -> dist/pg-bpf-stats.cjs, launcher dist/pg-bpf-stats.js"
node scripts/bundle.mjs
