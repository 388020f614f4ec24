// QueueBox as the benchmark sees it: schema by its TypeORM migration, enqueue with OutboxService
// inside TypeORM transactions (as an application does), worker = OutboxPoller + no-op Publisher.
import { createRequire } from 'node:module';
import { withClient } from '../pg.mjs';
import { createQueueBoxApp, loadQueueBox } from '../queuebox-lib.mjs';

const require = createRequire(import.meta.url);
const TABLE = 'queuebox_outbox';
const DESTINATION = 'bench';

/**
 * Poller settings. With a backlog the poller claims again as soon as work frees up, so
 * pollIntervalMs only matters when the outbox looks empty. W3 uses 10 ms: while QueueBox only
 * polled, that was its latency floor; with LISTEN/NOTIFY wake-ups (on PostgreSQL, since 92ab753)
 * the poll is the fallback, and 10 ms keeps the comparison with the polling-only runs.
 */
function pollerOptions(workload, concurrency) {
  return { concurrency, batchSize: Number(process.env.BENCH_QB_BATCH_SIZE ?? 50), pollIntervalMs: workload.kind === 'latency' ? 10 : 100 };
}

export default {
  name: 'queuebox',
  short: 'qb',
  tables: [TABLE],

  versions() {
    return { queuebox: require('../../package.json').version };
  },

  guarantee(workload) {
    if (!workload.ordered) return 'none asked (no key)';
    return 'per key: one message in flight (unique index), enqueue order; a failing message blocks its key until sent or dead';
  },

  orderLabel: () => 'key: one in flight, id order',

  describe(workload, settings) {
    const o = pollerOptions(workload, settings.concurrency);
    return `concurrency ${o.concurrency}, batchSize ${o.batchSize}, pollIntervalMs ${o.pollIntervalMs}`;
  },

  /** The schema, by the migration an application would run. */
  async setup(url) {
    const { queuebox, typeorm } = loadQueueBox();
    const dataSource = new typeorm.DataSource({
      type: 'postgres',
      url,
      migrations: [queuebox.QueueBoxSchema1764460800000],
      logging: false,
    });
    await dataSource.initialize();
    try {
      await dataSource.runMigrations();
    } finally {
      await dataSource.destroy();
    }
  },

  /**
   * W4: `rows` finished (`sent`) messages on the same 100 keys, a day old, then VACUUM ANALYZE so
   * the table looks like one that has been running (autovacuum would otherwise start on it in the
   * middle of the drain, and the first readers would set the hint bits).
   */
  async prefill(url, rows) {
    await withClient(url, async (client) => {
      await client.query(
        `INSERT INTO ${TABLE} (message_id, destination, "key", payload, state, attempts, available_at, claimed_at, created_at, sent_at)
         SELECT gen_random_uuid(), $2, 'k' || (g % 100), jsonb_build_object('seq', -g), 'sent', 1, t, t, t, t
         FROM generate_series(1, $1::int) AS g, (SELECT now() - interval '1 day' AS t) AS c`,
        [rows, DESTINATION],
      );
      await client.query(`VACUUM (ANALYZE) ${TABLE}`);
    });
    return `${rows.toLocaleString('en-US')} sent rows in the outbox table`;
  },

  async openProducer(url, workload) {
    const { app, queuebox, nestTypeorm } = await createQueueBoxApp({ url, poolSize: 4, options: { workers: false } });
    const outbox = app.get(queuebox.OutboxService);
    const dataSource = app.get(nestTypeorm.getDataSourceToken());
    const toInput = (m) => ({ destination: DESTINATION, key: workload.ordered ? m.key : undefined, payload: { seq: m.seq, key: m.key } });
    return {
      enqueueMany: (messages) => dataSource.transaction((manager) => outbox.enqueueMany(manager, messages.map(toInput))),
      enqueueOne: (message) => dataSource.transaction((manager) => outbox.enqueue(manager, toInput(message))),
      close: () => app.close(),
    };
  },

  /** Unfinished messages; both counts match a partial index, so the 1M sent rows of W4 are not read. */
  unfinished() {
    return {
      sql: `SELECT (SELECT count(*) FROM ${TABLE} WHERE state = 'pending') + (SELECT count(*) FROM ${TABLE} WHERE state = 'processing') AS n`,
      params: [],
    };
  },

  /** Anything that did not end plainly `sent` on the first attempt. */
  async afterCheck(url) {
    return withClient(url, async (client) => {
      const { rows } = await client.query(
        `SELECT count(*) FILTER (WHERE state = 'dead') AS dead, count(*) FILTER (WHERE attempts > 1) AS retried
         FROM ${TABLE} WHERE created_at > now() - interval '12 hours'`,
      );
      const notes = [];
      if (rows[0].dead > 0) notes.push(`${rows[0].dead} dead`);
      if (rows[0].retried > 0) notes.push(`${rows[0].retried} needed more than one attempt`);
      return notes;
    });
  },

  worker(workload, settings) {
    return { script: './worker-queuebox.mjs', options: pollerOptions(workload, settings.concurrency) };
  },
};
