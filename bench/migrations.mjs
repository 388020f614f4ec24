// Issue 36's schema changes on a big table, measured: migrations 012 (unkeyed claims), 013 (keyed
// claims) and 014 (claim plans) rewrite or alter only the claim functions. This runs each one's
// down and then its up, as `queuebox migrate` would (each in a transaction), on an outbox of
// BENCH_MIGRATION_ROWS rows (default 10,000,000: all `sent` but a backlog of 10,000 pending, a key
// on every tenth), while
//   - a producer enqueues one message a transaction and a claimer claims and completes batches of
//     50, without pause, on connections of their own, each statement's time recorded;
//   - another session holds a transaction open that has enqueued a message and read the outbox (a
//     producer's transaction that has not committed), for the whole run.
// It prints each step's time and the longest producer and claimer statement seen during it, and the
// locks the migration's session held or waited for (pg_locks, sampled every 5 ms from a fourth
// connection).
//
//   npm run build && node bench/migrations.mjs
//
// BENCH_PG_URL: the server (default postgres://postgres@127.0.0.1:5432/postgres); a scratch database
// qb_bench_migrations is created and dropped. Check the load average before and after.
import { loadavg } from 'node:os';
import { now } from './clock.mjs';
import { Admin, connect, databaseUrl, withClient } from './pg.mjs';
import { loadQueueBox, migrateQueueBox } from './queuebox-lib.mjs';
import { traffic } from './traffic.mjs';

const serverUrl = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const rows = Number(process.env.BENCH_MIGRATION_ROWS ?? 10_000_000);
const DATABASE = 'qb_bench_migrations';
const url = databaseUrl(serverUrl, DATABASE);
const { queuebox } = loadQueueBox();
const MIGRATIONS = [
  ['unkeyedClaims', '012'],
  ['keyedClaims', '013'],
  ['claimPlans', '014'],
];

const loads = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
const log = (line) => console.log(line);

async function fill(client) {
  const started = now();
  // Finished rows first, in chunks (one statement of 10 million would hold a huge transaction).
  const chunk = 1_000_000;
  for (let from = 0; from < rows - 10_000; from += chunk) {
    const count = Math.min(chunk, rows - 10_000 - from);
    await client.query(
      `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, sent_at, created_at, available_at)
       SELECT gen_random_uuid(), 'bench', CASE WHEN g % 10 = 0 THEN 'k' || (g % 1000) END, jsonb_build_object('seq', g), 'sent', 1, now() - interval '1 day', now() - interval '1 day', now() - interval '1 day'
       FROM generate_series($1::int, $2::int) g`,
      [from, from + count - 1],
    );
    log(`  ${(from + count).toLocaleString('en-US')} finished rows (${((now() - started) / 1000).toFixed(0)} s)`);
  }
  await client.query(
    `INSERT INTO queuebox_outbox (message_id, destination, "key", payload)
     SELECT gen_random_uuid(), 'bench', CASE WHEN g % 10 = 0 THEN 'k' || (g % 1000) END, jsonb_build_object('seq', g) FROM generate_series(1, 10000) g`,
  );
  await client.query('VACUUM (ANALYZE) queuebox_outbox');
  const { rows: size } = await client.query("SELECT pg_size_pretty(pg_total_relation_size('queuebox_outbox')) AS size");
  log(`  ${rows.toLocaleString('en-US')} rows, ${size[0].size} with indexes, in ${((now() - started) / 1000).toFixed(0)} s`);
}

