import pg from 'pg';
import { oneLine, UserError } from '../errors.js';
import { assertPinned, pinnedConfig } from '../storage/pinned-session.js';
import { renderTop, SORT_KEYS, type TopScreen } from './render-top.js';
import { readTop, type TopMetric, type TopRead } from './top-read.js';
import { topRates, type TopRates } from './top-rates.js';
import { clientConfig } from '../storage/connection-string.js';

export interface TopOptions {
  dsn: string | undefined;
  /** Refresh period. */
  intervalMs: number;
  /** Stop after this many screens (default: until q or SIGINT). */
  iterations?: number;
  sort: TopMetric;
}

/**
 * `pg-bpf-stats top`: a screen per refresh from bpf_stats alone (one statement each), so it
 * works against any database the collector writes to, as any user that can read bpf_stats, with
 * no BPF and no root. On a terminal it redraws in place and takes keys; otherwise (a pipe, a
 * test) it prints each screen at 80 columns, separated by a blank line.
 */
export async function topCommand(options: TopOptions, out: NodeJS.WriteStream = process.stdout): Promise<number> {
  const client = new pg.Client(pinnedConfig({ ...clientConfig(options.dsn), application_name: 'pg-bpf-stats top' }));
  try {
    await client.connect();
  } catch (error) {
    throw new UserError(`cannot connect: ${oneLine(error)}`);
  }
  let lost: Error | null = null;
  client.on('error', (error) => (lost = error));
  try {
    // Its statement names operators bare: only the catalog's path may resolve them.
    await assertPinned(client);
    const { rows } = await client.query<{ ok: boolean }>(
      "SELECT to_regclass('bpf_stats.query_stats') IS NOT NULL AND has_schema_privilege('bpf_stats', 'USAGE') AS ok",
    );
    if (!rows[0]?.ok)
      throw new UserError('no bpf_stats here: run `pg-bpf-stats run` (or migrate) against this database, or point --dsn where it writes');
    const source = `${client.database}@${client.host}:${client.port}`;
    const tty = Boolean(out.isTTY && process.stdin.isTTY) && options.iterations === undefined;
    let sort = options.sort;
    let stop: () => void = () => undefined;
    const stopped = new Promise<void>((resolve) => (stop = resolve));
    let wake: () => void = () => undefined;
    const onKey = (data: Buffer) => {
      const key = data.toString();
      if (key === 'q' || key === '\u0003') stop();
      else if (SORT_KEYS[key]) {
        sort = SORT_KEYS[key];
        wake();
      }
    };
    const onSignal = () => stop();
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    if (tty) {
      process.stdin.setRawMode(true);
      process.stdin.resume();
      process.stdin.on('data', onKey);
      out.write('\x1b[?1049h\x1b[?25l'); // alternate screen, no cursor
    }
    try {
      let previous: TopRead | null = null;
      let rates: TopRates | null = null;
      let done = false;
      void stopped.then(() => (done = true));
      for (let n = 0; !done && (options.iterations === undefined || n < options.iterations); n++) {
        let read: TopRead;
        try {
          read = await readTop(client);
        } catch (error) {
          throw new UserError(`lost the database: ${oneLine(lost ?? error)}`);
        }
        // The baseline moves only with a new flush: until then the screen keeps the last rates.
        const next = previous ? topRates(previous, read) : null;
        if (next) rates = next;
        if (!previous || next) previous = read;
        const draw = () => {
          const screen: TopScreen = {
            source,
            clock: new Date().toTimeString().slice(0, 8),
            rates,
            sort,
            flushAgeSeconds: read.flushedAtMs === null ? null : Math.max(0, (Date.now() - read.flushedAtMs) / 1000),
            collectors: read.collectors,
            droppedEvents: read.droppedEvents,
            lastError: read.lastError,
          };
          const size = tty ? { width: out.columns || 80, height: out.rows || 24 } : { width: 80, height: 24 };
          const lines = renderTop(screen, size);
          out.write(tty ? `\x1b[H\x1b[2J${lines.join('\r\n')}` : `${lines.join('\n')}\n\n`);
        };
        draw();
        if (options.iterations !== undefined && n + 1 >= options.iterations) break;
        // Sleep until the next refresh; a sort key redraws at once from the same rows.
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, options.intervalMs);
          wake = () => draw();
          void stopped.then(() => {
            clearTimeout(timer);
            resolve();
          });
        });
      }
    } finally {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      if (tty) {
        out.write('\x1b[?25h\x1b[?1049l');
        process.stdin.off('data', onKey);
        process.stdin.setRawMode(false);
        process.stdin.pause();
      }
    }
    return 0;
  } finally {
    await client.end().catch(() => undefined);
  }
}
