import { formatMetricsAddress, type MetricsAddress } from './metrics-address.js';
import { DEFAULT_METRICS_HOST, PrometheusExporter, type FlushSource } from './prometheus-exporter.js';
import { readWebConfig } from './web-config.js';

/**
 * `run --metrics-address`: binds the port (first, so that an address in use fails before
 * anything is created); `attach()` feeds it from the collector and says where /metrics is.
 */
export async function startMetrics(
  options: { address: MetricsAddress; top?: number; queryText: boolean; webConfigFile?: string },
  dsn: string | undefined,
  log: (line: string) => void,
): Promise<{ attach(source: FlushSource): void; close(): Promise<void> }> {
  // Read (and refused, if wrong) before the port is bound: never serve what it was meant to protect.
  const webConfig = options.webConfigFile === undefined ? undefined : readWebConfig(options.webConfigFile);
  // Said, not refused: on loopback, or behind a proxy that terminates TLS, it is what one wants.
  if (webConfig?.users.size && !webConfig.tls)
    log(
      `warning: --web.config.file ${options.webConfigFile} has basic_auth_users without tls_server_config: every scrape sends the password in clear text (add tls_server_config, or keep /metrics on this host or behind a TLS proxy)`,
    );
  const exporter = await PrometheusExporter.listen({ ...options, connectionString: dsn, log, ...(webConfig && { webConfig }) });
  return {
    attach(source) {
      exporter.attach(source);
      const { port } = exporter.address;
      const scheme = webConfig?.tls ? 'https' : 'http';
      const extras = [webConfig?.users.size ? 'basic auth' : '', options.queryText ? 'with query text' : ''].filter(Boolean);
      log(
        `serving Prometheus metrics at ${scheme}://${formatMetricsAddress({ ...options.address, port, host: options.address.host ?? DEFAULT_METRICS_HOST })}/metrics${extras.length ? ` (${extras.join(', ')})` : ''}`,
      );
    },
    close: () => exporter.close(),
  };
}
