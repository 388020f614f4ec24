// The dashboard's JSON API on a real Nest HTTP app (Express) and a real PostgreSQL: the guard, the
// action check (token, Sec-Fetch-Site, Origin), read-only mode, every read and action, the
// instance switch over two databases, the event and log line of an action, and the served page.
import assert from 'node:assert/strict';
import { after, beforeEach, describe, it } from 'node:test';
import { DataSource } from 'typeorm';
import { createQueueBoxAdmin } from '../../lib/admin/create-queuebox-admin';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { QueueBoxDashboardModule } from '../../lib/dashboard';
import { QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import type { DashboardActionEvent } from '../../lib/events/queuebox.events';
import { QueueBoxEvents } from '../../lib/events/queuebox.events';
import { createDashboardApp, OPERATOR, OperatorGuard, TOKEN_HEADER, useDashboardApp } from '../support/dashboard-app';
import { createTestDatabase, describeWithDatabase, type TestDatabase } from '../support/database';

async function json(response: Response): Promise<Record<string, unknown>> {
  return (await response.json()) as Record<string, unknown>;
}

/** Seeds dead, pending and processing rows; returns the dead outbox row ids by error. */
async function seed(db: TestDatabase): Promise<{ timeout: string; refused: string; inboxDead: string }> {
  const dead = async (destination: string, key: string | null, error: string, headers = '{}') =>
    (
      await db.query<{ id: string }>(
        `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, headers, state, attempts, last_error, claimed_at)
         VALUES (gen_random_uuid(), $1, $2, '{"order": 7, "total": 42}', $4::jsonb, 'dead', 3, $3, clock_timestamp()) RETURNING id::text`,
        [destination, key, error, headers],
      )
    )[0].id;
  const timeout = await dead(
    'billing',
    'customer-1',
    'request to http://billing/events failed: ETIMEDOUT after 10000 ms',
    JSON.stringify({
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      'X-Message-Id': 'ignored',
    }),
  );
  const refused = await dead('billing', 'customer-2', 'HTTP 422 from http://billing/events');
  await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, sent_at)
    SELECT gen_random_uuid(), 'billing', '{}', 'sent', 1, clock_timestamp() FROM generate_series(1, 4)`);
  await db.query(`INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, claimed_at, claim_token, lease_expires_at)
    VALUES (gen_random_uuid(), 'crm', 'c-9', '{}', 'processing', 1, clock_timestamp(), gen_random_uuid(), clock_timestamp() + interval '5 minutes')`);
  await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, created_at)
    VALUES (gen_random_uuid(), 'crm', '{}', 'pending', clock_timestamp() - interval '90 seconds')`);
  const inboxDead = (
    await db.query<{ id: string }>(
      `INSERT INTO queuebox_inbox (source, idempotency_key, aggregate_id, payload, state, attempts, last_error, claimed_at)
       VALUES ('payments', 'p-1', 'acct-1', '{}', 'dead', 2, 'handler threw: card declined', clock_timestamp()) RETURNING id::text`,
    )
  )[0].id;
  return { timeout, refused, inboxDead };
}

describe('queuebox/dashboard: start-up refusals', () => {
  it('refuses to start without a guard or public: true, saying what to do', () => {
    assert.throws(
      () => QueueBoxDashboardModule.forRoot({}),
      (error: unknown) =>
        error instanceof QueueBoxConfigError &&
        error.option === 'dashboard.guard' &&
        /refuses to start without a guard/.test(error.message) &&
        /public: true/.test(error.message),
    );
    assert.throws(() => QueueBoxDashboardModule.forRoot({ guard: OperatorGuard, public: true }), /contradict/);
    assert.throws(() => QueueBoxDashboardModule.forRoot({ guard: 'yes' as never }), /must be a Nest guard/);
    assert.throws(
      () => QueueBoxDashboardModule.forRoot({ public: true, readonly: true } as never),
      /Unknown QueueBoxDashboardModule option "readonly"/,
    );
    assert.throws(() => QueueBoxDashboardModule.forRoot({ public: true, path: '../x' }), /"path"/);
    assert.throws(() => QueueBoxDashboardModule.forRoot({ public: true, tokenSecret: 'short' }), /tokenSecret/);
    assert.throws(
      () =>
        QueueBoxDashboardModule.forRoot({
          public: true,
          instances: [
            { name: 'a', admin: QueueBoxAdmin },
            { name: 'a', admin: QueueBoxAdmin },
          ],
        }),
      /two instances are named "a"/,
    );
    assert.ok(QueueBoxDashboardModule.forRoot({ public: true }));
    assert.ok(QueueBoxDashboardModule.forRoot({ guard: OperatorGuard }));
  });

  it('reads only the options’ own properties: a public: true inherited from a prototype mounts nothing without a guard', () => {
    const guardMissing = (error: unknown) =>
      error instanceof QueueBoxConfigError && error.option === 'dashboard.guard' && /refuses to start without a guard/.test(error.message);
    assert.throws(() => QueueBoxDashboardModule.forRoot(Object.create({ public: true })), guardMissing);
    assert.throws(
      () => QueueBoxDashboardModule.forRoot(Object.create({ public: true }, { path: { value: 'ops', enumerable: true } })),
      guardMissing,
    );
    // An own public: true still serves, whatever its prototype says.
    const module = QueueBoxDashboardModule.forRoot(Object.assign(Object.create({ guard: 'not a guard' }), { public: true }));
    assert.equal(module.controllers?.length, 1);
    // A getter is read once: it cannot pass the check with one value and be used with another.
    let reads = 0;
    QueueBoxDashboardModule.forRoot({
      get public() {
        reads++;
        return true;
      },
    });
    assert.equal(reads, 1);
  });
});

