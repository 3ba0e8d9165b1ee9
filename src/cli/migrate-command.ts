import type { CliOptions } from './parse-args.js';
import { connect } from '../storage/connect.js';
import { migrateSchema } from '../storage/migrate-schema.js';

/** `pg-bpf-stats migrate`: create or update bpf_stats without collecting. */
export async function migrateCommand(options: CliOptions, log: (line: string) => void): Promise<number> {
  const client = await connect(options.dsn);
  try {
    // Asked for by hand: everything is applied again, also when nothing seems to differ.
    await migrateSchema(client, log, options.node, { reapply: true });
    log('bpf_stats is up to date');
  } finally {
    await client.end();
  }
  return 0;
}
