import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { runQueueBoxCli } from '../support/cli';
import { testDatabases } from '../support/database';

// `queuebox doctor` as users run it (its own process, exit code, stdout), as test/e2e/cli.test.ts
// runs the other commands: no warning (exit 0), a warning (exit 0), an error-level one (exit 1)
// with the statement that repairs it, --json, and the repair run making it go.

const queuebox = (args: string[]) => runQueueBoxCli(args);

describe('queuebox doctor (CLI)', () => {
  const newDatabase = testDatabases();

  it('prints each warning with its code, severity and repair; exits 1 on an error-level one; --json; gone once repaired', async () => {
    const db = await newDatabase();
    const healthy = await queuebox(['doctor', '--url', db.url, '--json']);
    assert.equal(healthy.code, 0, healthy.stderr);
    const clean = JSON.parse(healthy.stdout) as {
      type: string;
      warnings: { code: string; subject: string | null }[];
      notChecked: string[];
    };
    assert.equal(clean.type, 'postgres');
    // The test server may run with autovacuum off server-wide; nothing about QueueBox's own tables.
    assert.deepEqual(
      clean.warnings.filter((w) => w.subject !== null),
      [],
    );
    assert.deepEqual(clean.notChecked, []);
    assert.ok(!clean.warnings.some((w) => w.code === 'listen_unavailable'), 'its notification arrived: LISTEN works on this URL');

    await db.query('ALTER TABLE queuebox_inbox SET (autovacuum_enabled = false)');
    const warned = await queuebox(['doctor', '--url', db.url]);
    assert.equal(warned.code, 0, 'a warning alone does not fail the command');
    assert.match(warned.stdout, /^WARNING autovacuum_off {2}queuebox_inbox\n {8}Autovacuum is off for queuebox_inbox/m);
    assert.match(warned.stdout, /^ {8}repair: ALTER TABLE "queuebox_inbox" RESET \(autovacuum_enabled\)$/m);

    await db.query('DROP INDEX queuebox_inbox_claim_idx');
    const failed = await queuebox(['doctor', '--url', db.url]);
    assert.equal(failed.code, 1, failed.stdout);
    assert.match(failed.stdout, /^ERROR {3}index_missing {2}queuebox_inbox_claim_idx$/m);
    assert.match(
      failed.stdout,
      /^ {8}repair: CREATE INDEX "queuebox_inbox_claim_idx" ON "queuebox_inbox" \(source, available_at, id\) WHERE state = 'pending'$/m,
    );
    assert.match(failed.stdout, /^1 error\(s\), \d+ warning\(s\), 0 info\.$/m);
    const json = JSON.parse((await queuebox(['doctor', '--url', db.url, '--json'])).stdout) as {
      warnings: { code: string; severity: string; fatal: boolean; subject: string; repair: string }[];
    };
    const missing = json.warnings.find((w) => w.code === 'index_missing');
    assert.deepEqual([missing?.severity, missing?.fatal, missing?.subject], ['error', false, 'queuebox_inbox_claim_idx']);

    // The repairs it printed, run as printed.
    for (const w of json.warnings.filter((w) => w.subject?.startsWith('queuebox_inbox'))) await db.query(w.repair);
    const repaired = await queuebox(['doctor', '--url', db.url]);
    assert.equal(repaired.code, 0, repaired.stdout);
    assert.doesNotMatch(repaired.stdout, /queuebox_inbox/);
  });

  it('a database whose last migration was not run: migrations_behind, an error naming `queuebox migrate`', async () => {
    const db = await newDatabase();
    await db.query(`DELETE FROM migrations WHERE name = 'QueueBoxRenewals1796515200000'`);
    const run = await queuebox(['doctor', '--url', db.url]);
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^ERROR {3}migrations_behind {2}QueueBoxRenewals1796515200000$/m);
    assert.match(run.stdout, /^ {8}repair: npx --no-install queuebox migrate$/m);
    const help = await queuebox(['doctor', '--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /Usage: queuebox doctor/);
    assert.match((await queuebox(['--help'])).stdout, /\n {2}doctor {7}Check the database/);
  });
});
