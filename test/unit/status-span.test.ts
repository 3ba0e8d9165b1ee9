import { describe, expect, it } from 'vitest';
import { STATUS_SPAN_MAX, statusSpan } from '../../src/collector/status-span.js';

describe('statusSpan', () => {
  it('covers st_state through st_query_id when the state comes first', () => {
    expect(statusSpan({ stateOffset: 232, queryIdOffset: 440 })).toEqual({ offset: 232, length: 216 });
  });

  it('covers st_query_id through st_state when the query id comes first', () => {
    expect(statusSpan({ stateOffset: 100, queryIdOffset: 40 })).toEqual({ offset: 40, length: 64 });
  });

  it('is empty when an offset is unknown', () => {
    expect(statusSpan({ stateOffset: null, queryIdOffset: 440 }).length).toBe(0);
    expect(statusSpan({ stateOffset: 232, queryIdOffset: null }).length).toBe(0);
  });

  it('is empty when the fields are further apart than one read may copy', () => {
    expect(statusSpan({ stateOffset: 0, queryIdOffset: STATUS_SPAN_MAX - 8 }).length).toBe(STATUS_SPAN_MAX);
    expect(statusSpan({ stateOffset: 0, queryIdOffset: STATUS_SPAN_MAX - 7 }).length).toBe(0);
  });
});
