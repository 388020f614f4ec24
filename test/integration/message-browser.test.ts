// The message browser (QueueBoxAdmin.findMessages) and the long history (QueueBoxAdmin.history) on a
// real PostgreSQL: every filter on both tables, keyset paging through ties on the timestamp, the
// bounded scan's marker, hostile paths and values, and hourly counts over days.
import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { QueueBoxAdminError } from '../../lib/errors/queuebox.errors';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

describeWithDatabase('Message browser (PostgreSQL)', { truncate: ['queuebox_outbox', 'queuebox_inbox'] }, (db) => {
  let t: TestApp;
  let admin: QueueBoxAdmin;

  before(async () => {
    t = await createTestApp(db.url, { workers: false, outbox: { publisher: new RecordingPublisher() } });
    admin = t.get(QueueBoxAdmin);
  });
  after(async () => {
    await t?.app.close();
  });

  /** One outbox row; times are minutes before a fixed instant, so ties are exact. */
  const outbox = async (p: {
    destination?: string;
    key?: string | null;
    state?: string;
    payload?: unknown;
    headers?: Record<string, string>;
    createdMinutesAgo?: number;
    sentMinutesAgo?: number | null;
    messageId?: string;
  }) => {
    const [row] = await db.query<{ id: string; message_id: string }>(
      `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, headers, state, attempts, created_at, sent_at)
       VALUES (coalesce($8::uuid, gen_random_uuid()), $1, $2, $3::jsonb, $4::jsonb, $5, 1,
         timestamptz '2026-12-01 12:00:00Z' - make_interval(mins => $6::int),
         CASE WHEN $7::int IS NULL THEN NULL ELSE timestamptz '2026-12-01 12:00:00Z' - make_interval(mins => $7::int) END)
       RETURNING id::text, message_id::text`,
      [
        p.destination ?? 'billing',
        p.key ?? null,
        JSON.stringify(p.payload ?? {}),
        JSON.stringify(p.headers ?? {}),
        p.state ?? 'sent',
        p.createdMinutesAgo ?? 0,
        p.sentMinutesAgo === undefined ? ((p.state ?? 'sent') === 'sent' ? 0 : null) : p.sentMinutesAgo,
        p.messageId ?? null,
      ],
    );
    return row;
  };
  const ids = (rows: { id: string }[]) => rows.map((r) => r.id);

  it('finds an outbox message by its message id through the unique index, in any state', async () => {
    const a = await outbox({ state: 'sent' });
    await outbox({ state: 'sent' });
    const page = await admin.findMessages({ component: 'outbox', messageId: a.message_id.toUpperCase() });
    assert.deepEqual(ids(page.rows), [a.id]);
    assert.equal(page.plan, 'message-id');
    assert.equal(page.rows[0].state, 'sent');
    assert.ok(page.rows[0].finishedAt instanceof Date, 'sent_at is returned as finishedAt');
    assert.equal(page.rows[0].payload, undefined, 'no payload unless asked');
    await assert.rejects(
      admin.findMessages({ component: 'outbox', messageId: 'not-a-uuid' }),
      (e: QueueBoxAdminError) => e.field === 'messageId',
    );
  });

  it('filters by key, destination, state and the created or sent window, each alone and together', async () => {
    const a = await outbox({ key: 'order-1', destination: 'billing', state: 'sent', createdMinutesAgo: 50, sentMinutesAgo: 40 });
    const b = await outbox({ key: 'order-1', destination: 'crm', state: 'pending', createdMinutesAgo: 30 });
    const c = await outbox({ key: 'order-2', destination: 'billing', state: 'dead', createdMinutesAgo: 20 });
    const d = await outbox({ key: null, destination: 'billing', state: 'processing', createdMinutesAgo: 10 });
    const at = (minutesAgo: number) => new Date(Date.parse('2026-12-01T12:00:00Z') - minutesAgo * 60_000);
    const find = async (f: Omit<Parameters<QueueBoxAdmin['findMessages']>[0], 'component'>) =>
      ids((await admin.findMessages({ component: 'outbox', ...f })).rows);
    assert.deepEqual(await find({ key: 'order-1' }), [b.id, a.id], 'newest first');
    assert.deepEqual(await find({ name: 'billing' }), [d.id, c.id, a.id]);
    assert.deepEqual(await find({ state: 'pending' }), [b.id]);
    assert.deepEqual(await find({ state: 'processing' }), [d.id]);
    assert.deepEqual(await find({ state: 'dead' }), [c.id]);
    assert.deepEqual(await find({ state: 'sent' }), [a.id]);
    assert.deepEqual(await find({ since: at(35), until: at(15) }), [c.id, b.id], 'created in [since, until)');
    assert.deepEqual(await find({ time: 'finished', since: at(45), until: at(39) }), [a.id], 'sent in the window');
    assert.deepEqual(await find({ key: 'order-1', name: 'billing', state: 'sent' }), [a.id]);
    assert.deepEqual(await find({ key: 'order-1', state: 'dead' }), []);
    assert.equal((await admin.findMessages({ component: 'outbox', state: 'pending' })).plan, 'state-index');
    assert.equal((await admin.findMessages({ component: 'outbox', key: 'order-1' })).plan, 'bounded-scan');
    await assert.rejects(
      admin.findMessages({ component: 'outbox', state: 'processed' as never }),
      (e: QueueBoxAdminError) => e.field === 'state',
    );
  });

  it('filters by a payload path and by a header, with numbers and nested arrays compared as their JSON text', async () => {
    const a = await outbox({ payload: { order: { id: 123, lines: [{ sku: 'A-1' }] } }, headers: { 'x-tenant': 'acme' } });
    const b = await outbox({ payload: { order: { id: '123' } }, headers: { 'x-tenant': 'globex' } });
    await outbox({ payload: { order: { id: 124 } } });
    await outbox({ payload: 'a plain string' });
    const byPath = async (path: string, equals: string, where?: 'payload' | 'headers') =>
      ids((await admin.findMessages({ component: 'outbox', path: { path, equals, in: where } })).rows);
    assert.deepEqual(await byPath('order.id', '123'), [b.id, a.id]);
    assert.deepEqual(await byPath('order.lines.0.sku', 'A-1'), [a.id]);
    assert.deepEqual(await byPath('x-tenant', 'acme', 'headers'), [a.id]);
    assert.deepEqual(await byPath('order.id', 'nope'), []);
  });

  it('refuses malformed and hostile paths with QUEUEBOX_ADMIN_ARGUMENT, and treats hostile values as plain text', async () => {
    const a = await outbox({ payload: { note: "'); DROP TABLE queuebox_outbox; --" } });
    for (const path of ['', 'a..b', "a'); DROP TABLE x; --", 'a b', '{a,b}', 'a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q', 'x'.repeat(101), '$.a']) {
      await assert.rejects(
        admin.findMessages({ component: 'outbox', path: { path, equals: '1' } }),
        (e: QueueBoxAdminError) => e.code === 'QUEUEBOX_ADMIN_ARGUMENT' && e.field === 'path.path',
        `path ${JSON.stringify(path)}`,
      );
    }
    await assert.rejects(
      admin.findMessages({ component: 'outbox', path: { path: 'a.b', equals: '1', in: 'headers' } }),
      (e: QueueBoxAdminError) => e.field === 'path.path',
      'a header is one segment',
    );
    await assert.rejects(admin.findMessages({ component: 'outbox', path: { path: 'a', equals: 'x\u0000' } }), QueueBoxAdminError);
    const hostile = await admin.findMessages({ component: 'outbox', path: { path: 'note', equals: "'); DROP TABLE queuebox_outbox; --" } });
    assert.deepEqual(ids(hostile.rows), [a.id], 'the value is a parameter: it matches itself and nothing runs');
    assert.deepEqual(ids((await admin.findMessages({ component: 'outbox', key: "' OR 1=1 --" })).rows), []);
    assert.equal((await db.query<{ n: string }>('SELECT count(*) AS n FROM queuebox_outbox'))[0].n, '1');
  });

  it('pages with a keyset cursor through rows that share one timestamp: every row once, in order, on every plan', async () => {
    for (let i = 0; i < 7; i++) await outbox({ key: 'tie', state: 'sent', createdMinutesAgo: 5, sentMinutesAgo: 5 });
    for (let i = 0; i < 5; i++) await outbox({ key: 'tie', state: 'dead', createdMinutesAgo: 5 });
    const all = ids((await admin.findMessages({ component: 'outbox', key: 'tie' }, { limit: 100 })).rows);
    assert.equal(all.length, 12);
    for (const filter of [
      { key: 'tie' },
      { state: 'dead' as const },
      { time: 'finished' as const, since: new Date('2026-12-01T11:55:00Z') },
    ]) {
      const seen: string[] = [];
      let after: string | undefined;
      for (let pages = 0; pages < 20; pages++) {
        const page = await admin.findMessages({ component: 'outbox', ...filter }, { limit: 2, after });
        seen.push(...ids(page.rows));
        if (page.next === null) break;
        after = page.next;
      }
      assert.deepEqual(seen, [...new Set(seen)], `no row twice (${JSON.stringify(filter)})`);
      assert.deepEqual(
        seen,
        [...seen].sort((x, y) => Number(y) - Number(x)),
        'newest first across pages',
      );
      assert.equal(seen.length, filter.state === 'dead' ? 5 : filter.key ? 12 : 7, `every row (${JSON.stringify(filter)})`);
    }
  });

  it('a bounded scan stops after scanLimit rows and says where ("scanned up to"); the cursor continues from there', async () => {
    const target = await outbox({ key: 'old-order', createdMinutesAgo: 60 });
    const newer: string[] = [];
    for (let i = 0; i < 30; i++) newer.push((await outbox({ key: `other-${i}` })).id);
    const first = await admin.findMessages({ component: 'outbox', key: 'old-order' }, { scanLimit: 10 });
    assert.deepEqual(first.rows, []);
    assert.equal(first.plan, 'bounded-scan');
    assert.equal(first.scannedUpTo, newer[20], 'the 10 newest rows were examined, down to this id');
    assert.equal(first.next, newer[20]);
    let page = first;
    const seen: string[] = [];
    while (page.next !== null) {
      page = await admin.findMessages({ component: 'outbox', key: 'old-order' }, { scanLimit: 10, after: page.next });
      seen.push(...ids(page.rows));
    }
    assert.deepEqual(seen, [target.id], 'found once the scan reached it; the last page reached the first row (next null)');
    assert.equal(page.scannedUpTo, null);
    await assert.rejects(
      admin.findMessages({ component: 'outbox' }, { scanLimit: 1_000_001 }),
      (e: QueueBoxAdminError) => e.field === 'scanLimit',
    );
    await assert.rejects(admin.findMessages({ component: 'outbox' }, { after: '-1' }), (e: QueueBoxAdminError) => e.field === 'after');
  });

  it('inbox: idempotency key (with its source through the unique index), aggregate, source, state, processed window, path; one row by id with payload', async () => {
    await db.query(`INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload, headers, state, attempts, received_at, processed_at)
      VALUES ('payments', 'k1', 'acct-1', '{"order":{"id":7}}', '{"x-tenant":"acme"}', 'processed', 1, timestamptz '2026-12-01 11:00Z', timestamptz '2026-12-01 11:01Z'),
             ('payments', 'k2', 'acct-1', '{"order":{"id":8}}', '{}', 'pending', 0, timestamptz '2026-12-01 11:10Z', NULL),
             ('shipping', 'k1', NULL, '{}', '{}', 'dead', 3, timestamptz '2026-12-01 11:20Z', NULL)`);
    const rows = await db.query<{ id: string; idempotency_key: string; source: string }>(
      'SELECT id::text, idempotency_key, source FROM queuebox_inbox ORDER BY id',
    );
    const [p1, p2, s1] = rows.map((r) => r.id);
    const find = async (f: Omit<Parameters<QueueBoxAdmin['findMessages']>[0], 'component'>) => {
      const page = await admin.findMessages({ component: 'inbox', ...f });
      return { ids: ids(page.rows), plan: page.plan };
    };
    assert.deepEqual(await find({ messageId: 'k1', name: 'payments' }), { ids: [p1], plan: 'message-id' });
    assert.deepEqual((await find({ messageId: 'k1' })).ids, [s1, p1], 'without a source: both sources');
    assert.deepEqual((await find({ key: 'acct-1' })).ids, [p2, p1]);
    assert.deepEqual((await find({ name: 'shipping' })).ids, [s1]);
    assert.deepEqual((await find({ state: 'processed' })).ids, [p1]);
    assert.deepEqual((await find({ state: 'pending' })).ids, [p2]);
    assert.deepEqual((await find({ time: 'finished', since: new Date('2026-12-01T11:00Z'), until: new Date('2026-12-01T11:05Z') })).ids, [
      p1,
    ]);
    assert.deepEqual((await find({ since: new Date('2026-12-01T11:05Z') })).ids, [s1, p2], 'received since');
    assert.deepEqual((await find({ path: { path: 'order.id', equals: '8' } })).ids, [p2]);
    assert.deepEqual((await find({ path: { in: 'headers', path: 'x-tenant', equals: 'acme' } })).ids, [p1]);
    const one = await admin.findMessage({ component: 'inbox', id: p1 });
    assert.deepEqual(one?.payload, { order: { id: 7 } });
    assert.equal(one?.idempotencyKey, 'k1');
    assert.equal(one?.messageId, null);
    assert.equal(await admin.findMessage({ component: 'inbox', id: '999999' }), null);
    await assert.rejects(admin.findMessages({ component: 'inbox', state: 'sent' as never }), QueueBoxAdminError);
  });

  it('history: finished and dead rows per hour over days, the current hour last, bounded to 7 days', async () => {
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, sent_at)
      SELECT gen_random_uuid(), 'billing', '{}', 'sent', 1, clock_timestamp() - make_interval(hours => h)
      FROM generate_series(0, 200) h`);
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, claimed_at)
      VALUES (gen_random_uuid(), 'billing', '{}', 'dead', 3, clock_timestamp() - interval '3 hours')`);
    const history = await admin.history({ bucket: 'hour', buckets: 168 });
    assert.equal(history.bucket, 'hour');
    assert.equal(history.since.getUTCMinutes(), 0, 'buckets start on the hour');
    const billing = history.rows.find((r) => r.name === 'billing');
    assert.ok(billing);
    assert.equal(billing.finished.length, 168);
    assert.ok(
      billing.finished.every((n) => n === 1),
      `one row sent per hour: ${billing.finished.join(',')}`,
    );
    assert.equal(billing.dead[164], 1, 'died 3 hours ago');
    assert.equal((await admin.history({ bucket: 'minute', buckets: 60 })).rows[0].finished.at(-1), 1, 'per minute: sent now');
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, sent_at)
      VALUES (gen_random_uuid(), 'crm', '{}', 'sent', 1, clock_timestamp())`);
    const perComponent = await admin.history({ bucket: 'hour', buckets: 24, by: 'component' });
    assert.deepEqual(
      perComponent.rows.map((r) => [r.component, r.name, r.finished.at(-1), r.finished.reduce((a, b) => a + b)]),
      [['outbox', '', 2, 25]],
      'one series per component: billing and crm together',
    );
    await assert.rejects(admin.history({ by: 'key' as never }), (e: QueueBoxAdminError) => e.field === 'by');
    await assert.rejects(admin.history({ bucket: 'hour', buckets: 169 }), (e: QueueBoxAdminError) => e.field === 'buckets');
    await assert.rejects(admin.history({ bucket: 'day' as never }), (e: QueueBoxAdminError) => e.field === 'bucket');
  });
});
