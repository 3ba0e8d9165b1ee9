/*
 * Grafana's query interpolation, as its documentation describes it, for running the shipped
 * dashboards' queries without Grafana: template variables ($name, ${name}, [[name]]) with the
 * SQL and Prometheus data sources' formatting of single, multi-value and All selections; the
 * global variables $__interval, $__interval_ms, $__range, $__range_s, $__range_ms and
 * $__rate_interval; and the PostgreSQL data source's macros ($__time, $__timeEpoch,
 * $__timeFilter, $__timeFrom, $__timeTo, $__timeGroup, $__timeGroupAlias, $__unixEpochFilter,
 * $__unixEpochFrom, $__unixEpochTo). Grafana rounds $__interval to a "nice" step; this takes the
 * exact quotient (range / max data points), floored at the panel's min interval.
 */

/** A dashboard variable's selection. `all`: the All option (with `allValue`, that text, unformatted). */
export interface VariableSelection {
  values: string[];
  multi?: boolean;
  includeAll?: boolean;
  all?: boolean;
  allValue?: string;
}

export interface QueryContext {
  from: Date;
  to: Date;
  /** The panel's max data points (Grafana: its width in pixels). */
  maxDataPoints: number;
  /** The panel's min interval (or the data source's scrape interval), in ms. */
  minIntervalMs: number;
  /** Prometheus data source's scrape interval, for $__rate_interval (Grafana's default 15s). */
  scrapeIntervalMs?: number;
  variables: Record<string, VariableSelection>;
}

/** Parses a Grafana/Go duration such as 500ms, 30s, 5m, 1h, 1d (plain numbers are seconds). */
export function parseDuration(text: string): number {
  const match = /^\s*['"]?(\d+(?:\.\d+)?)(ms|s|m|h|d|w)?['"]?\s*$/.exec(text);
  if (!match) throw new Error(`not a duration: ${text}`);
  const scale = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }[match[2] ?? 's']!;
  return Number(match[1]) * scale;
}

/** A duration as Grafana writes intervals: the largest unit that divides it (1h, 5m, 30s, 250ms). */
export function formatDuration(ms: number): string {
  for (const [unit, size] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1000],
  ] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  }
  return `${Math.round(ms)}ms`;
}

/** $__interval in ms: range / max data points, at least the min interval (whole ms). */
export function intervalMs(context: QueryContext): number {
  const raw = Math.ceil((context.to.getTime() - context.from.getTime()) / context.maxDataPoints);
  return Math.max(raw, context.minIntervalMs);
}

function globals(context: QueryContext): Record<string, string> {
  const interval = intervalMs(context);
  const rangeMs = context.to.getTime() - context.from.getTime();
  const scrape = context.scrapeIntervalMs ?? 15_000;
  return {
    __interval: formatDuration(interval),
    __interval_ms: String(interval),
    __range: `${Math.round(rangeMs / 1000)}s`,
    __range_s: String(Math.round(rangeMs / 1000)),
    __range_ms: String(rangeMs),
    // Grafana: max($__interval + scrape interval, 4 * scrape interval).
    __rate_interval: formatDuration(Math.max(interval + scrape, 4 * scrape)),
  };
}

const sqlLiteral = (value: string) => `'${value.replace(/'/g, "''")}'`;
const promRegexEscape = (value: string) => value.replace(/[\\^$*+?.()|{}[\]]/g, '\\\\$&');

/** How each data source writes a selection into its query. */
const FORMATS = {
  sql(selection: VariableSelection, values: string[]): string {
    if (!selection.multi && !selection.includeAll) return values[0]!.replace(/'/g, "''");
    return values.map(sqlLiteral).join(',');
  },
  prometheus(selection: VariableSelection, values: string[]): string {
    if (!selection.multi && !selection.includeAll) return values[0]!.replace(/\\/g, '\\\\').replace(/'/g, "\\\\'");
    const escaped = values.map(promRegexEscape);
    return escaped.length === 1 ? escaped[0]! : `(${escaped.join('|')})`;
  },
};

const VARIABLE = /\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?::([^}]+))?\}/g;

/**
 * Replaces template and global variables. Unknown names (the SQL macros among them) stay.
 *
 * @example
 * interpolate("WHERE node = '$node'", 'sql', ctx); // "WHERE node = 'db1'"
 */
export function interpolate(text: string, dataSource: keyof typeof FORMATS, context: QueryContext): string {
  const global = globals(context);
  return text.replace(VARIABLE, (whole, plain?: string, bracket?: string, _bracketFormat?: string, braced?: string) => {
    const name = plain ?? bracket ?? braced!;
    if (Object.hasOwn(global, name)) return global[name]!;
    const selection = context.variables[name];
    if (!selection) return whole;
    // A custom all value is written as it is, unformatted.
    if (selection.all && selection.allValue !== undefined) return selection.allValue;
    if (!selection.values.length) throw new Error(`variable ${name} has no value`);
    return FORMATS[dataSource](selection, selection.values);
  });
}

/** Splits macro arguments on top-level commas. */
function macroArgs(text: string): string[] {
  const args: string[] = [];
  let depth = 0;
  let current = '';
  for (const ch of text) {
    if (ch === '(') depth++;
    if (ch === ')') depth--;
    if (ch === ',' && depth === 0) {
      args.push(current.trim());
      current = '';
    } else current += ch;
  }
  if (current.trim() || args.length) args.push(current.trim());
  return args;
}

const MACRO = /\$__(\w+)\(((?:[^()]|\([^()]*\))*)\)/g;

/**
 * Expands the PostgreSQL data source's macros, after interpolate(): the same SQL Grafana's
 * backend sends for this time range.
 *
 * @example
 * expandSqlMacros('WHERE $__timeFilter(ts)', ctx); // "WHERE ts BETWEEN '2026-11-27T17:00:00.000Z' AND '2026-11-27T18:00:00.000Z'"
 */
export function expandSqlMacros(sql: string, context: QueryContext): string {
  const from = `'${context.from.toISOString()}'`;
  const to = `'${context.to.toISOString()}'`;
  const fromS = Math.floor(context.from.getTime() / 1000);
  const toS = Math.floor(context.to.getTime() / 1000);
  return sql.replace(MACRO, (whole, name: string, argText: string) => {
    const args = macroArgs(argText);
    const need = (n: number) => {
      if (args.length < n) throw new Error(`$__${name} needs ${n} argument(s): ${whole}`);
    };
    const group = () => {
      need(2);
      const seconds = parseDuration(args[1]!) / 1000;
      return `floor(extract(epoch from ${args[0]})/${seconds})*${seconds}`;
    };
    switch (name) {
      case 'time':
        need(1);
        return `${args[0]} AS "time"`;
      case 'timeEpoch':
        need(1);
        return `extract(epoch from ${args[0]}) AS "time"`;
      case 'timeFilter':
        need(1);
        return `${args[0]} BETWEEN ${from} AND ${to}`;
      case 'timeFrom':
        return from;
      case 'timeTo':
        return to;
      case 'timeGroup':
        return group();
      case 'timeGroupAlias':
        return `${group()} AS "time"`;
      case 'unixEpochFilter':
        need(1);
        return `${args[0]} >= ${fromS} AND ${args[0]} <= ${toS}`;
      case 'unixEpochFrom':
        return String(fromS);
      case 'unixEpochTo':
        return String(toS);
      default:
        throw new Error(`unknown macro $__${name}`);
    }
  });
}
