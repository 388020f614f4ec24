import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { InboxService } from '../../lib/inbox/inbox.service';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually, type TestDatabase } from '../support/database';
import { startWorker, type WorkerProcess } from '../support/processes';

// Chaos for the paths that take rows beside the claimed one (issue 24): batch pull handlers with
// followers, and the relay with followers. Three worker processes drain a backlog that producers
// write with commits out of id order (several transactions of one aggregate open at once), with
// poison messages, while the test kills workers with SIGKILL, pauses them past their lease
// (SIGSTOP, SIGCONT) and terminates their database backends. Afterwards:
// - I1: every message is finished: the poison ones dead, every other one processed (none dead);
// - exactly once where the database decides it: one business row (pull) or one outbox row (relay)
//   per message, none for a poison one;
// - I4: for two messages of one aggregate where the first had committed before the second was
//   received, the first was handled first.

const LEASE_MS = 1000;
const AGGREGATES = 5;
const PER_AGGREGATE = 60;
const POISON = new Set(['agg-1/5', 'agg-3/31', 'agg-4/0']);
/** More lanes than aggregates: most of the time two transactions of one aggregate are open at once. */
const LANES = 8;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const random = (n: number) => Math.floor(Math.random() * n);

interface Produced {
  key: string;
  aggregate: string;
  seq: number;
  /** The logical clock when its receive started, and after its transaction committed. */
  started: number;
  committed: number;
  id?: string;
}

/**
 * Receives AGGREGATES x PER_AGGREGATE messages on LANES concurrent lanes. Each message goes in a
 * transaction held open 0-250 ms, and the lanes take the messages of an aggregate in turn, so rows
 * of one aggregate commit out of id order all the time.
 */
async function produce(app: TestApp, source: string): Promise<Produced[]> {
  const dataSource = app.app.get<DataSource>(getDataSourceToken());
  const inbox = app.get(InboxService);
  const queue: Produced[] = [];
  for (let seq = 0; seq < PER_AGGREGATE; seq++)
    for (let a = 0; a < AGGREGATES; a++) queue.push({ key: `agg-${a}/${seq}`, aggregate: `agg-${a}`, seq, started: 0, committed: 0 });
  const done: Produced[] = [];
  let clock = 0;
  await Promise.all(
    Array.from({ length: LANES }, async () => {
      for (let next = queue.shift(); next; next = queue.shift()) {
        const message = next;
        message.started = ++clock;
        await dataSource.transaction(async (manager) => {
          const { id } = await inbox.receive(
            {
              source,
              idempotencyKey: message.key,
              aggregateId: message.aggregate,
              payload: { seq: message.seq, poison: POISON.has(message.key) },
            },
            manager,
          );
          message.id = id;
          await sleep(random(250));
        });
        message.committed = ++clock;
        done.push(message);
      }
    }),
  );
  return done;
}

interface Chaos {
  kills: number;
  pauses: number;
  terminations: number;
}

/**
 * Runs faults on `workers` until `until` settles and each kind ran once; replaces a killed worker
 * with a new one. Stops when `signal` aborts (its case ended, a timeout included).
 */
async function chaos(
  db: TestDatabase,
  workers: WorkerProcess[],
  start: (name: string) => Promise<WorkerProcess>,
  until: Promise<unknown>,
  signal: AbortSignal,
) {
  const done: Chaos = { kills: 0, pauses: 0, terminations: 0 };
  let finished = false;
  const finish = () => {
    finished = true;
  };
  until.then(finish, finish);
  let round = 0;
  // Until the backlog is drained, and each kind of fault happened at least once.
  while (!signal.aborted && (!finished || done.kills === 0 || done.pauses === 0 || done.terminations === 0)) {
    await sleep(300 + random(300));
    const i = random(workers.length);
    const action = round++ % 3;
    if (action === 0 && done.kills < 3) {
      workers[i].child.kill('SIGKILL');
      await workers[i].exited;
      workers[i] = await start(`w${workers.length + done.kills}-restarted`);
      done.kills++;
    } else if (action === 1 && done.pauses < 3) {
      // Past the lease: its claims expire and are taken by the others; when it resumes, its
      // completions fail their fence and roll back.
      workers[i].child.kill('SIGSTOP');
      await sleep(LEASE_MS * 1.6);
      workers[i].child.kill('SIGCONT');
      done.pauses++;
    } else if (done.terminations < 5) {
      const terminated = await db.query<{ ok: boolean }>(
        "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE datname = $1 AND application_name = 'queuebox-chaos-worker'",
        [db.name],
      );
      if (terminated.length > 0) done.terminations++;
    }
  }
  return done;
}

