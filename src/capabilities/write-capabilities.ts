import { hostname } from 'node:os';
import type pg from 'pg';
import type { CheckLine } from './probe-capabilities.js';

/**
 * Replaces this host's rows of bpf_stats.capabilities with `lines` (from probeCapabilities),
 * in one transaction, so readers never see a half-written set.
 *
 * @example
 * await writeCapabilities(client, await probeCapabilities({ target, loaded: true }));
 */
export async function writeCapabilities(client: pg.ClientBase, lines: CheckLine[], host = hostname()): Promise<void> {
  await client.query('BEGIN');
  try {
    await client.query('DELETE FROM bpf_stats.capabilities WHERE host = $1', [host]);
    await client.query(
      `INSERT INTO bpf_stats.capabilities (host, kind, probe, available, required, reason)
       SELECT $1, * FROM unnest($2::text[], $3::text[], $4::bool[], $5::bool[], $6::text[])`,
      [host, lines.map((l) => l.kind), lines.map((l) => l.probe), lines.map((l) => l.ok), lines.map((l) => l.required), lines.map((l) => l.detail)],
    );
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  }
}
