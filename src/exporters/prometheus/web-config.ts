import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { oneLine, UserError } from '../../errors.js';
import { BcryptThread } from './bcrypt-thread.js';

/**
 * `--web.config.file`: TLS and basic authentication for /metrics, in the format of Prometheus'
 * exporter-toolkit, so that one file serves node_exporter, postgres_exporter and this:
 *
 *     tls_server_config:
 *       cert_file: server.crt          # relative paths: from the file's directory
 *       key_file: server.key
 *       client_auth_type: RequireAndVerifyClientCert   # optional, with client_ca_file
 *       client_ca_file: ca.crt
 *       min_version: TLS12             # optional: TLS10 ... TLS13
 *     basic_auth_users:
 *       prometheus: $2y$10$...         # bcrypt (htpasswd -nBC 10 prometheus)
 *
 * Like the toolkit, an unknown key is an error (a typo must not leave /metrics open), and so is
 * a password that is not a bcrypt hash.
 */
export interface WebConfig {
  tls: {
    cert: Buffer;
    key: Buffer;
    ca?: Buffer;
    requestCert: boolean;
    rejectUnauthorized: boolean;
    clientAuth: ClientAuthType;
    minVersion?: TlsVersion;
    maxVersion?: TlsVersion;
  } | null;
  /** user -> bcrypt hash; empty: no authentication. */
  users: Map<string, string>;
}

export type ClientAuthType =
  | 'NoClientCert'
  | 'RequestClientCert'
  | 'RequireAnyClientCert'
  | 'VerifyClientCertIfGiven'
  | 'RequireAndVerifyClientCert';
type TlsVersion = 'TLSv1' | 'TLSv1.1' | 'TLSv1.2' | 'TLSv1.3';
const TLS_VERSIONS: Record<string, TlsVersion> = { TLS10: 'TLSv1', TLS11: 'TLSv1.1', TLS12: 'TLSv1.2', TLS13: 'TLSv1.3' };
/*
 * What node's TLS options can say. Two of the toolkit's types they cannot: RequireAnyClientCert
 * (a certificate, verified or not) and VerifyClientCertIfGiven (none, or one that verifies) both
 * need rejectUnauthorized false, which lets in a client without a certificate or with one that
 * fails verification: clientCertRefusal() checks each request's connection for them.
 */
const CLIENT_AUTH: Record<ClientAuthType, { requestCert: boolean; rejectUnauthorized: boolean }> = {
  NoClientCert: { requestCert: false, rejectUnauthorized: false },
  RequestClientCert: { requestCert: true, rejectUnauthorized: false },
  RequireAnyClientCert: { requestCert: true, rejectUnauthorized: false },
  VerifyClientCertIfGiven: { requestCert: true, rejectUnauthorized: false },
  RequireAndVerifyClientCert: { requestCert: true, rejectUnauthorized: true },
};
const TLS_KEYS = ['cert_file', 'key_file', 'client_auth_type', 'client_ca_file', 'min_version', 'max_version'];

