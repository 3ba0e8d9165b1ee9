import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { packageRoot } from '../../src/package-root.js';

/*
 * The alerting rules we ship, checked by Prometheus' own tool (Debian's `prometheus` package):
 * `promtool check rules` (syntax, PromQL, templates) and `promtool test rules` (each alert
 * fires on series made for it and stays quiet on the others). A failure shows promtool's output.
 * That the metric names they use are the ones a real collector exposes is checked in
 * test/integration/dashboards.test.ts.
 */
const run = promisify(execFile);
const RULES_DIR = join(packageRoot(), 'deploy', 'prometheus');
const RULES = 'pg-bpf-stats.rules.yml';
const RULE_TESTS = ['pg-bpf-stats.rules.test.yml', 'pg-bpf-stats.statements.rules.test.yml'];

async function promtool(args: string[]): Promise<{ code: number; output: string }> {
  try {
    const { stdout, stderr } = await run('promtool', args, { cwd: RULES_DIR, timeout: 60_000 });
    return { code: 0, output: stdout + stderr };
  } catch (error) {
    const e = error as { code: number; stdout?: string; stderr?: string; message: string };
    return { code: typeof e.code === 'number' ? e.code : -1, output: (e.stdout ?? '') + (e.stderr ?? '') || e.message };
  }
}

describe('Prometheus alerting rules', () => {
  it('pass promtool check rules', async () => {
    const { code, output } = await promtool(['check', 'rules', RULES]);
    expect(code, output).toBe(0);
    expect(output).toMatch(/SUCCESS: 9 rules found/);
  });

  it('pass promtool test rules: each alert fires when it should and only then', async () => {
    const { code, output } = await promtool(['test', 'rules', ...RULE_TESTS]);
    expect(code, output).toBe(0);
    expect(output.match(/SUCCESS/g), output).toHaveLength(RULE_TESTS.length);
  }, 60_000);

  it('have, for every alert, a test where it fires and one where it does not', () => {
    const rules = parse(readFileSync(join(RULES_DIR, RULES), 'utf8')) as { groups: Array<{ rules: Array<{ alert?: string }> }> };
    const alerts = rules.groups.flatMap((g) => g.rules.flatMap((r) => (r.alert ? [r.alert] : [])));
    const cases = RULE_TESTS.flatMap((file) => {
      const tests = parse(readFileSync(join(RULES_DIR, file), 'utf8')) as {
        tests: Array<{ alert_rule_test?: Array<{ alertname: string; exp_alerts?: unknown[] }> }>;
      };
      return tests.tests.flatMap((t) => t.alert_rule_test ?? []);
    });
    expect(alerts).toHaveLength(9);
    for (const alert of alerts) {
      const mine = cases.filter((c) => c.alertname === alert);
      expect(
        mine.some((c) => (c.exp_alerts ?? []).length > 0),
        `${alert} fires in a test`,
      ).toBe(true);
      expect(
        mine.some((c) => (c.exp_alerts ?? []).length === 0),
        `${alert} stays quiet in a test`,
      ).toBe(true);
    }
  });
});
