#!/usr/bin/env node
// The dashboard on a big table (issue 28): 1,000,000 sent outbox rows and 10,000 dead rows (plus
// 100,000 processed inbox rows, and a few pending, in-flight and blocked ones), then every API
// route timed over HTTP against a real Nest app (Express) with the dashboard mounted: the median
// and p95 of several calls each, after warm-up calls. A benchmark, not a test: it prints a table.
//
//   npm run bench:dashboard          (from the repository root: builds QueueBox first)
//   BENCH_PG_URL=postgres://... npm run bench:dashboard   (else QUEUEBOX_PG_URL, else an embedded PostgreSQL)
//   BENCH_CALLS=30                   calls per route (default 20, after 3 warm-up calls)
//   BENCH_QUIET_LOAD=0.5             after filling, wait until the 1-minute load average is below this before timing
//   BENCH_ROWS=10000000              sent outbox rows (default 1,000,000; the size is 10 million)
//
// The message browser (issue 40) is timed filter by filter, each with how it was served (the
// `plan`) and, for a bounded scan, where it stopped (`scannedUpTo`); then the history: its first
// read (the whole window) and the reads after it (the buckets since).
//
// A second pass adds 100,000 rows sent within the last hour (a busy hour) and times the overview
// again: its throughput query reads every row finished in the window (see docs/dashboard.md).
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(join(root, 'package.json'));
require('reflect-metadata');
const { Client } = require('pg');
const { Module } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { TypeOrmModule } = require('@nestjs/typeorm');
const { DataSource } = require('typeorm');
const queuebox = require(join(root, 'dist/index.js'));
const { QueueBoxDashboardModule } = require(join(root, 'dist/dashboard/index.js'));

const CALLS = Number(process.env.BENCH_CALLS ?? 20);
const ROWS = Number(process.env.BENCH_ROWS ?? 1_000_000);
if (!Number.isInteger(ROWS) || ROWS < 10_000)
  throw new Error(`BENCH_ROWS must be an integer of at least 10000, got ${process.env.BENCH_ROWS}`);
/** The sent rows span 7 days whatever their number. */
const SPACING_MS = 604_800_000 / ROWS;
const WARMUP = 3;
const log = (line) => console.log(line);

let server = process.env.BENCH_PG_URL ?? process.env.QUEUEBOX_PG_URL;
let embedded;
if (!server) {
  const { startEmbeddedPostgres } = await import(pathToFileURL(join(root, 'scripts/embedded-postgres.mjs')).href);
  embedded = await startEmbeddedPostgres();
  server = embedded.url;
}
const name = `qb_dashboard_bench_${randomBytes(4).toString('hex')}`;
const onServer = async (sql) => {
  const client = new Client({ connectionString: server });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
};
await onServer(`CREATE DATABASE ${name}`);
const url = new URL(server);
url.pathname = `/${name}`;
const db = new Client({ connectionString: url.toString() });
await db.connect();

