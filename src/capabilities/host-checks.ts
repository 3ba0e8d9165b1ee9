import { existsSync } from 'node:fs';
import { UserError } from '../errors.js';

/** One host requirement and whether it holds. */
export interface HostCheck {
  name: string;
  ok: boolean;
  detail: string;
}

/** What the collector needs from the host before touching Postgres. */
export function hostChecks(host: { uid?: number; btfPath?: string } = {}): HostCheck[] {
  const root = (host.uid ?? process.getuid?.()) === 0;
  const btf = existsSync(host.btfPath ?? '/sys/kernel/btf/vmlinux');
  return [
    {
      name: 'privileges',
      ok: root,
      detail: root ? 'running as root' : 'not root: loading BPF and reading backend memory need root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE)',
    },
    {
      name: 'btf',
      ok: btf,
      detail: btf ? '/sys/kernel/btf/vmlinux present' : 'no BTF: this kernel lacks /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF=y is required)',
    },
  ];
}

/** Throws a UserError naming the first unmet host requirement. */
export function assertHostReady(): void {
  const failed = hostChecks().find((c) => !c.ok);
  if (failed) throw new UserError(failed.detail);
}
