import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { LeaseService } from '../../lib/lease/lease.service';
import { OutboxService } from '../../lib/outbox/outbox.service';
import type { OutboxClaim } from '../../lib/types/claims';
import { createTestApp, type TestApp } from '../support/app';
import { claimsOf } from '../support/claims';
import { describeWithDatabase, eventually } from '../support/database';
import { HttpRecorder } from '../support/http-recorder';
import { startWorker, type WorkerProcess } from '../support/processes';

const KEYS = 50;
const PER_KEY = 40;

/** What the destination accepted: each message's first delivery, per key (its `seq`s), by worker, and the redeliveries. */
function firstDeliveries(recorder: HttpRecorder) {
  const seqs = new Map<string, number[]>();
  const seen = new Set<string>();
  const byWorker: Record<string, number> = {};
  let duplicates = 0;
  for (const request of recorder.accepted()) {
    const id = String(request.headers['x-message-id']);
    if (seen.has(id)) {
      duplicates++;
      continue;
    }
    seen.add(id);
    const { key, seq } = JSON.parse(request.body) as { key: string; seq: number };
    seqs.set(key, [...(seqs.get(key) ?? []), seq]);
    const worker = String(request.headers['x-worker']);
    byWorker[worker] = (byWorker[worker] ?? 0) + 1;
  }
  return { seqs, delivered: seen.size, duplicates, byWorker };
}

/** Stops the worker processes (SIGTERM, then their exit) and the destination. */
async function stopAll(workers: WorkerProcess[], recorder: HttpRecorder): Promise<void> {
  for (const worker of workers) worker.child.kill('SIGTERM');
  await Promise.all(workers.map((w) => w.exited));
  await recorder.stop();
}