/** Reads and checks the file; every problem is a UserError in one line naming the file (its own names and paths as JSON strings: they may hold a newline). */
export function readWebConfig(path: string): WebConfig {
  const bad = (why: string) => new UserError(`--web.config.file ${path}: ${why}`);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw bad(`cannot read it (${(error as NodeJS.ErrnoException).code ?? oneLine(error)})`);
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (error) {
    throw bad(`not YAML: ${oneLine(error)}`);
  }
  // A file was named to protect /metrics: one that turns on neither TLS nor a password (empty,
  // null, {} or only empty keys) would serve it as no file does, so it is refused (below too).
  const turnsOnNothing = bad(
    'turns on neither TLS nor basic authentication (give tls_server_config or basic_auth_users, or no --web.config.file)',
  );
  if (doc === null || doc === undefined) throw turnsOnNothing;
  if (!isObject(doc)) throw bad('expected a mapping (tls_server_config, basic_auth_users)');
  for (const key of Object.keys(doc)) {
    if (key !== 'tls_server_config' && key !== 'basic_auth_users')
      throw bad(`unknown key ${JSON.stringify(key)} (supported: tls_server_config, basic_auth_users)`);
  }
  const fromDir = (file: unknown, what: string): Buffer => {
    if (typeof file !== 'string' || !file) throw bad(`tls_server_config.${what} must be a file name`);
    const full = resolve(dirname(path), file);
    try {
      return readFileSync(full);
    } catch (error) {
      throw bad(
        `tls_server_config.${what} ${JSON.stringify(full)}: cannot read it (${(error as NodeJS.ErrnoException).code ?? oneLine(error)})`,
      );
    }
  };

  let tls: WebConfig['tls'] = null;
  const t = doc.tls_server_config;
  if (t !== undefined && t !== null) {
    if (!isObject(t)) throw bad('tls_server_config must be a mapping');
    for (const key of Object.keys(t))
      if (!TLS_KEYS.includes(key)) throw bad(`unknown key tls_server_config.${JSON.stringify(key)} (supported: ${TLS_KEYS.join(', ')})`);
    if (t.cert_file === undefined || t.key_file === undefined) throw bad('tls_server_config needs cert_file and key_file');
    const auth = t.client_auth_type ?? 'NoClientCert';
    if (typeof auth !== 'string' || !Object.hasOwn(CLIENT_AUTH, auth))
      throw bad(`tls_server_config.client_auth_type: expected one of ${Object.keys(CLIENT_AUTH).join(', ')}`);
    if (auth === 'RequireAndVerifyClientCert' || auth === 'VerifyClientCertIfGiven') {
      if (t.client_ca_file === undefined) throw bad(`tls_server_config.client_auth_type ${auth} needs client_ca_file`);
    }
    const version = (key: 'min_version' | 'max_version'): TlsVersion | undefined => {
      const v = t[key];
      if (v === undefined) return undefined;
      if (typeof v !== 'string' || !TLS_VERSIONS[v])
        throw bad(`tls_server_config.${key}: expected one of ${Object.keys(TLS_VERSIONS).join(', ')}`);
      return TLS_VERSIONS[v];
    };
    tls = {
      cert: fromDir(t.cert_file, 'cert_file'),
      key: fromDir(t.key_file, 'key_file'),
      ...(t.client_ca_file !== undefined && { ca: fromDir(t.client_ca_file, 'client_ca_file') }),
      ...CLIENT_AUTH[auth as ClientAuthType],
      clientAuth: auth as ClientAuthType,
      ...(version('min_version') && { minVersion: version('min_version') }),
      ...(version('max_version') && { maxVersion: version('max_version') }),
    };
  }

  const users = new Map<string, string>();
  const u = doc.basic_auth_users;
  if (u !== undefined && u !== null) {
    if (!isObject(u)) throw bad('basic_auth_users must be a mapping of user names to bcrypt hashes');
    for (const [user, hash] of Object.entries(u)) {
      if (typeof hash !== 'string' || !/^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$/.test(hash))
        throw bad(`basic_auth_users.${JSON.stringify(user)}: not a bcrypt hash (make one with htpasswd -nBC 10 USER)`);
      users.set(user, hash);
    }
  }
  if (!tls && users.size === 0) throw turnsOnNothing;
  return { tls, users };
}

/** The connection's side of a request: what node's TLSSocket tells of the client's certificate. */
export interface PeerCertificateSocket {
  authorized: boolean;
  getPeerCertificate(): object | null;
}

/**
 * Why a request's connection does not meet client_auth_type (null: it does), for the two types
 * node's TLS options leave to the server: RequireAnyClientCert refuses a client without a
 * certificate, VerifyClientCertIfGiven one whose certificate did not verify against client_ca_file.
 */
