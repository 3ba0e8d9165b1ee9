import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ThrowawayCluster } from '../../src/cluster/throwaway-cluster.js';
import { Sidecar } from '../../src/sidecar/sidecar.js';
import { runCli } from '../support/run-cli.js';
import { logMessages } from '../support/log-lines.js';
import { verifiedStatus } from '../../src/control/status-message.js';
import { RowRetention } from '../../src/retention/row-retention.js';
import { clientDatabase } from '../../src/storage/client-database.js';
import { writeCapabilities } from '../../src/capabilities/write-capabilities.js';
import type { CheckLine } from '../../src/capabilities/probe-capabilities.js';

/*
 * Two servers, each with its collector, writing into one sink database (`central` on the first
 * server) under login roles of their own, registered with `pg-bpf-stats sink-node add`. Node A's
 * role then tries everything against node B: change, delete, read and forge B's rows, and make,
 * change or take over a collection request for B. Each attempt fails, B's figures stay as they
 * were, and B starts nothing it was not asked for by an admin.
 */

let serverA: ThrowawayCluster;
let serverB: ThrowawayCluster;
let admin: pg.Client;
const sidecars: Sidecar[] = [];

/** The sink (database central on server A) as `role`. */
function sinkAs(role: string): string {
  return serverA.connectionString('central').replace('postgres@', `${role}@`);
}

