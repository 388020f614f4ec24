import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { PrometheusModule } from '@willsoto/nestjs-prometheus';
import { register } from 'prom-client';
import type { DataSource } from 'typeorm';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import { QueueBoxPrometheusModule } from '../../lib/prometheus';
import { RecordingLogger } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';
import { countStatements } from '../support/statements';

// `queuebox_paused{component,name,queuebox}` (issue 40): 1 per paused destination or source, 0
// once resumed, read from the pauses the claims read (`ClaimPauses`): no query of its own while the
// workers read them within the poll interval.

/** Long enough that ten scrapes fit well within one interval on a busy machine. */
const POLL_MS = 3000;

/** The value of one series, or undefined when the registry does not expose it. */
async function series(name: string): Promise<number | undefined> {
  const line = (await register.metrics()).split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

describeWithDatabase('Prometheus: the paused gauge', (db) => {
  let app: Awaited<ReturnType<typeof NestFactory.createApplicationContext>>;
  before(async () => {
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, logging: false }),
        PrometheusModule.register({ defaultMetrics: { enabled: false } }),
        QueueBoxModule.forRoot({ workers: false, outbox: { publisher: new RecordingPublisher() } }),
        QueueBoxPrometheusModule,
      ],
    })
    class MetricsApp {}
    app = await NestFactory.createApplicationContext(MetricsApp, { logger: new RecordingLogger(), abortOnError: false });
  });
  after(async () => {
    await app?.close();
    // prom-client's registry is process-wide: the next app registers its own gauges.
    register.clear();
  });

  it('is 1 for each paused destination and source, 0 once resumed, and has no series for names never paused', async () => {
    const admin = app.get(QueueBoxAdmin);
    assert.equal(await series('queuebox_paused{component="outbox",name="billing",queuebox="default"}'), undefined);
    await admin.pause({ component: 'outbox', name: 'billing', actor: 'test' });
    await admin.pause({ component: 'inbox', name: 'orders', actor: 'test' });
    assert.equal(await series('queuebox_paused{component="outbox",name="billing",queuebox="default"}'), 1);
    assert.equal(await series('queuebox_paused{component="inbox",name="orders",queuebox="default"}'), 1);
    await admin.resume({ component: 'outbox', name: 'billing', actor: 'test' });
    assert.equal(await series('queuebox_paused{component="outbox",name="billing",queuebox="default"}'), 0, 'resumed: 0, not gone');
    assert.equal(await series('queuebox_paused{component="inbox",name="orders",queuebox="default"}'), 1);
    assert.equal(await series('queuebox_paused{component="outbox",name="crm",queuebox="default"}'), undefined);
  });
});

describeWithDatabase('Prometheus: the paused gauge of a QueueBox whose workers run', (db) => {
  let app: Awaited<ReturnType<typeof NestFactory.createApplicationContext>>;
  let reads: { readonly count: number };
  before(async () => {
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: db.url, logging: false }),
        PrometheusModule.register({ defaultMetrics: { enabled: false } }),
        QueueBoxModule.forRoot({
          outbox: { publisher: new RecordingPublisher(), pollIntervalMs: POLL_MS },
          inbox: { relay: { pollIntervalMs: POLL_MS } },
          pull: { pollIntervalMs: POLL_MS },
        }),
        QueueBoxPrometheusModule,
      ],
    })
    class MetricsApp {}
    app = await NestFactory.createApplicationContext(MetricsApp, { logger: new RecordingLogger(), abortOnError: false });
    reads = countStatements(app.get<DataSource>(getDataSourceToken()), /FROM\s+\S*queuebox_outbox_pauses/);
  });
  after(async () => {
    await app?.close();
    // prom-client's registry is process-wide: the next app registers its own gauges.
    register.clear();
  });

  it('shows a pause written elsewhere (another replica, the CLI) within one poll interval', async () => {
    await db.query(`INSERT INTO queuebox_outbox_pauses (component, name, paused_by, paused_at) VALUES ('outbox', 'crm', 'cli', now())`);
    const writtenAt = performance.now();
    await eventually(async () => (await series('queuebox_paused{component="outbox",name="crm",queuebox="default"}')) === 1, 'the pause');
    const seenAfter = performance.now() - writtenAt;
    // One poll interval, plus the scrapes' own time on a busy machine.
    assert.ok(seenAfter < POLL_MS + 1500, `seen after ${seenAfter} ms`);
  });

  it('reads the pauses its workers read: scrapes within a poll interval send no query of the pauses table', async () => {
    // Just after a worker's read of the pauses (in flight or done), the next ones are within its poll interval.
    const before = reads.count;
    await eventually(async () => reads.count > before, "a worker's read of the pauses");
    const afterWorker = reads.count;
    const startedAt = performance.now();
    for (let scrape = 0; scrape < 10; scrape++) {
      assert.equal(await series('queuebox_paused{component="outbox",name="crm",queuebox="default"}'), 1);
    }
    const elapsed = performance.now() - startedAt;
    assert.ok(elapsed < POLL_MS / 2, `the scrapes took ${elapsed} ms, too long to be within one poll interval`);
    assert.equal(reads.count - afterWorker, 0, 'ten scrapes: no read of the pauses table of their own');
  });
});
