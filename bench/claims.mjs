// The claim lock, measured alone (issue 36): how fast 1, 2 and 4 claimers drain a backlog of rows
// without a key through QueueBox's own claim function and fenced batch completion, with the claim
// functions of migration 012 (rows without a key claimed without the lock) and with those of the
// version before (every claim behind the table's advisory lock; 012's down migration writes them).
// No worker, no publisher: each claimer is one connection that claims a batch, then completes it.
// With BENCH_CLAIM_KEYS=<n> the rows have n keys (row g has key g mod n), and the two modes are the
// claim functions of migration 013 (keyed claims take the claim lock shared and lock each key they
// take; a claim of more than 100 rows takes the claim lock alone) and those of 012 (keyed claims
// behind the whole lock; 013's down migration writes them).
//
//   npm run build && node bench/claims.mjs
//
// BENCH_PG_URL: the server (default postgres://postgres@127.0.0.1:5432/postgres); a scratch database
// qb_bench_claims is created and dropped. BENCH_CLAIM_ROWS (default 200,000), BENCH_CLAIM_BATCH
// (default 500), BENCH_CLAIMERS (default 1,2,4). Check the load average before and after: only a
// run on a quiet machine counts.
import { loadavg } from 'node:os';
import { now } from './clock.mjs';
import { Admin, connect, databaseUrl, withClient } from './pg.mjs';
import { loadQueueBox, migrateQueueBox, requireFromDist } from './queuebox-lib.mjs';

const serverUrl = process.env.BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const rows = Number(process.env.BENCH_CLAIM_ROWS ?? 200_000);
const batch = Number(process.env.BENCH_CLAIM_BATCH ?? 500);
const claimerCounts = (process.env.BENCH_CLAIMERS ?? '1,2,4').split(',').map(Number);
const keys = Number(process.env.BENCH_CLAIM_KEYS ?? 0);
/** The migration whose down and up give the two modes, and what each mode is called. */
const modes =
  keys > 0
    ? {
        migration: 'keyedClaims',
        locked: 'keyed claims behind the whole lock (012)',
        lockFree: 'keyed claims of 013 (key locks up to 100 rows a claim)',
      }
    : { migration: 'unkeyedClaims', locked: 'every claim behind the lock', lockFree: 'unkeyed claims without the lock' };
const DATABASE = 'qb_bench_claims';

const { queuebox } = loadQueueBox();
const url = databaseUrl(serverUrl, DATABASE);

/** The fenced completion QueueBox sends for a batch of claims (lease.sql.ts). */
const COMPLETE = requireFromDist('dialects/postgres/lease.sql.js').leaseCompleteBatchSql('queuebox_outbox', {
  state: 'sent',
  column: 'sent_at',
});

/** Writes the claim functions of the mode's migration (`up`) or of the version before (`down`). */
const claimFunctions = (direction) =>
  withClient(url, (client) => client.query(queuebox.renderSchemaSql('postgres', { migration: modes.migration, direction })));

async function fill() {
  await withClient(url, async (client) => {
    await client.query('TRUNCATE queuebox_outbox');
    await client.query(
      "INSERT INTO queuebox_outbox (message_id, destination, \"key\", payload) SELECT gen_random_uuid(), 'bench', CASE WHEN $2::int > 0 THEN 'k' || (g % $2::int) END, jsonb_build_object('seq', g) FROM generate_series(1, $1::int) g",
      [rows, keys],
    );
    await client.query('VACUUM (ANALYZE) queuebox_outbox');
    await client.query('CHECKPOINT').catch(() => {});
  });
}

/**
 * `claimers` connections claim and complete until the backlog is gone; resolves to messages per
 * second, the mean time of a claim call (ms) and the rows a claim took on average.
 */
async function drain(claimers) {
  const clients = await Promise.all(Array.from({ length: claimers }, () => connect(url)));
  let claimed = 0;
  let lost = 0;
  let claims = 0;
  let claimMs = 0;
  const started = now();
  try {
    await Promise.all(
      clients.map(async (client) => {
        for (;;) {
          const sent = now();
          const { rows: found } = await client.query('SELECT id::text AS id, claim_token FROM queuebox_outbox_claim($1, $2, $3)', [
            batch,
            60_000,
            null,
          ]);
          claimMs += now() - sent;
          claims++;
          // A keyed claim may come back empty while another holds the keys left: done only once no row is pending.
          if (found.length === 0) {
            const { rows: left } = await client.query("SELECT 1 FROM queuebox_outbox WHERE state = 'pending' LIMIT 1");
            if (left.length === 0) return;
            continue;
          }
          claimed += found.length;
          const { rows: notDone } = await client.query(COMPLETE, [found.map((c) => c.id), found.map((c) => c.claim_token)]);
          lost += notDone.length;
        }
      }),
    );
  } finally {
    await Promise.all(clients.map((client) => client.end()));
  }
  const ms = now() - started;
  if (claimed !== rows || lost !== 0) throw new Error(`claimed ${claimed} of ${rows} rows, ${lost} completions lost: the bench is wrong`);
  return { rate: (rows / ms) * 1000, claimMs: claimMs / claims, rowsPerClaim: claimed / claims };
}

const admin = new Admin(serverUrl);
await admin.open();
try {
  console.log(
    `load average before: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  await admin.dropDatabase(DATABASE);
  await admin.createDatabase(DATABASE);
  await migrateQueueBox(url);
  const table = [];
  for (const claimers of claimerCounts) {
    const row = { claimers };
    for (const [mode, direction] of [
      ['locked', 'down'],
      ['lockFree', 'up'],
    ]) {
      await claimFunctions(direction);
      await fill();
      const { rate, claimMs, rowsPerClaim } = await drain(claimers);
      row[mode] = rate;
      console.log(
        `${claimers} claimer(s), ${modes[mode]}: ${Math.round(rate).toLocaleString('en-US')} msg/s, a claim call ${claimMs.toFixed(2)} ms on average, ${rowsPerClaim.toFixed(1)} rows a claim`,
      );
    }
    table.push(row);
  }
  console.log(
    `\n${rows.toLocaleString('en-US')} rows ${keys > 0 ? `of ${keys.toLocaleString('en-US')} keys` : 'without a key'}, batch ${batch}; claim + fenced completion per batch, one connection per claimer\n`,
  );
  console.log(`| claimers | ${modes.locked} (msg/s) | ${modes.lockFree} (msg/s) | ratio |`);
  console.log('|---|---|---|---|');
  for (const row of table)
    console.log(
      `| ${row.claimers} | ${Math.round(row.locked).toLocaleString('en-US')} | ${Math.round(row.lockFree).toLocaleString('en-US')} | ${(row.lockFree / row.locked).toFixed(2)}x |`,
    );
  console.log(
    `\nload average after: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
} finally {
  await admin.dropDatabase(DATABASE).catch(() => {});
  await admin.close();
}
