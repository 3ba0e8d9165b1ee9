import { defineFamily } from '../family.js';

/** Exact statement counts, from a probe where each top-level statement ends. */
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
  },
  columns: [{ column: 'calls', field: 'calls', unit: 'count', measuredBy: ['query'],
      description: 'Statements executed (count), exact: counted where each top-level statement ends. Only while the `query` probe set is attached; NULL: not measured (never a guess).',
    }],
});
