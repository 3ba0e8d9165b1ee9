import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { renderTop } from '../../src/top/render-top.js';
import { terminalSafe } from '../../src/top/terminal-text.js';
import type { TopRead } from '../../src/top/top-read.js';
import { topRates } from '../../src/top/top-rates.js';

/*
 * Texts another role controls reach `top`'s terminal: a statement's comment, a background
 * worker's type name, an error quoting an object name. Nothing in them may act on the terminal.
 */
// C0 (but none survives: top shows one line), DEL, C1, and the bidi overrides.
// biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what the test looks for
const CONTROL = /[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

const HOSTILE = [
  'SELECT 1 /* \x1b[2J\x1b[H clear the screen */',
  'SELECT 2 /* \x1b]0;window title\x07 OSC with BEL */',
  'SELECT 3 /* \x1b]8;;http://x.example\x1b\\link\x1b]8;;\x1b\\ OSC with ST */',
  'SELECT 4 /* \x9b31m 8-bit CSI \x9d2;title\x9c 8-bit OSC */',
  'SELECT 5 /* \x1bP+q544e\x1b\\ DCS (asks the terminal to answer) */',
  'SELECT 6 /* \x1b7\x1b8\x1bc save, restore, reset */',
  'SELECT 7 /* \x07\x08\x00\x7f bell, backspace, NUL, DEL */',
  'SELECT 8 /* \u202eevil\u202c reversed */',
  'SELECT 9 /* unterminated OSC \x1b]0;eats the rest',
  'SELECT 10 /* lone ESC at the end \x1b',
];

describe('terminalSafe', () => {
  it('leaves no control character and no escape sequence, and keeps the visible text', () => {
    for (const text of HOSTILE) {
      const safe = terminalSafe(text);
      expect(safe, JSON.stringify(text)).not.toMatch(CONTROL);
      expect(safe).toMatch(/^SELECT \d+ \/\* /);
    }
    expect(terminalSafe(HOSTILE[0]!)).toBe('SELECT 1 /*  clear the screen */');
    expect(terminalSafe(HOSTILE[1]!)).toBe('SELECT 2 /*  OSC with BEL */');
    expect(terminalSafe(HOSTILE[2]!)).toBe('SELECT 3 /* link OSC with ST */');
    expect(terminalSafe(HOSTILE[3]!)).toBe('SELECT 4 /*  8-bit CSI  8-bit OSC */');
    expect(terminalSafe(HOSTILE[5]!)).toBe('SELECT 6 /*  save, restore, reset */');
    expect(terminalSafe(HOSTILE[7]!)).toBe('SELECT 8 /* evil reversed */');
  });

  it('changes no ordinary text, Unicode included', () => {
    for (const text of ['SELECT * FROM t WHERE a = $1', "SELECT 'naïve ünïcode 日本語 😀'", 'UPDATE "weird ""name""" SET x = 1']) {
      expect(terminalSafe(text)).toBe(text);
    }
    expect(terminalSafe('SELECT\t1\r\nFROM x')).toBe('SELECT 1  FROM x');
  });
});

describe('top with hostile texts', () => {
  it('prints none of their control characters, in statement texts, backend types and errors', () => {
    const dir = join(import.meta.dirname, '../fixtures/top');
    const [first, second] = JSON.parse(readFileSync(join(dir, 'reads.json'), 'utf8')) as [TopRead, TopRead];
    const hostile = structuredClone(second);
    for (const [i, q] of hostile.queries.entries()) q.text = HOSTILE[i % HOSTILE.length]!;
    hostile.backends.forEach((b, i) => {
      b.text = HOSTILE[(i + 3) % HOSTILE.length]!;
      b.backendType = '\x1b[8mhidden\x1b[0m worker';
    });
    const rates = topRates(first, hostile);
    expect(rates!.queries.length).toBeGreaterThan(3);
    for (const lastError of [null, 'relation "\x1b]0;owned\x07x" does not exist']) {
      const lines = renderTop(
        {
          source: 'postgres@db1:5432',
          clock: '05:33:44',
          rates,
          sort: 'total',
          flushAgeSeconds: 0.4,
          collectors: 1,
          droppedEvents: 0,
          lastError,
        },
        { width: 200, height: 40 },
      );
      for (const line of lines) expect(line, JSON.stringify(line)).not.toMatch(CONTROL);
      // The statements are still there to read.
      expect(lines.some((l) => l.includes('SELECT 1 /* clear the screen */'))).toBe(true);
      expect(lines.some((l) => l.includes('hidden work…'))).toBe(true);
      if (lastError) expect(lines[1]).toBe('collector error: relation "x" does not exist');
    }
  });
});
