// graphile-worker 0.18: jobs added with its SQL API inside the producer's own transaction (the
// way an application enqueues in its business transaction), one task `bench`, worker = run().
import { makeWorkerUtils } from 'graphile-worker';
import { pg } from '../pg.mjs';
import { packageVersion } from '../report.mjs';

const TASK = 'bench';

// BENCH_GW_TUNED=0 runs graphile-worker with its defaults (no local queue, no batched completion).
const tuned = process.env.BENCH_GW_TUNED !== '0';

/**
 * The configurations run. Unordered workloads (W2, W3): the fastest, the local queue (500 jobs)
 * with batched completion. Ordered ones (W1, W4): the fastest that keeps each key's order, without
 * the local queue, and beside it the local queue, fast but reordering: its batch fetch keeps one
 * job per named queue, but among a queue's jobs added in one transaction (they share `run_at`,
 * and the fetch orders by `priority, run_at` only) it keeps an arbitrary one (a fifth of W1 out of
 * order), where the one-job fetch takes ties in its index's order (row order, in practice
 * insertion order). `BENCH_REORDERING_PEERS=0` leaves the reordering one out.
 */
function variants(workload, settings) {
  if (!tuned) return [{ id: 'defaults', label: 'defaults (BENCH_GW_TUNED=0)', keepsOrder: workload.ordered ? true : null }];
  if (!workload.ordered) return [{ id: 'lq', label: null, keepsOrder: null, localQueue: localQueueSize(workload) }];
  const ordered = [{ id: 'plain', label: 'no local queue', keepsOrder: true, localQueue: null }];
  if (settings.reorderingPeers)
    ordered.push({ id: 'lq', label: 'local queue: fast but reordering', keepsOrder: false, localQueue: localQueueSize(workload) });
  return ordered;
}

/**
 * Worker settings: concurrency 10 and the pool size its docs advise, batched job completion
 * (`completeJobBatchDelay: 0`: the completions of one tick of the event loop in one statement; a
 * named queue stays locked until its job's completion is written, so order is kept), and the local
 * queue where the variant has one.
 */
function workerOptions(workload, settings) {
  const options = { concurrentJobs: settings.concurrency, maxPoolSize: settings.poolSize, pollInterval: 2000 };
  const variant = workload.variant;
  if (!tuned || !variant) return options;
  options.completeJobBatchDelay = 0;
  options.failJobBatchDelay = 0;
  if (variant.localQueue) options.localQueue = { size: variant.localQueue };
  return options;
}

/**
 * Jobs the local queue fetches at once. Unordered: 500. Ordered (the reordering variant of W1/W4):
 * 25, the best of a few 2,000-message W1 trials (11: stalled, 25: 295 msg/s, 50: 157, 100: 109,
 * 500: 33): the batch fetch keeps one job per named queue, so a big batch returns far fewer jobs
 * than asked and the local queue then waits for a notification or its poll instead of fetching
 * again. BENCH_GW_LOCAL_QUEUE sets it for every workload.
 */
function localQueueSize(workload) {
  if (process.env.BENCH_GW_LOCAL_QUEUE) return Number(process.env.BENCH_GW_LOCAL_QUEUE);
  return workload.ordered ? 25 : 500;
}

export default {
  name: 'graphile-worker',
  short: 'gw',
  tables: ['graphile_worker._private_jobs', 'graphile_worker._private_job_queues'],

  versions() {
    return { 'graphile-worker': packageVersion('graphile-worker') };
  },

  variants,

  guarantee(workload) {
    if (!workload.ordered) return 'none asked (no queue name)';
    if (workload.variant?.localQueue)
      return (
        'local queue: named queue per key, one job of a queue at a time (the batch fetch keeps one job per queue since 0.18.0), ' +
        'but picked by (priority, run_at) only, and jobs added in one transaction share run_at: their order is arbitrary'
      );
    return (
      'named queue per key: one job of a queue runs at a time, picked by (priority, run_at) through an index whose ties come in row ' +
      'order, in practice insertion order; ' +
      'a failed job is rescheduled with backoff and later jobs of its queue run before it'
    );
  },

  orderLabel: () => 'named queue per key',

  describe(workload, settings) {
    const o = workerOptions(workload, settings);
    const parts = [`concurrentJobs ${o.concurrentJobs}`, 'LISTEN/NOTIFY'];
    if (o.localQueue) parts.push(`localQueue ${o.localQueue.size}`);
    else parts.push('no local queue');
    if (o.completeJobBatchDelay !== undefined) parts.push(`completeJobBatchDelay ${o.completeJobBatchDelay}`);
    if (!tuned) parts.push('defaults (BENCH_GW_TUNED=0)');
    return parts.join(', ');
  },

  async setup(url) {
    const utils = await makeWorkerUtils({ connectionString: url });
    try {
      await utils.migrate();
    } finally {
      await utils.release();
    }
  },

  prefill: null,
  prefillUnsupported: 'n/a: graphile-worker deletes completed jobs, so its table never holds finished rows',

  async openProducer(url, workload) {
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    // An idle client's error (say, the database dropped after a failure) must not crash the run.
    pool.on('error', () => {});
    const inTransaction = async (fn) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await fn(client);
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      } finally {
        client.release();
      }
    };
    const spec = (m) => ({ identifier: TASK, payload: { seq: m.seq, key: m.key }, queue_name: workload.ordered ? m.key : null });
    return {
      // add_jobs takes an array of job specs: the bulk way of 0.17/0.18 (the same SQL as WorkerUtils.addJobs).
      enqueueMany: (messages) =>
        inTransaction((client) =>
          client.query(
            `SELECT id FROM graphile_worker.add_jobs(array(SELECT json_populate_recordset(null::graphile_worker.job_spec, $1::json)))`,
            [JSON.stringify(messages.map(spec))],
          ),
        ),
      enqueueOne: (message) =>
        inTransaction((client) => {
          const s = spec(message);
          return client.query('SELECT id FROM graphile_worker.add_job($1, $2::json, queue_name => $3)', [
            s.identifier,
            JSON.stringify(s.payload),
            s.queue_name,
          ]);
        }),
      close: () => pool.end(),
    };
  },

  /** Completed jobs are deleted, so whatever is left in the jobs table is unfinished. */
  unfinished() {
    return { sql: 'SELECT count(*) AS n FROM graphile_worker._private_jobs', params: [] };
  },

  async afterCheck() {
    return [];
  },

  worker(workload, settings) {
    return { script: './worker-graphile-worker.mjs', options: workerOptions(workload, settings) };
  },
};
