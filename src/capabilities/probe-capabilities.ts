import { release } from 'node:os';
import { collectorObjectPath, defaultMapEntries } from '../collector/collector-object.js';
import { pgStatStatementsMax, queriesBytesPerCpu } from '../collector/query-capacity.js';
import { disableMissingTracepoints } from '../collector/disable-missing-tracepoints.js';
import { KernelFeatures } from '../collector/kernel-features.js';
import { perfEventsUnsupportedReason } from '../collector/perf-events.js';
import { oneLine } from '../errors.js';
import type { SupportContext } from '../families/family.js';
import { PROBE_SETS, type ProbeSetName } from '../families/index.js';
import { LLC_EVENTS } from '../families/llc/llc-family.js';
import { probeSetUnsupportedReason } from './probe-set-support.js';
import { loadNative, type BpfObject } from '../native/bpf-native.js';
import type { ProgramName } from '../bpf/contract.js';
import { possibleSetPrograms } from '../collector/probe-attachment.js';
import { otherSwitchProgramsOff, setWithSwitchProgram, switchProgram } from '../collector/switch-program.js';
import { loadRefusing, type VerifierRefusal } from '../collector/verifier-refusal.js';
import { COLLECTOR_KERNEL_NEEDS, kernelNeedsText, SET_KERNEL_NEEDS } from './kernel-needs.js';
import { connect } from '../storage/connect.js';
import { shorten } from '../shorten.js';
import { calibrateStatusLayout } from '../postmaster/calibrate-status-layout.js';
import { discoverPostmaster } from '../postmaster/discover-postmaster.js';
import { hostChecks } from './host-checks.js';
import { mapsFullBytes, ownMemoryLimit } from './memory-limit.js';

/** One capability: a host requirement, a feature of this Postgres, or a probe set. */
export interface CheckLine {
  /** As `check` prints it, e.g. 'btf', 'probes cpu', 'llc'. */
  name: string;
  /** bpf_stats.capabilities.probe: the probe set's own name for sets, else `name`. */
  probe: string;
  /** 'requirement' (the sidecar needs it), 'feature' (optional), 'probe set' (a PROBE_SETS entry). */
  kind: 'requirement' | 'feature' | 'probe set';
  ok: boolean;
  /** false for families that are optional: the sidecar runs without them. */
  required: boolean;
  detail: string;
}

/** Where the postmaster comes from: a DSN to discover it (check), or the sidecar's own discovery. */
export type CapabilitySource =
  | { dsn: string | undefined }
  /** `loaded`: the sidecar loaded the collector object itself, so the verifier's verdict on the sets it attaches is known. */
  | { support: SupportContext; loaded: true; pgStatStatementsMax: number | null };

/**
 * What this host and this Postgres support: the checks behind both `pg-bpf-stats check` and
 * bpf_stats.capabilities, so the two cannot disagree (only the `bpf load` line's detail differs:
 * check loads every program, and says of each set it verified that it `loads`; the sidecar the
 * attached sets'). Every PROBE_SETS entry gets a line, with the oldest kernel it needs; a set
 * whose program the kernel refuses says the refusal.
 *
 * @example
 * const lines = await probeCapabilities({ dsn: 'postgresql://postgres@/postgres' });
 * lines.find((l) => l.probe === 'llc')?.ok; // false on a host without a hardware PMU
 */