async function until(what: string, check: () => Promise<boolean> | boolean, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Everything of node B's that the sink holds, as the sink's owner reads it. */
async function nodeBRows(): Promise<Record<string, unknown[]>> {
  const tables = [
    'query_stats',
    'backend_stats',
    'health',
    'query_texts',
    'capabilities',
    'collections',
    'query_stats_history',
    'backend_stats_history',
  ];
  const out: Record<string, unknown[]> = {};
  for (const table of tables) {
    out[table] = (
      await admin.query(`SELECT to_jsonb(t) AS row FROM bpf_stats.${table} t WHERE node = 'node-b' ORDER BY to_jsonb(t)::text`)
    ).rows.map((r) => r.row);
  }
  return out;
}

beforeAll(async () => {
  [serverA, serverB] = await Promise.all([ThrowawayCluster.start(), ThrowawayCluster.start()]);
  for (const server of [serverA, serverB]) {
    const c = new pg.Client(server.connectionString());
    await c.connect();
    await c.query('CREATE EXTENSION pg_stat_statements');
    await c.end();
  }
  admin = new pg.Client(serverA.connectionString());
  await admin.connect();
  await admin.query('CREATE DATABASE central');
  await admin.query(
    'CREATE ROLE node_a LOGIN; CREATE ROLE node_b LOGIN; CREATE ROLE stranger LOGIN; CREATE ROLE watcher LOGIN IN ROLE pg_monitor; CREATE ROLE node_f LOGIN',
  );
  await admin.end();
  admin = new pg.Client(serverA.connectionString('central'));
  await admin.connect();
}, 120_000);

afterAll(async () => {
  for (const sidecar of sidecars) await sidecar.stop();
  await admin?.end();
  await serverA?.stop();
  await serverB?.stop();
});

describe('a sink of several nodes', () => {
  it('registers nodes with sink-node add, and refuses an unregistered role or another node name in one line, creating nothing', async () => {
    const added = await runCli(['sink-node', 'add', 'node-a', '--role', 'node_a', '--dsn', serverA.connectionString('central')]);
    expect(added.code, added.stderr).toBe(0);
    expect((await runCli(['sink-node', 'add', 'node-b', '--role', 'node_b', '--dsn', serverA.connectionString('central')])).code).toBe(0);
    const noRole = await runCli(['sink-node', 'add', 'node-c', '--role', 'nobody_here', '--dsn', serverA.connectionString('central')]);
    expect(noRole.code).toBe(2);
    expect(logMessages(noRole.stderr)).toEqual([
      expect.stringMatching(/^sink-node add node-c: role nobody_here does not exist: create it first/),
    ]);
    const superuser = await runCli(['sink-node', 'add', 'node-c', '--role', 'postgres', '--dsn', serverA.connectionString('central')]);
    expect(superuser.code).toBe(2);
    expect(logMessages(superuser.stderr)).toEqual([
      expect.stringMatching(/role postgres is a superuser, bypasses row-level security or owns bpf_stats/),
    ]);
    // A reader's role would read every node's rows through the views, which run as the owner.
    const reader = await runCli(['sink-node', 'add', 'node-w', '--role', 'watcher', '--dsn', serverA.connectionString('central')]);
    expect(reader.code).toBe(2);
    expect(logMessages(reader.stderr)).toEqual([
      expect.stringMatching(/role watcher is a member of pg_monitor or bpf_stats_admin: a node's role must be neither/),
    ]);
    expect((await admin.query('SELECT node, role FROM bpf_stats.nodes ORDER BY node')).rows).toEqual([
      { node: 'node-a', role: 'node_a' },
      { node: 'node-b', role: 'node_b' },
    ]);

    const checked = await runCli(['check', '--dsn', serverB.connectionString(), '--sink', sinkAs('stranger')]);
    expect(checked.code).toBe(2);
    expect(logMessages(checked.stderr)).toEqual([
      expect.stringMatching(/^sink: role stranger is not registered as a node there: .*sink-node add NODE --role stranger/),
    ]);
    expect((await runCli(['check', '--dsn', serverB.connectionString(), '--sink', sinkAs('node_b')])).code).toBe(0);
    const unregistered = Sidecar.start({
      connectionString: serverB.connectionString(),
      sink: sinkAs('stranger'),
      node: 'node-s',
      intervalMs: 3_600_000,
    });
    await expect(unregistered).rejects.toThrow(
      /^sink: role stranger is not registered as a node there: the sink's owner runs `pg-bpf-stats sink-node add node-s --role stranger --dsn SINK`/,
    );
    const impostor = Sidecar.start({
      connectionString: serverB.connectionString(),
      sink: sinkAs('node_a'),
      node: 'node-b',
      intervalMs: 3_600_000,
    });
    await expect(impostor).rejects.toThrow(/^sink: role node_a is registered as node node-a, not node-b: run with --node node-a$/);
    expect((await admin.query('SELECT count(*)::int AS n FROM bpf_stats.health')).rows).toEqual([{ n: 0 }]);
    expect((await admin.query('SELECT count(*)::int AS n FROM bpf_stats.capabilities')).rows).toEqual([{ n: 0 }]);
  }, 120_000);

  it("keeps node A's role away from node B's rows and requests: every attempt fails, B's figures stay, B starts only what an admin asked", async () => {
    const lines: string[] = [];
    const log = (line: string) => lines.push(line);
    const onA = await Sidecar.start({
      connectionString: serverA.connectionString(),
      sink: sinkAs('node_a'),
      node: 'node-a',
      intervalMs: 3_600_000,
      historyIntervalMs: 0,
      log,
    });
    sidecars.push(onA);
    const onB = await Sidecar.start({
      connectionString: serverB.connectionString(),
      sink: sinkAs('node_b'),
      node: 'node-b',
      intervalMs: 3_600_000,
      historyIntervalMs: 0,
      controlPollMs: 500,
      log,
    });
    sidecars.push(onB);

    // An admin's request for B, taken by B's collector under its node role.
    const { rows: asked } = await admin.query<{ id: string }>(
      "SELECT bpf_stats.collect('{query}', interval '10 minutes', node => 'node-b') AS id",
    );
    await until("B's collector to take the admin's request", () => onB.attached().includes('query'));
    for (const server of [serverA, serverB]) {
      const c = new pg.Client(server.connectionString());
      await c.connect();
      for (let i = 0; i < 20; i++) await c.query('SELECT count(*) FROM pg_class WHERE relpages > $1', [i]);
      await c.end();
    }
    expect((await onA.flush()).error).toBeNull();
    expect((await onB.flush()).error).toBeNull();
    const before = await nodeBRows();
    // B wrote under its role: figures, texts, health, history, its request.
    expect(before.query_stats!.length).toBeGreaterThan(0);
    expect(before.query_texts!.length).toBeGreaterThan(0);
    expect(before.health).toHaveLength(1);
    expect(before.query_stats_history!.length).toBeGreaterThan(0);
    expect(before.collections).toEqual([expect.objectContaining({ id: Number(asked[0]!.id), status: 'running' })]);
    const someB = (await admin.query("SELECT userid, dbid, toplevel, queryid FROM bpf_stats.query_stats WHERE node = 'node-b' LIMIT 1"))
      .rows[0];
    expect((await admin.query("SELECT count(*)::int AS n FROM bpf_stats.query_stats WHERE node = 'node-a'")).rows[0].n).toBeGreaterThan(0);

    // Node A's role, as a collector's session would be (its node named), and as it could be (B's named).
    const a = new pg.Client({ connectionString: sinkAs('node_a'), options: '-c bpf_stats.node=node-a' });
    await a.connect();
    try {
      const affected = async (text: string, values: unknown[] = []) => (await a.query(text, values)).rowCount;
      // Invisible: B's rows can be neither read, nor changed, nor deleted.
      for (const table of [
        'query_stats',
        'backend_stats',
        'health',
        'query_texts',
        'capabilities',
        'query_stats_history',
        'backend_stats_history',
        'query_histogram_history',
        'collections',
      ]) {
        expect((await a.query(`SELECT count(*)::int AS n FROM bpf_stats.${table} WHERE node = 'node-b'`)).rows, table).toEqual([{ n: 0 }]);
        // (a node role holds DELETE on no table: its own rows go through bpf_stats.node_delete)
        await expect(a.query(`DELETE FROM bpf_stats.${table} WHERE node = 'node-b'`), table).rejects.toThrow(/permission denied/);
      }
      // Nor through node_delete, given B's tuple ids.
      const { rows: bRows } = await admin.query<{ ctid: string }>("SELECT ctid::text FROM bpf_stats.query_stats WHERE node = 'node-b'");
      expect(
        (await a.query("SELECT bpf_stats.node_delete('bpf_stats.query_stats', $1::tid[]) AS n", [bRows.map((r) => r.ctid)])).rows,
      ).toEqual([{ n: '0' }]);
      expect(await affected("UPDATE bpf_stats.query_stats SET total_time_ms = 1e9 WHERE node = 'node-b'")).toBe(0);
      expect(await affected("UPDATE bpf_stats.health SET last_error = 'forged' WHERE node = 'node-b'")).toBe(0);
      expect(await affected("UPDATE bpf_stats.collections SET status = 'stopped' WHERE node = 'node-b'")).toBe(0);
      // Forged rows under B: refused, by name, by the session's node, and over B's existing key.
      const rls = /new row violates row-level security policy/;
      await expect(
        a.query(
          "INSERT INTO bpf_stats.query_stats (node, userid, dbid, toplevel, queryid, total_time_ms) VALUES ('node-b', 10, 5, true, 42, 1e9)",
        ),
      ).rejects.toThrow(rls);
      await a.query("SET bpf_stats.node = 'node-b'");
      await expect(
        a.query('INSERT INTO bpf_stats.query_stats (userid, dbid, toplevel, queryid, total_time_ms) VALUES (10, 5, true, 42, 1e9)'),
      ).rejects.toThrow(rls);
      await expect(
        a.query(
          `INSERT INTO bpf_stats.query_stats (node, userid, dbid, toplevel, queryid, total_time_ms) VALUES ('node-b', $1, $2, $3, $4, 1e9)
           ON CONFLICT (node, userid, dbid, toplevel, queryid) DO UPDATE SET total_time_ms = 1e9`,
          [someB.userid, someB.dbid, someB.toplevel, someB.queryid],
        ),
      ).rejects.toThrow(rls);
      await a.query("SET bpf_stats.node = 'node-a'");
      // Its own rows cannot be handed to B either.
      await expect(a.query("UPDATE bpf_stats.query_stats SET node = 'node-b'")).rejects.toThrow(rls);
      await expect(
        a.query(
          "INSERT INTO bpf_stats.query_stats_history (ts, node, userid, dbid, toplevel, queryid, total_time_ms) VALUES (now(), 'node-b', 10, 5, true, 42, 1e9)",
        ),
      ).rejects.toThrow(rls);
      await expect(
        a.query(
          "INSERT INTO bpf_stats.query_texts (node, userid, dbid, toplevel, queryid, query) VALUES ('node-b', 10, 5, true, 42, 'forged')",
        ),
      ).rejects.toThrow(rls);
      // Partitions are reached only through their parent.
      const { rows: parts } = await admin.query<{ name: string }>(
        "SELECT inhrelid::regclass::text AS name FROM pg_inherits WHERE inhparent = 'bpf_stats.query_stats_history'::regclass LIMIT 1",
      );
      await expect(
        a.query(`INSERT INTO ${parts[0]!.name} (ts, node, userid, dbid, toplevel, queryid) VALUES (now(), 'node-b', 10, 5, true, 42)`),
      ).rejects.toThrow(/permission denied/);
      // Requests: none can be made, for B or for no node, nor can one be rewritten into another.
      await expect(
        a.query("INSERT INTO bpf_stats.collections (probes, duration, node) VALUES ('{lwlock}', '1 day', 'node-b')"),
      ).rejects.toThrow(/permission denied/);
      await expect(a.query("INSERT INTO bpf_stats.collections (probes, duration) VALUES ('{lwlock}', '1 day')")).rejects.toThrow(
        /permission denied/,
      );
      await expect(a.query("UPDATE bpf_stats.collections SET probes = '{lwlock}'")).rejects.toThrow(/permission denied/);
      await expect(a.query("SELECT bpf_stats.collect('{lwlock}', interval '1 day', node => 'node-b')")).rejects.toThrow(
        /permission denied/,
      );
      await expect(a.query("SELECT bpf_stats.add_node('node-x', 'node_a')")).rejects.toThrow(/permission denied/);
      await expect(a.query("SELECT bpf_stats.maintain_history(interval '1 second', interval '1 second')")).rejects.toThrow(
        /permission denied|must be owner/,
      );
      // The doorbell rings: B looks, and finds nothing new for it.
      await a.query("NOTIFY bpf_stats_control, '1'");
    } finally {
      await a.end();
    }
    await new Promise((resolve) => setTimeout(resolve, 1500));
    await onB.controlPlane!.settled();
    expect(onB.controlPlane!.runningIds()).toEqual([asked[0]!.id]);
    expect(onB.attached()).not.toContain('lwlock');

    // B's figures are exactly as they were.
    expect(await nodeBRows()).toEqual(before);
    // And both nodes go on writing their own.
    expect((await onB.flush()).error).toBeNull();
    expect((await onA.flush()).error).toBeNull();
    // Under their roles, history partitions, row retention and the control plane ran without a failure.
    expect(lines.filter((line) => /fail|denied|violates/i.test(line))).toEqual([]);
    expect(
      lines.filter((line) => /^history: .* kept as the sink keeps them \(the owner's collector drops old partitions/.test(line)),
    ).toHaveLength(2);
    expect((await admin.query('SELECT node, last_error FROM bpf_stats.health WHERE stopped_at IS NULL ORDER BY node')).rows).toEqual([
      { node: 'node-a', last_error: null },
      { node: 'node-b', last_error: null },
    ]);
  }, 180_000);

  it('lets a node role take no lock on the history tables that stops partition upkeep, and a flush it holds up fails with a lock timeout and goes out later', async () => {
    const [onA, onB] = sidecars as [Sidecar, Sidecar];
    const a = new pg.Client({ connectionString: sinkAs('node_a'), options: '-c bpf_stats.node=node-a' });
    await a.connect();
    try {
      // Appending is all a node role may do to history: any mode stronger than ROW EXCLUSIVE is refused.
      for (const table of ['query_stats_history', 'backend_stats_history', 'query_histogram_history']) {
        for (const mode of ['SHARE UPDATE EXCLUSIVE', 'SHARE', 'EXCLUSIVE', 'ACCESS EXCLUSIVE']) {
          await a.query('BEGIN');
          await expect(a.query(`LOCK TABLE bpf_stats.${table} IN ${mode} MODE`), `${table} ${mode}`).rejects.toThrow(/permission denied/);
          await a.query('ROLLBACK');
        }
        await expect(a.query(`DELETE FROM bpf_stats.${table}`)).rejects.toThrow(/permission denied/);
        await expect(a.query(`UPDATE bpf_stats.${table} SET node = node`)).rejects.toThrow(/permission denied/);
      }
      // So the owner's upkeep runs whatever a node role holds.
      await a.query('BEGIN');
      await a.query('LOCK TABLE bpf_stats.query_stats_history IN ROW EXCLUSIVE MODE');
      await admin.query("SET lock_timeout = '2s'");
      await admin.query("SELECT * FROM bpf_stats.maintain_history(interval '7 days', interval '1 day')");
      await admin.query('RESET lock_timeout');
      await a.query('ROLLBACK');

      // A lock a node role cannot take (the owner's, say, a DBA's ALTER TABLE): B's flush ends
      // with a lock timeout, and the same increments go out with the next.
      const b = new pg.Client(serverB.connectionString());
      await b.connect();
      for (let i = 0; i < 7; i++) await b.query('SELECT 1 AS held_up_424242, $1::int', [i]);
      await b.end();
      await a.query('BEGIN');
      await expect(a.query('LOCK TABLE bpf_stats.query_stats IN ACCESS EXCLUSIVE MODE')).rejects.toThrow(/permission denied/);
      await a.query('ROLLBACK');
      await admin.query('BEGIN');
      await admin.query('LOCK TABLE bpf_stats.query_stats IN ACCESS EXCLUSIVE MODE');
      const held = await onB.flush();
      expect(held.error).toMatch(/lock timeout/);
      await admin.query('ROLLBACK');
      expect((await onB.flush()).error).toBeNull();
      const { rows } = await admin.query(
        `SELECT q.calls FROM bpf_stats.query_stats q JOIN bpf_stats.query_texts t USING (node, userid, dbid, toplevel, queryid)
          WHERE q.node = 'node-b' AND t.query LIKE '%held_up_424242%'`,
      );
      expect(rows).toEqual([{ calls: '7' }]);
    } finally {
      await a.end();
    }
    expect((await onA.flush()).error).toBeNull();
  }, 120_000);

  it("lets a node role lock no table it writes above ROW EXCLUSIVE: B's flush and the owner's retention run while it holds all it can, and its own retention deletes through node_delete", async () => {
    const onB = sidecars[1] as Sidecar;
    // Every table a node role writes: the tables of node rows (cumulative, health, history) and collections.
    const written = (
      await admin.query<{ name: string }>(
        "SELECT t::text AS name FROM bpf_stats.node_tables() AS t UNION ALL SELECT 'bpf_stats.collections' ORDER BY 1",
      )
    ).rows.map((r) => r.name);
    expect(written).toEqual(
      expect.arrayContaining(['bpf_stats.query_stats', 'bpf_stats.backend_stats', 'bpf_stats.query_texts', 'bpf_stats.capabilities']),
    );
    // A node's rows, as the owner plants them: expired backends, an idle query key with its text,
    // an orphaned wait event; and B's, which nothing of A's may touch.
    const days3 = "now() - interval '3 days'";
    await admin.query(`INSERT INTO bpf_stats.backend_stats (node, pid, backend_start, backend_type, last_seen, exited_at) VALUES
      ('node-a', 990001, ${days3}, 'client backend', ${days3}, ${days3}), ('node-a', 990002, ${days3}, 'client backend', ${days3}, ${days3}),
      ('node-b', 990001, ${days3}, 'client backend', ${days3}, ${days3}), ('node-b', 990002, ${days3}, 'client backend', ${days3}, ${days3})`);
    await admin.query(`INSERT INTO bpf_stats.backend_wait_event_stats (node, pid, backend_start, wait_event_type, wait_event, last_seen) VALUES
      ('node-a', 990003, ${days3}, 'IO', 'DataFileRead', ${days3}), ('node-b', 990003, ${days3}, 'IO', 'DataFileRead', ${days3})`);
    await admin.query(`INSERT INTO bpf_stats.query_stats (node, userid, dbid, toplevel, queryid, calls, last_seen) VALUES
      ('node-a', 10, 5, true, 990004, 1, ${days3}), ('node-b', 10, 5, true, 990004, 1, ${days3})`);
    await admin.query(`INSERT INTO bpf_stats.query_texts (node, userid, dbid, toplevel, queryid, query, last_seen) VALUES
      ('node-a', 10, 5, true, 990004, 'SELECT 990004', ${days3}), ('node-b', 10, 5, true, 990004, 'SELECT 990004', ${days3})`);
    const planted = async () =>
      (
        await admin.query(
          `SELECT 'backend_stats' AS t, node, pid::text AS id FROM bpf_stats.backend_stats WHERE pid IN (990001, 990002)
           UNION ALL SELECT 'backend_wait_event_stats', node, pid::text FROM bpf_stats.backend_wait_event_stats WHERE pid = 990003
           UNION ALL SELECT 'query_stats', node, queryid::text FROM bpf_stats.query_stats WHERE queryid = 990004
           UNION ALL SELECT 'query_texts', node, queryid::text FROM bpf_stats.query_texts WHERE queryid = 990004
           ORDER BY 1, 2, 3`,
        )
      ).rows.map((r) => `${r.t} ${r.node} ${r.id}`);

    // An expired history partition (25 days old), for the owner's upkeep to drop.
    const day = 86_400;
    const lo = (Math.floor(Date.now() / 1000 / day) - 25) * day;
    const expiredPartition = `query_stats_history_${lo}_${lo + day}`;
    await admin.query(
      `CREATE TABLE bpf_stats.${expiredPartition} (LIKE bpf_stats.query_stats_history INCLUDING DEFAULTS);
       ALTER TABLE bpf_stats.query_stats_history ATTACH PARTITION bpf_stats.${expiredPartition} FOR VALUES FROM (to_timestamp(${lo})) TO (to_timestamp(${lo + day}))`,
    );
    const partitionKept = async () =>
      (await admin.query('SELECT to_regclass($1) IS NOT NULL AS kept', [`bpf_stats.${expiredPartition}`])).rows[0].kept as boolean;

    const a = new pg.Client({ connectionString: sinkAs('node_a'), options: '-c bpf_stats.node=node-a' });
    await a.connect();
    try {
      for (const table of written) {
        for (const mode of ['SHARE UPDATE EXCLUSIVE', 'SHARE', 'SHARE ROW EXCLUSIVE', 'EXCLUSIVE', 'ACCESS EXCLUSIVE']) {
          await a.query('BEGIN');
          await expect(a.query(`LOCK TABLE ${table} IN ${mode} MODE`), `${table} ${mode}`).rejects.toThrow(/permission denied/);
          await a.query('ROLLBACK');
        }
        await expect(a.query(`DELETE FROM ${table}`), table).rejects.toThrow(/permission denied/);
        await expect(a.query(`TRUNCATE ${table}`), table).rejects.toThrow(/permission denied/);
      }

      // All A can still hold, in a transaction it keeps open: ROW EXCLUSIVE on every table it
      // writes (LOCK where it may insert, an UPDATE on collections), and row locks on its own
      // rows (its expired backends too).
      await a.query('BEGIN');
      for (const table of written.filter((t) => t !== 'bpf_stats.collections')) await a.query(`LOCK TABLE ${table} IN ROW EXCLUSIVE MODE`);
      await a.query('UPDATE bpf_stats.collections SET status = status');
      await a.query('INSERT INTO bpf_stats.query_stats (userid, dbid, toplevel, queryid) VALUES (10, 5, true, 990005)');
      await a.query('UPDATE bpf_stats.backend_stats SET last_seen = last_seen');
      await a.query('SELECT 1 FROM bpf_stats.backend_wait_event_stats FOR UPDATE');
      await a.query('SELECT 1 FROM bpf_stats.query_texts FOR UPDATE');
      const { rows: modes } = await admin.query<{ mode: string }>(
        "SELECT DISTINCT mode FROM pg_locks WHERE pid = $1 AND locktype = 'relation' ORDER BY 1",
        [(await a.query('SELECT pg_backend_pid() AS pid')).rows[0].pid],
      );
      expect(modes.map((m) => m.mode).filter((m) => !['AccessShareLock', 'RowShareLock', 'RowExclusiveLock'].includes(m))).toEqual([]);

      // B's flush writes B's figures meanwhile.
      const b = new pg.Client(serverB.connectionString());
      await b.connect();
      // (an alias does not make a query id: three columns do)
      for (let i = 0; i < 5; i++) await b.query('SELECT 1 AS while_a_holds_737373, $1::int, $2::text', [i, 'x']);
      await b.end();
      const bCalls = async () =>
        (
          await admin.query(
            `SELECT q.calls FROM bpf_stats.query_stats q JOIN bpf_stats.query_texts t USING (node, userid, dbid, toplevel, queryid)
              WHERE q.node = 'node-b' AND t.query LIKE '%while_a_holds_737373%'`,
          )
        ).rows;
      // (a text goes with a later flush than its figures when its lookup is still running)
      await until("B's figures and text", async () => {
        expect((await onB.flush()).error).toBeNull();
        return (await bCalls()).length > 0;
      });
      expect(await bCalls()).toEqual([{ calls: '5' }]);
      // And the owner's row retention (every node's expired backends) and partition upkeep: the
      // rows A holds locked wait for a later pass, the others go now.
      await admin.query("SET lock_timeout = '2s'");
      await admin.query("SET bpf_stats.node = 'owner-node'");
      try {
        const owner = await new RowRetention(86_400_000).maintain(clientDatabase(admin));
        expect(owner.backends).toBeGreaterThanOrEqual(2);
        // Dropping a partition needs ACCESS EXCLUSIVE on its parent, which A's ROW EXCLUSIVE
        // holds off: the drop gives up after 100 ms and waits for a later pass; the pass goes on.
        const started = Date.now();
        await admin.query("SELECT * FROM bpf_stats.maintain_history(interval '7 days', interval '1 day')");
        expect(Date.now() - started).toBeLessThan(2000);
        expect(await partitionKept()).toBe(true);
      } finally {
        await admin.query('RESET lock_timeout');
        await admin.query('RESET bpf_stats.node');
      }
      expect(await planted()).toEqual([
        'backend_stats node-a 990001',
        'backend_stats node-a 990002',
        'backend_wait_event_stats node-a 990003',
        'query_stats node-a 990004',
        'query_stats node-b 990004',
        'query_texts node-a 990004',
        'query_texts node-b 990004',
      ]);
      await a.query('ROLLBACK');
      await admin.query("SELECT * FROM bpf_stats.maintain_history(interval '7 days', interval '1 day')");
      expect(await partitionKept()).toBe(false);

      // A's own retention, as its collector runs it (asNode): its expired backends, its orphaned
      // wait event, its idle key's rows go; B's key stays.
      const none = { userid: [], dbid: [], toplevel: [], queryid: [] };
      const own = await new RowRetention(86_400_000, 86_400_000, {
        asNode: true,
        heldKeys: async () => ({ max: 5000, pgss: none, running: { userid: [], dbid: [], queryid: [] } }),
      }).maintain(clientDatabase(a));
      expect(own).toMatchObject({ backends: 2, queries: 1 });
      expect(await planted()).toEqual(['query_stats node-b 990004', 'query_texts node-b 990004']);

      // node_delete deletes A's rows only, from the tables A wrote with DELETE before.
      for (const table of [
        'bpf_stats.health',
        'bpf_stats.collections',
        'bpf_stats.query_stats_history',
        'bpf_stats.nodes',
        'pg_catalog.pg_class',
      ]) {
        await expect(a.query('SELECT bpf_stats.node_delete($1::regclass, $2::tid[])', [table, ['(0,1)']]), table).rejects.toThrow(
          /does not delete from/,
        );
      }
      const { rows: bKey } = await admin.query<{ ctid: string }>(
        "SELECT ctid::text FROM bpf_stats.query_stats WHERE node = 'node-b' AND queryid = 990004",
      );
      expect((await a.query("SELECT bpf_stats.node_delete('bpf_stats.query_stats', $1::tid[]) AS n", [[bKey[0]!.ctid]])).rows).toEqual([
        { n: '0' },
      ]);
      expect(await planted()).toEqual(['query_stats node-b 990004', 'query_texts node-b 990004']);

      // Its capabilities are replaced as a node's start writes them.
      const line = (probe: string, ok: boolean): CheckLine => ({ name: probe, probe, kind: 'feature', ok, required: false, detail: probe });
      const capabilities = async () =>
        (await admin.query("SELECT node, probe, available FROM bpf_stats.capabilities WHERE host = 'host-990006' ORDER BY node, probe"))
          .rows;
      await admin.query(
        "INSERT INTO bpf_stats.capabilities (node, host, kind, probe, available, required, reason) VALUES ('node-b', 'host-990006', 'feature', 'x', true, false, 'x')",
      );
      await writeCapabilities(clientDatabase(a), [line('x', true), line('y', true)], 'host-990006');
      await writeCapabilities(clientDatabase(a), [line('x', false)], 'host-990006');
      expect(await capabilities()).toEqual([
        { node: 'node-a', probe: 'x', available: false },
        { node: 'node-b', probe: 'x', available: true },
      ]);
    } finally {
      await a.end();
      await admin.query('DELETE FROM bpf_stats.query_stats WHERE queryid = 990004');
      await admin.query('DELETE FROM bpf_stats.query_texts WHERE queryid = 990004');
      await admin.query("DELETE FROM bpf_stats.capabilities WHERE host = 'host-990006'");
    }
    // A role registered for no node has no node_delete.
    const stranger = new pg.Client(sinkAs('stranger'));
    await stranger.connect();
    try {
      await expect(stranger.query("SELECT bpf_stats.node_delete('bpf_stats.query_stats', '{}')")).rejects.toThrow(/permission denied/);
    } finally {
      await stranger.end();
    }
  }, 120_000);

  it("lets a node role hold no lock the owner's upkeep, collect() or another node waits on: node_maintain_history in an open transaction, LOCK on health or collections", async () => {
    const a = new pg.Client({ connectionString: sinkAs('node_a'), options: '-c bpf_stats.node=node-a' });
    await a.connect();
    try {
      // The partitions are there (the nodes made them at start): a node's pass takes no lock, so
      // a transaction it keeps open holds off none of the owner's upkeep.
      await a.query('BEGIN');
      expect((await a.query('SELECT * FROM bpf_stats.node_maintain_history()')).rows).toEqual([{ created: 0, dropped: 0 }]);
      const { rows: held } = await admin.query(
        `SELECT l.relation::regclass::text AS relation, l.mode FROM pg_locks l
          WHERE l.pid = $1 AND l.locktype = 'relation' AND l.mode NOT IN ('AccessShareLock') ORDER BY 1`,
        [(await a.query('SELECT pg_backend_pid() AS pid')).rows[0].pid],
      );
      expect(held).toEqual([]);
      await admin.query("SET lock_timeout = '2s'");
      try {
        await admin.query("SELECT * FROM bpf_stats.maintain_history(interval '7 days', interval '1 day')");
      } finally {
        await admin.query('RESET lock_timeout');
      }
      await a.query('ROLLBACK');

      // When a partition is missing, a node's pass makes it, but waits at most 100 ms for the lock.
      const { rows: ahead } = await admin.query<{ name: string }>(
        `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
          WHERE i.inhparent = 'bpf_stats.query_stats_history'::regclass
            AND (regexp_match(c.relname, '_(\\d+)_(\\d+)$'))[1]::bigint > extract(epoch FROM now())
          ORDER BY 1 LIMIT 1`,
      );
      await admin.query(`DROP TABLE bpf_stats.${ahead[0]!.name}`);
      await admin.query('BEGIN');
      await admin.query('LOCK TABLE bpf_stats.query_stats_history IN SHARE UPDATE EXCLUSIVE MODE');
      await a.query("SET statement_timeout = '10s'");
      const started = Date.now();
      await expect(a.query('SELECT * FROM bpf_stats.node_maintain_history()')).rejects.toThrow(/lock timeout/);
      expect(Date.now() - started).toBeLessThan(2000);
      await a.query('RESET statement_timeout');
      await admin.query('ROLLBACK');
      expect((await a.query('SELECT * FROM bpf_stats.node_maintain_history()')).rows).toEqual([
        { created: expect.any(Number), dropped: 0 },
      ]);
      expect((await admin.query('SELECT to_regclass($1) IS NOT NULL AS made', [`bpf_stats.${ahead[0]!.name}`])).rows).toEqual([
        { made: true },
      ]);

      // health (every flush writes it) and collections (collect() writes it): no lock above ROW EXCLUSIVE.
      for (const table of ['health', 'collections']) {
        for (const mode of ['SHARE UPDATE EXCLUSIVE', 'SHARE', 'SHARE ROW EXCLUSIVE', 'EXCLUSIVE', 'ACCESS EXCLUSIVE']) {
          await a.query('BEGIN');
          await expect(a.query(`LOCK TABLE bpf_stats.${table} IN ${mode} MODE`), `${table} ${mode}`).rejects.toThrow(/permission denied/);
          await a.query('ROLLBACK');
        }
      }
      // So an admin's collect() and the other node's flush go on whatever node A holds.
      await a.query('BEGIN');
      await a.query("UPDATE bpf_stats.health SET last_error = NULL WHERE node = 'node-a'");
      await admin.query("SET lock_timeout = '2s'");
      try {
        const { rows } = await admin.query<{ id: string }>(
          "SELECT bpf_stats.collect('{query}', interval '1 second', node => 'node-b') AS id",
        );
        expect(rows[0]!.id).toMatch(/^\d+$/);
      } finally {
        await admin.query('RESET lock_timeout');
      }
      expect((await (sidecars[1] as Sidecar).flush()).error).toBeNull();
      await a.query('ROLLBACK');
    } finally {
      await a.end();
    }
  }, 120_000);

  it('keeps health rows a node role writes bounded: none can count as a live collector for good, none holds 100 kB', async () => {
    const a = new pg.Client({ connectionString: sinkAs('node_a'), options: '-c bpf_stats.node=node-a' });
    await a.connect();
    try {
      const forge = (values: string) =>
        a.query(`INSERT INTO bpf_stats.health (host, pid, version, postmaster_pid, probe_sets, started_at, interval_ms, updated_at)
                 VALUES ${values}`);
      const check = /violates check constraint/;
      await expect(forge("('forged', 1, '0', 1, '{cpu}', now(), 1000, 'infinity')")).rejects.toThrow(check);
      await expect(forge("('forged', 2, '0', 1, '{cpu}', now(), 1000, now() + interval '1 day')")).rejects.toThrow(check);
      await expect(forge("('forged', 3, '0', 1, '{cpu}', now(), 1e300, now())")).rejects.toThrow(check);
      await expect(forge("('forged', 4, '0', 1, '{cpu}', now(), 'NaN', now())")).rejects.toThrow(check);
      await expect(forge("('forged', 5, repeat('x', 100000), 1, '{cpu}', now(), 1000, now())")).rejects.toThrow(check);
      await expect(forge("('forged', 6, '0', 1, '{cpu}', '-infinity', 1000, now())")).rejects.toThrow(check);
      await expect(a.query("UPDATE bpf_stats.health SET updated_at = 'infinity' WHERE node = 'node-a'")).rejects.toThrow(check);
      await expect(a.query("UPDATE bpf_stats.health SET last_error = repeat('x', 100000) WHERE node = 'node-a'")).rejects.toThrow(check);
    } finally {
      await a.end();
    }
    expect((await admin.query("SELECT count(*)::int AS n FROM bpf_stats.health WHERE host = 'forged'")).rows).toEqual([{ n: 0 }]);
    // A row the owner left from before these bounds (the migration deletes such rows) would
    // still not count: collect() bounds what it reads too.
    await admin.query("SET bpf_stats.node = 'node-z'");
    const { rows: bounds } = await admin.query<{ name: string; definition: string }>(
      `SELECT conname AS name, pg_get_constraintdef(oid) AS definition FROM pg_constraint
        WHERE conrelid = 'bpf_stats.health'::regclass AND conname IN ('health_times_finite', 'health_updated_at_past', 'health_interval_bound')`,
    );
    expect(bounds).toHaveLength(3);
    await admin.query(`ALTER TABLE bpf_stats.health ${bounds.map((b) => `DROP CONSTRAINT ${b.name}`).join(', ')}`);
    try {
      await admin.query(`INSERT INTO bpf_stats.health (host, pid, version, postmaster_pid, probe_sets, started_at, interval_ms, updated_at)
                         VALUES ('forged', 7, '0', 1, '{cpu}', now(), 1e300, now() - interval '4 days'),
                                ('forged', 8, '0', 1, '{cpu}', now(), 1000, 'infinity')`);
      await expect(admin.query("SELECT bpf_stats.collect('{query}', interval '1 second')")).rejects.toThrow(
        /collectors of several nodes write into this database \(node-a, node-b\)/,
      );
    } finally {
      await admin.query("DELETE FROM bpf_stats.health WHERE host = 'forged'");
      await admin.query(`ALTER TABLE bpf_stats.health ${bounds.map((b) => `ADD CONSTRAINT ${b.name} ${b.definition}`).join(', ')}`);
      await admin.query('RESET bpf_stats.node');
    }
  }, 60_000);

  it('lets a node role neither take nor rewrite a request made for no node, so a forged status message about one does not verify', async () => {
    const { rows: made } = await admin.query<{ done: string; pending: string }>(
      `WITH done AS (INSERT INTO bpf_stats.collections (probes, duration, status, started_at, finished_at)
                     VALUES ('{query}', '1 minute', 'done', now(), now()) RETURNING id),
            pending AS (INSERT INTO bpf_stats.collections (probes, duration) VALUES ('{query}', '1 minute') RETURNING id)
       SELECT done.id AS done, pending.id AS pending FROM done, pending`,
    );
    const { done, pending } = made[0]!;
    const a = new pg.Client({ connectionString: sinkAs('node_a'), options: '-c bpf_stats.node=node-a' });
    await a.connect();
    try {
      expect(
        (await a.query("UPDATE bpf_stats.collections SET status = 'failed', error = 'forged', node = 'node-a' WHERE id = $1", [done]))
          .rowCount,
      ).toBe(0);
      expect((await a.query("UPDATE bpf_stats.collections SET status = 'rejected', node = 'node-a' WHERE node IS NULL")).rowCount).toBe(0);
      expect((await a.query('SELECT count(*)::int AS n FROM bpf_stats.collections WHERE node IS NULL')).rows).toEqual([{ n: 0 }]);
      const forged = JSON.stringify({ id: Number(done), status: 'failed', error: 'forged' });
      await a.query('SELECT pg_notify($1, $2)', ['bpf_stats_status', forged]);
      expect(await verifiedStatus(admin, forged)).toBeNull();
      expect(await verifiedStatus(admin, JSON.stringify({ id: Number(done), status: 'done' }))).toEqual({
        id: done,
        status: 'done',
        error: null,
      });
    } finally {
      await a.end();
    }
    // Node B's collector (polling every 500 ms) leaves the pending one to a collector of the owner's.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    await (sidecars[1] as Sidecar).controlPlane!.settled();
    expect((await admin.query('SELECT status, node FROM bpf_stats.collections WHERE id = $1', [pending])).rows).toEqual([
      { status: 'pending', node: null },
    ]);
    await admin.query('DELETE FROM bpf_stats.collections WHERE id IN ($1, $2)', [done, pending]);
  }, 60_000);

  it('keeps a node role that is also a reader (registered before add_node refused it) to its own rows, and refuses to run as it', async () => {
    // As an older version let it be: registered, then made a member of pg_monitor.
    await admin.query("INSERT INTO bpf_stats.nodes (node, role) VALUES ('node-w', 'watcher')");
    await admin.query("SELECT bpf_stats.grant_node('watcher')");
    const w = new pg.Client({ connectionString: sinkAs('watcher'), options: '-c bpf_stats.node=node-w' });
    await w.connect();
    try {
      for (const table of ['query_stats', 'backend_stats', 'health', 'query_texts', 'query_stats_history', 'collections']) {
        expect((await w.query(`SELECT count(*)::int AS n FROM bpf_stats.${table} WHERE node <> 'node-w'`)).rows, table).toEqual([{ n: 0 }]);
      }
    } finally {
      await w.end();
    }
    const checked = await runCli(['check', '--dsn', serverB.connectionString(), '--sink', sinkAs('watcher')]);
    expect(checked.code).toBe(2);
    expect(logMessages(checked.stderr)).toEqual([
      expect.stringMatching(
        /^sink: role watcher \(node node-w\) is a member of pg_monitor, which would let it read or request for every node there: .*REVOKE pg_monitor FROM watcher$/,
      ),
    ]);
    await admin.query("SELECT bpf_stats.remove_node('node-w')");
  }, 60_000);

  it("never drops history as a node: the owner's retention is kept, and only missing partitions are made", async () => {
    // A partition of 20 days ago, as an owner keeping 30 days has.
    const day = 86_400;
    const lo = (Math.floor(Date.now() / 1000 / day) - 20) * day;
    const name = `query_stats_history_${lo}_${lo + day}`;
    await admin.query(
      `CREATE TABLE bpf_stats.${name} (LIKE bpf_stats.query_stats_history INCLUDING DEFAULTS);
       ALTER TABLE bpf_stats.query_stats_history ATTACH PARTITION bpf_stats.${name} FOR VALUES FROM (to_timestamp(${lo})) TO (to_timestamp(${lo + day}))`,
    );
    const a = new pg.Client({ connectionString: sinkAs('node_a'), options: '-c bpf_stats.node=node-a' });
    await a.connect();
    try {
      expect((await a.query('SELECT * FROM bpf_stats.node_maintain_history()')).rows).toEqual([{ created: 0, dropped: 0 }]);
    } finally {
      await a.end();
    }
    expect((await admin.query('SELECT to_regclass($1) IS NOT NULL AS kept', [`bpf_stats.${name}`])).rows).toEqual([{ kept: true }]);
    await admin.query(`DROP TABLE bpf_stats.${name}`);
  }, 60_000);

  it("counts a node as local only for a collector's session of a trusted role, not for one a node role names after its health row", async () => {
    // A node's role (no collector of its own runs) writes a health row and opens a session named
    // as its collector's control connection would be.
    await admin.query("SELECT bpf_stats.add_node('node-f', 'node_f')");
    const a = new pg.Client({ connectionString: sinkAs('node_f'), options: '-c bpf_stats.node=node-f' });
    await a.connect();
    try {
      await a.query(`INSERT INTO bpf_stats.health (host, pid, version, postmaster_pid, probe_sets, started_at, interval_ms)
                     VALUES ('forged-host', 4242, '0', 1, '{cpu}', now(), 1000)`);
      await a.query("SET application_name = 'pg-bpf-stats (pid 4242 on forged-host)'");
      const local = async () => (await admin.query<{ n: string }>('SELECT n FROM bpf_stats.local_nodes() AS n')).rows.map((r) => r.n);
      expect(await local()).not.toContain('node-f');
      // The same name on a session of the owner's (here a superuser's) counts.
      const owner = new pg.Client({
        connectionString: serverA.connectionString('central'),
        application_name: 'pg-bpf-stats (pid 4242 on forged-host)',
      });
      await owner.connect();
      try {
        expect(await local()).toContain('node-f');
      } finally {
        await owner.end();
      }
    } finally {
      await a.end();
    }
    await admin.query("DELETE FROM bpf_stats.health WHERE node = 'node-f'");
    await admin.query("SELECT bpf_stats.remove_node('node-f')");
  }, 60_000);
});
