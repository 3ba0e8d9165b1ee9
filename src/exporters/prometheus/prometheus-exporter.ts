import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { oneLine, UserError } from '../../errors.js';
import type { FlushReport } from '../../sidecar/sidecar.js';
import { CatalogNames } from './catalog-names.js';
import { FlushTotals } from './flush-totals.js';
import { formatMetricsAddress, type MetricsAddress } from './metrics-address.js';
import { MetricsRegistry } from './metrics-registry.js';
import { BasicAuth, clientCertRefusal, type WebConfig } from './web-config.js';

export interface PrometheusExporterOptions {
  address: MetricsAddress;
  /** Per-query series for this many statements, by total time (default 100). */
  top?: number;
  /** Export the statements' text as `pg_bpf_query_info` (default false). */
  queryText?: boolean;
  /** For the datname/user labels and query text (the collector's connection). */
  connectionString: string | undefined;
  /** TLS and basic authentication (--web.config.file); absent: plain HTTP, no authentication. */
  webConfig?: WebConfig;
  log: (line: string) => void;
}

/** Where `:PORT` (no host) listens: this host only. Every interface takes an explicit 0.0.0.0 or [::]. */
export const DEFAULT_METRICS_HOST = '127.0.0.1';

/** What the exporter needs of the collector (Sidecar has it). */
export interface FlushSource {
  onFlush(listener: (report: FlushReport) => void): void;
  excludeBackend(pid: number): void;
}

export const DEFAULT_METRICS_TOP = 100;

/** How long a 'busy' answer (503, Retry-After: 1) waits, and how many may wait at once. */
const BUSY_DELAY_MS = 1000;
const BUSY_HELD = 256;

/**
 * `run --metrics-address`: serves /metrics from what the collector's flushes committed. A flush
 * adds its rows to memory (O(rows)); a scrape formats memory and never waits for, or slows, a
 * flush. The port is bound before the collector starts, so an address in use fails first.
 *
 * @example
 * const exporter = await PrometheusExporter.listen({ address: { host: '127.0.0.1', port: 9187 }, connectionString: dsn, log });
 * exporter.attach(sidecar);
 * // ...
 * await exporter.close();
 */
export class PrometheusExporter {
  private source: FlushSource | null = null;

  private constructor(
    private readonly server: Server,
    readonly totals: FlushTotals,
    readonly metrics: MetricsRegistry,
    private readonly names: CatalogNames,
    private readonly auth: BasicAuth,
  ) {}