describeWithDatabase('I4: per-key order across replicas', (db) => {
  let producer: TestApp;
  let outbox: OutboxService;
  let dataSource: DataSource;

  before(async () => {
    producer = await createTestApp(db.url, { workers: false }, { poolSize: 12 });
    outbox = producer.get(OutboxService);
    dataSource = producer.app.get(getDataSourceToken());
  });
  after(async () => {
    await producer?.app.close();
  });

  it('two poller processes publish every key in enqueue order despite random delays and failures', async () => {
    // Random answers: 0-15 ms late, 15% HTTP 500, 3% dropped connections. Failures are retried.
    const recorder = new HttpRecorder(async () => {
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 15));
      const dice = Math.random();
      return dice < 0.03 ? 'drop' : dice < 0.18 ? 500 : 200;
    });
    const publishUrl = await recorder.start();
    const workerOptions = {
      concurrency: 6,
      batchSize: 6,
      pollIntervalMs: 20,
      claimTimeoutMs: 15_000,
      maxAttempts: 1000,
      backoff: { initialMs: 5, maxMs: 30 },
    };
    const workers: WorkerProcess[] = await Promise.all(
      ['a', 'b'].map((name) => startWorker({ dbUrl: db.url, publishUrl, name, options: { outbox: workerOptions } })),
    );
    try {
      // Ten producers enqueue concurrently, each message in its own transaction, while the workers run.
      await Promise.all(
        Array.from({ length: 10 }, async (_, producerIndex) => {
          for (let seq = 0; seq < PER_KEY; seq++) {
            for (let k = producerIndex; k < KEYS; k += 10) {
              await dataSource.transaction((manager) =>
                outbox.enqueue(manager, { destination: 'orders', key: `key-${k}`, payload: { key: `key-${k}`, seq } }),
              );
            }
          }
        }),
      );
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_outbox WHERE state <> 'sent' LIMIT 1")).length === 0,
        'every message to be sent',
        120_000,
        100,
      );
    } finally {
      await stopAll(workers, recorder);
    }

    const { seqs, delivered, duplicates, byWorker } = firstDeliveries(recorder);
    assert.equal(delivered, KEYS * PER_KEY, 'every message was delivered');
    const expected = Array.from({ length: PER_KEY }, (_, i) => i);
    for (let k = 0; k < KEYS; k++) assert.deepEqual(seqs.get(`key-${k}`), expected, `key-${k} in enqueue order`);
    assert.equal(duplicates, 0, 'no lease expired, so nothing was delivered twice');
    assert.ok(byWorker.a > 0 && byWorker.b > 0, `both replicas published (${JSON.stringify(byWorker)})`);
    assert.ok(recorder.requests.length > recorder.accepted().length, 'failures happened and were retried');
  });

  it('four poller processes keep one row of a key at the destination at a time, in order, with rows of a key committed out of id order', async () => {
    // Issue 36: keyed claims lock the keys they take instead of the claim lock, so the four replicas'
    // claims run side by side. Each key's producer commits every third pair of its rows in reverse
    // id order (either order of the pair is then right); the destination records a request that
    // arrives while another of its key is being answered.
    const KEYS_4 = 20;
    const PER_KEY_4 = 24;
    const answering = new Set<string>();
    const overlaps: string[] = [];
    const recorder = new HttpRecorder(async (request) => {
      const { key } = JSON.parse(request.body) as { key: string };
      if (answering.has(key)) overlaps.push(key);
      answering.add(key);
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 4));
      answering.delete(key);
      return Math.random() < 0.1 ? 500 : 200;
    });
    const publishUrl = await recorder.start();
    const outboxOptions = {
      concurrency: 4,
      batchSize: 8,
      pollIntervalMs: 20,
      claimTimeoutMs: 15_000,
      maxAttempts: 1000,
      backoff: { initialMs: 5, maxMs: 30 },
    };
    const workers: WorkerProcess[] = await Promise.all(
      ['a', 'b', 'c', 'd'].map((name) => startWorker({ dbUrl: db.url, publishUrl, name, options: { outbox: outboxOptions } })),
    );
    /** Per key: the slot of each seq (a reversed pair, the first two of each six, shares one). */
    const slotOf = (seq: number) => (seq % 6 === 1 ? seq - 1 : seq);
    try {
      // Five producers, each writing six rows of each of its keys in turn: the first two in two
      // transactions open together, the later id committed first; the other four one by one (a
      // reversed pair holds two of the producer app's twelve connections).
      const produceRows = async (key: string, from: number) => {
        const first = dataSource.createQueryRunner();
        const second = dataSource.createQueryRunner();
        try {
          await first.startTransaction();
          await second.startTransaction();
          await outbox.enqueue(first.manager, { destination: 'orders', key, payload: { key, seq: from } });
          await outbox.enqueue(second.manager, { destination: 'orders', key, payload: { key, seq: from + 1 } });
          await second.commitTransaction();
          await new Promise((resolve) => setTimeout(resolve, Math.random() * 3));
          await first.commitTransaction();
        } finally {
          await first.release();
          await second.release();
        }
        for (let seq = from + 2; seq < from + 6; seq++) {
          await dataSource.transaction((manager) => outbox.enqueue(manager, { destination: 'orders', key, payload: { key, seq } }));
        }
      };
      await Promise.all(
        Array.from({ length: 5 }, async (_, producer) => {
          for (let round = 0; round < PER_KEY_4 / 6; round++) {
            for (let k = producer; k < KEYS_4; k += 5) await produceRows(`four-${k}`, round * 6);
          }
        }),
      );
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_outbox WHERE state <> 'sent' LIMIT 1")).length === 0,
        'every message to be sent',
        120_000,
        100,
      );
    } finally {
      await stopAll(workers, recorder);
    }

    const { seqs, delivered, byWorker } = firstDeliveries(recorder);
    assert.equal(delivered, KEYS_4 * PER_KEY_4, 'every message was delivered');
    for (const [key, keySeqs] of seqs) {
      const list = keySeqs.map(slotOf);
      assert.deepEqual(
        list,
        [...list].sort((a, b) => a - b),
        `${key} in enqueue order (a pair committed in reverse either way)`,
      );
    }
    assert.deepEqual(overlaps, [], 'never two requests of one key at the destination at once');
    assert.deepEqual(Object.keys(byWorker).sort(), ['a', 'b', 'c', 'd'], `every replica published (${JSON.stringify(byWorker)})`);
  });

  it('rows of one key committed out of id order are never claimed two at a time by concurrent claimers', async () => {
    // Several LeaseService instances (separate pools) claim in tight loops while producers commit
    // pairs of rows of one key in reverse id order. A second row of a key claimed while the first
    // is in flight (or a unique-violation from the in-flight index) fails the test. Each round also
    // commits a row without a key first: while no keyed row is unfinished the claims run without
    // the claim lock (issue 36), and a pair committed during such a claim must not be taken by it.
    const claimers = await Promise.all([1, 2, 3].map(() => createTestApp(db.url, { workers: false }, { poolSize: 3 })));
    const inFlight = new Map<string, string>();
    const violations: string[] = [];
    const claimErrors: unknown[] = [];
    let producing = true;
    let claimed = 0;
    try {
      const loops = claimers.map(async (claimer) => {
        const lease = claimer.get(LeaseService);
        const take = claimsOf(claimer);
        while (producing || (await db.query("SELECT 1 FROM queuebox_outbox WHERE state = 'pending' LIMIT 1")).length > 0) {
          let claims: OutboxClaim[] = [];
          try {
            claims = await take.outbox.claim({ limit: 20, leaseMs: 60_000 });
          } catch (error) {
            claimErrors.push(error);
          }
          for (const claim of claims) {
            const key = claim.message.key;
            if (key === null) continue;
            if (inFlight.has(key)) violations.push(`${key}: ${inFlight.get(key)} and ${claim.id} in flight together`);
            inFlight.set(key, claim.id);
          }
          await new Promise((resolve) => setTimeout(resolve, 1));
          for (const claim of claims) {
            if (claim.message.key !== null) inFlight.delete(claim.message.key);
            claimed++;
            await lease.complete(claim);
          }
        }
      });
      for (let round = 0; round < 150; round++) {
        const key = `race-${round}`;
        await dataSource.transaction((manager) => outbox.enqueue(manager, { destination: 'orders', payload: 0 }));
        const runner1 = dataSource.createQueryRunner();
        const runner2 = dataSource.createQueryRunner();
        await runner1.startTransaction();
        await runner2.startTransaction();
        await outbox.enqueue(runner1.manager, { destination: 'orders', key, payload: 1 });
        await outbox.enqueue(runner2.manager, { destination: 'orders', key, payload: 2 });
        await runner2.commitTransaction(); // the later id commits first
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 3));
        await runner1.commitTransaction();
        await runner1.release();
        await runner2.release();
      }
      producing = false;
      await Promise.all(loops);
    } finally {
      producing = false;
      await Promise.all(claimers.map((c) => c.app.close()));
    }
    assert.deepEqual(claimErrors.map(String), []);
    assert.deepEqual(violations, []);
    assert.equal(claimed, 450);
  });
});
