import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { HttpRecorder } from '../support/http-recorder';
import { startWorker, type WorkerProcess } from '../support/processes';

// Issue 34, item 2 (I13), with real processes: a replica whose DataSource is initialized after
// start-up (TypeORM's manualInitialization; the app calls initialize() right after it started)
// must register before its workers claim and heartbeat like any other. Otherwise a live replica's
// sweep ends its claims as "claimed by an unregistered instance" every deadAfterMs, and a publish
// longer than that is done again by the live replica while the first one still runs.

describeWithDatabase('a replica whose DataSource is initialized after start-up (I13), with real processes', (db) => {
  let producer: TestApp;
  const recorder = new HttpRecorder();
  let publishUrl: string;
  const workers: WorkerProcess[] = [];

  before(async () => {
    producer = await createTestApp(db.url, { workers: false });
    publishUrl = await recorder.start();
  });
  after(async () => {
    for (const { child } of workers) child.kill('SIGKILL');
    await recorder.stop();
    await producer?.app.close();
  });

  it('registers before it claims and heartbeats: a live replica’s sweeps leave its long publish alone, and the message is published once', async () => {
    const options = {
      workers: { outbox: true, relay: false, pull: false },
      outbox: { pollIntervalMs: 50 },
      instances: { heartbeatMs: 200, deadAfterMs: 1000 },
    };
    // The late replica's publish lasts until the test has let the live one sweep for a while.
    let answerLate!: () => void;
    const lateMayAnswer = new Promise<void>((resolve) => {
      answerLate = resolve;
    });
    recorder.responder = async (request) => {
      if (request.headers['x-worker'] === 'late') await lateMayAnswer;
      return 200;
    };
    const late = await startWorker({ dbUrl: db.url, publishUrl, name: 'late', options, manualInitialization: true });
    workers.push(late);

    const dataSource = producer.app.get<DataSource>(getDataSourceToken());
    const { messageId } = await dataSource.transaction((manager) =>
      producer.get(OutboxService).enqueue(manager, { destination: 'orders', key: 'k', payload: { slow: true } }),
    );
    const claimOf = async () =>
      (
        await db.query<{ state: string; claimed_by: string | null; claimed_at: Date | null }>(
          'SELECT state, claimed_by, claimed_at FROM queuebox_outbox WHERE message_id = $1',
          [messageId],
        )
      )[0];
    await eventually(async () => (await claimOf()).state === 'processing', 'the late replica to claim the message', 30_000);
    const claim = await claimOf();

    const live = await startWorker({ dbUrl: db.url, publishUrl, name: 'live', options });
    workers.push(live);
    // Every heartbeat of the live replica also sweeps: let it run for three times deadAfterMs past the claim.
    await eventually(
      async () =>
        (
          await db.query(`SELECT 1 FROM queuebox_instances WHERE pid = $1 AND heartbeat_at > $2::timestamptz + interval '3 seconds'`, [
            live.child.pid,
            claim.claimed_at,
          ])
        ).length === 1,
      'the live replica to heartbeat and sweep for 3 s past the claim',
      30_000,
      50,
    );
    const lateInstance = await db.query<{ id: string; started_at: Date; heartbeat_at: Date }>(
      'SELECT id, started_at, heartbeat_at FROM queuebox_instances WHERE pid = $1',
      [late.child.pid],
    );
    answerLate();
    await recorder.until(() => recorder.requests.some((r) => r.headers['x-worker'] === 'late'));
    await eventually(async () => (await claimOf()).state === 'sent', 'the message to be marked sent');

    const deliveries = recorder.requests
      .filter((r) => r.status === 200 && r.headers['x-message-id'] === messageId)
      .map((r) => String(r.headers['x-worker']));
    assert.deepEqual(deliveries, ['late'], 'published once, by the replica that claimed it');
    assert.equal(lateInstance.length, 1, 'the late replica’s instance row exists');
    assert.equal(lateInstance[0].id, claim.claimed_by, 'its claim names its registered instance');
    assert.ok(lateInstance[0].started_at <= (claim.claimed_at as Date), 'it registered before it claimed');
    assert.ok(
      lateInstance[0].heartbeat_at.getTime() - (claim.claimed_at as Date).getTime() > 2000,
      `it heartbeats while its publish runs (last heartbeat ${lateInstance[0].heartbeat_at.toISOString()}, claimed at ${claim.claimed_at?.toISOString()})`,
    );

    for (const worker of [late, live]) worker.child.kill('SIGTERM');
    // Nest's shutdown hooks close the application, then end the process with the signal it got.
    assert.deepEqual(await Promise.all([late.exited, live.exited]), ['SIGTERM', 'SIGTERM']);
    assert.deepEqual(
      await db.query('SELECT id FROM queuebox_instances WHERE pid = ANY($1)', [[late.child.pid, live.child.pid]]),
      [],
      'both deregistered',
    );
  });
});
