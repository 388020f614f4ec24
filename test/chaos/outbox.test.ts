import assert from 'node:assert/strict';
import { before, it } from 'node:test';
import { KEY_LOCKS_PER_CLAIM } from '../../lib/dialects/postgres/claim-functions.sql';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { useChaosBench } from '../support/chaos-bench';
import { describeWithDatabase, eventually } from '../support/database';
import type { RecordedRequest } from '../support/http-recorder';
import { startWorker } from '../support/processes';

// The outbox poller's lean path (issue 29): one renewal timer per claimed batch (LeaseKeeperGroup),
// one timer for every publish's timeout (PublishDeadlines), completions written in batches that
// return only the claims they lost. Worker processes publish to a local HTTP server:
// - claims that wait in their batch for longer than their lease are kept by the batch's renewals:
//   each published once, on its first attempt, no claim lost;
// - three workers drain a backlog written with commits out of id order (several transactions of
//   one key open at once), with a poison message (it kills its worker) and publishes that hang
//   past publishTimeout or fail, while the test kills workers with SIGKILL, pauses them past their
//   lease (SIGSTOP, SIGCONT) and terminates their database backends. Afterwards every message is
//   sent (the poison one dead), each was accepted by the destination at least once, and for two
//   messages of one key where the first had committed before the second was enqueued, the first
//   was accepted first (I4);
// - the same with messages without a key only: every claim then runs without the claim lock
//   (issue 36), side by side across the workers;
// - the keyed run again with `outbox.sentRows: 'delete'` (issue 36): the completions delete the
//   rows, so afterwards only the poison row is left, and the deliveries alone prove I1 and I4;
// - the keyed run again with a publisher that has `publishBatch` (issue 36), half the workers
//   without followers: claimed messages go out in batch calls whose requests hang, fail or are
//   slow one by one, and whose calls a kill, a pause or a poison message interrupts;
// - and with a publisher that `keepsBatchOrder` (its calls send one request after another and stop
//   at a failure): a head's followers go out in its calls too.

const LEASE_MS = 1500;
/** More lanes than keys: most of the time two transactions of one key are open at once. */
const LANES = 8;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const random = (n: number) => Math.floor(Math.random() * n);

interface Produced {
  name: string;
  key: string | null;
  /** The logical clock when its enqueue started, and after its transaction committed. */
  started: number;
  committed: number;
}

/** The `name` a published message carries in its payload (the HTTP publisher's body is the payload's JSON). */
function nameOf(request: RecordedRequest): string {
  return (JSON.parse(request.body) as { name: string }).name;
}

