import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { HttpRecorder, type RecordedRequest } from '../support/http-recorder';
import { startWorker, type WorkerProcess } from '../support/processes';

// Issue 27, part 1, with real processes: a replica killed with SIGKILL (an OOM kill, a lost node)
// must not stall its keys for the 5-minute lease. Its instance stops heartbeating; a live replica
// declares it dead after instances.deadAfterMs (15 s by default) and ends its leases; the keys move
// again at once. And a replica paused past deadAfterMs (SIGSTOP) that comes back (SIGCONT) loses
// its claims to the fence: no unexplained duplicate, no order violation among first deliveries.

const KEYS = 6;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A counter of a worker's printed metrics, summed over its label sets. */
const total = (metrics: Record<string, number>, name: string) =>
  Object.entries(metrics)
    .filter(([series]) => series === name || series.startsWith(`${name}{`))
    .reduce((sum, [, value]) => sum + value, 0);

interface Delivery {
  key: string;
  seq: number;
  messageId: string;
  worker: string;
  at: number;
}

function deliveriesOf(requests: RecordedRequest[]): Delivery[] {
  return requests
    .filter((r) => r.status === 200 && r.path === '/orders')
    .map((r) => {
      const { key, seq } = JSON.parse(r.body) as { key: string; seq: number };
      return { key, seq, messageId: String(r.headers['x-message-id']), worker: String(r.headers['x-worker']), at: r.receivedAt };
    });
}

/**
 * Per key, the first delivery of each message in seq order (no order violation), and every
 * message delivered more than once was delivered by `suspect` (its claims were taken over: the
 * duplicates are explained). Returns how many messages were delivered twice.
 */
function assertOrderAndExplainedDuplicates(deliveries: Delivery[], perKey: number, suspect: string): number {
  const byMessage = new Map<string, Delivery[]>();
  for (const d of deliveries) byMessage.set(d.messageId, [...(byMessage.get(d.messageId) ?? []), d]);
  assert.equal(byMessage.size, KEYS * perKey, 'every message delivered');
  let duplicated = 0;
  for (const copies of byMessage.values()) {
    if (copies.length === 1) continue;
    duplicated++;
    assert.ok(
      copies.some((d) => d.worker === suspect),
      `${copies[0].key}/${copies[0].seq} delivered ${copies.length} times, none by ${suspect}: unexplained`,
    );
  }
  for (let k = 0; k < KEYS; k++) {
    const firsts = [...byMessage.values()].map((copies) => copies[0]).filter((d) => d.key === `key-${k}`);
    const seqs = firsts.sort((a, b) => a.at - b.at).map((d) => d.seq);
    assert.deepEqual(
      seqs,
      [...seqs].sort((a, b) => a - b),
      `key-${k}: first deliveries out of order`,
    );
  }
  return duplicated;
}

