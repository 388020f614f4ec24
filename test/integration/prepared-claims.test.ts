import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, it } from 'node:test';
import { Logger } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { createDialect } from '../../lib/core/create-dialect';
import type { Dialect } from '../../lib/dialects/dialect';
import { resolveOptions } from '../../lib/options/options.resolver';
import { RecordingLogger } from '../support/app';
import { describeWithDatabase } from '../support/database';

// A claim function's call is a prepared statement of its connection: parsed on the connection's
// first claim, bound from then on. A pooler in transaction mode hands each transaction another
// server session, where the statement is missing (SQLSTATE 26000) or another client prepared it
// (42P05): the claim goes again unprepared, and so does every later one, with one warning. Here
// one connection per DataSource, so the test's own statements run on the session that claims.

const tables = resolveOptions({ workers: false }).tables;

describeWithDatabase(
  'claim function calls and repeated statements as prepared statements',
  { truncate: ['queuebox_outbox', 'queuebox_inbox'] },
  (db) => {
    const opened: DataSource[] = [];
    let logger: RecordingLogger;

    async function session(): Promise<{ dataSource: DataSource; dialect: Dialect }> {
      const dataSource = new DataSource({ type: 'postgres', url: db.url, logging: false, extra: { max: 1 } });
      opened.push(await dataSource.initialize());
      return { dataSource, dialect: createDialect(dataSource, tables) };
    }

    const enqueue = (count: number) =>
      db.query(
        `INSERT INTO queuebox_outbox (message_id, destination, payload) SELECT gen_random_uuid(), 'd', '{}' FROM generate_series(1, $1)`,
        [count],
      );
    const claimOutbox = async (dialect: Dialect) => (await dialect.outboxClaimBatch({ limit: 10, leaseMs: 60_000 })).length;
    const preparedClaims = async (dataSource: DataSource) =>
      (
        await dataSource.query<{ name: string; statement: string }[]>(
          `SELECT name, statement FROM pg_prepared_statements WHERE name LIKE 'queuebox\\_%' ORDER BY name`,
        )
      ).map((row) => row.name);

    before(() => {
      logger = new RecordingLogger();
      Logger.overrideLogger(logger);
    });
    beforeEach(() => {
      logger.lines.length = 0;
    });
    afterEach(() => Promise.all(opened.splice(0).map((dataSource) => dataSource.destroy())));
    after(() => Logger.overrideLogger(['log', 'error', 'warn', 'debug', 'verbose', 'fatal']));

    it('each claim function is prepared once per connection and claims as before', async () => {
      const { dataSource, dialect } = await session();
      await enqueue(2);
      assert.equal(await claimOutbox(dialect), 2);
      await enqueue(1);
      assert.equal(await claimOutbox(dialect), 1, 'claimed again through the prepared statement');
      await dialect.inboxRelayClaimBatch({ sources: ['relayed'], limit: 10, leaseMs: 60_000 });
      await dialect.inboxPullClaimBatch({ source: 'pulled', limit: 10, leaseMs: 60_000 });
      const names = await preparedClaims(dataSource);
      assert.deepEqual(
        names.map((name) => name.replace(/_[0-9a-f]{12}$/, '')),
        ['queuebox_outbox_claim', 'queuebox_pull_claim', 'queuebox_relay_claim'],
      );
      assert.deepEqual(
        logger.lines.filter((line) => line.level === 'warn'),
        [],
      );
    });

    it('a session without the statement (26000, as a pooler hands out): the claim goes again unprepared, and every later one, with one warning', async () => {
      const { dataSource, dialect } = await session();
      await enqueue(1);
      assert.equal(await claimOutbox(dialect), 1);
      await dataSource.query('DEALLOCATE ALL');
      await enqueue(1);
      assert.equal(await claimOutbox(dialect), 1, 'claimed by the unprepared call');
      await enqueue(1);
      assert.equal(await claimOutbox(dialect), 1);
      const warnings = logger.lines.filter((line) => line.level === 'warn');
      assert.equal(warnings.length, 1, JSON.stringify(warnings));
      assert.match(warnings[0].message, /queuebox_outbox_claim_[0-9a-f]{12}.*SQLSTATE 26000.*sent unprepared from now on/);
      assert.deepEqual(await preparedClaims(dataSource), [], 'nothing prepared again');
    });

    it('a session where another client prepared the name (42P05): the claim goes again unprepared, with one warning', async () => {
      const first = await session();
      await claimOutbox(first.dialect);
      const [name] = await preparedClaims(first.dataSource);
      const [{ statement }] = await first.dataSource.query<{ statement: string }[]>(
        'SELECT statement FROM pg_prepared_statements WHERE name = $1',
        [name],
      );
      logger.lines.length = 0;
      const { dataSource, dialect } = await session();
      await dataSource.query(`PREPARE ${name} (integer, bigint, uuid) AS ${statement}`);
      await enqueue(1);
      assert.equal(await claimOutbox(dialect), 1, 'claimed by the unprepared call');
      const warnings = logger.lines.filter((line) => line.level === 'warn');
      assert.equal(warnings.length, 1, JSON.stringify(warnings));
      assert.match(warnings[0].message, /SQLSTATE 42P05/);
    });

    // The statements the workers repeat at every batch (completions, the followers' read and
    // completion) go prepared too: from the pool, and inside QueueBox's transactions.
    const claimed = async (dialect: Dialect, count: number) => {
      await enqueue(count);
      return (await dialect.outboxClaimBatch({ limit: count, leaseMs: 60_000 })).map((claim) => ({ id: claim.id, token: claim.token }));
    };
    const sentCount = async () =>
      (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM queuebox_outbox WHERE state = 'sent'`))[0].n;
    const repeatedPrepared = async (dataSource: DataSource) =>
      (
        await dataSource.query<{ statement: string }[]>(
          `SELECT statement FROM pg_prepared_statements WHERE name ~ '^queuebox_[0-9a-f]{12}$' ORDER BY prepare_time`,
        )
      ).map((row) => row.statement);

    it('a batch completion is prepared once per connection, from the pool and inside a transaction, and completes as before', async () => {
      const { dataSource, dialect } = await session();
      const first = await claimed(dialect, 3);
      const completed = await dialect.leaseCompleteBatch({ table: 'outbox', claims: first });
      assert.ok(first.every((claim) => completed.has(claim.id)));
      const second = await claimed(dialect, 2);
      await dialect.transaction((manager) => dialect.leaseCompleteBatch({ table: 'outbox', claims: second, manager }));
      assert.equal(await sentCount(), 5);
      const statements = await repeatedPrepared(dataSource);
      assert.equal(statements.length, 1, 'one statement, prepared once and bound the second time');
      assert.match(statements[0], /UPDATE "queuebox_outbox"/);
      assert.deepEqual(
        logger.lines.filter((line) => line.level === 'warn'),
        [],
      );
    });

    it('a transaction whose prepared completion the session lost (26000) fails whole; the next one goes unprepared, with one warning', async () => {
      const { dataSource, dialect } = await session();
      await dialect.leaseCompleteBatch({ table: 'outbox', claims: await claimed(dialect, 1) });
      const lostIn = await claimed(dialect, 1);
      await dataSource.query('DEALLOCATE ALL');
      await assert.rejects(
        dialect.transaction(async (manager) => {
          await manager.query(`UPDATE queuebox_outbox SET headers = '{"written":"in the transaction"}' WHERE id = $1`, [lostIn[0].id]);
          await dialect.leaseCompleteBatch({ table: 'outbox', claims: lostIn, manager });
        }),
        (error: { code?: string }) => error.code === '26000',
      );
      const [row] = await db.query<{ state: string; headers: unknown }[]>('SELECT state, headers FROM queuebox_outbox WHERE id = $1', [
        lostIn[0].id,
      ]);
      assert.deepEqual(row, { state: 'processing', headers: {} }, 'the whole transaction rolled back');
      await dialect.transaction((manager) => dialect.leaseCompleteBatch({ table: 'outbox', claims: lostIn, manager }));
      assert.equal(await sentCount(), 2);
      const warnings = logger.lines.filter((line) => line.level === 'warn');
      assert.equal(warnings.length, 1, JSON.stringify(warnings));
      assert.match(warnings[0].message, /queuebox_[0-9a-f]{12}.*SQLSTATE 26000.*unprepared from now on.*transaction it ran in failed/);
      assert.deepEqual(await repeatedPrepared(dataSource), [], 'nothing prepared again');
    });
  },
);
