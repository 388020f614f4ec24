// QueueBox as the benchmark sees it: schema by its TypeORM migration, enqueue with OutboxService
// inside TypeORM transactions (as an application does), worker = OutboxPoller + no-op Publisher.
import { createRequire } from 'node:module';
import { withClient } from '../pg.mjs';
import { createQueueBoxApp, migrateQueueBox, pullBatchSize } from '../queuebox-lib.mjs';

const require = createRequire(import.meta.url);
const TABLE = 'queuebox_outbox';
const INBOX = 'queuebox_inbox';
const DESTINATION = 'bench';

/**
 * Poller settings. With a backlog the poller claims again as soon as work frees up, so
 * pollIntervalMs only matters when the outbox looks empty. W3 runs QueueBox as a user would
 * (issue 36): its default pollIntervalMs (1,000 ms) and batchSize (50), woken by LISTEN/NOTIFY;
 * only the concurrency is the bench's, as for every system.
 */
function pollerOptions(workload, concurrency) {
  if (workload.kind === 'latency') return { concurrency, ...sentRows() };
  return { concurrency, batchSize: batchSize(workload), pollIntervalMs: 100, ...sentRows(), ...maxFollowers(), ...publishBatchSize() };
}

/** `outbox.publishBatchSize` (BENCH_QB_PUBLISH_BATCH_SIZE), for runs with BENCH_QB_PUBLISH_BATCH=1; unset, the default. */
function publishBatchSize() {
  const value = process.env.BENCH_QB_PUBLISH_BATCH_SIZE;
  if (value === undefined || value === '') return {};
  if (!/^\d+$/.test(value)) throw new Error(`BENCH_QB_PUBLISH_BATCH_SIZE must be a whole number, got ${value}`);
  return { publishBatchSize: Number(value) };
}

/** `outbox.maxFollowers`: BENCH_QB_MAX_FOLLOWERS=0 runs the poller without followers (issue 36 target 3's A/B); unset, the default. */
function maxFollowers() {
  const value = process.env.BENCH_QB_MAX_FOLLOWERS;
  if (value === undefined || value === '') return {};
  if (!/^\d+$/.test(value)) throw new Error(`BENCH_QB_MAX_FOLLOWERS must be a whole number, got ${value}`);
  return { maxFollowers: Number(value) };
}

/** `outbox.sentRows` of the outbox poller: BENCH_QB_SENT_ROWS=delete runs it deleting sent rows (issue 36 target 2); unset, the default (kept). */
function sentRows() {
  const value = process.env.BENCH_QB_SENT_ROWS;
  if (value === undefined || value === '') return {};
  if (value !== 'keep' && value !== 'delete') throw new Error(`BENCH_QB_SENT_ROWS must be keep or delete, got ${value}`);
  return { sentRows: value };
}

/**
 * Claims held at once. Where graphile-worker runs with its local queue of 500 jobs (the unordered
 * W2 and W3, see systems/graphile-worker.mjs), QueueBox gets its counterpart, batchSize 500; where
 * order matters, its default, 50. BENCH_QB_BATCH_SIZE sets it for every workload.
 */
function batchSize(workload) {
  if (process.env.BENCH_QB_BATCH_SIZE) return Number(process.env.BENCH_QB_BATCH_SIZE);
  return workload.ordered ? 50 : 500;
}

/**
 * W5: the inbox consumer of the worker process (worker-queuebox.mjs builds it from these): the
 * relay (`inbox.relay`, route `source` -> destination `bench`, key = aggregate id) or a
 * `@PullHandler(source, { concurrency })` provider. pollIntervalMs 100 as the outbox poller's
 * (with a backlog it claims again as soon as work frees up).
 */
function inboxOptions(workload, concurrency) {
  const base = { consumer: workload.consumer, source: workload.source, destination: DESTINATION, concurrency, pollIntervalMs: 100 };
  return workload.consumer === 'relay' ? { ...base, batchSize: batchSize(workload) } : base;
}

