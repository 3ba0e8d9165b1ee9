import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DASHBOARDS, dashboardJson } from '../../src/dashboards/generate-dashboards.js';
import { packageRoot } from '../../src/package-root.js';
import * as grafanaUnits from '@grafana/grafana-foundation-sdk/units';

/*
 * The dashboards under dashboards/ are what src/dashboards/ generates (npm run dashboards), and
 * have the shape Grafana imports: unique panel ids on a 24-column grid, every panel on the
 * dashboard's data source variable, a unit on every axis and value column, every variable a
 * query uses defined, and the same rows and panels in both. Their queries run against a real
 * cluster and a real Prometheus in test/integration/dashboards.test.ts.
 */
// biome-ignore lint/suspicious/noExplicitAny: the dashboards' JSON model, read field by field
type Json = Record<string, any>;
const FILES = Object.keys(DASHBOARDS) as Array<keyof typeof DASHBOARDS>;
const committed = (file: string): Json => JSON.parse(readFileSync(join(packageRoot(), 'dashboards', file), 'utf8'));

describe('shipped dashboards', () => {
  it.each(FILES)('%s is what the TypeScript generates (npm run dashboards)', (file) => {
    expect(readFileSync(join(packageRoot(), 'dashboards', file), 'utf8')).toBe(dashboardJson(file));
  });

  it.each(FILES)('%s has the shape Grafana imports', (file) => {
    const d = committed(file);
    expect(d.uid).toMatch(/^[a-z0-9-]{1,40}$/);
    expect(typeof d.title).toBe('string');
    expect(d.schemaVersion).toBeGreaterThanOrEqual(36);
    expect(d.time).toEqual({ from: 'now-6h', to: 'now' });
    const panels: Json[] = d.panels;
    const ids = panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const variables: Json[] = d.templating.list;
    const names = new Set(variables.map((v) => v.name));
    for (const v of variables.filter((v) => v.type === 'query')) {
      // biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's variable syntax
      expect(v.datasource).toEqual({ type: expect.any(String), uid: '${datasource}' });
    }
    const grafanaGlobals = new Set(['__interval', '__interval_ms', '__range', '__rate_interval']);
    for (const p of panels) {
      expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24);
      if (p.type === 'row') {
        expect(p.collapsed).toBe(false);
        continue;
      }
      expect(['timeseries', 'table']).toContain(p.type);
      // biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's variable syntax
      expect(p.datasource.uid, p.title).toBe('${datasource}');
      expect(p.description, p.title).toBeTruthy();
      expect(p.targets.length, p.title).toBeGreaterThan(0);
      expect(new Set(p.targets.map((t: Json) => t.refId)).size, p.title).toBe(p.targets.length);
      expect(p.fieldConfig.defaults.unit, `${p.title}: unit`).toBeTruthy();
      if (p.type === 'timeseries') expect(p.fieldConfig.defaults.custom.axisLabel, `${p.title}: axis label`).toBeTruthy();
      for (const t of p.targets) {
        const text: string = t.rawSql ?? t.expr;
        expect(text, p.title).toBeTruthy();
        expect(t.datasource).toEqual(p.datasource);
        for (const [, name] of text.matchAll(/\$\{?(\w+)/g)) {
          if (name!.startsWith('__') && !grafanaGlobals.has(name!)) continue; // a SQL macro
          expect(names.has(name!) || grafanaGlobals.has(name!), `${p.title}: $${name} is defined`).toBe(true);
        }
      }
    }
  });

  it.each(FILES)('%s uses only units Grafana knows', (file) => {
    // Grafana's unit ids, as the SDK generates them from Grafana's own list, and its custom-unit forms.
    const known = new Set<string>(Object.values(grafanaUnits as Record<string, unknown>).filter((v): v is string => typeof v === 'string'));
    const custom = /^(suffix|prefix|si|count|currency|time):./;
    const used = new Set<string>();
    for (const p of committed(file).panels as Json[]) {
      if (p.type === 'row') continue;
      used.add(p.fieldConfig.defaults.unit);
      for (const o of p.fieldConfig.overrides ?? []) for (const prop of o.properties ?? []) if (prop.id === 'unit') used.add(prop.value);
    }
    expect(used.size).toBeGreaterThan(1);
    for (const unit of used) expect(known.has(unit) || custom.test(unit), `unit ${unit}`).toBe(true);
  });

  it('puts the same rows and panels, with the same units, in both', () => {
    const [sql, prom] = FILES.map((f) => committed(f).panels.map((p: Json) => [p.type, p.title, p.fieldConfig?.defaults?.unit, p.gridPos]));
    expect(sql!.length).toBeGreaterThan(15);
    expect(prom).toEqual(sql);
  });

  it('shows the query text beside its id in every statement table', () => {
    const statementTables = (d: Json) => d.panels.filter((p: Json) => p.type === 'table' && /statements|Lock|LWLock/.test(p.title));
    const sqlTables = statementTables(committed('pg-bpf-stats-postgresql.json'));
    expect(sqlTables.length).toBe(9);
    // Through the collector's password test: a text stored by an older release (a sink's older node) may hold one.
    for (const p of sqlTables) {
      expect(p.targets[0].rawSql, p.title).toMatch(/AS "query id", CASE WHEN \(\w\.query OPERATOR\(pg_catalog\.~\*\) /);
      expect(p.targets[0].rawSql, p.title).toMatch(/THEN '\(not shown: it may contain a password\)' ELSE \w\.query END AS "query"/);
    }
    const promTables = statementTables(committed('pg-bpf-stats-prometheus.json'));
    for (const p of promTables)
      expect(p.targets[0].expr, p.title).toContain('group_left (query) max by (queryid, datname, user, query) (pg_bpf_query_info');
  });

  it('names the catalog for every operator of the SQL panels and variables (OPERATOR(pg_catalog.x)), and uses no macro that expands to a bare one', () => {
    const d = committed('pg-bpf-stats-postgresql.json');
    const texts: string[] = [
      ...d.panels.flatMap((p: Json) => (p.targets ?? []).map((t: Json) => t.rawSql)),
      ...d.templating.list.filter((v: Json) => v.type === 'query').map((v: Json) => v.query),
    ];
    expect(texts.length).toBeGreaterThan(15);
    for (const text of texts) {
      expect(bareOperators(text), text).toEqual([]);
      // $__timeFilter: BETWEEN (>=, <=); $__timeGroup(Alias): floor(x/n)*n, numeric / integer.
      expect(text, text).not.toMatch(/\$__(timeFilter|timeGroup|timeGroupAlias|unixEpochFilter)\(/);
      // Also looked up on the reader's path: = for NULLIF, IN (...) and IS DISTINCT FROM.
      expect(text, text).not.toMatch(/\bnullif\s*\(|\bIN\s*\(|IS (NOT )?DISTINCT FROM|\bBETWEEN\b|\bLIKE\b/i);
    }
  });

  it('schema-qualifies every relation the SQL panels and variables read', () => {
    const d = committed('pg-bpf-stats-postgresql.json');
    const texts = [
      ...d.panels.flatMap((p: Json) => (p.targets ?? []).map((t: Json) => t.rawSql)),
      ...d.templating.list.filter((v: Json) => v.type === 'query').map((v: Json) => v.query),
    ];
    for (const text of texts) {
      // extract(field FROM value) reads no relation.
      for (const [, relation] of text.replace(/\bextract\(\w+ FROM /gi, 'extract(').matchAll(/\b(?:FROM|JOIN)\s+(?!\()([\w$.]+)/gi))
        expect(relation, text).toMatch(/^(bpf_stats|pg_catalog|\$pgss)\.|^w$/);
    }
  });
});

/**
 * The operators of `sql` not written OPERATOR(pg_catalog.x): what is left after literals, quoted
 * names, casts, the qualified operators, Grafana's variables and * as "all columns" are taken out.
 */
function bareOperators(sql: string): string[] {
  const rest = sql
    .replace(/'(?:[^']|'')*'/g, ' ')
    .replace(/"(?:[^"]|"")*"/g, ' ')
    .replace(/OPERATOR\(pg_catalog\.[^)\s]+\)/g, ' ')
    .replace(/::\s*[\w ]+(\[\])?/g, ' ')
    .replace(/\$\w+/g, ' ')
    .replace(/\(\s*\*\s*\)|SELECT\s+\*|\.\*/gi, ' ');
  return [...rest.matchAll(/[-+*/<>=~!@#%^&|`?]+/g)].map((m) => m[0]);
}
