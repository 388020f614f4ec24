// The dashboard in a real browser: Debian's chromium driven by playwright-core, against a real Nest
// app (Express) with a running outbox poller on the test PostgreSQL. An operator opens the
// overview, finds a dead letter by its error text, replays it and sees it sent; read-only mode
// shows no actions and the API refuses them; a dashboard without a guard refuses to start.
//
// Screenshots go to .build/dashboard-screenshots, or to QUEUEBOX_DASHBOARD_SCREENSHOTS (the
// committed ones in docs/images: `npm run screenshots:dashboard`).
//
// .ci/run installs chromium (apt-get) when it is missing. Without /usr/bin/chromium the tests
// print one line saying they were skipped and why, and are reported as skipped.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import type { Locator, Page } from 'playwright-core';
import { DataSource } from 'typeorm';
import { QueueBoxDashboardModule } from '../../lib/dashboard';
import { PermanentPublishError, QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { chromiumMissing, launchChromium, screenshotsFolder } from '../support/chromium';
import { createDashboardApp, type DashboardTestApp, OperatorGuard } from '../support/dashboard-app';
import { createTestDatabase, describeWithDatabase, eventually } from '../support/database';
import { gate } from '../support/recording-publisher';

const skip = chromiumMissing('Dashboard browser tests');

/** The text of a table row's cells, one space between them. */
const cells = async (row: Locator) => (await row.locator('th, td').allTextContents()).map((t) => t.trim()).join(' ');

const ERROR = 'billing refused the invoice: card 4242 expired (HTTP 422)';

describeWithDatabase('queuebox/dashboard in Chromium', { skip }, (db) => {
  let t: DashboardTestApp;
  let readOnly: DashboardTestApp;
  let browser: Awaited<ReturnType<typeof launchChromium>>;
  let shots: string;
  let failing = true;

  const shot = async (page: Page, name: string) => {
    await page.screenshot({ path: join(shots, `dashboard-${name}.png`), fullPage: true });
  };

  before(async () => {
    shots = screenshotsFolder();
    // The poller runs: a message to billing fails for good while `failing`, and is published after.
    t = await createDashboardApp(
      db.url,
      { guard: OperatorGuard },
      {
        queuebox: {
          outbox: {
            publisher: {
              publish: async (message) => {
                if (failing && message.destination === 'billing') throw new PermanentPublishError(ERROR);
              },
            },
            pollIntervalMs: 100,
          },
        },
      },
    );
    readOnly = await createDashboardApp(db.url, { guard: OperatorGuard, readOnly: true }, { queuebox: { workers: false } });
    browser = await launchChromium();
  });

  after(async () => {
    await browser?.close();
    await t?.app.close();
    await readOnly?.app.close();
  });

  it('overview, find a dead letter by its error text, replay it, see it sent', async () => {
    const outbox = t.app.get(OutboxService);
    const source = t.app.get(DataSource);
    for (const [destination, key, total] of [
      ['billing', 'customer-7', 42],
      ['crm', 'customer-7', 42],
      ['crm', 'customer-8', 13],
      ['audit', null, 1],
    ] as const) {
      const headers = destination === 'billing' ? { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } : undefined;
      await source.transaction((manager) =>
        outbox.enqueue(manager, { destination, key: key ?? undefined, payload: { type: 'order.placed', total }, headers }),
      );
    }
    await eventually(
      async () => (await db.query(`SELECT 1 FROM queuebox_outbox WHERE state IN ('dead', 'sent')`)).length === 4,
      'the poller to send three messages and dead-letter the billing one',
    );
    const [{ id }] = await db.query<{ id: string }>(`SELECT id::text FROM queuebox_outbox WHERE state = 'dead'`);

    const page = await browser.context.newPage();
    await page.goto(t.url);
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    const billing = page.getByRole('row', { name: /billing/ });
    await billing.getByRole('link', { name: '1' }).waitFor();
    assert.match(await cells(billing), /^billing 0 0 1 — /);
    await shot(page, 'overview');
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot(page, 'overview-dark');
    await page.emulateMedia({ colorScheme: 'light' });

    // Keyboard only: the view link, the search box, Enter.
    await page.getByRole('link', { name: 'Dead letters' }).focus();
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Dead letters' }).waitFor();
    await page.getByLabel('Error contains').fill('card 4242');
    await page.keyboard.press('Enter');
    await page.waitForURL(/error=card\+4242/);
    const row = page.locator('tbody tr', { has: page.getByRole('link', { name: id, exact: true }) });
    await row.waitFor();
    assert.match((await row.textContent()) ?? '', /card 4242 expired/);
    await shot(page, 'dead-letters');

    await row.getByRole('link', { name: id }).click();
    await page.getByRole('heading', { name: `Dead letter ${id}` }).waitFor();
    assert.match((await page.locator('pre.error-block').textContent()) ?? '', new RegExp(ERROR.replace(/[()]/g, '\\$&')));
    assert.match((await page.locator('pre.code').textContent()) ?? '', /"type": "order.placed",\n {2}"total": 42/);
    await page.getByText('4bf92f3577b34da6a3ce929d0e0e4736', { exact: true }).waitFor();
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot(page, 'detail-dark');
    await page.emulateMedia({ colorScheme: 'light' });
    await page.goBack();
    await row.waitFor();

    failing = false; // billing accepts it now
    await row.getByRole('checkbox').check();
    await page.getByRole('button', { name: 'Replay selected (1)' }).click();
    const dialog = page.getByRole('dialog', { name: 'Replay 1 message?' });
    await dialog.waitFor();
    assert.match((await dialog.textContent()) ?? '', /1 dead outbox message will be sent again/);
    assert.equal(
      await page.evaluate('document.activeElement && document.activeElement.textContent'),
      'Cancel',
      'the safe choice has the focus',
    );
    await shot(page, 'replay-confirm');
    await dialog.getByRole('button', { name: 'Replay 1' }).click();
    await page.getByRole('status').filter({ hasText: 'Replayed 1 message.' }).waitFor();

    await eventually(
      async () => (await db.query<{ state: string }>('SELECT state FROM queuebox_outbox WHERE id = $1', [id]))[0].state === 'sent',
      'the replayed message to be sent',
    );
    await page.getByRole('link', { name: 'Overview' }).click();
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    await page
      .getByRole('row', { name: /billing/ })
      .filter({ hasText: '1 / 0' })
      .waitFor();
    assert.match(await cells(page.getByRole('row', { name: /billing/ })), /^billing 0 0 0 — /);
    // Nest's static Logger writes to the logger of the app created last (the read-only one).
    const line = `"ada" replay on instance "default", outbox: {"ids":["${id}"]}; 1 row(s) changed.`;
    assert.ok(
      [t, readOnly].some((app) => app.logger.has('log', line)),
      line,
    );
    await page.close();
  });

  it('dead-letter groups: counts by cause, a group replayed behind its count confirmation; a message shows its failed attempts', async (testCase) => {
    // Even when the case fails: the cases after it count the dead rows.
    testCase.after(() => db.query(`DELETE FROM queuebox_outbox WHERE destination IN ('ledger', 'crm')`));
    const timeout = 'PublishError/503: HTTP # from https://ledger.example/entries/#';
    const refused = 'Error/ECONNREFUSED: connect ECONNREFUSED #.#.#.#:#';
    const dead = (destination: string, fingerprint: string, error: string, count: number) =>
      db.query<{ id: string }>(
        `INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, last_error, fingerprint, claimed_at)
         SELECT gen_random_uuid(), $1, '{}', 'dead', 5, replace($3, '#', n::text), $2, clock_timestamp() - make_interval(mins => n * 7)
         FROM generate_series(1, $4::integer) n RETURNING id::text`,
        [destination, fingerprint, error, count],
      );
    const [first] = await dead(
      'ledger',
      timeout,
      'attempts exhausted (5 of 5): PublishError [QUEUEBOX_PUBLISH]: HTTP 503 from https://ledger.example/entries/#',
      12,
    );
    await dead('ledger', refused, 'Error [ECONNREFUSED]: connect ECONNREFUSED 10.0.0.#:443', 3);
    await dead('crm', timeout, 'HTTP 503 from https://ledger.example/entries/#', 2);
    for (const [attempt, ms, outcome, entry] of [
      [3, 840, 'retry', 1201],
      [4, 1210, 'retry', 1201],
      [5, 10_002, 'dead', 1201],
    ] as const) {
      await db.query(
        `INSERT INTO queuebox_outbox_attempts (row_id, attempt, failed_at, duration_ms, instance_id, error_class, error, outcome)
         VALUES ($1, $2, clock_timestamp() - make_interval(secs => 60 - $2 * 10), $3, '3f2a9c1e-5b7d-4c8e-9f01-23456789abcd', 'PublishError/503', $4, $5)`,
        [first.id, attempt, ms, `PublishError [QUEUEBOX_PUBLISH]: HTTP 503 from https://ledger.example/entries/${entry}`, outcome],
      );
    }

    const page = await browser.context.newPage();
    await page.goto(`${t.url}#/default/dead`);
    await page.getByRole('heading', { name: 'Dead letters' }).waitFor();
    await page.getByRole('link', { name: 'Dead-letter groups' }).click();
    await page.getByRole('heading', { name: 'Dead-letter groups' }).waitFor();
    const rows = page.locator('tbody tr');
    await rows.first().waitFor();
    assert.deepEqual(
      (await rows.allTextContents()).map((r) =>
        r
          .replace(/\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ/g, 'T')
          .replace(/\s+/g, ' ')
          .trim(),
      ),
      [
        `12ledger${timeout.replace(': ', ':')}TTReplay groupDiscard group`,
        `3ledger${refused.replace(': ', ':')}TTReplay groupDiscard group`,
        `2crm${timeout.replace(': ', ':')}TTReplay groupDiscard group`,
      ],
    );
    await shot(page, 'dead-letter-groups');

    const group = rows.filter({ hasText: 'ECONNREFUSED' });
    await group.getByRole('button', { name: 'Replay group' }).click();
    const dialog = page.getByRole('dialog', { name: 'Replay 3 messages?' });
    await dialog.waitFor();
    assert.match((await dialog.textContent()) ?? '', /3 dead outbox messages of ledger with this fingerprint will be sent again/);
    await shot(page, 'group-replay-confirm');
    await dialog.getByRole('button', { name: 'Replay 3' }).click();
    await page.getByRole('status').filter({ hasText: 'Replayed 3 messages.' }).waitFor();
    await rows.filter({ hasText: 'ECONNREFUSED' }).waitFor({ state: 'detached' });
    // The worker may already be sending them (pending, processing or sent: one read, so a row that
    // moves on between two reads cannot fail the case): all 3 are back, none is dead.
    assert.deepEqual(
      await db.query(
        `SELECT count(*)::int AS n, count(*) FILTER (WHERE state = 'dead')::int AS dead
         FROM queuebox_outbox WHERE destination IN ('ledger', 'crm') AND fingerprint = $1`,
        [refused],
      ),
      [{ n: 3, dead: 0 }],
      'the group replayed: none of it is dead',
    );
    assert.equal(
      (await db.query(`SELECT 1 FROM queuebox_outbox WHERE fingerprint = $1 AND state = 'dead'`, [timeout])).length,
      14,
      'the other groups untouched',
    );
    const line = `"ada" replay on instance "default", outbox: {"filter":{"name":"ledger","fingerprint":${JSON.stringify(refused)}},"all":false}; 3 row(s) changed.`;
    assert.ok(
      [t, readOnly].some((app) => app.logger.has('log', line)),
      line,
    );

    await page.goto(`${t.url}#/default/dead/outbox/${first.id}`);
    await page.getByRole('heading', { name: `Dead letter ${first.id}` }).waitFor();
    const attempts = page.getByRole('region', { name: 'Attempts' }).locator('tbody tr');
    await attempts.first().waitFor();
    assert.deepEqual(
      (await attempts.allTextContents()).map((r) => r.replace(/\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ/, 'T')),
      [
        '5T10.002 s3f2a9c1edeadPublishError/503PublishError [QUEUEBOX_PUBLISH]: HTTP 503 from https://ledger.example/entries/1201',
        '4T1.210 s3f2a9c1eretryPublishError/503PublishError [QUEUEBOX_PUBLISH]: HTTP 503 from https://ledger.example/entries/1201',
        '3T0.840 s3f2a9c1eretryPublishError/503PublishError [QUEUEBOX_PUBLISH]: HTTP 503 from https://ledger.example/entries/1201',
      ],
    );
    await page.getByRole('link', { name: timeout }).waitFor();
    await page.getByRole('region', { name: 'Attempts' }).scrollIntoViewIfNeeded();
    await shot(page, 'attempts');
    await page.close();
  });

  it('read-only: no action buttons, and the API refuses an action sent from the page with its token', async () => {
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, attempts, last_error, claimed_at)
      VALUES (gen_random_uuid(), 'crm', '{}', 'dead', 5, 'crm answered HTTP 500', clock_timestamp())`);
    const page = await browser.context.newPage();
    await page.goto(`${readOnly.url}#/default/dead`);
    await page.getByRole('heading', { name: 'Dead letters' }).waitFor();
    await page.getByText('crm answered HTTP 500').waitFor();
    await page.getByText('Read-only: replay and discard are off.').waitFor();
    assert.equal(await page.getByRole('button', { name: /Replay|Discard/ }).count(), 0);
    assert.equal(await page.getByRole('checkbox').count(), 0);
    assert.equal(await page.getByText('read-only', { exact: true }).count(), 1, 'the header says read-only');
    await shot(page, 'read-only');
    const answer = await page.evaluate(async () => {
      const session = (await (await fetch('api/session')).json()) as { token: string; tokenHeader: string };
      const response = await fetch('api/default/dead-letters/discard', {
        method: 'POST',
        headers: { 'content-type': 'application/json', [session.tokenHeader]: session.token },
        body: JSON.stringify({ component: 'outbox', filter: {}, all: true }),
      });
      return { status: response.status, body: (await response.json()) as { error: string } };
    });
    assert.equal(answer.status, 403);
    assert.equal(answer.body.error, 'QUEUEBOX_DASHBOARD_READ_ONLY');
    assert.equal((await db.query(`SELECT 1 FROM queuebox_outbox WHERE state = 'dead'`)).length, 1);
    await page.close();
  });

  it('a page of another origin cannot make the dashboard act, even with the operator signed in', async () => {
    const page = await browser.context.newPage();
    await page.goto(`${t.url}#/default/overview`);
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    // The same app under another origin (localhost instead of 127.0.0.1) plays the other site.
    const evil = t.url.replace('127.0.0.1', 'localhost');
    const other = await browser.context.newPage();
    await other.goto(`${evil}assets/icon.svg`);
    const answer = await other.evaluate(async (target) => {
      try {
        const response = await fetch(`${target}api/default/dead-letters/discard`, {
          method: 'POST',
          mode: 'no-cors',
          credentials: 'include',
          headers: { 'content-type': 'text/plain' },
          body: JSON.stringify({ component: 'outbox', filter: {}, all: true }),
        });
        return response.type;
      } catch (error) {
        return String(error);
      }
    }, t.url);
    assert.equal(answer, 'opaque', 'the browser sent it and hid the answer');
    assert.equal((await db.query(`SELECT 1 FROM queuebox_outbox WHERE state = 'dead'`)).length, 1, 'nothing was discarded');
    await page.close();
    await other.close();
  });

  it('typing a search while the dead letters still load: the focus stays in the search box, and Enter searches', async () => {
    const page = await browser.context.newPage();
    // The list answers only once the search is typed: the view finishes loading after that.
    const typed = gate();
    await page.route(
      (url) => url.pathname.endsWith('/dead-letters'),
      async (route) => {
        await typed.promise;
        await route.continue();
      },
    );
    const listed = page.waitForResponse((response) => new URL(response.url()).pathname.endsWith('/dead-letters'));
    await page.goto(`${t.url}#/default/dead`);
    await page.getByRole('heading', { name: 'Dead letters' }).waitFor();
    await page.getByLabel('Error contains').fill('nothing like this');
    typed.open();
    await listed;
    await page.locator('.results').filter({ hasNotText: 'Loading…' }).waitFor();
    assert.equal(await page.evaluate('document.activeElement && document.activeElement.getAttribute("name")'), 'error');
    await page.keyboard.press('Enter');
    await page.waitForURL(/error=nothing\+like\+this/, { timeout: 10_000 });
    await page.close();
  });

  it('blocked and instances views: an owner only for a held head, with its state (alive, silent, dead); a head waiting for its retry names only its last claimer', async () => {
    // A database of its own, served by an app that runs no worker: nothing sweeps the dead instance
    // or claims these rows while the page reads them.
    const own = await createTestDatabase();
    const app = await createDashboardApp(own.url, { guard: OperatorGuard });
    try {
      const [alive, silent, dead] = [
        'a11ce000-0000-4000-8000-000000000001',
        '5113e700-0000-4000-8000-000000000002',
        'dead0000-0000-4000-8000-000000000003',
      ];
      // deadAfterMs 60 s: silent after 40 s, dead after 60 s, by the database clock.
      await own.query(
        `INSERT INTO queuebox_instances (id, host, pid, data_source, version, dead_after_ms, heartbeat_at) VALUES
           ($1, 'web-1', 101, 'default', '0.1.0', 60000, clock_timestamp()),
           ($2, 'web-2', 202, 'default', '0.1.0', 60000, clock_timestamp() - interval '45 seconds'),
           ($3, 'web-3', 303, 'default', '0.1.0', 60000, clock_timestamp() - interval '90 seconds')`,
        [alive, silent, dead],
      );
      const blockedHead = (key: string, by: string, held: boolean) =>
        own.query(
          `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, last_error, available_at,
                                        claim_token, claimed_at, lease_expires_at, claimed_by)
           VALUES (gen_random_uuid(), 'billing', $1, '{}', $2, 1, $3, clock_timestamp() + interval '10 minutes',
                   CASE WHEN $4 THEN gen_random_uuid() END, clock_timestamp() - make_interval(secs => $6),
                   CASE WHEN $4 THEN clock_timestamp() + interval '4 minutes' END, $5),
                  (gen_random_uuid(), 'billing', $1, '{}', 'pending', 0, NULL, clock_timestamp(), NULL, NULL, NULL, NULL)`,
          // A dead instance claimed its row before it stopped (an instance that renews lives).
          [key, held ? 'processing' : 'pending', held ? null : 'billing answered HTTP 503', held, by, by === dead ? 100 : 20],
        );
      await blockedHead('order-1', dead, false);
      await blockedHead('order-2', silent, true);
      await blockedHead('order-3', dead, true);
      await blockedHead('order-4', alive, true);

      const page = await browser.context.newPage();
      await page.goto(`${app.url}#/default/blocked`);
      await page.getByRole('heading', { name: 'Blocked keys' }).waitFor();
      const row = (key: string) => page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: key, exact: true }) });
      await row('order-1').waitFor();
      // Pending until its retry: held by nobody, whoever claimed it last.
      assert.match(await cells(row('order-1')), /failing pending 1 .* — none; last claimed by dead0000 1 billing answered HTTP 503/);
      assert.match(await cells(row('order-2')), /held processing 1 .* 2\d s 5113e700 silent 1/);
      assert.match(await cells(row('order-3')), /held processing 1 .* 1 min 4\d s dead0000 dead 1/);
      assert.match(await cells(row('order-4')), /held processing 1 .* 2\d s a11ce000 alive 1/);
      assert.equal(await row('order-1').locator('td.expired').count(), 0, 'nothing marks the failing head as held by a dead instance');
      await shot(page, 'blocked');

      await page.getByRole('link', { name: 'Instances' }).click();
      await page.getByRole('heading', { name: 'Instances' }).waitFor();
      const instance = (id: string) => page.getByRole('row').filter({ has: page.locator(`code[title="${id}"]`) });
      await instance(dead).waitFor();
      assert.match(await cells(instance(alive)), /web-1 101 default 0\.1\.0 .* alive 1 0$/);
      assert.match(await cells(instance(silent)), /web-2 202 .* [45]\d s ago silent \(dead after 1 min\) 1 0$/);
      assert.match(await cells(instance(dead)), /web-3 303 .* (9\d s|1 min \d+ s) ago dead \(silent over 1 min\) 1 0$/);
      assert.deepEqual(await Promise.all([alive, silent, dead].map((id) => instance(id).getAttribute('class'))), [
        null,
        'silent',
        'expired',
      ]);
      await shot(page, 'instances');
      await page.close();
    } finally {
      await app.app.close();
      await own.drop();
    }
  });

  it('status board, history, sorting, the message browser and its detail, and the blocked view at 1024 px', async () => {
    // A database of its own, served by an app that runs no worker: nothing changes the rows while the page reads them.
    const own = await createTestDatabase();
    const app = await createDashboardApp(own.url, { guard: OperatorGuard, lagThresholdSeconds: 60 });
    try {
      // Seven days of sent rows (one an hour to billing, one every 2 hours to crm), a few dead ones.
      await own.query(`INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, created_at, sent_at)
        SELECT gen_random_uuid(), CASE WHEN h % 2 = 0 THEN 'crm' ELSE 'billing' END, 'order-' || h, jsonb_build_object('order', jsonb_build_object('id', h)),
               'sent', 1, clock_timestamp() - make_interval(hours => h), clock_timestamp() - make_interval(hours => h)
        FROM generate_series(0, 167) h, generate_series(1, 1 + (h % 3)) n`);
      await own.query(`INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, last_error, created_at, claimed_at)
        SELECT gen_random_uuid(), 'billing', 'order-' || h, '{}', 'dead', 5, 'HTTP 503', clock_timestamp() - make_interval(hours => h), clock_timestamp() - make_interval(hours => h)
        FROM generate_series(5, 100, 19) h`);
      // A destination that lags (a due row waiting 10 minutes, over the 60 s threshold) and a silent instance.
      await own.query(`INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, created_at, available_at)
        VALUES (gen_random_uuid(), 'ledger', 'order-123', '{"order":{"id":123}}', 'pending', 0, clock_timestamp() - interval '10 minutes',
                clock_timestamp() - interval '10 minutes')`);
      await own.query(`INSERT INTO queuebox_instances (id, host, pid, data_source, version, dead_after_ms, heartbeat_at)
        VALUES ('5113e700-0000-4000-8000-00000000000a', 'worker-2', 2002, 'default', '0.1.0', 60000, clock_timestamp() - interval '45 seconds')`);
      const long =
        'billing answered HTTP 503 Service Unavailable from https://billing.internal.example.com/v2/invoices: upstream connect error or disconnect/reset before headers';
      for (const key of ['customer-1', 'customer-2']) {
        await own.query(
          `INSERT INTO queuebox_outbox (message_id, destination, "key", payload, state, attempts, last_error, available_at, claimed_at, claimed_by)
           VALUES (gen_random_uuid(), 'billing-eu-central-1', $1, '{}', 'pending', 7, $2, clock_timestamp() + interval '10 minutes', clock_timestamp(),
                   '5113e700-0000-4000-8000-00000000000a'),
                  (gen_random_uuid(), 'billing-eu-central-1', $1, '{}', 'pending', 0, NULL, clock_timestamp(), NULL, NULL)`,
          [key, long],
        );
      }

      const page = await browser.context.newPage();
      await page.goto(`${app.url}#/default/overview`);
      await page.getByRole('heading', { name: 'Overview' }).waitFor();
      // The status board: critical first, each flag with its text; the instance flag links to the Instances view.
      const flags = page.locator('#flags li');
      await flags.first().waitFor();
      // (The database's flag, dashboard-warnings-browser.test.ts, depends on the server's settings.)
      const shown = await flags.evaluateAll((items) => items.map((i) => i.getAttribute('data-flag')));
      assert.deepEqual(
        shown.filter((id) => id !== 'database'),
        ['lag:outbox:ledger', 'instance:5113e700-0000-4000-8000-00000000000a'],
      );
      assert.match(
        (await flags.nth(0).textContent()) ?? '',
        /^Critical: Destination "ledger" lags: its oldest due message has waited \d+ s \(threshold 60 s\)/,
        'ten minutes is past 5 times the threshold',
      );
      assert.match((await flags.nth(1).textContent()) ?? '', /^Warning: Instance 5113e700 \(worker-2, pid 2002\) is silent.*Show$/);
      assert.equal(await page.locator('td.lagging').count(), 1, 'the lag cell of ledger is marked');
      // The history: 24 hours per hour by default, 7 days on request, labelled in UTC.
      const outboxChart = page.locator('figure.history-chart svg').first();
      await outboxChart.waitFor();
      assert.match((await outboxChart.getAttribute('aria-label')) ?? '', /^Outbox: [\d,]+ sent and \d+ dead, last 24 hours, per hour$/);
      await page.getByLabel('History range').selectOption('7d');
      await page.waitForURL(/range=7d/);
      const week = page.locator('figure.history-chart svg').first();
      await page.locator('figure.history-chart svg[aria-label*="last 7 days"]').first().waitFor();
      const [sentInWeek] = await own.query<{ n: string }>(
        `SELECT count(*) AS n FROM queuebox_outbox WHERE state = 'sent' AND sent_at >= date_trunc('hour', clock_timestamp()) - interval '167 hours'`,
      );
      assert.equal((await week.getAttribute('aria-label'))?.match(/^Outbox: ([\d,]+) sent/)?.[1].replace(/,/g, ''), sentInWeek.n);
      assert.ok((await week.locator('rect.bar-ok').count()) >= 160, 'a bar for (almost) every hour of the week');
      assert.match((await page.locator('section.history').textContent()) ?? '', /\(UTC\) on, one bar per hour/);
      await shot(page, 'status-board');

      // Sorting: click a header, again for the other way; the rows follow.
      const outboxTable = page.locator('section[aria-labelledby="overview-outbox"] table');
      const names = () => outboxTable.locator('tbody th').allTextContents();
      const header = (name: string) => outboxTable.locator('thead button.sort', { hasText: new RegExp(`^${name}$`) });
      await header('Dead').click();
      assert.equal(await outboxTable.locator('th[aria-sort="ascending"]').textContent(), 'Dead');
      assert.equal((await names()).at(-1), 'billing', 'ascending: the only destination with dead rows last');
      await header('Dead').click();
      assert.equal(await outboxTable.locator('th[aria-sort="descending"]').textContent(), 'Dead');
      assert.equal((await names())[0], 'billing', 'descending: the most dead rows first');
      await header('Destination').click();
      assert.deepEqual(await names(), ['billing', 'billing-eu-central-1', 'crm', 'ledger']);

      // The message browser: a payload path, a state, the detail of a sent message.
      await page.getByRole('link', { name: 'Messages' }).click();
      await page.getByRole('heading', { name: 'Messages' }).waitFor();
      const zone = await page.evaluate(() => Intl.DateTimeFormat().resolvedOptions().timeZone);
      await page.getByLabel(`From (${zone})`).waitFor();
      await page.getByLabel('Path (order.id)').fill('order.id');
      await page.getByLabel('equals').fill('123');
      await page.getByRole('button', { name: 'Search' }).click();
      await page.waitForURL(/path=order\.id&value=123/);
      const results = page.locator('.results tbody tr');
      // The view lists the newest messages before the search answers: wait for the answer's two rows.
      await eventually(async () => (await results.count()) === 2 && (await cells(results.first())).includes('order-123'), 'order 123');
      assert.deepEqual(
        await results.evaluateAll((rows) => rows.map((r) => [...r.querySelectorAll('td')].slice(2, 5).map((c) => c.textContent))),
        [
          ['ledger', 'order-123', 'pending'],
          ['billing', 'order-123', 'sent'],
        ],
        'order 123 in any state, newest first',
      );
      await page.getByLabel('State').selectOption('sent');
      await page.getByLabel('Path (order.id)').fill('order.id');
      await page.getByRole('button', { name: 'Search' }).click();
      await page.waitForURL(/state=sent/);
      // The URL changes before the answer comes: wait for the new table (one row) to replace the old one.
      const sentRow = page.locator('.results tbody tr').first();
      await eventually(async () => (await results.count()) === 1 && (await cells(sentRow)).includes(' sent '), 'the sent rows alone');
      assert.match(await cells(sentRow), / billing order-123 sent 1 \d{4}-\d\d-\d\d [\d:]{8}Z \d{4}-\d\d-\d\d [\d:]{8}Z —$/);
      assert.match((await page.locator('.results caption').textContent()) ?? '', /found by a bounded scan of the newest rows/);
      await shot(page, 'messages');
      await sentRow.getByRole('link').click();
      await page.getByRole('heading', { name: /^Message \d+$/ }).waitFor();
      assert.match((await page.locator('pre.code').textContent()) ?? '', /"id": 123/);
      assert.match((await page.locator('dl.fields').textContent()) ?? '', /Sent \(UTC\)\d{4}-\d\d-\d\d [\d:]{8}Z/);
      await shot(page, 'message-detail');
      // A bounded scan that stops before the end says how far it looked, and offers to look further.
      await page.goto(`${app.url}#/default/messages?component=outbox&key=nope&scan=5`);
      await page
        .getByRole('note')
        .filter({ hasText: /^Scanned up to row \d+: older rows were not looked at yet\. Look further$/ })
        .waitFor();
      await page.close();

      // 1024 x 768: the blocked view's error column and Skip head button are on screen and clickable.
      const narrow = await browser.context.newPage();
      await narrow.setViewportSize({ width: 1024, height: 768 });
      await narrow.goto(`${app.url}#/default/blocked`);
      await narrow.getByRole('heading', { name: 'Blocked keys' }).waitFor();
      const skip = narrow.getByRole('button', { name: 'Skip head' }).first();
      await skip.waitFor();
      const box = await skip.boundingBox();
      assert.ok(box && box.x >= 0 && box.x + box.width <= 1024 && box.y + box.height <= 768, `Skip head at ${JSON.stringify(box)}`);
      await skip.click({ trial: true }); // visible, stable, enabled, and receives the click (nothing covers it)
      const error = narrow.locator('td.error-cell').first();
      const errorBox = await error.boundingBox();
      assert.ok(errorBox && errorBox.x >= 0 && errorBox.x + errorBox.width <= 1024, `error cell at ${JSON.stringify(errorBox)}`);
      const uncovered = `(() => {
        const cell = document.querySelector('td.error-cell');
        const r = cell.getBoundingClientRect();
        const hit = document.elementFromPoint(r.left + 4, r.top + 8);
        return hit !== null && cell.contains(hit);
      })()`;
      assert.equal(await narrow.evaluate(uncovered), true, 'the error cell is not covered');
      assert.equal(await narrow.evaluate('document.documentElement.scrollWidth <= 1024'), true, 'no page-wide horizontal scroll');
      await narrow.screenshot({ path: join(shots, 'dashboard-blocked-1024.png') });
      await narrow.close();
    } finally {
      await app.app.close();
      await own.drop();
    }
  });

  it('pause a destination from the overview: confirmed with a reason, flagged, nothing of it sent; resumed, it is sent', async () => {
    const outbox = t.app.get(OutboxService);
    const source = t.app.get(DataSource);
    const enqueue = (n: number) => source.transaction((manager) => outbox.enqueue(manager, { destination: 'partner', payload: { n } }));
    const stateOf = async (n: number) =>
      (
        await db.query<{ state: string }>(`SELECT state FROM queuebox_outbox WHERE destination = 'partner' AND payload->>'n' = $1`, [
          String(n),
        ])
      )[0]?.state;
    await enqueue(1);
    await eventually(async () => (await stateOf(1)) === 'sent', 'the first partner message to be sent');

    const page = await browser.context.newPage();
    await page.goto(`${t.url}#/default/overview`);
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    const partner = page.getByRole('row').filter({ has: page.getByRole('rowheader', { name: /^partner/ }) });
    await partner.getByRole('button', { name: 'Pause destination partner' }).click();
    const dialog = page.getByRole('dialog', { name: 'Pause destination partner?' });
    await dialog.waitFor();
    assert.match((await dialog.textContent()) ?? '', /Every replica stops claiming its rows within one poll interval/);
    assert.equal(
      await page.evaluate('document.activeElement && document.activeElement.textContent'),
      'Cancel',
      'the safe choice has the focus',
    );
    await dialog.getByLabel('Reason (logged)').fill('partner outage, INC-311');
    await shot(page, 'pause-confirm');
    await dialog.getByRole('button', { name: 'Pause' }).click();
    await page.getByRole('status').filter({ hasText: 'Paused destination partner.' }).waitFor();
    // The status board's flag of it (dashboard.flags.ts): who paused it and why.
    await page
      .locator('li.flag[data-flag="paused:outbox:partner"]')
      .filter({ hasText: /by ada at .*: partner outage, INC-311/ })
      .waitFor();
    await partner.getByText('paused', { exact: true }).waitFor();
    assert.deepEqual(await db.query('SELECT component, name, reason, paused_by FROM queuebox_outbox_pauses'), [
      { component: 'outbox', name: 'partner', reason: 'partner outage, INC-311', paused_by: 'ada' },
    ]);

    await enqueue(2);
    await new Promise((resolve) => setTimeout(resolve, 600)); // six poll intervals
    assert.equal(await stateOf(2), 'pending', 'nothing of the paused destination is claimed');
    await page.reload();
    await page.locator('li.flag[data-flag="paused:outbox:partner"]').waitFor();
    assert.match(await cells(partner), /^partner paused 1 0 0 .* Resume$/, 'its row: the badge, the message waiting, Resume');
    await shot(page, 'overview-paused');

    await partner.getByRole('button', { name: 'Resume destination partner' }).click();
    await page.getByRole('dialog', { name: 'Resume destination partner?' }).getByRole('button', { name: 'Resume' }).click();
    await page.getByRole('status').filter({ hasText: 'Resumed destination partner.' }).waitFor();
    await eventually(async () => (await stateOf(2)) === 'sent', 'the paused message to be sent after the resume');
    await page.locator('li.flag[data-flag="paused:outbox:partner"]').waitFor({ state: 'detached' });
    await page.close();
  });

  it('read-only: the overview shows a pause but offers no pause or resume', async () => {
    await db.query(`INSERT INTO queuebox_outbox_pauses (component, name, reason, paused_by) VALUES ('outbox', 'ledger', 'audit', 'cli')`);
    try {
      const page = await browser.context.newPage();
      await page.goto(`${readOnly.url}#/default/overview`);
      await page.locator('li.flag[data-flag="paused:outbox:ledger"]').waitFor();
      assert.equal(await page.getByRole('button', { name: /Pause|Resume/ }).count(), 0);
      await page.close();
    } finally {
      await db.query('DELETE FROM queuebox_outbox_pauses');
    }
  });

  it('a dashboard without a guard (and without public: true) refuses to start', () => {
    assert.throws(
      () => QueueBoxDashboardModule.forRoot({ readOnly: true }),
      (error: unknown) => error instanceof QueueBoxConfigError && /refuses to start without a guard/.test(error.message),
    );
  });
});
