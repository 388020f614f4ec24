import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, it } from 'node:test';
import { DataSource } from 'typeorm';
import { claimFunctionsLookupSql } from '../../lib/dialects/postgres/checks.sql';
import { claimFunctions } from '../../lib/dialects/postgres/claim-functions.sql';
import { expectedIndexes } from '../../lib/dialects/postgres/doctor.sql';
import { SCHEMA_MIGRATIONS } from '../../lib/dialects/schema-migrations';
import { createQueueBoxMigrations, createQueueBoxPartitionedLayoutMigration } from '../../lib/migrations/queuebox.migration';
import { resolveTables } from '../../lib/options/options.resolver';
import { runMigrations, type TestDatabase, testDatabases } from '../support/database';

// Issue 37's layout migration (docs/partitioning.md): the outbox and inbox, empty, made again
// partitioned by id range after the numbered migrations, and plain again by its down.

const tables = resolveTables(undefined);
const PLAIN_ONLY_UNIQUE = ['queuebox_outbox_key_in_flight_idx', 'queuebox_inbox_aggregate_in_flight_idx'];

describe('the partitioned layout migration on PostgreSQL', () => {
  const newDatabase = testDatabases();
  const plainDatabase = () => newDatabase({ layout: 'plain' });
  const layoutMigration = () => [...createQueueBoxMigrations(), createQueueBoxPartitionedLayoutMigration()];

  const relkinds = (db: TestDatabase) =>
    db.query<{ relname: string; relkind: string }>(
      "SELECT relname, relkind::text FROM pg_class WHERE relname IN ('queuebox_outbox', 'queuebox_inbox') ORDER BY relname",
    );
  const indexNames = async (db: TestDatabase, table: string) =>
    (await db.query<{ indexname: string }>('SELECT indexname FROM pg_indexes WHERE tablename = $1', [table])).map((r) => r.indexname);
  const claimFunctionsCurrent = async (db: TestDatabase) => {
    const fns = Object.values(claimFunctions(tables));
    const [row] = await db.query<{ present: number; current: number }>(claimFunctionsLookupSql(), [
      fns.map((fn) => fn.signature),
      fns.map((fn) => fn.body),
    ]);
    return row;
  };

  it('makes the empty tables partitioned, with their indexes, side tables, bookkeeping, first partitions and claim functions', async () => {
    const db = await plainDatabase();
    await runMigrations(db.url, layoutMigration());
    assert.deepEqual(await relkinds(db), [
      { relname: 'queuebox_inbox', relkind: 'p' },
      { relname: 'queuebox_outbox', relkind: 'p' },
    ]);
    for (const kind of ['outbox', 'inbox'] as const) {
      const table = `queuebox_${kind}`;
      const expected = expectedIndexes(tables, SCHEMA_MIGRATIONS)
        .filter((index) => index.table === table && !PLAIN_ONLY_UNIQUE.includes(index.name))
        .map((index) => index.name);
      const present = await indexNames(db, table);
      assert.deepEqual(
        expected.filter((name) => !present.includes(name)),
        [],
        `${table} holds every index of the numbered migrations but the unique ones without id`,
      );
      assert.ok(present.includes(`${table}_pkey`));
      const partitions = await db.query<{ name: string; from_id: string; to_id: string }>(
        `SELECT name, from_id::text, to_id::text FROM ${table}_partitions ORDER BY from_id`,
      );
      assert.deepEqual(partitions, [
        { name: `${table}_p1`, from_id: '1', to_id: '1000001' },
        { name: `${table}_p2`, from_id: '1000001', to_id: '2000001' },
      ]);
      const local = await db.query<{ indexdef: string }>(
        "SELECT indexdef FROM pg_indexes WHERE tablename = $1 AND indexdef LIKE 'CREATE UNIQUE%processing%'",
        [`${table}_p1`],
      );
      assert.equal(local.length, 1, `${table}_p1 holds its own unique index of keys in flight`);
    }
    assert.deepEqual(await claimFunctionsCurrent(db), { present: 3, current: 3 }, 'the claim functions are back, current');

    // The identity goes on through the parent, and a message id is unique across partitions.
    const id = randomUUID();
    await db.query('INSERT INTO queuebox_outbox_message_ids (message_id, row_id) VALUES ($1, 1000001)', [id]);
    await assert.rejects(db.query('INSERT INTO queuebox_outbox_message_ids (message_id, row_id) VALUES ($1, 1)', [id]), {
      constraint: 'queuebox_outbox_message_id_key',
    });
  });

  it('refuses tables that hold a row, and changes nothing', async () => {
    const db = await plainDatabase();
    await db.query("INSERT INTO queuebox_inbox (source, idempotency_key, payload) VALUES ('s', 'k', '{}')");
    await assert.rejects(runMigrations(db.url, layoutMigration()), /made from empty tables.*holds a row: nothing was changed/);
    assert.deepEqual(await relkinds(db), [
      { relname: 'queuebox_inbox', relkind: 'r' },
      { relname: 'queuebox_outbox', relkind: 'r' },
    ]);
    assert.equal((await db.query('SELECT 1 FROM queuebox_inbox')).length, 1);
  });

  it('down makes the tables plain again, with the unique constraints and every index of the numbered migrations', async () => {
    const db = await plainDatabase();
    const before = { outbox: (await indexNames(db, 'queuebox_outbox')).sort(), inbox: (await indexNames(db, 'queuebox_inbox')).sort() };
    await runMigrations(db.url, layoutMigration());
    const dataSource = new DataSource({ type: 'postgres', url: db.url, migrations: layoutMigration(), logging: false });
    await dataSource.initialize();
    try {
      await dataSource.undoLastMigration();
    } finally {
      await dataSource.destroy();
    }
    assert.deepEqual(await relkinds(db), [
      { relname: 'queuebox_inbox', relkind: 'r' },
      { relname: 'queuebox_outbox', relkind: 'r' },
    ]);
    assert.deepEqual((await indexNames(db, 'queuebox_outbox')).sort(), before.outbox);
    assert.deepEqual((await indexNames(db, 'queuebox_inbox')).sort(), before.inbox);
    const gone = await db.query(
      "SELECT to_regclass('queuebox_outbox_message_ids') AS ids, to_regclass('queuebox_inbox_partitions') AS partitions",
    );
    assert.deepEqual(gone, [{ ids: null, partitions: null }]);
    assert.deepEqual(await claimFunctionsCurrent(db), { present: 3, current: 3 });
    await db.query("INSERT INTO queuebox_inbox (source, idempotency_key, payload) VALUES ('s', 'k', '{}')");
    await assert.rejects(db.query("INSERT INTO queuebox_inbox (source, idempotency_key, payload) VALUES ('s', 'k', '{}')"), {
      constraint: 'queuebox_inbox_source_idempotency_key_key',
    });
  });
});
