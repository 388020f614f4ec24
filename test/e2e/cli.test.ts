import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Client } from 'pg';
import { SCHEMA_MIGRATIONS } from '../../lib/dialects/schema-migrations';
import { createQueueBoxMigration } from '../../lib/migrations/queuebox.migration';
import { renderSchemaSql } from '../../lib/migrations/schema-files';
import { type CliRun, runQueueBoxCli } from '../support/cli';
import { runMigrations, serverUrl, type TestDatabase, testDatabases } from '../support/database';

// The compiled CLI of this build (`npm test` compiles lib/ and test/ to .build/), run as users run
// `queuebox`: its own process, its exit code, its stdout and stderr (test/support/cli.ts).
const PASSWORD = 'Pa55-w0rd-never-printed';

/** The CLI, which must never print the test role's password. */
async function queuebox(args: string[], env: NodeJS.ProcessEnv = {}): Promise<CliRun> {
  const run = await runQueueBoxCli(args, env);
  assert.ok(!`${run.stdout}${run.stderr}`.includes(PASSWORD), `the password was printed:\n${run.stdout}\n${run.stderr}`);
  return run;
}

/** A database as an app left it before the operations migration existed: the schema migration only. */
function migrateSchemaOnly(url: string): Promise<void> {
  return runMigrations(url, [createQueueBoxMigration()]);
}

/** A login role whose password is PASSWORD, so every URL the CLI gets carries a password that must never be printed. */
const CLI_ROLE = `qb_cli_${process.pid}`;

/** Creates (or resets) CLI_ROLE on the test server; works whether the server trusts local connections or checks passwords. */
async function createCliRole(): Promise<void> {
  const client = new Client({ connectionString: serverUrl() });
  await client.connect();
  try {
    await client.query(`DO $$ BEGIN
      CREATE ROLE ${CLI_ROLE} LOGIN SUPERUSER;
    EXCEPTION WHEN duplicate_object THEN NULL;
    END $$`);
    await client.query(`ALTER ROLE ${CLI_ROLE} PASSWORD '${PASSWORD}'`);
  } finally {
    await client.end();
  }
}

/** Drops CLI_ROLE once the databases holding its tables are gone. */
async function dropCliRole(): Promise<void> {
  const client = new Client({ connectionString: serverUrl() });
  await client.connect();
  try {
    await client.query(`DROP ROLE IF EXISTS ${CLI_ROLE}`);
  } finally {
    await client.end();
  }
}

/** `url` as CLI_ROLE, with its password. */
function withPassword(url: string): string {
  const parsed = new URL(url);
  parsed.username = CLI_ROLE;
  parsed.password = PASSWORD;
  return parsed.toString();
}

function withUser(url: string, user: string): string {
  const parsed = new URL(url);
  parsed.username = user;
  return parsed.toString();
}

