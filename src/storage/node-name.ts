import { hostname } from 'node:os';
import type pg from 'pg';
import { UserError } from '../errors.js';

/**
 * A node's name: which PostgreSQL server a bpf_stats row is about. It travels in connection
 * options and NOTIFY-free SQL, so it is kept to characters that need no quoting anywhere.
 */
const NODE_NAME = /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,62}$/;

/** `--node NAME` checked: a UserError in one line for a name we cannot carry. */
export function parseNodeName(text: string): string {
  if (!NODE_NAME.test(text)) {
    throw new UserError(`--node '${text}': expected 1 to 63 characters, letters, digits and . _ : @ - (starting with a letter or digit)`);
  }
  return text;
}

/**
 * The default node name: this host's name and the server's port, stable across restarts of
 * either and different for every server on a host (two servers cannot share a port). Two
 * containers that both listen on 5432 behind one host name need --node.
 */
export async function defaultNodeName(node: pg.Client): Promise<string> {
  const { rows } = await node.query<{ port: string }>("SELECT current_setting('port') AS port");
  const host =
    hostname()
      .replace(/[^A-Za-z0-9._:@-]/g, '-')
      .slice(0, 56) || 'host';
  return parseNodeName(`${/^[A-Za-z0-9]/.test(host) ? host : `h${host}`}:${rows[0]!.port}`);
}

/** The session setting every sink connection carries: column defaults read the node from it. */
export async function nameNode(client: pg.Client, node: string): Promise<void> {
  await client.query("SELECT set_config('bpf_stats.node', $1, false)", [node]);
}

/** The same, as libpq startup options for a pool's connections (names need no escaping). */
export function nodeConnectionOptions(node: string): string {
  return `-c bpf_stats.node=${node}`;
}
