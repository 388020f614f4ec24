// The attempt history (issue 40 item 2): each failed attempt of an outbox or inbox row recorded by
// the retry or dead-letter statement itself, the last `attemptHistory` kept, nothing written when
// an attempt succeeds; read back through QueueBoxAdmin and `queuebox attempts`.
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { createQueueBoxAdmin } from '../../lib/admin/create-queuebox-admin';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { QUEUEBOX_IDENTITY } from '../../lib/common/queuebox.constants';
import { PublishError } from '../../lib/errors/queuebox.errors';
import { InboxRelay } from '../../lib/inbox/inbox.relay';
import { InboxService } from '../../lib/inbox/inbox.service';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import type { QueueBoxIdentity } from '../../lib/types/instance';
import { createTestApp, type TestApp } from '../support/app';
import { claimsOf } from '../support/claims';
import { runQueueBoxCli } from '../support/cli';
import { describeWithDatabase, type TestDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

const TABLES = ['queuebox_outbox', 'queuebox_inbox', 'queuebox_outbox_attempts', 'queuebox_inbox_attempts'];
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The CLI with the test database's URL in DATABASE_URL. */
const queuebox = (args: string[], url: string) => runQueueBoxCli(args, { DATABASE_URL: url });

/** A publisher that fails every message to `flaky` after 30 ms with an HTTP 503 naming the order, and delivers the rest. */
function partner(): RecordingPublisher {
  return new RecordingPublisher(async (message) => {
    if (message.destination !== 'flaky') return;
    await sleep(30);
    throw new PublishError(`HTTP 503 from partner for order ${(message.payload as { order: number }).order}`, 503);
  });
}

async function enqueue(t: TestApp, destination: string, count: number): Promise<void> {
  const dataSource = t.app.get<DataSource>(getDataSourceToken());
  await dataSource.transaction(async (manager) => {
    for (let n = 1; n <= count; n++) await t.get(OutboxService).enqueue(manager, { destination, payload: { order: 1000 + n } });
  });
}

/** Polls until nothing is due (retries come back at once: backoff 0). */
async function drain(t: TestApp): Promise<void> {
  for (let round = 0; round < 50 && (await t.get(OutboxPoller).runOnce()) > 0; round++);
}

const attemptRows = (db: TestDatabase, table: string) =>
  db.query<{
    row_id: string;
    attempt: number;
    duration_ms: string;
    instance_id: string;
    error_class: string;
    error: string;
    outcome: string;
  }>(`SELECT row_id::text, attempt, duration_ms, instance_id::text, error_class, error, outcome FROM ${table} ORDER BY row_id, id`);

describeWithDatabase('attempt history', { truncate: TABLES }, (db) => {
  let t: TestApp;
  before(async () => {
    t = await createTestApp(db.url, {
      workers: false,
      attemptHistory: 3,
      outbox: { publisher: partner(), retry: { attempts: 5, backoff: () => 0 } },
      inbox: {
        relay: {
          routes: {
            orders: () => {
              throw new TypeError('no customer 42');
            },
          },
          retry: { attempts: 2, backoff: () => 0 },
        },
      },
    });
  });
  after(async () => {
    await t?.app.close();
  });

  it('writes nothing when every attempt succeeds: zero attempt rows after a successful run', async () => {
    await enqueue(t, 'ok', 20);
    await drain(t);
    assert.deepEqual(await db.query("SELECT count(*)::int AS n FROM queuebox_outbox WHERE state = 'sent'"), [{ n: 20 }]);
    assert.deepEqual(await attemptRows(db, 'queuebox_outbox_attempts'), []);
    assert.deepEqual(await db.query('SELECT fingerprint FROM queuebox_outbox WHERE fingerprint IS NOT NULL'), []);
  });

  it('records each failed attempt (time, duration from the claim, instance, class, error), keeps the last attemptHistory, and names the outcome', async () => {
    await enqueue(t, 'flaky', 1);
    await drain(t);
    const [row] = await db.query<{ id: string; state: string; attempts: number; claimed_by: string; fingerprint: string }>(
      'SELECT id::text, state, attempts, claimed_by::text, fingerprint FROM queuebox_outbox',
    );
    assert.deepEqual([row.state, row.attempts], ['dead', 5]);
    assert.equal(row.fingerprint, 'PublishError/503: HTTP # from partner for order #');
    const history = await attemptRows(db, 'queuebox_outbox_attempts');
    assert.deepEqual(
      history.map((h) => [h.row_id, h.attempt, h.outcome, h.error_class]),
      [
        [row.id, 3, 'retry', 'PublishError/503'],
        [row.id, 4, 'retry', 'PublishError/503'],
        [row.id, 5, 'dead', 'PublishError/503'],
      ],
      'attempts 1 and 2 trimmed: the last 3 kept',
    );
    const instance = t.app.get<QueueBoxIdentity>(QUEUEBOX_IDENTITY).id;
    for (const h of history) {
      assert.equal(h.instance_id, instance);
      assert.equal(h.instance_id, row.claimed_by);
      assert.equal(h.error, 'PublishError [QUEUEBOX_PUBLISH]: HTTP 503 from partner for order 1001');
      assert.ok(Number(h.duration_ms) >= 25 && Number(h.duration_ms) < 10_000, `ran ~30 ms from its claim: ${h.duration_ms}`);
    }
    const listed = await t.get(QueueBoxAdmin).listAttempts({ component: 'outbox', id: row.id });
    assert.deepEqual(
      listed.map((a) => [a.attempt, a.outcome]),
      [
        [5, 'dead'],
        [4, 'retry'],
        [3, 'retry'],
      ],
      'newest first',
    );
    assert.ok(listed[0].failedAt instanceof Date && listed[0].failedAt >= listed[2].failedAt);
    assert.equal(listed[0].instanceId, instance);
  });

  it('records the relay failures of inbox rows, dead letter included', async () => {
    await t.get(InboxService).receive({ source: 'orders', idempotencyKey: 'e-1', payload: {} });
    for (let round = 0; round < 5 && (await t.get(InboxRelay).runOnce()) > 0; round++);
    const [row] = await db.query<{ id: string; state: string; fingerprint: string }>(
      'SELECT id::text, state, fingerprint FROM queuebox_inbox',
    );
    assert.equal(row.state, 'dead');
    assert.equal(row.fingerprint, 'TypeError: no customer #');
    assert.deepEqual(
      (await attemptRows(db, 'queuebox_inbox_attempts')).map((h) => [h.attempt, h.outcome, h.error_class, h.error]),
      [
        [1, 'retry', 'TypeError', 'TypeError: no customer 42'],
        [2, 'dead', 'TypeError', 'TypeError: no customer 42'],
      ],
    );
  });

  it('records an attempt whose lease expired when the reclaim step returns it (retry), and when it dies there (dead)', async () => {
    await enqueue(t, 'ok', 1);
    const take = claimsOf(t);
    for (let round = 1; round <= 2; round++) {
      assert.equal((await take.outbox.claim({ limit: 1, leaseMs: 40 })).length, 1);
      await sleep(80);
      // As the poller's reclaim step calls it (maxAttempts, attemptHistory).
      await take.outbox.reclaim({ maxAttempts: 2, attemptHistory: 3 });
    }
    const [row] = await db.query<{ id: string; state: string; claimed_by: string }>(
      'SELECT id::text, state, claimed_by::text FROM queuebox_outbox',
    );
    assert.equal(row.state, 'dead');
    const history = await attemptRows(db, 'queuebox_outbox_attempts');
    assert.deepEqual(
      history.map((h) => [h.attempt, h.outcome, h.error_class, h.instance_id === row.claimed_by]),
      [
        [1, 'retry', 'LeaseExpired', true],
        [2, 'dead', 'LeaseExpired', true],
      ],
    );
    assert.match(history[1].error, /^lease expired on attempt 2 of 2/);
    assert.ok(Number(history[0].duration_ms) >= 40, `from the claim to the reclaim: ${history[0].duration_ms}`);
    await take.outbox.reclaim({ maxAttempts: 2, attemptHistory: 3 });
    assert.equal((await attemptRows(db, 'queuebox_outbox_attempts')).length, 2, 'a reclaim that finds nothing records nothing');

    await t.get(InboxService).receive({ source: 'orders', idempotencyKey: 'r-1', payload: {} });
    await take.relay.claim({ sources: ['orders'], limit: 1, leaseMs: 40 });
    await sleep(80);
    await take.relay.reclaim({ sources: ['orders'], maxAttempts: 5, attemptHistory: 3 });
    assert.deepEqual(
      (await attemptRows(db, 'queuebox_inbox_attempts')).map((h) => [h.attempt, h.outcome, h.error_class]),
      [[1, 'retry', 'LeaseExpired']],
    );
  });

  it('queuebox attempts <id> prints them, newest first; --json has them whole', async () => {
    await enqueue(t, 'flaky', 1);
    await drain(t);
    const [{ id }] = await db.query<{ id: string }>('SELECT id::text FROM queuebox_outbox');
    const text = await queuebox(['attempts', id, '--component', 'outbox'], db.url);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, new RegExp(`Failed attempts of outbox row ${id}, newest first:`));
    assert.match(text.stdout, /attempt {2}failed at\s+ran for {2}instance {2}outcome {2}error class/);
    assert.match(
      text.stdout,
      /\n {8}5 {2}\d{4}-\d\d-\d\dT[\d:]+Z +\d+\.\d{3}s {2}[0-9a-f]{8} {2}dead {5}PublishError\/503\n {4}error: PublishError \[QUEUEBOX_PUBLISH\]: HTTP 503 from partner for order 1001\n/,
    );
    assert.match(text.stdout, /3 attempt\(s\)\./);
    const json = await queuebox(['attempts', id, '--component', 'outbox', '--json'], db.url);
    assert.equal(json.code, 0, json.stderr);
    const parsed = JSON.parse(json.stdout) as { attempts: { attempt: number; errorClass: string }[] };
    assert.deepEqual(
      parsed.attempts.map((a) => a.attempt),
      [5, 4, 3],
    );
    const none = await queuebox(['attempts', '999999', '--component', 'inbox'], db.url);
    assert.match(none.stdout, /No failed attempts recorded for inbox row 999999\./);
    const usage = await queuebox(['attempts', '--component', 'outbox'], db.url);
    assert.equal(usage.code, 2);
    assert.match(usage.stderr, /attempts needs the row id/);
  });

  it('a discarded dead letter takes its history with it; so does retention', async () => {
    await enqueue(t, 'flaky', 2);
    await drain(t);
    const ids = (await db.query<{ id: string }>('SELECT id::text FROM queuebox_outbox ORDER BY id')).map((r) => r.id);
    assert.equal((await attemptRows(db, 'queuebox_outbox_attempts')).length, 6);
    assert.equal(await t.get(QueueBoxAdmin).discardDeadLetters({ component: 'outbox', ids: [ids[0]] }), 1);
    assert.deepEqual(
      [...new Set((await attemptRows(db, 'queuebox_outbox_attempts')).map((h) => h.row_id))],
      [ids[1]],
      'only the kept row has a history',
    );
    await db.query("UPDATE queuebox_outbox SET claimed_at = now() - interval '400 days'");
    const dataSource = t.app.get<DataSource>(getDataSourceToken());
    const keeper = await createQueueBoxAdmin(dataSource, { retention: { deadAfterMs: 86_400_000 } });
    const result = await keeper.runRetention();
    assert.equal(result.deadDeleted, 1);
    assert.deepEqual(await attemptRows(db, 'queuebox_outbox_attempts'), []);
  });
});

describeWithDatabase('attempt history off (attemptHistory: 0)', { truncate: TABLES }, (db) => {
  let t: TestApp;
  before(async () => {
    t = await createTestApp(db.url, {
      workers: false,
      attemptHistory: 0,
      outbox: { publisher: partner(), retry: { attempts: 2, backoff: () => 0 } },
    });
  });
  after(async () => {
    await t?.app.close();
  });

  it('records no attempt, and still fingerprints the dead letter', async () => {
    await enqueue(t, 'flaky', 1);
    await drain(t);
    assert.deepEqual(await db.query('SELECT state, fingerprint FROM queuebox_outbox'), [
      { state: 'dead', fingerprint: 'PublishError/503: HTTP # from partner for order #' },
    ]);
    assert.deepEqual(await attemptRows(db, 'queuebox_outbox_attempts'), []);
  });
});
