import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { parseIntoClientConfig } from 'pg-connection-string';
import { UserError } from '../errors.js';

/*
 * Connection strings as libpq reads them, turned into node-postgres' ClientConfig here and not by
 * pg: pg reads key=value pairs as a relative URL ("host=x dbname=y" became host "base"), and it
 * looks up ~/.pgpass through a path that prints a deprecation warning into the log.
 *
 * Three forms, as libpq: a URI (postgresql://, postgres://; pg-connection-string parses it), a
 * socket directory with an optional database ("/var/run/postgresql db"), or key=value pairs.
 * Passwords come, in libpq's order, from the string, PGPASSWORD, or a password file (passfile=,
 * PGPASSFILE, ~/.pgpass, refused when group or others can read it).
 */

/** libpq keywords node-postgres can honour, and the ClientConfig field each sets. */
/** A ClientConfig on its way; passfile= is kept until the password function is made. */
type Config = pg.ClientConfig & Record<string, unknown> & { passfile?: string };

const KEYWORDS: Readonly<Record<string, (config: Config, value: string) => void>> = {
  host: (c, v) => {
    if (v.includes(',')) throw new Error('several hosts (host=a,b) are not supported: give one');
    c.host = v;
  },
  hostaddr: (c, v) => void (c.host ??= v),
  port: (c, v) => {
    if (!/^\d{1,5}$/.test(v) || Number(v) > 65535) throw new Error('port is not a port number');
    c.port = Number(v);
  },
  dbname: (c, v) => void (c.database = v),
  user: (c, v) => void (c.user = v),
  password: (c, v) => void (c.password = v),
  passfile: (c, v) => void (c.passfile = v),
  application_name: (c, v) => void (c.application_name = v),
  fallback_application_name: (c, v) => void (c.fallback_application_name = v),
  options: (c, v) => void (c.options = v),
  client_encoding: (c, v) => void (c.client_encoding = v),
  connect_timeout: (c, v) => {
    if (!/^-?\d+$/.test(v)) throw new Error('connect_timeout is not a whole number of seconds');
    // libpq: 0 or less waits forever; less than 2 seconds is taken as 2.
    if (Number(v) > 0) c.connectionTimeoutMillis = Math.max(2, Number(v)) * 1000;
  },
  keepalives: (c, v) => void (c.keepAlive = v !== '0'),
  keepalives_idle: (c, v) => void (c.keepAliveInitialDelayMillis = Number(v) * 1000),
  replication: (c, v) => void (c.replication = v),
  // The TLS keywords mean what they mean in a URI's query: pg-connection-string decides.
  sslmode: () => undefined,
  sslcert: () => undefined,
  sslkey: () => undefined,
  sslrootcert: () => undefined,
  sslnegotiation: () => undefined,
};
const SSL_KEYWORDS = ['sslmode', 'sslcert', 'sslkey', 'sslrootcert', 'sslnegotiation'];

/** Why a connection string was refused, without any of its values (one may be a password). */
class Refused extends Error {}

/**
 * key=value pairs exactly as libpq's conninfo parser reads them: whitespace around `=` is
 * allowed; a value is a run of non-space characters or a single-quoted string; a backslash
 * takes the next character as it is, in either. Values are never put into an error.
 */
export function parseKeywordValue(text: string): Map<string, string> {
  const pairs = new Map<string, string>();
  let i = 0;
  const space = (c: string | undefined) => c !== undefined && /\s/.test(c);
  while (i < text.length) {
    while (space(text[i])) i++;
    if (i >= text.length) break;
    const start = i;
    while (i < text.length && text[i] !== '=' && !space(text[i])) i++;
    const key = text.slice(start, i);
    while (space(text[i])) i++;
    if (text[i] !== '=') throw new Refused(`missing "=" after a keyword`);
    if (!key) throw new Refused('a value without a keyword');
    i++;
    while (space(text[i])) i++;
    let value = '';
    if (text[i] === "'") {
      i++;
      for (;;) {
        if (i >= text.length) throw new Refused(`unterminated quoted value of ${safeKey(key)}`);
        const c = text[i++]!;
        if (c === '\\') {
          if (i < text.length) value += text[i++];
        } else if (c === "'") break;
        else value += c;
      }
    } else {
      while (i < text.length && !space(text[i])) {
        const c = text[i++]!;
        if (c === '\\') {
          if (i < text.length) value += text[i++];
        } else value += c;
      }
    }
    pairs.set(key, value);
  }
  if (!pairs.size) throw new Refused('empty');
  return pairs;
}

