import { DummyDriver, Kysely, type DatabaseConnection, type Driver } from 'kysely';
import type { PreparedPart } from '../../src/families/flush-part.js';
import type { BpfStatsDatabase } from '../../src/storage/database.js';
import { compileOnlyDialect } from './compile-only-dialect.js';

/** The oid answeringDb() gives bpf_stats.query_increments. */
export const INCREMENTS_TYPE_OID = 424242;

/** A database that answers every statement with the row type's oid (all QueryIncrements.resolve asks) and runs nothing else. */
export function answeringDb(): Kysely<BpfStatsDatabase> {
  const connection: DatabaseConnection = {
    executeQuery: async <R>() => ({ rows: [{ oid: String(INCREMENTS_TYPE_OID) }] as R[] }),
    streamQuery: () => {
      throw new Error('not streamed');
    },
  };
  const driver: Driver = Object.assign(new DummyDriver(), { acquireConnection: async () => connection });
  return new Kysely<BpfStatsDatabase>({ dialect: compileOnlyDialect(driver) });
}

/** Query history rows a built history part sends: the length of its array of query_increments. */
export function queryHistoryRows(part: PreparedPart, db: Kysely<BpfStatsDatabase>): number {
  const statements = part.build!().map((s) => s.compile(db));
  const query = statements.find((s) => s.sql.includes('query_stats_history'));
  const array = query?.parameters.find((p): p is Buffer => Buffer.isBuffer(p) && p.readUInt32BE(8) === INCREMENTS_TYPE_OID);
  return array ? array.readInt32BE(12) : 0;
}
