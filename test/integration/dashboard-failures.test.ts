// The dashboard's routes for failures (issue 40 items 2 and 4) on a real Nest HTTP app and a real
// PostgreSQL: a message's attempts, the dead-letter groups, and replay/discard of one group by its
// fingerprint: the guard, the action check (token, site, JSON), read-only mode and the audit line.
import assert from 'node:assert/strict';
import { beforeEach, it } from 'node:test';
import type { DashboardAdmin } from '../../lib/dashboard/dashboard.options';
import { createDashboardApp, OperatorGuard, TOKEN_HEADER, useDashboardApp } from '../support/dashboard-app';
import { describeWithDatabase, type TestDatabase } from '../support/database';

const TIMEOUT = 'PublishError/503: HTTP # from billing for order #';
const REFUSED = 'Error/ECONNREFUSED: connect ECONNREFUSED #.#.#.#:#';
const TABLES = ['queuebox_outbox', 'queuebox_inbox', 'queuebox_outbox_attempts'];

async function json(response: Response): Promise<Record<string, unknown>> {
  return (await response.json()) as Record<string, unknown>;
}

/** Dead rows of two causes on billing, one on shipping, and a row with two failed attempts recorded. */
async function seed(db: TestDatabase): Promise<{ withAttempts: string }> {
  const dead = (destination: string, fingerprint: string, count: number) =>
    db.query(
      `INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, last_error, fingerprint, claimed_at)
       SELECT gen_random_uuid(), $1, '{}', 'dead', 3, 'failed ' || n, $2, clock_timestamp() - make_interval(mins => n)
       FROM generate_series(1, $3::integer) n`,
      [destination, fingerprint, count],
    );
  await dead('billing', TIMEOUT, 4);
  await dead('billing', REFUSED, 2);
  await dead('shipping', TIMEOUT, 1);
  const [{ id }] = await db.query<{ id: string }>(
    "SELECT id::text FROM queuebox_outbox WHERE fingerprint = $1 AND destination = 'billing' LIMIT 1",
    [REFUSED],
  );
  await db.query(
    `INSERT INTO queuebox_outbox_attempts (row_id, attempt, failed_at, duration_ms, instance_id, error_class, error, outcome) VALUES
     ($1, 2, clock_timestamp() - interval '1 minute', 1200, '3f2a9c1e-0000-4000-8000-000000000001', 'Error/ECONNREFUSED', 'Error [ECONNREFUSED]: connect ECONNREFUSED 10.0.0.7:443', 'retry'),
     ($1, 3, clock_timestamp(), 15, '3f2a9c1e-0000-4000-8000-000000000001', 'Error/ECONNREFUSED', 'Error [ECONNREFUSED]: connect ECONNREFUSED 10.0.0.8:443', 'dead')`,
    [id],
  );
  return { withAttempts: id };
}

/** An admin of your own with neither `deadLetterGroups` nor `listAttempts`: the two routes answer without calling it. */
const OWN_ADMIN = { backlog: async () => [] } as unknown as DashboardAdmin;

