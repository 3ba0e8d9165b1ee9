import { createQueryId, PostgresQueryCompiler, sql, type Kysely } from 'kysely';
import type { FlushInput, FlushPart } from '../families/flush-part.js';

/**
 * Writes a flush as ONE statement: every part's statements become data-modifying CTEs of a
 * single `WITH ... SELECT`, so the flush is atomic without BEGIN/COMMIT and costs one round trip
 * (on a loaded host each round trip of the sidecar costs ~1-2 ms of its CPU). The parts are
 * committed, in order, only after the statement succeeded. When no part has a statement of its
 * own (companion statements, such as the health row's, do not count), nothing is sent: an idle
 * server gets no statement and no transaction. The writer knows no table: it works for any
 * schema the parts write.
 *
 * @example
 * const writer = new FlushWriter(db, [queryStats, backendStats, histograms, health]);
 * await writer.write({ maps: object.maps.snapshot(fields), measured, startedMs: performance.now() });
 */
export class FlushWriter<DB> {
  /** How long the last write's statement took, from sending it to its answer (0: nothing was sent). */
  lastStatementMs = 0;

  constructor(
    private readonly db: Kysely<DB>,
    private readonly parts: readonly FlushPart[],
  ) {}

  /** Whether no part has anything of its own to write or do (FlushPart.wouldWriteNothing). */
  partsSettled(): boolean {
    return this.parts.every((part) => part.wouldWriteNothing?.() ?? true);
  }

  /** Returns the number of statements written (0: nothing to write, no round trip). */
  async write(input: FlushInput): Promise<number> {
    this.lastStatementMs = 0;
    const prepared = this.parts.map((part) => ({ part, ...part.prepare(input) }));
    if (!prepared.some((p) => p.statements.length && !p.companion)) {
      // Nothing to write is written. A part says what that means to it (skipped()); one that
      // does not had nothing to write, and commits as if written (baselines, evictions).
      for (const p of prepared) {
        if (p.skipped) p.skipped();
        else if (!p.statements.length) p.commit();
      }
      return 0;
    }
    const ctes = prepared.flatMap(({ part, statements, build }) =>
      // kysely puts a raw CTE body in as it is: the parentheses are ours.
      (build ? build() : statements).map((statement, i) => sql`${sql.id(`${part.name}_${i}`)} AS (${statement})`),
    );
    // Compiled by a compiler of its own (the writer's plugins still apply): kysely's shared one
    // keeps the parameters of the last statement it compiled, and a flush's are its binary arrays
    // (megabytes with thousands of rows), which would then stay alive until the next flush.
    const queryId = createQueryId();
    const node = this.db.getExecutor().transformQuery(sql`WITH ${sql.join(ctes)} SELECT 1 AS flushed`.toOperationNode(), queryId);
    const statement = new PostgresQueryCompiler().compileQuery(node, queryId);
    const sentAt = performance.now();
    await this.db.executeQuery(statement);
    this.lastStatementMs = performance.now() - sentAt;
    for (const { commit } of prepared) commit();
    return ctes.length;
  }
}