const emptied = { truncate: ['queuebox_outbox', 'queuebox_inbox'] };
describeWithDatabase('queuebox/dashboard: the JSON API (PostgreSQL, Express)', emptied, (db) => {
  let other: TestDatabase;
  let otherSource: DataSource;
  const dashboard = useDashboardApp(async () => {
    other = await createTestDatabase();
    otherSource = new DataSource({ type: 'postgres', url: other.url, logging: false });
    await otherSource.initialize();
    const second = await createQueueBoxAdmin(otherSource);
    return createDashboardApp(db.url, {
      guard: OperatorGuard,
      instances: [
        { name: 'orders', admin: QueueBoxAdmin },
        { name: 'ledger', admin: second },
      ],
    });
  });
  const { api, action, events } = dashboard;
  let ids: Awaited<ReturnType<typeof seed>>;
  const stateOf = async (id: string) =>
    (await db.query<{ state: string }>('SELECT state FROM queuebox_outbox WHERE id = $1', [id]))[0]?.state;

  // After the app closes (the hooks of useDashboardApp run first).
  after(async () => {
    await otherSource?.destroy();
    await other?.drop();
  });
  beforeEach(async () => {
    ids = await seed(db);
  });

  it('every route runs the guard: page, assets and API refuse a request it does not let in', async () => {
    for (const path of ['', 'assets/main.js', 'api/session', 'api/orders/overview', 'api/orders/dead-letters']) {
      const response = await fetch(`${dashboard.app.url}${path}`);
      assert.equal(response.status, 403, path);
    }
    const replay = await fetch(`${dashboard.app.url}api/orders/dead-letters/replay`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ component: 'outbox', ids: [ids.timeout] }),
    });
    assert.equal(replay.status, 403);
    assert.equal(await stateOf(ids.timeout), 'dead');
  });

  it('session: the action token, read-only flag, who is asking, and the instances', async () => {
    const session = await json(await api('session'));
    assert.match(String(session.token), /^[A-Za-z0-9_-]{43}$/);
    assert.equal(session.tokenHeader, 'X-QueueBox-Dashboard-Token');
    assert.equal(session.readOnly, false);
    assert.equal(session.actor, 'ada');
    assert.deepEqual(session.instances, [
      { name: 'orders', heartbeats: true },
      { name: 'ledger', heartbeats: true },
    ]);
  });

  it('overview: backlog, lag and per-minute sent and dead counts per destination and source', async () => {
    const overview = (await json(await api('orders/overview'))) as { minutes: number; rows: Record<string, unknown>[] };
    assert.equal(overview.minutes, 60);
    const byName = Object.fromEntries(overview.rows.map((r) => [`${r.component}/${r.name}`, r]));
    assert.deepEqual(Object.keys(byName), ['outbox/billing', 'outbox/crm', 'inbox/payments']);
    const billing = byName['outbox/billing'] as { dead: number; finishedPerMinute: number[]; deadPerMinute: number[] };
    assert.equal(billing.dead, 2);
    assert.equal(billing.finishedPerMinute.length, 60);
    assert.equal(billing.finishedPerMinute.at(-1), 4, 'the four rows sent now are in the current minute');
    assert.equal(billing.deadPerMinute.at(-1), 2);
    const crm = byName['outbox/crm'] as { pending: number; processing: number; oldestPendingAgeSeconds: number };
    assert.equal(crm.pending, 1);
    assert.equal(crm.processing, 1);
    assert.ok(crm.oldestPendingAgeSeconds >= 89 && crm.oldestPendingAgeSeconds < 100, `lag ${crm.oldestPendingAgeSeconds}`);
    assert.equal((await api('orders/overview?minutes=0')).status, 400);
  });

  it('dead letters: search by error text, key, name and time; paging; count; detail with payload, headers and trace id', async () => {
    const found = (await json(await api('orders/dead-letters?component=outbox&error=etimedout'))) as { rows: { id: string }[] };
    assert.deepEqual(
      found.rows.map((r) => r.id),
      [ids.timeout],
    );
    const byKey = (await json(await api('orders/dead-letters?key=customer-2'))) as { rows: { id: string }[] };
    assert.deepEqual(
      byKey.rows.map((r) => r.id),
      [ids.refused],
    );
    const page = (await json(await api('orders/dead-letters?name=billing&limit=1'))) as { rows: { id: string }[]; nextAfterId: string };
    assert.deepEqual(
      page.rows.map((r) => r.id),
      [ids.refused],
      'newest first',
    );
    const next = (await json(await api(`orders/dead-letters?name=billing&limit=1&after=${page.nextAfterId}`))) as {
      rows: { id: string }[];
    };
    assert.deepEqual(
      next.rows.map((r) => r.id),
      [ids.timeout],
    );
    const future = new Date(Date.now() + 3600_000).toISOString();
    assert.equal((await json(await api(`orders/dead-letters/count?from=${future}`))).count, 0);
    assert.equal((await json(await api('orders/dead-letters/count'))).count, 2);
    assert.equal((await json(await api('orders/dead-letters/count?component=inbox&key=acct-1'))).count, 1);
    assert.equal((await api('orders/dead-letters?from=yesterday')).status, 400);
    assert.equal((await api('orders/dead-letters?component=queue')).status, 400);

    const detail = await json(await api(`orders/dead-letters/outbox/${ids.timeout}`));
    assert.deepEqual(detail.payload, { order: 7, total: 42 });
    assert.equal(detail.traceId, '4bf92f3577b34da6a3ce929d0e0e4736');
    assert.equal(detail.lastError, 'request to http://billing/events failed: ETIMEDOUT after 10000 ms', 'the last error whole');
    assert.equal(detail.attempts, 3);
    const missing = await api('orders/dead-letters/outbox/999999');
    assert.equal(missing.status, 404);
    assert.equal((await json(missing)).error, 'QUEUEBOX_DASHBOARD_NOT_FOUND');
  });

  it('replay needs the token: without it, or with another, 403 and nothing changes', async () => {
    for (const wrong of [
      { [TOKEN_HEADER]: '' },
      { [TOKEN_HEADER]: `${dashboard.token.slice(0, -1)}${dashboard.token.endsWith('x') ? 'y' : 'x'}` },
      { [TOKEN_HEADER]: 'short' },
    ]) {
      const response = await action('orders/dead-letters/replay', { component: 'outbox', ids: [ids.timeout] }, wrong);
      assert.equal(response.status, 403);
      assert.equal((await json(response)).error, 'QUEUEBOX_DASHBOARD_TOKEN');
    }
    assert.equal(await stateOf(ids.timeout), 'dead');
    assert.deepEqual(events, []);
  });

  it('replay refuses a request from another site (Sec-Fetch-Site) or another origin, even with the token', async () => {
    const crossSite = await action(
      'orders/dead-letters/replay',
      { component: 'outbox', ids: [ids.timeout] },
      { 'sec-fetch-site': 'cross-site' },
    );
    assert.equal(crossSite.status, 403);
    assert.equal((await json(crossSite)).error, 'QUEUEBOX_DASHBOARD_CROSS_SITE');
    const otherOrigin = await action(
      'orders/dead-letters/replay',
      { component: 'outbox', ids: [ids.timeout] },
      { 'sec-fetch-site': '', origin: 'https://evil.example' },
    );
    assert.equal(otherOrigin.status, 403);
    assert.match(String((await json(otherOrigin)).message), /Origin "https:\/\/evil.example" is not this dashboard's/);
    assert.equal(await stateOf(ids.timeout), 'dead');
  });

  it('replay by ids: the row is pending again, the action is logged with who did it and emitted as an event', async () => {
    const response = await action('orders/dead-letters/replay', { component: 'outbox', ids: [ids.timeout] });
    assert.equal(response.status, 200);
    assert.deepEqual(await json(response), { changed: 1 });
    assert.equal(await stateOf(ids.timeout), 'pending');
    assert.equal(await stateOf(ids.refused), 'dead');
    assert.deepEqual(events, [
      { action: 'replay', instance: 'orders', component: 'outbox', changed: 1, selection: { ids: [ids.timeout] }, actor: 'ada' },
    ]);
    assert.ok(dashboard.app.logger.has('log', `"ada" replay on instance "orders", outbox: {"ids":["${ids.timeout}"]}; 1 row(s) changed.`));
    // The same event reaches the app's QueueBoxEvents listeners.
    const seen: DashboardActionEvent[] = [];
    const off = dashboard.app.app.get(QueueBoxEvents).on('queuebox:dashboard:action', (e) => seen.push(e));
    await action('orders/dead-letters/discard', { component: 'outbox', ids: [ids.refused] });
    off();
    assert.equal(seen.length, 1);
    assert.equal(seen[0].action, 'discard');
  });

  it('a script sends no Origin and no Sec-Fetch-Site: the token alone lets its action through', async () => {
    const response = await api('orders/dead-letters/discard', {
      method: 'POST',
      headers: { 'content-type': 'application/json', [TOKEN_HEADER]: dashboard.token },
      body: JSON.stringify({ component: 'inbox', ids: [ids.inboxDead] }),
    });
    assert.deepEqual(await json(response), { changed: 1 });
    assert.deepEqual(await db.query('SELECT id FROM queuebox_inbox'), []);
  });

  it('replay and discard by filter; a filter with no criterion needs all: true; a body that is not JSON is refused', async () => {
    const noCriterion = await action('orders/dead-letters/discard', { component: 'outbox', filter: {} });
    assert.equal(noCriterion.status, 400);
    assert.equal((await json(noCriterion)).field, 'filter');
    assert.equal((await action('orders/dead-letters/replay', { component: 'outbox' })).status, 400);
    const byError = await action('orders/dead-letters/replay', { component: 'outbox', filter: { error: 'HTTP 422' } });
    assert.deepEqual(await json(byError), { changed: 1 });
    assert.equal(await stateOf(ids.refused), 'pending');
    assert.deepEqual(events.at(-1)?.selection, { filter: { errorContains: 'HTTP 422' }, all: false });
    const all = await action('orders/dead-letters/discard', { component: 'outbox', filter: {}, all: true });
    assert.deepEqual(await json(all), { changed: 1 });
    const notAnObject = await action('orders/dead-letters/replay', ['outbox']);
    assert.equal(notAnObject.status, 400);
    assert.match(String((await json(notAnObject)).message), /must be a JSON object/);
  });

  it('every action refuses a body that is not sent as JSON with 415, even with the token, and changes nothing', async () => {
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, last_error, available_at)
      VALUES (gen_random_uuid(), 'billing', 'stuck', '{}', 'pending', 4, 'HTTP 503', clock_timestamp() + interval '1 minute'),
             (gen_random_uuid(), 'billing', 'stuck', '{}', 'pending', 0, NULL, clock_timestamp())`);
    const before = await db.query('SELECT id, state, attempts FROM queuebox_outbox ORDER BY id');
    const routes: [string, Record<string, string>][] = [
      // Fields as the app's url-encoded parser reads them into the very body a JSON action sends.
      ['orders/dead-letters/replay', { component: 'outbox', 'ids[]': ids.timeout }],
      ['orders/dead-letters/discard', { component: 'outbox', 'ids[]': ids.refused }],
      ['orders/blocked/skip-head', { component: 'outbox', key: 'stuck' }],
    ];
    const form = (fields: Record<string, string>) => {
      const data = new FormData();
      for (const [name, value] of Object.entries(fields)) data.append(name, value);
      return data;
    };
    for (const [route, fields] of routes) {
      // What a plain HTML form or another page's fetch can send, and a body that says nothing.
      const bodies: [string, RequestInit['body'], Record<string, string>][] = [
        ['url-encoded', new URLSearchParams(fields), {}],
        [
          'url-encoded, charset',
          new URLSearchParams(fields).toString(),
          { 'content-type': 'application/x-www-form-urlencoded; charset=UTF-8' },
        ],
        ['multipart', form(fields), {}],
        ['text/plain JSON', JSON.stringify(fields), { 'content-type': 'text/plain' }],
        ['a JSON-like type', JSON.stringify(fields), { 'content-type': 'application/json-patch+json' }],
        ['no content type', JSON.stringify(fields), { 'content-type': '' }],
      ];
      for (const [kind, body, headers] of bodies) {
        const all = { [TOKEN_HEADER]: dashboard.token, 'sec-fetch-site': 'same-origin', origin: dashboard.app.origin, ...headers };
        const response = await api(route, {
          method: 'POST',
          body,
          headers: Object.fromEntries(Object.entries(all).filter(([, v]) => v !== '')),
        });
        const answer = await json(response);
        assert.equal(response.status, 415, `${route}, ${kind}: ${JSON.stringify(answer)}`);
        assert.equal(answer.error, 'QUEUEBOX_DASHBOARD_NOT_JSON');
        assert.match(String(answer.message), /Content-Type: application\/json.*Nothing was changed/);
      }
    }
    assert.deepEqual(await db.query('SELECT id, state, attempts FROM queuebox_outbox ORDER BY id'), before);
    assert.deepEqual(events, []);
    // JSON with a charset parameter, in any case, is JSON.
    const charset = await action(
      'orders/dead-letters/replay',
      { component: 'outbox', ids: [ids.timeout] },
      {
        'content-type': 'Application/JSON; charset=utf-8',
      },
    );
    assert.deepEqual(await json(charset), { changed: 1 });
  });

  it('blocked keys and skip-head; claims in flight with owner token, age and lease', async () => {
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, last_error, available_at)
      VALUES (gen_random_uuid(), 'billing', 'stuck', '{}', 'pending', 4, 'HTTP 503', clock_timestamp() + interval '1 minute'),
             (gen_random_uuid(), 'billing', 'stuck', '{}', 'pending', 0, NULL, clock_timestamp())`);
    const blocked = (await json(await api('orders/blocked?component=outbox'))) as {
      rows: { key: string; headId: string; waiting: number }[];
    };
    assert.equal(blocked.rows.length, 1);
    assert.equal(blocked.rows[0].key, 'stuck');
    assert.equal(blocked.rows[0].waiting, 1);
    const skipped = await action('orders/blocked/skip-head', {
      component: 'outbox',
      key: 'stuck',
      headId: blocked.rows[0].headId,
      reason: 'poison',
    });
    assert.deepEqual(await json(skipped), { skippedId: blocked.rows[0].headId });
    assert.equal(await stateOf(blocked.rows[0].headId), 'dead');
    assert.equal(events.at(-1)?.action, 'skip-head');
    assert.equal(events.at(-1)?.skippedId, blocked.rows[0].headId);

    const claims = (await json(await api('orders/claims?component=outbox'))) as { rows: Record<string, unknown>[] };
    assert.equal(claims.rows.length, 1);
    assert.equal(claims.rows[0].key, 'c-9');
    assert.match(String(claims.rows[0].token), /^[0-9a-f-]{36}$/);
    assert.ok(Number(claims.rows[0].leaseRemainingSeconds) > 250);
  });

  it('the instance switch: each instance reads its own database; an unknown one is 404', async () => {
    await other.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, last_error)
      VALUES (gen_random_uuid(), 'ledger-sync', '{}', 'dead', 1, 'only in the ledger database')`);
    const ledger = (await json(await api('ledger/overview'))) as { rows: { name: string }[] };
    assert.deepEqual(
      ledger.rows.map((r) => r.name),
      ['ledger-sync'],
    );
    const orders = (await json(await api('orders/overview'))) as { rows: { name: string }[] };
    assert.ok(!orders.rows.some((r) => r.name === 'ledger-sync'));
    const found = (await json(await api('ledger/dead-letters?error=ledger'))) as { rows: { id: string }[] };
    const replayed = await action('ledger/dead-letters/replay', { component: 'outbox', ids: found.rows.map((r) => r.id) });
    assert.deepEqual(await json(replayed), { changed: 1 });
    assert.equal(events.at(-1)?.instance, 'ledger');
    assert.equal((await other.query<{ state: string }>('SELECT state FROM queuebox_outbox'))[0].state, 'pending');
    const unknown = await api('nowhere/overview');
    assert.equal(unknown.status, 404);
    assert.match(String((await json(unknown)).message), /"orders", "ledger"/);
  });

  it('heartbeats: the instances table as QueueBoxAdmin.instances() reads it (the app on "orders" registered itself)', async () => {
    const orders = await json(await api('orders/heartbeats'));
    assert.equal(orders.available, true);
    const rows = orders.rows as { host: string; pid: number; dataSource: string; state: string }[];
    assert.equal(rows.length, 1, 'one QueueBox process runs on "orders"');
    assert.equal(rows[0]?.pid, process.pid);
    assert.equal(rows[0]?.dataSource, 'default');
    assert.equal(rows[0]?.state, 'alive');
    const ledger = await json(await api('ledger/heartbeats'));
    assert.deepEqual(ledger, { available: true, rows: [] }, 'no process runs QueueBox on "ledger"');
  });

  it('serves the page (CSP, no cache) and its assets from the package, gzipped, and nothing else', async () => {
    const redirect = await fetch(dashboard.app.url.slice(0, -1), { headers: OPERATOR, redirect: 'manual' });
    assert.equal(redirect.status, 302);
    assert.equal(redirect.headers.get('location'), 'queuebox/');
    const page = await fetch(dashboard.app.url, { headers: OPERATOR });
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type') ?? '', /^text\/html/);
    assert.match(page.headers.get('content-security-policy') ?? '', /script-src 'self'; style-src 'self'/);
    assert.equal(page.headers.get('cache-control'), 'no-store');
    assert.match(await page.text(), /<script type="module" src="assets\/main.js">/);
    const script = await fetch(`${dashboard.app.url}assets/main.js`, { headers: { ...OPERATOR, 'accept-encoding': 'gzip' } });
    assert.equal(script.status, 200);
    assert.match(script.headers.get('content-type') ?? '', /^text\/javascript/);
    assert.equal(script.headers.get('content-encoding'), 'gzip');
    assert.match(await script.text(), /QueueBox/, 'fetch decodes the gzipped body');
    const raw = await fetch(`${dashboard.app.url}assets/dashboard.css`, { headers: OPERATOR });
    const etag = raw.headers.get('etag') ?? '';
    assert.ok(etag);
    assert.match(await raw.text(), /prefers-color-scheme: dark/);
    assert.equal(
      (await fetch(`${dashboard.app.url}assets/dashboard.css`, { headers: { ...OPERATOR, 'if-none-match': etag } })).status,
      304,
    );
    for (const name of ['tsconfig.json', 'main.ts', '..%2Fdashboard.module.js', 'nope.js']) {
      assert.equal((await fetch(`${dashboard.app.url}assets/${name}`, { headers: OPERATOR })).status, 404, name);
    }
  });
});

describeWithDatabase('queuebox/dashboard: readOnly: true', (db) => {
  const dashboard = useDashboardApp(() => createDashboardApp(db.url, { guard: OperatorGuard, readOnly: true, path: 'ops/queuebox' }));

  it('says so in the session and refuses every action with 403, changing nothing', async () => {
    const ids = await seed(db);
    const session = await json(await fetch(`${dashboard.app.url}api/session`, { headers: OPERATOR }));
    assert.equal(session.readOnly, true);
    for (const [path, body] of [
      ['dead-letters/replay', { component: 'outbox', ids: [ids.timeout] }],
      ['dead-letters/discard', { component: 'outbox', filter: { error: 'HTTP' } }],
      ['blocked/skip-head', { component: 'outbox', key: 'customer-1' }],
    ] as const) {
      const response = await fetch(`${dashboard.app.url}api/default/${path}`, {
        method: 'POST',
        headers: {
          ...OPERATOR,
          'content-type': 'application/json',
          [TOKEN_HEADER]: String(session.token),
          'sec-fetch-site': 'same-origin',
        },
        body: JSON.stringify(body),
      });
      assert.equal(response.status, 403, path);
      assert.equal((await json(response)).error, 'QUEUEBOX_DASHBOARD_READ_ONLY');
    }
    assert.deepEqual(
      (await db.query<{ state: string }>(`SELECT DISTINCT state FROM queuebox_outbox WHERE "key" LIKE 'customer-%'`)).map((r) => r.state),
      ['dead'],
    );
    // Reads still work, under the configured path.
    assert.equal((await fetch(`${dashboard.app.url}api/default/dead-letters`, { headers: OPERATOR })).status, 200);
  });
});
