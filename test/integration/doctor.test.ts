import assert from 'node:assert/strict';
import { after, before, it, mock } from 'node:test';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { createDialect } from '../../lib/core/create-dialect';
import type { Dialect } from '../../lib/dialects/dialect';
import { DEFAULT_MIGRATION_NAMES } from '../../lib/dialects/schema-migrations';
import { QueueBoxEvents } from '../../lib/events/queuebox.events';
import { type DatabaseWarning, type DoctorReport, examineDatabase } from '../../lib/health/database-doctor';
import { createQueueBoxMigrations } from '../../lib/migrations/queuebox.migration';
import { resolveOptions } from '../../lib/options/options.resolver';
import type { DoctorOptions } from '../../lib/types/options';
import { claimsOver } from '../support/claims';
import { describeWithDatabase, eventually } from '../support/database';

// Each database warning of `queuebox doctor` provoked for real on PostgreSQL, then repaired with
// the statement the warning names, after which it is gone: autovacuum off, dead rows and a held
// xmin horizon, an invalid and a missing index, migrations behind and ahead, a lock a claim waits
// for, index bloat, clock skew. (LISTEN, health and metrics: doctor-app.test.ts.)

describeWithDatabase(
  'queuebox doctor: each database warning, provoked and repaired',
  { truncate: ['queuebox_outbox', 'queuebox_inbox'] },
  (db) => {
    let dataSource: DataSource;
    let dialect: Dialect;
    const clients: Client[] = [];

    before(async () => {
      dataSource = await new DataSource({
        type: 'postgres',
        url: db.url,
        migrations: createQueueBoxMigrations(),
        logging: false,
      }).initialize();
      dialect = createDialect(dataSource, resolveOptions({ workers: false }).tables);
    });
    after(async () => {
      for (const client of clients) await client.end().catch(() => undefined);
      await dataSource?.destroy();
    });

    /** A connection of its own (another session), as an operator's psql or another app would hold. */
    const session = async () => {
      const client = new Client({ connectionString: db.url });
      client.on('error', () => undefined); // a terminated session reports here
      await client.connect();
      clients.push(client);
      const [{ pid }] = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows;
      return { client, pid: String(pid) };
    };
    const examine = (doctor: DoctorOptions = {}) =>
      examineDatabase({ dialect, dataSource, options: resolveOptions({ workers: false, doctor }) });
    const found = (report: DoctorReport, code: string, subject?: string): DatabaseWarning[] =>
      report.warnings.filter((w) => w.code === code && (subject === undefined || w.subject === subject));
    const enqueue = (count: number, destination = 'billing') =>
      db.query(
        `INSERT INTO queuebox_outbox (message_id, destination, payload)
       SELECT gen_random_uuid(), $1, '{}' FROM generate_series(1, $2)`,
        [destination, count],
      );
    /** Runs a warning's repair statement as an operator would (psql: one simple-protocol query). */
    const repair = async (warning: DatabaseWarning) => {
      assert.ok(warning.repair, `${warning.code} names a repair`);
      const { client } = await session();
      await client.query(warning.repair);
    };

    it('autovacuum off for a table (ALTER TABLE ... SET (autovacuum_enabled = false)): named with its RESET, gone once reset', async () => {
      await db.query('ALTER TABLE queuebox_outbox SET (autovacuum_enabled = false)');
      const [warning] = found(await examine(), 'autovacuum_off', 'queuebox_outbox');
      assert.deepEqual(
        [warning?.severity, warning?.fatal, warning?.repair],
        ['warning', false, 'ALTER TABLE "queuebox_outbox" RESET (autovacuum_enabled)'],
      );
      assert.match(warning.message, /Autovacuum is off for queuebox_outbox/);
      await repair(warning);
      assert.deepEqual(found(await examine(), 'autovacuum_off', 'queuebox_outbox'), []);
    });

    it('an open transaction on another connection holds the xmin horizon while rows are updated: it blocks claims (dead rows they skip); ended, and the table vacuumed, both warnings go', async () => {
      const holder = await session();
      await holder.client.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await holder.client.query('SELECT count(*) FROM queuebox_outbox'); // takes the snapshot: its xmin holds the horizon
      await enqueue(200);
      await db.query(`UPDATE queuebox_outbox SET state = 'sent', sent_at = now()`);
      const limits = { xminHorizonMs: 0, minDeadRows: 1, deadRowsPercent: 1 };
      let report = await examine(limits);
      await eventually(async () => {
        report = await examine(limits);
        return (
          found(report, 'dead_rows', 'queuebox_outbox').length === 1 &&
          /blocks claims: the \d+ dead rows/.test(found(report, 'xmin_horizon', `session ${holder.pid}`)[0]?.message ?? '')
        );
      }, 'the statistics to count the dead rows');
      const [held] = found(report, 'xmin_horizon', `session ${holder.pid}`);
      assert.match(held.message, /A session \(\d+, .*idle in transaction.*\) holds back the cleanup of dead rows for \d/);
      assert.equal(held.repair, `SELECT pg_terminate_backend(${holder.pid})`);
      const [dead] = found(report, 'dead_rows', 'queuebox_outbox');
      assert.equal(dead.repair, 'VACUUM (VERBOSE, ANALYZE) "queuebox_outbox"');
      // While the horizon is held, the vacuum cannot remove them.
      await repair(dead);
      assert.equal(found(await examine(limits), 'dead_rows', 'queuebox_outbox').length, 1);

      await repair(held);
      await eventually(
        async () => found(await examine(limits), 'xmin_horizon', `session ${holder.pid}`).length === 0,
        'the session to end',
      );
      await repair(dead);
      // The statistics follow the vacuum at once from PostgreSQL 15 on; PostgreSQL 14's collector sends them a moment later.
      await eventually(async () => found(await examine(limits), 'dead_rows', 'queuebox_outbox').length === 0, 'the vacuum to be counted');
    });

    it('an invalid index (a unique index built concurrently that failed) is dropped by its repair; a missing QueueBox index is made again by its migration statement', async () => {
      await enqueue(2, 'same');
      await assert.rejects(
        db.query('CREATE UNIQUE INDEX CONCURRENTLY queuebox_outbox_destination_uq ON queuebox_outbox (destination)'),
        /could not create unique index/,
      );
      const [invalid] = found(await examine(), 'index_invalid', 'queuebox_outbox_destination_uq');
      assert.deepEqual([invalid?.severity, invalid?.repair], ['error', 'DROP INDEX CONCURRENTLY public.queuebox_outbox_destination_uq']);
      await repair(invalid);
      assert.deepEqual(found(await examine(), 'index_invalid'), []);

      await db.query('DROP INDEX queuebox_outbox_key_in_flight_idx');
      const [missing] = found(await examine(), 'index_missing', 'queuebox_outbox_key_in_flight_idx');
      assert.equal(missing?.severity, 'error');
      assert.equal(
        missing.repair,
        `CREATE UNIQUE INDEX "queuebox_outbox_key_in_flight_idx" ON "queuebox_outbox" ("key") WHERE state = 'processing' AND "key" IS NOT NULL`,
      );
      await repair(missing);
      assert.deepEqual(found(await examine(), 'index_missing'), []);
    });

    it('migrations behind (the last four reverted): a required one is fatal, an optional one a warning, both naming the migrate command; migrations ahead names the newer version; all go once the schema matches', async () => {
      await dataSource.undoLastMigration(); // 014, optional: claims are correct without it
      await dataSource.undoLastMigration(); // 013, optional: claims are sent as statements until it runs
      await dataSource.undoLastMigration(); // 012, optional: the same
      await dataSource.undoLastMigration(); // 011, required
      const [required, optional, optionalToo, optionalThree] = found(await examine(), 'migrations_behind');
      assert.deepEqual(
        [required?.severity, required?.fatal, required?.subject, required?.repair],
        ['error', true, DEFAULT_MIGRATION_NAMES.attempts, 'npx --no-install queuebox migrate'],
      );
      assert.deepEqual(
        [optional?.severity, optional?.fatal, optional?.subject, optional?.repair],
        ['warning', false, DEFAULT_MIGRATION_NAMES.unkeyedClaims, 'npx --no-install queuebox migrate'],
      );
      assert.deepEqual(
        [optionalToo?.severity, optionalToo?.fatal, optionalToo?.subject],
        ['warning', false, DEFAULT_MIGRATION_NAMES.keyedClaims],
      );
      assert.deepEqual(
        [optionalThree?.severity, optionalThree?.fatal, optionalThree?.subject],
        ['warning', false, DEFAULT_MIGRATION_NAMES.claimPlans],
      );
      await dataSource.runMigrations(); // what `queuebox migrate` runs
      assert.deepEqual(found(await examine(), 'migrations_behind'), []);

      await db.query(`INSERT INTO migrations ("timestamp", name) VALUES (1899999999999, 'QueueBoxArchive1899999999999')`);
      const [ahead] = found(await examine(), 'migrations_ahead');
      assert.deepEqual([ahead?.severity, ahead?.fatal, ahead?.subject], ['warning', false, 'QueueBoxArchive1899999999999']);
      await db.query(`DELETE FROM migrations WHERE name = 'QueueBoxArchive1899999999999'`);
      assert.deepEqual(found(await examine(), 'migrations_ahead'), []);
    });

    it('a lock held on the table by another connection while a claim waits: the waiting session and its blocker, ended by the repair, and the claim goes on', async () => {
      await enqueue(3);
      const locker = await session();
      await locker.client.query('BEGIN');
      await locker.client.query('LOCK TABLE queuebox_outbox IN ACCESS EXCLUSIVE MODE');
      const claim = claimsOver(dialect, new QueueBoxEvents()).outbox.claim({ limit: 1, leaseMs: 60_000 });
      let report = await examine({ lockWaitMs: 0 });
      await eventually(async () => {
        report = await examine({ lockWaitMs: 0 });
        return found(report, 'lock_wait').length > 0;
      }, 'the claim to wait for the lock');
      const [wait] = found(report, 'lock_wait');
      assert.match(
        wait.message,
        new RegExp(`waits [\\d.]+ s for a \\w+ lock on queuebox_outbox, held by .*\\(pid ${locker.pid}, idle in transaction\\)`),
      );
      assert.equal(wait.repair, `SELECT pg_terminate_backend(${locker.pid})`);
      // Under the threshold (default 5 s), no warning.
      assert.deepEqual(found(await examine({ lockWaitMs: 60_000 }), 'lock_wait'), []);
      await repair(wait);
      assert.equal((await claim).length, 1);
      assert.deepEqual(found(await examine({ lockWaitMs: 0 }), 'lock_wait'), []);
    });

    it('index bloat: indexes left with empty pages by finished rows, rebuilt by their REINDEX INDEX CONCURRENTLY', async () => {
      await enqueue(3000);
      await db.query('VACUUM queuebox_outbox'); // the catalog's page counts follow
      await db.query('DELETE FROM queuebox_outbox');
      await db.query('VACUUM queuebox_outbox');
      const limits = { minIndexBytes: 5 * 8192, indexBytesPerRow: 8192 };
      const bloatedNow = async () => found(await examine(limits), 'index_bloat').filter((w) => w.subject?.startsWith('queuebox_outbox'));
      // The live row count comes from the statistics: at once from PostgreSQL 15 on, a moment later on 14.
      let bloated = await bloatedNow();
      await eventually(async () => {
        bloated = await bloatedNow();
        return bloated.some((w) => w.subject === 'queuebox_outbox_message_id_key');
      }, 'the statistics to count the deleted rows');
      assert.ok(
        bloated.some((w) => w.subject === 'queuebox_outbox_message_id_key'),
        JSON.stringify(bloated.map((w) => w.subject)),
      );
      for (const warning of bloated) {
        assert.match(warning.repair ?? '', /^REINDEX INDEX CONCURRENTLY public\.queuebox_outbox_\w+$/);
        await repair(warning);
      }
      assert.deepEqual(
        found(await examine(limits), 'index_bloat').filter((w) => w.subject?.startsWith('queuebox_outbox')),
        [],
      );
    });

    it("clock skew: this host's clock a minute ahead of the database's warns; in step, it does not", async () => {
      assert.deepEqual(found(await examine(), 'clock_skew'), []);
      mock.timers.enable({ apis: ['Date'], now: Date.now() + 60_000 });
      let report: DoctorReport;
      try {
        report = await examine();
      } finally {
        mock.timers.reset();
      }
      const [skew] = found(report, 'clock_skew');
      assert.match(skew?.message ?? '', /This host's clock is (59|60)\d{3} ms ahead of the database's/);
      assert.equal(skew.repair, null);
      assert.deepEqual(found(await examine(), 'clock_skew'), []);
    });
  },
);