/**
 * Pairs (a, b) of one aggregate where a committed before b was received, and b was handled first:
 * before a when both were handled (`handled`: key -> handling time, in handling order), or before
 * a's last claim when a ended dead (`dead`: key -> the time of its last claim; I4: a failing row
 * blocks its aggregate until it is dead).
 */
function orderViolations(produced: Produced[], handled: Map<string, Date>, dead: Map<string, Date>): string[] {
  const position = new Map([...handled.keys()].map((key, i) => [key, i]));
  const violations: string[] = [];
  for (const a of produced) {
    for (const b of produced) {
      if (a.aggregate !== b.aggregate || a.committed >= b.started) continue;
      const pa = position.get(a.key);
      const pb = position.get(b.key);
      if (pa !== undefined && pb !== undefined && pb < pa) violations.push(`${b.key} before ${a.key}`);
      const diedAt = dead.get(a.key);
      const bAt = handled.get(b.key);
      if (diedAt && bAt && bAt < diedAt) violations.push(`${b.key} before ${a.key} was dead`);
    }
  }
  return violations;
}

/** Rows of one aggregate that committed out of id order (a later id committed first): the test made them. */
function outOfOrderCommits(produced: Produced[]): number {
  let count = 0;
  for (const a of produced)
    for (const b of produced)
      if (a.aggregate === b.aggregate && BigInt(a.id as string) < BigInt(b.id as string) && b.committed < a.committed) count++;
  return count;
}

interface CaseScope {
  signal: AbortSignal;
  /** Starts a worker that the end of the case kills. */
  spawnWorker(env: Omit<Parameters<typeof startWorker>[0], 'dbUrl' | 'signal'>): Promise<WorkerProcess>;
  /** Kills every worker the case started, still starting ones included, and waits until they exited. */
  close(): Promise<void>;
}

/**
 * What one case starts, ended by `close()` however the case ends (passed, failed, timed out): a
 * worker left running keeps the test process from exiting and writes into the next case.
 */
function caseScope(dbUrl: string): CaseScope {
  const end = new AbortController();
  const started: Promise<WorkerProcess>[] = [];
  return {
    signal: end.signal,
    spawnWorker(env) {
      const worker = startWorker({ ...env, dbUrl, signal: end.signal });
      started.push(worker);
      return worker;
    },
    async close() {
      end.abort();
      await Promise.all(
        started.map((worker) =>
          worker.then(
            (w) => w.exited,
            () => undefined,
          ),
        ),
      );
    },
  };
}

