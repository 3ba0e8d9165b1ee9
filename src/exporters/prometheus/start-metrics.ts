import { formatMetricsAddress, type MetricsAddress } from './metrics-address.js';
import { PrometheusExporter, type FlushSource } from './prometheus-exporter.js';

/**
 * `run --metrics-address`: binds the port (first, so that an address in use fails before
 * anything is created); `attach()` feeds it from the collector and says where /metrics is.
 */
export async function startMetrics(
  options: { address: MetricsAddress; top?: number; queryText: boolean },
  dsn: string | undefined,
  log: (line: string) => void,
): Promise<{ attach(source: FlushSource): void; close(): Promise<void> }> {
  const exporter = await PrometheusExporter.listen({ ...options, connectionString: dsn, log });
  return {
    attach(source) {
      exporter.attach(source);
      const { port } = exporter.address;
      log(`serving Prometheus metrics at http://${formatMetricsAddress({ ...options.address, port, host: options.address.host ?? '0.0.0.0' })}/metrics${options.queryText ? ' (with query text)' : ''}`);
    },
    close: () => exporter.close(),
  };
}