describeWithDatabase('instances, with real processes: a dead replica’s keys move again in seconds', (db) => {
  let producer: TestApp;
  let recorder: HttpRecorder;
  let publishUrl: string;
  const workers: WorkerProcess[] = [];

  before(async () => {
    producer = await createTestApp(db.url, { workers: false });
    recorder = new HttpRecorder();
    publishUrl = await recorder.start();
  });
  after(async () => {
    for (const w of workers) {
      w.child.kill('SIGCONT');
      w.child.kill('SIGKILL');
    }
    await recorder?.stop();
    await producer?.app.close();
  });

  const enqueue = async (perKey: number) => {
    const dataSource = producer.app.get<DataSource>(getDataSourceToken());
    const messages: { destination: string; key: string; payload: { key: string; seq: number } }[] = [];
    for (let seq = 0; seq < perKey; seq++) {
      for (let k = 0; k < KEYS; k++) messages.push({ destination: 'orders', key: `key-${k}`, payload: { key: `key-${k}`, seq } });
    }
    await dataSource.transaction((manager) => producer.get(OutboxService).enqueueMany(manager, messages));
  };

  const start = async (name: string, options: Record<string, unknown>, extra: { printLogs?: boolean; pullLeaseMs?: number } = {}) => {
    const worker = await startWorker({ dbUrl: db.url, publishUrl, name, options, ...extra });
    workers.push(worker);
    return worker;
  };

  /** The worker whose instance holds the most processing rows now, and the keys it holds. */
  const busiest = async (candidates: { name: string; worker: WorkerProcess }[]) => {
    const rows = await db.query<{ pid: number; key: string }>(
      `SELECT n.pid, o."key" FROM queuebox_outbox o JOIN queuebox_instances n ON n.id = o.claimed_by WHERE o.state = 'processing'`,
    );
    const ranked = candidates
      .map((c) => ({ ...c, keys: rows.filter((r) => r.pid === c.worker.child.pid).map((r) => r.key) }))
      .sort((a, b) => b.keys.length - a.keys.length);
    return ranked[0];
  };

  const unsent = async () =>
    Number((await db.query<{ n: string }>(`SELECT count(*) AS n FROM queuebox_outbox WHERE state <> 'sent'`))[0].n);

  it('kill -9 of one of three replicas: every key it held publishes again within 30 s, with the default options', async (t) => {
    const perKey = 120;
    await db.query('TRUNCATE queuebox_outbox');
    recorder.requests.length = 0;
    // 100 ms per publish: a key moves about 10 messages a second, so the backlog outlasts the takeover.
    recorder.responder = async () => {
      await sleep(100);
      return 200;
    };
    const options = { workers: { outbox: true, relay: false, pull: false } }; // every QueueBox option at its default
    const replicas: { name: string; worker: WorkerProcess }[] = [];
    for (const name of ['r1', 'r2', 'r3']) replicas.push({ name, worker: await start(name, options) });
    await enqueue(perKey);
    await eventually(async () => ((await busiest(replicas))?.keys.length ?? 0) > 0, 'a replica holding a key');
    const victim = await busiest(replicas);
    const heldKeys = [...new Set(victim.keys)];

    victim.worker.child.kill('SIGKILL');
    const killedAt = Date.now();
    assert.equal(await victim.worker.exited, 'SIGKILL');
    await eventually(
      async () => heldKeys.every((key) => deliveriesOf(recorder.requests).some((d) => d.key === key && d.at > killedAt)),
      `every key the killed replica held (${heldKeys.join(', ')}) to publish again`,
      60_000,
      100,
    );
    const recoveredMs = Math.max(
      ...heldKeys.map(
        (key) =>
          Math.min(
            ...deliveriesOf(recorder.requests)
              .filter((d) => d.key === key && d.at > killedAt)
              .map((d) => d.at),
          ) - killedAt,
      ),
    );
    t.diagnostic(
      `kill -9 recovery: the ${heldKeys.length} key(s) the killed replica held published again ${recoveredMs} ms after the kill (default options)`,
    );
    console.log(`kill -9 recovery with default options: ${recoveredMs} ms (target: under 30000 ms; the lease is 300000 ms)`);
    assert.ok(recoveredMs < 30_000, `every key published again within 30 s of the kill: took ${recoveredMs} ms`);

    await eventually(async () => (await unsent()) === 0, 'the backlog to drain', 120_000, 200);
    const survivors = replicas.filter((r) => r.name !== victim.name);
    for (const { worker } of survivors) worker.child.kill('SIGTERM');
    await Promise.all(survivors.map(({ worker }) => worker.exited));
    const deadSeen = survivors.reduce((sum, { worker }) => sum + total(worker.metrics(), 'queuebox_instances_dead_total'), 0);
    assert.equal(deadSeen, 1, 'one survivor declared the killed replica dead');
    assertOrderAndExplainedDuplicates(deliveriesOf(recorder.requests), perKey, victim.name);
    const pids = replicas.map(({ worker }) => worker.child.pid);
    assert.deepEqual(
      await db.query('SELECT pid FROM queuebox_instances WHERE pid = ANY($1)', [pids]),
      [],
      'the survivors deregistered, the dead one was removed',
    );
  });

  it('SIGSTOP past deadAfterMs, then SIGCONT: the survivor takes the keys over, the paused replica’s claims fail their fence, first deliveries stay in order', async (t) => {
    const perKey = 60;
    await db.query('TRUNCATE queuebox_outbox');
    recorder.requests.length = 0;
    // Publishes wait at the gate until the replica to pause is stopped: the claims it held when
    // it was picked are still its own when it stops (with publishes answered at once, it could
    // finish them in between, and then lost no claim).
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => {
      openGate = resolve;
    });
    recorder.responder = async () => {
      await gate;
      await sleep(20);
      return 200;
    };
    const options = { workers: { outbox: true, relay: false, pull: false }, instances: { heartbeatMs: 200, deadAfterMs: 1000 } };
    const replicas = [
      { name: 'p1', worker: await start('p1', options) },
      { name: 'p2', worker: await start('p2', options) },
    ];
    await enqueue(perKey);
    let paused!: NonNullable<Awaited<ReturnType<typeof busiest>>>;
    await eventually(async () => {
      paused = await busiest(replicas);
      return paused.keys.length > 0;
    }, 'a replica holding a key');
    const survivor = replicas.find((r) => r.name !== paused.name)!;
    const heldKeys = [...new Set(paused.keys)];

    paused.worker.child.kill('SIGSTOP');
    const stoppedAt = Date.now();
    openGate();
    await eventually(
      async () =>
        heldKeys.every((key) =>
          deliveriesOf(recorder.requests).some((d) => d.key === key && d.at > stoppedAt && d.worker === survivor.name),
        ),
      'the survivor to publish every key the paused replica held',
      30_000,
      50,
    );
    t.diagnostic(`SIGSTOP: the survivor took the paused replica's ${heldKeys.length} key(s) over after ${Date.now() - stoppedAt} ms`);
    paused.worker.child.kill('SIGCONT');

    await eventually(async () => (await unsent()) === 0, 'the backlog to drain', 60_000, 100);
    // The paused replica heartbeats again under a new registration before it stops.
    await eventually(
      async () => (await db.query('SELECT 1 FROM queuebox_instances WHERE pid = $1', [paused.worker.child.pid])).length === 1,
      'the paused replica to register again',
      10_000,
    );
    for (const { worker } of replicas) worker.child.kill('SIGTERM');
    await Promise.all(replicas.map(({ worker }) => worker.exited));
    assert.ok(total(paused.worker.metrics(), 'queuebox_claims_lost_total') >= 1, JSON.stringify(paused.worker.metrics()));
    assert.equal(total(survivor.worker.metrics(), 'queuebox_instances_dead_total'), 1, JSON.stringify(survivor.worker.metrics()));
    const duplicated = assertOrderAndExplainedDuplicates(deliveriesOf(recorder.requests), perKey, paused.name);
    t.diagnostic(`SIGSTOP/SIGCONT: ${duplicated} message(s) delivered twice, each by the paused replica and the survivor`);
  });

  it('SIGSTOP past deadAfterMs mid-publish, then SIGCONT: the paused replica’s lost "mark sent" blames its own silence and deadAfterMs, not the 300 s lease', async (t) => {
    await db.query('TRUNCATE queuebox_outbox');
    recorder.requests.length = 0;
    // The first publish is held until the test answers it; every later one is answered at once.
    let firstArrived!: (worker: string) => void;
    const arrived = new Promise<string>((resolve) => {
      firstArrived = resolve;
    });
    let answerFirst!: () => void;
    const answered = new Promise<void>((resolve) => {
      answerFirst = resolve;
    });
    let first = true;
    recorder.responder = async (request) => {
      if (!first || request.path !== '/slow') return 200;
      first = false;
      firstArrived(String(request.headers['x-worker']));
      await answered;
      return 200;
    };
    // The default lease (300 s): only the dead-instance sweep can end the claim within this test.
    const options = { workers: { outbox: true, relay: false, pull: false }, instances: { heartbeatMs: 200, deadAfterMs: 1000 } };
    const replicas = [
      { name: 's1', worker: await start('s1', options, { printLogs: true }) },
      { name: 's2', worker: await start('s2', options, { printLogs: true }) },
    ];
    const dataSource = producer.app.get<DataSource>(getDataSourceToken());
    const { messageId } = await dataSource.transaction((manager) =>
      producer.get(OutboxService).enqueue(manager, { destination: 'slow', payload: { n: 1 } }),
    );
    const pausedName = await arrived;
    const paused = replicas.find((r) => r.name === pausedName)!;
    const survivor = replicas.find((r) => r.name !== pausedName)!;
    paused.worker.child.kill('SIGSTOP');
    await eventually(
      async () => (await db.query(`SELECT 1 FROM queuebox_outbox WHERE message_id = $1 AND state = 'sent'`, [messageId])).length === 1,
      'the survivor to declare the paused replica dead and publish the message',
      20_000,
      50,
    );
    answerFirst(); // the paused replica's publish succeeded too: its answer waits in the socket
    paused.worker.child.kill('SIGCONT');
    const lost = `Lost the claim on message ${messageId} before marking it sent`;
    await eventually(
      async () => paused.worker.logs().some((line) => line.message.includes(lost)),
      'the paused replica to log its lost "mark sent"',
      20_000,
      50,
    );
    for (const { worker } of replicas) worker.child.kill('SIGTERM');
    await Promise.all(replicas.map(({ worker }) => worker.exited));
    const line = paused.worker.logs().find((l) => l.message.includes(lost))!;
    t.diagnostic(line.message);
    assert.equal(line.level, 'error', 'a duplicate delivery stays an error');
    assert.match(
      line.message,
      /The lease was not the cause: no heartbeat of this instance got through for about \d+ ms, more than instances\.deadAfterMs \(1000 ms\)/,
    );
    assert.match(line.message, /an event-loop stall or a paused process/);
    assert.match(line.message, /raise instances\.deadAfterMs/);
    assert.ok(!line.message.includes('claimTimeoutMs'), `no advice to raise the lease: ${line.message}`);
    assert.equal(total(survivor.worker.metrics(), 'queuebox_instances_dead_total'), 1, JSON.stringify(survivor.worker.metrics()));
  });

  it('SIGSTOP past deadAfterMs mid-handler, then SIGCONT: the paused replica’s lost pull claim blames its own silence, not the handler’s 60 s lease', async (t) => {
    await db.query(
      'CREATE TABLE IF NOT EXISTS ledger (id serial PRIMARY KEY, aggregate_id text, seq int, idempotency_key text, worker text)',
    );
    await db.query('TRUNCATE queuebox_inbox, ledger');
    const options = {
      workers: { outbox: false, relay: false, pull: true },
      pull: { pollIntervalMs: 50 },
      instances: { heartbeatMs: 200, deadAfterMs: 1000 },
    };
    // A lease far longer than the pause: only the dead-instance sweep can end the claim.
    const replicas = [
      { name: 'h1', worker: await start('h1', options, { printLogs: true, pullLeaseMs: 60_000 }) },
      { name: 'h2', worker: await start('h2', options, { printLogs: true, pullLeaseMs: 60_000 }) },
    ];
    // The handler keeps its transaction open 1.5 s after its write: long enough to pause it mid-way.
    await db.query(`INSERT INTO queuebox_inbox (source, idempotency_key, payload) VALUES ('ledger', 'paused-1', '{"holdMs": 1500}')`);
    let holder: { pid: number } | undefined;
    await eventually(
      async () => {
        [holder] = await db.query<{ pid: number }>(
          `SELECT n.pid FROM queuebox_inbox i JOIN queuebox_instances n ON n.id = i.claimed_by WHERE i.state = 'processing'`,
        );
        return holder !== undefined;
      },
      'a replica to claim the message',
      10_000,
      20,
    );
    const paused = replicas.find((r) => r.worker.child.pid === holder!.pid)!;
    const survivor = replicas.find((r) => r !== paused)!;
    paused.worker.child.kill('SIGSTOP');
    await eventually(
      async () => (await db.query(`SELECT 1 FROM queuebox_inbox WHERE idempotency_key = 'paused-1' AND state = 'processed'`)).length === 1,
      'the survivor to declare the paused replica dead and handle the message',
      20_000,
      50,
    );
    paused.worker.child.kill('SIGCONT');
    const lost = 'Lost the claim on message ledger/paused-1 while';
    await eventually(
      async () => paused.worker.logs().some((line) => line.message.includes(lost)),
      'the paused replica to log its lost claim',
      20_000,
      50,
    );
    for (const { worker } of replicas) worker.child.kill('SIGTERM');
    await Promise.all(replicas.map(({ worker }) => worker.exited));
    const line = paused.worker.logs().find((l) => l.message.includes(lost))!;
    t.diagnostic(line.message);
    assert.match(
      line.message,
      /The lease was not the cause: no heartbeat of this instance got through for about \d+ ms, more than instances\.deadAfterMs \(1000 ms\)/,
    );
    assert.match(line.message, /an event-loop stall or a paused process/);
    assert.ok(!line.message.includes('leaseMs'), `no advice to raise the handler's lease: ${line.message}`);
    assert.deepEqual(
      await db.query(`SELECT worker FROM ledger WHERE idempotency_key = 'paused-1'`),
      [{ worker: survivor.name }],
      'the paused handler’s write rolled back with its lost completion',
    );
  });
});