  static async listen(options: PrometheusExporterOptions): Promise<PrometheusExporter> {
    const top = options.top ?? DEFAULT_METRICS_TOP;
    const totals = new FlushTotals(Math.max(1000, 10 * top));
    let exclude: (pid: number) => void = () => undefined;
    const names = new CatalogNames(options.connectionString, (pid) => exclude(pid), options.log, top);
    const metrics = new MetricsRegistry(totals, names, { top, queryText: options.queryText ?? false });
    const auth = new BasicAuth(options.webConfig?.users ?? new Map());
    const handle = (request: IncomingMessage, response: ServerResponse) => {
      const path = (request.url ?? '/').split('?')[0];
      if (request.method !== 'GET' && request.method !== 'HEAD') {
        response.writeHead(405, { Allow: 'GET, HEAD' }).end();
      } else if (path === '/metrics') {
        metrics.prepareScrape();
        metrics.registry.metrics().then(
          (text) => response.writeHead(200, { 'Content-Type': metrics.registry.contentType }).end(text),
          (error: unknown) => response.writeHead(500, { 'Content-Type': 'text/plain' }).end(`${oneLine(error)}\n`),
        );
      } else if (path === '/') {
        response
          .writeHead(200, { 'Content-Type': 'text/html' })
          .end('<html><body><a href="/metrics">/metrics</a> of pg-bpf-stats</body></html>\n');
      } else {
        response.writeHead(404, { 'Content-Type': 'text/plain' }).end('not found: try /metrics\n');
      }
    };
    // A 'busy' answer waits the second its Retry-After asks for: a source that sends again at once
    // (more requests than its checks may wait) would otherwise spin, and its flood of 503s take
    // the CPU the bcrypt thread and the honest scraper's check need (measured: 30,000 503s in 43 s
    // from 20 connections, and first logins timing out). At most BUSY_HELD wait so; beyond, at once,
    // and the connection is closed.
    let held = 0;
    const busy = (response: ServerResponse) => {
      const answer = (close: boolean) =>
        response
          .writeHead(503, { 'Retry-After': '1', 'Content-Type': 'text/plain', ...(close && { Connection: 'close' }) })
          .end('Busy checking passwords: try again\n');
      if (held >= BUSY_HELD) return answer(true);
      held++;
      const timer = setTimeout(() => answer(false), BUSY_DELAY_MS);
      response.once('close', () => {
        clearTimeout(timer);
        held--;
      });
    };
    const tls = options.webConfig?.tls;
    const listener = (request: IncomingMessage, response: ServerResponse) => {
      const refusal = tls ? clientCertRefusal(tls.clientAuth, request.socket as TLSSocket) : null;
      if (refusal) {
        response.writeHead(401, { 'Content-Type': 'text/plain', Connection: 'close' }).end(`${refusal}\n`);
        return;
      }
      if (!auth.enabled) return handle(request, response);
      // Per remote address: one source's guesses take turns with the others' (BasicAuth).
      auth.check(request.headers.authorization, request.socket.remoteAddress ?? '').then(
        (verdict) => {
          if (verdict === 'allowed') handle(request, response);
          // Not checked (too many checks waiting): not a wrong password, so not 401.
          else if (verdict === 'busy') busy(response);
          else
            response
              .writeHead(401, { 'WWW-Authenticate': 'Basic realm="pg-bpf-stats"', 'Content-Type': 'text/plain' })
              .end('Unauthorized\n');
        },
        () => response.writeHead(500).end(),
      );
    };
    // Loaded here: a static import of a builtin is hoisted to the bundle's top, and node's http
    // would load at every start (~4 ms, ~0.4 MB) for a listener most runs never open. Not by
    // import(): the bundle runs from V8's code cache, where import() has no loader (code-cache.ts).
    const server: Server = tls
      ? process.getBuiltinModule('node:https').createServer(
          {
            cert: tls.cert,
            key: tls.key,
            ...(tls.ca && { ca: tls.ca }),
            requestCert: tls.requestCert,
            rejectUnauthorized: tls.rejectUnauthorized,
            ...(tls.minVersion && { minVersion: tls.minVersion }),
            ...(tls.maxVersion && { maxVersion: tls.maxVersion }),
          },
          listener,
        )
      : process.getBuiltinModule('node:http').createServer(listener);
    // A scraper that never finishes its request must not keep sockets forever.
    server.requestTimeout = 10_000;
    server.headersTimeout = 10_000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', (error: NodeJS.ErrnoException) => reject(listenError(options.address, error)));
      server.listen({ host: options.address.host ?? DEFAULT_METRICS_HOST, port: options.address.port }, resolve);
    });
    server.on('error', (error) => options.log(`metrics: ${oneLine(error)}`));
    const exporter = new PrometheusExporter(server, totals, metrics, names, auth);
    exclude = (pid) => exporter.source?.excludeBackend(pid);
    return exporter;
  }

  /** Where it listens now (the real port when 0 was asked for). */
  get address(): MetricsAddress {
    const info = this.server.address() as AddressInfo;
    return { host: info.address, port: info.port };
  }

  /** Feeds the exporter from every flush of `source`. */
  attach(source: FlushSource): void {
    this.source = source;
    source.onFlush((report) => {
      this.totals.observe(report);
      this.metrics.flushDuration.observe(report.ms / 1000);
    });
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
    await this.names.close();
    await this.auth.close();
  }
}

function listenError(address: MetricsAddress, error: NodeJS.ErrnoException): Error {
  const where = `--metrics-address ${formatMetricsAddress(address)}`;
  switch (error.code) {
    case 'EADDRINUSE':
      return new UserError(`${where}: address already in use (another exporter or collector listens there)`);
    case 'EADDRNOTAVAIL':
      return new UserError(`${where}: not an address of this host`);
    case 'EACCES':
      return new UserError(`${where}: permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)`);
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return new UserError(`${where}: cannot resolve the host name`);
    default:
      return new UserError(`${where}: cannot listen: ${oneLine(error)}`);
  }
}
