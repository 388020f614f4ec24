// Issue 37's first step: the partitioned layout measured as a prototype, before it is built, so that
// its design starts from numbers (docs/partitioning.md). Three parts, each on a scratch database
// (qb_bench_partitions, created and dropped):
//
//   claims     the outbox claim and its completion, 500 rows a batch, on the plain table and on a
//              table partitioned by id range with 10, 100 and 400 partitions of finished rows, with
//              and without a low mark (`id >= $low`: the first id that may be unfinished) that lets
//              the claim prune the finished partitions;
//   ddl        each step of partition upkeep (create ahead, attach, detach, drop) on a partitioned
//              outbox while a producer inserts, a claimer claims and completes, and another session
//              holds a producer's transaction open: how long each step took, what it locked, and the
//              longest insert and claim meanwhile;
//   retention  BENCH_PARTITION_ROWS finished rows (default 1,000,000) removed by the plain layout's
//              batched deletes (QueueBox's own statement) and by detaching and dropping partitions:
//              wall time, WAL, dead tuples and size afterwards.
//
//   npm run build && node bench/partitions.mjs
//   BENCH_PARTITION_PARTS=retention BENCH_PARTITION_ROWS=10000000 node bench/partitions.mjs
//
// BENCH_PG_URL: the server (default postgres://postgres@127.0.0.1:5432/postgres), PostgreSQL 14 or
// later (DETACH ... CONCURRENTLY). Check the load average before and after.
import { loadavg } from 'node:os';
import { now, sleep } from './clock.mjs';
import { Admin, connect, databaseUrl, withClient } from './pg.mjs';
import { migrateQueueBox, requireFromDist } from './queuebox-lib.mjs';
import { traffic } from './traffic.mjs';

const serverUrl = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const parts = (process.env.BENCH_PARTITION_PARTS ?? 'claims,ddl,retention').split(',');
const retentionRows = Number(process.env.BENCH_PARTITION_ROWS ?? 1_000_000);
const DATABASE = 'qb_bench_partitions';
const url = databaseUrl(serverUrl, DATABASE);
const BATCH = 500;

const log = (line) => console.log(line);
const loads = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
const count = (n) => n.toLocaleString('en-US');
const mb = (bytes) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

/**
 * The prototype: `p_outbox`, the outbox's columns, partitioned by id range. Its indexes are the
 * plain table's, partitioned, but for the two unique ones on other columns, which a partitioned
 * table cannot hold: `message_id`'s uniqueness moves to `p_outbox_message_ids` (unpartitioned, one
 * narrow row a message), and the in-flight key index becomes one per partition (I4's net holds
 * within a partition only; the keyed claim's locks are what hold it across).
 */
async function createPartitionedOutbox(client) {
  await client.query(`CREATE TABLE p_outbox (LIKE queuebox_outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)
    PARTITION BY RANGE (id)`);
  await client.query('ALTER TABLE p_outbox ADD PRIMARY KEY (id)');
  for (const index of [
    `(available_at, id) WHERE state = 'pending'`,
    `("key", id) WHERE state IN ('pending', 'processing') AND "key" IS NOT NULL`,
    `(lease_expires_at) WHERE state = 'processing'`,
    `(available_at, id) WHERE state = 'pending' AND "key" IS NULL`,
    `(sent_at) WHERE state = 'sent'`,
    `(destination, id) WHERE state = 'dead'`,
  ]) {
    await client.query(`CREATE INDEX ON p_outbox ${index}`);
  }
  await client.query('CREATE TABLE p_outbox_message_ids (message_id uuid PRIMARY KEY, row_id bigint NOT NULL)');
  await client.query('CREATE INDEX ON p_outbox_message_ids (row_id)');
}

