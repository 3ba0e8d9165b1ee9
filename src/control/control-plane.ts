import { Socket } from 'node:net';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import pgListen, { type Subscriber } from 'pg-listen';
import type { ProbeSetName } from '../families/index.js';
import { LOG_PERIOD_MS, rateLimited } from '../rate-limited-log.js';
import { oneLine } from '../errors.js';
import { shorten } from '../shorten.js';
import { backendPid } from '../storage/backend-pid.js';
import { pinnedConfig, pinnedOnConnect } from '../storage/pinned-session.js';
import type { BpfStatsDatabase, BpfStatsDb } from '../storage/database.js';
import { MAX_COLLECTION_MS, validateCollectionRequest, type CollectionRow } from './collection-request.js';
import { clientConfig } from '../storage/connection-string.js';

/** Channel bpf_stats.collect/stop ring; its payload is never trusted. */
export const CONTROL_CHANNEL = 'bpf_stats_control';
/**
 * Channel the sidecar reports on: JSON {"id": n, "status": "...", "error"?: "..."}. Advisory: any
 * role may NOTIFY it, so a reader confirms a message against the request's row
 * (verifiedStatus in status-message.ts), which is written before the message is sent.
 */
export const STATUS_CHANNEL = 'bpf_stats_status';

/** What the control plane needs from the sidecar (src/sidecar/sidecar.ts). */
export interface ProbeSetHost {
  /** Why a set cannot run here, or null: the same answer `run` and `check` give. */
  unsupportedReason(name: ProbeSetName): string | null;
  attach(name: ProbeSetName): void;
  /** Detaches an opt-in set; default sets (and sets given at start) stay. */
  detach(name: ProbeSetName): void;
  attached(): ProbeSetName[];
  /** Leaves one of the sidecar's own backends out of the figures. */
  excludeBackend(pid: number): void;
}

export interface ControlPlaneOptions {
  connectionString?: string;
  /** The node this collector measures: it takes requests for it and requests that name no node. */
  node?: string;
  /**
   * Writing under a sink's node role (src/sink/sink.ts): it may read and move on only the
   * requests made for its node, and delete none (sql/95-sink-nodes.sql); the owner's row
   * retention deletes them.
   */
  asNode?: boolean;
  host: ProbeSetHost;
  log?: (line: string) => void;
  /** Safety net for a doorbell that never rang (default 15 s). */
  pollMs?: number;
}

interface Running {
  sets: ProbeSetName[];
  timer: NodeJS.Timeout;
}

/** Requests read per pass; more are taken by the next pass. */
const BATCH = 200;
/** A doorbell payload we expect: what bpf_stats.collect/stop send (the id), or nothing. */
const DOORBELL = /^\d{1,19}$/;
/** How long finished requests stay in bpf_stats.collections. */
const RETENTION = '30 days';
/** At most one line per this period about junk on the control channel (the same period as every repeated line). */
const JUNK_LOG_MS = LOG_PERIOD_MS;

/**
 * The control plane: LISTENs on bpf_stats_control (pg-listen, reconnecting), and on every
 * doorbell, (re)connect and poll reconciles bpf_stats.collections with the probe sets attached.
 * Rows are authoritative and validated here; payloads are only a doorbell. Each request
 * attaches its sets, ends at its duration (a set stays while another running request wants
 * it) and reports its status in its row and on bpf_stats_status. Rows left `running` by a
 * sidecar that died are resumed for their remaining time, or failed when their end has passed.
 *
 * @example
 * const control = await ControlPlane.start({ connectionString: dsn, host: sidecar });
 * // SELECT bpf_stats.collect('{query}', '60 seconds') now attaches the query set for a minute
 * await control.stop();
 */
