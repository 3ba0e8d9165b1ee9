import { release } from 'node:os';
import { collectorObjectPath } from '../attach/collector-object.js';
import { PROBE_SETS } from '../attach/probe-sets.js';
import { LLC_EVENTS, perfEventsUnsupportedReason } from '../attach/perf-events.js';
import { oneLine } from '../errors.js';
import { loadNative } from '../native/bpf-native.js';
import { connect } from '../sidecar/connect.js';
import { hostChecks } from '../sidecar/preflight.js';
import { discoverPostmaster } from '../target/discover-postmaster.js';
import type { PostmasterTarget } from '../target/postmaster-target.js';
import type { CliOptions } from './parse-args.js';


/** One line of `check`: a probe family or requirement, and whether it works here. */
export interface CheckLine {
  name: string;
  ok: boolean;
  /** false for families that are optional: the sidecar runs without them. */
  required: boolean;
  detail: string;
}

/** The checks behind `pg-bpf-stats check` (and, later, bpf_stats.capabilities). */
export async function runChecks(dsn: string | undefined): Promise<CheckLine[]> {
  const lines: CheckLine[] = hostChecks().map((c) => ({ ...c, required: true }));
  lines.push({ name: 'kernel', ok: true, required: true, detail: `Linux ${release()}` });
  lines.push(lines.every((l) => l.ok) ? loadCheck() : { name: 'bpf load', ok: false, required: true, detail: 'skipped: host requirements unmet' });

  let target: PostmasterTarget | null = null;
  try {
    const client = await connect(dsn);
    try {
      target = await discoverPostmaster(client);
    } finally {
      await client.end();
    }
    lines.push({ name: 'postmaster', ok: true, required: true, detail: `pid ${target.pid}, ${target.binaryPath}, PostgreSQL ${target.majorVersion}, data ${target.dataDir}` });
    const usdt = target.usdt.filter((n) => n.provider === 'postgresql').length;
    lines.push({
      name: 'usdt',
      ok: usdt > 0,
      required: false,
      detail: usdt
        ? `${usdt} postgresql USDT probe sites`
        : 'none (built without --enable-dtrace): the query set falls back to a uretprobe on PortalRun',
    });
    const ids = target.computeQueryId !== 'off' && (target.computeQueryId !== 'auto' || target.pgStatStatementsLoaded);
    lines.push({
      name: 'query ids',
      ok: ids,
      required: false,
      detail: ids
        ? `compute_query_id = ${target.computeQueryId}${target.pgStatStatementsInstalled ? ', pg_stat_statements installed' : ', pg_stat_statements not installed in this database (no query text in views)'}`
        : `compute_query_id = ${target.computeQueryId}: figures are per backend only (set compute_query_id = on)`,
    });
  } catch (error) {
    lines.push({ name: 'postmaster', ok: false, required: true, detail: oneLine(error) });
  }

  for (const set of Object.values(PROBE_SETS)) {
    const reason = target ? set.unsupportedReason(target) : 'no postmaster';
    lines.push({
      name: `probes ${set.name}`,
      ok: reason === null,
      required: set.default,
      detail: reason === null ? `${set.default ? 'default' : 'opt-in'}: ${set.description}; cost: ${set.cost}` : `unsupported: ${reason}`,
    });
  }

  // The same probe as the llc set's unsupportedReason.
  const pmu = perfEventsUnsupportedReason(Object.values(LLC_EVENTS));
  lines.push({
    name: 'llc',
    ok: pmu === null,
    required: false,
    detail: pmu === null ? 'hardware cache-reference and cache-miss events available' : `unsupported: ${pmu}`,
  });
  return lines;
}

/** Loads the collector object once (the verifier's verdict on this kernel), attaching nothing. */
function loadCheck(): CheckLine {
  const name = 'bpf load';
  try {
    const object = new (loadNative().BpfObject)(collectorObjectPath());
    try {
      object.load();
    } finally {
      object.close();
    }
    return { name, ok: true, required: true, detail: 'the collector programs pass the verifier (tp_btf, uprobe, perf_event)' };
  } catch (error) {
    return { name, ok: false, required: true, detail: oneLine(error).slice(0, 300) };
  }
}

/** `pg-bpf-stats check`: one line per family; exit 0 when the sidecar can run. */
export async function checkCommand(options: CliOptions, print: (line: string) => void): Promise<number> {
  const lines = await runChecks(options.dsn);
  const width = Math.max(...lines.map((l) => l.name.length));
  for (const line of lines) print(`${line.ok ? 'ok  ' : line.required ? 'FAIL' : 'no  '} ${line.name.padEnd(width)}  ${line.detail}`);
  return lines.every((l) => l.ok || !l.required) ? 0 : 2;
}
