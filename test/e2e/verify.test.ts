import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import type { VerifyReport } from '../../lib/cli/verify/verify.report';
import { createQueueBoxMigrations } from '../../lib/migrations/queuebox.migration';
import { runMigrations, type TestDatabase, testDatabases } from '../support/database';

// `queuebox verify` as users run it: the compiled CLI in its own process, on a database of its
// own (test/support/database.ts), with every scenario: three worker processes of this build under
// kill -9, a pause past the lease, their sessions ended (pg_terminate_backend) and a graceful
// shutdown, producers committing rows of one key out of order, poison messages. It must pass
// here (CI runs it on PostgreSQL 14 and 18), leave no table and no process behind, and stop the
// same way on Ctrl-C.

const CLI = join(__dirname, '..', '..', 'lib', 'cli', 'main.js');

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs `queuebox verify <args>`; `onLine` sees each line of its standard output as it comes. */
function verify(args: string[], onLine: (line: string, child: ReturnType<typeof spawn>) => void = () => undefined): Promise<Run> {
  const env = { ...process.env };
  delete env.QUEUEBOX_VERIFY_DEFECT;
  delete env.DATABASE_URL;
  delete env.QUEUEBOX_DATABASE_URL;
  // A process group of its own, as a shell gives a command: Ctrl-C in a terminal signals the whole group.
  const child = spawn(process.execPath, [CLI, 'verify', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let stdout = '';
  let stderr = '';
  let pending = '';
  child.stdout.on('data', (chunk) => {
    stdout += String(chunk);
    pending += String(chunk);
    const lines = pending.split('\n');
    pending = lines.pop() ?? '';
    for (const line of lines) onLine(line, child);
  });
  child.stderr.on('data', (chunk) => {
    stderr += String(chunk);
  });
  return new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, stdout, stderr })));
}

/** The verify run's tables left in `db`, and the sessions of its workers still connected. */
async function leftBehind(db: TestDatabase): Promise<{ tables: string[]; sessions: number }> {
  const tables = await db.query<{ tablename: string }>(
    "SELECT tablename FROM pg_tables WHERE tablename LIKE 'queuebox_verify%' ORDER BY 1",
  );
  const [{ n }] = await db.query<{ n: string }>(
    "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE 'queuebox-verify-%'",
    [db.name],
  );
  return { tables: tables.map((row) => row.tablename), sessions: Number(n) };
}

