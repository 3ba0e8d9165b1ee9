import { describe, expect, it } from 'vitest';
import { expandSqlMacros, formatDuration, interpolate, intervalMs, parseDuration, type QueryContext } from '../support/grafana-macros.js';

const context = (over: Partial<QueryContext> = {}): QueryContext => ({
  from: new Date('2026-11-27T17:00:00Z'),
  to: new Date('2026-11-27T18:00:00Z'),
  maxDataPoints: 720,
  minIntervalMs: 1000,
  variables: {
    node: { values: ["db'1"] },
    database: { values: ['5', '16384'], multi: true, includeAll: true },
    queryid: { values: ['1', '2'], multi: true, includeAll: true, all: true, allValue: "'*'" },
    datname: { values: ['shop.eu'], multi: true, includeAll: true },
    tables: { values: ['a', 'b|c'], multi: true, includeAll: true },
    instance: { values: ['db1:9187'] },
  },
  ...over,
});

describe('Grafana interpolation for the SQL data source', () => {
  it('writes a single value raw with quotes doubled, several values as a quoted list, All as its custom value', () => {
    expect(interpolate("node = '$node'", 'sql', context())).toBe("node = 'db''1'");
    // biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's variable syntax, the input under test
    expect(interpolate('dbid IN ($database) AND dbid IN (${database}) AND [[database]]', 'sql', context())).toBe(
      "dbid IN ('5','16384') AND dbid IN ('5','16384') AND '5','16384'",
    );
    expect(interpolate('queryid IN ($queryid)', 'sql', context())).toBe("queryid IN ('*')");
  });

  it('leaves unknown names and macros for the macro pass', () => {
    expect(interpolate('$__timeFilter(ts) AND $unknown', 'sql', context())).toBe('$__timeFilter(ts) AND $unknown');
  });

  it('fills the global variables from the range and the panel', () => {
    // 3600 s / 720 points = 5 s, above the 1 s floor.
    expect(intervalMs(context())).toBe(5000);
    expect(interpolate('$__interval $__interval_ms $__range $__range_s $__range_ms', 'sql', context())).toBe('5s 5000 3600s 3600 3600000');
    expect(intervalMs(context({ minIntervalMs: 300_000 }))).toBe(300_000);
    expect(interpolate('$__interval', 'sql', context({ minIntervalMs: 300_000 }))).toBe('5m');
  });
});

describe('Grafana interpolation for Prometheus', () => {
  it('escapes regex characters of multi values and joins them with |', () => {
    expect(interpolate('datname=~"$datname"', 'prometheus', context())).toBe('datname=~"shop\\\\.eu"');
    expect(interpolate('x=~"$tables"', 'prometheus', context())).toBe('x=~"(a|b\\\\|c)"');
    expect(interpolate('instance="$instance"', 'prometheus', context())).toBe('instance="db1:9187"');
  });

  it('computes $__rate_interval as max($__interval + scrape interval, 4 scrape intervals)', () => {
    expect(interpolate('$__rate_interval', 'prometheus', context({ scrapeIntervalMs: 1000 }))).toBe('6s');
    expect(interpolate('$__rate_interval', 'prometheus', context())).toBe('1m');
  });
});

describe('PostgreSQL macros', () => {
  it('expands time filters, groups and epochs', () => {
    const c = context();
    expect(expandSqlMacros('WHERE $__timeFilter(h.ts)', c)).toBe(
      "WHERE h.ts BETWEEN '2026-11-27T17:00:00.000Z' AND '2026-11-27T18:00:00.000Z'",
    );
    expect(expandSqlMacros('$__timeFrom() $__timeTo()', c)).toBe("'2026-11-27T17:00:00.000Z' '2026-11-27T18:00:00.000Z'");
    expect(expandSqlMacros('SELECT $__timeGroupAlias(h.ts, 5m)', c)).toBe('SELECT floor(extract(epoch from h.ts)/300)*300 AS "time"');
    expect(expandSqlMacros("$__timeGroup(date_trunc('s', ts), '1s', 0)", c)).toBe("floor(extract(epoch from date_trunc('s', ts))/1)*1");
    expect(expandSqlMacros('$__time(ts), $__timeEpoch(ts)', c)).toBe('ts AS "time", extract(epoch from ts) AS "time"');
    expect(expandSqlMacros('$__unixEpochFilter(t) $__unixEpochFrom() $__unixEpochTo()', c)).toBe(
      't >= 1795798800 AND t <= 1795802400 1795798800 1795802400',
    );
  });

  it('refuses an unknown macro or a missing argument', () => {
    expect(() => expandSqlMacros('$__timeFilterX(ts)', context())).toThrow('unknown macro $__timeFilterX');
    expect(() => expandSqlMacros('$__timeGroup(ts)', context())).toThrow('needs 2 argument');
  });

  it('reads durations as Grafana writes them', () => {
    expect(parseDuration('500ms')).toBe(500);
    expect(parseDuration("'5m'")).toBe(300_000);
    expect(parseDuration('1h')).toBe(3_600_000);
    expect(formatDuration(90_000)).toBe('90s');
    expect(formatDuration(250)).toBe('250ms');
    expect(() => parseDuration('soon')).toThrow('not a duration');
  });
});
