import { describe, expect, it } from 'vitest';
import { parseCli } from '../../src/cli/parse-args.js';
import { UserError } from '../../src/errors.js';
import { nodeConnectionOptions, parseNodeName } from '../../src/storage/node-name.js';

describe('--node and --sink', () => {
  it('takes names that need no quoting in SQL or connection options', () => {
    for (const name of ['replica-1', 'db1.example.com:5432', 'pg_a@zone-b', 'N', 'x'.repeat(63)]) expect(parseNodeName(name)).toBe(name);
    expect(nodeConnectionOptions('db1:5432')).toBe('-c bpf_stats.node=db1:5432');
  });

  it('refuses other names in one line', () => {
    for (const name of ['', ' a', 'a b', "a'b", '-a', 'a\\b', 'x'.repeat(64), 'réplica']) {
      expect(() => parseNodeName(name)).toThrow(UserError);
    }
    expect(() => parseCli(['run', '--node', 'a b'])).toThrow(/^--node 'a b': expected 1 to 63 characters/);
  });

  it('passes --sink and --node to run, --sink to check, --node to migrate, and refuses them elsewhere', () => {
    expect(parseCli(['run', '--sink', 'host=primary', '--node', 'replica-1'])).toMatchObject({ sink: 'host=primary', node: 'replica-1' });
    expect(parseCli(['check', '--sink', 'host=primary'])).toMatchObject({ sink: 'host=primary' });
    expect(parseCli(['migrate', '--node', 'replica-1'])).toMatchObject({ node: 'replica-1' });
    expect(parseCli(['run'])).not.toHaveProperty('sink');
    expect(() => parseCli(['top', '--sink', 'x'])).toThrow(/--sink is an option of run and check/);
    expect(() => parseCli(['check', '--node', 'x'])).toThrow(/--node is an option of run and migrate/);
  });
});
