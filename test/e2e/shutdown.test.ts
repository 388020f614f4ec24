import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { QueueBoxInstance } from '../../lib/queuebox.instance';
import { createTestApp } from '../support/app';
import { createTestDatabase, eventually, type TestDatabase } from '../support/database';
import { gate, RecordingPublisher } from '../support/recording-publisher';

describe('I9: graceful shutdown', () => {
  let db: TestDatabase;

  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => {
    await db?.drop();
  });
  beforeEach(async () => {
    await db.query('TRUNCATE queuebox_outbox');
  });

  const stateOf = async (id: string) =>
    (await db.query<{ state: string }>('SELECT state FROM queuebox_outbox WHERE id = $1', [id]))[0].state;

  it('waits for an in-flight publish and records it before the DataSource closes', async () => {
    const held = gate();
    const publisher = new RecordingPublisher(() => held.promise);
    const t = await createTestApp(db.url, { outbox: { publisher, pollIntervalMs: 20, shutdownTimeoutMs: 10_000 } });
    const dataSource = t.app.get<DataSource>(getDataSourceToken());
    const { id } = await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'd', payload: 1 }));
    await publisher.waitForCalls(1);

    let stateWhenDataSourceCloses: string | undefined;
    const destroy = dataSource.destroy.bind(dataSource);
    dataSource.destroy = async () => {
      stateWhenDataSourceCloses = await stateOf(id);
      return destroy();
    };
    let closed = false;
    const closing = t.app.close().then(() => {
      closed = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(closed, false, 'close() waits while the publish runs');
    held.open();
    await closing;
    assert.equal(stateWhenDataSourceCloses, 'sent', 'the row was marked sent before TypeORM closed its DataSource');
    assert.equal(publisher.calls.length, 1, 'no new claims after shutdown began');
  });

  it('gives back claims that never started, so they need not wait for their lease', async () => {
    const held = gate();
    const publisher = new RecordingPublisher(() => held.promise);
    const t = await createTestApp(db.url, { outbox: { publisher, pollIntervalMs: 20, batchSize: 5, concurrency: 1 } });
    const dataSource = t.app.get<DataSource>(getDataSourceToken());
    await dataSource.transaction((manager) =>
      t.get(OutboxService).enqueueMany(
        manager,
        Array.from({ length: 5 }, (_, n) => ({ destination: 'd', payload: n })),
      ),
    );
    await publisher.waitForCalls(1);
    assert.equal((await db.query("SELECT 1 FROM queuebox_outbox WHERE state = 'processing'")).length, 5, 'five claimed, one started');
    const closing = t.app.close();
    await eventually(
      async () => (await db.query("SELECT 1 FROM queuebox_outbox WHERE state = 'pending'")).length === 4,
      'the unstarted four to be given back',
    );
    held.open();
    await closing;
    const rows = await db.query<{ state: string; attempts: number }>('SELECT state, attempts FROM queuebox_outbox ORDER BY id');
    assert.deepEqual(rows[0], { state: 'sent', attempts: 1 });
    assert.ok(rows.slice(1).every((r) => r.state === 'pending' && r.attempts === 0));
  });

  it('after shutdownTimeoutMs it stops waiting; leaving, it releases the abandoned row at once instead of after the lease', async () => {
    const stuck = new RecordingPublisher(
      (_message, signal) => new Promise((_resolve, reject) => signal.addEventListener('abort', () => reject(signal.reason))),
    );
    // A lease far longer than the test: only the release on leaving can free the row in time.
    const first = await createTestApp(db.url, {
      outbox: { publisher: stuck, pollIntervalMs: 20, claimTimeoutMs: 120_000, publishTimeout: 60_000, shutdownTimeoutMs: 300 },
    });
    const dataSource = first.app.get<DataSource>(getDataSourceToken());
    const { id } = await dataSource.transaction((manager) => first.get(OutboxService).enqueue(manager, { destination: 'd', payload: 2 }));
    await stuck.waitForCalls(1);
    const instance = first.get(QueueBoxInstance).id;
    assert.deepEqual(await db.query('SELECT claimed_by FROM queuebox_outbox WHERE id = $1', [id]), [{ claimed_by: instance }]);
    const started = Date.now();
    await first.app.close();
    const took = Date.now() - started;
    assert.ok(took >= 300 && took < 3000, `close() took ${took} ms with a 300 ms shutdown timeout`);
    assert.equal(stuck.calls[0].signal.aborted, true, 'the abandoned publish was told to stop');
    assert.ok(first.logger.has('warn', 'shutdown timeout reached with 1 message(s) still in flight'));
    assert.ok(
      first.logger.has('warn', 'Left the instances table with 1 outbox and 0 inbox rows still claimed'),
      JSON.stringify(first.logger.lines),
    );
    assert.deepEqual(await db.query('SELECT id FROM queuebox_instances WHERE id = $1', [instance]), [], 'deregistered');
    assert.equal(await stateOf(id), 'pending', 'released and reclaimed on the way out, long before its lease would expire');

    const publisher = new RecordingPublisher();
    const second = await createTestApp(db.url, { outbox: { publisher, pollIntervalMs: 20 } });
    try {
      await eventually(async () => (await stateOf(id)) === 'sent', 'the released row to be published', 10_000);
      assert.equal(publisher.calls[0].message.attempt, 2);
    } finally {
      await second.app.close();
    }
  });
});
