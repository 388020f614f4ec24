// Where a message's database time goes (issue 36, targets 1 and 2): QueueBox's own outbox claim
// function and its fenced batch completion, timed apart, on one connection, with the WAL each
// writes. The completion of `outbox.sentRows: 'keep'` (the row rewritten as `sent`) and of
// `'delete'` (the row deleted) are drained one after the other from the same backlog of rows
// without a key. No worker, no publisher: the statements alone, as the poller sends them.
//
//   npm run build && node bench/statements.mjs
//
// BENCH_PG_URL: the server (default postgres://postgres@127.0.0.1:5432/postgres); a scratch database
// qb_bench_statements is created and dropped. BENCH_STATEMENT_ROWS (default 200,000),
// BENCH_CLAIM_BATCH (default 500), BENCH_REPEAT (default 2: each mode that many times, alternated).
// Check the load average before and after: only a run on a quiet machine counts.
import { loadavg } from 'node:os';
import { now } from './clock.mjs';
import { Admin, databaseUrl, withClient } from './pg.mjs';
import { migrateQueueBox, requireFromDist } from './queuebox-lib.mjs';

const serverUrl = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const rows = Number(process.env.BENCH_STATEMENT_ROWS ?? 200_000);
const batch = Number(process.env.BENCH_CLAIM_BATCH ?? 500);
const repeat = Number(process.env.BENCH_REPEAT ?? 2);
const DATABASE = 'qb_bench_statements';
const url = databaseUrl(serverUrl, DATABASE);
const lease = requireFromDist('dialects/postgres/lease.sql.js');

/** The fenced completion the poller sends for a batch, in each `sentRows` mode (lease.sql.ts). */
const COMPLETE = {
  keep: lease.leaseCompleteBatchSql('queuebox_outbox', { state: 'sent', column: 'sent_at' }),
  delete: lease.leaseDeleteBatchSql('queuebox_outbox', 'queuebox_outbox_attempts'),
};

const loads = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

async function fill(client) {
  await client.query('TRUNCATE queuebox_outbox');
  await client.query(
    "INSERT INTO queuebox_outbox (message_id, destination, payload) SELECT gen_random_uuid(), 'bench', jsonb_build_object('seq', g) FROM generate_series(1, $1::int) g",
    [rows],
  );
  await client.query('VACUUM (ANALYZE) queuebox_outbox');
  await client.query('CHECKPOINT').catch(() => {});
}

/** Drains the backlog: claim, then complete, one batch at a time. Microseconds per message in each, and WAL bytes per message. */
async function drain(client, mode) {
  const walAt = async () => (await client.query('SELECT pg_current_wal_lsn() AS lsn')).rows[0].lsn;
  const instance = (await client.query('SELECT gen_random_uuid() AS id')).rows[0].id;
  const walBefore = await walAt();
  let claimMs = 0;
  let completeMs = 0;
  let done = 0;
  for (;;) {
    let sent = now();
    const { rows: claimed } = await client.query('SELECT id::text AS id, claim_token FROM queuebox_outbox_claim($1, $2, $3)', [
      batch,
      300_000,
      instance,
    ]);
    claimMs += now() - sent;
    if (claimed.length === 0) break;
    sent = now();
    const { rows: lost } = await client.query(COMPLETE[mode], [claimed.map((c) => c.id), claimed.map((c) => c.claim_token)]);
    completeMs += now() - sent;
    if (lost.length > 0) throw new Error(`${lost.length} completions lost on one connection: the bench is wrong`);
    done += claimed.length;
  }
  if (done !== rows) throw new Error(`claimed ${done} of ${rows} rows: the bench is wrong`);
  const wal = (await client.query('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1) AS bytes', [walBefore])).rows[0].bytes;
  const perMessageUs = (ms) => (ms * 1000) / rows;
  return { claimUs: perMessageUs(claimMs), completeUs: perMessageUs(completeMs), walBytes: Number(wal) / rows };
}

const admin = new Admin(serverUrl);
await admin.open();
try {
  console.log(`load average before: ${loads()}`);
  await admin.dropDatabase(DATABASE);
  await admin.createDatabase(DATABASE);
  await migrateQueueBox(url);
  const results = [];
  await withClient(url, async (client) => {
    for (let run = 0; run < repeat; run++) {
      for (const mode of ['keep', 'delete']) {
        await fill(client);
        const result = { mode, ...(await drain(client, mode)) };
        results.push(result);
        console.log(
          `sentRows '${mode}': claim ${result.claimUs.toFixed(1)} µs/msg, completion ${result.completeUs.toFixed(1)} µs/msg, WAL ${Math.round(result.walBytes)} B/msg`,
        );
      }
    }
  });
  console.log(`\n${rows.toLocaleString('en-US')} rows without a key, batch ${batch}, one connection; claim and completion timed apart\n`);
  console.log('| sentRows | claim (µs/msg) | completion (µs/msg) | both | WAL (B/msg) |');
  console.log('|---|---|---|---|---|');
  for (const r of results)
    console.log(
      `| ${r.mode} | ${r.claimUs.toFixed(1)} | ${r.completeUs.toFixed(1)} | ${(r.claimUs + r.completeUs).toFixed(1)} | ${Math.round(r.walBytes)} |`,
    );
  console.log(`\nload average after: ${loads()}`);
} finally {
  await admin.dropDatabase(DATABASE).catch(() => {});
  await admin.close();
}
