import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { it } from 'node:test';
import { Client } from 'pg';
import { PartitionRetention } from '../../lib/dialects/postgres/partition-retention';
import { partitionedInboxFindSql, partitionedOutboxFindSql } from '../../lib/dialects/postgres/partitions.sql';
import { describeWithDatabase } from '../support/database';
import {
  createPartitionedTable,
  enqueue,
  PARTITIONED_INBOX,
  PARTITIONED_TABLE,
  partitionFixture,
  partitionRows,
  receive,
  runUpkeepUntil,
  untilWaitingForLock,
} from '../support/partitioned-table';

// Issue 37, decision 4 (docs/partitioning.md): an outbox `message_id` and an inbox `(source,
// idempotency_key)` stay unique across partitions through their side tables, with producers and
// receivers racing over a partition boundary on connections of their own.

describeWithDatabase('global uniqueness in the partitioned layout on PostgreSQL', (db) => {
  const { sql, log, upkeep } = partitionFixture(db);

  /** Sets the next id of `table` (at least the one after the last id handed out). */
  const nextIdIs = (table: 'p_outbox' | 'p_inbox', nextId: number) =>
    db.query(`SELECT setval(pg_get_serial_sequence('${table}', 'id'), $1)`, [nextId - 1]);

  /** A fresh partitioned table with partitions of 100 ids from 1, the next id `nextId`: p1 [1, 101), p2 [101, 201) and two above it. */
  const partitioned = async (kind: 'outbox' | 'inbox', nextId: number) => {
    await createPartitionedTable(db, kind);
    const table = kind === 'outbox' ? PARTITIONED_TABLE : PARTITIONED_INBOX;
    const keeper = upkeep({ table, kind, minSpan: 100 });
    if (nextId > 1) await nextIdIs(table.name as 'p_outbox' | 'p_inbox', nextId);
    await keeper.runOnce();
    return keeper;
  };

  /** A boundary to race over: the first writer takes id `next - 1`, the last of one partition, the second `next`, the first of the next. */
  const BOUNDARIES = [
    { first: 'commit', next: 101, firstIn: 'p1', secondIn: 'p2' },
    { first: 'rollback', next: 201, firstIn: 'p2', secondIn: 'p3' },
  ] as const;

  /** A connection of its own; `end()` closes it (rolling back what is not committed). */
  const connect = async () => {
    const client = new Client({ connectionString: db.url });
    await client.connect();
    return client;
  };

  /** A connection of its own with a transaction open. */
  const openTransaction = async () => {
    const client = await connect();
    await client.query('BEGIN');
    return client;
  };

  /** The rows stored for a message id, in every partition, with the partition each is in. */
  const outboxRowsOf = (messageId: string) =>
    db.query<{ id: string; partition: string }>(
      'SELECT id::text, tableoid::regclass::text AS partition FROM p_outbox WHERE message_id = $1',
      [messageId],
    );

  it('raises the duplicate of a message id committed in the partition before, and stores it once the first rolls back', async () => {
    await partitioned('outbox', 100);
    for (const { first, next, firstIn, secondIn } of BOUNDARIES) {
      await nextIdIs('p_outbox', next - 1);
      const messageId = randomUUID();
      const producer = await openTransaction();
      try {
        const [stored] = await enqueue(producer, [messageId]);
        const second = enqueue(db, [messageId]).then(
          (rows) => ({ rows }),
          (error: { code?: string; constraint?: string }) => ({ error }),
        );
        await untilWaitingForLock(db, 'the second producer waits for the first', ['%p_outbox_message_ids%']);
        await producer.query(first === 'commit' ? 'COMMIT' : 'ROLLBACK');
        const outcome = await second;
        const rows = await outboxRowsOf(messageId);
        assert.equal(rows.length, 1, `one row for the message id: ${JSON.stringify(rows)}`);
        if (first === 'commit') {
          assert.ok('error' in outcome, 'the duplicate raises');
          assert.equal(outcome.error.code, '23505');
          assert.equal(outcome.error.constraint, 'p_outbox_message_id_key', 'the constraint the dialect recognises');
          assert.deepEqual(rows, [{ id: stored.id, partition: `p_outbox_${firstIn}` }]);
        } else {
          assert.ok('rows' in outcome, `the second producer stores it: ${JSON.stringify(outcome)}`);
          assert.deepEqual(rows, [{ id: String(next), partition: `p_outbox_${secondIn}` }], 'in the next partition');
        }
      } finally {
        await producer.end();
      }
    }
  });

  it('stores each message id once when producers skipping duplicates race over a boundary', async () => {
    await partitioned('outbox', 60); // 6 producers take 20 ids each: [60, 180), over the boundary at 101
    const messageIds = Array.from({ length: 20 }, () => randomUUID());
    const producers = await Promise.all(Array.from({ length: 6 }, openTransaction));
    try {
      const stored = await Promise.all(
        // In the same order: batches of the same ids in opposite orders would deadlock, in either layout.
        producers.map(async (producer) => {
          const rows = await enqueue(producer, messageIds, true);
          await producer.query('COMMIT');
          return rows;
        }),
      );
      const rows = await db.query<{ message_id: string; id: string; partition: string }>(
        'SELECT message_id, id::text, tableoid::regclass::text AS partition FROM p_outbox ORDER BY id',
      );
      assert.equal(rows.length, messageIds.length, 'one row per message id');
      assert.deepEqual(new Set(rows.map((row) => row.message_id)), new Set(messageIds));
      assert.equal(stored.flat().length, messageIds.length, 'each row reported stored by one producer only');
      const found = await db.query<{ id: string; message_id: string }>(partitionedOutboxFindSql(PARTITIONED_TABLE), [messageIds]);
      assert.deepEqual(
        new Map(found.map((row) => [row.message_id, String(row.id)])),
        new Map(rows.map((row) => [row.message_id, row.id])),
        "the side table points at each message id's row",
      );
    } finally {
      await Promise.all(producers.map((producer) => producer.end()));
    }
  });

  it('keeps a dedupe key once when receives race over a boundary (I5)', async () => {
    const keeper = await partitioned('inbox', 100);
    for (const { first, next, firstIn, secondIn } of BOUNDARIES) {
      await nextIdIs('p_inbox', next - 1);
      const key = `k-${first}`;
      const receiver = await openTransaction();
      try {
        const stored = await receive(receiver, 's', key);
        assert.ok(stored, 'the first receive stores the row');
        const second = receive(db, 's', key);
        await untilWaitingForLock(db, 'the second receive waits for the first', ['%p_inbox_keys%']);
        await receiver.query(first === 'commit' ? 'COMMIT' : 'ROLLBACK');
        const duplicate = await second;
        const rows = await db.query<{ id: string; partition: string }>(
          "SELECT id::text, tableoid::regclass::text AS partition FROM p_inbox WHERE source = 's' AND idempotency_key = $1",
          [key],
        );
        assert.equal(rows.length, 1, `one row for the key: ${JSON.stringify(rows)}`);
        if (first === 'commit') {
          assert.equal(duplicate, undefined, 'the second receive is a duplicate');
          assert.deepEqual(rows, [{ id: stored, partition: `p_inbox_${firstIn}` }]);
          const [found] = await db.query<{ id: string }>(partitionedInboxFindSql(PARTITIONED_INBOX), ['s', key]);
          assert.equal(String(found.id), stored, 'the duplicate finds the stored row');
        } else {
          assert.deepEqual(
            rows,
            [{ id: String(next), partition: `p_inbox_${secondIn}` }],
            'the second receive stores it in the next partition',
          );
          assert.equal(duplicate, String(next));
        }
      } finally {
        await receiver.end();
      }
    }

    // Volume: eight receivers (each receive its own transaction) receive the same 25 keys at once:
    // ids [211, 411), over the boundaries at 301 and 401.
    await nextIdIs('p_inbox', 211);
    await keeper.runOnce();
    const keys = Array.from({ length: 25 }, (_, n) => `race-${n}`);
    const receivers = await Promise.all(Array.from({ length: 8 }, connect));
    try {
      const outcomes = await Promise.all(
        receivers.map(async (receiver, n) => {
          const ids = [];
          for (const key of n % 2 ? [...keys].reverse() : keys) ids.push(await receive(receiver, 's', key));
          return ids;
        }),
      );
      const rows = await db.query<{ idempotency_key: string }>(
        "SELECT idempotency_key FROM p_inbox WHERE source = 's' AND idempotency_key LIKE 'race-%'",
      );
      assert.equal(rows.length, keys.length, 'one row per key');
      assert.equal(outcomes.flat().filter(Boolean).length, keys.length, 'each key stored by one receiver only');
    } finally {
      await Promise.all(receivers.map((receiver) => receiver.end()));
    }
  });

  it("forgets a dropped partition's message ids, so they may be used again, and keeps the others", async () => {
    const keeper = await partitioned('outbox', 1);
    const old = await enqueue(
      db,
      Array.from({ length: 100 }, () => randomUUID()),
    ); // p1 [1, 101)
    await keeper.runOnce(); // p3
    const young = await enqueue(
      db,
      Array.from({ length: 150 }, () => randomUUID()),
    ); // p2 and p3
    await db.query("UPDATE p_outbox SET state = 'sent', sent_at = now() - interval '8 days' WHERE id < 101");
    await runUpkeepUntil(db, keeper, 'p_outbox_p1');

    const retention = new PartitionRetention(sql, { table: PARTITIONED_TABLE, kind: 'outbox', logger: log });
    assert.deepEqual(await retention.runOnce({ finishedAfterMs: 7 * 86_400_000, deadAfterMs: false }), {
      dropped: ['p_outbox_p1'],
      reattached: [],
    });
    const [{ count }] = await db.query<{ count: string }>('SELECT count(*)::text AS count FROM p_outbox_message_ids');
    assert.equal(count, String(young.length), "only the kept rows' message ids are left");
    const again = await enqueue(db, [old[0].message_id]);
    assert.equal(again.length, 1, "a dropped row's message id is stored again");
    await assert.rejects(enqueue(db, [young[0].message_id]), { code: '23505' }, "a kept row's message id is still a duplicate");
    assert.ok(!(await partitionRows(db)).some((p) => p.name === 'p_outbox_p1'));
  });

  it('registers a row another statement inserts, and raises its duplicate as the plain constraint would', async () => {
    await partitioned('outbox', 1);
    const messageId = randomUUID();
    const insertDirectly = () =>
      db.query<{ id: string }>("INSERT INTO p_outbox (message_id, destination, payload) VALUES ($1, 'd', '{}') RETURNING id::text", [
        messageId,
      ]);
    const [{ id }] = await insertDirectly();
    assert.deepEqual(await db.query('SELECT row_id::text FROM p_outbox_message_ids WHERE message_id = $1', [messageId]), [{ row_id: id }]);
    await assert.rejects(insertDirectly(), {
      code: '23505',
      constraint: 'p_outbox_message_id_key',
      detail: `Key (message_id)=(${messageId}) already exists.`,
    });
    await assert.rejects(enqueue(db, [messageId]), { code: '23505', constraint: 'p_outbox_message_id_key' });
    assert.deepEqual(await enqueue(db, [messageId], true), [], 'skipped by the layout statement');
    assert.equal((await db.query('SELECT 1 FROM p_outbox')).length, 1);

    await partitioned('inbox', 1);
    await db.query("INSERT INTO p_inbox (source, idempotency_key, payload) VALUES ('s', 'k', '{}')");
    assert.equal(await receive(db, 's', 'k'), undefined, 'a redelivery of a row inserted directly is a duplicate (I5)');
    await assert.rejects(db.query("INSERT INTO p_inbox (source, idempotency_key, payload) VALUES ('s', 'k', '{}')"), {
      constraint: 'p_inbox_source_idempotency_key_key',
      detail: 'Key (source, idempotency_key)=(s, k) already exists.',
    });
  });

  it('forgets the side rows of rows deleted or truncated through the table, in the same statement', async () => {
    await partitioned('outbox', 1);
    const [first, second] = await enqueue(db, [randomUUID(), randomUUID(), randomUUID()]);
    await db.query('DELETE FROM p_outbox WHERE id = $1', [first.id]);
    const sideRows = async () =>
      (await db.query<{ message_id: string }>('SELECT message_id FROM p_outbox_message_ids')).map((r) => r.message_id);
    assert.ok(!(await sideRows()).includes(first.message_id), "a deleted row's message id is forgotten");
    assert.ok((await sideRows()).includes(second.message_id), 'the others are kept');
    assert.equal((await enqueue(db, [first.message_id])).length, 1, 'and may be used again');
    await db.query('TRUNCATE p_outbox');
    assert.deepEqual(await sideRows(), [], 'a truncation empties the side table');
    assert.equal((await enqueue(db, [second.message_id])).length, 1);

    await partitioned('inbox', 1);
    const id = await receive(db, 's', 'k');
    await db.query('DELETE FROM p_inbox WHERE id = $1', [id]);
    assert.deepEqual(await db.query('SELECT * FROM p_inbox_keys'), [], "a deleted row's dedupe key is forgotten");
    assert.ok(await receive(db, 's', 'k'), 'and received again');
  });

  it('forgets the message ids of a partition that a stopped run left detached, and drops it', async () => {
    const keeper = await partitioned('outbox', 1);
    await enqueue(
      db,
      Array.from({ length: 100 }, () => randomUUID()),
    );
    await enqueue(db, [randomUUID()]);
    await db.query("UPDATE p_outbox SET state = 'sent', sent_at = now() - interval '8 days' WHERE id < 101");
    await runUpkeepUntil(db, keeper, 'p_outbox_p1');
    // A run that detached p1 and forgot part of its ids, then stopped.
    await db.query('ALTER TABLE p_outbox DETACH PARTITION p_outbox_p1');
    await db.query('DELETE FROM p_outbox_message_ids WHERE row_id < 50');

    const retention = new PartitionRetention(sql, { table: PARTITIONED_TABLE, kind: 'outbox', logger: log });
    const run = await retention.runOnce({ finishedAfterMs: 7 * 86_400_000, deadAfterMs: false });
    assert.deepEqual(run, { dropped: ['p_outbox_p1'], reattached: [] });
    assert.deepEqual(await db.query('SELECT row_id::text FROM p_outbox_message_ids'), [{ row_id: '101' }]);
  });
});
