import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Worker } from 'node:worker_threads';

/**
 * bcryptjs' CommonJS build (its file as published, licence notice included) as text, for the
 * thread to evaluate: a worker thread runs a file or a text, and the package ships one bundled
 * file and no node_modules. Read from node_modules here (tests, dist/src); in the bundle,
 * scripts/bundle.mjs puts the same file's text in place of this read.
 */
const bcryptjsSource = (): string => readFileSync(createRequire(import.meta.url).resolve('bcryptjs'), 'utf8');

/** What the thread runs: bcryptjs as a CommonJS module, then one check per message, in the order they come. */
const program = (bcryptjs: string): string => `'use strict';
const bcryptjs = { exports: {} };
(function (exports, module, require) {
${bcryptjs}
})(bcryptjs.exports, bcryptjs, require);
const { compareSync } = bcryptjs.exports;
const { parentPort } = require('node:worker_threads');
parentPort.on('message', ({ id, password, hash }) => {
  let ok = false;
  try {
    ok = compareSync(password, hash);
  } catch {} // a hash bcryptjs cannot read matches nothing
  parentPort.postMessage({ id, ok });
});
`;

/**
 * bcrypt off the main thread: one worker thread that runs one check at a time. A check costs
 * ~90 ms of CPU at cost 10 here; on the main thread (bcryptjs' async API runs it there in slices)
 * it delayed flushes and scrapes by up to 104 ms. One thread: the machine the collector shares
 * with PostgreSQL is not for guessing passwords. The thread does not keep the process alive.
 */
export class BcryptThread {
  private worker: Worker | null = null;
  private readonly pending = new Map<number, { resolve: (ok: boolean) => void; reject: (error: Error) => void }>();
  private nextId = 0;
  private closed = false;

  /** Starts the thread now rather than at the first check. */
  start(): void {
    this.thread();
  }

  /** Async, so that a thread that cannot start fails this check rather than throwing at its caller. */
  async compare(password: string, hash: string): Promise<boolean> {
    if (this.closed) throw new Error('the bcrypt thread is closed');
    const worker = this.thread();
    const id = this.nextId++;
    return new Promise<boolean>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.postMessage({ id, password, hash });
    });
  }

  /** Stops the thread; the check running and any after fail (none starts it again). */
  async close(): Promise<void> {
    this.closed = true;
    const worker = this.worker;
    this.worker = null;
    if (worker) await worker.terminate();
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    // Loaded here, as node:http is: most runs never check a password.
    const { Worker } = process.getBuiltinModule('node:worker_threads');
    const worker = new Worker(program(bcryptjsSource()), { eval: true, resourceLimits: { maxOldGenerationSizeMb: 16 } });
    worker.unref();
    worker.on('message', ({ id, ok }: { id: number; ok: boolean }) => {
      this.pending.get(id)?.resolve(ok);
      this.pending.delete(id);
    });
    const fail = (error: Error) => {
      if (this.worker === worker) this.worker = null;
      for (const { reject } of this.pending.values()) reject(error);
      this.pending.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`the bcrypt thread exited (${code})`)));
    this.worker = worker;
    return worker;
  }
}
