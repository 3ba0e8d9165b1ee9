import type { TargetProbe } from '../../collector/probe-attachment.js';
import { UserError } from '../../errors.js';
import { ElfFile } from '../../postmaster/elf-file.js';
import { findCallSite } from '../../postmaster/find-call-site.js';
import type { PostmasterTarget } from '../../postmaster/postmaster-target.js';
import type { ProbeSet } from '../family.js';

/*
 * PostgreSQL 18's io workers (bpf/aio.bpf.h): where a backend hands its IO handles to the
 * workers, and where a worker performs one. pgaio_worker_submit is static but not inlined: it
 * is the worker method's submit callback. The worker's side is the call of
 * pgaio_io_perform_synchronously inside IoWorkerMain (and the instruction after it), so
 * backends, which call that function for the IO they perform themselves, never trap.
 */
const SUBMIT = 'pgaio_worker_submit';
const WORKER_MAIN = 'IoWorkerMain';
const PERFORM = 'pgaio_io_perform_synchronously';
/** Length of the x86-64 `call rel32` findCallSite finds. */
const CALL_LENGTH = 5n;

interface AioSites {
  /** What the binary lacks, for the reason; empty when every site was found. */
  missing: string[];
  performCall: bigint | null;
}

/** The sites of each binary, read once per binary: the ELF read is not free. */
const sitesCache = new Map<string, AioSites>();
function sites(binaryPath: string): AioSites {
  let found = sitesCache.get(binaryPath);
  if (!found) {
    const elf = ElfFile.read(binaryPath);
    const performCall = findCallSite(elf, WORKER_MAIN, PERFORM);
    const missing = [SUBMIT].filter((name) => elf.symbol(name)?.type !== 2);
    if (performCall === null) missing.push(`one direct call of ${PERFORM} in ${WORKER_MAIN}`);
    found = { missing, performCall };
    sitesCache.set(binaryPath, found);
  }
  return found;
}

/**
 * Why the io-worker attribution has nothing to do here, or null where it is needed and can run.
 *
 * @example
 * aioUnsupportedReason({ majorVersion: 15, ioMethod: 'sync', binaryPath: '/usr/lib/postgresql/15/bin/postgres' });
 * // 'PostgreSQL 15 has no io workers: backends do their own IO (set io covers it)'
 */
export function aioUnsupportedReason(target: Pick<PostmasterTarget, 'majorVersion' | 'ioMethod' | 'binaryPath'>): string | null {
  if (!(target.majorVersion >= 18))
    return `PostgreSQL ${target.majorVersion} has no io workers: backends do their own IO (set io covers it)`;
  if (target.ioMethod !== 'worker') {
    return target.ioMethod === 'io_uring'
      ? "io_method = io_uring: IO is submitted by the backend itself, and io_uring's worker threads are in its thread group (set io covers it)"
      : `io_method = ${target.ioMethod}: backends do their own IO (set io covers it)`;
  }
  const { missing } = sites(target.binaryPath);
  return missing.length ? `${target.binaryPath} has no ${missing.join(', no ')}` : null;
}

export const AIO_PROBE_SET: ProbeSet<'aio'> = {
  name: 'aio',
  description:
    'PostgreSQL 18 io workers: block IO a worker performs for a backend is charged to that backend and its query (and to the worker)',
  default: true,
  whereSupported: true,
  unsupportedReason: ({ target }) => aioUnsupportedReason(target),
  attachments: [
    {
      kind: 'target',
      programs: ['on_aio_submit', 'on_aio_perform', 'on_aio_performed'],
      probes: (target): TargetProbe[] => {
        // The sidecar asks unsupportedReason first; a caller that did not gets the reason, not a TypeError.
        const reason = aioUnsupportedReason(target);
        if (reason !== null) throw new UserError(`probe set aio: ${reason}`);
        const call = sites(target.binaryPath).performCall!; // found, or reason would say so
        return [
          { program: 'on_aio_submit', symbol: SUBMIT, retprobe: false },
          { program: 'on_aio_perform', fileOffset: call },
          { program: 'on_aio_performed', fileOffset: call + CALL_LENGTH },
        ];
      },
    },
  ],
  cost: 'PostgreSQL 18 with io_method = worker only: one uprobe trap per submit call in the backend (one per IO in a scan), two per IO in the worker; nothing for reads from shared buffers nor for the single-block reads backends perform themselves',
};
