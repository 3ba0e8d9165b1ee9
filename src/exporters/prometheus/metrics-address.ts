import { isIP } from 'node:net';
import { UserError } from '../../errors.js';

/** Where /metrics listens; host undefined: the loopback address only (DEFAULT_METRICS_HOST). */
export interface MetricsAddress {
  host: string | undefined;
  port: number;
}

/**
 * Parses `--metrics-address`: HOST:PORT, [IPv6]:PORT, or :PORT. Prometheus exporters take :PORT
 * for every interface; here it is 127.0.0.1 only, since /metrics names databases, roles and
 * (with --metrics-query-text) statements: every interface takes 0.0.0.0:PORT. Port 0 picks a
 * free port (logged at start).
 *
 * @example
 * parseMetricsAddress('127.0.0.1:9187'); // { host: '127.0.0.1', port: 9187 }
 * parseMetricsAddress('[::1]:9187');     // { host: '::1', port: 9187 }
 * parseMetricsAddress(':9187');          // { host: undefined, port: 9187 }
 */
export function parseMetricsAddress(text: string): MetricsAddress {
  const match = /^(?:\[([^\]]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(text);
  const bad = (why: string) => new UserError(`--metrics-address '${text}': ${why} (expected HOST:PORT, e.g. 127.0.0.1:9187)`);
  if (!match) throw bad('not HOST:PORT');
  const port = Number(match[3]);
  if (port > 65535) throw bad('port out of range');
  const host = match[1] ?? match[2];
  if (match[1] !== undefined && isIP(match[1]) !== 6) throw bad('not an IPv6 address in brackets');
  if (host !== undefined && host !== '' && !/^[A-Za-z0-9.-]+$/.test(host) && !isIP(host)) throw bad('not a host name');
  return { host: host || undefined, port };
}

/** The address for messages: HOST:PORT with IPv6 in brackets. */
export function formatMetricsAddress({ host, port }: MetricsAddress): string {
  if (host === undefined) return `:${port}`;
  return isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`;
}