/** A keyword for a message: a known one as it is; anything else could be a mistyped secret. */
function safeKey(key: string): string {
  return key in KEYWORDS ? key : 'a keyword';
}

type Form = 'uri' | 'socket' | 'keywords';

function formOf(text: string): Form {
  if (/^postgres(ql)?:\/\//i.test(text)) return 'uri';
  if (text.startsWith('/')) return 'socket';
  return 'keywords';
}

/**
 * A socket-directory string's directory and database name (as libpq and pg read it), or null when
 * it is more than that: a third word, or an "=" anywhere ("/run/pg password=x" would otherwise
 * connect to a database named "password=x", and put the password into the error).
 */
function socketParts(text: string): [string, string | undefined] | null {
  if (text.includes('=')) return null;
  const words = text.split(/\s+/);
  return words.length <= 2 ? [words[0]!, words[1]] : null;
}

/**
 * node-postgres' ClientConfig for a connection string (undefined: the PG* environment alone), with
 * the password function that reads PGPASSWORD or a password file when the string has none.
 * Throws a UserError naming `flag` and what is wrong, never a value.
 *
 * @example
 * new pg.Client({ ...clientConfig("host=/run/postgresql dbname='my db'"), application_name: 'x' });
 */
export function clientConfig(connectionString: string | undefined, flag = '--dsn'): pg.ClientConfig {
  const config: Config = connectionString === undefined ? {} : parseConfig(connectionString.trim(), flag);
  const { passfile } = config;
  delete config.passfile;
  if (config.password === undefined || config.password === '') {
    // A function: pg calls it only when the server asks for a password, with the parameters it
    // resolved (the PG* environment's included).
    const password = (params: Params) => passwordFromEnvironment(params, passfile);
    config.password = password as unknown as () => string;
  }
  return config;
}

type Params = { host?: string; port?: number; database?: string; user?: string };

function parseConfig(text: string, flag: string): Config {
  const refuse = (why: string) =>
    new UserError(
      `${flag} ${JSON.stringify(redact(text))} is not a connection string (${why}): expected postgresql://user@host:port/database or key=value pairs (host=... dbname=...)`,
    );
  switch (formOf(text)) {
    case 'uri': {
      let parsed: Config;
      try {
        // Not new URL(): libpq's postgresql://user@/db?host=/socket/dir has no host, which
        // WHATWG URLs refuse and pg-connection-string reads.
        parsed = parseIntoClientConfig(text) as Config;
      } catch {
        throw new UserError(`${flag} ${JSON.stringify(redact(text))} is not a valid URI: expected postgresql://user@host:port/database`);
      }
      // pg-connection-string says '' for a part the URI leaves out: libpq's default, not ''.
      for (const key of ['host', 'user', 'password'] as const) if (parsed[key] === '') delete parsed[key];
      const timeout = parsed.connect_timeout;
      delete parsed.connect_timeout;
      if (typeof timeout === 'string') {
        try {
          KEYWORDS.connect_timeout!(parsed, timeout);
        } catch (error) {
          throw refuse((error as Error).message);
        }
      }
      return parsed;
    }
    case 'socket': {
      const parts = socketParts(text);
      if (!parts) throw refuse('a socket directory and a database name, nothing more, and no "=": key=value pairs start with host=');
      const [host, database] = parts;
      return { host, ...(database && { database }) };
    }
    case 'keywords': {
      let pairs: Map<string, string>;
      try {
        pairs = parseKeywordValue(text);
      } catch (error) {
        throw refuse((error as Error).message);
      }
      const config: Config = {};
      const ssl = new URLSearchParams();
      for (const [key, value] of pairs) {
        const set = Object.hasOwn(KEYWORDS, key) ? KEYWORDS[key] : undefined;
        if (!set) throw refuse(`unsupported keyword ${JSON.stringify(key)}; supported: ${Object.keys(KEYWORDS).join(', ')}`);
        // libpq takes an empty value as the keyword's default.
        if (value === '') continue;
        if (SSL_KEYWORDS.includes(key)) ssl.set(key, value);
        else {
          try {
            set(config, value);
          } catch (error) {
            throw refuse((error as Error).message);
          }
        }
      }
      if (pairs.has('hostaddr') && pairs.has('host') && pairs.get('hostaddr') !== '') config.host = pairs.get('hostaddr');
      if ([...ssl.keys()].length) {
        try {
          const { ssl: tls } = parseIntoClientConfig(`postgresql://?${ssl.toString()}`);
          if (tls !== undefined) config.ssl = tls;
        } catch (error) {
          throw refuse((error as Error).message.split('\n')[0]!);
        }
      }
      return config;
    }
  }
}

/** PGPASSWORD, else the password file's first matching line (libpq's order and rules). */
function passwordFromEnvironment(params: Params, passfile: string | undefined): string | undefined {
  if (process.env.PGPASSWORD) return process.env.PGPASSWORD;
  const file = passfile ?? process.env.PGPASSFILE ?? join(homedir(), '.pgpass');
  const text = readPasswordFile(file);
  if (text === undefined) return undefined;
  // libpq looks a socket connection up as localhost.
  const host = !params.host || params.host.startsWith('/') ? 'localhost' : params.host;
  const want = [host, String(params.port ?? 5432), params.database ?? params.user ?? '', params.user ?? ''];
  for (const line of text.split('\n')) {
    if (!line.trim() || line.startsWith('#')) continue;
    const fields = passwordFileFields(line.replace(/\r$/, ''));
    if (fields.length < 5) continue;
    if (want.every((w, i) => fields[i] === '*' || fields[i] === w)) return fields.slice(4).join(':');
  }
  return undefined;
}

/** host:port:database:user:password, with \: and \\ escaped. */
function passwordFileFields(line: string): string[] {
  const fields: string[] = [''];
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (c === '\\' && i + 1 < line.length) fields[fields.length - 1] += line[++i]!;
    else if (c === ':' && fields.length < 5) fields.push('');
    else fields[fields.length - 1] += c;
  }
  return fields;
}

