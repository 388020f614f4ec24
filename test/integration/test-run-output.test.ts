import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { it } from 'node:test';

// A PostgreSQL-only run (no QUEUEBOX_MSSQL_URL) says once that the SQL Server tests were skipped
// and why: scripts/test.mjs prints the line, and the conformance files leave the SQL Server suites
// out instead of each reporting them skipped (issue 40). Runs scripts/test.mjs on two conformance
// files, against the PostgreSQL this run uses.
const ROOT = join(__dirname, '..', '..', '..');

it('a PostgreSQL-only run of conformance files prints one line saying SQL Server was skipped and why, not one per file', async () => {
  const env = { ...process.env };
  delete env.QUEUEBOX_MSSQL_URL;
  delete env.QUEUEBOX_TEST_SKIPS_PRINTED;
  // The child's own test runner, not this one's (node --test sets these for the files it runs).
  delete env.NODE_TEST_CONTEXT;
  const files = ['payloads', 'inbox'].map((noun) => join(ROOT, '.build', 'test', 'conformance', `${noun}.test.js`));
  const output = await new Promise<{ code: number | null; text: string }>((resolve) => {
    const child = spawn(process.execPath, [join(ROOT, 'scripts', 'test.mjs'), ...files], { cwd: ROOT, env });
    let text = '';
    child.stdout.on('data', (chunk) => {
      text += chunk;
    });
    child.stderr.on('data', (chunk) => {
      text += chunk;
    });
    child.on('close', (code) => resolve({ code, text }));
  });
  assert.equal(output.code, 0, output.text);
  // Lines about SQL Server itself (a passing test's title may name it: "... OPENJSON on SQL Server"),
  // whichever reporter the child's node uses (spec on Node 26, TAP on Node 22 when not a terminal).
  const passing = /^\s*(✔|ok \d+ - |# Subtest: )/;
  const mentions = output.text.split('\n').filter((line) => /SQL Server/.test(line) && !passing.test(line));
  assert.deepEqual(mentions, ['SQL Server tests skipped: QUEUEBOX_MSSQL_URL is not set (no SQL Server on this machine).'], output.text);
  assert.match(output.text, /dialect conformance: PostgreSQL: payload text/);
  assert.match(output.text, /dialect conformance: PostgreSQL: inbox/);
});