/** A partition for ids [from, to), made as upkeep would make it: a table of its own, then attached (see the ddl part). */
async function addPartition(client, name, from, to) {
  await client.query(`CREATE TABLE ${name} (LIKE p_outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`);
  await client.query(`ALTER TABLE ${name} ADD CONSTRAINT ${name}_range CHECK (id >= ${from} AND id < ${to})`);
  await client.query(`ALTER TABLE p_outbox ATTACH PARTITION ${name} FOR VALUES FROM (${from}) TO (${to})`);
  await client.query(`CREATE UNIQUE INDEX ON ${name} ("key") WHERE state = 'processing' AND "key" IS NOT NULL`);
}

/** Rows `from` to `to` (ids), finished (`sent` a day ago, or `age` ago) or pending; a key on every tenth finished one (pending rows have none: the prototype's claim is the unkeyed one). */
async function insertRows(client, table, from, to, state, age = '1 day') {
  const chunk = 1_000_000;
  for (let first = from; first <= to; first += chunk) {
    const last = Math.min(to, first + chunk - 1);
    const finished = state === 'sent';
    await client.query(
      `INSERT INTO ${table} (id, message_id, destination, "key", payload, state, attempts, sent_at, created_at, available_at)
       OVERRIDING SYSTEM VALUE
       SELECT g, gen_random_uuid(), 'bench', CASE WHEN g % 10 = 0 AND $3 = 'sent' THEN 'k' || (g % 1000) END, jsonb_build_object('seq', g),
              $3, ${finished ? 1 : 0}, ${finished ? `now() - interval '${age}'` : 'NULL'}, now() - interval '${age}', now() - interval '${age}'
       FROM generate_series($1::bigint, $2::bigint) g`,
      [first, last, state],
    );
    if (table === 'p_outbox') {
      await client.query('INSERT INTO p_outbox_message_ids SELECT message_id, id FROM p_outbox WHERE id BETWEEN $1 AND $2', [first, last]);
    }
  }
}

// --- claims ---------------------------------------------------------------------------------------

// The claim's shape is QueueBox's (a materialized batch, then the update by `id = ANY (ARRAY(...))`),
// without the function around it and for rows without a key.
const claimSql = (table, lowMark) => `WITH batch AS MATERIALIZED (
  SELECT id FROM ${table}
  WHERE state = 'pending' AND available_at <= now() ${lowMark ? 'AND id >= $2' : ''}
  ORDER BY available_at, id
  LIMIT $1
  FOR UPDATE SKIP LOCKED
)
UPDATE ${table} o
SET state = 'processing', attempts = o.attempts + 1, claim_token = gen_random_uuid(), claimed_at = now(),
    lease_expires_at = now() + interval '5 minutes'
WHERE o.id = ANY (ARRAY(SELECT id FROM batch)) ${lowMark ? 'AND o.id >= $2' : ''}
RETURNING o.id, o.claim_token`;

const completeSql = (table, lowMark) => `UPDATE ${table}
SET state = 'sent', sent_at = now(), claim_token = NULL, lease_expires_at = NULL
WHERE id = ANY ($1::bigint[]) AND claim_token = ANY ($2::uuid[]) AND state = 'processing' ${lowMark ? 'AND id >= $3' : ''}`;

/** Claims and completes `messages` rows in batches of 500 on one connection, as prepared statements; returns µs a message. */
async function drain(client, table, messages, low) {
  const lowMark = low !== undefined;
  const name = `${table}-${lowMark}`;
  let done = 0;
  const started = now();
  while (done < messages) {
    const claimed = await client.query({
      name: `claim-${name}`,
      text: claimSql(table, lowMark),
      values: lowMark ? [Math.min(BATCH, messages - done), low] : [Math.min(BATCH, messages - done)],
    });
    if (claimed.rows.length === 0) throw new Error(`${table}: nothing left to claim after ${done}`);
    const ids = claimed.rows.map((row) => row.id);
    const tokens = claimed.rows.map((row) => row.claim_token);
    await client.query({
      name: `complete-${name}`,
      text: completeSql(table, lowMark),
      values: lowMark ? [ids, tokens, low] : [ids, tokens],
    });
    done += claimed.rows.length;
  }
  return ((now() - started) * 1000) / messages;
}