export class ControlPlane {
  private readonly running = new Map<string, Running>();
  /** Ends whose row update failed (the database was away): written by the next pass. */
  private readonly unsaved = new Map<string, { status: string; error: string | null }>();
  private chain: Promise<void> = Promise.resolve();
  private reconcileQueued = false;
  private closed = false;
  private poll: NodeJS.Timeout | null = null;
  private lastError: string | null = null;
  private junk = { loggedAt: 0, suppressed: 0 };
  private readonly log: (line: string) => void;

  private constructor(
    private readonly options: ControlPlaneOptions,
    private readonly pool: pg.Pool,
    private readonly subscriber: Subscriber,
  ) {
    this.log = options.log ?? (() => undefined);
    this.db = new Kysely<BpfStatsDatabase>({ dialect: new PostgresDialect({ pool }) });
  }

  /** Typed statements over the control connection (the pool of one above). */
  private readonly db: BpfStatsDb;

  static async start(options: ControlPlaneOptions): Promise<ControlPlane> {
    const { host } = options;
    const log = options.log ?? (() => undefined);
    // Kept open while idle: a poll every controlPollMs must not open a connection each time.
    // Before a new connection is used: its backend excluded, then its search_path checked (see
    // pinnedOnConnect: a session without the pinned path is ended, never used).
    const pool = new pg.Pool(
      pinnedConfig({
        ...clientConfig(options.connectionString),
        max: 1,
        application_name: 'pg-bpf-stats control',
        idleTimeoutMillis: 0,
        onConnect: pinnedOnConnect('control', rateLimited(log), (client) => {
          client.on('error', () => undefined);
          const pid = backendPid(client);
          try {
            host.excludeBackend(pid);
          } catch (error) {
            log(`control connection: cannot exclude backend ${pid}: ${oneLine(error)}`);
          }
        }),
      }),
    );
    pool.on('error', (error) => log(`control connection lost: ${oneLine(error)}`));
    let plane: ControlPlane | undefined;
    // pg-listen is CommonJS with an ES-style default export.
    // Pinned in the startup packet: pg-listen's reconnects open their own clients from this config.
    const subscriber = pgListen.default(
      pinnedConfig({
        ...clientConfig(options.connectionString),
        application_name: 'pg-bpf-stats listener',
        // pg calls this as a method of each new Connection: the backend's pid (BackendKeyData)
        // is excluded the moment it arrives, before LISTEN or any other statement runs.
        stream: function (this: unknown) {
          // (after stop() the BPF object is gone, and so is the need)
          excludeOnKeyData(this, (pid) => plane?.closed || host.excludeBackend(pid), log);
          return new Socket();
        } as unknown as () => Socket,
      }),
      {
        parse: (payload: string) => payload,
        serialize: (payload: unknown) => String(payload),
        // Never give up while we run: the database may be away for a while. pg-listen's retry
        // loop does not look at close(): throwing here is what ends it after stop().
        retryTimeout: 0,
        retryInterval: (attempt: number) => {
          if (plane?.closed) throw new Error('closed');
          return Math.min(5000, 250 * 2 ** attempt);
        },
      },
    );
    plane = new ControlPlane(options, pool, subscriber);
    subscriber.events.on('error', (error) => {
      if (!plane?.closed) plane?.reportError(`listener: ${oneLine(error)}`);
    });
    subscriber.events.on('reconnect', (attempt) => {
      if (attempt === 1) log('control listener lost its connection: reconnecting');
    });
    subscriber.events.on('connected', () => {
      // A reconnect that succeeded after stop() would keep a connection (and the process) alive.
      if (plane?.closed) void subscriber.close().catch(() => undefined);
      else plane?.requestReconcile();
    });
    subscriber.events.on('notification', (n) => plane?.onNotification(n.channel, n.payload));
    try {
      await subscriber.connect();
      await subscriber.listenTo(CONTROL_CHANNEL);
    } catch (error) {
      await subscriber.close().catch(() => undefined);
      await pool.end().catch(() => undefined);
      throw error;
    }
    // Bounded: finished requests are kept for RETENTION, then forgotten (once per start; under a
    // node role by the owner's row retention).
    if (!options.asNode) {
      void plane.serial(async () => {
        // Rows another session keeps locked (a node's own finished request, in its open
        // transaction) are skipped, not waited for: the control queue runs behind this.
        // (OPERATOR() binds as any other operator, left to right: hence the parentheses.)
        await sql`DELETE FROM bpf_stats.collections WHERE ctid = ANY (ARRAY(
                    SELECT c.ctid FROM bpf_stats.collections c
                     WHERE c.finished_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) ${RETENTION}::interval)
                       FOR UPDATE SKIP LOCKED))`.execute(plane.db);
      });
    }
    // 'connected' fired before LISTEN on the first connection: look at what is waiting now.
    plane.requestReconcile();
    const ready = plane;
    ready.poll = setInterval(() => plane.requestReconcile(), options.pollMs ?? 15_000);
    ready.poll.unref();
    return ready;
  }

