// The QueueBoxAdmin reads the dashboard needs beyond the CLI's: throughput per minute, claims in
// flight, the dead-letter key filter and newest-first pages, on a real PostgreSQL.
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import * as pg from '../../lib/dialects/postgres/admin.sql';
import { QueueBoxAdminError } from '../../lib/errors/queuebox.errors';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

describeWithDatabase('QueueBoxAdmin reads for the dashboard (PostgreSQL)', { truncate: ['queuebox_outbox', 'queuebox_inbox'] }, (db) => {
  let t: TestApp;
  let admin: QueueBoxAdmin;

  before(async () => {
    t = await createTestApp(db.url, { workers: false, outbox: { publisher: new RecordingPublisher() } });
    admin = t.get(QueueBoxAdmin);
  });
  after(async () => {
    await t?.app.close();
  });

  /** Outbox rows of one state, `minutesAgo` before the database clock (sent_at, claimed_at: when it finished or died). */
  const outbox = (p: { state: string; destination?: string; key?: string | null; minutesAgo?: number; count?: number; error?: string }) =>
    db.query(
      `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, last_error, created_at, claimed_at, sent_at,
         claim_token, lease_expires_at)
       SELECT gen_random_uuid(), $1, $2, '{}', $3, 1, $5, t - interval '1 minute', t, CASE WHEN $3 = 'sent' THEN t END,
         CASE WHEN $3 = 'processing' THEN gen_random_uuid() END, CASE WHEN $3 = 'processing' THEN t + interval '5 minutes' END
       FROM generate_series(1, $6::int), (SELECT clock_timestamp() - make_interval(mins => $4::int) AS t) AS at`,
      [p.destination ?? 'billing', p.key ?? null, p.state, p.minutesAgo ?? 0, p.error ?? null, p.count ?? 1],
    );

  it('throughput: finished and dead rows per destination and source per minute, the current minute last, by the database clock', async () => {
    await outbox({ state: 'sent', count: 3 });
    await outbox({ state: 'sent', minutesAgo: 10, count: 2 });
    await outbox({ state: 'sent', minutesAgo: 90, count: 5 }); // outside the hour
    await outbox({ state: 'dead', minutesAgo: 1, error: 'boom' });
    await outbox({ state: 'sent', destination: 'crm' });
    await db.query(`INSERT INTO queuebox_inbox (source, idempotency_key, payload, state, attempts, claimed_at, processed_at)
      VALUES ('payments', 'a', '{}', 'processed', 1, clock_timestamp(), clock_timestamp()),
             ('payments', 'b', '{}', 'dead', 1, clock_timestamp(), NULL)`);

    const { since, minutes, rows } = await admin.throughput();
    assert.equal(minutes, 60);
    assert.equal(since.getUTCSeconds(), 0, 'the window starts on a minute boundary');
    const [{ now }] = await db.query<{ now: Date }>('SELECT clock_timestamp() AS now');
    const current = Math.floor((now.getTime() - since.getTime()) / 60_000);
    assert.ok(current === 59 || current === 60, `the last minute is the current one (${current})`);
    const billing = rows.find((r) => r.component === 'outbox' && r.name === 'billing');
    assert.ok(billing);
    assert.equal(billing.finished.length, 60);
    assert.equal(
      billing.finished.reduce((a, b) => a + b),
      5,
      'the 5 rows sent 90 minutes ago are outside the window',
    );
    assert.equal(billing.finished[59], 3, 'sent now: the last bucket');
    assert.equal(billing.finished[49], 2, 'sent 10 minutes ago');
    assert.equal(billing.dead[58], 1, 'died a minute ago');
    assert.deepEqual(
      rows.map((r) => [r.component, r.name, r.finished.reduce((a, b) => a + b), r.dead.reduce((a, b) => a + b)]),
      [
        ['outbox', 'billing', 5, 1],
        ['outbox', 'crm', 1, 0],
        ['inbox', 'payments', 1, 1],
      ],
    );
    assert.equal((await admin.throughput({ minutes: 5 })).rows[0].finished.length, 5);
    await assert.rejects(admin.throughput({ minutes: 0 }), QueueBoxAdminError);
    await assert.rejects(admin.throughput({ minutes: 1441 }), QueueBoxAdminError);
  });

  it('throughput reads the sent_at and processed_at indexes from the window start (EXPLAIN, 20,000 rows sent over a week)', async () => {
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, sent_at)
      SELECT gen_random_uuid(), 'd' || (n % 5), '{}', 'sent', 1, clock_timestamp() - make_interval(secs => n * 30) FROM generate_series(1, 20000) n`);
    await db.query(`INSERT INTO queuebox_inbox (source, idempotency_key, payload, state, attempts, processed_at)
      SELECT 's', n::text, '{}', 'processed', 1, clock_timestamp() - make_interval(secs => n * 30) FROM generate_series(1, 20000) n`);
    await db.query('ANALYZE queuebox_outbox; ANALYZE queuebox_inbox');
    const [plan] = await db.query(`EXPLAIN (FORMAT JSON) ${pg.adminThroughputSql('"queuebox_outbox"', '"queuebox_inbox"')}`, [
      new Date(Date.now() - 3600_000),
    ]);
    const text = JSON.stringify(plan);
    assert.doesNotMatch(text, /Seq Scan/, text);
    assert.match(text, /queuebox_outbox_sent_idx/);
    assert.match(text, /queuebox_inbox_processed_idx/);
  });

  it('lists claims in flight, oldest first, with their token, age and lease left by the database clock', async () => {
    await outbox({ state: 'processing', key: 'k1', minutesAgo: 2 });
    await outbox({ state: 'processing', key: 'k2', minutesAgo: 7 }); // its lease (claim + 5 min) expired 2 minutes ago
    await outbox({ state: 'pending' });
    const rows = await admin.listClaims({ component: 'outbox' });
    assert.deepEqual(
      rows.map((r) => r.key),
      ['k2', 'k1'],
    );
    const [k2, k1] = rows;
    assert.match(k1.token, /^[0-9a-f-]{36}$/);
    assert.match(k1.messageId ?? '', /^[0-9a-f-]{36}$/);
    assert.ok(Math.abs(k1.ageSeconds - 120) < 5, `age ${k1.ageSeconds}`);
    assert.ok(Math.abs(k1.leaseRemainingSeconds - 180) < 5, `lease left ${k1.leaseRemainingSeconds}`);
    assert.ok(k2.leaseRemainingSeconds < -100, 'an expired lease shows as negative');
    assert.deepEqual(await admin.listClaims({ component: 'inbox' }), []);
    assert.equal((await admin.listClaims({ component: 'outbox', limit: 1 })).length, 1);
    await assert.rejects(admin.listClaims({ component: 'nope' as never }), QueueBoxAdminError);
  });

  it('dead letters: filtered by key, newest first with keyset pages, and the key filter selects what a replay changes', async () => {
    for (const key of ['a', 'b', 'a', 'c', 'a']) await outbox({ state: 'dead', key, error: `failed ${key}` });
    const all = await admin.listDeadLetters({ component: 'outbox' });
    const ids = all.rows.map((r) => r.id);
    const newest = await admin.listDeadLetters({ component: 'outbox', key: 'a' }, { newestFirst: true, limit: 2 });
    assert.deepEqual(
      newest.rows.map((r) => r.id),
      [ids[4], ids[2]],
    );
    const next = await admin.listDeadLetters(
      { component: 'outbox', key: 'a' },
      { newestFirst: true, limit: 2, afterId: newest.nextAfterId ?? '' },
    );
    assert.deepEqual(
      next.rows.map((r) => r.id),
      [ids[0]],
    );
    assert.equal(next.nextAfterId, null);
    assert.equal(await admin.countDeadLetters({ component: 'outbox', key: 'a' }), 3);
    assert.equal(await admin.replayDeadLetters({ component: 'outbox', key: 'b' }), 1);
    assert.deepEqual(
      (await db.query<{ key: string }>(`SELECT "key" FROM queuebox_outbox WHERE state = 'pending'`)).map((r) => r.key),
      ['b'],
    );
    await assert.rejects(
      admin.listDeadLetters({ component: 'outbox', key: 'a', ids: ['1'] } as never),
      (error: unknown) => error instanceof QueueBoxAdminError && error.field === 'ids',
    );
  });
});
