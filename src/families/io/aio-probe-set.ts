import type { TargetProbe } from '../../collector/probe-attachment.js';
import { ElfFile } from '../../target/elf-file.js';
import type { PostmasterTarget } from '../../target/postmaster-target.js';
import type { ProbeSet } from '../family.js';

/*
 * PostgreSQL 18's io workers (bpf/aio.bpf.h): the functions where a backend hands its IO
 * handles to the workers and where a worker performs one. Both exist in 18's symbol tables
 * (pgaio_worker_submit is static but not inlined: it is the worker method's submit callback).
 */
const SUBMIT = 'pgaio_worker_submit';
const PERFORM = 'pgaio_io_perform_synchronously';

/** Which of the two functions each binary lacks, read once per binary: the ELF read is not free. */
const missingCache = new Map<string, string[]>();
function missingFunctions(binaryPath: string): string[] {
  let missing = missingCache.get(binaryPath);
  if (!missing) {
    const symbols = ElfFile.read(binaryPath).symbols();
    missing = [SUBMIT, PERFORM].filter((name) => symbols.get(name)?.type !== 2);
    missingCache.set(binaryPath, missing);
  }
  return missing;
}

/**
 * Why the io-worker attribution has nothing to do here, or null where it is needed and can run.
 *
 * @example
 * aioUnsupportedReason({ majorVersion: 15, ioMethod: 'sync', binaryPath: '/usr/lib/postgresql/15/bin/postgres' });
 * // 'PostgreSQL 15 has no io workers: backends do their own IO (set io covers it)'
 */
export function aioUnsupportedReason(target: Pick<PostmasterTarget, 'majorVersion' | 'ioMethod' | 'binaryPath'>): string | null {
  if (!(target.majorVersion >= 18)) return `PostgreSQL ${target.majorVersion} has no io workers: backends do their own IO (set io covers it)`;
  if (target.ioMethod !== 'worker') {
    return target.ioMethod === 'io_uring'
      ? 'io_method = io_uring: IO is submitted from the backend itself, and io_uring\'s own worker threads belong to its thread group (set io covers it)'
      : `io_method = ${target.ioMethod}: backends do their own IO (set io covers it)`;
  }
  const missing = missingFunctions(target.binaryPath);
  return missing.length ? `${target.binaryPath} has no function ${missing.join(', ')}` : null;
}

export const AIO_PROBE_SET: ProbeSet<'aio'> = {
  name: 'aio',
  description: 'PostgreSQL 18 io workers: block IO a worker performs for a backend is charged to that backend and its query (and to the worker)',
  default: true,
  whereSupported: true,
  unsupportedReason: ({ target }) => aioUnsupportedReason(target),
  attachments: [
    {
      kind: 'target',
      probes: (): TargetProbe[] => [
        { program: 'on_aio_submit', symbol: SUBMIT, retprobe: false },
        { program: 'on_aio_perform', symbol: PERFORM, retprobe: false },
        { program: 'on_aio_perform_rt', symbol: PERFORM, retprobe: true },
      ],
    },
  ],
  cost: 'PostgreSQL 18 with io_method = worker only: one uprobe trap per submitted batch of IOs in the backend, a uprobe and a uretprobe per IO in the worker; nothing for reads served from shared buffers',
};