export function clientCertRefusal(clientAuth: ClientAuthType, socket: PeerCertificateSocket): string | null {
  // node: an empty object when the client sent no certificate.
  const peer = socket.getPeerCertificate();
  const given = peer !== null && Object.keys(peer).length > 0;
  if (clientAuth === 'RequireAnyClientCert' && !given) return 'a client certificate is required';
  if (clientAuth === 'VerifyClientCertIfGiven' && given && !socket.authorized) return 'the client certificate does not verify';
  return null;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A hash of a password nobody has: an unknown user costs as much as a wrong password. */
const NOBODY = '$2b$10$Yfet3rGkdpvP/gE2L.ZTT.bjyAN9TfYYSeDikcAAw0tMusUy5goNK'; // of 32 random bytes, thrown away
const REMEMBERED = 64;
/** Checks one source (remote address) may have waiting or running: beyond, 'busy'. */
const WAITING_PER_SOURCE = 2;
/** Checks waiting or running from all sources together: beyond, 'busy'. */
const WAITING_AT_ALL = 64;

/**
 * Checks `Authorization: Basic` headers against the users' bcrypt hashes. bcrypt costs tens of
 * milliseconds by design; a scraper sends the same credentials every few seconds, so a pair that
 * succeeded is remembered (its SHA-256, never the password) and the next scrape costs a hash.
 * A failure is never remembered: every guess pays bcrypt's price, on BcryptThread, one at a time.
 * Checks wait in one queue per source (the remote address) and are taken from the sources in
 * turn, so a source that guesses gets one check in every k (k sources waiting), never all of
 * them: a scraper that was not remembered yet (after every restart) waits behind at most one
 * check of each other source, whatever they send. A source with WAITING_PER_SOURCE checks waiting
 * or running, or a request when WAITING_AT_ALL are, gets 'busy' unchecked (503 with Retry-After,
 * not 401: it is not a wrong password).
 */
export class BasicAuth {
  private readonly good = new Map<string, Buffer>();
  private readonly bcrypt = new BcryptThread();
  /** Per source, its checks not started yet (a source with none is not in it). */
  private readonly queues = new Map<string, Array<() => Promise<void>>>();
  /** Per source, its checks waiting or running (WAITING_PER_SOURCE). */
  private readonly perSource = new Map<string, number>();
  /** All sources' checks waiting or running (WAITING_AT_ALL). */
  private waiting = 0;
  private running = false;
  /** The sources with checks not started yet, in the order they get their turn. */
  private readonly turns: string[] = [];

  constructor(private readonly users: Map<string, string>) {
    // Now, not at the first check: a scraper's first login would wait for the thread's start
    // (~0.14 s of CPU here, its wall time several times that on a loaded host).
    if (this.enabled) this.bcrypt.start();
  }

  get enabled(): boolean {
    return this.users.size > 0;
  }

  /**
   * Whether the header's credentials are allowed ('busy': too many checks waiting, not checked).
   * `source`: who asks (the remote address), whose checks take turns with other sources'.
   */
  async check(header: string | undefined, source = ''): Promise<'allowed' | 'refused' | 'busy'> {
    if (!this.enabled) return 'allowed';
    const match = /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header ?? '');
    if (!match) return 'refused';
    const decoded = Buffer.from(match[1]!, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) return 'refused';
    const user = decoded.slice(0, colon);
    const password = decoded.slice(colon + 1);
    const digest = createHash('sha256').update(decoded).digest();
    const known = this.good.get(user);
    if (known && timingSafeEqual(known, digest)) return 'allowed';
    if ((this.perSource.get(source) ?? 0) >= WAITING_PER_SOURCE || this.waiting >= WAITING_AT_ALL) return 'busy';
    const hash = this.users.get(user);
    const ok = await this.inTurn(source, () => this.bcrypt.compare(password, hash ?? NOBODY));
    if (!ok || hash === undefined) return 'refused';
    if (this.good.size >= REMEMBERED) this.good.clear();
    this.good.set(user, digest);
    return 'allowed';
  }

  /** Whether the header's credentials are allowed now (false when refused or not checked). */
  async allows(header: string | undefined, source = ''): Promise<boolean> {
    return (await this.check(header, source)) === 'allowed';
  }

  /** Stops the bcrypt thread (checks waiting fail, and any after). */
  close(): Promise<void> {
    return this.bcrypt.close();
  }

  /** Runs `compare` when `source`'s turn comes. */
  private inTurn(source: string, compare: () => Promise<boolean>): Promise<boolean> {
    this.waiting++;
    this.perSource.set(source, (this.perSource.get(source) ?? 0) + 1);
    return new Promise<boolean>((resolve, reject) => {
      const run = () =>
        compare()
          .then(resolve, reject)
          .finally(() => {
            this.waiting--;
            const left = this.perSource.get(source)! - 1;
            if (left) this.perSource.set(source, left);
            else this.perSource.delete(source);
          });
      let queue = this.queues.get(source);
      if (!queue) {
        this.queues.set(source, (queue = []));
        this.turns.push(source);
      }
      queue.push(run);
      this.next();
    });
  }

  private next(): void {
    if (this.running) return;
    const source = this.turns.shift();
    if (source === undefined) return;
    const queue = this.queues.get(source)!;
    const run = queue.shift()!;
    // The source goes to the back of the line, with what it has left.
    if (queue.length) this.turns.push(source);
    else this.queues.delete(source);
    this.running = true;
    void run().finally(() => {
      this.running = false;
      this.next();
    });
  }
}
