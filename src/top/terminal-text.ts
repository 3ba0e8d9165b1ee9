/**
 * Text another role wrote (statement text, application and backend type names, error messages
 * quoting them) made safe to print on a terminal: an escape sequence in a comment could
 * otherwise move the cursor, rewrite what `top` shows, retitle the window or, on some
 * terminals, answer back into the input. Removed: whole ESC sequences (CSI, OSC, DCS and the
 * like, up to their terminator), then every other C0 and C1 control character and DEL, and the
 * Unicode bidirectional overrides that reorder what is shown. Tabs and line ends become a space,
 * as `top` shows a statement on one line anyway.
 *
 * @example
 * terminalSafe('SELECT 1 /* \x1b]0;pwned\x07 *\/'); // 'SELECT 1 /*  *\/'
 */
export function terminalSafe(text: string): string {
  // biome-ignore-start lint/suspicious/noControlCharactersInRegex: matching control characters is what this function is for
  return (
    text
      // OSC, DCS, SOS, PM, APC: a string up to BEL or ST (ESC \ or the 8-bit ST); unterminated, to the end.
      .replace(/(?:\x1b[\]P^_X]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?/g, '')
      // CSI (ESC [ or the 8-bit CSI), its parameters and one final byte.
      .replace(/(?:\x1b\[|\x9b)[\x20-\x3f]*[\x40-\x7e]?/g, '')
      // Any other escape: ESC, intermediates, one final byte.
      .replace(/\x1b[\x20-\x2f]*[\x30-\x7e]?/g, '')
      .replace(/[\t\n\v\f\r]/g, ' ')
      .replace(/[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, '')
  );
  // biome-ignore-end lint/suspicious/noControlCharactersInRegex: the range above
}