describeWithDatabase('chaos: followers under process and connection faults, out-of-order commits and poison', (db) => {
  let producer: TestApp;
  /** The running case's workers; a case takes it once, at its start (a timed-out case's body runs on beside the next case). */
  let scope: CaseScope;

  before(async () => {
    await db.query(
      'CREATE TABLE ledger (id serial PRIMARY KEY, aggregate_id text, seq int, idempotency_key text, worker text, at timestamptz DEFAULT clock_timestamp())',
    );
    producer = await createTestApp(db.url, {
      workers: false,
      pull: { sources: ['ledger-batch'] },
      inbox: { relay: { routes: { orders: () => [] } } },
    });
  });
  after(async () => {
    await producer?.app.close();
  });
  // Each case starts from empty tables, whatever the one before it left.
  beforeEach(async () => {
    scope = caseScope(workerUrl());
    await db.query('TRUNCATE queuebox_inbox, queuebox_outbox, ledger');
  });
  afterEach(() => scope.close());

  const workerUrl = () => {
    const url = new URL(db.url);
    url.searchParams.set('application_name', 'queuebox-chaos-worker');
    return url.toString();
  };

  async function run(kind: 'pull' | 'relay', { spawnWorker, signal }: CaseScope) {
    const options =
      kind === 'pull'
        ? { workers: { outbox: false, relay: false, pull: true }, pull: { pollIntervalMs: 20 } }
        : {
            workers: { outbox: false, relay: true, pull: false },
            inbox: {
              relay: {
                claimTimeoutMs: LEASE_MS,
                pollIntervalMs: 20,
                batchSize: 10,
                // Few followers: claims whose room is used up by the claim before them (heads
                // alone) alternate with claims that read some, two forward transactions at once.
                maxFollowers: 8,
                maxAttempts: 8,
                backoff: { initialMs: 10, maxMs: 100 },
              },
            },
          };
    // Each batch takes a while, so claims wait for a batch slot and their followers are read well
    // after the claim: time for an earlier row of the aggregate to commit in between.
    const start = (name: string) => spawnWorker({ name, pullLeaseMs: LEASE_MS, pullMaxAttempts: 8, batchHoldMs: 100, options });
    const workers = await Promise.all(['w0', 'w1', 'w2'].map(start));
    const source = kind === 'pull' ? 'ledger-batch' : 'orders';
    const production = produce(producer, source);
    const drained = production.then(() =>
      eventually(
        async () => {
          signal.throwIfAborted();
          return (
            (await db.query("SELECT 1 FROM queuebox_inbox WHERE source = $1 AND state IN ('pending', 'processing') LIMIT 1", [source]))
              .length === 0
          );
        },
        'every message to be finished',
        90_000,
        50,
      ),
    );
    const faults = await chaos(db, workers, start, drained, signal);
    // Stopped the way a deployment stops them, so the states read below are final.
    for (const worker of workers) worker.child.kill('SIGTERM');
    await Promise.all(workers.map((worker) => worker.exited));
    const produced = await production;
    console.log(
      `chaos (${kind}): ${produced.length} messages, ${outOfOrderCommits(produced)} pairs committed out of id order, ${faults.kills} kills, ${faults.pauses} pauses past the lease, ${faults.terminations} backend terminations`,
    );
    assert.ok(outOfOrderCommits(produced) > 0, 'rows of one aggregate committed out of id order');
    assert.ok(faults.kills + faults.pauses + faults.terminations >= 3, 'faults happened');
    const states = await db.query<{ idempotency_key: string; state: string; attempts: number }>(
      'SELECT idempotency_key, state, attempts FROM queuebox_inbox WHERE source = $1',
      [source],
    );
    assert.equal(states.length, AGGREGATES * PER_AGGREGATE);
    const dead = new Map<string, Date>();
    for (const row of await db.query<{ idempotency_key: string; claimed_at: Date }>(
      "SELECT idempotency_key, claimed_at FROM queuebox_inbox WHERE source = $1 AND state = 'dead'",
      [source],
    ))
      dead.set(row.idempotency_key, new Date(row.claimed_at));
    for (const row of states) {
      assert.equal(
        row.state,
        POISON.has(row.idempotency_key) ? 'dead' : 'processed',
        `${row.idempotency_key}: ${row.state} after ${row.attempts} attempts`,
      );
    }
    return { produced, dead };
  }

  it('a claim that lost its lease while an earlier row of its aggregate committed is taken again, and its followers do not pass that row', {
    timeout: 60_000,
  }, async () => {
    const { spawnWorker } = scope;
    const dataSource = producer.app.get<DataSource>(getDataSourceToken());
    const inbox = producer.get(InboxService);
    const message = (key: string) => ({ source: 'ledger-batch', idempotencyKey: key, aggregateId: 'late', payload: {} });
    const states = async () =>
      Object.fromEntries(
        (
          await db.query<{ idempotency_key: string; state: string }>(
            "SELECT idempotency_key, state FROM queuebox_inbox WHERE aggregate_id = 'late' ORDER BY id",
          )
        ).map((row) => [row.idempotency_key, row.state]),
      );
    // r1 is received in a transaction left open (the lower id); r2 commits and a worker, slow on
    // every batch, claims it (r1 is invisible to the claim).
    const open = dataSource.createQueryRunner();
    await open.connect();
    await open.startTransaction();
    let doomed: WorkerProcess | undefined;
    try {
      await inbox.receive(message('r1'), open.manager);
      await inbox.receive(message('r2'));
      const options = { workers: { outbox: false, relay: false, pull: true }, pull: { pollIntervalMs: 20 } };
      doomed = await spawnWorker({ name: 'doomed', pullLeaseMs: LEASE_MS, batchHoldMs: 60_000, options });
      await eventually(async () => (await states()).r2 === 'processing', 'the slow worker to claim r2');
      // It dies holding r2; r1 commits; then r3 is received.
      doomed.child.kill('SIGKILL');
      await doomed.exited;
      await open.commitTransaction();
      await inbox.receive(message('r3'));
      await spawnWorker({ name: 'survivor', pullLeaseMs: LEASE_MS, options });
      await eventually(async () => Object.values(await states()).every((state) => state === 'processed'), 'every row processed', 20_000);
    } finally {
      if (open.isTransactionActive) await open.rollbackTransaction();
      await open.release();
    }
    const ledger = await db.query<{ idempotency_key: string }>(
      "SELECT idempotency_key FROM ledger WHERE aggregate_id = 'late' ORDER BY id",
    );
    assert.deepEqual(
      ledger.map((row) => row.idempotency_key),
      ['r2', 'r1', 'r3'],
      'r2 again (its claim expired), alone: r1 committed before r3 was received, so r3 comes after r1',
    );
  });

  it("relay: a poison follower cuts its head's chain; the head is forwarded, the follower dies on its own attempts, the row behind it waits", {
    timeout: 60_000,
  }, async () => {
    const { spawnWorker } = scope;
    const dataSource = producer.app.get<DataSource>(getDataSourceToken());
    const inbox = producer.get(InboxService);
    // One transaction, so the relay finds P and N as followers of H.
    await dataSource.transaction(async (manager) => {
      for (const [key, poison] of [
        ['H', false],
        ['P', true],
        ['N', false],
      ] as const)
        await inbox.receive({ source: 'orders', idempotencyKey: `chain-${key}`, aggregateId: 'chain', payload: { poison } }, manager);
    });
    const relay = await spawnWorker({
      name: 'relay',
      options: {
        workers: { outbox: false, relay: true, pull: false },
        inbox: { relay: { claimTimeoutMs: LEASE_MS, pollIntervalMs: 20, maxAttempts: 3, backoff: { initialMs: 10, maxMs: 10 } } },
      },
    });
    const rows = () =>
      db.query<{ idempotency_key: string; state: string; attempts: number; claimed_at: Date }>(
        "SELECT idempotency_key, state, attempts, claimed_at FROM queuebox_inbox WHERE aggregate_id = 'chain' ORDER BY id",
      );
    await eventually(
      async () => (await rows()).every((row) => row.state === 'processed' || row.state === 'dead'),
      'the chain to finish',
      20_000,
    );
    relay.child.kill('SIGTERM');
    await relay.exited;
    const [h, p, n] = await rows();
    assert.deepEqual(
      [h, p, n].map((row) => `${row.idempotency_key}:${row.state}/${row.attempts}`),
      ['chain-H:processed/1', 'chain-P:dead/3', 'chain-N:processed/1'],
    );
    const forwarded = await db.query<{ causation: string; created_at: Date }>(
      "SELECT headers->>'X-Causation-Id' AS causation, created_at FROM queuebox_outbox WHERE key = 'chain' ORDER BY id",
    );
    assert.deepEqual(
      forwarded.map((row) => row.causation),
      ['chain-H', 'chain-N'],
    );
    assert.ok(new Date(forwarded[1].created_at) > new Date(p.claimed_at), 'N was forwarded after P died, not past it (I4)');
  });

  it('batch pull handlers with followers: each message handled once, in order, the poison ones dead', { timeout: 180_000 }, async () => {
    const { produced, dead } = await run('pull', scope);
    const ledger = await db.query<{ idempotency_key: string; at: Date }>('SELECT idempotency_key, at FROM ledger ORDER BY id');
    const keys = ledger.map((row) => row.idempotency_key);
    assert.equal(new Set(keys).size, keys.length, 'no business write committed twice');
    assert.equal(keys.length, AGGREGATES * PER_AGGREGATE - POISON.size, 'every message but the poison ones committed its write');
    assert.deepEqual(orderViolations(produced, new Map(ledger.map((row) => [row.idempotency_key, new Date(row.at)])), dead), []);
  });

  it('the relay with followers: each message forwarded once (I6), in order, the poison ones dead', { timeout: 180_000 }, async () => {
    const { produced, dead } = await run('relay', scope);
    const forwarded = await db.query<{ causation: string; created_at: Date }>(
      `SELECT headers->>'X-Causation-Id' AS causation, created_at FROM queuebox_outbox WHERE destination = 'billing' ORDER BY id`,
    );
    const keys = forwarded.map((row) => row.causation);
    assert.equal(new Set(keys).size, keys.length, 'no inbox message forwarded twice');
    assert.equal(keys.length, AGGREGATES * PER_AGGREGATE - POISON.size, 'every message but the poison ones forwarded');
    assert.deepEqual(orderViolations(produced, new Map(forwarded.map((row) => [row.causation, new Date(row.created_at)])), dead), []);
  });
});
