/**
 * Cuts text (an error, a query) to at most `max` characters, for places with a size limit:
 * NOTIFY payloads, capability reasons.
 *
 * @example
 * shorten('SELECT * FROM a_table_with_a_long_name', 12); // 'SELECT * FRO'
 */
export function shorten(text: string, max: number): string {
  return text.slice(0, max);
}

/**
 * The same for a text column in SQL: whitespace runs collapsed to one space, then cut to
 * `width` characters (the reports' query column).
 *
 * @example
 * sql(`SELECT ${shortenSql('s.query', 60)} AS query FROM ...`);
 */
export function shortenSql(expression: string, width = 48): string {
  return `left(regexp_replace(${expression}, '\\s+', ' ', 'g'), ${width})`;
}