/** The file's text when it is a regular file only its owner can read or write (libpq ignores it otherwise). */
function readPasswordFile(path: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch {
    return undefined;
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) {
      process.emitWarning(`password file ${path} is not a plain file: ignored`);
      return undefined;
    }
    if (stat.mode & 0o077) {
      process.emitWarning(`password file ${path} has group or world access: ignored (permissions should be u=rw, 0600, or less)`);
      return undefined;
    }
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}

/**
 * The connection string for a message, with its password (if any) replaced by ***: the string is
 * parsed, not searched. A URI's password is the userinfo after its first colon, the userinfo
 * running to the last @ of the authority (so user:p@ss@host hides p@ss), and any password=
 * query parameter. key=value pairs are read as libpq reads them and written back with
 * password=*** (and *** for any keyword libpq would not know). A string that parses as neither is not shown at all.
 */
export function redact(connectionString: string): string {
  const text = connectionString.trim();
  switch (formOf(text)) {
    case 'uri': {
      const start = text.indexOf('//') + 2;
      const end = firstOf(text, '/?#', start);
      const authority = text.slice(start, end);
      const at = authority.lastIndexOf('@');
      let out = text;
      if (at >= 0) {
        const colon = authority.slice(0, at).indexOf(':');
        if (colon >= 0) out = `${text.slice(0, start + colon + 1)}***${text.slice(start + at)}`;
      }
      const q = out.indexOf('?', out.indexOf('//') + 2);
      if (q < 0) return out;
      const hash = firstOf(out, '#', q);
      const query = out
        .slice(q + 1, hash)
        .split('&')
        .map((part) => {
          const eq = part.indexOf('=');
          const key = eq < 0 ? part : part.slice(0, eq);
          let name = key;
          try {
            name = decodeURIComponent(key.replace(/\+/g, ' '));
          } catch {
            // an undecodable name is not "password"
          }
          return name === 'password' && eq >= 0 ? `${key}=***` : part;
        })
        .join('&');
      return `${out.slice(0, q + 1)}${query}${out.slice(hash)}`;
    }
    case 'socket':
      return socketParts(text) ? text : '(not shown: it cannot be parsed)';
    case 'keywords': {
      try {
        const pairs = parseKeywordValue(text);
        // An unknown keyword may be a mistyped password= (pasword=...): its value is hidden too.
        return [...pairs].map(([k, v]) => `${k}=${k === 'password' || !Object.hasOwn(KEYWORDS, k) ? '***' : quoteValue(v)}`).join(' ');
      } catch {
        return '(not shown: it cannot be parsed)';
      }
    }
  }
}

function firstOf(text: string, chars: string, from: number): number {
  for (let i = from; i < text.length; i++) if (chars.includes(text[i]!)) return i;
  return text.length;
}

function quoteValue(value: string): string {
  return value !== '' && !/[\s'\\]/.test(value) ? value : `'${value.replace(/[\\']/g, (c) => `\\${c}`)}'`;
}
