// The dashboard of an app that deletes sent rows (`outbox.sentRows: 'delete'`, issue 36) in a real
// browser (Debian's chromium through playwright-core): the overview says "sent not kept" for an
// outbox destination instead of a count of zero, and the history (its hint and the outbox chart's
// caption) says why it draws no sent bars.
// Screenshot dashboard-sent-rows.png goes where dashboard-browser.test.ts puts its own.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { PermanentPublishError } from '../../lib/errors/queuebox.errors';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { chromiumMissing, launchChromium, screenshotsFolder } from '../support/chromium';
import { createDashboardApp, type DashboardTestApp, OperatorGuard } from '../support/dashboard-app';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

const skip = chromiumMissing("Dashboard browser test of outbox.sentRows 'delete'");

describeWithDatabase('queuebox/dashboard in Chromium: an app that deletes sent rows', { skip }, (db) => {
  let t: DashboardTestApp;
  let browser: Awaited<ReturnType<typeof launchChromium>>;
  const publisher = new RecordingPublisher((message) => {
    if ((message.payload as { refuse?: boolean }).refuse) throw new PermanentPublishError('the partner refuses it');
  });

  before(async () => {
    t = await createDashboardApp(
      db.url,
      { guard: OperatorGuard },
      { queuebox: { workers: false, outbox: { publisher, sentRows: 'delete' } } },
    );
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await t?.app.close();
  });

  it('the overview shows "sent not kept" for the outbox and the history says why; the inbox is drawn as before', async () => {
    const dataSource = t.app.get<DataSource>(getDataSourceToken());
    await dataSource.transaction(async (manager) => {
      const outbox = t.app.get(OutboxService);
      for (let n = 0; n < 3; n++) await outbox.enqueue(manager, { destination: 'billing', payload: { n } });
      await outbox.enqueue(manager, { destination: 'billing', payload: { refuse: true } });
    });
    while ((await t.app.get(OutboxPoller).runOnce()) > 0);
    assert.equal(publisher.delivered.length, 3);
    assert.deepEqual(
      await db.query<{ state: string }>('SELECT state FROM queuebox_outbox'),
      [{ state: 'dead' }],
      'the sent rows are gone, the dead one stays',
    );

    const page = await browser.context.newPage();
    await page.goto(`${t.url}#/default/overview`);
    const billing = page.locator('tr').filter({ has: page.locator('th', { hasText: /^billing/ }) });
    await billing.waitFor();
    const totals = billing.locator('.totals');
    assert.equal(await totals.textContent(), 'sent not kept / 1');
    assert.match((await totals.getAttribute('title')) ?? '', /outbox\.sentRows: 'delete'/);

    const caption = page.locator('#history-sent-not-kept');
    await caption.waitFor();
    assert.match(
      (await caption.textContent()) ?? '',
      /^Outbox: 1 dead\. Sent rows are deleted when sent \(outbox\.sentRows: 'delete'\): count sends with queuebox_outbox_messages_sent_total\.$/,
    );
    assert.match(
      (await page
        .locator('figcaption')
        .filter({ hasText: /^Inbox:/ })
        .textContent()) ?? '',
      /^Inbox: 0 processed \/ 0 dead$/,
    );
    assert.match(
      (await page
        .locator('p.hint')
        .filter({ hasText: /one bar per hour/ })
        .textContent()) ?? '',
      /^By processed_at and the dead rows' last attempt, .*; sent outbox rows are deleted when sent, and rows retention deleted are not counted\.$/,
    );
    await page.screenshot({ path: join(screenshotsFolder(), 'dashboard-sent-rows.png'), fullPage: true });
    await page.close();
  });
});