export default {
  name: 'queuebox',
  short: 'qb',
  tables: [TABLE],

  versions() {
    return { queuebox: require('../../package.json').version };
  },

  tablesOf(workload) {
    return workload.kind === 'inbox' ? [INBOX, TABLE] : [TABLE];
  },

  guarantee(workload) {
    if (workload.kind === 'inbox')
      return 'per aggregate: one row in flight (unique index), receive (id) order (the relay and a batch pull handler take the rows after a claimed head with it, in id order); a failing row blocks its aggregate until processed or dead';
    if (!workload.ordered) return 'none asked (no key)';
    return 'per key: one message in flight (unique index), enqueue order (the rows after a claimed head of its key are published after it, under its claim); a failing message blocks its key until sent or dead';
  },

  orderLabel: (workload) =>
    workload.kind === 'inbox'
      ? workload.consumer === 'relay'
        ? 'aggregate: one claimed head in flight, its followers forwarded with it, id order; checked on the outbox rows'
        : 'aggregate: one claimed head in flight, its followers in its batch, id order'
      : 'key: one in flight, id order',

  describe(workload, settings) {
    if (workload.kind === 'inbox') {
      const o = inboxOptions(workload, settings.concurrency);
      const what =
        o.consumer === 'relay'
          ? `inbox relay only (workers: { outbox: false, relay: true, pull: false }), concurrency ${o.concurrency}, batchSize ${o.batchSize}`
          : `@PullHandler concurrency ${o.concurrency}, ${pullBatchSize() > 1 ? `batch ${pullBatchSize()}` : 'one message per call'}, no-op handler (workers: { outbox: false, relay: false, pull: true })`;
      return `${what}, pollIntervalMs ${o.pollIntervalMs}`;
    }
    const o = pollerOptions(workload, settings.concurrency);
    const deleting = o.sentRows === 'delete' ? ", sentRows 'delete'" : '';
    if (o.pollIntervalMs === undefined)
      return `concurrency ${o.concurrency}, the defaults otherwise (batchSize 50, pollIntervalMs 1000, LISTEN/NOTIFY)${deleting}`;
    return `concurrency ${o.concurrency}, batchSize ${o.batchSize}, pollIntervalMs ${o.pollIntervalMs}${deleting}`;
  },

  /** The schema, by the migrations an application runs (README: all four). */
  setup(url) {
    return migrateQueueBox(url);
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

  /**
   * W5: the backlog, received straight into the inbox with one INSERT ... SELECT per `batch`
   * messages (autocommit), not through InboxService.receive: the receive side is not what W5
   * measures. Rows get ids in seq order; checked, since per-aggregate order is judged by seq.
   */
  async receiveBacklog(url, workload, messages, batch) {
    await withClient(url, async (client) => {
      for (let i = 0; i < messages.length; i += batch) {
        const slice = messages.slice(i, i + batch);
        await client.query(
          `INSERT INTO ${INBOX} (source, idempotency_key, aggregate_id, payload)
           SELECT $1, 'm' || s, k, jsonb_build_object('seq', s, 'key', k)
           FROM unnest($2::int[], $3::text[]) WITH ORDINALITY AS t(s, k, o) ORDER BY o`,
          [workload.source, slice.map((m) => m.seq), slice.map((m) => m.key)],
        );
      }
      const { rows } = await client.query(
        `SELECT count(*)::int AS n, count(*) FILTER (WHERE seq <> rn)::int AS misplaced
         FROM (SELECT (payload->>'seq')::int AS seq, row_number() OVER (ORDER BY id) - 1 AS rn FROM ${INBOX}) AS r`,
      );
      if (rows[0].n !== messages.length || rows[0].misplaced !== 0)
        throw new Error(`inbox backlog: ${rows[0].n} rows, ${rows[0].misplaced} not in seq order by id`);
    });
  },

  /** W5a: the outbox rows the relay wrote, in id order, as `{ seq, key }`. */
  outcomeInDatabase(url) {
    return withClient(url, async (client) => {
      const { rows } = await client.query(`SELECT "key", (payload->>'seq')::int AS seq FROM ${TABLE} ORDER BY id`);
      return rows;
    });
  },

  /** Unfinished messages; both counts match a partial index, so the 1M sent rows of W4 are not read. */
  unfinished(workload) {
    // W5: whether any inbox row is unfinished (0 or 1).
    if (workload.kind === 'inbox')
      return { sql: `SELECT (EXISTS (SELECT 1 FROM ${INBOX} WHERE state IN ('pending', 'processing') LIMIT 1))::int AS n`, params: [] };
    return {
      sql: `SELECT (SELECT count(*) FROM ${TABLE} WHERE state = 'pending') + (SELECT count(*) FROM ${TABLE} WHERE state = 'processing') AS n`,
      params: [],
    };
  },

  /** Anything that did not end plainly `sent` (W5: `processed`) on the first attempt. */
  async afterCheck(url, workload) {
    if (workload.kind === 'inbox') {
      return withClient(url, async (client) => {
        const { rows } = await client.query(
          `SELECT count(*) FILTER (WHERE state = 'dead')::int AS dead, count(*) FILTER (WHERE attempts > 1)::int AS retried,
                  count(*) FILTER (WHERE state <> 'processed')::int AS unprocessed FROM ${INBOX}`,
        );
        const notes = [];
        if (rows[0].dead > 0) notes.push(`${rows[0].dead} inbox rows dead`);
        if (rows[0].retried > 0) notes.push(`${rows[0].retried} inbox rows needed more than one attempt`);
        if (rows[0].unprocessed > 0) notes.push(`${rows[0].unprocessed} inbox rows not processed`);
        return notes;
      });
    }
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
    if (workload.kind === 'inbox')
      return { script: './worker-queuebox.mjs', options: { inbox: inboxOptions(workload, settings.concurrency) } };
    return { script: './worker-queuebox.mjs', options: pollerOptions(workload, settings.concurrency) };
  },
};