async function claimsPart() {
  const finished = 1_000_000;
  const pending = 40_000;
  log(`\n## claims: ${count(finished)} finished rows and ${count(pending)} pending, batches of ${BATCH}, one connection`);
  log('| layout | µs/msg without a low mark | µs/msg with `id >= $low` |');
  log('|---|---|---|');
  for (const partitions of [0, 10, 100, 400]) {
    await withClient(url, async (client) => {
      await client.query('DROP TABLE IF EXISTS p_outbox, p_outbox_message_ids');
      await client.query('TRUNCATE queuebox_outbox');
      const table = partitions === 0 ? 'queuebox_outbox' : 'p_outbox';
      if (partitions > 0) {
        await createPartitionedOutbox(client);
        const span = finished / partitions;
        for (let p = 0; p < partitions; p++) await addPartition(client, `p_outbox_${p}`, 1 + p * span, 1 + (p + 1) * span);
        await addPartition(client, 'p_outbox_live', 1 + finished, 1 + finished + 10 * pending);
      }
      await insertRows(client, table, 1, finished, 'sent');
      await insertRows(client, table, finished + 1, finished + pending, 'pending', '1 second');
      await client.query(`VACUUM (ANALYZE) ${table}`);
      const low = finished + 1;
      // Alternated in quarters, each mode twice, so that a drift of the machine hits both.
      const results = { plain: [], low: [] };
      for (let round = 0; round < 4; round++) {
        const mode = partitions === 0 || round % 2 === 0 ? 'plain' : 'low';
        results[mode].push(await drain(client, table, pending / 4, mode === 'low' ? low : undefined));
      }
      const show = (values) => (values.length ? values.map((v) => v.toFixed(1)).join(' / ') : 'n/a');
      log(`| ${partitions === 0 ? 'plain table' : `${partitions} partitions + 1 live`} | ${show(results.plain)} | ${show(results.low)} |`);
    });
  }
}

// --- ddl ------------------------------------------------------------------------------------------

/** Samples the locks a backend holds or waits for, every 5 ms, until the returned function is called. */
function watchLocks(watcher, pid) {
  const locks = new Set();
  let watching = true;
  const sampling = (async () => {
    while (watching) {
      const { rows } = await watcher.query(
        `SELECT CASE WHEN locktype = 'relation' THEN relation::regclass::text ELSE locktype END AS object, mode, granted
           FROM pg_locks WHERE pid = $1 AND locktype NOT IN ('virtualxid', 'transactionid')`,
        [pid],
      );
      for (const lock of rows) locks.add(`${lock.mode} on ${lock.object}${lock.granted ? '' : ' (waited)'}`);
      await sleep(5);
    }
  })();
  return async () => {
    watching = false;
    await sampling;
    return [...locks].sort();
  };
}