  /** Request ids this sidecar is collecting for now. */
  runningIds(): string[] {
    return [...this.running.keys()];
  }

  /** Resolves once every reconcile asked for so far has run (tests, shutdown). */
  settled(): Promise<void> {
    return this.chain;
  }

  /**
   * Stops listening. Requests still running are marked failed (the sidecar shut down before
   * their end); pending ones stay for the next sidecar. Probe sets are left to the caller.
   */
  async stop(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.poll) clearInterval(this.poll);
    await this.subscriber.close().catch(() => undefined);
    await this.serial(async () => {
      for (const id of [...this.running.keys()]) {
        await this.finish(id, 'failed', `the sidecar shut down at ${new Date().toISOString()} before the end of this collection`).catch(
          (error) => this.reportError(oneLine(error)),
        );
      }
    });
    await this.pool.end().catch(() => undefined);
  }

  private onNotification(channel: string, payload: unknown): void {
    if (channel !== CONTROL_CHANNEL) return;
    if (payload === undefined || (typeof payload === 'string' && DOORBELL.test(payload))) {
      this.requestReconcile();
      return;
    }
    // Anyone may NOTIFY this channel: junk is not our doorbell. One line, rate-limited.
    const now = Date.now();
    if (now - this.junk.loggedAt < JUNK_LOG_MS) {
      this.junk.suppressed++;
      return;
    }
    const size = typeof payload === 'string' ? Buffer.byteLength(payload) : 0;
    const more = this.junk.suppressed ? ` (and ${this.junk.suppressed} more since the last such line)` : '';
    this.log(`ignoring a malformed ${size}-byte payload on ${CONTROL_CHANNEL}: expected a request id${more}`);
    this.junk = { loggedAt: now, suppressed: 0 };
  }

  /** Queues a reconcile pass unless one is queued already (a burst of doorbells makes one pass). */
  private requestReconcile(): void {
    if (this.closed || this.reconcileQueued) return;
    this.reconcileQueued = true;
    void this.serial(async () => {
      this.reconcileQueued = false;
      if (this.closed) return;
      const full = await this.reconcile();
      if (full) this.requestReconcile();
    });
  }

  /** Runs state changes one at a time: passes, expiries and shutdown never interleave. */
  private serial(task: () => Promise<void>): Promise<void> {
    const next = this.chain.then(task).then(
      () => {
        this.lastError = null;
      },
      (error) => this.reportError(oneLine(error)),
    );
    this.chain = next;
    return next;
  }

  private reportError(message: string): void {
    // One line per distinct failure, not one per pass while the database is away.
    if (message !== this.lastError) this.log(`control plane: ${message}`);
    this.lastError = message;
  }

  /** One pass over the open requests; returns true when there may be more to take. */
  private async reconcile(): Promise<boolean> {
    for (const [id, end] of [...this.unsaved]) {
      await this.saveEnd(id, end.status, end.error);
      this.unsaved.delete(id);
    }
    const limit = BATCH + this.running.size;
    const ours = sql<boolean>`id = ANY(${[...this.running.keys()]}::int8[])`;
    const rows: Array<CollectionRow & { id: string; status: string; elapsed_ms: number | null }> = await this.db
      .selectFrom('bpf_stats.collections')
      .select([
        'id',
        'probes',
        'status',
        sql<number | null>`extract(epoch FROM duration)::float8`.as('duration_s'),
        sql<number | null>`extract(epoch FROM now() - started_at)::float8 * 1000`.as('elapsed_ms'),
      ])
      .where((eb) => eb.or([eb('status', 'in', ['pending', 'running']), ours]))
      // Several nodes may share this database (run --sink): another node's requests are not ours,
      // and a node role takes none made for no node.
      .where((eb) =>
        this.options.node === undefined
          ? sql<boolean>`true`
          : this.options.asNode
            ? eb('node', '=', this.options.node)
            : eb.or([eb('node', 'is', null), eb('node', '=', this.options.node)]),
      )
      // ours first, so that a long queue never hides how they stand
      .orderBy(ours, 'desc')
      .orderBy('id')
      .limit(limit)
      .execute();
    // Ours that ended elsewhere: bpf_stats.stop(), or a row changed or deleted by hand.
    for (const id of [...this.running.keys()]) {
      const row = rows.find((r) => r.id === id);
      if (row?.status !== 'running') await this.finish(id, row?.status ?? 'stopped', null, false);
    }
    for (const row of rows) {
      if (this.closed) break;
      if (row.status === 'running' && !this.running.has(row.id)) await this.resume(row);
      if (row.status === 'pending') await this.begin(row);
    }
    return rows.length === limit;
  }

  private async begin(row: CollectionRow & { id: string }): Promise<void> {
    const request = validateCollectionRequest(row, (set) => this.options.host.unsupportedReason(set));
    if (!request.ok) {
      await this.report(row.id, 'rejected', request.error, 'pending');
      this.log(`collection ${row.id} rejected: ${request.error}`);
      return;
    }
    const claimed = await this.db
      .updateTable('bpf_stats.collections')
      .set({ status: 'running', started_at: sql<Date>`now()`, ...(this.options.node !== undefined && { node: this.options.node }) })
      .where('id', '=', row.id)
      .where('status', '=', 'pending')
      .returning('id')
      .execute();
    if (!claimed.length) return;
    const error = this.collect(row.id, request.sets, request.durationMs, 'started');
    if (error) await this.saveEnd(row.id, 'failed', error);
    else await this.notify(row.id, 'running', null);
  }

  /** A row `running` that no live request of ours holds: a previous sidecar died under it. */
  private async resume(row: CollectionRow & { id: string; elapsed_ms: number | null }): Promise<void> {
    const request = validateCollectionRequest(row, (set) => this.options.host.unsupportedReason(set));
    const remaining = request.ok ? request.durationMs - (row.elapsed_ms ?? Infinity) : 0;
    if (!request.ok || !(remaining > 0)) {
      const error = request.ok
        ? 'no sidecar was running when this collection was due to end (it stopped or died before), so it was cut short'
        : `cannot resume: ${request.error}`;
      await this.saveEnd(row.id, 'failed', error);
      this.log(`collection ${row.id} failed: ${error}`);
      return;
    }
    const error = this.collect(row.id, request.sets, remaining, `resumed for the remaining ${Math.round(remaining / 1000)} s`);
    if (error) await this.saveEnd(row.id, 'failed', error);
  }

  /** Attaches a request's sets (a set attached already stays as it is) and arms its end; returns why not. */
  private collect(id: string, sets: ProbeSetName[], ms: number, what: string): string | null {
    const host = this.options.host;
    const before = new Set(host.attached());
    try {
      for (const set of sets) if (!before.has(set)) host.attach(set);
    } catch (error) {
      // Undo what this request attached that nobody else wants; the row says why.
      this.detachUnwanted(sets.filter((s) => !before.has(s)));
      this.log(`collection ${id} failed: attach failed: ${oneLine(error)}`);
      return `attach failed: ${oneLine(error)}`;
    }
    const timer = setTimeout(() => void this.serial(() => this.finish(id, 'done', null)), Math.min(ms, MAX_COLLECTION_MS));
    this.running.set(id, { sets, timer });
    this.log(`collection ${id} ${what}: ${sets.join(', ')} for ${Math.round(ms / 100) / 10} s`);
    return null;
  }

  /**
   * Ends one of our requests: detaches the sets no other running request wants, then records
   * the end (unless the row already says it, as after bpf_stats.stop) and reports it.
   */
  private async finish(id: string, status: string, error: string | null, save = true): Promise<void> {
    const request = this.running.get(id);
    if (!request) return;
    clearTimeout(request.timer);
    this.running.delete(id);
    this.detachUnwanted(request.sets);
    this.log(`collection ${id} ${status}${error ? `: ${error}` : ''}`);
    try {
      if (save) await this.saveEnd(id, status, error);
      else await this.notify(id, status, error);
    } catch (failure) {
      if (save) this.unsaved.set(id, { status, error });
      throw failure;
    }
  }

  private detachUnwanted(sets: ProbeSetName[]): void {
    const wanted = new Set([...this.running.values()].flatMap((r) => r.sets));
    for (const set of sets) if (!wanted.has(set)) this.options.host.detach(set);
  }

  private saveEnd(id: string, status: string, error: string | null): Promise<void> {
    return this.report(id, status, error, 'running');
  }

  /** Moves a row on from status `from` and, in the same statement, reports it on bpf_stats_status. */
  private async report(id: string, status: string, error: string | null, from: 'pending' | 'running'): Promise<void> {
    await this.db
      .with('changed', (db) =>
        db
          .updateTable('bpf_stats.collections')
          // A request made for no node is answered under ours: a sink's node role may only leave rows it is named in (sql/95-sink-nodes.sql).
          .set({ status, finished_at: sql<Date>`now()`, error, ...(this.options.node !== undefined && { node: this.options.node }) })
          .where('id', '=', id)
          .where('status', '=', from)
          .returning('id'),
      )
      .selectFrom('changed')
      .select(sql`pg_notify(${STATUS_CHANNEL}, ${statusPayload(id, status, error)})`.as('notified'))
      .execute();
  }

  private async notify(id: string, status: string, error: string | null): Promise<void> {
    await sql`SELECT pg_notify(${STATUS_CHANNEL}, ${statusPayload(id, status, error)})`.execute(this.db);
  }
}

/**
 * The bpf_stats_status payload; ids are bigint, written as JSON numbers from their digits. The
 * error is cut to 1000 characters: NOTIFY payloads must stay under 8000 bytes.
 */
function statusPayload(id: string, status: string, error: string | null): string {
  const body = JSON.stringify({ status, ...(error ? { error: shorten(error, 1000) } : {}) });
  return `{"id":${/^\d+$/.test(id) ? id : JSON.stringify(id)},${body.slice(1)}`;
}

/** Excludes a pg Connection's backend when its BackendKeyData arrives. */
function excludeOnKeyData(connection: unknown, exclude: (pid: number) => void, log: (line: string) => void): void {
  const emitter = connection as { once?: (event: string, fn: (msg: { processID: number }) => void) => void };
  if (typeof emitter?.once !== 'function') {
    log('control listener: cannot see its backend pid (pg changed how it opens streams): its own backend is not excluded');
    return;
  }
  emitter.once('backendKeyData', (msg) => {
    try {
      exclude(msg.processID);
    } catch (error) {
      log(`control listener: cannot exclude backend ${msg.processID}: ${oneLine(error)}`);
    }
  });
}