const admin = new Admin(serverUrl);
await admin.open();
try {
  log(`load average before: ${loads()}`);
  await admin.dropDatabase(DATABASE);
  await admin.createDatabase(DATABASE);
  await migrateQueueBox(url);
  await withClient(url, fill);

  const instance = '00000000-0000-0000-0000-0000000000b1';
  const producer = traffic(url, (client) =>
    client.query("INSERT INTO queuebox_outbox (message_id, destination, payload) VALUES (gen_random_uuid(), 'bench', '{}')"),
  );
  const claimer = traffic(url, async (client) => {
    const { rows: claimed } = await client.query('SELECT id, claim_token FROM queuebox_outbox_claim(50, 60000, $1)', [instance]);
    if (claimed.length === 0) return;
    await client.query(
      "UPDATE queuebox_outbox SET state = 'sent', sent_at = now() WHERE id = ANY($1::bigint[]) AND claim_token = ANY($2::uuid[])",
      [claimed.map((c) => c.id), claimed.map((c) => c.claim_token)],
    );
  });
  // A producer's transaction that enqueued and read the outbox and stays open.
  const holder = await connect(url);
  await holder.query('BEGIN');
  await holder.query("INSERT INTO queuebox_outbox (message_id, destination, payload) VALUES (gen_random_uuid(), 'bench', '{}')");
  await holder.query("SELECT count(*) FROM queuebox_outbox WHERE state = 'pending'");

  const migrator = await connect(url);
  const { rows: pid } = await migrator.query('SELECT pg_backend_pid() AS pid');
  const watcher = await connect(url);
  const results = [];
  try {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    producer.window();
    claimer.window();
    for (let i = 0; i < 3; i++) {
      // For comparison: windows as long as a migration's, without one.
      await new Promise((resolve) => setTimeout(resolve, 210));
      const p = producer.window();
      const c = claimer.window();
      results.push({ step: 'no migration', tookMs: 0, producerMs: p.longest, claimerMs: c.longest });
      log(
        `no migration: longest producer insert ${p.longest.toFixed(1)} ms (${p.count}), longest claim and completion ${c.longest.toFixed(1)} ms (${c.count})`,
      );
    }
    for (const [migration, number] of MIGRATIONS) {
      for (const direction of ['down', 'up']) {
        const sql = queuebox.renderSchemaSql('postgres', { migration, direction });
        const locks = new Set();
        let watching = true;
        const sampling = (async () => {
          while (watching) {
            const { rows: held } = await watcher.query(
              `SELECT CASE WHEN l.locktype = 'relation' THEN 'relation ' || l.relation::regclass::text
                           WHEN l.locktype = 'object' THEN pg_describe_object(l.classid, l.objid, l.objsubid)
                           ELSE l.locktype END AS object, l.mode, l.granted
                 FROM pg_locks l
                WHERE l.pid = $1 AND l.locktype NOT IN ('virtualxid', 'transactionid')`,
              [pid[0].pid],
            );
            for (const lock of held) locks.add(`${lock.mode} on ${lock.object}${lock.granted ? '' : ' (waiting)'}`);
            await new Promise((resolve) => setTimeout(resolve, 5));
          }
        })();
        const started = now();
        await migrator.query('BEGIN');
        await migrator.query(sql);
        await migrator.query('COMMIT');
        const tookMs = now() - started;
        await new Promise((resolve) => setTimeout(resolve, 200)); // statements that waited finish
        watching = false;
        await sampling;
        const p = producer.window();
        const c = claimer.window();
        const result = { step: `${number} ${direction}`, tookMs, producerMs: p.longest, claimerMs: c.longest, locks: [...locks].sort() };
        results.push(result);
        log(
          `${result.step}: ${tookMs.toFixed(1)} ms; longest producer insert ${p.longest.toFixed(1)} ms (${p.count} in the window), longest claim and completion ${c.longest.toFixed(1)} ms (${c.count}); locks: ${result.locks.join(', ') || 'none seen'}`,
        );
      }
    }
  } finally {
    await holder.query('ROLLBACK');
    await Promise.all([holder.end(), migrator.end(), watcher.end(), producer.stop(), claimer.stop()]);
  }
  log(`\n${rows.toLocaleString('en-US')} outbox rows; a producer's transaction stayed open throughout\n`);
  log('| step | time (ms) | longest producer insert (ms) | longest claim + completion (ms) |');
  log('|---|---|---|---|');
  for (const r of results) log(`| ${r.step} | ${r.tookMs.toFixed(1)} | ${r.producerMs.toFixed(1)} | ${r.claimerMs.toFixed(1)} |`);
  log(`\nload average after: ${loads()}`);
} finally {
  await admin.dropDatabase(DATABASE).catch(() => {});
  await admin.close();
}
