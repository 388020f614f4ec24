import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { createQueueBoxAdmin } from '../../lib/admin/create-queuebox-admin';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import * as pgAdmin from '../../lib/dialects/postgres/admin.sql';
import * as pgRetention from '../../lib/dialects/postgres/retention.sql';
import { PermanentPublishError, QueueBoxAdminError } from '../../lib/errors/queuebox.errors';
import { LeaseService } from '../../lib/lease/lease.service';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { MESSAGE_ID_HEADER } from '../../lib/wire-headers';
import { createTestApp, type TestApp } from '../support/app';
import { claimsOf, type TestClaims } from '../support/claims';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

const PG_INSTANCE_TABLES = { instances: '"queuebox_instances"', outbox: '"queuebox_outbox"', inbox: '"queuebox_inbox"' };

const pg = { ...pgAdmin, ...pgRetention };

type Row = { id: string; state: string; attempts: number; last_error: string | null; headers: Record<string, string>; message_id: string };

describeWithDatabase('QueueBoxAdmin on PostgreSQL', { truncate: ['queuebox_outbox', 'queuebox_inbox'] }, (db) => {
  let t: TestApp;
  let admin: QueueBoxAdmin;
  let lease: LeaseService;
  let take: TestClaims;
  let dataSource: DataSource;
  const publisher = new RecordingPublisher();

  before(async () => {
    t = await createTestApp(db.url, { workers: false, outbox: { publisher } });
    admin = t.get(QueueBoxAdmin);
    lease = t.get(LeaseService);
    take = claimsOf(t);
    dataSource = t.app.get(getDataSourceToken());
  });
  after(async () => {
    await t?.app.close();
  });
  beforeEach(async () => {
    publisher.calls.length = 0;
    publisher.delivered.length = 0;
    publisher.behaviour = () => undefined;
  });

  /** Inserts an outbox row in a given state; returns its id. */
  const outboxRow = async (
    p: { destination?: string; key?: string | null; state?: string; attempts?: number; error?: string | null; ageSeconds?: number } = {},
  ) =>
    String(
      (
        await db.query<{ id: string }>(
          `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, last_error, created_at, claimed_at,
             sent_at, claim_token, lease_expires_at)
           VALUES (gen_random_uuid(), $1, $2, '{"secret": 1}', $3, $4, $5, clock_timestamp() - make_interval(secs => $6),
             CASE WHEN $4 > 0 THEN clock_timestamp() - make_interval(secs => $6) END,
             CASE WHEN $3 = 'sent' THEN clock_timestamp() END,
             CASE WHEN $3 = 'processing' THEN gen_random_uuid() END,
             CASE WHEN $3 = 'processing' THEN clock_timestamp() + interval '1 hour' END)
           RETURNING id`,
          [p.destination ?? 'billing', p.key ?? null, p.state ?? 'pending', p.attempts ?? 0, p.error ?? null, p.ageSeconds ?? 0],
        )
      )[0].id,
    );
  const inboxRow = async (
    p: { source?: string; aggregate?: string | null; state?: string; attempts?: number; error?: string | null } = {},
  ) =>
    String(
      (
        await db.query<{ id: string }>(
          `INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload, state, attempts, last_error, claimed_at, processed_at)
           VALUES ($1, gen_random_uuid()::text, $2, '{}', $3, $4, $5, CASE WHEN $4 > 0 THEN clock_timestamp() END,
             CASE WHEN $3 = 'processed' THEN clock_timestamp() END)
           RETURNING id`,
          [p.source ?? 'payments', p.aggregate ?? null, p.state ?? 'pending', p.attempts ?? 0, p.error ?? null],
        )
      )[0].id,
    );
  const outboxRows = async () =>
    db.query<Row>('SELECT id::text AS id, state, attempts, last_error, headers, message_id::text FROM queuebox_outbox ORDER BY id');
  const snapshot = async () =>
    JSON.stringify(await db.query('SELECT * FROM queuebox_outbox ORDER BY id')) +
    JSON.stringify(await db.query('SELECT * FROM queuebox_inbox ORDER BY id'));

  describe('backlog', () => {
    it('counts pending, processing and dead per destination and source, aged by the database clock', async () => {
      await outboxRow({ ageSeconds: 120 });
      await outboxRow({ ageSeconds: 30 });
      await db.query(
        `INSERT INTO queuebox_outbox (message_id, destination, payload, available_at, created_at)
         VALUES (gen_random_uuid(), 'billing', '{}', clock_timestamp() + interval '1 hour', clock_timestamp() - interval '1 day')`,
      );
      await outboxRow({ state: 'processing', attempts: 1 });
      await outboxRow({ state: 'dead', attempts: 3, error: 'x' });
      await outboxRow({ state: 'dead', attempts: 3, error: 'y' });
      for (let n = 0; n < 5; n++) await outboxRow({ state: 'sent', attempts: 1 });
      await outboxRow({ destination: 'crm', state: 'dead', attempts: 1, error: 'z' });
      await outboxRow({ destination: 'audit', state: 'sent', attempts: 1 });
      await inboxRow();
      await inboxRow();
      await inboxRow({ state: 'processed', attempts: 1 });
      await inboxRow({ state: 'dead', attempts: 2, error: 'e' });

      const backlog = await admin.backlog();
      const billing = backlog.find((r) => r.component === 'outbox' && r.name === 'billing');
      assert.ok(billing && billing.oldestPendingAgeSeconds !== null);
      assert.ok(
        billing.oldestPendingAgeSeconds >= 119 && billing.oldestPendingAgeSeconds < 125,
        `oldest due pending row is 120 s old (a row scheduled later does not count), got ${billing.oldestPendingAgeSeconds}`,
      );
      assert.deepEqual(
        backlog.map((r) => ({ ...r, oldestPendingAgeSeconds: r.oldestPendingAgeSeconds === null ? null : 'set' })),
        [
          { component: 'outbox', name: 'billing', pending: 3, processing: 1, dead: 2, oldestPendingAgeSeconds: 'set' },
          { component: 'outbox', name: 'crm', pending: 0, processing: 0, dead: 1, oldestPendingAgeSeconds: null },
          { component: 'inbox', name: 'payments', pending: 2, processing: 0, dead: 1, oldestPendingAgeSeconds: 'set' },
        ],
        'finished rows are not counted; a destination with only sent rows does not appear',
      );
    });

    it('works without Nest through createQueueBoxAdmin(dataSource)', async () => {
      await outboxRow({ destination: 'script', state: 'dead', attempts: 1, error: 'x' });
      const plain = await createQueueBoxAdmin(dataSource);
      assert.deepEqual(await plain.backlog(), [
        { component: 'outbox', name: 'script', pending: 0, processing: 0, dead: 1, oldestPendingAgeSeconds: null },
      ]);
      assert.equal((await plain.runRetention()).skipped, false);
    });

    it('reads the partial indexes, never the whole table (EXPLAIN with 20,000 sent rows)', async () => {
      await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, sent_at)
        SELECT gen_random_uuid(), 'd' || (n % 5), '{}', 'sent', 1, now() FROM generate_series(1, 20000) n`);
      await db.query(`INSERT INTO queuebox_inbox (source, idempotency_key, payload, state, attempts, processed_at)
        SELECT 's', n::text, '{}', 'processed', 1, now() FROM generate_series(1, 20000) n`);
      await outboxRow({ state: 'dead', attempts: 1, error: 'x' });
      await outboxRow();
      await db.query('ANALYZE queuebox_outbox; ANALYZE queuebox_inbox');
      const plan = async (sql: string, params: unknown[] = []) =>
        JSON.stringify((await db.query(`EXPLAIN (FORMAT JSON) ${sql}`, params))[0]);
      const statements: [string, string, unknown[]][] = [
        ['backlog', pg.adminBacklogSql('"queuebox_outbox"', '"queuebox_inbox"'), []],
        ['dead list', pg.deadLetterListSql('"queuebox_outbox"', 'outbox', false), [null, null, null, null, null, null, null, null, 50]],
        [
          'dead list, newest first',
          pg.deadLetterListSql('"queuebox_outbox"', 'outbox', false, true),
          [null, null, null, null, null, null, null, null, 50],
        ],
        ['dead list by key', pg.deadLetterListSql('"queuebox_inbox"', 'inbox', false), [null, null, null, null, null, 'a', null, null, 50]],
        ['dead count', pg.deadLetterCountSql('"queuebox_inbox"', 'inbox'), [null, null, null, null, null, null, null]],
        ['blocked keys', pg.blockedKeyListSql('"queuebox_outbox"', 'outbox', PG_INSTANCE_TABLES), [50]],
        [
          'replay by name',
          pg.deadLetterReplaySql('"queuebox_outbox"', 'outbox'),
          ['d1', null, null, null, null, null, 'Error: x', null, 1000],
        ],
        [
          'discard by ids',
          pg.deadLetterDiscardSql('"queuebox_inbox"', 'inbox', '"queuebox_inbox_attempts"'),
          [null, null, null, null, ['1', '2'], null, null, null, 1000],
        ],
        ['claims in flight', pg.adminClaimListSql('"queuebox_inbox"', 'inbox', PG_INSTANCE_TABLES), [50]],
        ['skip head', pg.blockedKeySkipHeadSql('"queuebox_outbox"', 'outbox'), ['k', null, 'r', 'f']],
        ['skip aggregate', pg.blockedKeySkipHeadSql('"queuebox_inbox"', 'inbox'), ['s', 'a', null, 'r', 'f']],
        ['retention', pg.retentionDeleteSql('"queuebox_outbox"', 'outbox-sent', '"queuebox_outbox_attempts"'), [3600_000, 1000]],
        ['dead groups', pg.deadLetterGroupsSql('"queuebox_outbox"', 'outbox'), [50]],
        ['attempts of a row', pg.attemptListSql('"queuebox_outbox_attempts"'), ['1']],
        ['dead retention', pg.retentionDeleteSql('"queuebox_inbox"', 'inbox-dead'), [3600_000, 1000]],
      ];
      for (const [what, sql, params] of statements) {
        const text = await plan(sql, params);
        // The instances table holds one row per running process: reading it whole is its plan.
        const scanned = [...text.matchAll(/"Node Type":"Seq Scan"[^{}]*?"Relation Name":"(\w+)"/g)].map((m) => m[1]);
        assert.deepEqual(
          scanned.filter((table) => table !== 'queuebox_instances'),
          [],
          `${what}: ${text}`,
        );
      }
    });
  });

  describe('dead letters', () => {
    it('lists with filters and keyset pages, without payloads unless asked', async () => {
      const ids: string[] = [];
      for (let n = 0; n < 5; n++)
        ids.push(await outboxRow({ key: `k${n}`, state: 'dead', attempts: 2, error: n % 2 ? 'HTTP 500 from x' : 'timeout' }));
      await outboxRow({ destination: 'crm', state: 'dead', attempts: 1, error: 'HTTP 500' });
      await outboxRow({ state: 'pending', attempts: 1, error: 'HTTP 500' });

      const first = await admin.listDeadLetters({ component: 'outbox', name: 'billing' }, { limit: 2 });
      assert.deepEqual(
        first.rows.map((r) => r.id),
        ids.slice(0, 2),
      );
      assert.equal(first.nextAfterId, ids[1]);
      assert.equal(first.rows[0].payload, undefined, 'no payload by default');
      assert.equal(first.rows[0].name, 'billing');
      assert.equal(first.rows[0].key, 'k0');
      assert.equal(first.rows[0].attempts, 2);
      assert.match(first.rows[0].messageId ?? '', /^[0-9a-f-]{36}$/);
      const second = await admin.listDeadLetters(
        { component: 'outbox', name: 'billing' },
        { limit: 2, afterId: first.nextAfterId as string },
      );
      const third = await admin.listDeadLetters(
        { component: 'outbox', name: 'billing' },
        { limit: 2, afterId: second.nextAfterId as string },
      );
      assert.deepEqual(
        [...second.rows, ...third.rows].map((r) => r.id),
        ids.slice(2),
      );
      assert.equal(third.nextAfterId, null);

      const http = await admin.listDeadLetters({ component: 'outbox', errorContains: 'http 500' }, { includePayload: true });
      assert.deepEqual(
        http.rows.map((r) => r.id),
        [ids[1], ids[3], http.rows[2].id],
        'case-insensitive substring, every destination, dead rows only',
      );
      assert.deepEqual(http.rows[0].payload, { secret: 1 });
      assert.equal(await admin.countDeadLetters({ component: 'outbox', errorContains: 'HTTP 500' }), 3);
      assert.equal(await admin.countDeadLetters({ component: 'outbox', name: 'billing', errorContains: 'timeout' }), 3);
      assert.equal(await admin.countDeadLetters({ component: 'inbox' }), 0);

      await db.query(`UPDATE queuebox_outbox SET claimed_at = clock_timestamp() - interval '2 days' WHERE id = ANY($1::bigint[])`, [
        [ids[0], ids[1]],
      ]);
      const dayAgo = new Date(Date.now() - 24 * 3600_000);
      assert.equal(await admin.countDeadLetters({ component: 'outbox', deadBefore: dayAgo }), 2);
      assert.equal(await admin.countDeadLetters({ component: 'outbox', deadAfter: dayAgo }), 4);
    });

    it('replays dead rows only, never a row a worker holds, and records the replay', async () => {
      const dead = await outboxRow({ key: 'a', state: 'dead', attempts: 10, error: 'gave up' });
      const pending = await outboxRow({ key: 'b', attempts: 1, error: 'retry' });
      const sent = await outboxRow({ state: 'sent', attempts: 1 });
      await outboxRow({ key: 'c' });
      const [held] = await take.outbox.claim({ limit: 10, leaseMs: 60_000 });
      assert.ok(held);
      const before = await outboxRows();

      const changed = await admin.replayDeadLetters({ component: 'outbox', ids: [dead, pending, sent, held.id] });
      assert.equal(changed, 1, 'only the dead row changed');
      const after = await outboxRows();
      for (const row of after.filter((r) => r.id !== dead)) {
        assert.deepEqual(
          row,
          before.find((b) => b.id === row.id),
          `row ${row.id} untouched`,
        );
      }
      const replayed = after.find((r) => r.id === dead) as Row;
      assert.equal(replayed.state, 'pending');
      assert.equal(replayed.attempts, 0);
      assert.equal(replayed.last_error, 'gave up', 'the reason it died is kept');
      assert.equal(replayed.headers['X-QueueBox-Replay-Count'], '1');
      assert.match(replayed.headers['X-QueueBox-Replayed-At'], /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      assert.equal(replayed.message_id, before.find((b) => b.id === dead)?.message_id, 'same message id');
      assert.equal(await lease.complete(held), true, 'the worker still owns its row');
    });

    it('a replayed outbox message is published again with its original X-Message-Id', async () => {
      const { messageId } = await dataSource.transaction((manager) =>
        t.get(OutboxService).enqueue(manager, { destination: 'billing', key: 'order-1', payload: { n: 1 }, headers: { 'X-Trace': 't1' } }),
      );
      publisher.behaviour = () => {
        throw new PermanentPublishError('rejected');
      };
      assert.equal(await t.get(OutboxPoller).runOnce(), 1);
      assert.equal((await outboxRows())[0].state, 'dead');

      publisher.behaviour = () => undefined;
      assert.equal(await admin.replayDeadLetters({ component: 'outbox', name: 'billing', errorContains: 'rejected' }), 1);
      assert.equal(await t.get(OutboxPoller).runOnce(), 1);
      assert.equal(publisher.delivered.length, 1);
      const [delivered] = publisher.delivered;
      assert.equal(delivered.messageId, messageId);
      assert.equal(delivered.headers[MESSAGE_ID_HEADER], messageId);
      assert.equal(delivered.headers['X-Trace'], 't1');
      assert.equal(delivered.headers['X-QueueBox-Replay-Count'], '1');
      assert.equal((await outboxRows())[0].state, 'sent');
    });

    it('replays by filter in batches across more than one statement', async () => {
      await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, last_error)
        SELECT gen_random_uuid(), 'bulk', '{}', 'dead', 3, 'boom' FROM generate_series(1, 2500)`);
      await outboxRow({ destination: 'other', state: 'dead', attempts: 1, error: 'boom' });
      assert.equal(await admin.replayDeadLetters({ component: 'outbox', name: 'bulk' }), 2500);
      assert.equal(await admin.countDeadLetters({ component: 'outbox', all: true } as never), 1);
      assert.equal(await admin.replayDeadLetters({ component: 'outbox', all: true }), 1);
    });

    it('discards dead rows only', async () => {
      const dead = await inboxRow({ state: 'dead', attempts: 3, error: 'bad' });
      const keep = await inboxRow({ source: 'other', state: 'dead', attempts: 3, error: 'bad' });
      const pending = await inboxRow({ attempts: 1, error: 'bad' });
      const processed = await inboxRow({ state: 'processed', attempts: 1 });
      const held = await take.pull.claim('payments', { leaseMs: 60_000 });
      assert.equal(held?.id, pending);
      assert.equal(await admin.discardDeadLetters({ component: 'inbox', ids: [dead, pending, processed] }), 1);
      const left = await db.query<{ id: string; state: string }>('SELECT id::text AS id, state FROM queuebox_inbox ORDER BY id');
      assert.deepEqual(left, [
        { id: keep, state: 'dead' },
        { id: pending, state: 'processing' },
        { id: processed, state: 'processed' },
      ]);
      assert.equal(await admin.discardDeadLetters({ component: 'inbox', name: 'other' }), 1);
    });

    it('refuses bad arguments with a typed error and changes nothing', async () => {
      await outboxRow({ state: 'dead', attempts: 1, error: 'x' });
      const before = await snapshot();
      await assert.rejects(
        admin.replayDeadLetters({ component: 'outbox' }),
        (e: unknown) => e instanceof QueueBoxAdminError && e.field === 'filter',
      );
      await assert.rejects(admin.discardDeadLetters({ component: 'box' as never, all: true }), QueueBoxAdminError);
      await assert.rejects(admin.replayDeadLetters({ component: 'outbox', ids: ['1; DROP TABLE x'] }), /row id/);
      await assert.rejects(admin.listDeadLetters({ component: 'outbox' }, { limit: 1001 }), /limit/);
      await assert.rejects(
        admin.discardDeadLetters({ component: 'outbox', ids: ['1'], name: 'billing' } as never),
        (e: unknown) => e instanceof QueueBoxAdminError && e.field === 'ids',
      );
      assert.equal(await snapshot(), before);
    });
  });

  describe('arguments the database would refuse', () => {
    it('row ids above the bigint maximum are a QueueBoxAdminError naming the field; the maximum itself is a row id', async () => {
      const dead = await outboxRow({ state: 'dead', attempts: 1, error: 'x' });
      const before = await snapshot();
      const tooBig = '9223372036854775808';
      const field = (name: string) => (e: unknown) =>
        e instanceof QueueBoxAdminError && e.field === name && /at most 9223372036854775807/.test(e.message);
      await assert.rejects(admin.replayDeadLetters({ component: 'outbox', ids: [dead, tooBig] }), field('ids'));
      await assert.rejects(admin.countDeadLetters({ component: 'inbox', ids: ['9999999999999999999'] }), field('ids'));
      await assert.rejects(admin.listDeadLetters({ component: 'outbox' }, { afterId: tooBig }), field('afterId'));
      await assert.rejects(admin.skipHead({ component: 'outbox', key: 'k', headId: tooBig }), field('headId'));
      assert.equal(await snapshot(), before);
      assert.equal(await admin.countDeadLetters({ component: 'outbox', ids: ['9223372036854775807'] }), 0);
      assert.deepEqual((await admin.listDeadLetters({ component: 'outbox' }, { afterId: '9223372036854775807' })).rows, []);
    });

    it('a NUL in a text filter or skip-head target is a QueueBoxAdminError naming the field, before any statement', async () => {
      await outboxRow({ state: 'dead', attempts: 1, error: 'x' });
      const before = await snapshot();
      const nul = (name: string) => (e: unknown) => e instanceof QueueBoxAdminError && e.field === name && /NUL character/.test(e.message);
      await assert.rejects(admin.listDeadLetters({ component: 'outbox', name: 'bill\u0000ing' }), nul('name'));
      await assert.rejects(admin.countDeadLetters({ component: 'inbox', errorContains: '\u0000' }), nul('errorContains'));
      await assert.rejects(admin.replayDeadLetters({ component: 'outbox', errorContains: 'x\u0000' }), nul('errorContains'));
      await assert.rejects(admin.discardDeadLetters({ component: 'inbox', name: '\u0000' }), nul('name'));
      await assert.rejects(admin.skipHead({ component: 'outbox', key: 'k\u0000' }), nul('key'));
      await assert.rejects(admin.skipHead({ component: 'inbox', source: 'payments', aggregateId: 'a\u0000' }), nul('aggregateId'));
      assert.equal(await snapshot(), before);
    });

    it('reads own properties of a selection only: an inherited all: true (or filter) does not count', async () => {
      await outboxRow({ state: 'dead', attempts: 1, error: 'x' });
      await inboxRow({ state: 'dead', attempts: 1, error: 'x' });
      const before = await snapshot();
      const inheritedAll = Object.assign(Object.create({ all: true }), { component: 'outbox' });
      await assert.rejects(admin.replayDeadLetters(inheritedAll), (e: unknown) => e instanceof QueueBoxAdminError && e.field === 'filter');
      const inheritedFilter = Object.assign(Object.create({ name: 'billing', all: true }), { component: 'inbox' });
      await assert.rejects(
        admin.discardDeadLetters(inheritedFilter),
        (e: unknown) => e instanceof QueueBoxAdminError && e.field === 'filter',
      );
      assert.equal(await snapshot(), before);
      assert.equal(await admin.replayDeadLetters({ component: 'outbox', all: true }), 1, 'an own all: true still replays');
    });
  });

  describe('blocked keys', () => {
    it('lists keys and aggregates whose head is failing, with its error and what waits behind it', async () => {
      const head = await outboxRow({ key: 'k1', attempts: 2, error: 'HTTP 503' });
      await db.query(`UPDATE queuebox_outbox SET available_at = clock_timestamp() + interval '5 minutes' WHERE id = $1`, [head]);
      await outboxRow({ key: 'k1' });
      await outboxRow({ key: 'k1' });
      await outboxRow({ key: 'k2' }); // healthy head
      await outboxRow({ key: 'k2' });
      const inFlight = await outboxRow({ key: 'k3', state: 'processing', attempts: 3, error: 'timeout' });
      await outboxRow({ key: 'k3' });
      await outboxRow({ key: 'k4', state: 'dead', attempts: 1, error: 'x' }); // dead rows no longer block
      await outboxRow({ key: 'k4' });
      const aggregateHead = await inboxRow({ aggregate: 'acct-1', attempts: 1, error: 'deadlock' });
      await inboxRow({ aggregate: 'acct-1' });
      await inboxRow({ source: 'other', aggregate: 'acct-1' }); // another source's aggregate

      const blocked = await admin.listBlockedKeys({ component: 'outbox' });
      assert.deepEqual(
        blocked.map((b) => [b.key, b.headId, b.state, b.attempts, b.lastError, b.waiting]),
        [
          ['k1', head, 'pending', 2, 'HTTP 503', 2],
          ['k3', inFlight, 'processing', 3, 'timeout', 1],
        ],
      );
      assert.ok(blocked[0].nextAttemptAt.getTime() > Date.now() + 4 * 60_000);
      const aggregates = await admin.listBlockedKeys({ component: 'inbox', limit: 10 });
      assert.deepEqual(
        aggregates.map((b) => [b.name, b.key, b.headId, b.lastError, b.waiting, b.messageId]),
        [['payments', 'acct-1', aggregateHead, 'deadlock', 1, null]],
      );
    });

    it('skips a pending head so its key flows again; never a head a worker holds', async () => {
      await outboxRow({ key: 'k', attempts: 1, error: 'boom' });
      const next = await outboxRow({ key: 'k' });
      const [held] = await take.outbox.claim({ limit: 10, leaseMs: 60_000 });
      const before = await snapshot();

      assert.equal(await admin.skipHead({ component: 'outbox', key: 'k' }), null, 'a live claim is not touched');
      assert.equal(await snapshot(), before);
      assert.equal(await lease.retry(held, { delayMs: 3600_000, error: new Error('boom again') }), true);

      assert.equal(await admin.skipHead({ component: 'outbox', key: 'k', headId: next }), null, 'only while the given row is the head');
      assert.equal(await admin.skipHead({ component: 'outbox', key: 'k', headId: held.id, reason: 'poison' }), held.id);
      const [row] = await db.query<{ state: string; last_error: string }>('SELECT state, last_error FROM queuebox_outbox WHERE id = $1', [
        held.id,
      ]);
      assert.deepEqual(row, { state: 'dead', last_error: 'skipped by admin: poison' });
      const [claimed] = await take.outbox.claim({ limit: 10, leaseMs: 60_000 });
      assert.equal(claimed?.id, next, 'the next row of the key is claimed');
      assert.equal(await admin.skipHead({ component: 'outbox', key: 'nothing' }), null);
    });

    it('skips a processing head whose lease expired (database clock); its old owner is fenced out', async () => {
      await inboxRow({ aggregate: 'a1' });
      const behind = await inboxRow({ aggregate: 'a1' });
      const zombie = await take.pull.claim('payments', { leaseMs: 60_000 });
      assert.ok(zombie);
      await db.query(`UPDATE queuebox_inbox SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1`, [zombie.id]);
      assert.equal(await admin.skipHead({ component: 'inbox', source: 'payments', aggregateId: 'a1' }), zombie.id);
      assert.equal(await lease.complete(zombie), false, 'the zombie cannot complete the skipped row');
      const next = await take.pull.claim('payments', { leaseMs: 60_000 });
      assert.equal(next?.id, behind);
    });
  });
});