describe('queuebox verify (CLI, PostgreSQL)', () => {
  const newDatabase = testDatabases();
  const database = () => newDatabase({ migrate: false });

  it('every scenario on this PostgreSQL: every check passes, the report is written, nothing is left behind', {
    timeout: 240_000,
  }, async (t) => {
    const db = await database();
    const json = join(mkdtempSync(join(tmpdir(), 'queuebox-verify-')), 'report.json');
    const run = await verify(['--url', db.url, '--seconds', '15', '--json', json]);
    t.diagnostic(run.stdout);
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
    for (const check of ['lost', 'duplicates', 'order', 'stuck', 'poison', 'recovery', 'shutdown', 'paused']) {
      assert.match(run.stdout, new RegExp(`^PASS  ${check} `, 'm'), `${check} passed`);
    }
    assert.doesNotMatch(run.stdout, /^(FAIL|SKIP) /m);
    assert.match(run.stdout, /^Verdict: PASS \(8 checks\) in \d+ s\. Workers stopped, tables dropped\.$/m);
    assert.match(run.stdout, /^Database: .*default_transaction_isolation=read committed.*server_version=/m);

    const report = JSON.parse(readFileSync(json, 'utf8')) as VerifyReport;
    assert.equal(report.verdict, 'PASS');
    assert.deepEqual(
      report.checks.map((check) => [check.name, check.status]),
      ['lost', 'duplicates', 'order', 'stuck', 'poison', 'recovery', 'shutdown', 'paused'].map((name) => [name, 'PASS']),
    );
    assert.deepEqual([...new Set(report.faults.map((fault) => fault.kind))].sort(), [
      'admin-pause',
      'kill',
      'pause',
      'sessions',
      'shutdown',
    ]);
    assert.deepEqual(
      report.faults
        .find((fault) => fault.kind === 'admin-pause')
        ?.paused?.map((paused) => [paused.component, paused.name, paused.claimedKeys]),
      [
        ['outbox', 'verify.outbox', []],
        ['inbox', 'verify.relay', []],
      ],
      'the first admin pause: the destination of the outbox path and the source of the relay, nothing claimed meanwhile',
    );
    assert.deepEqual(report.skipped, []);
    assert.ok(report.faults.find((fault) => fault.kind === 'sessions')?.sessions, 'pg_terminate_backend ended sessions');
    assert.ok(report.produced.outOfOrderPairs > 0, 'rows of one key committed out of production order');
    assert.ok(report.produced.poison >= 4, 'poison messages on each path');
    assert.ok(report.deliveries >= report.produced.total - report.produced.poison);
    assert.equal(report.database.displayName, 'PostgreSQL');
    assert.equal(report.tablesDropped, true);
    assert.deepEqual(await leftBehind(db), { tables: [], sessions: 0 });
  });

  it('refuses tables of its own that hold rows; with --force it drops them, and Ctrl-C stops the run, drops its tables and exits with 130', {
    timeout: 180_000,
  }, async () => {
    const db = await database();
    const tables = { outbox: 'queuebox_verify_outbox', inbox: 'queuebox_verify_inbox', instances: 'queuebox_verify_instances' };
    await runMigrations(db.url, createQueueBoxMigrations({ tables }), 'queuebox_verify_migrations');
    await db.query(
      "INSERT INTO queuebox_verify_outbox (message_id, destination, payload, headers) VALUES (gen_random_uuid(), 'left', '{}', '{}')",
    );

    const refused = await verify(['--url', db.url, '--seconds', '5']);
    assert.equal(refused.code, 1, refused.stderr);
    assert.match(refused.stderr, /queuebox verify: .*"queuebox_verify_outbox".* already exist and hold 1 row: .* Pass --force/);
    assert.equal((await db.query("SELECT 1 FROM queuebox_verify_outbox WHERE destination = 'left'")).length, 1, 'nothing was changed');

    let interruptedAt = 0;
    const interrupted = await verify(['--url', db.url, '--seconds', '60', '--force', '--workers', '2'], (line, child) => {
      // Once it produces (workers running, rows written), Ctrl-C as a terminal sends it: to the
      // command and its worker processes alike.
      if (line.startsWith('Producing for') && interruptedAt === 0) {
        interruptedAt = Date.now();
        setTimeout(() => process.kill(-(child.pid as number), 'SIGINT'), 2000);
      }
    });
    assert.ok(interruptedAt > 0, `it started producing:\n${interrupted.stdout}\n${interrupted.stderr}`);
    assert.equal(interrupted.code, 130, `${interrupted.stdout}\n${interrupted.stderr}`);
    assert.match(interrupted.stderr, /queuebox verify: interrupted: stopping the workers and dropping the tables/);
    assert.match(interrupted.stderr, /queuebox verify: interrupted: the workers were stopped and the tables dropped\./);
    assert.ok(Date.now() - interruptedAt < 30_000, 'it stopped at once, not after its 60 seconds');
    assert.deepEqual(await leftBehind(db), { tables: [], sessions: 0 });
  });

  it('says what is wrong with its options before it connects (exit code 2)', async () => {
    const cases: [string[], RegExp][] = [
      [['--seconds', '15'], /no database URL/],
      [['--url', 'postgres://127.0.0.1:1/none', '--seconds', '2'], /--seconds: seconds must be an integer from 5 to 86400; got 2\./],
      [['--url', 'postgres://127.0.0.1:1/none', '--scenarios', 'kill,explode'], /--scenarios: unknown scenario "explode"/],
      [['--url', 'postgres://127.0.0.1:1/none', '--lease-ms', 'soon'], /--lease-ms "soon" must be a whole number/],
      [['--url', 'postgres://127.0.0.1:1/none', '--prefix', 'Bad-Name'], /--prefix: prefix "Bad-Name" must be lower-case letters/],
    ];
    for (const [args, message] of cases) {
      const run = await verify(args);
      assert.equal(run.code, 2, `${args.join(' ')}: ${run.stderr}`);
      assert.match(run.stderr, message);
    }
  });
});