describe('queuebox CLI', () => {
  const newDatabase = testDatabases();
  before(createCliRole);
  after(dropCliRole);
  const emptyDatabase = () => newDatabase({ migrate: false });
  const tableNames = async (db: TestDatabase, schema = 'public') =>
    (await db.query<{ tablename: string }>('SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1', [schema])).map(
      (r) => r.tablename,
    );

  it('migrate creates the schema in an empty database; a second run changes nothing', async () => {
    const db = await emptyDatabase();
    const url = withPassword(db.url);

    const first = await queuebox(['migrate', '--url', url]);
    assert.equal(first.code, 0, first.stderr);
    assert.match(first.stdout, /Applied migration QueueBoxSchema1764460800000/);
    assert.match(first.stdout, /Applied migration QueueBoxOperations1764633600000/);
    assert.match(first.stdout, /Applied migration QueueBoxClaims1795996800000/);
    assert.match(first.stdout, /Applied migration QueueBoxKeyCollation1796083200000: nothing to change on PostgreSQL/);
    assert.match(first.stdout, /Applied migration QueueBoxClaimFunctions1796169600000: nothing to change/);
    assert.match(
      first.stdout,
      /Applied migration QueueBoxInstances1796256000000: created the instances table and the claim owner columns, and wrote the claim functions of this version/,
    );
    assert.match(
      first.stdout,
      /Applied migration QueueBoxClaimProbes1796342400000: rewrote the claim functions with this version's head probes/,
    );
    assert.match(first.stdout, /Applied migration QueueBoxRateLimits1796428800000: created the rate limit buckets of outbox.rateLimits/);
    assert.match(
      first.stdout,
      /Applied migration QueueBoxRenewals1796515200000: added when each lease was last renewed, and each instance row's heartbeat count/,
    );
    assert.match(first.stdout, /Applied migration QueueBoxPauses1796601600000: added the table of paused destinations and sources/);
    assert.match(
      first.stdout,
      /Applied migration QueueBoxAttempts1796688000000: added the attempt history tables and the dead letters' fingerprint/,
    );
    assert.match(
      first.stdout,
      /Applied migration QueueBoxUnkeyedClaims1796774400000: rewrote the claim functions: claims of rows without a key run without the claim lock/,
    );
    assert.match(
      first.stdout,
      /Applied migration QueueBoxKeyedClaims1796860800000: rewrote the claim functions: claims of rows with a key lock those keys and run side by side/,
    );
    assert.match(
      first.stdout,
      /Applied migration QueueBoxClaimPlans1796947200000: set the claim functions to plan with their indexes, whatever the table held when a session first claimed/,
    );
    assert.match(first.stdout, /Database: postgres:\/\/qb_cli_\d+:\*\*\*@/);
    assert.deepEqual(await tableNames(db), [
      'migrations',
      'queuebox_inbox',
      'queuebox_inbox_attempts',
      'queuebox_instances',
      'queuebox_outbox',
      'queuebox_outbox_attempts',
      'queuebox_outbox_pauses',
      'queuebox_outbox_rate_limits',
    ]);

    const second = await queuebox(['migrate', '--url', url]);
    assert.equal(second.code, 0, second.stderr);
    assert.match(
      second.stdout,
      /Nothing to do: migrations QueueBoxSchema1764460800000, QueueBoxOperations1764633600000, QueueBoxClaims1795996800000, QueueBoxKeyCollation1796083200000, QueueBoxClaimFunctions1796169600000, QueueBoxInstances1796256000000, QueueBoxClaimProbes1796342400000, QueueBoxRateLimits1796428800000, QueueBoxRenewals1796515200000, QueueBoxPauses1796601600000, QueueBoxAttempts1796688000000, QueueBoxUnkeyedClaims1796774400000, QueueBoxKeyedClaims1796860800000, QueueBoxClaimPlans1796947200000 are already applied/,
    );
    assert.deepEqual(await db.query('SELECT name FROM migrations ORDER BY id'), [
      { name: 'QueueBoxSchema1764460800000' },
      { name: 'QueueBoxOperations1764633600000' },
      { name: 'QueueBoxClaims1795996800000' },
      { name: 'QueueBoxKeyCollation1796083200000' },
      { name: 'QueueBoxClaimFunctions1796169600000' },
      { name: 'QueueBoxInstances1796256000000' },
      { name: 'QueueBoxClaimProbes1796342400000' },
      { name: 'QueueBoxRateLimits1796428800000' },
      { name: 'QueueBoxRenewals1796515200000' },
      { name: 'QueueBoxPauses1796601600000' },
      { name: 'QueueBoxAttempts1796688000000' },
      { name: 'QueueBoxUnkeyedClaims1796774400000' },
      { name: 'QueueBoxKeyedClaims1796860800000' },
      { name: 'QueueBoxClaimPlans1796947200000' },
    ]);
    const indexes = await db.query<{ indexname: string }>("SELECT indexname FROM pg_indexes WHERE indexname LIKE '%dead%' ORDER BY 1");
    assert.equal(indexes.length, 2, 'the operations indexes of dead rows exist');
  });

  it('migrate brings a database with only the schema migration up to date (the operations indexes)', async () => {
    const db = await emptyDatabase();
    const url = withPassword(db.url);
    await migrateSchemaOnly(db.url);
    const before = await queuebox(['status', '--url', url]);
    assert.match(before.stdout, /Migration QueueBoxOperations1764633600000: not applied/);
    assert.match(before.stdout, /Migration QueueBoxClaims1795996800000: not applied/);
    const run = await queuebox(['migrate', '--url', url]);
    assert.equal(run.code, 0, run.stderr);
    assert.doesNotMatch(run.stdout, /QueueBoxSchema1764460800000/);
    assert.match(run.stdout, /Applied migration QueueBoxOperations1764633600000/);
    assert.match(run.stdout, /Applied migration QueueBoxClaims1795996800000/);
    const after = await queuebox(['status', '--url', url]);
    assert.match(after.stdout, /Migration QueueBoxOperations1764633600000: applied/);
    assert.match(after.stdout, /Migration QueueBoxClaims1795996800000: applied/);
    assert.match(after.stdout, /Migration QueueBoxKeyCollation1796083200000: applied/);
  });

  it('migrate takes the URL from QUEUEBOX_DATABASE_URL (then DATABASE_URL) and honours --tables', async () => {
    const db = await emptyDatabase();
    const run = await queuebox(['migrate', '--tables', 'outbox=messaging.out_box,inbox=messaging.in_box'], {
      DATABASE_URL: 'postgres://wrong:wrong@127.0.0.1:1/none',
      QUEUEBOX_DATABASE_URL: withPassword(db.url),
    });
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(await tableNames(db, 'messaging'), [
      'in_box',
      'in_box_attempts',
      'out_box',
      'out_box_attempts',
      'out_box_pauses',
      'out_box_rate_limits',
      'queuebox_instances',
    ]);

    const status = await queuebox(['status', '--tables', 'outbox=messaging.out_box,inbox=messaging.in_box'], {
      DATABASE_URL: withPassword(db.url),
    });
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /"messaging.out_box" exists, "messaging.in_box" exists/);
  });

  it('status reports the schema, the counts per destination and source and the pauses, as text and as JSON', async () => {
    const db = await emptyDatabase();
    const url = withPassword(db.url);
    assert.equal((await queuebox(['migrate', '--url', url])).code, 0);
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, created_at) VALUES
      (gen_random_uuid(), 'billing', '{}', 'pending', now() - interval '90 seconds'),
      (gen_random_uuid(), 'billing', '{}', 'pending', now()),
      (gen_random_uuid(), 'billing', '{}', 'sent', now()),
      (gen_random_uuid(), 'shipping', '{}', 'dead', now()),
      (gen_random_uuid(), 'archive', '{}', 'sent', now())`);
    // Scheduled for later: counted as pending, but it does not age the queue.
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, created_at, available_at)
      VALUES (gen_random_uuid(), 'billing', '{}', 'pending', now() - interval '1 hour', now() + interval '1 hour')`);
    await db.query(`INSERT INTO queuebox_inbox (source, idempotency_key, payload, state) VALUES
      ('orders', 'a', '{}', 'processed'), ('orders', 'b', '{}', 'pending')`);

    const text = await queuebox(['status', '--url', url]);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /Migration QueueBoxSchema1764460800000: applied/);
    assert.match(text.stdout, /^Nothing is paused\.$/m);
    assert.match(text.stdout, /destination\s+pending\s+processing\s+sent\s+dead\s+oldest pending/);
    assert.match(text.stdout, /archive\s+0\s+0\s+1\s+0\s+-/);
    assert.match(text.stdout, /billing\s+3\s+0\s+1\s+0\s+1m 3\ds/);
    assert.match(text.stdout, /shipping\s+0\s+0\s+0\s+1\s+-/);
    assert.match(text.stdout, /orders\s+1\s+0\s+1\s+0\s+\ds/);

    const json = await queuebox(['status', '--url', url, '--json']);
    assert.equal(json.code, 0, json.stderr);
    const report = JSON.parse(json.stdout);
    assert.equal(report.migration.applied, true);
    assert.ok(!report.database.includes(PASSWORD));
    const counts = report.backlog.map((e: Record<string, unknown>) => [e.component, e.name, e.pending, e.processing, e.done, e.dead]);
    assert.deepEqual(counts, [
      ['outbox', 'archive', 0, 0, 1, 0],
      ['outbox', 'billing', 3, 0, 1, 0],
      ['outbox', 'shipping', 0, 0, 0, 1],
      ['inbox', 'orders', 1, 0, 1, 0],
    ]);
    const billing = report.backlog[1].oldestPendingAgeSeconds;
    assert.ok(billing >= 90 && billing < 120, `oldest pending age ${billing}`);
    assert.equal(report.backlog[2].oldestPendingAgeSeconds, null);
    assert.deepEqual(report.pauses, []);

    // A pause shows in both forms (after the counts, whose ages the time of these runs would move).
    const pause = await queuebox(['pause', '--url', url, '--destination', 'shipping', '--reason', 'carrier down', '--actor', 'ada']);
    assert.equal(pause.code, 0, pause.stderr);
    assert.match(
      (await queuebox(['status', '--url', url])).stdout,
      /^Paused:\n.*kind.*\n\s*destination\s+shipping\s+ada\s+\d{4}-\d\d-\d\dT[\d:]{8}Z\s+carrier down$/m,
    );
    const paused = JSON.parse((await queuebox(['status', '--url', url, '--json'])).stdout);
    assert.deepEqual(
      paused.pauses.map((p: Record<string, unknown>) => [p.component, p.name, p.pausedBy, p.reason]),
      [['outbox', 'shipping', 'ada', 'carrier down']],
    );
  });

  it('instances lists each registered instance with its heartbeat, its state (alive, SILENT, DEAD) by the database clock, and the rows it holds', async () => {
    const db = await emptyDatabase();
    const url = withPassword(db.url);
    assert.equal((await queuebox(['migrate', '--url', url])).code, 0);
    assert.match((await queuebox(['instances', '--url', url])).stdout, /No QueueBox instance is registered/);
    // As instances write their rows, heartbeats aged by the database clock: deadAfterMs 15 s (silent
    // after 10 s, dead after 15 s), and 60 s for the silent one (silent after 40 s), so the seconds
    // the commands take cannot move it.
    const [alive, silent, dead] = [
      'a11ce000-0000-4000-8000-000000000001',
      '5113e700-0000-4000-8000-000000000002',
      'dead0000-0000-4000-8000-000000000003',
    ];
    await db.query(
      `INSERT INTO queuebox_instances (id, host, pid, data_source, version, dead_after_ms, started_at, heartbeat_at) VALUES
         ($1, 'web-1', 101, 'default', '0.1.0', 15000, clock_timestamp() - interval '1 hour', clock_timestamp() - interval '2 seconds'),
         ($2, 'web-2', 202, 'ledger', '0.1.0', 60000, clock_timestamp() - interval '40 minutes', clock_timestamp() - interval '45 seconds'),
         ($3, 'web-3', 303, 'ledger', '0.1.0', 15000, clock_timestamp() - interval '30 minutes', clock_timestamp() - interval '40 seconds')`,
      [alive, silent, dead],
    );
    await db.query(
      `INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, claim_token, claimed_at, lease_expires_at, claimed_by)
       VALUES (gen_random_uuid(), 'd', '{}', 'processing', 1, gen_random_uuid(), clock_timestamp() - interval '40 seconds', clock_timestamp() + interval '5 minutes', $1)`,
      [dead],
    );
    const text = await queuebox(['instances', '--url', url]);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /id\s+host\s+pid\s+data source\s+version\s+started\s+last heartbeat\s+state\s+outbox claims\s+inbox claims/);
    assert.match(
      text.stdout,
      new RegExp(`${alive}\\s+web-1\\s+101\\s+default\\s+0\\.1\\.0\\s+\\S+Z\\s+\\d+\\.\\ds ago\\s+alive\\s+0\\s+0`),
    );
    assert.match(
      text.stdout,
      new RegExp(
        `${silent}\\s+web-2\\s+202\\s+ledger\\s+0\\.1\\.0\\s+\\S+Z\\s+4\\d\\.\\ds ago\\s+SILENT \\(dead after 1m 00s\\)\\s+0\\s+0`,
      ),
    );
    assert.match(
      text.stdout,
      new RegExp(`${dead}\\s+web-3\\s+303\\s+ledger\\s+0\\.1\\.0\\s+\\S+Z\\s+\\d{2}\\.\\ds ago\\s+DEAD \\(silent > 15\\.0s\\)\\s+1\\s+0`),
    );
    const json = JSON.parse((await queuebox(['instances', '--url', url, '--json'])).stdout) as Record<string, unknown>[];
    assert.deepEqual(
      json.map((r) => [r.id, r.state, r.claims]),
      [
        [alive, 'alive', { outbox: 0, inbox: 0 }],
        [silent, 'silent', { outbox: 0, inbox: 0 }],
        [dead, 'dead', { outbox: 1, inbox: 0 }],
      ],
    );
    assert.match((await queuebox(['--help'])).stdout, /instances\s+List the QueueBox instances/);
  });

  it('status on a database without the schema says to run migrate, and exits 1', async () => {
    const db = await emptyDatabase();
    const run = await queuebox(['status', '--url', withPassword(db.url)]);
    assert.equal(run.code, 1);
    assert.match(run.stdout, /"queuebox_outbox" MISSING, "queuebox_inbox" MISSING/);
    assert.match(run.stderr, /schema missing .*run `queuebox migrate`/);
    assert.deepEqual(await tableNames(db), [], 'status creates nothing, not even TypeORM migrations table');
  });

  it('migrate leaves tables created from plain SQL alone and says why', async () => {
    const db = await emptyDatabase();
    await db.query(renderSchemaSql('postgres'));
    const run = await queuebox(['migrate', '--url', withPassword(db.url)]);
    assert.equal(run.code, 1);
    assert.match(run.stderr, /already exist but migration QueueBoxSchema1764460800000 is not recorded/);
    assert.match(run.stderr, /--migrations-table <that name>/);
    const status = await queuebox(['status', '--url', withPassword(db.url)]);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /not recorded \(tables created some other way/);
  });

  it("honours the DataSource's migrationsTableName with --migrations-table", async () => {
    const db = await emptyDatabase();
    await runMigrations(db.url, [createQueueBoxMigration()], 'app_migrations');
    const without = await queuebox(['migrate', '--url', withPassword(db.url)]);
    assert.equal(without.code, 1);
    assert.match(
      without.stderr,
      /not recorded in TypeORM's "migrations" table\. If your DataSource sets migrationsTableName, pass it: --migrations-table/,
    );
    const withTable = await queuebox(['migrate', '--url', withPassword(db.url), '--migrations-table', 'app_migrations']);
    assert.equal(withTable.code, 0, withTable.stderr);
    assert.match(withTable.stdout, /Applied migration QueueBoxOperations1764633600000/);
    const status = await queuebox(['status', '--url', withPassword(db.url), '--migrations-table', 'app_migrations', '--json']);
    assert.equal(JSON.parse(status.stdout).migration.applied, true);
  });

  it('sql prints the schema of either dialect, for the given tables, without a database', async () => {
    const postgres = await queuebox(['sql']);
    assert.equal(postgres.code, 0, postgres.stderr);
    assert.equal(
      `${postgres.stdout}`,
      SCHEMA_MIGRATIONS.map((migration) => renderSchemaSql('postgres', { migration })).join('\n'),
      'every migration in order: the schema, the operations indexes, the claims, the key collation (a comment on PostgreSQL), the claim functions...',
    );
    assert.match(postgres.stdout, /CREATE TABLE "queuebox_outbox"/);

    const mssql = await queuebox(['sql', '--dialect', 'mssql', '--tables', 'outbox=q.out,inbox=q.in']);
    assert.equal(mssql.code, 0, mssql.stderr);
    const tables = { outbox: 'q.out', inbox: 'q.in' };
    assert.equal(mssql.stdout, SCHEMA_MIGRATIONS.map((migration) => renderSchemaSql('mssql', { tables, migration })).join('\n'));
    assert.match(mssql.stdout, /CREATE TABLE \[q\]\.\[out\]/);
    assert.match(mssql.stdout, /\nGO\n/);
    assert.match(
      mssql.stdout,
      /ALTER TABLE \[q\]\.\[in\] ALTER COLUMN \[idempotency_key\] NVARCHAR\(255\) COLLATE Latin1_General_100_BIN2 NOT NULL;/,
    );

    const down = await queuebox(['sql', '--down']);
    assert.match(down.stdout, /DROP TABLE/);
  });

  it('fails with one clear line and a non-zero exit on a bad URL, never printing the password', async () => {
    const db = await emptyDatabase();
    const cases: { url: string; code: number; message: RegExp }[] = [
      { url: `postgres://postgres:${PASSWORD}@127.0.0.1:1/db`, code: 1, message: /connection refused by 127\.0\.0\.1:1/ },
      { url: `mysql://root:${PASSWORD}@127.0.0.1/db`, code: 2, message: /scheme "mysql:", which QueueBox does not know/ },
      {
        url: withPassword(db.url).replace(db.name, 'qb_no_such_database'),
        code: 1,
        message: /database "qb_no_such_database" does not exist/,
      },
      { url: withUser(withPassword(db.url), 'nobody_here'), code: 1, message: /authentication failed for user "nobody_here"/ },
      { url: `postgres://postgres:${PASSWORD}@127.0.0.1:99999/db`, code: 2, message: /not a valid URL/ },
      { url: `mssql://sa:${PASSWORD}@127.0.0.1:1/db`, code: 1, message: /connection refused by 127\.0\.0\.1:1/ },
      { url: `postgres://postgres@127.0.0.1:1/db?password=${PASSWORD}`, code: 1, message: /connection refused by 127\.0\.0\.1:1/ },
      { url: `postgres://postgres@127.0.0.1:1/db?sslpassword=${PASSWORD}`, code: 1, message: /connection refused by 127\.0\.0\.1:1/ },
    ];
    for (const { url, code, message } of cases) {
      for (const command of ['migrate', 'status']) {
        const run = await queuebox([command, '--url', url]);
        assert.equal(run.code, code, `${command} ${url}: ${run.stderr}`);
        assert.match(run.stderr, message);
        assert.equal(run.stderr.trim().split('\n').length, 1, `one line: ${run.stderr}`);
      }
    }
  });

  it('prints the URL with a password given as a URL parameter masked', async () => {
    const db = await emptyDatabase();
    // Beside the test server's own password in the URL, if it has one (embedded PostgreSQL's is
    // "postgres": the "(postgres)" type after the URL stays as it is). node-postgres takes the parameter.
    const url = `${withUser(db.url, CLI_ROLE)}?password=${PASSWORD}`;
    const run = await queuebox(['migrate', '--url', url]); // the helper fails on any printed password
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /Database: postgres:\/\/.*\?password=\*\*\* \(postgres\)/);
  });

  /** A migrated database with dead, pending and finished rows in both tables; returns their ids. */
  const seededDatabase = async () => {
    const db = await emptyDatabase();
    const url = withPassword(db.url);
    assert.equal((await queuebox(['migrate', '--url', url])).code, 0);
    const outbox = async (
      destination: string,
      state: string,
      lastError: string | null,
      diedAgo: string | null,
      key: string | null = null,
    ) =>
      (
        await db.query<{ id: string }>(
          `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, last_error, claimed_at)
           VALUES (gen_random_uuid(), $1, $2, '{}', $3, 5, $4, now() - $5::interval) RETURNING id::text AS id`,
          [destination, key, state, lastError, diedAgo],
        )
      )[0].id;
    const ids = {
      billing503: await outbox('billing', 'dead', 'HTTP 503 Service Unavailable\nfrom https://billing.internal', '2 hours', 'order-1'),
      billingTimeout: await outbox('billing', 'dead', 'Timeout after 10000 ms', '30 minutes', 'order-2'),
      shipping503: await outbox('shipping', 'dead', 'HTTP 503 from shipping', '10 minutes'),
      billingPending: await outbox('billing', 'pending', 'HTTP 503 (will retry)', null),
      billingSent: await outbox('billing', 'sent', null, '1 minute'),
    };
    const inbox = async (key: string, state: string, lastError: string | null) =>
      (
        await db.query<{ id: string }>(
          `INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload, state, attempts, last_error)
           VALUES ('orders', $1, 'agg-1', '{}', $2, 3, $3) RETURNING id::text AS id`,
          [key, state, lastError],
        )
      )[0].id;
    const inboxIds = { dead: await inbox('evt-1', 'dead', 'handler threw: boom'), pending: await inbox('evt-2', 'pending', null) };
    const states = async () =>
      Object.fromEntries(
        (
          await db.query<{ k: string; state: string; attempts: number }>(
            `SELECT 'o' || id AS k, state, attempts FROM queuebox_outbox UNION ALL SELECT 'i' || id, state, attempts FROM queuebox_inbox`,
          )
        ).map((r) => [r.k, `${r.state}/${r.attempts}`]),
      );
    const [{ hourAgo }] = await db.query<{ hourAgo: Date }>(`SELECT now() - interval '1 hour' AS "hourAgo"`);
    return { db, url, ids, inboxIds, states, hourAgo: hourAgo.toISOString() };
  };

  it('dead-letters list and count pick dead rows by name, error, time and id, a page at a time', async () => {
    const { url, ids, inboxIds, hourAgo } = await seededDatabase();
    const list = async (...args: string[]) => {
      const run = await queuebox(['dead-letters', 'list', '--url', url, '--json', ...args]);
      assert.equal(run.code, 0, run.stderr);
      const page = JSON.parse(run.stdout) as { rows: { id: string }[]; nextAfterId: string | null };
      return { ids: page.rows.map((r) => r.id), next: page.nextAfterId, page };
    };
    assert.deepEqual((await list('--component', 'outbox')).ids, [ids.billing503, ids.billingTimeout, ids.shipping503]);
    assert.deepEqual((await list('--component', 'outbox', '--name', 'billing')).ids, [ids.billing503, ids.billingTimeout]);
    assert.deepEqual((await list('--component', 'outbox', '--error', 'http 503')).ids, [ids.billing503, ids.shipping503]);
    assert.deepEqual((await list('--component', 'outbox', '--after', hourAgo)).ids, [ids.billingTimeout, ids.shipping503]);
    assert.deepEqual((await list('--component', 'outbox', '--before', hourAgo)).ids, [ids.billing503]);
    assert.deepEqual(
      (await list('--component', 'outbox', '--id', `${ids.shipping503},${ids.billingPending}`, '--id', ids.billing503)).ids,
      [ids.billing503, ids.shipping503],
    );
    const inbox = await list('--component', 'inbox');
    assert.deepEqual(inbox.ids, [inboxIds.dead]);
    assert.equal((inbox.page.rows[0] as unknown as { idempotencyKey: string }).idempotencyKey, 'evt-1');

    const first = await list('--component', 'outbox', '--limit', '2');
    assert.deepEqual(first, { ...first, ids: [ids.billing503, ids.billingTimeout], next: ids.billingTimeout });
    const second = await list('--component', 'outbox', '--limit', '2', '--after-id', first.next as string);
    assert.deepEqual([second.ids, second.next], [[ids.shipping503], null]);

    const text = await queuebox(['dead-letters', 'list', '--url', url, '--component', 'outbox', '--name', 'billing', '--limit', '1']);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /id\s+message id\s+destination\s+key\s+attempts\s+died at\n/);
    assert.match(
      text.stdout,
      new RegExp(
        `${ids.billing503}\\s+[0-9a-f-]{36}\\s+billing\\s+order-1\\s+5\\s+\\d{4}-\\d\\d-\\d\\dT[0-9:]{8}Z\\n    last error: HTTP 503 Service Unavailable from https://billing.internal\\n`,
      ),
    );
    assert.match(text.stdout, new RegExp(`add --after-id ${ids.billing503} for the next page`));
    const inboxText = await queuebox(['dead-letters', 'list', '--url', url, '--component', 'inbox']);
    assert.match(inboxText.stdout, /idempotency key\s+source\s+aggregate/);
    assert.match(inboxText.stdout, /evt-1\s+orders\s+agg-1\s+3 .*\n {4}last error: handler threw: boom\n/);
    assert.match(inboxText.stdout, /1 row\(s\); no more pages/);

    const count = await queuebox(['dead-letters', 'count', '--url', url, '--component', 'outbox', '--error', '503']);
    assert.equal(count.code, 0, count.stderr);
    assert.match(count.stdout, /^2 dead outbox row\(s\) match\.$/m);
    const countJson = await queuebox([
      'dead-letters',
      'count',
      '--url',
      url,
      '--component',
      'outbox',
      '--json',
      '--id',
      `${ids.billingPending},${ids.billingTimeout}`,
    ]);
    assert.deepEqual(JSON.parse(countJson.stdout), { component: 'outbox', count: 1 });

    // No sub-command: list; no --component: a page of each, outbox first.
    const bare = await queuebox(['dead-letters', '--url', url]);
    assert.equal(bare.code, 0, bare.stderr);
    assert.match(bare.stdout, new RegExp(`Dead outbox rows:[\\s\\S]*${ids.billing503}\\s[\\s\\S]*Dead inbox rows:[\\s\\S]*evt-1`));
    const bareJson = JSON.parse((await queuebox(['dead-letters', '--url', url, '--json', '--limit', '2'])).stdout) as Record<
      string,
      { rows: { id: string }[]; nextAfterId: string | null }
    >;
    assert.deepEqual(
      [bareJson.outbox.rows.map((r) => r.id), bareJson.outbox.nextAfterId, bareJson.inbox.rows.map((r) => r.id)],
      [[ids.billing503, ids.billingTimeout], ids.billingTimeout, [inboxIds.dead]],
    );
    const bareText = await queuebox(['dead-letters', '--url', url, '--limit', '1']);
    assert.match(bareText.stdout, new RegExp(`add --component outbox --after-id ${ids.billing503} for the next page`));
    const oneComponent = await queuebox(['dead-letters', '--url', url, '--component', 'inbox', '--json']);
    assert.deepEqual(
      (JSON.parse(oneComponent.stdout) as { rows: { id: string }[] }).rows.map((r) => r.id),
      [inboxIds.dead],
    );
  });

  it('dead-letters replay and discard change exactly the dead rows selected, and refuse an unfiltered run without --all', async () => {
    const { db, url, ids, inboxIds, states } = await seededDatabase();
    const before = await states();

    const unfiltered = await queuebox(['dead-letters', 'replay', '--url', url, '--component', 'outbox']);
    assert.equal(unfiltered.code, 2);
    assert.match(
      unfiltered.stderr,
      /replay without --id, --name, --error, --after or --before would change every dead outbox row: .*--all/,
    );
    assert.equal((await queuebox(['dead-letters', 'discard', '--url', url, '--component', 'inbox'])).code, 2);
    assert.deepEqual(await states(), before, 'an unfiltered run without --all changes nothing');

    const replay = await queuebox([
      'dead-letters',
      'replay',
      '--url',
      url,
      '--component',
      'outbox',
      '--name',
      'billing',
      '--error',
      'timeout',
    ]);
    assert.equal(replay.code, 0, replay.stderr);
    assert.match(replay.stdout, /Replayed 1 dead outbox row\(s\)/);
    assert.deepEqual(await states(), { ...before, [`o${ids.billingTimeout}`]: 'pending/0' });
    const [replayed] = await db.query<{ headers: Record<string, string>; last_error: string }>(
      'SELECT headers, last_error FROM queuebox_outbox WHERE id = $1',
      [ids.billingTimeout],
    );
    assert.equal(replayed.headers['X-QueueBox-Replay-Count'], '1');
    assert.equal(replayed.last_error, 'Timeout after 10000 ms');

    const discard = await queuebox([
      'dead-letters',
      'discard',
      '--url',
      url,
      '--component',
      'outbox',
      '--json',
      '--id',
      `${ids.shipping503},${ids.billingPending},${ids.billingSent}`,
    ]);
    assert.equal(discard.code, 0, discard.stderr);
    assert.deepEqual(JSON.parse(discard.stdout), { component: 'outbox', discarded: 1 });
    const afterDiscard = { ...before, [`o${ids.billingTimeout}`]: 'pending/0' };
    delete afterDiscard[`o${ids.shipping503}`];
    assert.deepEqual(await states(), afterDiscard, 'only the dead row among the ids is deleted');

    const all = await queuebox(['dead-letters', 'replay', '--url', url, '--component', 'outbox', '--all']);
    assert.equal(all.code, 0, all.stderr);
    assert.match(all.stdout, /Replayed 1 dead outbox row\(s\)/);
    const discardInbox = await queuebox(['dead-letters', 'discard', '--url', url, '--component', 'inbox', '--all']);
    assert.match(discardInbox.stdout, /Discarded 1 dead inbox row\(s\)/);
    const end = { ...afterDiscard, [`o${ids.billing503}`]: 'pending/0' };
    delete end[`i${inboxIds.dead}`];
    assert.deepEqual(await states(), end);
  });

  it('dead-letters answers bad arguments with exit 2 before touching the database', async () => {
    const { url, states } = await seededDatabase();
    const before = await states();
    const cases: { args: string[]; message: RegExp }[] = [
      { args: ['list', '--component', 'outbx'], message: /--component "outbx" must be outbox or inbox/ },
      { args: ['replay', '--name', 'billing'], message: /--component is required/ },
      { args: ['requeue', '--component', 'outbox'], message: /unknown sub-command "requeue"/ },
      {
        args: ['replay', '--component', 'outbox', '--id', '7', '--name', 'billing'],
        message: /--id picks rows by id: it does not combine/,
      },
      { args: ['discard', '--component', 'outbox', '--id', '7,x'], message: /--id "x" must be a row id/ },
      // Above the bigint maximum: a usage error here, not a database error (exit 1) from the statement.
      { args: ['discard', '--component', 'outbox', '--id', '9223372036854775808'], message: /--id "9223372036854775808" must be a row id/ },
      {
        args: ['list', '--component', 'outbox', '--after-id', '9999999999999999999'],
        message: /--after-id "9999999999999999999" must be a row id/,
      },
      { args: ['list', '--component', 'outbox', '--limit', '0'], message: /--limit "0" must be an integer from 1 to 1000/ },
      { args: ['list', '--component', 'outbox', '--after', 'yesterday'], message: /--after "yesterday" is not a time/ },
      { args: ['count', '--component', 'outbox', '--all'], message: /--all applies to replay and discard only/ },
      { args: ['replay', '--component', 'outbox', '--all', '--limit', '5'], message: /--limit applies to list only/ },
    ];
    for (const { args, message } of cases) {
      const run = await queuebox(['dead-letters', ...args, '--url', url]);
      assert.equal(run.code, 2, `${args.join(' ')}: ${run.stderr}`);
      assert.match(run.stderr, message);
      assert.equal(run.stderr.trim().split('\n').length, 1, `one line: ${run.stderr}`);
    }
    assert.deepEqual(await states(), before);
    const help = await queuebox(['dead-letters', '--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /Usage: queuebox dead-letters \[list\|count\|replay\|discard\|groups\]/);
  });

  it('blocked lists keys behind a failing head; skip-head dead-letters that head only, and only while it is the head', async () => {
    const db = await emptyDatabase();
    const url = withPassword(db.url);
    assert.equal((await queuebox(['migrate', '--url', url])).code, 0);
    // An instance that stopped heartbeating a minute ago: the failing head of order-9 had its last attempt there.
    const dead = '0d0d0d0d-0000-4000-8000-000000000001';
    await db.query(
      `INSERT INTO queuebox_instances (id, host, pid, data_source, version, dead_after_ms, heartbeat_at)
       VALUES ($1, 'gone-host', 4242, 'default', '0.1.0', 15000, clock_timestamp() - interval '1 minute')`,
      [dead],
    );
    const outbox = await db.query<{
      id: string;
    }>(
      `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, attempts, last_error, available_at, claimed_by)
      VALUES (gen_random_uuid(), 'billing', 'order-9', '{}', 2, 'HTTP 500 Internal Server Error', now() + interval '5 minutes', $1),
             (gen_random_uuid(), 'billing', 'order-9', '{}', 0, NULL, now(), NULL),
             (gen_random_uuid(), 'shipping', 'order-9', '{}', 0, NULL, now(), NULL),
             (gen_random_uuid(), 'billing', 'order-10', '{}', 0, NULL, now(), NULL)
      RETURNING id::text AS id`,
      [dead],
    );
    const [head, behind] = outbox.map((r) => r.id);
    const inbox = await db.query<{
      id: string;
    }>(`INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload, attempts, last_error)
      VALUES ('orders', 'e1', 'agg-2', '{}', 1, 'handler threw'), ('orders', 'e2', 'agg-2', '{}', 0, NULL)
      RETURNING id::text AS id`);
    const rows = async () =>
      db.query<{ id: string; state: string; last_error: string | null }>(
        `SELECT 'o' || id AS id, state, last_error FROM queuebox_outbox UNION ALL SELECT 'i' || id, state, last_error FROM queuebox_inbox ORDER BY 1`,
      );

    // Key order-11: its head is held by the instance that stopped heartbeating, one row waits behind it.
    const [held] = await db.query<{ id: string }>(
      `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, claim_token, claimed_at, lease_expires_at, claimed_by)
       VALUES (gen_random_uuid(), 'billing', 'order-11', '{}', 'processing', 1, gen_random_uuid(), clock_timestamp() - interval '70 seconds',
               clock_timestamp() + interval '4 minutes', $1),
              (gen_random_uuid(), 'billing', 'order-11', '{}', 'pending', 0, NULL, NULL, NULL, NULL)
       RETURNING id::text AS id`,
      [dead],
    );

    // Key order-12: its head is held by an instance silent for 45 s of its 60 s (it missed two heartbeats).
    const silent = '5113e700-0000-4000-8000-000000000002';
    await db.query(
      `INSERT INTO queuebox_instances (id, host, pid, data_source, version, dead_after_ms, heartbeat_at)
       VALUES ($1, 'slow-host', 4343, 'default', '0.1.0', 60000, clock_timestamp() - interval '45 seconds')`,
      [silent],
    );
    await db.query(
      `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, claim_token, claimed_at, lease_expires_at, claimed_by)
       VALUES (gen_random_uuid(), 'billing', 'order-12', '{}', 'processing', 1, gen_random_uuid(), clock_timestamp(),
               clock_timestamp() + interval '4 minutes', $1),
              (gen_random_uuid(), 'billing', 'order-12', '{}', 'pending', 0, NULL, NULL, NULL, NULL)`,
      [silent],
    );

    const text = await queuebox(['blocked', '--url', url, '--component', 'outbox']);
    assert.equal(text.code, 0, text.stderr);
    assert.match(
      text.stdout,
      /head id\s+destination\s+key\s+why\s+state\s+attempts\s+next attempt\s+held for\s+owner\s+waiting\s+last error/,
    );
    // Pending until its retry: held by nobody. Its last claimer is named as such, not as an owner, dead or alive.
    assert.match(
      text.stdout,
      new RegExp(
        `${head}\\s+billing\\s+order-9\\s+failing\\s+pending\\s+2\\s+\\S+Z\\s+none; last claimed by 0d0d0d0d\\s+2\\s+HTTP 500 Internal Server Error`,
      ),
    );
    assert.match(
      text.stdout,
      new RegExp(`${held.id}\\s+billing\\s+order-11\\s+held\\s+processing\\s+1\\s+\\S+Z\\s+1m 1\\ds\\s+0d0d0d0d \\(DEAD\\)\\s+1\\s*$`, 'm'),
    );
    assert.match(text.stdout, /order-12\s+held\s+processing\s+1\s+\S+Z\s+\d+\.\ds\s+5113e700 \(SILENT\)\s+1\s*$/m);
    // Only the held head counts: the pending one last claimed by the same dead instance does not.
    assert.match(text.stdout, /^1 of these heads are held by an instance that stopped heartbeating \(DEAD\)/m);
    assert.match(text.stdout, /^1 of these heads are held by an instance that missed two heartbeats \(SILENT\)/m);
    assert.doesNotMatch(text.stdout, /order-10/);
    const byKey = new Map(
      (JSON.parse((await queuebox(['blocked', '--url', url, '--component', 'outbox', '--json'])).stdout) as Record<string, unknown>[]).map(
        (r) => [r.key, r],
      ),
    );
    const ownership = (key: string) => {
      const r = byKey.get(key);
      return [r?.reason, r?.owner, r?.ownerState, r?.lastClaimedBy, r?.heldSeconds === null];
    };
    assert.deepEqual(ownership('order-9'), ['failing', null, null, dead, true]);
    assert.deepEqual(ownership('order-11'), ['held', dead, 'dead', dead, false]);
    assert.deepEqual(ownership('order-12'), ['held', silent, 'silent', silent, false]);
    assert.ok(Number(byKey.get('order-11')?.heldSeconds) >= 70, String(byKey.get('order-11')?.heldSeconds));
    // Without --component: both components, the outbox's table first, then the inbox's.
    const both = await queuebox(['blocked', '--url', url]);
    assert.equal(both.code, 0, both.stderr);
    assert.match(both.stdout, /Blocked outbox keys:[\s\S]*order-9[\s\S]*Blocked inbox keys:[\s\S]*agg-2/);
    const bothJson = JSON.parse((await queuebox(['blocked', '--url', url, '--json'])).stdout) as Record<string, unknown>[];
    assert.deepEqual(
      bothJson.filter((r) => r.key === 'order-9' || r.key === 'agg-2').map((r) => [r.component, r.key]),
      [
        ['outbox', 'order-9'],
        ['inbox', 'agg-2'],
      ],
    );
    await db.query(`DELETE FROM queuebox_outbox WHERE "key" IN ('order-11', 'order-12')`);
    const json = await queuebox(['blocked', '--url', url, '--component', 'inbox', '--json']);
    assert.deepEqual(
      (JSON.parse(json.stdout) as Record<string, unknown>[]).map((r) => [r.headId, r.name, r.key, r.waiting]),
      [[inbox[0].id, 'orders', 'agg-2', 1]],
    );

    const before = await rows();
    const notHead = await queuebox(['skip-head', '--url', url, '--component', 'outbox', '--key', 'order-9', '--head-id', behind]);
    assert.equal(notHead.code, 1);
    assert.match(notHead.stderr, new RegExp(`nothing skipped: key "order-9" has no head row with id ${behind}`));
    assert.deepEqual(await rows(), before);

    const skip = await queuebox([
      'skip-head',
      '--url',
      url,
      '--component',
      'outbox',
      '--key',
      'order-9',
      '--head-id',
      head,
      '--reason',
      'bad payload',
    ]);
    assert.equal(skip.code, 0, skip.stderr);
    assert.match(skip.stdout, new RegExp(`Skipped row ${head}, the head of key "order-9"`));
    const expected = before.map((r) => (r.id === `o${head}` ? { ...r, state: 'dead', last_error: 'skipped by admin: bad payload' } : r));
    assert.deepEqual(await rows(), expected);
    assert.match((await queuebox(['blocked', '--url', url, '--component', 'outbox'])).stdout, /No blocked outbox keys\./);

    const noSource = await queuebox(['skip-head', '--url', url, '--component', 'inbox', '--key', 'agg-2']);
    assert.equal(noSource.code, 2);
    assert.match(noSource.stderr, /--name is required for inbox/);
    const outboxName = await queuebox(['skip-head', '--url', url, '--component', 'outbox', '--key', 'order-10', '--name', 'billing']);
    assert.equal(outboxName.code, 2);
    const inboxSkip = await queuebox(['skip-head', '--url', url, '--component', 'inbox', '--name', 'orders', '--key', 'agg-2', '--json']);
    assert.equal(inboxSkip.code, 0, inboxSkip.stderr);
    assert.deepEqual(JSON.parse(inboxSkip.stdout), { component: 'inbox', skippedId: inbox[0].id });
    assert.deepEqual(
      await rows(),
      expected.map((r) => (r.id === `i${inbox[0].id}` ? { ...r, state: 'dead', last_error: 'skipped by admin: queuebox skip-head' } : r)),
    );
  });

  it('answers --help, --version and usage errors with the documented exit codes', async () => {
    const help = await queuebox(['--help']);
    assert.equal(help.code, 0);
    for (const command of ['migrate', 'status', 'sql', 'dead-letters', 'blocked', 'skip-head'])
      assert.match(help.stdout, new RegExp(`\\n  ${command} `));
    assert.match(help.stdout, /Exit codes: 0 success; 1 failure/);
    assert.match(help.stdout, /npx --no-install queuebox <command>/);
    const migrateHelp = await queuebox(['migrate', '--help']);
    assert.equal(migrateHelp.code, 0);
    assert.match(migrateHelp.stdout, /Usage: queuebox migrate/);
    const version = await queuebox(['--version']);
    assert.equal(version.stdout.trim(), JSON.parse(readFileSync(join(__dirname, '..', '..', '..', 'package.json'), 'utf8')).version);

    assert.equal((await queuebox([])).code, 2);
    const unknown = await queuebox(['frobnicate']);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown command "frobnicate"/);
    const badOption = await queuebox(['status', `--ulr=postgres://u:${PASSWORD}@h/db`]);
    assert.equal(badOption.code, 2);
    assert.match(badOption.stderr, /Unknown option '--ulr'/);
    const noUrl = await queuebox(['status']);
    assert.equal(noUrl.code, 2);
    assert.match(noUrl.stderr, /no database URL: pass --url, or set QUEUEBOX_DATABASE_URL or DATABASE_URL/);
    const badTables = await queuebox(['sql', '--tables', 'outbox=no-dashes']);
    assert.equal(badTables.code, 2);
    assert.match(badTables.stderr, /--tables: .*"tables.outbox"/);
  });
});
