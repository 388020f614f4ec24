import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { QueueBoxHealthIndicator, QueueBoxHealthModule } from '../../lib/terminus';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { gate, RecordingPublisher } from '../support/recording-publisher';
import { TcpProxy } from '../support/tcp-proxy';

type Details = {
  status: string;
  problems: string[];
  lagSeconds?: number | null;
  lagWhere?: string;
  draining: boolean;
  workers: { name: string; running: boolean; lastCycleSecondsAgo: number | null; waitingForDatabase: boolean }[];
};
const detailsOf = (result: Record<string, unknown>, key = 'queuebox') => result[key] as Details;

describeWithDatabase('QueueBoxHealthIndicator (Terminus)', (db) => {
  let proxy: TcpProxy;
  let t: TestApp;
  let indicator: QueueBoxHealthIndicator;
  let dataSource: DataSource;
  const publisher = new RecordingPublisher();

  before(async () => {
    const url = new URL(db.url);
    proxy = new TcpProxy({ host: url.hostname, port: Number(url.port || 5432) });
    await proxy.open();
    url.host = `127.0.0.1:${proxy.port}`;
    t = await createTestApp(
      url.toString(),
      { workers: { outbox: true }, outbox: { publisher, pollIntervalMs: 50, batchSize: 1, concurrency: 1 } },
      { imports: [QueueBoxHealthModule] },
    );
    indicator = t.get(QueueBoxHealthIndicator);
    dataSource = t.app.get(getDataSourceToken());
  });
  after(async () => {
    await t?.app.close().catch(() => undefined);
    await proxy?.cut().catch(() => undefined);
  });

  it('is up with the lag, workers and notifications in its details', async () => {
    const result = detailsOf(await indicator.isHealthy());
    assert.equal(result.status, 'up');
    assert.deepEqual(result.problems, []);
    assert.equal(result.lagSeconds, null);
    const readiness = detailsOf(await indicator.readiness(), 'queuebox_readiness');
    assert.equal(readiness.status, 'up');
  });

  it('gives readiness, liveness and the full check distinct default keys, so one Terminus check can combine them', async () => {
    assert.deepEqual(Object.keys(await indicator.isHealthy()), ['queuebox']);
    assert.deepEqual(Object.keys(await indicator.readiness()), ['queuebox_readiness']);
    assert.deepEqual(Object.keys(await indicator.liveness()), ['queuebox_liveness']);
    assert.deepEqual(Object.keys(await indicator.liveness('custom')), ['custom']);
  });

  it('lists only the worker loops this app runs: no inbox relay in an app without an inbox', async () => {
    const details = detailsOf(await indicator.isHealthy());
    assert.deepEqual(
      details.workers.map((worker) => [worker.name, worker.running]),
      [['outbox poller', true]],
    );
  });

  it('is down while the oldest due message waits longer than maxLagMs, and up once it left', async () => {
    const held = gate();
    publisher.behaviour = () => held.promise;
    const { id } = await dataSource.transaction((manager) =>
      t.get(OutboxService).enqueue(manager, { destination: 'billing', key: 'k', payload: {} }),
    );
    await publisher.waitForCalls(1); // the head is processing; the next message of the key waits behind it
    await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'billing', key: 'k', payload: {} }));
    await db.query(`UPDATE queuebox_outbox SET created_at = created_at - interval '10 minutes' WHERE id > $1`, [id]);
    const lagging = detailsOf(await indicator.isHealthy('queuebox', { maxLagMs: 60_000, maxCycleAgeMs: false }));
    assert.equal(lagging.status, 'down');
    assert.equal(lagging.lagWhere, 'outbox:billing');
    assert.ok((lagging.lagSeconds ?? 0) >= 600);
    assert.match(lagging.problems.join('\n'), /outbox:billing has waited/);
    held.open();
    await eventually(async () => publisher.delivered.length === 2, 'both messages published');
    assert.equal(detailsOf(await indicator.isHealthy('queuebox', { maxLagMs: 60_000 })).status, 'up');
    publisher.behaviour = () => undefined;
  });

  it('liveness is down while a worker loop completes no cycle within maxCycleAgeMs (stuck publish), up again after', async () => {
    const held = gate();
    publisher.behaviour = () => held.promise;
    const calls = publisher.calls.length;
    await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'billing', payload: {} }));
    await publisher.waitForCalls(calls + 1);
    await eventually(
      async () => detailsOf(await indicator.liveness('queuebox', { maxCycleAgeMs: 200 })).status === 'down',
      'liveness down',
    );
    const stuck = detailsOf(await indicator.liveness('queuebox', { maxCycleAgeMs: 200 }));
    assert.match(stuck.problems.join('\n'), /outbox poller has not completed a claim cycle/);
    held.open();
    await eventually(async () => detailsOf(await indicator.liveness('queuebox', { maxCycleAgeMs: 200 })).status === 'up', 'liveness up');
    publisher.behaviour = () => undefined;
  });

  it('readiness is down while the database is unreachable, up again when it is back', async () => {
    const port = proxy.port;
    await proxy.cut();
    const down = detailsOf(await indicator.readiness('queuebox', { timeoutMs: 2000 }));
    assert.equal(down.status, 'down');
    assert.match(down.problems.join('\n'), /database does not answer/);
    proxy.port = port;
    await proxy.open();
    await eventually(async () => detailsOf(await indicator.readiness('queuebox', { timeoutMs: 2000 })).status === 'up', 'readiness up');
  });

  it('liveness stays up while the database is unreachable (the loops wait for it), readiness is down, and publishing resumes once it is back', async () => {
    const port = proxy.port;
    const poller = t.get(OutboxPoller);
    await proxy.cut();
    await eventually(async () => poller.status.waitingForDatabase, 'the poller waiting for the database after a failed claim');
    // The last claim cycle grows older than maxCycleAgeMs, and the loop is still alive.
    await eventually(async () => {
      const live = detailsOf(await indicator.liveness('queuebox', { maxCycleAgeMs: 100 }));
      assert.equal(live.status, 'up', live.problems.join('\n'));
      const worker = live.workers.find((w) => w.name === 'outbox poller');
      assert.equal(worker?.waitingForDatabase, true);
      return (worker?.lastCycleSecondsAgo ?? 0) * 1000 > 300;
    }, 'the last claim cycle older than maxCycleAgeMs');
    const ready = detailsOf(await indicator.readiness('queuebox', { timeoutMs: 2000 }));
    assert.equal(ready.status, 'down');
    assert.match(ready.problems.join('\n'), /database does not answer/);
    // Written behind QueueBox's back (no NOTIFY, no wake-up from an enqueue): the loop finds it when it claims again.
    const calls = publisher.calls.length;
    await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload) VALUES (gen_random_uuid(), 'billing', '{}')`);
    proxy.port = port;
    await proxy.open();
    await publisher.waitForCalls(calls + 1);
    assert.equal(poller.status.waitingForDatabase, false);
    assert.ok(t.logger.has('log', 'claims work again'));
  });

  it('readiness is down while the application drains for shutdown', async () => {
    // Earlier tests' messages finish first, so the one held below is the only publish in flight.
    await eventually(async () => {
      const [{ unfinished }] = await db.query<{ unfinished: number }>(
        "SELECT count(*)::int AS unfinished FROM queuebox_outbox WHERE state IN ('pending', 'processing')",
      );
      return unfinished === 0 && t.get(OutboxPoller).inFlightCount === 0;
    }, 'earlier messages published');
    const held = gate();
    publisher.behaviour = () => held.promise;
    const calls = publisher.calls.length;
    await dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'billing', payload: {} }));
    await publisher.waitForCalls(calls + 1);
    assert.equal(t.get(OutboxPoller).inFlightCount, 1);
    const closing = t.app.close(); // waits for the held publish (shutdownTimeoutMs)
    await eventually(async () => detailsOf(await indicator.readiness('queuebox')).status === 'down', 'readiness down while draining');
    const draining = detailsOf(await indicator.readiness('queuebox'));
    assert.equal(draining.draining, true);
    assert.match(draining.problems.join('\n'), /shutting down/);
    held.open();
    await closing;
  });
});
