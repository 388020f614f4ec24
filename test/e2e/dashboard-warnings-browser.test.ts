// The dashboard's database warnings in a real browser (Debian's chromium through playwright-core),
// as dashboard-browser.test.ts drives the other views: the overview's flag, the Database view with
// each warning's repair, and "Check now" after the repairs ran. Screenshots
// (dashboard-warnings-flag.png, dashboard-warnings.png) go where dashboard-browser.test.ts puts its
// own: .build/dashboard-screenshots, or QUEUEBOX_DASHBOARD_SCREENSHOTS (docs/images).
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, it } from 'node:test';
import { chromiumMissing, launchChromium, screenshotsFolder } from '../support/chromium';
import { createDashboardApp, type DashboardTestApp, OperatorGuard } from '../support/dashboard-app';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

const skip = chromiumMissing('Dashboard warnings browser test');

describeWithDatabase('queuebox/dashboard in Chromium: database warnings', { skip }, (db) => {
  let t: DashboardTestApp;
  let browser: Awaited<ReturnType<typeof launchChromium>>;
  let shots: string;

  before(async () => {
    shots = screenshotsFolder();
    t = await createDashboardApp(
      db.url,
      { guard: OperatorGuard },
      { queuebox: { workers: false, outbox: { publisher: new RecordingPublisher() }, doctor: { intervalMs: 0 } } },
    );
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
    await t?.app.close();
  });

  it('the overview flags the warnings; the Database view shows each with its repair; after the repairs, Check now clears them', async () => {
    await db.query('ALTER TABLE queuebox_outbox SET (autovacuum_enabled = false)');
    await db.query('DROP INDEX queuebox_inbox_dead_idx');
    const page = await browser.context.newPage();
    await page.goto(`${t.url}#/default/overview`);
    // The doctor's flag is one of the status board's (dashboard.flags.ts): critical with an error.
    const flag = page.locator('li.flag[data-flag="database"]');
    await flag.waitFor();
    assert.match(
      (await flag.textContent()) ?? '',
      /^Critical: The database has 1 error and \d+ warnings? \(index_missing, autovacuum_off[^)]*\); each names its repair\. Show$/,
    );
    assert.equal(await flag.getAttribute('class'), 'flag critical');
    await page.screenshot({ path: join(shots, 'dashboard-warnings-flag.png'), fullPage: true });

    await flag.getByRole('link', { name: 'Show' }).click();
    await page.getByRole('heading', { name: 'Database warnings' }).waitFor();
    const item = (subject: string) => page.locator('li.db-warning').filter({ hasText: subject });
    await item('queuebox_inbox_dead_idx').waitFor();
    assert.match(
      (await item('queuebox_inbox_dead_idx').textContent()) ?? '',
      /^error index_missing queuebox_inbox_dead_idx.*Repair: CREATE INDEX "queuebox_inbox_dead_idx" ON "queuebox_inbox" \(source, id\) WHERE state = 'dead'$/,
    );
    assert.match(
      (await item('queuebox_outbox').textContent()) ?? '',
      /^warning autovacuum_off queuebox_outbox.*Repair: ALTER TABLE "queuebox_outbox" RESET \(autovacuum_enabled\)$/,
    );
    assert.equal(await page.getByRole('link', { name: 'Database' }).getAttribute('aria-current'), 'page');
    await page.screenshot({ path: join(shots, 'dashboard-warnings.png'), fullPage: true });

    // The operator runs the repairs the page shows (as printed), then asks for a new examination.
    for (const repair of await page.locator('li.db-warning .repair code').allTextContents()) {
      if (repair.includes('queuebox_')) await db.query(repair);
    }
    await page.getByRole('button', { name: 'Check now' }).click();
    await page.getByRole('status').filter({ hasText: 'Examined the database now.' }).waitFor();
    assert.equal(await item('queuebox_inbox_dead_idx').count(), 0);
    assert.equal(await item('queuebox_outbox').count(), 0);

    await page.getByRole('link', { name: 'Overview' }).click();
    await page.getByRole('heading', { name: 'Overview' }).waitFor();
    // What is left (the test server may run with autovacuum off server-wide) names no QueueBox table.
    await page.locator('#flags').waitFor();
    await page.waitForTimeout(200);
    assert.doesNotMatch((await page.locator('#flags').textContent()) ?? '', /index_missing/);
    await page.close();
  });
});
