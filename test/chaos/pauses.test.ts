import assert from 'node:assert/strict';
import { it } from 'node:test';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { useChaosBench } from '../support/chaos-bench';
import { describeWithDatabase, eventually } from '../support/database';
import type { RecordedRequest } from '../support/http-recorder';
import { startWorker } from '../support/processes';

// Issue 40: a destination paused while two worker processes run, one of them killed with SIGKILL
// while it holds claims of another destination. Its claims are reclaimed as usual and delivered
// by the survivor; the paused rows are never claimed (attempts 0) while the pause lasts, nor the
// rows of their keys behind them; the resume delivers every row of every key in enqueue order.

const LEASE_MS = 1500;
const POLL_MS = 100;
const KEYS = 4;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const payloadOf = (request: RecordedRequest) => JSON.parse(request.body) as { key: string; seq: number };

describeWithDatabase('chaos: a paused destination across two worker processes and a kill -9', (db) => {
  const bench = useChaosBench(db);
  const { workers } = bench;

  it('the killed replica’s claims are reclaimed, the paused rows stay unclaimed, and the resume delivers every key in order', {
    timeout: 90_000,
  }, async () => {
    const options = {
      outbox: { claimTimeoutMs: LEASE_MS, pollIntervalMs: POLL_MS, concurrency: 4, batchSize: 4, backoff: { initialMs: 10, maxMs: 50 } },
      instances: { heartbeatMs: 250, deadAfterMs: 1000 },
    };
    for (const name of ['a', 'b']) workers.push(await startWorker({ dbUrl: db.url, publishUrl: bench.publishUrl, name, options }));
    const admin = bench.producer.get(QueueBoxAdmin);
    assert.equal(await admin.pause({ component: 'outbox', name: 'billing', reason: 'partner down', actor: 'chaos' }), true);
    await sleep(POLL_MS * 3);

    // Shipping publishes hang until released: both workers hold claims when one is killed.
    let released = false;
    bench.recorder.responder = (request) => (request.path === '/shipping' && !released ? 'hang' : 200);
    // Per key: billing (paused) first, then shipping and billing alternately; plus free shipping rows.
    const outbox = bench.producer.get(OutboxService);
    await bench.dataSource.transaction(async (manager) => {
      for (let k = 0; k < KEYS; k++) {
        for (let seq = 0; seq < 4; seq++) {
          const destination = seq % 2 === 0 ? 'billing' : 'shipping';
          await outbox.enqueue(manager, { destination, key: `paused-${k}`, payload: { key: `paused-${k}`, seq } });
        }
      }
      for (let n = 0; n < 12; n++) await outbox.enqueue(manager, { destination: 'shipping', payload: { key: 'free', seq: n } });
    });
    await eventually(
      async () =>
        (await db.query("SELECT 1 FROM queuebox_outbox WHERE state = 'processing' AND destination = 'shipping'")).length >= 4 &&
        (await db.query("SELECT DISTINCT claimed_by FROM queuebox_outbox WHERE state = 'processing'")).length === 2,
      'both workers to hold shipping claims',
      20_000,
    );
    const [victim, survivor] = workers;
    victim.child.kill('SIGKILL');
    await victim.exited;
    released = true;
    bench.recorder.releaseHanging(200);

    // The victim's claims come back (its leases end) and the survivor delivers every free row.
    await eventually(
      async () =>
        (await db.query("SELECT 1 FROM queuebox_outbox WHERE destination = 'shipping' AND \"key\" IS NULL AND state <> 'sent'")).length ===
        0,
      'every free shipping row sent by the survivor',
      30_000,
    );
    await sleep(POLL_MS * 5);
    const waiting = await db.query<{ destination: string; state: string; attempts: number }>(
      'SELECT destination, state, attempts FROM queuebox_outbox WHERE "key" IS NOT NULL ORDER BY id',
    );
    assert.equal(waiting.length, KEYS * 4);
    assert.ok(
      waiting.every((row) => row.state === 'pending' && row.attempts === 0),
      `no row of a paused key was claimed: ${JSON.stringify(waiting)}`,
    );
    assert.equal(bench.recorder.requests.filter((r) => r.path === '/billing').length, 0, 'nothing published to the paused destination');

    assert.equal(await admin.resume({ component: 'outbox', name: 'billing', actor: 'chaos' }), true);
    await eventually(
      async () => (await db.query("SELECT 1 FROM queuebox_outbox WHERE state <> 'sent'")).length === 0,
      'every row sent after the resume',
      30_000,
    );
    for (let k = 0; k < KEYS; k++) {
      const seqs = bench.recorder
        .accepted()
        .filter((r) => r.path !== '/shipping' || payloadOf(r).key !== 'free')
        .map(payloadOf)
        .filter((p) => p.key === `paused-${k}`)
        .map((p) => p.seq);
      assert.deepEqual(seqs, [0, 1, 2, 3], `key paused-${k} delivered in order, once each`);
    }
    survivor.child.kill('SIGTERM');
    await survivor.exited;
    workers.length = 0;
  });
});