describeWithDatabase('chaos: the outbox poller under process and connection faults, hung publishes and poison', (db) => {
  const bench = useChaosBench(db);
  const { workers } = bench;
  let outbox: OutboxService;

  before(() => {
    outbox = bench.producer.get(OutboxService);
  });

  const workerUrl = () => {
    const url = new URL(db.url);
    url.searchParams.set('application_name', 'queuebox-chaos-worker');
    return url.toString();
  };

  it('claims that wait in their batch longer than their lease are kept by the batch renewals: each published once, on its first attempt', {
    timeout: 60_000,
  }, async () => {
    const MESSAGES = 10;
    // One slot, ten claims of one statement, each publish 500 ms: the last waits 4.5 s, three leases.
    bench.recorder.responder = async () => {
      await sleep(500);
      return 200;
    };
    await bench.dataSource.transaction((manager) =>
      outbox.enqueueMany(
        manager,
        Array.from({ length: MESSAGES }, (_, n) => ({ destination: 'slow', payload: { name: `slow-${n}` } })),
      ),
    );
    const worker = await startWorker({
      dbUrl: workerUrl(),
      publishUrl: bench.publishUrl,
      name: 'patient',
      options: { outbox: { claimTimeoutMs: LEASE_MS, publishTimeout: 1000, pollIntervalMs: 20, concurrency: 1, batchSize: MESSAGES } },
    });
    workers.push(worker);
    await eventually(
      async () => (await db.query("SELECT 1 FROM queuebox_outbox WHERE destination = 'slow' AND state <> 'sent'")).length === 0,
      'every slow message to be sent',
      30_000,
    );
    worker.child.kill('SIGTERM');
    await worker.exited;
    workers.length = 0;
    const rows = await db.query<{ attempts: number }>("SELECT attempts FROM queuebox_outbox WHERE destination = 'slow'");
    assert.deepEqual(
      rows.map((row) => row.attempts),
      Array(MESSAGES).fill(1),
      'every claim kept from its claim to its completion',
    );
    const delivered = bench.recorder.accepted().filter((request) => request.path === '/slow');
    assert.equal(delivered.length, MESSAGES, 'each published once');
    assert.equal(worker.metrics().queuebox_claims_lost_total ?? 0, 0, 'no claim lost');
  });

  /**
   * Three workers drain `keys` x `perKey` keyed messages and `unkeyed` without a key, then the
   * poison message, under faults. Without keys every claim runs without the claim lock (issue 36).
   */
  async function threeWorkersUnderFaults({
    keys,
    perKey,
    unkeyed,
    sentRows = 'keep',
    publishBatch = false,
  }: {
    keys: number;
    perKey: number;
    unkeyed: number;
    sentRows?: 'keep' | 'delete';
    /**
     * The workers' publisher has `publishBatch`: side by side (`true`; the odd workers take no
     * followers, so that their keyed claims go in batches too), or `ordered` (`keepsBatchOrder`:
     * followers go in its calls).
     */
    publishBatch?: boolean | 'ordered';
  }): Promise<void> {
    // Each run reads only its own rows and deliveries.
    await db.query('TRUNCATE queuebox_outbox');
    const firstRequest = bench.recorder.requests.length;
    // Most publishes answer at once; some slowly (renewals of the claims behind them), some fail
    // (a retry), some hang past publishTimeout (the shared deadline timer aborts them: a retry).
    const answers = new Map<string, number>();
    bench.recorder.responder = async (request) => {
      const name = nameOf(request);
      const attempt = (answers.get(name) ?? 0) + 1;
      answers.set(name, attempt);
      const roll = random(100);
      if (attempt === 1 && roll < 3) return 'hang';
      if (attempt === 1 && roll < 8) return 500;
      if (roll < 15) await sleep(100 + random(400));
      return 200;
    };
    const options = {
      outbox: {
        claimTimeoutMs: LEASE_MS,
        publishTimeout: 700,
        pollIntervalMs: 20,
        concurrency: 4,
        batchSize: 10,
        maxAttempts: 6,
        backoff: { initialMs: 10, maxMs: 100 },
        sentRows,
      },
    };
    // The workers of slots 0 and 2 claim more rows than a claim takes key locks for: their keyed
    // claims take the claim lock alone while slot 1's lock keys (PostgreSQL's claim functions,
    // migration 013). A worker's options go with its slot, so a replacement keeps them: by name
    // parity, as before, three kills could leave no worker of a kind (a batch run once had no
    // follower-taking worker left, and its followers check failed).
    const bigBatches = { ...options, outbox: { ...options.outbox, batchSize: KEY_LOCKS_PER_CLAIM + 20 } };
    const noFollowers = { ...options, outbox: { ...options.outbox, maxFollowers: 0 } };
    let started = 0;
    const start = (name: string, slot: number) =>
      startWorker({
        dbUrl: workerUrl(),
        publishUrl: bench.publishUrl,
        name,
        options: slot % 2 === 0 ? bigBatches : publishBatch === true ? noFollowers : options,
        waitReady: false,
        publishBatch,
      });
    workers.splice(0, workers.length, ...(await Promise.all(['w0', 'w1', 'w2'].map(start))));

    // The backlog: keys x perKey keyed messages on LANES lanes, each in a transaction held open
    // 0-150 ms (rows of one key commit out of id order), and `unkeyed` without a key. The poison
    // message comes once they are drained: a crash costs an attempt to every row its worker held,
    // so with the backlog it would take innocent rows to their maxAttempts too.
    const queue: Produced[] = [];
    for (let seq = 0; seq < perKey; seq++)
      for (let k = 0; k < keys; k++) queue.push({ name: `k${k}/${seq}`, key: `k${k}`, started: 0, committed: 0 });
    for (let n = 0; n < unkeyed; n++) queue.splice(random(queue.length), 0, { name: `u/${n}`, key: null, started: 0, committed: 0 });
    const produced: Produced[] = [];
    let clock = 0;
    const production = Promise.all(
      Array.from({ length: LANES }, async () => {
        for (let next = queue.shift(); next; next = queue.shift()) {
          const message = next;
          message.started = ++clock;
          await bench.dataSource.transaction(async (manager) => {
            await outbox.enqueue(manager, {
              destination: message.name === 'poison' ? 'poison' : 'chaos',
              key: message.key ?? undefined,
              payload: { name: message.name },
            });
            await sleep(random(150));
          });
          message.committed = ++clock;
          produced.push(message);
        }
      }),
    );
    const unfinished = async () =>
      (await db.query("SELECT 1 FROM queuebox_outbox WHERE state IN ('pending', 'processing') LIMIT 1")).length > 0;
    const drained = production
      .then(() => eventually(async () => !(await unfinished()), 'every message to be finished', 120_000, 50))
      .then(async () => {
        const poison: Produced = { name: 'poison', key: null, started: ++clock, committed: 0 };
        await bench.dataSource.transaction((manager) => outbox.enqueue(manager, { destination: 'poison', payload: { name: 'poison' } }));
        poison.committed = ++clock;
        produced.push(poison);
        await eventually(async () => !(await unfinished()), 'the poison message to die', 120_000, 50);
      });
    let finished = false;
    void drained.finally(() => {
      finished = true;
    });

    // Faults until the backlog is drained and each kind happened once; a worker that died (killed
    // here, or by the poison message) is replaced.
    const faults = { kills: 0, pauses: 0, terminations: 0, poisoned: 0 };
    let round = 0;
    while (!finished || faults.kills === 0 || faults.pauses === 0 || faults.terminations === 0) {
      await sleep(300 + random(300));
      for (const [i, worker] of workers.entries()) {
        if (worker.child.exitCode === null && worker.child.signalCode === null) continue;
        faults.poisoned++;
        workers[i] = await start(`w${3 + started++}`, i);
      }
      const i = random(workers.length);
      const action = round++ % 3;
      if (action === 0 && faults.kills < 3) {
        workers[i].child.kill('SIGKILL');
        await workers[i].exited;
        workers[i] = await start(`w${3 + started++}`, i);
        faults.kills++;
      } else if (action === 1 && faults.pauses < 3) {
        // Past the lease: its claims expire and are taken by the others; when it resumes, its
        // renewals and completions fail their fence.
        workers[i].child.kill('SIGSTOP');
        await sleep(LEASE_MS * 1.6);
        workers[i].child.kill('SIGCONT');
        faults.pauses++;
      } else if (faults.terminations < 5) {
        const terminated = await db.query(
          "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE datname = $1 AND application_name = 'queuebox-chaos-worker'",
          [db.name],
        );
        if (terminated.length > 0) faults.terminations++;
      }
    }
    await drained;
    for (const worker of workers) worker.child.kill('SIGTERM');
    await Promise.all(workers.map((worker) => worker.exited));
    workers.length = 0;
    await production;

    const outOfOrder = produced.filter((a) =>
      produced.some((b) => a.key !== null && a.key === b.key && a.started < b.started && b.committed < a.committed),
    ).length;
    const accepted = bench.recorder.requests
      .slice(firstRequest)
      .filter((request) => request.path === '/chaos' && request.status >= 200 && request.status < 300);
    const names = accepted.map(nameOf);
    // A follower (outbox.maxFollowers, on by default) is marked sent with its head and never holds a
    // claim token of its own; sent rows are deleted in the 'delete' runs.
    const [{ followers }] = await db.query<{ followers: number }>(
      "SELECT count(*)::int AS followers FROM queuebox_outbox WHERE destination = 'chaos' AND state = 'sent' AND claim_token IS NULL",
    );
    const batched = accepted.filter((request) => request.headers['x-batch'] === '1').length;
    console.log(
      `chaos (outbox${publishBatch ? `, publishBatch${publishBatch === 'ordered' ? ' keeping order' : ''}` : ''}): ${publishBatch ? `${batched} of ${accepted.length} accepted requests from publishBatch calls; ` : ''}${produced.length} messages, ${outOfOrder} committed after a later one of their key, ${faults.kills} kills, ${faults.pauses} pauses past the lease, ${faults.terminations} backend terminations, ${faults.poisoned} workers killed by the poison message; ${names.length - new Set(names).size} duplicate deliveries; ${sentRows === 'keep' ? `${followers} sent as followers of their key's head` : 'followers not counted (sent rows deleted)'}`,
    );
    if (keys > 0) assert.ok(outOfOrder > 0, 'rows of one key committed out of enqueue order');
    if (keys > 0 && sentRows === 'keep') assert.ok(followers > 0, 'some rows went out as followers of their head');
    // How many go through calls depends on which workers the faults hit (slot 1's worker batches its keyed claims): 57 to 154 of 250-300 seen.
    if (publishBatch) assert.ok(batched > 0, `${batched} of ${accepted.length} accepted from publishBatch calls`);
    assert.ok(faults.poisoned > 0, 'the poison message killed workers');

    const states = await db.query<{ name: string; state: string; attempts: number }>(
      "SELECT payload->>'name' AS name, state, attempts FROM queuebox_outbox WHERE destination IN ('chaos', 'poison')",
    );
    if (sentRows === 'delete') {
      // Every sent row was deleted by its completion; the dead one stays.
      assert.deepEqual(
        states.map((row) => `${row.name}: ${row.state}`),
        ['poison: dead'],
      );
    } else {
      assert.equal(states.length, produced.length);
      for (const row of states)
        assert.equal(row.state, row.name === 'poison' ? 'dead' : 'sent', `${row.name}: ${row.state} after ${row.attempts} attempts`);
    }
    const delivered = new Set(names);
    const missing = produced.filter((m) => m.name !== 'poison' && !delivered.has(m.name)).map((m) => m.name);
    assert.deepEqual(missing, [], 'every message accepted by the destination at least once');

    // I4 on the first accepted delivery of each message.
    const first = new Map<string, number>();
    for (const [i, name] of names.entries()) if (!first.has(name)) first.set(name, i);
    const violations: string[] = [];
    for (const a of produced)
      for (const b of produced)
        if (a.key !== null && a.key === b.key && a.committed < b.started && (first.get(b.name) ?? 0) < (first.get(a.name) ?? 0))
          violations.push(`${b.name} before ${a.name}`);
    assert.deepEqual(violations, []);
  }

  it('three workers: every message sent at least once and in commit order per key, the poison one dead', { timeout: 180_000 }, () =>
    threeWorkersUnderFaults({ keys: 5, perKey: 40, unkeyed: 50 }),
  );

  it(
    'three workers claiming without the claim lock (no keys): every message sent at least once, the poison one dead',
    {
      timeout: 180_000,
    },
    () => threeWorkersUnderFaults({ keys: 0, perKey: 0, unkeyed: 400 }),
  );

  it(
    "three workers deleting sent rows (outbox.sentRows 'delete'): every message sent at least once and in commit order per key, only the poison row left",
    { timeout: 180_000 },
    () => threeWorkersUnderFaults({ keys: 5, perKey: 40, unkeyed: 50, sentRows: 'delete' }),
  );

  it(
    'three workers publishing in batches (publishBatch), half without followers: every message sent at least once and in commit order per key, the poison one dead',
    { timeout: 180_000 },
    () => threeWorkersUnderFaults({ keys: 5, perKey: 40, unkeyed: 50, publishBatch: true }),
  );

  it(
    'three workers publishing in ordered batches (keepsBatchOrder: followers in the calls): every message sent at least once and in commit order per key, the poison one dead',
    { timeout: 180_000 },
    () => threeWorkersUnderFaults({ keys: 5, perKey: 40, unkeyed: 50, publishBatch: 'ordered' }),
  );
});
