// pg-boss 10.4.2: one queue, `bench`; jobs inserted with boss.insert/boss.send through the `db`
// option inside the producer's own transaction; worker = `concurrency` work() loops.
import { createRequire } from 'node:module';
import PgBoss from 'pg-boss';
import { pg, withClient } from '../pg.mjs';

const require = createRequire(import.meta.url);
const QUEUE = 'bench';

/**
 * v10 queue policies: standard (default), short (one queued), singleton (one active), stately
 * (one queued and one active); singleton/stately are per singletonKey when the job has one. The
 * closest to FIFO per key is a singleton queue with singletonKey = key: at most one active job per
 * key, enforced by a unique index. (The `key_strict_fifo` policy of later pg-boss versions needs
 * Node 22.)
 */
const policy = (workload) => (workload.ordered ? 'singleton' : 'standard');

/**
 * A work() loop fetches up to batchSize jobs, runs the handler on the whole batch, completes the
 * batch in one statement, then sleeps out the rest of its polling interval (0.5 s is the least
 * v10 accepts), backlog or not. So throughput is bounded by loops x batchSize / 0.5 s: 100 per
 * batch lets 10 loops reach 2,000 jobs/s. pg-boss 10 has no LISTEN/NOTIFY.
 *
 * On the singleton queue, concurrent loops deadlock now and then: the completion of one batch
 * against the fetch of another. pg-boss does not await that completion, so the error is an
 * unhandled rejection and the batch stays `active`, its keys blocked until the jobs expire (15
 * minutes). BENCH_PGBOSS_LOOPS=1 avoids it (one loop, at most 200 jobs/s).
 */
function workOptions(settings) {
  return { queue: QUEUE, loops: settings.pgBossLoops, batchSize: 100, pollingIntervalSeconds: 0.5 };
}

export default {
  name: 'pg-boss',
  short: 'pgb',
  tables: ['pgboss.job'],

  versions() {
    return { 'pg-boss': require('pg-boss/package.json').version };
  },

  guarantee(workload) {
    if (!workload.ordered) return 'none asked (standard queue)';
    return (
      'singleton queue + singletonKey: at most one active job per key; fetch takes the oldest by (created_on, random uuid id), ' +
      'created_on being the enqueue transaction start; within a fetched batch one job per key is picked by row_number() with no ORDER BY; ' +
      'a failed job waits in retry while later jobs of its key run'
    );
  },

  orderLabel: () => 'singleton queue + singletonKey',

  describe(workload, settings) {
    const o = workOptions(settings);
    return `${policy(workload)} queue, ${o.loops} work() loops x batchSize ${o.batchSize}, polling ${o.pollingIntervalSeconds} s (no LISTEN/NOTIFY)`;
  },

  async setup(url, workload) {
    const boss = new PgBoss({ connectionString: url, max: 2, supervise: false, schedule: false });
    await boss.start();
    try {
      await boss.createQueue(QUEUE, { name: QUEUE, policy: policy(workload) });
    } finally {
      await boss.stop({ graceful: false, wait: true });
    }
  },

  /**
   * W4: `rows` completed jobs in the queue's partition. pg-boss keeps completed jobs in its job
   * table until `archiveCompletedAfterSeconds` (12 hours by default) moves them to the archive, so
   * a busy queue does carry this many.
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
    return `${rows.toLocaleString('en-US')} completed jobs in the queue's partition (not yet archived)`;
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
    return {
      enqueueMany: (messages) =>
        inTransaction((db) =>
          boss.insert(
            messages.map((m) => ({ name: QUEUE, data: data(m), singletonKey: singletonKey(m) })),
            { db },
          ),
        ),
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

  worker(_workload, settings) {
    return { script: './worker-pg-boss.mjs', options: workOptions(settings) };
  },
};
