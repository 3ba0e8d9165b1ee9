import { hasFunction } from '../../postmaster/binary-symbols.js';
import { defineFamily } from '../family.js';

/** Exact statement counts, from a probe where each top-level statement ends; nested statements from the executor. */
export const queryFamily = defineFamily({
  name: 'query',
  probeSets: {
    query: {
      name: 'query',
      description: 'exact call counts: one probe where each top-level statement ends (PortalRun)',
      default: false,
      unsupportedReason: ({ target }) => (target.statementEnd ? null : `${target.binaryPath} exports no PortalRun`),
      attachments: [{ program: 'on_query_done', kind: 'statement-end' }],
      cost: 'one uprobe trap per statement (~4 us; ~5 us as a uretprobe on builds without USDT)',
    },
    nested: {
      name: 'nested',
      description:
        "nested statements (functions, procedures, DO) under their own key with toplevel = false, as pg_stat_statements.track = all keys them; includes the query set's call counts",
      default: false,
      unsupportedReason: ({ target }) => {
        if (!target.statementEnd) return `${target.binaryPath} exports no PortalRun`;
        const missing = ['ExecutorStart', 'ExecutorEnd'].filter((f) => !hasFunction(target, f));
        return missing.length ? `${target.binaryPath} exports no ${missing.join(' or ')}` : null;
      },
      attachments: [
        // Shared with the query set: attached once whichever of the two asks (src/collector/probe-attachments.ts).
        { program: 'on_query_done', kind: 'statement-end' },
        {
          kind: 'target',
          programs: ['on_executor_beg', 'on_executor_end'],
          probes: () => [
            { program: 'on_executor_beg', symbol: 'ExecutorStart', retprobe: false },
            { program: 'on_executor_end', symbol: 'ExecutorEnd', retprobe: false },
          ],
        },
      ],
      cost: "the query set's trap, plus two uprobe traps per statement executed, top-level or nested (~4 us each)",
    },
  },
  columns: [
    {
      column: 'calls',
      field: 'calls',
      unit: 'count',
      measuredBy: ['query', 'nested'],
      description:
        "Statements executed (count), exact: counted where each top-level statement ends, and where each nested statement's executor ends (the nested set). Only while the `query` or `nested` probe set is attached; NULL: not measured (never a guess).",
    },
  ],
});
