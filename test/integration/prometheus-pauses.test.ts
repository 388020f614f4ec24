import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { PrometheusModule } from '@willsoto/nestjs-prometheus';
import { register } from 'prom-client';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import { QueueBoxPrometheusModule } from '../../lib/prometheus';
import { RecordingLogger } from '../support/app';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

// `queuebox_paused{component,name,queuebox}` (issue 40): 1 per paused destination or source, 0
// once resumed, read from the pauses table at each scrape.

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
