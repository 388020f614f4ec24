import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { PrometheusModule } from '@willsoto/nestjs-prometheus';
import { register } from 'prom-client';
import type { DatabaseWarning } from '../../lib/health/database-doctor';
import { QueueBoxDoctor } from '../../lib/health/queuebox.doctor';
import { WorkNotifications } from '../../lib/module/queuebox.notifications';
import { QueueBoxPrometheusModule } from '../../lib/prometheus';
import { QueueBoxHealthIndicator, QueueBoxHealthModule } from '../../lib/terminus';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

// The database warnings in the app: QueueBoxDoctor examines every doctor.intervalMs; health is
// degraded with the reason (down, liveness and readiness included, only for a fatal warning);
// queuebox_database_warnings{code} counts them; each is logged once when it appears and clears;
// LISTEN unavailable is found while the notification connection is down.

type Details = { status: string; problems: string[]; degraded?: boolean; warnings?: DatabaseWarning[] };
const detailsOf = (result: Record<string, unknown>, key: string) => result[key] as Details;

describeWithDatabase('database warnings in the app: health, metrics, logs, LISTEN', (db) => {
  let t: TestApp;
  let doctor: QueueBoxDoctor;
  let indicator: QueueBoxHealthIndicator;

  before(async () => {
    register.clear();
    t = await createTestApp(
      db.url,
      { outbox: { publisher: new RecordingPublisher(), pollIntervalMs: 50 }, doctor: { intervalMs: 100 } },
      { imports: [QueueBoxHealthModule, PrometheusModule.register({ defaultMetrics: { enabled: false } }), QueueBoxPrometheusModule] },
    );
    doctor = t.get(QueueBoxDoctor);
    indicator = t.get(QueueBoxHealthIndicator);
  });
  after(async () => {
    await t?.app.close();
    register.clear();
  });

  const gauge = async (code: string) => {
    const series = `queuebox_database_warnings{code="${code}",queuebox="default"}`;
    const line = (await register.metrics()).split('\n').find((l) => l.startsWith(`${series} `));
    return line === undefined ? undefined : Number(line.slice(series.length + 1));
  };
  const has = (code: string, subject?: string) =>
    (doctor.latest?.warnings ?? []).some((w) => w.code === code && (subject === undefined || w.subject === subject));

  it('examines every doctor.intervalMs; a warning makes health degraded (up), counts in its gauge, is logged once, and clears', async () => {
    await eventually(async () => doctor.latest !== undefined, 'the first examination');
    // Every code has a series from the first examination, 0 when absent.
    assert.equal(await gauge('index_invalid'), 0);
    assert.equal(await gauge('listen_unavailable'), 0);
    const before = (await gauge('autovacuum_off')) ?? 0;

    await db.query('ALTER TABLE queuebox_outbox SET (autovacuum_enabled = false)');
    await eventually(async () => has('autovacuum_off', 'queuebox_outbox'), 'the next examination to find it');
    assert.equal(await gauge('autovacuum_off'), before + 1);
    const full = detailsOf(await indicator.isHealthy('queuebox'), 'queuebox');
    assert.equal(full.status, 'up');
    assert.equal(full.degraded, true);
    assert.ok(full.warnings?.some((w) => w.code === 'autovacuum_off' && /Autovacuum is off for queuebox_outbox/.test(w.message)));
    // Liveness and readiness know only fatal warnings.
    const live = detailsOf(await indicator.liveness(), 'queuebox_liveness');
    assert.deepEqual([live.status, live.degraded, live.warnings], ['up', false, []]);
    assert.equal(detailsOf(await indicator.readiness(), 'queuebox_readiness').status, 'up');
    assert.equal(
      t.logger.lines.filter((l) => l.message.includes('Database warning autovacuum_off: Autovacuum is off for queuebox_outbox')).length,
      1,
    );
    assert.equal(t.logger.lines.find((l) => l.message.includes('Autovacuum is off for queuebox_outbox'))?.context, 'QueueBox:Doctor');

    await db.query('ALTER TABLE queuebox_outbox RESET (autovacuum_enabled)');
    await eventually(async () => !has('autovacuum_off', 'queuebox_outbox'), 'the warning to clear');
    assert.equal(await gauge('autovacuum_off'), before);
    assert.ok(t.logger.has('log', 'Database warning autovacuum_off (queuebox_outbox) cleared.'));
  });

  it('a fatal warning (a required migration not recorded) makes health down, liveness and readiness included; repaired, up again', async () => {
    await db.query(`DELETE FROM migrations WHERE name = 'QueueBoxRenewals1796515200000'`);
    try {
      await eventually(async () => has('migrations_behind'), 'the examination to find it');
      for (const [method, key] of [
        ['isHealthy', 'queuebox'],
        ['liveness', 'queuebox_liveness'],
        ['readiness', 'queuebox_readiness'],
      ] as const) {
        const details = detailsOf(await indicator[method](), key);
        assert.equal(details.status, 'down', method);
        assert.ok(
          details.problems.some((p) => /lacks QueueBox migration QueueBoxRenewals1796515200000/.test(p)),
          `${method}: ${details.problems}`,
        );
      }
      assert.equal(await gauge('migrations_behind'), 1);
    } finally {
      await db.query(`INSERT INTO migrations ("timestamp", name) VALUES (1796515200000, 'QueueBoxRenewals1796515200000')`);
    }
    await eventually(async () => !has('migrations_behind'), 'the warning to clear');
    assert.equal(detailsOf(await indicator.liveness(), 'queuebox_liveness').status, 'up');
  });

  it('LISTEN unavailable while the notification connection is down; gone once it is back', async () => {
    const notifications = t.get(WorkNotifications);
    // No periodic examination from here on: one started before the drop (every 100 ms here) would be
    // the report check() hands back, read while LISTEN still worked (seen under load).
    doctor.beforeApplicationShutdown();
    await doctor.check();
    await eventually(async () => notifications.listening, 'the listener');
    await db.query(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()",
    );
    await eventually(async () => !notifications.listening, 'the listener to notice', 10_000, 5);
    const down = await doctor.check();
    assert.ok(
      down.warnings.some((w) => w.code === 'listen_unavailable' && /LISTEN is unavailable/.test(w.message)),
      JSON.stringify(down.warnings.map((w) => w.code)),
    );
    await eventually(async () => notifications.listening, 'the listener to reconnect', 10_000);
    assert.ok(!(await doctor.check()).warnings.some((w) => w.code === 'listen_unavailable'));
  });
});