async function ddlPart() {
  const perPartition = 100_000;
  const partitions = 20;
  log(`\n## ddl: ${partitions} partitions of ${count(perPartition)} finished rows and a live one, under traffic`);
  await withClient(url, async (client) => {
    await client.query('DROP TABLE IF EXISTS p_outbox, p_outbox_message_ids');
    await createPartitionedOutbox(client);
    for (let p = 0; p < partitions; p++) await addPartition(client, `p_outbox_${p}`, 1 + p * perPartition, 1 + (p + 1) * perPartition);
    const live = 1 + partitions * perPartition;
    await addPartition(client, 'p_outbox_live', live, live + 10_000_000);
    await insertRows(client, 'p_outbox', 1, partitions * perPartition, 'sent');
    await client.query(`SELECT setval(pg_get_serial_sequence('p_outbox', 'id'), ${live})`);
    await client.query('VACUUM (ANALYZE) p_outbox');
  });
  const low = 1 + partitions * perPartition;
  const producer = traffic(url, async (client) => {
    await client.query('BEGIN');
    const { rows } = await client.query(
      "INSERT INTO p_outbox (message_id, destination, payload) VALUES (gen_random_uuid(), 'bench', '{}') RETURNING id, message_id",
    );
    await client.query('INSERT INTO p_outbox_message_ids VALUES ($1, $2)', [rows[0].message_id, rows[0].id]);
    await client.query('COMMIT');
  });
  const claimer = traffic(url, async (client) => {
    const claimed = await client.query({ name: 'claim', text: claimSql('p_outbox', true), values: [50, low] });
    if (claimed.rows.length === 0) return sleep(1);
    await client.query({
      name: 'complete',
      text: completeSql('p_outbox', true),
      values: [claimed.rows.map((r) => r.id), claimed.rows.map((r) => r.claim_token), low],
    });
  });
  // A producer's transaction that enqueued and has not committed, open across every step.
  const holder = await connect(url);
  const openHolder = async () => {
    await holder.query('BEGIN');
    await holder.query("INSERT INTO p_outbox (message_id, destination, payload) VALUES (gen_random_uuid(), 'bench', '{}')");
  };
  await openHolder();
  const upkeep = await connect(url);
  const { rows: pid } = await upkeep.query('SELECT pg_backend_pid() AS pid');
  const watcher = await connect(url);
  const rows = [];
  // Every step gives up after lockTimeoutMs (default 10 s) of waiting for a lock.
  const step = async (name, statements, { lockTimeoutMs = 10_000, commitHolderAfterMs } = {}) => {
    producer.window();
    claimer.window();
    const stopWatching = watchLocks(watcher, pid[0].pid);
    const release =
      commitHolderAfterMs === undefined
        ? undefined
        : sleep(commitHolderAfterMs).then(async () => {
            await holder.query('COMMIT');
          });
    const started = now();
    let outcome = 'done';
    try {
      await upkeep.query(`SET lock_timeout = ${lockTimeoutMs}`);
      for (const sql of statements) await upkeep.query(sql);
    } catch (error) {
      outcome = `failed: ${error.message}`;
    } finally {
      await upkeep.query('RESET lock_timeout');
    }
    const tookMs = now() - started;
    await release;
    if (release) await openHolder();
    await sleep(200); // statements that waited behind the step finish in its window
    const locks = await stopWatching();
    const p = producer.window();
    const c = claimer.window();
    rows.push({ name, tookMs, outcome, producer: p.longest, claimer: c.longest, locks });
    log(
      `${name}: ${tookMs.toFixed(1)} ms, ${outcome}; longest insert ${p.longest.toFixed(1)} ms, longest claim ${c.longest.toFixed(1)} ms`,
    );
    log(`  locks: ${locks.join(', ') || 'none seen'}`);
  };
  try {
    await sleep(1000);
    await step('nothing (for comparison)', ['SELECT 1']);
    const ahead = 1 + partitions * perPartition + 10_000_000;
    await step(
      'CREATE TABLE ... PARTITION OF (lock_timeout 2 s)',
      [`CREATE TABLE p_outbox_ahead1 PARTITION OF p_outbox FOR VALUES FROM (${ahead}) TO (${ahead + 1_000_000})`],
      { lockTimeoutMs: 2000 },
    );
    await step('CREATE TABLE (LIKE), CHECK, ATTACH PARTITION', [
      'CREATE TABLE p_outbox_ahead2 (LIKE p_outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
      `ALTER TABLE p_outbox_ahead2 ADD CONSTRAINT p_outbox_ahead2_range CHECK (id >= ${ahead + 1_000_000} AND id < ${ahead + 2_000_000})`,
      `ALTER TABLE p_outbox ATTACH PARTITION p_outbox_ahead2 FOR VALUES FROM (${ahead + 1_000_000}) TO (${ahead + 2_000_000})`,
      'ALTER TABLE p_outbox_ahead2 DROP CONSTRAINT p_outbox_ahead2_range',
    ]);
    await step('DETACH PARTITION (plain, lock_timeout 2 s)', ['ALTER TABLE p_outbox DETACH PARTITION p_outbox_0'], { lockTimeoutMs: 2000 });
    await step('DROP TABLE of an attached partition (lock_timeout 2 s)', ['DROP TABLE p_outbox_0'], { lockTimeoutMs: 2000 });
    await step(
      'DETACH PARTITION CONCURRENTLY (the open transaction commits after 1 s)',
      ['ALTER TABLE p_outbox DETACH PARTITION p_outbox_0 CONCURRENTLY'],
      {
        commitHolderAfterMs: 1000,
      },
    );
    await step('DROP TABLE of the detached partition', ['DROP TABLE p_outbox_0']);
    await step('DELETE of its message ids (100,000, one statement)', [
      `DELETE FROM p_outbox_message_ids WHERE row_id < ${1 + perPartition}`,
    ]);
    await step('a DEFAULT partition: CREATE TABLE (LIKE), ATTACH PARTITION ... DEFAULT', [
      'CREATE TABLE p_outbox_default (LIKE p_outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
      'ALTER TABLE p_outbox ATTACH PARTITION p_outbox_default DEFAULT',
    ]);
    await step('... then DETACH PARTITION CONCURRENTLY', ['ALTER TABLE p_outbox DETACH PARTITION p_outbox_1 CONCURRENTLY']);
  } finally {
    await holder.query('ROLLBACK').catch(() => {});
    await Promise.all([holder.end(), upkeep.end(), watcher.end(), producer.stop(), claimer.stop()]);
  }
  log('\n| step | time (ms) | outcome | longest insert (ms) | longest claim + completion (ms) | locks held or waited for |');
  log('|---|---|---|---|---|---|');
  for (const r of rows) {
    log(
      `| ${r.name} | ${r.tookMs.toFixed(1)} | ${r.outcome} | ${r.producer.toFixed(1)} | ${r.claimer.toFixed(1)} | ${r.locks.join('; ')} |`,
    );
  }
}

