// pg-boss 12: one queue, `bench`; jobs inserted with boss.insert/boss.send through the `db`
// option inside the producer's own transaction; worker = one work() call with localConcurrency.
import { randomFillSync } from 'node:crypto';
import { PgBoss } from 'pg-boss';
import { pg, withClient } from '../pg.mjs';
import { packageVersion } from '../report.mjs';

const QUEUE = 'bench';

/**
 * Time-ordered ids (UUIDv7, RFC 9562), strictly increasing in the order they are made (method 3:
 * when the millisecond repeats, a 12-bit counter in `rand_a` goes up, and past 4,095 the
 * timestamp is moved one millisecond on), as an application's UUIDv7 library makes them. The
 * producer makes them in enqueue order, so a key's jobs inserted in one statement (they tie on
 * `created_on`) are ordered by id, the tie-break of pg-boss's key_strict_fifo heads.
 */
function uuidV7Generator() {
  let lastMs = 0;
  let counter = 0;
  const random = Buffer.alloc(8);
  return () => {
    let ms = Date.now();
    if (ms <= lastMs) {
      counter++;
      if (counter > 0xfff) {
        lastMs++;
        counter = 0;
      }
      ms = lastMs;
    } else {
      lastMs = ms;
      counter = 0;
    }
    randomFillSync(random);
    const hex = ms.toString(16).padStart(12, '0');
    const randA = (0x7000 | counter).toString(16);
    random[0] = (random[0] & 0x3f) | 0x80; // variant 10
    const randB = random.toString('hex');
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${randA}-${randB.slice(0, 4)}-${randB.slice(4, 16)}`;
  };
}

/**
 * The configurations run. Unordered workloads (W2, W3): one, jobs inserted without ids. Ordered
 * ones (W1, W4): jobs inserted with time-ordered ids (UUIDv7, made by the producer in enqueue
 * order), which keeps each key's order, and beside it jobs inserted without ids, as pg-boss's docs
 * insert them, fast but reordering: the ids are then random UUIDv4, and a key's jobs of one
 * `insert()` tie on `created_on`, so its head among them is random (a fifth of W1 out of order).
 * `BENCH_REORDERING_PEERS=0` leaves the reordering one out.
 */
function variants(workload, settings) {
  if (!workload.ordered) return [{ id: 'std', label: null, keepsOrder: null, ids: 'random' }];
  const ordered = [{ id: 'v7', label: 'UUIDv7 ids', keepsOrder: true, ids: 'v7' }];
  if (settings.reorderingPeers) ordered.push({ id: 'v4', label: 'random ids: fast but reordering', keepsOrder: false, ids: 'random' });
  return ordered;
}

/**
 * W1/W4: the `key_strict_fifo` policy, FIFO per singletonKey (key = the message's key): a key's
 * next job is fetchable only when no job of that key is active, in retry or failed (a unique
 * index), and its head is the oldest by (created_on, id). Unordered workloads: a standard queue.
 * Every queue has `notify: true`, so a job's insert wakes the workers (with `useListenNotify` on
 * the worker's instance), as graphile-worker and QueueBox are woken.
 */
const policy = (workload) => (workload.ordered ? 'key_strict_fifo' : 'standard');

/**
 * One work() call with `localConcurrency` 10 (the shared concurrency): 10 workers, each fetching
 * up to batchSize jobs, running the handler on the batch and completing it in one statement.
 * batchSize 100, or 10 where order matters: a key_strict_fifo fetch returns at most one job per
 * key (100 keys here), and in a 2,000-message W1 trial 10 drained at 828 msg/s, 100 at 388.
 * With `burstWhenBatchFull` a worker whose last fetch came back full fetches again at once
 * instead of waiting out its polling interval (0.5 s, the least pg-boss accepts). The polling
 * interval while NOTIFY is active (`notifyPollingIntervalSeconds`, 30 s by default) is 0.5 s too:
 * on a key_strict_fifo queue a completion makes its key's next job fetchable without a NOTIFY,
 * so with the default the workers sleep 30 s after every short fetch with a backlog waiting.
 */
function workOptions(workload, settings) {
  return {
    queue: QUEUE,
    work: {
      localConcurrency: settings.concurrency,
      batchSize: settings.pgBossBatchSize ?? (workload.ordered ? 10 : 100),
      pollingIntervalSeconds: 0.5,
      notifyPollingIntervalSeconds: 0.5,
      burstWhenBatchFull: true,
    },
  };
}
export default {
  name: 'pg-boss',
  short: 'pgb',
  tables: ['pgboss.job'],

  versions() {
    return { 'pg-boss': packageVersion('pg-boss') };
  },

  variants,

  guarantee(workload) {
    if (!workload.ordered) return 'none asked (standard queue)';
    const ids =
      workload.variant?.ids === 'v7'
        ? 'then its id: time-ordered UUIDv7 ids made in enqueue order'
        : 'then its id: a random UUIDv4, so the jobs of one insert come in random order';
    return (
      `key_strict_fifo queue + singletonKey = key: FIFO per key; a key's head is its oldest job by created_on, ${ids}; ` +
      'it is fetchable only while no job of the key is active, in retry or failed (unique index), so a failing job holds back its key'
    );
  },

  orderLabel: () => 'key_strict_fifo + singletonKey',

  describe(workload, settings) {
    const { work } = workOptions(workload, settings);
    const ids = workload.ordered ? (workload.variant?.ids === 'v7' ? 'UUIDv7 job ids, ' : 'no job ids (random UUIDv4), ') : '';
    return (
      `${policy(workload)} queue (notify), ${ids}one work() with localConcurrency ${work.localConcurrency} x batchSize ${work.batchSize}, ` +
      `burstWhenBatchFull, polling ${work.pollingIntervalSeconds} s, useListenNotify`
    );
  },

  async setup(url, workload) {
    const boss = new PgBoss({ connectionString: url, max: 2, supervise: false, schedule: false });
    await boss.start();
    try {
      await boss.createQueue(QUEUE, { policy: policy(workload), notify: true });
    } finally {
      await boss.stop({ graceful: false, wait: true });
    }
  },

  /**
   * W4: `rows` completed jobs in the queue's job table (the shared one: the queue is not created
   * with `partition: true`). pg-boss 12 keeps completed jobs there for `deleteAfterSeconds` (7 days
   * by default), so a busy queue does carry this many.
   */
  async prefill(url, rows, workload) {
    await withClient(url, async (client) => {
      await client.query(
        `INSERT INTO pgboss.job (name, data, state, singleton_key, policy, start_after, started_on, created_on, completed_on, keep_until)
         SELECT $2, jsonb_build_object('seq', -g), 'completed', 'k' || (g % 100), $3, t, t, t, t, t + interval '14 days'
         FROM generate_series(1, $1::int) AS g, (SELECT now() - interval '1 day' AS t) AS c`,
        [rows, QUEUE, policy(workload)],
      );
      await client.query('VACUUM (ANALYZE) pgboss.job');
    });
    return `${rows.toLocaleString('en-US')} completed jobs in the job table (not yet deleted)`;
  },

  async openProducer(url, workload) {
    const boss = new PgBoss({ connectionString: url, max: 1, supervise: false, schedule: false, migrate: false });
    await boss.start();
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    // An idle client's error (say, the database dropped after a failure) must not crash the run.
    pool.on('error', () => {});
    const inTransaction = async (fn) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        // pg-boss runs its statements on whatever `db.executeSql` it is given: here, this transaction.
        await fn({ executeSql: (text, values) => client.query(text, values) });
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      } finally {
        client.release();
      }
    };
    const data = (m) => ({ seq: m.seq, key: m.key });
    const singletonKey = (m) => (workload.ordered ? m.key : undefined);
    // The order-keeping variant names each job with a time-ordered id, made here in enqueue order.
    const nextId = workload.variant?.ids === 'v7' ? uuidV7Generator() : null;
    const job = (m) =>
      nextId ? { id: nextId(), data: data(m), singletonKey: singletonKey(m) } : { data: data(m), singletonKey: singletonKey(m) };
    return {
      enqueueMany: (messages) => inTransaction((db) => boss.insert(QUEUE, messages.map(job), { db })),
      enqueueOne: (message) => inTransaction((db) => boss.send(QUEUE, data(message), { singletonKey: singletonKey(message), db })),
      async close() {
        await pool.end();
        await boss.stop({ graceful: false, wait: true });
      },
    };
  },

  unfinished() {
    return { sql: `SELECT count(*) AS n FROM pgboss.job WHERE name = $1 AND state < 'completed'`, params: [QUEUE] };
  },

  async afterCheck(url) {
    return withClient(url, async (client) => {
      const { rows } = await client.query(
        `SELECT count(*) FILTER (WHERE state = 'failed') AS failed, count(*) FILTER (WHERE retry_count > 0) AS retried
         FROM pgboss.job WHERE name = $1 AND created_on > now() - interval '12 hours'`,
        [QUEUE],
      );
      const notes = [];
      if (rows[0].failed > 0) notes.push(`${rows[0].failed} failed`);
      if (rows[0].retried > 0) notes.push(`${rows[0].retried} retried`);
      return notes;
    });
  },

  worker(workload, settings) {
    return { script: './worker-pg-boss.mjs', options: workOptions(workload, settings) };
  },
};
