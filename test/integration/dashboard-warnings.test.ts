import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { DataSource } from 'typeorm';
import { createQueueBoxAdmin } from '../../lib/admin/create-queuebox-admin';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { createDashboardApp, type DashboardTestApp, OperatorGuard } from '../support/dashboard-app';
import { createTestDatabase, describeWithDatabase, type TestDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

// The dashboard's database warnings (GET api/:instance/warnings): the app QueueBox's doctor, the
// last examination or a new one on ?refresh=1; behind the guard; served in read-only mode (it
// reads only); an admin made outside the app's QueueBoxes has none, and says why.

const OPERATOR = { 'x-operator': 'alice' };
type Warnings = {
  available: boolean;
  reason?: string;
  checkedAt?: string;
  warnings: { code: string; severity: string; fatal: boolean; subject: string | null; message: string; repair: string | null }[];
};

describeWithDatabase('queuebox/dashboard: database warnings', (db) => {
  let other: TestDatabase;
  let otherSource: DataSource;
  let t: DashboardTestApp;
  let readOnly: DashboardTestApp;
  const queuebox = { workers: false, outbox: { publisher: new RecordingPublisher() }, doctor: { intervalMs: 0 } };

  before(async () => {
    other = await createTestDatabase();
    otherSource = await new DataSource({ type: 'postgres', url: other.url, logging: false }).initialize();
    t = await createDashboardApp(
      db.url,
      {
        guard: OperatorGuard,
        instances: [
          { name: 'orders', admin: QueueBoxAdmin },
          { name: 'ledger', admin: await createQueueBoxAdmin(otherSource) },
        ],
      },
      { queuebox },
    );
    readOnly = await createDashboardApp(db.url, { guard: OperatorGuard, readOnly: true }, { queuebox });
  });
  after(async () => {
    await t?.app.close();
    await readOnly?.app.close();
    await otherSource?.destroy();
    await other?.drop();
  });

  const warnings = async (app: DashboardTestApp, instance: string, query = '') => {
    const response = await fetch(`${app.url}api/${instance}/warnings${query}`, { headers: OPERATOR });
    assert.equal(response.status, 200);
    return (await response.json()) as Warnings;
  };
  const ours = (w: Warnings) => w.warnings.filter((warning) => warning.subject === 'queuebox_outbox');

  it('runs the guard', async () => {
    assert.equal((await fetch(`${t.url}api/orders/warnings`)).status, 403);
  });

  it("the app QueueBox's warnings with their repairs: the last examination, a new one on ?refresh=1", async () => {
    await db.query('ALTER TABLE queuebox_outbox SET (autovacuum_enabled = false)');
    const first = await warnings(t, 'orders'); // none examined yet (doctor.intervalMs 0): examined now
    assert.equal(first.available, true);
    assert.deepEqual(ours(first), [
      {
        code: 'autovacuum_off',
        severity: 'warning',
        fatal: false,
        subject: 'queuebox_outbox',
        message: ours(first)[0]?.message,
        repair: 'ALTER TABLE "queuebox_outbox" RESET (autovacuum_enabled)',
      },
    ]);
    await db.query('ALTER TABLE queuebox_outbox RESET (autovacuum_enabled)');
    const cached = await warnings(t, 'orders');
    assert.equal(cached.checkedAt, first.checkedAt, 'the last examination, no new query');
    assert.equal(ours(cached).length, 1);
    assert.deepEqual(ours(await warnings(t, 'orders', '?refresh=1')), []);
  });

  it('the overview flags the warnings (a flag source of the status board): critical with an error, linking to the Database view', async () => {
    const flagsOf = async (instance: string) => {
      const response = await fetch(`${t.url}api/${instance}/overview`, { headers: OPERATOR });
      assert.equal(response.status, 200);
      return ((await response.json()) as { flags: { id: string; level: string; text: string; view?: string }[] }).flags;
    };
    await db.query('ALTER TABLE queuebox_outbox SET (autovacuum_enabled = false)');
    await db.query('DROP INDEX queuebox_inbox_dead_idx');
    try {
      await warnings(t, 'orders', '?refresh=1');
      const [flag] = (await flagsOf('orders')).filter((f) => f.id === 'database');
      assert.equal(flag?.level, 'critical');
      assert.equal(flag?.view, 'warnings');
      assert.match(
        flag?.text ?? '',
        /^The database has 1 error and \d+ warnings? \(index_missing, autovacuum_off[^)]*\); each names its repair\.$/,
      );
      assert.deepEqual(
        (await flagsOf('ledger')).filter((f) => f.id === 'database'),
        [],
        'an admin of its own has no doctor here, so no flag',
      );
    } finally {
      await db.query('ALTER TABLE queuebox_outbox RESET (autovacuum_enabled)');
      await db.query(`CREATE INDEX IF NOT EXISTS queuebox_inbox_dead_idx ON queuebox_inbox (source, id) WHERE state = 'dead'`);
      await warnings(t, 'orders', '?refresh=1');
    }
  });

  it('an admin of its own (createQueueBoxAdmin) has no doctor in this app, and says so', async () => {
    const ledger = await warnings(t, 'ledger');
    assert.equal(ledger.available, false);
    assert.match(ledger.reason ?? '', /queuebox doctor/);
  });

  it('read-only mode serves them (a read)', async () => {
    assert.equal((await warnings(readOnly, 'default')).available, true);
  });
});
