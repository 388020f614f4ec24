// The dashboard's message browser, history and overview flags on a real Nest HTTP app (Express) and
// a real PostgreSQL: the guard on each new route, read-only mode, filters and paging through the
// API, bad input as 400s, the flags for lag and silent or dead instances, and the flag hook.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { QueueBoxDashboardModule } from '../../lib/dashboard';
import { collectFlags, type FlagContext } from '../../lib/dashboard/dashboard.flags';
import { QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { createDashboardApp, type DashboardTestApp, OperatorGuard } from '../support/dashboard-app';
import { describeWithDatabase, type TestDatabase } from '../support/database';

const OPERATOR = { 'x-operator': 'ada' };
const ROUTES = ['messages', 'messages?component=inbox&state=processed', 'messages/outbox/1', 'history', 'history?bucket=minute&buckets=60'];

async function seed(db: TestDatabase) {
  const rows = await db.query<{ id: string; message_id: string }>(
    `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, headers, state, attempts, created_at, sent_at, last_error)
     VALUES (gen_random_uuid(), 'billing', 'order-123', '{"order":{"id":123}}', '{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}',
             'sent', 1, clock_timestamp() - interval '3 hours', clock_timestamp() - interval '3 hours', NULL),
            (gen_random_uuid(), 'billing', 'order-124', '{"order":{"id":124}}', '{}', 'dead', 5, clock_timestamp() - interval '2 hours', NULL, 'HTTP 503'),
            (gen_random_uuid(), 'crm', 'order-123', '{"order":{"id":123}}', '{}', 'pending', 0, clock_timestamp() - interval '10 minutes', NULL, NULL)
     RETURNING id::text, message_id::text`,
  );
  return rows;
}

describe('queuebox/dashboard: lagThresholdSeconds', () => {
  it('takes seconds from 1 to 86400 and refuses anything else at start-up', () => {
    assert.ok(QueueBoxDashboardModule.forRoot({ public: true, lagThresholdSeconds: 30 }));
    for (const bad of [0, -1, 86_401, Number.NaN, '60']) {
      assert.throws(
        () => QueueBoxDashboardModule.forRoot({ public: true, lagThresholdSeconds: bad as number }),
        (e: unknown) => e instanceof QueueBoxConfigError && e.option === 'dashboard.lagThresholdSeconds',
      );
    }
  });
});

describeWithDatabase(
  'queuebox/dashboard: messages, history and flags (PostgreSQL, Express)',
  { truncate: ['queuebox_outbox', 'queuebox_inbox'] },
  (db) => {
    let t: DashboardTestApp;
    const api = (path: string) => fetch(`${t.url}api/default/${path}`, { headers: OPERATOR });
    const body = async <T>(path: string): Promise<T> => {
      const response = await api(path);
      assert.equal(response.status, 200, `${path}: ${await response.clone().text()}`);
      return (await response.json()) as T;
    };

    before(async () => {
      t = await createDashboardApp(db.url, { guard: OperatorGuard, lagThresholdSeconds: 300 });
    });
    after(async () => {
      await t?.app.close();
    });

    it('every new route runs the guard', async () => {
      for (const path of ROUTES) {
        const response = await fetch(`${t.url}api/default/${path}`);
        assert.equal(response.status, 403, path);
      }
    });

    it('messages: every state, filtered by id, key, name, state, time (with its zone) and payload path; keyset pages; a detail of any state', async () => {
      const [sent, dead, pending] = await seed(db);
      type Page = {
        rows: { id: string; state: string; payload?: unknown }[];
        next: string | null;
        plan: string;
        scannedUpTo: string | null;
      };
      const ids = async (query: string) => (await body<Page>(`messages?${query}`)).rows.map((r) => r.id);
      assert.deepEqual(await ids(''), [pending.id, dead.id, sent.id]);
      assert.deepEqual(await ids(`id=${sent.message_id}`), [sent.id]);
      assert.deepEqual(await ids('key=order-123'), [pending.id, sent.id]);
      assert.deepEqual(await ids('name=billing&state=dead'), [dead.id]);
      const since = new Date(Date.now() - 2.5 * 3600_000).toISOString();
      assert.deepEqual(await ids(`since=${since}`), [pending.id, dead.id]);
      assert.deepEqual(await ids(`time=finished&until=${encodeURIComponent(new Date().toISOString())}`), [sent.id]);
      assert.deepEqual(await ids('path=order.id&value=123'), [pending.id, sent.id]);
      assert.deepEqual(await ids('pathIn=headers&path=traceparent&value=nope'), []);
      const first = await body<Page>('messages?limit=2');
      assert.equal(first.next, dead.id);
      assert.deepEqual(await ids(`limit=2&after=${first.next}`), [sent.id]);
      const scanned = await body<Page>('messages?key=nope&scan=2');
      assert.equal(scanned.plan, 'bounded-scan');
      assert.equal(scanned.scannedUpTo, dead.id, 'the two newest rows were examined');

      const detail = await body<{ id: string; state: string; payload: unknown; traceId: string | null }>(`messages/outbox/${sent.id}`);
      assert.deepEqual(
        [detail.state, detail.payload, detail.traceId],
        ['sent', { order: { id: 123 } }, '4bf92f3577b34da6a3ce929d0e0e4736'],
      );
      assert.equal((await api('messages/outbox/999999')).status, 404);
      assert.equal((await api('messages/nowhere/1')).status, 400);
    });

    it('messages: malformed paths, times without a zone and bad states are 400s naming the parameter, and hostile values match nothing', async () => {
      await seed(db);
      for (const [query, field] of [
        ['path=order..id&value=1', 'path.path'],
        [`path=${encodeURIComponent("a');DROP TABLE queuebox_outbox;--")}&value=1`, 'path.path'],
        ['path=a.b&pathIn=headers&value=1', 'path.path'],
        ['pathIn=body&path=a&value=1', 'pathIn'],
        ['since=2026-12-01T10:00:00', 'since'],
        ['until=yesterday', 'until'],
        ['state=processed', 'state'],
        ['id=not-a-uuid', 'messageId'],
        ['after=-5', 'after'],
        ['scan=0', 'scan'],
        ['limit=201', 'limit'],
      ] as const) {
        const response = await api(`messages?${query}`);
        assert.equal(response.status, 400, query);
        const answer = (await response.json()) as { field?: string; message: string };
        assert.equal(answer.field, field, `${query}: ${answer.message}`);
      }
      const hostile = await body<{ rows: unknown[] }>(`messages?key=${encodeURIComponent("' OR '1'='1")}`);
      assert.deepEqual(hostile.rows, []);
      assert.equal((await db.query<{ n: string }>('SELECT count(*) AS n FROM queuebox_outbox'))[0].n, '3');
    });

    it('history: per hour over a day by default, per minute on request, bounded (7 days of hours, 1 day of minutes)', async () => {
      await seed(db);
      const day = await body<{ bucket: string; buckets: number; rows: { name: string; finished: number[]; dead: number[] }[] }>('history');
      assert.deepEqual([day.bucket, day.buckets], ['hour', 24]);
      const billing = day.rows.find((r) => r.name === 'billing');
      assert.equal(
        billing?.finished.reduce((a, b) => a + b),
        1,
      );
      assert.equal(billing?.finished.length, 24);
      assert.equal((await body<{ buckets: number }>('history?buckets=168')).buckets, 168);
      assert.equal((await api('history?buckets=169')).status, 400);
      assert.equal((await api('history?bucket=minute&buckets=1441')).status, 400);
      assert.equal((await api('history?bucket=day')).status, 400);
    });

    it('overview flags: lag over lagThresholdSeconds (critical past 5 times it), silent and dead instances, critical first', async () => {
      await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, created_at, available_at)
      VALUES (gen_random_uuid(), 'slow', '{}', 'pending', clock_timestamp() - interval '10 minutes', clock_timestamp() - interval '10 minutes'),
             (gen_random_uuid(), 'stuck', '{}', 'pending', clock_timestamp() - interval '2 hours', clock_timestamp() - interval '2 hours'),
             (gen_random_uuid(), 'fine', '{}', 'pending', clock_timestamp() - interval '10 seconds', clock_timestamp() - interval '10 seconds')`);
      const silent = randomUUID();
      const dead = randomUUID();
      await db.query(
        `INSERT INTO queuebox_instances (id, host, pid, data_source, version, dead_after_ms, heartbeat_at)
       VALUES ($1, 'replica-a', 4001, 'default', '0.1.0', 600000, clock_timestamp() - interval '500 seconds'),
              ($2, 'replica-b', 4002, 'default', '0.1.0', 600000, clock_timestamp() - interval '20 minutes')`,
        [silent, dead],
      );
      try {
        const overview = await body<{ lagThresholdSeconds: number; flags: { id: string; level: string; text: string; view?: string }[] }>(
          'overview',
        );
        assert.equal(overview.lagThresholdSeconds, 300);
        assert.deepEqual(
          // The database's own flag (dashboard-warnings.test.ts) depends on the server's settings.
          overview.flags.filter((f) => f.id !== 'database').map((f) => [f.id, f.level]),
          [
            ['lag:outbox:stuck', 'critical'],
            [`instance:${dead}`, 'critical'],
            ['lag:outbox:slow', 'warning'],
            [`instance:${silent}`, 'warning'],
          ],
        );
        assert.match(overview.flags[0].text, /Destination "stuck" lags: its oldest due message has waited \d+ s \(threshold 300 s\)/);
        assert.match(overview.flags[1].text, /replica-b, pid 4002\) is dead/);
        assert.equal(overview.flags[1].view, 'heartbeats');
      } finally {
        await db.query('DELETE FROM queuebox_instances WHERE id = ANY($1::uuid[])', [[silent, dead]]);
      }
    });

    it('a flag source that fails is shown as a flag saying so; the other sources still show (the hook other flags plug into)', async () => {
      const context = { instance: 'x', admin: {}, backlog: [], options: { lagThresholdSeconds: 60 } } as unknown as FlagContext;
      const flags = await collectFlags(context, [
        { name: 'paused destinations', flags: () => Promise.reject(new Error('relation "queuebox_pauses" does not exist')) },
        { name: 'ok', flags: () => [{ id: 'ok:1', level: 'warning', text: 'from a plugged-in source' }] },
      ]);
      assert.deepEqual(
        flags.map((f) => [f.id, f.text]),
        [
          ['unavailable:paused destinations', 'Could not check paused destinations: relation "queuebox_pauses" does not exist'],
          ['ok:1', 'from a plugged-in source'],
        ],
      );
    });
  },
);

describeWithDatabase('queuebox/dashboard: the new reads in readOnly mode', (db) => {
  let t: DashboardTestApp;
  before(async () => {
    t = await createDashboardApp(db.url, { guard: OperatorGuard, readOnly: true });
  });
  after(async () => {
    await t?.app.close();
  });

  it('serves messages, a message and the history (reads), behind the guard; they offer no action to refuse', async () => {
    const [sent] = await seed(db);
    for (const path of [...ROUTES.filter((r) => !r.startsWith('messages/')), `messages/outbox/${sent.id}`]) {
      assert.equal((await fetch(`${t.url}api/default/${path}`)).status, 403, `guard: ${path}`);
      const response = await fetch(`${t.url}api/default/${path}`, { headers: OPERATOR });
      assert.equal(response.status, 200, path);
    }
    const post = await fetch(`${t.url}api/default/messages`, {
      method: 'POST',
      headers: { ...OPERATOR, 'content-type': 'application/json' },
      body: '{}',
    });
    assert.equal(post.status, 404, 'no write route exists under messages');
  });
});

describeWithDatabase("queuebox/dashboard: an app that deletes sent rows (outbox.sentRows: 'delete')", (db) => {
  let t: DashboardTestApp;
  before(async () => {
    t = await createDashboardApp(db.url, { guard: OperatorGuard }, { queuebox: { workers: false, outbox: { sentRows: 'delete' } } });
  });
  after(async () => {
    await t?.app.close();
  });
  const api = (path: string) => fetch(`${t.url}api/default/${path}`, { headers: OPERATOR });

  it('a search for sent rows is a 400 that says why; the overview and the history say sent rows are not kept', async () => {
    const refused = await api('messages?state=sent');
    assert.equal(refused.status, 400);
    const answer = (await refused.json()) as { field?: string; message: string };
    assert.equal(answer.field, 'state');
    assert.match(answer.message, /outbox\.sentRows: 'delete'/);
    assert.equal((await api('messages?state=dead')).status, 200, 'other states as before');
    const history = (await (await api('history')).json()) as { sentRowsKept: boolean };
    assert.equal(history.sentRowsKept, false);
    const overview = (await (await api('overview')).json()) as { sentRowsKept: boolean };
    assert.equal(overview.sentRowsKept, false);
  });
});