export async function probeCapabilities(source: CapabilitySource): Promise<CheckLine[]> {
  const lines: CheckLine[] = hostChecks().map((c) => ({ ...c, probe: c.name, kind: 'requirement', required: true }));
  const own = COLLECTOR_KERNEL_NEEDS;
  lines.push(requirement('kernel', true, `Linux ${release()}; the collector's own programs need Linux ${own.since}+: ${own.why}`));
  // The verifier's verdict on each set: what `check` loads, or what the sidecar's load found.
  let refused: ReadonlyMap<string, VerifierRefusal> = new Map();
  if ('loaded' in source) {
    refused = source.support.refused ?? refused;
    lines.push(requirement('bpf load', true, LOADED_ATTACHED));
  } else if (lines.every((l) => l.ok)) {
    const check = loadCheck();
    refused = check.refused;
    lines.push(check.line);
  } else lines.push(requirement('bpf load', false, 'skipped: host requirements unmet'));

  let support: SupportContext | null = null;
  // Sizes the queries map (src/collector/query-capacity.ts); unknown without a server: the floor.
  let pgssMax: number | null = 'loaded' in source ? source.pgStatStatementsMax : null;
  try {
    if ('support' in source) support = source.support;
    else ({ support, pgssMax } = await discover(source.dsn));
    const { target } = support;
    lines.push(
      requirement('postmaster', true, `pid ${target.pid}, ${target.binaryPath}, PostgreSQL ${target.majorVersion}, data ${target.dataDir}`),
    );
    const usdt = target.usdt.filter((n) => n.provider === 'postgresql').length;
    lines.push(
      feature(
        'usdt',
        usdt > 0,
        usdt
          ? `${usdt} postgresql USDT probe sites`
          : 'none (built without --enable-dtrace): the query set falls back to a uretprobe on PortalRun',
      ),
    );
    const ids = target.computeQueryId !== 'off' && (target.computeQueryId !== 'auto' || target.pgStatStatementsLoaded);
    lines.push(
      feature(
        'query ids',
        ids,
        ids
          ? `compute_query_id = ${target.computeQueryId}${target.pgStatStatementsInstalled ? ', pg_stat_statements installed' : ', pg_stat_statements not installed in this database (no query text in views)'}`
          : `compute_query_id = ${target.computeQueryId}: figures are per backend only (set compute_query_id = on)`,
      ),
    );
    lines.push(statementUserLine(target));
    if (support.layout?.perStatementQueryIds != null) lines.push(multiStatementLine(support.layout.perStatementQueryIds));
  } catch (error) {
    lines.push(requirement('postmaster', false, oneLine(error)));
  }

  for (const set of Object.values(PROBE_SETS)) {
    const reason = refused.get(set.name)?.text ?? (support ? probeSetUnsupportedReason(set.name, support) : 'no postmaster');
    const needs = kernelNeedsText(SET_KERNEL_NEEDS[set.name]);
    lines.push({
      name: `probes ${set.name}`,
      probe: set.name,
      kind: 'probe set',
      ok: reason === null,
      required: set.default && !set.whereSupported,
      // `check` loaded every set's programs: it says they load here.
      detail:
        reason === null
          ? `${'loaded' in source ? '' : 'loads; '}${set.default ? 'default' : 'opt-in'}: ${set.description}; cost: ${set.cost}; ${needs}`
          : `unsupported: ${reason} (${needs})`,
    });
  }

  lines.push(memoryLimitLine(pgssMax));

  // The same probe as the llc set's unsupportedReason, so the two lines cannot disagree.
  const pmu = perfEventsUnsupportedReason(Object.values(LLC_EVENTS));
  lines.push(
    feature('llc', pmu === null, pmu === null ? 'hardware cache-reference and cache-miss events available' : `unsupported: ${pmu}`),
  );
  return lines;
}

const LOADED = 'the collector programs pass the verifier (tp_btf, uprobe)';
/** The sidecar verifies the programs of the sets it attaches at start; another set's, when it is requested. */
const LOADED_ATTACHED = "the programs of the attached probe sets pass the verifier (another set's are verified when it is requested)";

/** Whether statements are keyed by the user they ran as (after SET ROLE), as pg_stat_statements keys them. */
function statementUserLine(target: SupportContext['target']): CheckLine {
  const { outerUserId, currentUserId } = target.addresses;
  if (!outerUserId) {
    return feature(
      'statement user',
      false,
      'GetOuterUserId() is not one load here: statements are keyed by the session user, not the role after SET ROLE',
    );
  }
  return feature(
    'statement user',
    true,
    currentUserId
      ? 'keyed by the user a statement ran as (OuterUserId; CurrentUserId inside SECURITY DEFINER functions, nested set)'
      : 'keyed by the user a statement ran as (OuterUserId); nested statements of SECURITY DEFINER functions by the caller (GetUserId() is not one load here)',
  );
}

/** Whether each statement of a multi-statement query string has its own key, as in pg_stat_statements. */
function multiStatementLine(perStatement: boolean): CheckLine {
  return feature(
    'multi-statement strings',
    perStatement,
    perStatement
      ? 'each statement of a multi-statement query string is keyed by its own query id'
      : "this PostgreSQL shows the first statement's query id for a whole multi-statement query string: the later statements' figures land on the first one's key (update to the latest minor release)",
  );
}

function requirement(name: string, ok: boolean, detail: string): CheckLine {
  return { name, probe: name, kind: 'requirement', ok, required: true, detail };
}

function feature(name: string, ok: boolean, detail: string): CheckLine {
  return { name, probe: name, kind: 'feature', ok, required: false, detail };
}

/**
 * The postmaster behind `dsn`, and its PgBackendStatus layout calibrated as `run` does it (a
 * second connection observes the first), so that `check` and `run` judge the sets alike.
 */
async function discover(dsn: string | undefined): Promise<{ support: SupportContext; pgssMax: number | null }> {
  const client = await connect(dsn);
  try {
    const target = await discoverPostmaster(client);
    const pgssMax = await pgStatStatementsMax(client);
    const observer = await connect(dsn);
    try {
      const layout = await calibrateStatusLayout(target, client, observer).catch(() => null);
      return { support: { target, layout, perfEvents: {} }, pgssMax };
    } finally {
      await observer.end();
    }
  } finally {
    await client.end();
  }
}

