import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { PartitionKeeper } from '../../lib/admin/partition-keeper.service';
import { RetentionService } from '../../lib/admin/retention.service';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { createTestApp, type TestApp } from '../support/app';
import { eventually, type TestDatabase, type TestLayout, testDatabases } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

// The partitioned layout run by the module (issue 37, docs/partitioning.md): PartitionKeeper keeps
// partitions ahead of the ids in use in every process, and RetentionService drops whole partitions
// instead of deleting rows.

describe('the partitioned layout kept by the module on PostgreSQL', () => {
  // The apps close before their databases are dropped: hooks run in the order they were registered.
  const apps: TestApp[] = [];
  after(() => Promise.all(apps.map((t) => t.app.close())));
  const newDatabase = testDatabases();
  const database = (layout: TestLayout) => newDatabase({ layout });
  const app = async (db: TestDatabase) => {
    const t = await createTestApp(db.url, { workers: false, outbox: { publisher: new RecordingPublisher() } });
    apps.push(t);
    return t;
  };
  const partitions = (db: TestDatabase, table: string) =>
    db.query<{ name: string; from_id: string; to_id: string; settled: boolean }>(
      `SELECT name, from_id::text, to_id::text, settled_at IS NOT NULL AS settled FROM ${table}_partitions ORDER BY from_id`,
    );
  const enqueue = (t: TestApp, count: number) =>
    t.app.get<DataSource>(getDataSourceToken()).transaction((manager) =>
      t.get(OutboxService).enqueueMany(
        manager,
        Array.from({ length: count }, (_, n) => ({ destination: 'billing', payload: { n } })),
      ),
    );

  it('at start-up, keeps two partitions ahead of the ids in use, producers included; enqueues cross into them', async () => {
    const db = await database('partitioned');
    // Ids used up to 2 short of the end of the migration's second partition [1000001, 2000001).
    await db.query("SELECT setval(pg_get_serial_sequence('queuebox_outbox', 'id'), 1999998)");
    const t = await app(db); // no worker: a producer
    await eventually(
      async () => (await partitions(db, 'queuebox_outbox')).filter((p) => BigInt(p.from_id) > 1_999_998n).length >= 2,
      'two partitions ahead of the last id',
    );
    assert.ok(t.logger.has('log', 'Partition upkeep started'), 'the keeper runs where the tables are partitioned');
    assert.ok((await partitions(db, 'queuebox_inbox')).length >= 2);
    const stored = await enqueue(t, 5);
    assert.deepEqual(
      stored.map((message) => message.id),
      ['1999999', '2000000', '2000001', '2000002', '2000003'],
      'the enqueue goes on into the next partition',
    );
    const [{ partition }] = await db.query<{ partition: string }>(
      'SELECT tableoid::regclass::text AS partition FROM queuebox_outbox WHERE id = 2000003',
    );
    assert.equal(partition, 'queuebox_outbox_p3');
  });

  it('retention drops a settled partition whose rows are all past their age, with their message ids, and deletes no row', async () => {
    const db = await database('partitioned');
    const t = await app(db);
    const old = await enqueue(t, 10); // in p1 [1, 1000001)
    await db.query("UPDATE queuebox_outbox SET state = 'sent', sent_at = now() - interval '8 days', attempts = 1");
    // The ids of p1 all used: no insert can reach it any more, so the upkeep settles it.
    await db.query("SELECT setval(pg_get_serial_sequence('queuebox_outbox', 'id'), 1500000)");
    const young = await enqueue(t, 3); // in p2
    const keeper = t.get(PartitionKeeper);
    await eventually(async () => {
      await keeper.runOnce();
      return (await partitions(db, 'queuebox_outbox'))[0].settled;
    }, 'p1 settled');

    const run = await t.get(RetentionService).runOnce();
    assert.deepEqual(run, { outboxDeleted: 0, inboxDeleted: 0, deadDeleted: 0, skipped: false, partitionsDropped: ['queuebox_outbox_p1'] });
    assert.equal((await partitions(db, 'queuebox_outbox'))[0].name, 'queuebox_outbox_p2');
    const ids = await db.query<{ message_id: string }>('SELECT message_id::text FROM queuebox_outbox_message_ids ORDER BY row_id');
    assert.deepEqual(
      ids.map((row) => row.message_id),
      young.map((message) => message.messageId),
      "the dropped rows' message ids are forgotten, the others kept",
    );
    assert.ok(!old.some((message) => ids.some((row) => row.message_id === message.messageId)));
    assert.ok(t.logger.has('log', 'Retention dropped 1 partition(s)'));
  });

  it('runs nothing where the tables are plain', async () => {
    const db = await database('plain');
    const t = await app(db);
    assert.equal(await t.get(PartitionKeeper).runOnce(), undefined);
    assert.ok(!t.logger.has('log', 'Partition upkeep started'));
    assert.deepEqual(await t.get(RetentionService).runOnce(), { outboxDeleted: 0, inboxDeleted: 0, deadDeleted: 0, skipped: false });
  });
});