// --- retention ------------------------------------------------------------------------------------

/** WAL, time and what is left after `work`: dead tuples and size of `tables`. */
async function measured(client, tables, work) {
  const { rows: before } = await client.query('SELECT pg_current_wal_lsn() AS lsn');
  const started = now();
  const detail = await work();
  const tookS = (now() - started) / 1000;
  const { rows: wal } = await client.query('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1) AS bytes', [before[0].lsn]);
  await client.query('SELECT pg_stat_force_next_flush()').catch(() => {}); // PostgreSQL 15 and later
  await sleep(600);
  const { rows: left } = await client.query(
    `SELECT coalesce(sum(n_dead_tup), 0)::bigint AS dead, coalesce(sum(pg_total_relation_size(relid)), 0)::bigint AS size
       FROM pg_stat_user_tables WHERE relname = ANY ($1)`,
    [tables],
  );
  return { tookS, wal: Number(wal[0].bytes), dead: Number(left[0].dead), size: Number(left[0].size), detail };
}

async function retentionPart() {
  const { retentionDeleteSql } = requireFromDist('dialects/postgres/retention.sql.js');
  const partitions = 10;
  const span = retentionRows / partitions;
  log(`\n## retention: ${count(retentionRows)} finished rows, all older than the retention age`);
  const results = [];
  await withClient(url, async (client) => {
    await client.query('DROP TABLE IF EXISTS p_outbox, p_outbox_message_ids');
    await client.query('TRUNCATE queuebox_outbox');
    await insertRows(client, 'queuebox_outbox', 1, retentionRows, 'sent', '8 days');
    await client.query('VACUUM (ANALYZE) queuebox_outbox');
    const { rows: size } = await client.query("SELECT pg_total_relation_size('queuebox_outbox') AS size");
    log(`plain table: ${mb(Number(size[0].size))} with its indexes`);
    const deleting = await measured(client, ['queuebox_outbox', 'queuebox_outbox_attempts'], async () => {
      let statements = 0;
      for (;;) {
        const { rows } = await client.query(retentionDeleteSql('queuebox_outbox', 'outbox-sent', 'queuebox_outbox_attempts'), [
          7 * 86_400_000,
          1000,
        ]);
        statements++;
        if (rows[0].n < 1000) return `${count(statements)} statements of 1,000`;
      }
    });
    results.push({ name: 'plain table, batched deletes (retention.batchSize 1000)', ...deleting, sizeBefore: Number(size[0].size) });
    const vacuum = await measured(client, ['queuebox_outbox'], async () => {
      await client.query('VACUUM queuebox_outbox');
      return 'one VACUUM';
    });
    results.push({ name: '... then VACUUM (what autovacuum must do)', ...vacuum, sizeBefore: deleting.size });
    await client.query('TRUNCATE queuebox_outbox');

    await createPartitionedOutbox(client);
    for (let p = 0; p < partitions; p++) await addPartition(client, `p_outbox_${p}`, 1 + p * span, 1 + (p + 1) * span);
    await addPartition(client, 'p_outbox_live', 1 + retentionRows, 1 + 2 * retentionRows);
    await insertRows(client, 'p_outbox', 1, retentionRows, 'sent', '8 days');
    await client.query('VACUUM (ANALYZE) p_outbox, p_outbox_message_ids');
    const partitionNames = Array.from({ length: partitions }, (_, p) => `p_outbox_${p}`);
    const { rows: psize } = await client.query(
      "SELECT sum(pg_total_relation_size(relid))::bigint AS size FROM pg_stat_user_tables WHERE relname = ANY ($1) OR relname = 'p_outbox_message_ids'",
      [partitionNames],
    );
    log(`partitioned: ${mb(Number(psize[0].size))} with indexes and message ids`);
    const dropping = await measured(client, ['p_outbox_message_ids', ...partitionNames], async () => {
      for (const name of partitionNames) {
        await client.query(`ALTER TABLE p_outbox DETACH PARTITION ${name} CONCURRENTLY`);
        await client.query(`DROP TABLE ${name}`);
      }
      return `${partitions} detaches and drops`;
    });
    results.push({ name: 'partitions: DETACH CONCURRENTLY and DROP', ...dropping, sizeBefore: Number(psize[0].size) });
    const ids = await measured(client, ['p_outbox_message_ids'], async () => {
      let statements = 0;
      for (let from = 1; from <= retentionRows; from += 10_000) {
        await client.query('DELETE FROM p_outbox_message_ids WHERE row_id >= $1 AND row_id < $2', [from, from + 10_000]);
        statements++;
      }
      return `${count(statements)} statements of 10,000`;
    });
    results.push({ name: '... and their message ids (batched deletes)', ...ids, sizeBefore: dropping.size });
  });
  log('\n| step | how | wall (s) | WAL | dead tuples after | size before | size after |');
  log('|---|---|---|---|---|---|---|');
  for (const r of results) {
    log(
      `| ${r.name} | ${r.detail ?? ''} | ${r.tookS.toFixed(1)} | ${mb(r.wal)} | ${count(r.dead)} | ${mb(r.sizeBefore)} | ${mb(r.size)} |`,
    );
  }
}

const admin = new Admin(serverUrl);
await admin.open();
try {
  log(`load average before: ${loads()}`);
  await admin.dropDatabase(DATABASE);
  await admin.createDatabase(DATABASE);
  await migrateQueueBox(url);
  if (parts.includes('claims')) await claimsPart();
  if (parts.includes('ddl')) await ddlPart();
  if (parts.includes('retention')) await retentionPart();
  log(`\nload average after: ${loads()}`);
} finally {
  await admin.dropDatabase(DATABASE).catch(() => {});
  await admin.close();
}