/**
 * Whether the memory cgroup the collector runs in leaves room for its maps when full (kernel
 * memory, charged to that cgroup since Linux 5.11) beside the collector itself: below that, new
 * statements are refused (health.dropped map_no_memory) before the maps fill. Not a requirement:
 * the collector runs, and keeps making room by evicting quiet keys.
 */
function memoryLimitLine(pgssMax: number | null): CheckLine {
  let cpus: number;
  let fullBytes: number;
  let queries: string;
  try {
    cpus = loadNative().numPossibleCpus();
    const object = new (loadNative().BpfObject)(collectorObjectPath());
    try {
      const entries: Partial<Record<string, number>> = defaultMapEntries(cpus, pgssMax);
      const keys = entries.queries ?? 0;
      queries = `; the queries map: ${keys} keys (${pgssMax === null ? 'pg_stat_statements.max unknown' : `pg_stat_statements.max ${pgssMax}`}), ${(queriesBytesPerCpu(keys) / 2 ** 20).toFixed(1)} MB of values per CPU when full`;
      fullBytes = mapsFullBytes(
        object.maps().map((m) => ({ ...m, maxEntries: entries[m.name] ?? m.maxEntries })),
        cpus,
      );
    } finally {
      object.close();
    }
  } catch (error) {
    return feature('memory limit', false, `the maps' size is not known: ${shorten(oneLine(error), 200)}`);
  }
  const needed = `the maps when full (~${megabytes(fullBytes)} MB on ${cpus} CPUs) and the collector (~${megabytes(COLLECTOR_BYTES)} MB)`;
  const limit = ownMemoryLimit();
  if (!limit)
    return feature('memory limit', true, `no memory cgroup limit seen from here; ${needed} come out of the host's memory${queries}`);
  if (limit.limitBytes === null)
    return feature('memory limit', true, `none on cgroup ${limit.cgroup}; ${needed} come out of the host's memory${queries}`);
  const room = limit.limitBytes >= fullBytes + COLLECTOR_BYTES;
  const stated = `cgroup ${limit.cgroup} limit ${megabytes(limit.limitBytes)} MB`;
  return room
    ? feature('memory limit', true, `${stated}: room for ${needed}${queries}`)
    : feature(
        'memory limit',
        false,
        `${stated} is below ${needed}: new statements are refused (health.dropped map_no_memory) before the maps fill; give it ${megabytes(fullBytes + COLLECTOR_BYTES)} MB or more (a unit's MemoryMax=, a container's memory limit)${queries}`,
      );
}

/** The collector's RSS with a full queries map on our 2-CPU VMs was 88-94 MB (bench/journal/memory.md#what-a-full-map-holds-and-the-semi-space-again). */
const COLLECTOR_BYTES = 100 * 2 ** 20;

function megabytes(bytes: number): number {
  return Math.ceil(bytes / 2 ** 20);
}

/**
 * Loads every program of the collector object (the verifier's verdict on this kernel),
 * attaching nothing: a set whose program the kernel refuses is left out and the rest loaded
 * again, so every set gets its own verdict.
 */
function loadCheck(): { line: CheckLine; refused: ReadonlyMap<ProbeSetName, VerifierRefusal> } {
  // The switch-out program this kernel's sched_switch takes: the other is not loaded (src/collector/switch-program.ts).
  const switchOut = switchProgram(KernelFeatures.host());
  const programs = new Map(Object.values(PROBE_SETS).map((set) => [set.name, possibleSetPrograms(setWithSwitchProgram(set, switchOut))]));
  try {
    const { object, refused } = loadRefusing<ProbeSetName, BpfObject>(
      (leftOut) => {
        const object = new (loadNative().BpfObject)(collectorObjectPath());
        // Programs for tracepoints this kernel lacks stay off; their sets say so.
        disableMissingTracepoints(object, KernelFeatures.host());
        otherSwitchProgramsOff(object, switchOut);
        const kept = new Set([...programs].filter(([set]) => !leftOut.has(set)).flatMap(([, p]) => p));
        for (const p of object.programs()) {
          const left = [...leftOut.keys()].some((set) => programs.get(set)?.includes(p.name as ProgramName));
          if (p.autoload && left && !kept.has(p.name as ProgramName)) object.setAutoload(p.name, false);
        }
        return object;
      },
      (object) => object.load(),
      (program) => [...programs].filter(([, p]) => p.includes(program as ProgramName)).map(([set]) => set),
      // Every set gets its verdict, cpu's included: none ends the check.
      () => false,
    );
    object.close();
    const names = [...refused.keys()];
    return {
      line: requirement('bpf load', true, names.length ? `${LOADED}, but for probe sets ${names.join(', ')} (below)` : LOADED),
      refused,
    };
  } catch (error) {
    return { line: requirement('bpf load', false, shorten(oneLine(error), 300)), refused: new Map() };
  }
}
