#!/usr/bin/env node
// Writes deploy/seccomp/pg-bpf-stats.json: podman's default seccomp profile (containers-common's
// /usr/share/containers/seccomp.json) resolved for the collector's container and written in the
// OCI runtime-spec form that every runtime reads as a Localhost profile (containerd ignores
// containers-common's `includes`/`excludes`), with one change: bpf() and perf_event_open() are
// allowed. The default allows them only with CAP_SYS_ADMIN, which the default probe sets do not
// need; the kernel still asks for CAP_BPF and CAP_PERFMON (docs/containers-and-standbys.md#kubernetes-sidecar).
//
//   node scripts/seccomp-profile.mjs [/usr/share/containers/seccomp.json] > deploy/seccomp/pg-bpf-stats.json
import { readFileSync } from 'node:fs';

const source = JSON.parse(readFileSync(process.argv[2] ?? '/usr/share/containers/seccomp.json', 'utf8'));
// The collector's capabilities (the pod spec's `add`) and the architectures it is built for.
const CAPS = new Set(['CAP_BPF', 'CAP_PERFMON', 'CAP_SYS_PTRACE', 'CAP_DAC_READ_SEARCH']);
const ARCHES = new Set(['amd64', 'x32', 'x86', 'arm', 'arm64']);
const ALLOWED = ['bpf', 'perf_event_open'];

const applies = (rule) =>
  (rule.includes?.caps ?? []).every((c) => CAPS.has(c)) &&
  !(rule.excludes?.caps ?? []).some((c) => CAPS.has(c)) &&
  (!rule.includes?.arches?.length || rule.includes.arches.some((a) => ARCHES.has(a)));

const syscalls = [];
for (const rule of source.syscalls.filter(applies)) {
  const names = rule.names.filter((n) => !ALLOWED.includes(n));
  if (!names.length) continue;
  const out = { names, action: rule.action };
  if (rule.args?.length) out.args = rule.args;
  if (rule.errnoRet !== undefined) out.errnoRet = rule.errnoRet;
  syscalls.push(out);
}
// The two calls go to the unconditional allow list (the loop above took them out of every other rule).
const allow = syscalls.find((r) => r.action === 'SCMP_ACT_ALLOW' && !r.args);
allow.names = [...ALLOWED, ...allow.names].sort();

// x86-64 and arm64 hosts, with the 32-bit modes their kernels run (as the default's archMap).
const architectures = source.archMap
  .filter((m) => m.architecture === 'SCMP_ARCH_X86_64' || m.architecture === 'SCMP_ARCH_AARCH64')
  .flatMap((m) => [m.architecture, ...m.subArchitectures]);

const profile = { defaultAction: source.defaultAction, defaultErrnoRet: source.defaultErrnoRet, architectures, syscalls };
process.stdout.write(`${JSON.stringify(profile, null, 2)}\n`);