describeWithDatabase('queuebox/dashboard: attempts and dead-letter groups', { truncate: TABLES }, (db) => {
  const dashboard = useDashboardApp(() =>
    createDashboardApp(db.url, { guard: OperatorGuard, appQueueBoxes: true, instances: [{ name: 'own', admin: OWN_ADMIN }] }),
  );
  const { api, action, events } = dashboard;
  let ids: Awaited<ReturnType<typeof seed>>;
  const states = async () =>
    db.query<{ destination: string; fingerprint: string; state: string; n: number }>(
      'SELECT destination, fingerprint, state, count(*)::int AS n FROM queuebox_outbox GROUP BY 1, 2, 3 ORDER BY 1, 2, 3',
    );
  beforeEach(async () => {
    ids = await seed(db);
  });

  it('the new routes run the guard: no operator, 403', async () => {
    for (const path of ['api/default/dead-letters/groups', `api/default/attempts/outbox/${ids.withAttempts}`]) {
      assert.equal((await fetch(`${dashboard.app.url}${path}`)).status, 403, path);
    }
  });

  it('groups: per destination and fingerprint, the biggest first, with first and last death; the count takes a fingerprint', async () => {
    const groups = await json(await api('default/dead-letters/groups?component=outbox'));
    assert.equal(groups.available, true);
    assert.deepEqual(
      (groups.rows as { name: string; fingerprint: string; count: number; firstDeadAt: string; lastDeadAt: string }[]).map((g) => [
        g.name,
        g.fingerprint,
        g.count,
        new Date(g.firstDeadAt) < new Date(g.lastDeadAt) || g.count === 1,
      ]),
      [
        ['billing', TIMEOUT, 4, true],
        ['billing', REFUSED, 2, true],
        ['shipping', TIMEOUT, 1, true],
      ],
    );
    const count = await json(
      await api(`default/dead-letters/count?component=outbox&name=billing&fingerprint=${encodeURIComponent(TIMEOUT)}`),
    );
    assert.deepEqual(count, { count: 4 });
    assert.equal((await api('default/dead-letters/groups?component=elsewhere')).status, 400);
  });

  it("attempts: a row's failed attempts, newest first; none for a row that never failed; a bad id is 400", async () => {
    const answer = await json(await api(`default/attempts/outbox/${ids.withAttempts}`));
    assert.equal(answer.available, true);
    assert.deepEqual(
      (answer.rows as { attempt: number; outcome: string; errorClass: string; durationMs: number; instanceId: string }[]).map((a) => [
        a.attempt,
        a.outcome,
        a.errorClass,
        a.durationMs,
        a.instanceId,
      ]),
      [
        [3, 'dead', 'Error/ECONNREFUSED', 15, '3f2a9c1e-0000-4000-8000-000000000001'],
        [2, 'retry', 'Error/ECONNREFUSED', 1200, '3f2a9c1e-0000-4000-8000-000000000001'],
      ],
    );
    assert.deepEqual(await json(await api('default/attempts/inbox/1')), { available: true, rows: [] });
    const bad = await api('default/attempts/outbox/abc');
    assert.equal(bad.status, 400);
    assert.equal((await json(bad)).field, 'id');
  });

  it('an admin of your own without deadLetterGroups or listAttempts: both routes answer available: false and say why', async () => {
    const groups = await json(await api('own/dead-letters/groups?component=outbox'));
    assert.deepEqual({ ...groups, reason: undefined }, { available: false, reason: undefined, rows: [] });
    assert.match(String(groups.reason), /no deadLetterGroups\(\) method/);
    const attempts = await json(await api(`own/attempts/outbox/${ids.withAttempts}`));
    assert.deepEqual({ ...attempts, reason: undefined }, { available: false, reason: undefined, rows: [] });
    assert.match(String(attempts.reason), /no listAttempts\(\) method/);
  });

  it('replays one group by its fingerprint: only its rows change, the action is audited with the fingerprint', async () => {
    const response = await action('default/dead-letters/replay', {
      component: 'outbox',
      filter: { name: 'billing', fingerprint: TIMEOUT },
    });
    assert.equal(response.status, 200);
    assert.deepEqual(await json(response), { changed: 4 });
    assert.deepEqual(await states(), [
      { destination: 'billing', fingerprint: REFUSED, state: 'dead', n: 2 },
      { destination: 'billing', fingerprint: TIMEOUT, state: 'pending', n: 4 },
      { destination: 'shipping', fingerprint: TIMEOUT, state: 'dead', n: 1 },
    ]);
    assert.deepEqual(events, [
      {
        action: 'replay',
        instance: 'default',
        component: 'outbox',
        changed: 4,
        selection: { filter: { name: 'billing', fingerprint: TIMEOUT }, all: false },
        actor: 'ada',
      },
    ]);
    assert.ok(
      dashboard.app.logger.has(
        'log',
        `"ada" replay on instance "default", outbox: {"filter":{"name":"billing","fingerprint":${JSON.stringify(TIMEOUT)}},"all":false}; 4 row(s) changed.`,
      ),
      JSON.stringify(dashboard.app.logger.lines.filter((l) => l.level === 'log').slice(-2)),
    );
    const discard = await action('default/dead-letters/discard', {
      component: 'outbox',
      filter: { name: 'billing', fingerprint: REFUSED },
    });
    assert.deepEqual(await json(discard), { changed: 2 });
    assert.deepEqual(
      await db.query('SELECT count(*)::int AS n FROM queuebox_outbox_attempts'),
      [{ n: 0 }],
      'the history went with its rows',
    );
  });

  it('a group action without the token, from another site, or not as JSON is refused and changes nothing', async () => {
    const body = { component: 'outbox', filter: { name: 'billing', fingerprint: TIMEOUT } };
    assert.equal((await action('default/dead-letters/replay', body, { [TOKEN_HEADER]: '' })).status, 403);
    assert.equal((await action('default/dead-letters/discard', body, { 'sec-fetch-site': 'cross-site' })).status, 403);
    assert.equal((await action('default/dead-letters/discard', body, { 'content-type': 'text/plain' })).status, 415);
    const tooLong = await action('default/dead-letters/discard', { component: 'outbox', filter: { fingerprint: 'x'.repeat(600) } });
    assert.equal(tooLong.status, 400);
    assert.equal((await json(tooLong)).field, 'fingerprint');
    assert.deepEqual(
      (await states()).map((s) => s.state),
      ['dead', 'dead', 'dead'],
    );
    assert.deepEqual(events, []);
  });
});

describeWithDatabase('queuebox/dashboard: attempts and groups when read-only', { truncate: TABLES }, (db) => {
  const dashboard = useDashboardApp(() => createDashboardApp(db.url, { guard: OperatorGuard, readOnly: true }));

  it('reads the groups and attempts, and refuses a group replay or discard with 403', async () => {
    const ids = await seed(db);
    assert.equal((await dashboard.api('default/dead-letters/groups')).status, 200);
    assert.equal((await dashboard.api(`default/attempts/outbox/${ids.withAttempts}`)).status, 200);
    for (const path of ['replay', 'discard']) {
      const response = await dashboard.action(`default/dead-letters/${path}`, {
        component: 'outbox',
        filter: { name: 'billing', fingerprint: TIMEOUT },
      });
      assert.equal(response.status, 403, path);
      assert.equal((await json(response)).error, 'QUEUEBOX_DASHBOARD_READ_ONLY');
    }
    assert.deepEqual(await db.query('SELECT DISTINCT state FROM queuebox_outbox'), [{ state: 'dead' }]);
  });
});
