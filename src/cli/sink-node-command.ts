import type { CliOptions } from './parse-args.js';
import { UserError } from '../errors.js';
import { connect } from '../storage/connect.js';
import { migrateSchema } from '../storage/migrate-schema.js';

/**
 * `pg-bpf-stats sink-node add NODE [--role ROLE] --dsn SINK`: the sink's owner lets the login
 * role ROLE (default: named like the node) write NODE's rows there, and only those
 * (sql/95-sink-nodes.sql); `sink-node remove NODE` takes that back. The schema is brought up to
 * date first, so a new sink needs only this command.
 */
export async function sinkNodeCommand(options: CliOptions, log: (line: string) => void): Promise<number> {
  const { action, node, role } = options.sinkNode!;
  const client = await connect(options.dsn);
  try {
    await migrateSchema(client, log);
    try {
      if (action === 'add') {
        await client.query('SELECT bpf_stats.add_node($1, $2)', [node, role]);
        // A role name may hold any character but NUL (a newline too): shown as a JSON string unless plain.
        const shown = /^[\w.@:-]+$/.test(role) ? role : JSON.stringify(role);
        log(`node ${node} may write into this sink as role ${shown}: run its collector with --sink DSN-as-${shown} --node ${node}`);
      } else {
        const { rows } = await client.query<{ removed: boolean }>('SELECT bpf_stats.remove_node($1) AS removed', [node]);
        log(
          rows[0]!.removed
            ? `node ${node} removed: its role may no longer write here (its rows stay)`
            : `node ${node} was not registered here`,
        );
      }
    } catch (error) {
      // The registry's own refusals (no such role, a superuser, one role per node): one line, as any bad input.
      const e = error as { code?: string; message?: string };
      if (e.code && /^(P0001|22023|23505|42704)$/.test(e.code)) throw new UserError(`sink-node ${action} ${node}: ${e.message}`);
      throw error;
    }
  } finally {
    await client.end();
  }
  return 0;
}