let app;
try {
  const migrations = new DataSource({
    type: 'postgres',
    url: url.toString(),
    logging: false,
    migrations: queuebox.createQueueBoxMigrations(),
  });
  await migrations.initialize();
  await migrations.runMigrations();
  await migrations.destroy();

  const { rows: version } = await db.query('SHOW server_version');
  log(`PostgreSQL ${version[0].server_version}, database ${name}`);
  const fill = async (what, sql) => {
    const started = Date.now();
    await db.query(sql);
    log(`  ${what}: ${((Date.now() - started) / 1000).toFixed(1)} s`);
  };
  log('Filling the tables...');
  // Sent over the last 7 days, uniformly (ROWS / 168 in any hour), to 10 destinations and 5,000 keys;
  // ids grow with time, as in a real table.
  await fill(
    `${ROWS.toLocaleString('en')} sent outbox rows`,
    `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, headers, state, attempts, created_at, claimed_at, sent_at, available_at)
     SELECT gen_random_uuid(), 'destination-' || (n % 10), 'customer-' || (n % 5000), jsonb_build_object('order', n, 'total', n % 997),
            '{}'::jsonb, 'sent', 1, t - interval '1 second', t - interval '50 milliseconds', t, t - interval '1 second'
     FROM generate_series(1, ${ROWS}) n, LATERAL (SELECT clock_timestamp() - ((${ROWS} + 1 - n) * interval '${SPACING_MS} milliseconds') AS t) AS at`,
  );
  await fill(
    '8,000 dead outbox rows',
    `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, headers, state, attempts, last_error, created_at, claimed_at, available_at)
     SELECT gen_random_uuid(), 'destination-' || (n % 10), 'customer-' || (n % 5000), jsonb_build_object('order', n),
            jsonb_build_object('traceparent', '00-' || md5(n::text) || '-00f067aa0ba902b7-01'), 'dead', 10,
            CASE n % 4 WHEN 0 THEN 'HTTP 503 from http://billing.internal/events'
                       WHEN 1 THEN 'request to http://crm.internal/hooks failed: ETIMEDOUT'
                       WHEN 2 THEN 'PermanentPublishError: card ' || (1000 + n % 9000) || ' expired'
                       ELSE 'HTTP 422 from http://ledger.internal/entries: {"error":"duplicate entry ' || n || '"}' END,
            t - interval '1 hour', t, t
     FROM generate_series(1, 8000) n, LATERAL (SELECT clock_timestamp() - (n * interval '75.6 seconds') AS t) AS at`,
  );
  await fill(
    '100,000 processed inbox rows',
    `INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload, state, attempts, received_at, claimed_at, processed_at)
     SELECT 'source-' || (n % 5), 'event-' || n, 'account-' || (n % 2000), '{}'::jsonb, 'processed', 1, t - interval '1 second', t, t
     FROM generate_series(1, 100000) n, LATERAL (SELECT clock_timestamp() - (n * interval '6.048 seconds') AS t) AS at`,
  );
  await fill(
    '2,000 dead inbox rows',
    `INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload, state, attempts, last_error, received_at, claimed_at)
     SELECT 'source-' || (n % 5), 'dead-' || n, 'account-' || (n % 2000), '{}'::jsonb, 'dead', 5, 'handler threw: balance check failed for ' || n,
            t - interval '1 hour', t
     FROM generate_series(1, 2000) n, LATERAL (SELECT clock_timestamp() - (n * interval '302.4 seconds') AS t) AS at`,
  );
  await fill(
    '1,000 pending, 50 in flight, 40 blocked keys (a failing head and one row behind each)',
    `INSERT INTO queuebox_outbox (message_id, destination, payload, state, created_at, available_at)
       SELECT gen_random_uuid(), 'destination-' || (n % 10), '{}'::jsonb, 'pending', clock_timestamp() - n * interval '1 second', clock_timestamp()
       FROM generate_series(1, 1000) n;
     INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, claim_token, claimed_at, lease_expires_at)
       SELECT gen_random_uuid(), 'destination-' || (n % 10), 'busy-' || n, '{}'::jsonb, 'processing', 1, gen_random_uuid(),
              clock_timestamp() - n * interval '3 seconds', clock_timestamp() + interval '5 minutes'
       FROM generate_series(1, 50) n;
     INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, last_error, available_at)
       SELECT gen_random_uuid(), 'destination-' || (n % 10), 'stuck-' || n, '{}'::jsonb, 'pending', 4, 'HTTP 500', clock_timestamp() + interval '10 minutes'
       FROM generate_series(1, 40) n;
     INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state)
       SELECT gen_random_uuid(), 'destination-' || (n % 10), 'stuck-' || n, '{}'::jsonb, 'pending' FROM generate_series(1, 40) n`,
  );
  // What autovacuum would have done to tables this old: statistics and the visibility map.
  await fill('VACUUM ANALYZE outbox', 'VACUUM ANALYZE queuebox_outbox');
  await fill('VACUUM ANALYZE inbox', 'VACUUM ANALYZE queuebox_inbox');

  const load = () =>
    loadavg()
      .map((n) => n.toFixed(2))
      .join(' ');
  const quietBelow = Number(process.env.BENCH_QUIET_LOAD ?? 0);
  if (quietBelow > 0) {
    log(`Waiting for the 1-minute load average to fall below ${quietBelow} (now ${load()})...`);
    while (loadavg()[0] >= quietBelow) await new Promise((resolve) => setTimeout(resolve, 5_000));
  }
  log(`Load average before the timings: ${load()}`);

  class BenchModule {}
  Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url: url.toString(), logging: false, extra: { max: 10 } }),
      queuebox.QueueBoxModule.forRoot({ workers: false }),
      QueueBoxDashboardModule.forRoot({ public: true }),
    ],
  })(BenchModule);
  app = await NestFactory.create(BenchModule, { logger: ['error', 'warn'] });
  await app.listen(0, '127.0.0.1');
  const base = `${(await app.getUrl()).replace('[::1]', '127.0.0.1')}/queuebox/`;
  const session = await (await fetch(`${base}api/session`)).json();
  const post = (body) => ({
    method: 'POST',
    headers: { 'content-type': 'application/json', [session.tokenHeader]: session.token },
    body: JSON.stringify(body),
  });

  const ids = async (sql) => (await db.query(sql)).rows.map((r) => String(r.id));
  const deadIds = await ids(`SELECT id FROM queuebox_outbox WHERE state = 'dead' ORDER BY id DESC LIMIT ${2 * (CALLS + WARMUP)}`);
  const stuck = (await db.query(`SELECT DISTINCT "key" FROM queuebox_outbox WHERE "key" LIKE 'stuck-%' ORDER BY 1`)).rows.map((r) => r.key);
  const firstPage = await (await fetch(`${base}api/default/dead-letters`)).json();
  const dayAgo = new Date(Date.now() - 86_400_000).toISOString();
  const twoDaysAgo = new Date(Date.now() - 2 * 86_400_000).toISOString();

  /** [label, () => [path, init]]: a function, so each call of an action takes its own row. */
  let n = 0;
  const routes = [
    ['GET  page (index.html)', () => ['']],
    ['GET  assets/views.js (gzip)', () => ['assets/views.js', { headers: { 'accept-encoding': 'gzip' } }]],
    ['GET  api/session', () => ['api/session']],
    ['GET  api/default/overview', () => ['api/default/overview']],
    ['GET  dead-letters (outbox, newest 50)', () => ['api/default/dead-letters']],
    ['GET  dead-letters, next page', () => [`api/default/dead-letters?after=${firstPage.nextAfterId}`]],
    ['GET  dead-letters?error=expired', () => ['api/default/dead-letters?error=expired']],
    ['GET  dead-letters?error=<no match>', () => ['api/default/dead-letters?error=no-such-error-text']],
    ['GET  dead-letters?name=&key=', () => ['api/default/dead-letters?name=destination-2&key=customer-42']],
    ['GET  dead-letters?from=&to= (one day)', () => [`api/default/dead-letters?from=${twoDaysAgo}&to=${dayAgo}`]],
    ['GET  dead-letters?component=inbox', () => ['api/default/dead-letters?component=inbox']],
    ['GET  dead-letters/count', () => ['api/default/dead-letters/count']],
    ['GET  dead-letters/count?error=ETIMEDOUT', () => ['api/default/dead-letters/count?error=ETIMEDOUT']],
    ['GET  dead-letters/outbox/:id (detail)', () => [`api/default/dead-letters/outbox/${deadIds[0]}`]],
    ['GET  blocked?component=outbox', () => ['api/default/blocked?component=outbox']],
    ['GET  blocked?component=inbox', () => ['api/default/blocked?component=inbox']],
    ['GET  claims?component=outbox', () => ['api/default/claims?component=outbox']],
    ['GET  claims?component=inbox', () => ['api/default/claims?component=inbox']],
    ['GET  heartbeats', () => ['api/default/heartbeats']],
    ['POST dead-letters/replay (1 id)', () => ['api/default/dead-letters/replay', post({ component: 'outbox', ids: [deadIds[n++]] })]],
    [
      'POST dead-letters/discard (1 id)',
      () => [
        'api/default/dead-letters/discard',
        post({ component: 'outbox', ids: [deadIds[deadIds.length - 1 - (n++ % deadIds.length)]] }),
      ],
    ],
    [
      'POST dead-letters/replay (filter, no match)',
      () => ['api/default/dead-letters/replay', post({ component: 'outbox', filter: { error: 'no-such-error-text' } })],
    ],
    ['POST blocked/skip-head', () => ['api/default/blocked/skip-head', post({ component: 'outbox', key: stuck[n++ % stuck.length] })]],
  ];

  const time = async (label, call) => {
    const samples = [];
    for (let i = 0; i < WARMUP + CALLS; i++) {
      const [path, init] = call();
      const started = performance.now();
      const response = await fetch(`${base}${path}`, init);
      await response.arrayBuffer();
      const ms = performance.now() - started;
      if (!response.ok) throw new Error(`${label}: HTTP ${response.status}`);
      if (i >= WARMUP) samples.push(ms);
    }
    samples.sort((a, b) => a - b);
    const pick = (q) => samples[Math.min(samples.length - 1, Math.ceil(q * samples.length) - 1)];
    return { label, median: pick(0.5), p95: pick(0.95), max: samples[samples.length - 1] };
  };
  const table = (results) => {
    log(`| Route | median (ms) | p95 (ms) | max (ms) |\n| --- | ---: | ---: | ---: |`);
    for (const r of results) log(`| \`${r.label}\` | ${r.median.toFixed(1)} | ${r.p95.toFixed(1)} | ${r.max.toFixed(1)} |`);
  };

  log(`\nEvery route, ${CALLS} calls each after ${WARMUP} warm-up calls (HTTP, one at a time):\n`);
  const results = [];
  for (const [label, call] of routes) {
    n = 0;
    results.push(await time(label, call));
  }
  table(results);
  await messageBrowser();
  await history();
  const over = results.filter((r) => r.p95 >= 200);
  log(
    over.length === 0
      ? '\nEvery route answered under 200 ms at p95.'
      : `\nAt or over 200 ms at p95: ${over.map((r) => r.label).join(', ')}`,
  );

  /** The message browser, filter by filter: the time, how it was served and how far a bounded scan looked. */
  async function messageBrowser() {
    const [old] = (await db.query(`SELECT id, message_id FROM queuebox_outbox WHERE state = 'sent' ORDER BY id LIMIT 1 OFFSET 10`)).rows;
    const recentOrder = ROWS - 20; // a payload `order` among the newest rows (ids and times grow with n)
    const threeDaysAgo = new Date(Date.now() - 3 * 86_400_000).toISOString();
    const hourAgo = new Date(Date.now() - 3_600_000).toISOString();
    const m = (query) => `api/default/messages?${query}`;
    const filters = [
      ['no filter (newest 50)', m('')],
      ['id (message id of an old row)', m(`id=${old.message_id}`)],
      ['id + source (inbox)', m('component=inbox&name=source-0&id=event-50000')],
      ['name (1 row in 10)', m('name=destination-2')],
      ['key (1 row in 5,000)', m('key=customer-42')],
      ['state=pending', m('state=pending')],
      ['state=processing', m('state=processing')],
      ['state=dead&name=', m('state=dead&name=destination-3')],
      ['state=sent&key=', m('state=sent&key=customer-7')],
      ['since/until (created, one day, 2-3 days ago)', m(`since=${threeDaysAgo}&until=${twoDaysAgo}`)],
      ['time=finished since an hour ago', m(`time=finished&since=${hourAgo}`)],
      ['path order=<recent>', m(`path=order&value=${recentOrder}`)],
      ['path order=<no match>', m('path=order&value=-1')],
      ['path + name', m(`path=total&value=42&name=destination-4`)],
      ['header traceparent=<no match> (dead)', m('state=dead&pathIn=headers&path=traceparent&value=none')],
      ['GET  messages/outbox/:id (detail)', `api/default/messages/outbox/${old.id}`],
    ];
    log(`\nThe message browser on ${ROWS.toLocaleString('en')} sent rows (scan limit 100,000 rows per page):\n`);
    log('| Filter | median (ms) | p95 (ms) | rows | plan | scanned up to |\n| --- | ---: | ---: | ---: | --- | --- |');
    for (const [label, path] of filters) {
      const timed = await time(label, () => [path]);
      const answer = await (await fetch(`${base}${path}`)).json();
      const scanned = answer.scannedUpTo === undefined || answer.scannedUpTo === null ? '' : `row ${answer.scannedUpTo}`;
      log(
        `| \`${label}\` | ${timed.median.toFixed(1)} | ${timed.p95.toFixed(1)} | ${answer.rows?.length ?? ''} | ${answer.plan ?? ''} | ${scanned} |`,
      );
    }
  }

  /**
   * The history: its first read in this app counts the whole window; the reads after it count the
   * buckets not counted before (the last hour or two: see admin/history-counts.ts). In this order,
   * the 24-hour reads find their settled hours counted by the 7-day ones.
   */
  async function history() {
    const reads = [
      ['7 days per hour, per destination', 'api/default/history?buckets=168'],
      ['24 h per hour, per destination', 'api/default/history'],
      ['7 days per hour, per component (the chart)', 'api/default/history?buckets=168&by=component'],
      ['24 h per hour, per component (the chart)', 'api/default/history?by=component'],
      ['a day per minute, per component', 'api/default/history?bucket=minute&buckets=1440&by=component'],
    ];
    log(
      `\nThe history on ${ROWS.toLocaleString('en')} sent rows: the first read in the app, then ${CALLS} reads after ${WARMUP} warm-up reads:\n`,
    );
    log('| History | first read (ms) | median after (ms) | p95 after (ms) |\n| --- | ---: | ---: | ---: |');
    for (const [label, path] of reads) {
      const started = performance.now();
      const response = await fetch(`${base}${path}`);
      await response.arrayBuffer();
      if (!response.ok) throw new Error(`${label}: HTTP ${response.status}`);
      const first = performance.now() - started;
      const timed = await time(label, () => [path]);
      log(`| ${label} | ${first.toFixed(1)} | ${timed.median.toFixed(1)} | ${timed.p95.toFixed(1)} |`);
    }
  }

  await fill(
    '\nA busy hour: 100,000 more rows sent within the last hour',
    `INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, sent_at)
     SELECT gen_random_uuid(), 'destination-' || (n % 10), '{}'::jsonb, 'sent', 1, clock_timestamp() - (n * interval '35 milliseconds')
     FROM generate_series(1, 100000) n`,
  );
  await db.query('ANALYZE queuebox_outbox');
  log('');
  table([await time('GET  api/default/overview (100,000 sent in the hour)', () => ['api/default/overview'])]);
  log(`\nLoad average after the timings: ${load()}`);
} finally {
  await app?.close();
  await db.end();
  await onServer(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await embedded?.stop();
}
