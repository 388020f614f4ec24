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

describeWithDatabase('claim function calls as prepared statements', { truncate: ['queuebox_outbox', 'queuebox_inbox'] }, (db) => {
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
});
