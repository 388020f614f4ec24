// Idempotent enqueue (issue 41, item 2): `onDuplicate: 'ignore'` stores nothing for a messageId the
// outbox holds, reports the stored row, and leaves the caller's transaction usable; concurrent
// enqueues of one id store one row; an id retention deleted is stored again.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource, EntityManager } from 'typeorm';
import { RetentionService } from '../../lib/admin/retention.service';
import { DuplicateMessageIdError, QueueBoxValidationError } from '../../lib/errors/queuebox.errors';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { gate, RecordingPublisher } from '../support/recording-publisher';

describeWithDatabase('enqueue with onDuplicate: ignore (PostgreSQL)', { truncate: ['queuebox_outbox'] }, (db) => {
  let t: TestApp;
  let outbox: OutboxService;
  let dataSource: DataSource;

  before(async () => {
    t = await createTestApp(db.url, { outbox: { publisher: new RecordingPublisher() }, workers: false });
    outbox = t.get(OutboxService);
    dataSource = t.app.get(getDataSourceToken());
  });
  after(async () => {
    await t?.app.close();
  });

  const rows = () =>
    db.query<{ id: string; message_id: string; payload: unknown }>(
      'SELECT id::text, message_id::text, payload FROM queuebox_outbox ORDER BY id',
    );

  it('stores nothing for a held id, reports the stored row, stores the rest, and the transaction goes on', async () => {
    const held = randomUUID();
    const [first] = await dataSource.transaction((m) =>
      outbox.enqueueMany(m, [{ destination: 'billing', payload: 'first', messageId: held }]),
    );
    assert.equal(first.duplicate, false);
    const fresh = randomUUID();
    const results = await dataSource.transaction(async (manager) => {
      const results = await outbox.enqueueMany(
        manager,
        [
          { destination: 'billing', payload: 'second', messageId: held.toUpperCase() },
          { destination: 'billing', payload: 'other', messageId: fresh },
        ],
        { onDuplicate: 'ignore' },
      );
      // Still a live transaction: PostgreSQL refuses every statement after a failed one.
      await manager.query('SELECT 1');
      await outbox.enqueue(manager, { destination: 'billing', payload: 'after' });
      return results;
    });
    assert.deepEqual(results[0], { id: first.id, messageId: held, duplicate: true });
    assert.equal(results[1].duplicate, false);
    assert.equal(results[1].messageId, fresh);
    const stored = await rows();
    assert.deepEqual(
      stored.map((r) => r.payload),
      ['first', 'other', 'after'],
    );
    assert.equal(stored[1].id, results[1].id);
  });

  it('reports a row the same transaction stored earlier as a duplicate', async () => {
    const id = randomUUID();
    const [a, b] = await dataSource.transaction(async (manager) => [
      await outbox.enqueue(manager, { destination: 'billing', payload: 1, messageId: id }, { onDuplicate: 'ignore' }),
      await outbox.enqueue(manager, { destination: 'billing', payload: 2, messageId: id }, { onDuplicate: 'ignore' }),
    ]);
    assert.equal(a.duplicate, false);
    assert.deepEqual(b, { id: a.id, messageId: id, duplicate: true });
    assert.equal((await rows()).length, 1);
  });

  it('without the option, a held id still throws DuplicateMessageIdError and an unknown option value is refused', async () => {
    const id = randomUUID();
    await dataSource.transaction((m) => outbox.enqueue(m, { destination: 'billing', payload: 1, messageId: id }));
    await assert.rejects(
      dataSource.transaction((m) => outbox.enqueue(m, { destination: 'billing', payload: 2, messageId: id })),
      DuplicateMessageIdError,
    );
    await assert.rejects(
      dataSource.transaction((m) =>
        outbox.enqueue(m, { destination: 'billing', payload: 2 }, { onDuplicate: 'replace' as unknown as 'ignore' }),
      ),
      (error: unknown) => error instanceof QueueBoxValidationError && error.field === 'onDuplicate',
    );
    assert.equal((await rows()).length, 1);
  });

  it('a rolled-back enqueue with the option leaves nothing (I2)', async () => {
    await assert.rejects(
      dataSource.transaction(async (manager) => {
        await outbox.enqueue(manager, { destination: 'billing', payload: 1 }, { onDuplicate: 'ignore' });
        throw new Error('business change failed');
      }),
      /business change failed/,
    );
    assert.equal((await rows()).length, 0);
  });

  /** Two transactions enqueue `id`: the first holds its insert open until `finish` says; the second must wait for it. */
  async function race(id: string, finish: 'commit' | 'rollback') {
    const firstInserted = gate();
    const release = gate();
    const first = dataSource
      .transaction(async (manager) => {
        const result = await outbox.enqueue(
          manager,
          { destination: 'billing', payload: 'first', messageId: id },
          { onDuplicate: 'ignore' },
        );
        firstInserted.open();
        await release.promise;
        if (finish === 'rollback') throw new Error('first rolls back');
        return result;
      })
      .catch((error: Error) => error);
    await firstInserted.promise;
    let secondPid = 0;
    const second = dataSource.transaction(async (manager: EntityManager) => {
      secondPid = (await manager.query('SELECT pg_backend_pid() AS pid'))[0].pid;
      const result = await outbox.enqueue(manager, { destination: 'billing', payload: 'second', messageId: id }, { onDuplicate: 'ignore' });
      await manager.query('SELECT 1'); // the transaction is usable after the skipped insert
      return result;
    });
    // The second insert waits on the first's uncommitted row (a lock wait, seen from outside).
    await eventually(async () => {
      if (secondPid === 0) return false;
      const [row] = await db.query<{ wait_event_type: string | null }>('SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1', [
        secondPid,
      ]);
      return row?.wait_event_type === 'Lock';
    }, 'the second enqueue to wait for the first');
    release.open();
    return { first: await first, second: await second };
  }

  it('two transactions enqueueing one id concurrently: one row; the second reports it once the first commits', async () => {
    const id = randomUUID();
    const { first, second } = await race(id, 'commit');
    assert.ok(!(first instanceof Error));
    assert.equal(first.duplicate, false);
    assert.deepEqual(second, { id: first.id, messageId: id, duplicate: true });
    assert.deepEqual(
      (await rows()).map((r) => r.payload),
      ['first'],
    );
  });

  it('two transactions enqueueing one id concurrently: when the first rolls back, the second stores its own', async () => {
    const id = randomUUID();
    const { first, second } = await race(id, 'rollback');
    assert.ok(first instanceof Error);
    assert.equal(second.duplicate, false);
    const stored = await rows();
    assert.deepEqual(
      stored.map((r) => [r.id, r.payload]),
      [[second.id, 'second']],
    );
  });

  // In the partitioned layout retention drops whole settled partitions, not rows: the same
  // promise is tested there by test/integration/partition-uniqueness.test.ts.
  const retentionDropsPartitions =
    process.env.QUEUEBOX_TEST_LAYOUT === 'partitioned' &&
    'the partitioned layout drops partitions, not rows: partition-uniqueness.test.ts covers an id used again';
  it('an id retention deleted is stored again, as a new message', { skip: retentionDropsPartitions }, async () => {
    const id = randomUUID();
    const [old] = await dataSource.transaction((m) => outbox.enqueueMany(m, [{ destination: 'billing', payload: 'old', messageId: id }]));
    await db.query(`UPDATE queuebox_outbox SET state = 'sent', sent_at = now() - interval '30 days' WHERE id = $1`, [old.id]);
    const { outboxDeleted } = await t.get(RetentionService).runOnce();
    assert.equal(outboxDeleted, 1);
    const again = await dataSource.transaction((m) =>
      outbox.enqueue(m, { destination: 'billing', payload: 'new', messageId: id }, { onDuplicate: 'ignore' }),
    );
    assert.equal(again.duplicate, false);
    assert.notEqual(again.id, old.id);
    assert.deepEqual(
      (await rows()).map((r) => r.payload),
      ['new'],
    );
  });
});
