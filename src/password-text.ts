/*
 * Statement texts that may carry a password are never shown or stored as text: not by /metrics
 * (pg_bpf_query_info, --metrics-query-text or not), not in bpf_stats.query_texts. They are
 * ALTER/CREATE ROLE|USER ... PASSWORD '...' (and psql's \password, which sends one), user
 * mappings' and servers' OPTIONS (password ...), conninfo strings (CREATE SUBSCRIPTION, dblink)
 * with password= or a URI's user:password@. PASSWORD is a keyword: no comment or quoting can
 * split or spell it differently, so looking for the word anywhere (case-insensitive) finds every
 * such statement; a statement that merely names a password column is withheld too, a price worth
 * a text. Checked on the whole text, before it is cut (in SQL, where it is cut): a cut could keep
 * a secret and lose the word after it.
 */

// POSIX classes: the same pattern in PostgreSQL's regular expressions and JavaScript's ([[:space:]] -> \s).
const PASSWORD_WORDS = 'passw(or)?d|pwd';
const URI_USERINFO = '[a-z][a-z0-9+.-]*://[^/@[:space:]]*:[^/@[:space:]]*@';
const HOLDS_PASSWORD = new RegExp(`${PASSWORD_WORDS}|${URI_USERINFO.replaceAll('[:space:]', '\\s')}`, 'i');

/** What is shown or stored in place of a text that may hold a password. */
export const WITHHELD_TEXT = '(not shown: it may contain a password)';

/** Whether a statement's text may hold a password (the same test as holdsPasswordSql(), for texts in hand). */
export function mayHoldPassword(text: string): boolean {
  return HOLDS_PASSWORD.test(text);
}

/**
 * The same test in SQL, on a text column or expression (trusted SQL, never user input), for a
 * statement that reads texts: true when the text may hold a password.
 *
 * @example
 * `SELECT CASE WHEN ${holdsPasswordSql('s.query')} THEN NULL ELSE left(s.query, 200) END FROM ...`
 */
export function holdsPasswordSql(column: string): string {
  // The catalog's ~*, named: a dashboard runs this with its reader's search_path.
  return `(${column} OPERATOR(pg_catalog.~*) '${PASSWORD_WORDS}' OR ${column} OPERATOR(pg_catalog.~*) '${URI_USERINFO}')`;
}
