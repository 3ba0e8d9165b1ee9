#!/usr/bin/env -S node --max-old-space-size=160 --max-semi-space-size=4
// The command the package installs (dist/pg-bpf-stats.js): it runs the bundled CLI
// (dist/pg-bpf-stats.cjs) through V8's code cache (code-cache.ts).
//
// The heap cap: with the default limit (a quarter of RAM) V8 let the heap grow to 430 MB over a
// 35-minute soak whose live heap stayed at 40-60 MB; capped, RSS stayed at 145-180 MB (docs/endurance.md#soak-benchsoakts).
// The young generation's cap: under load V8 grows both semi-spaces to it and keeps them. 8 MB
// took the peak RSS at 1,000 connections from ~150 to ~130 MB, 4 MB the steady RSS there from
// ~90 to ~79 MB, neither at a CPU cost the benches could see (bench/connection-scaling.ts; bench/journal/memory.md#the-bin-now-uses-4-mb-semi-spaces).
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { codeCachePath, loadBundle } from './code-cache.js';
import type { runCli } from './main.js';

const bundlePath = join(dirname(fileURLToPath(import.meta.url)), 'pg-bpf-stats.cjs');
const bundle = loadBundle(bundlePath, codeCachePath(bundlePath));
(bundle.exports.runCli as typeof runCli)(process.argv.slice(2), { started: () => bundle.saveCache(), cacheRefused: bundle.refused });
