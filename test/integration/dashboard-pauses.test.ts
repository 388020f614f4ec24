// The dashboard's pause and resume (issue 40) on a real Nest HTTP app (Express) and a real
// PostgreSQL: the guard, the action check (token, Sec-Fetch-Site, Origin, JSON), read-only mode,
// the overview's flag, the audit log line and event with the actor, and the pause stored with it.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { createDashboardApp, OperatorGuard, TOKEN_HEADER, useDashboardApp } from '../support/dashboard-app';
import { describeWithDatabase } from '../support/database';

async function json(response: Response): Promise<Record<string, unknown>> {
  return (await response.json()) as Record<string, unknown>;
}

const emptied = { truncate: ['queuebox_outbox', 'queuebox_inbox', 'queuebox_outbox_pauses'] };

describeWithDatabase('queuebox/dashboard: pause and resume', emptied, (db) => {
  const dashboard = useDashboardApp(() => createDashboardApp(db.url, { guard: OperatorGuard }));
  const { api, action, events } = dashboard;
  const pausesInDb = async () =>
    (
      await db.query<{ component: string; name: string; paused_by: string }>(
        'SELECT component, name, paused_by FROM queuebox_outbox_pauses',
      )
    )
      .map((r) => `${r.component}:${r.name}:${r.paused_by}`)
      .sort();

  it('pauses a destination and a source with the actor, flags them on the overview and in the list, and resumes them', async () => {
    await db.query(
      `INSERT INTO queuebox_outbox (message_id, destination, payload, state) VALUES (gen_random_uuid(), 'billing', '{}', 'pending')`,
    );
    const paused = await action('default/pauses/pause', { component: 'outbox', name: 'billing', reason: 'partner down' });
    assert.equal(paused.status, 200);
    assert.deepEqual(await json(paused), { paused: true });
    assert.deepEqual(await json(await action('default/pauses/pause', { component: 'inbox', name: 'orders' })), { paused: true });
    assert.deepEqual(await json(await action('default/pauses/pause', { component: 'outbox', name: 'billing' })), { paused: false });
    assert.deepEqual(await pausesInDb(), ['inbox:orders:ada', 'outbox:billing:ada'], 'stored with the actor');

    const list = (await json(await api('default/pauses'))) as {
      available: boolean;
      rows: { name: string; reason: string | null; pausedBy: string }[];
    };
    assert.equal(list.available, true);
    assert.deepEqual(
      list.rows.map((r) => [r.name, r.reason, r.pausedBy]),
      [
        ['orders', null, 'ada'],
        ['billing', 'partner down', 'ada'],
      ],
    );
    const overview = (await json(await api('default/overview'))) as {
      rows: { component: string; name: string; paused: boolean; pending: number }[];
      pauses: unknown[];
      flags: { id: string; level: string; text: string }[];
    };
    assert.deepEqual(
      overview.rows.map((r) => [r.component, r.name, r.paused, r.pending]),
      [
        ['outbox', 'billing', true, 1],
        ['inbox', 'orders', true, 0],
      ],
      'flagged, and listed even with nothing waiting',
    );
    assert.equal(overview.pauses.length, 2);
    // The status board flags each pause (a flag source, dashboard.flags.ts), and a paused name is no lag.
    assert.deepEqual(
      overview.flags.filter((f) => f.id.startsWith('paused:') || f.id.startsWith('lag:')).map((f) => [f.id, f.level]),
      [
        ['paused:inbox:orders', 'warning'],
        ['paused:outbox:billing', 'warning'],
      ],
    );
    assert.match(
      overview.flags.find((f) => f.id === 'paused:outbox:billing')?.text ?? '',
      /^Destination "?billing"? is paused \(by ada at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: partner down\)/,
    );

    assert.deepEqual(
      events.map((e) => [e.action, e.component, e.actor, e.changed, e.selection]),
      [
        ['pause', 'outbox', 'ada', 1, { name: 'billing', reason: 'partner down' }],
        ['pause', 'inbox', 'ada', 1, { name: 'orders' }],
        ['pause', 'outbox', 'ada', 0, { name: 'billing' }],
      ],
    );
    assert.ok(
      dashboard.app.logger.lines.some((line) =>
        /"ada" pause on instance "default", outbox: \{"name":"billing","reason":"partner down"\}; 1 row\(s\) changed/.test(line.message),
      ),
      'the audit line',
    );
    assert.ok(
      dashboard.app.logger.lines.some((line) => /Destination "billing" of the outbox paused by "ada"/.test(line.message)),
      "the admin's line",
    );

    assert.deepEqual(await json(await action('default/pauses/resume', { component: 'outbox', name: 'billing' })), { resumed: true });
    assert.deepEqual(await json(await action('default/pauses/resume', { component: 'outbox', name: 'billing' })), { resumed: false });
    assert.deepEqual(await json(await action('default/pauses/resume', { component: 'inbox', name: 'orders' })), { resumed: true });
    assert.deepEqual(await pausesInDb(), []);
    assert.deepEqual(
      events.slice(3).map((e) => [e.action, e.changed]),
      [
        ['resume', 1],
        ['resume', 0],
        ['resume', 1],
      ],
    );
  });

  it('every pause route runs the guard, and the actions the action check: no token, cross-site, another origin or no JSON change nothing', async () => {
    for (const path of ['default/pauses']) assert.equal((await fetch(`${dashboard.app.url}api/${path}`)).status, 403, 'guard');
    for (const route of ['default/pauses/pause', 'default/pauses/resume']) {
      const unguarded = await fetch(`${dashboard.app.url}api/${route}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', [TOKEN_HEADER]: dashboard.token },
        body: JSON.stringify({ component: 'outbox', name: 'billing' }),
      });
      assert.equal(unguarded.status, 403, `${route}: guard`);
      const refusals: [Record<string, string>, string, number][] = [
        [{ [TOKEN_HEADER]: '' }, 'QUEUEBOX_DASHBOARD_TOKEN', 403],
        [{ [TOKEN_HEADER]: 'forged' }, 'QUEUEBOX_DASHBOARD_TOKEN', 403],
        [{ 'sec-fetch-site': 'cross-site' }, 'QUEUEBOX_DASHBOARD_CROSS_SITE', 403],
        [{ origin: 'https://evil.example' }, 'QUEUEBOX_DASHBOARD_CROSS_SITE', 403],
        [{ 'content-type': 'text/plain' }, 'QUEUEBOX_DASHBOARD_NOT_JSON', 415],
      ];
      for (const [headers, error, status] of refusals) {
        const response = await action(route, { component: 'outbox', name: 'billing' }, headers);
        assert.equal(response.status, status, `${route} ${JSON.stringify(headers)}`);
        assert.equal((await json(response)).error, error);
      }
    }
    const noName = await action('default/pauses/pause', { component: 'outbox' });
    assert.equal(noName.status, 400);
    assert.equal((await json(noName)).field, 'name');
    const badComponent = await action('default/pauses/pause', { component: 'queue', name: 'x' });
    assert.equal((await json(badComponent)).field, 'component');
    const tooLong = await action('default/pauses/pause', { component: 'outbox', name: 'x'.repeat(300) });
    assert.equal(tooLong.status, 400);
    assert.equal((await action('nowhere/pauses/pause', { component: 'outbox', name: 'x' })).status, 404);
    assert.deepEqual(await pausesInDb(), []);
    assert.deepEqual(events, []);
  });
});

describeWithDatabase('queuebox/dashboard: pause and resume in read-only mode', (db) => {
  const dashboard = useDashboardApp(() => createDashboardApp(db.url, { guard: OperatorGuard, readOnly: true }));

  it('lists the pauses but refuses to pause or resume with 403, changing nothing', async () => {
    await db.query(`INSERT INTO queuebox_outbox_pauses (component, name, paused_by) VALUES ('outbox', 'crm', 'cli')`);
    for (const route of ['pause', 'resume']) {
      const response = await dashboard.action(`default/pauses/${route}`, {
        component: 'outbox',
        name: route === 'pause' ? 'billing' : 'crm',
      });
      assert.equal(response.status, 403, route);
      assert.equal((await json(response)).error, 'QUEUEBOX_DASHBOARD_READ_ONLY');
    }
    const list = (await json(await dashboard.api('default/pauses'))) as { rows: { name: string }[] };
    assert.deepEqual(
      list.rows.map((r) => r.name),
      ['crm'],
    );
  });
});
