// Bundles the compiled CLI (dist/src/cli/main.js) and its dependencies into the one file the
// npm package runs, dist/pg-bpf-stats.cjs. Node then reads and compiles one script at start
// instead of ~400 ES modules (kysely alone is 279 files): start-up and the memory that module
// records keep both shrink (bench/journal/start-up.md#start-up). It is CommonJS so that V8's code cache can
// hold it (node 20 caches no ES module): the package's command, dist/pg-bpf-stats.js, is the
// launcher (src/cli/launcher.ts, bundled too) that compiles it with the cache.
//
// Left out of the bundle, and loaded by node at run time:
//  - node-gyp-build, which finds the native addon in prebuilds/ (a dependency of the package);
//  - pg-native, which pg requires only when asked for its native driver (never, here).
//
// Run by scripts/build.sh after tsc: node scripts/bundle.mjs
import { chmodSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { rolldown } from 'rolldown';

const RUNTIME_REQUIRED = new Set(['node-gyp-build', 'pg-native']);

/** pg-format (through pg-listen) loads its reserved-word table by a path built at run time: make it a plain require. */
const pgFormatStaticRequire = {
  name: 'pg-format-static-require',
  transform(code, id) {
    if (!id.endsWith('/pg-format/lib/index.js')) return null;
    const dynamic = "require(__dirname + '/reserved.js')";
    if (!code.includes(dynamic)) throw new Error(`bundle: ${id} no longer loads reserved.js as expected; look at the pg-format upgrade`);
    return code.replace(dynamic, "require('./reserved.js')");
  },
};

/**
 * pg picks its socket functions when it loads, and to tell Cloudflare Workers from elsewhere it
 * makes a `Response`, which makes node load its whole fetch implementation (undici): ~10 ms of
 * every start, three times that on a busy host. The CLI runs on node only: take node's functions.
 */
const pgNodeStreams = {
  name: 'pg-node-streams',
  transform(code, id) {
    if (!id.endsWith('/pg/lib/stream.js')) return null;
    const picked = 'const { getStream, getSecureStream } = getStreamFuncs()';
    if (!code.includes(picked)) throw new Error(`bundle: ${id} no longer picks its stream functions as expected; look at the pg upgrade`);
    return code.replace(picked, 'const { getStream, getSecureStream } = getNodejsStreamFuncs()');
  },
};

/**
 * The bcrypt thread evaluates bcryptjs' CommonJS build as text, read from node_modules
 * (src/exporters/prometheus/bcrypt-thread.ts); the package ships no node_modules: put the file's
 * text in place of the read. It is the file as published, its licence notice in it (minifying
 * keeps a string's text, not a comment's).
 */
const require = createRequire(import.meta.url);
const bcryptjsText = {
  name: 'bcryptjs-text',
  transform(code, id) {
    if (!id.endsWith('/dist/src/exporters/prometheus/bcrypt-thread.js')) return null;
    const read = "readFileSync(createRequire(import.meta.url).resolve('bcryptjs'), 'utf8')";
    if (!code.includes(read))
      throw new Error(`bundle: ${id} no longer reads bcryptjs as expected; change the bcryptjs-text plugin with it`);
    return code.replace(read, JSON.stringify(readFileSync(require.resolve('bcryptjs'), 'utf8')));
  },
};

const OWN_PLUGINS = new Set([pgFormatStaticRequire.name, pgNodeStreams.name, bcryptjsText.name]);
const output = 'dist/pg-bpf-stats.cjs';
const launcher = 'dist/pg-bpf-stats.js';
const bundle = await rolldown({
  input: 'dist/src/cli/main.js',
  platform: 'node',
  external: (id) => RUNTIME_REQUIRED.has(id),
  plugins: [pgFormatStaticRequire, pgNodeStreams, bcryptjsText],
  onLog(level, log) {
    // Circular imports inside dependencies (kysely's) are theirs and harmless; say anything else.
    if (log.code === 'CIRCULAR_DEPENDENCY') return;
    // Our transforms replace text within one line (a JSON string is one line): the source map's lines stay right.
    if (log.code === 'SOURCEMAP_BROKEN' && OWN_PLUGINS.has(log.plugin)) return;
    process.stderr.write(`bundle: ${level}: ${log.message}\n`);
  },
});
// V8 keeps a script's source for its whole life (functions are compiled when first called), so
// the source is kept small: ASCII (one character past Latin-1 makes it two bytes a character),
// no comments but the bundled packages' licence notices, and minified (1.18 MB -> 0.71 MB, 0.7 MB
// less RSS; bench/journal/memory.md#a-minified-bundle). Function and class names are kept, so an internal
// error's stack still names where it was; the source map beside the bundle maps its positions
// back to dist/src (`node --enable-source-maps dist/pg-bpf-stats.js ...`).
await bundle.write({
  file: output,
  format: 'cjs',
  codeSplitting: false,
  charset: 'ascii',
  comments: { legal: true, annotation: false, jsdoc: false },
  minify: {
    compress: { keepNames: { function: true, class: true } },
    mangle: { keepNames: true },
    codegen: { removeWhitespace: true, legalComments: 'inline' },
  },
  sourcemap: true,
});
await bundle.close();

// The bundle runs from V8's code cache, where import() has no loader (src/cli/code-cache.ts):
// refuse any call of it but node-pg-migrate's loader of JavaScript migrations, which ours are not.
const calls = [...readFileSync(output, 'utf8').matchAll(/(?<![\w$.])import\((.{0,20})/g)].map((m) => m[1]);
const unreachable = (call) => call.startsWith('`file://${') && readdirSync('migrations').every((f) => f.endsWith('.sql'));
const refused = calls.filter((call) => !unreachable(call));
if (refused.length)
  throw new Error(
    `bundle: ${output} calls import(${refused.join('), import(')}): it runs from V8's code cache, where import() fails; load it otherwise`,
  );

// The launcher: small, and run as is (its first line gives node the bin's flags).
const launch = await rolldown({
  input: 'dist/src/cli/launcher.js',
  platform: 'node',
  onLog(level, log) {
    process.stderr.write(`bundle: ${level}: ${log.message}\n`);
  },
});
await launch.write({
  file: launcher,
  format: 'esm',
  codeSplitting: false,
  charset: 'ascii',
  comments: { legal: false, annotation: false, jsdoc: false },
});
await launch.close();
chmodSync(launcher, 0o755);
