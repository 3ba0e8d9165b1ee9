import { formatMetricsAddress, type MetricsAddress } from './metrics-address.js';
import { PrometheusExporter } from './prometheus-exporter.js';

/** `run --metrics-address`: binds the port and says where /metrics is. */
export async function startMetrics(
  options: { address: MetricsAddress; top?: number; queryText: boolean },
  dsn: string | undefined,
  log: (line: string) => void,
): Promise<PrometheusExporter> {
  const exporter = await PrometheusExporter.listen({ ...options, connectionString: dsn, log });
  const { port } = exporter.address;
  log(`serving Prometheus metrics at http://${formatMetricsAddress({ ...options.address, port, host: options.address.host ?? '0.0.0.0' })}/metrics${options.queryText ? ' (with query text)' : ''}`);
  return exporter;
}
