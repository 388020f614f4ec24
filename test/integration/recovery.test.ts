import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { HttpRecorder } from '../support/http-recorder';
import { startWorker } from '../support/processes';

// Long enough that a loaded machine (CI runs two test files at once) does not time out a publish or
// its completion, which would publish a row twice (allowed, at least once) and break the exact counts.
const LEASE_MS = 2000;
const workerOptions = { claimTimeoutMs: LEASE_MS, pollIntervalMs: 20, concurrency: 10, maxAttempts: 3, backoff: { initialMs: 10 } };

describeWithDatabase('I8: recovery after a crash', (db) => {
  let producer: TestApp;
  let outbox: OutboxService;
  let dataSource: DataSource;
  let recorder: HttpRecorder;
  let publishUrl: string;

  before(async () => {
    producer = await createTestApp(db.url, { workers: false });
    outbox = producer.get(OutboxService);
    dataSource = producer.app.get(getDataSourceToken());
    recorder = new HttpRecorder();
    publishUrl = await recorder.start();
  });
  after(async () => {
    await recorder?.stop();
    await producer?.app.close();
  });

  const rows = (destination: string) =>
    db.query<{ state: string; attempts: number; last_error: string | null; lease_expires_at: Date | null }>(
      'SELECT state, attempts, last_error, lease_expires_at FROM queuebox_outbox WHERE destination = $1 ORDER BY id',
      [destination],
    );

  it('rows held by a process killed with SIGKILL are published by another instance after the lease expires', async () => {
    recorder.responder = (request) => (request.headers['x-worker'] === 'doomed' ? 'hang' : 200);
    await dataSource.transaction((manager) =>
      outbox.enqueueMany(
        manager,
        Array.from({ length: 5 }, (_, n) => ({ destination: 'crash', payload: { n } })),
      ),
    );
    const doomed = await startWorker({ dbUrl: db.url, publishUrl, name: 'doomed', options: { outbox: workerOptions } });
    await recorder.until(() => recorder.requests.filter((r) => r.path === '/crash').length === 5);
    const held = await rows('crash');
    assert.ok(held.every((r) => r.state === 'processing'));
    doomed.child.kill('SIGKILL');
    assert.equal(await doomed.exited, 'SIGKILL');

    const leaseEnds = Math.max(...held.map((r) => new Date(r.lease_expires_at!).getTime()));
    const survivor = await startWorker({ dbUrl: db.url, publishUrl, name: 'survivor', options: { outbox: workerOptions } });
    try {
      await eventually(async () => (await rows('crash')).every((r) => r.state === 'sent'), 'the survivor to publish every row');
    } finally {
      survivor.child.kill('SIGTERM');
      await survivor.exited;
    }
    const delivered = recorder.accepted().filter((r) => r.path === '/crash');
    assert.equal(delivered.length, 5);
    assert.ok(delivered.every((r) => r.headers['x-worker'] === 'survivor'));
    const [{ now }] = await db.query<{ now: Date }>('SELECT clock_timestamp() AS now');
    assert.ok(new Date(now).getTime() >= leaseEnds, 'taken over only after the lease expired');
    assert.ok((await rows('crash')).every((r) => r.attempts === 2));
  });

  it('a poison message that kills its worker every time ends dead after maxAttempts', async () => {
    // Alone in the table: a crash also costs an attempt to every other row the process held.
    await dataSource.transaction((manager) => outbox.enqueue(manager, { destination: 'poison', payload: 'crashes the worker' }));
    let crashes = 0;
    // Start workers one after another; each dies when it publishes the poison message.
    while ((await rows('poison'))[0].state !== 'dead') {
      assert.ok(crashes <= 3, 'the poison message must not be attempted more than maxAttempts (3) times');
      const worker = await startWorker({
        dbUrl: db.url,
        publishUrl,
        name: `w${crashes}`,
        options: { outbox: workerOptions },
        waitReady: false,
      });
      const outcome = await Promise.race([
        worker.exited,
        eventually(async () => (await rows('poison'))[0].state === 'dead', 'the poison row to die', 10_000).then(() => 'dead'),
      ]);
      if (outcome === 'SIGKILL') {
        crashes++;
      } else {
        worker.child.kill('SIGTERM');
        await worker.exited;
      }
    }
    assert.equal(crashes, 3);
    const [poison] = await rows('poison');
    assert.equal(poison.attempts, 3);
    assert.match(poison.last_error ?? '', /lease expired on attempt 3 of 3/);
  });
});
