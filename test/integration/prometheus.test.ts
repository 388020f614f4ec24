import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { PrometheusModule } from '@willsoto/nestjs-prometheus';
import { register } from 'prom-client';
import type { DataSource } from 'typeorm';
import { PermanentPublishError } from '../../lib/errors/queuebox.errors';
import { InboxRelay } from '../../lib/inbox/inbox.relay';
import { InboxService } from '../../lib/inbox/inbox.service';
import { LeaseService } from '../../lib/lease/lease.service';
import { QueueBoxModule } from '../../lib/module/queuebox.module';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { QueueBoxPrometheusModule } from '../../lib/prometheus';
import { HttpPublisher } from '../../lib/publishers/http.publisher';
import { PullWorker } from '../../lib/pull/pull.worker';
import { PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import type { QueueBoxModuleOptions } from '../../lib/types/options';
import { createTestApp, RecordingLogger } from '../support/app';
import { claimsOf } from '../support/claims';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';
import { countStatements } from '../support/statements';

let handlerFails = false;

@Injectable()
class LedgerHandler {
  @PullHandler('ledger', { leaseMs: 10_000, maxAttempts: 2, backoff: () => 0 })
  async handle(_message: InboxMessage) {
    if (handlerFails) throw new Error('ledger is closed');
  }
}

/** The value of one series in the registry's text exposition, e.g. `name{a="b"}`; 0 when absent. */
async function scrape(series: string): Promise<number> {
  const text = await register.metrics();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

/** The value of one series, or undefined when the registry does not expose it. */
async function series(name: string): Promise<number | undefined> {
  const line = (await register.metrics()).split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describeWithDatabase('Prometheus metrics (queuebox/prometheus)', (db) => {
  let app: Awaited<ReturnType<typeof NestFactory.createApplicationContext>>;
  let dataSource: DataSource;
  const publisher = new RecordingPublisher();

  after(async () => {
    await app?.close();
  });

  it('registers nothing when the app does not import QueueBoxPrometheusModule', async () => {
    const plain = await createTestApp(db.url, { workers: false, outbox: { publisher } });
    try {
      await plain
        .get(OutboxService)
        .enqueue(
          plain.app.get<DataSource>(getDataSourceToken()).manager,
          { destination: 'billing', payload: {} },
          { allowAutocommit: true },
        );
      await plain.get(OutboxPoller).runOnce();
      assert.doesNotMatch(await register.metrics(), /queuebox_/);
    } finally {
      await plain.app.close();
      await db.query('TRUNCATE queuebox_outbox');
    }
  });

  it('a fresh replica shows a gauge of 0 for every configured destination and source before any message, so absent() stays quiet', async () => {
    await db.query('TRUNCATE queuebox_outbox, queuebox_inbox');
    const fresh = async (outbox: QueueBoxModuleOptions['outbox']) => {
      @Module({
        imports: [
          TypeOrmModule.forRoot({ type: 'postgres', url: db.url, logging: false }),
          PrometheusModule.register({ defaultMetrics: { enabled: false } }),
          QueueBoxModule.forRoot({
            workers: false,
            outbox,
            inbox: { relay: { routes: { orders: (m) => ({ destination: 'x', payload: m.payload }) } } },
          }),
          QueueBoxPrometheusModule,
        ],
        providers: [LedgerHandler],
      })
      class FreshApp {}
      return NestFactory.createApplicationContext(FreshApp, { logger: new RecordingLogger(), abortOnError: false });
    };
    const gauges = async () =>
      (await register.metrics())
        .split('\n')
        .filter((line) => line.startsWith('queuebox_outbox_pending_messages{') || line.startsWith('queuebox_inbox_pending_messages{'))
        .sort();
    // HttpPublisher's destinations object, and a rate-limited destination.
    const http = await fresh({
      publisher: new HttpPublisher({ destinations: { billing: 'http://127.0.0.1:9/b', shipping: 'http://127.0.0.1:9/s' } }),
      rateLimits: { audit: { limit: 5 } },
    });
    try {
      assert.deepEqual(await gauges(), [
        'queuebox_inbox_pending_messages{source="ledger",queuebox="default"} 0',
        'queuebox_inbox_pending_messages{source="orders",queuebox="default"} 0',
        'queuebox_outbox_pending_messages{destination="audit",queuebox="default"} 0',
        'queuebox_outbox_pending_messages{destination="billing",queuebox="default"} 0',
        'queuebox_outbox_pending_messages{destination="shipping",queuebox="default"} 0',
      ]);
    } finally {
      await http.close();
      register.clear();
    }
    // Several publishers routed by destination name: each name is a destination.
    const named = await fresh({ publishers: { invoices: publisher, emails: new RecordingPublisher() } });
    try {
      assert.deepEqual(
        (await gauges()).filter((line) => line.startsWith('queuebox_outbox')),
        [
          'queuebox_outbox_pending_messages{destination="emails",queuebox="default"} 0',
          'queuebox_outbox_pending_messages{destination="invoices",queuebox="default"} 0',
        ],
      );
    } finally {
      await named.close();
      register.clear();
    }
  });

  describe('with QueueBoxPrometheusModule', () => {
    before(async () => {
      @Module({
        imports: [
          TypeOrmModule.forRoot({ type: 'postgres', url: db.url, logging: false }),
          PrometheusModule.register({ defaultMetrics: { enabled: false } }),
          QueueBoxModule.forRoot({
            workers: false,
            outbox: { publisher, maxAttempts: 2, backoff: () => 0 },
            inbox: {
              relay: {
                maxAttempts: 1,
                routes: {
                  orders: (message) => {
                    if ((message.payload as { bad?: boolean }).bad) throw new Error('no route');
                    return { destination: 'billing', payload: message.payload };
                  },
                },
              },
            },
          }),
          QueueBoxPrometheusModule,
        ],
        providers: [LedgerHandler],
      })
      class MetricsApp {}
      app = await NestFactory.createApplicationContext(MetricsApp, { logger: new RecordingLogger(), abortOnError: false });
      dataSource = app.get(getDataSourceToken());
    });

    const enqueue = (destination = 'billing', extra = {}) =>
      dataSource.transaction((manager) => app.get(OutboxService).enqueue(manager, { destination, payload: {}, ...extra }));

    it('counts published, retried and dead-lettered outbox messages, and times each publish', async () => {
      await enqueue();
      await app.get(OutboxPoller).runOnce();
      assert.equal(await scrape('queuebox_outbox_messages_published_total{destination="billing",queuebox="default"}'), 1);
      assert.equal(
        await scrape('queuebox_outbox_publish_duration_seconds_count{destination="billing",outcome="success",queuebox="default"}'),
        1,
      );

      publisher.behaviour = () => {
        throw new Error('broker down');
      };
      await enqueue('audit');
      await app.get(OutboxPoller).runOnce();
      assert.equal(await scrape('queuebox_outbox_messages_retried_total{destination="audit",queuebox="default"}'), 1);
      await app.get(OutboxPoller).runOnce();
      assert.equal(await scrape('queuebox_outbox_messages_dead_lettered_total{destination="audit",cause="failure",queuebox="default"}'), 1);
      assert.equal(
        await scrape('queuebox_outbox_publish_duration_seconds_count{destination="audit",outcome="failure",queuebox="default"}'),
        2,
      );

      publisher.behaviour = () => {
        throw new PermanentPublishError('rejected');
      };
      await enqueue('audit');
      await app.get(OutboxPoller).runOnce();
      assert.equal(await scrape('queuebox_outbox_messages_dead_lettered_total{destination="audit",cause="failure",queuebox="default"}'), 2);
      publisher.behaviour = () => undefined;
    });

    it('counts lost claims and reclaimed rows (a row dying in the reclaim step is dead-lettered, cause "reclaim")', async () => {
      await db.query('TRUNCATE queuebox_outbox');
      await enqueue('ledger-out');
      const lease = app.get(LeaseService);
      const take = claimsOf(app);
      for (let attempt = 1; attempt <= 2; attempt++) {
        const [claim] = await take.outbox.claim({ limit: 1, leaseMs: 40 });
        await sleep(80);
        if (attempt === 1) assert.equal(await lease.complete(claim), false);
        await take.outbox.reclaim({ maxAttempts: 2 });
      }
      assert.equal(await scrape('queuebox_claims_lost_total{component="outbox",queuebox="default"}'), 1);
      assert.equal(await scrape('queuebox_outbox_messages_reclaimed_total{destination="ledger-out",queuebox="default"}'), 2);
      assert.equal(
        await scrape('queuebox_outbox_messages_dead_lettered_total{destination="ledger-out",cause="reclaim",queuebox="default"}'),
        1,
      );
    });

    it('counts inbox receives and duplicates, relay and pull outcomes, and times each attempt', async () => {
      const inbox = app.get(InboxService);
      await inbox.receive({ source: 'orders', idempotencyKey: 'o-1', payload: {} });
      await inbox.receive({ source: 'orders', idempotencyKey: 'o-1', payload: {} });
      await inbox.receive({ source: 'orders', idempotencyKey: 'o-2', payload: { bad: true } });
      assert.equal(await scrape('queuebox_inbox_messages_received_total{source="orders",queuebox="default"}'), 2);
      assert.equal(await scrape('queuebox_inbox_messages_duplicates_total{source="orders",queuebox="default"}'), 1);
      await app.get(InboxRelay).runOnce();
      assert.equal(await scrape('queuebox_inbox_messages_processed_total{component="inbox",source="orders",queuebox="default"}'), 1);
      assert.equal(
        await scrape('queuebox_inbox_messages_dead_lettered_total{component="inbox",source="orders",cause="failure",queuebox="default"}'),
        1,
      );

      const [relayClaim] = await claimsOf(app).relay.claim({ sources: ['orders'], limit: 1, leaseMs: 40 });
      assert.equal(relayClaim, undefined, 'nothing left for the relay');
      await inbox.receive({ source: 'orders', idempotencyKey: 'o-3', payload: {} });
      await claimsOf(app).relay.claim({ sources: ['orders'], limit: 1, leaseMs: 40 });
      await sleep(80);
      await claimsOf(app).relay.reclaim({ sources: ['orders'], maxAttempts: 5 });
      assert.equal(await scrape('queuebox_inbox_messages_reclaimed_total{component="inbox",source="orders",queuebox="default"}'), 1);
      await app.get(InboxRelay).runOnce();

      await inbox.receive({ source: 'ledger', idempotencyKey: 'l-1', payload: {} });
      await app.get(PullWorker).runOnce('ledger');
      handlerFails = true;
      await inbox.receive({ source: 'ledger', idempotencyKey: 'l-2', payload: {} });
      await app.get(PullWorker).runOnce('ledger');
      await app.get(PullWorker).runOnce('ledger'); // the last of 2 attempts
      handlerFails = false;
      assert.equal(await scrape('queuebox_inbox_messages_processed_total{component="pull",source="ledger",queuebox="default"}'), 1);
      assert.equal(await scrape('queuebox_inbox_messages_retried_total{component="pull",source="ledger",queuebox="default"}'), 1);
      assert.equal(
        await scrape('queuebox_inbox_messages_dead_lettered_total{component="pull",source="ledger",cause="failure",queuebox="default"}'),
        1,
      );
      assert.equal(
        await scrape('queuebox_inbox_handle_duration_seconds_count{component="pull",source="ledger",outcome="success",queuebox="default"}'),
        1,
      );
      assert.equal(
        await scrape('queuebox_inbox_handle_duration_seconds_count{component="pull",source="ledger",outcome="failure",queuebox="default"}'),
        2,
      );
    });

    it('queuebox_dead_letters: dead rows by destination and error class, the 20 largest pairs per component and the rest as other', async () => {
      await db.query('TRUNCATE queuebox_outbox, queuebox_inbox');
      await db.query(`INSERT INTO queuebox_outbox (message_id, destination, payload, state, fingerprint)
        SELECT gen_random_uuid(), 'billing', '{}'::jsonb, 'dead', 'PublishError/503: HTTP #' FROM generate_series(1, 30)
        UNION ALL SELECT gen_random_uuid(), 'billing', '{}', 'dead', 'E' || n || ': boom' FROM generate_series(1, 25) n
        UNION ALL SELECT gen_random_uuid(), 'shipping', '{}', 'dead', NULL`);
      await db.query(
        "INSERT INTO queuebox_inbox (source, idempotency_key, payload, state, fingerprint) VALUES ('orders', 'x', '{}', 'dead', 'TypeError: no customer #')",
      );
      await sleep(600); // past the reuse window of an earlier scrape's dead-letter read
      const lines = (await register.metrics()).split('\n').filter((l) => l.startsWith('queuebox_dead_letters{'));
      assert.equal(
        await scrape('queuebox_dead_letters{component="outbox",name="billing",error_class="PublishError/503",queuebox="default"}'),
        30,
      );
      assert.equal(
        await scrape('queuebox_dead_letters{component="outbox",name="other",error_class="other",queuebox="default"}'),
        7,
        '27 pairs: 20 kept, the 7 smallest summed',
      );
      assert.equal(lines.filter((l) => l.includes('component="outbox"')).length, 21, 'at most 21 outbox series');
      assert.equal(await scrape('queuebox_dead_letters{component="inbox",name="orders",error_class="TypeError",queuebox="default"}'), 1);
      assert.equal(lines.filter((l) => l.includes('component="inbox"')).length, 1);
      await db.query('TRUNCATE queuebox_outbox, queuebox_inbox');
    });

    it('queuebox_dead_letters: scrapes within the reuse window share one read of each table; a later scrape reads again', async () => {
      const series = 'queuebox_dead_letters{component="outbox",name="billing",error_class="unknown",queuebox="default"}';
      // The reuse shows only when the second scrape comes within 0.5 s of the first read: on a
      // machine too busy for that, the sequence runs again (a few times at most).
      for (let attempt = 1; ; attempt++) {
        await db.query('TRUNCATE queuebox_outbox, queuebox_inbox');
        await sleep(600); // past the reuse window of an earlier read
        const reads = countStatements(dataSource, /AS error_class, count\(\*\)/);
        try {
          const startedAt = performance.now();
          await register.metrics();
          await db.query(
            "INSERT INTO queuebox_outbox (message_id, destination, payload, state) VALUES (gen_random_uuid(), 'billing', '{}', 'dead')",
          );
          const reused = await scrape(series);
          if (performance.now() - startedAt >= 450 && attempt < 5) continue;
          assert.equal(reused, 0, 'the second scrape shows the first read: the dead row came after it');
          assert.equal(reads.count, 2, 'two scrapes: one read of the outbox and one of the inbox');
          await sleep(600);
          assert.equal(await scrape(series), 1);
          assert.equal(reads.count, 4, 'a scrape after the window reads both tables again');
          break;
        } finally {
          reads.stop();
          await db.query('TRUNCATE queuebox_outbox, queuebox_inbox');
        }
      }
    });

    it('backlog gauges: pending, processing, dead and the age of the oldest due message, per destination and source', async () => {
      await db.query('TRUNCATE queuebox_outbox, queuebox_inbox');
      await enqueue('billing', { key: 'k1' });
      await enqueue('billing', { key: 'k2' });
      await enqueue('billing', { key: 'k3', availableAt: new Date(Date.now() + 3_600_000) }); // scheduled: pending, not due
      await db.query("UPDATE queuebox_outbox SET created_at = created_at - interval '100 seconds' WHERE key = 'k2'");
      await claimsOf(app).outbox.claim({ limit: 1, leaseMs: 60_000 }); // k1 (first due) is processing
      await app.get(InboxService).receive({ source: 'ledger', idempotencyKey: 'l-9', payload: {} });
      await db.query(
        "INSERT INTO queuebox_outbox (message_id, destination, payload, state) VALUES (gen_random_uuid(), 'billing', '{}', 'dead')",
      );
      await app.get(InboxService).receive({ source: 'orders', idempotencyKey: 'o-9', payload: {} });
      await app.get(InboxService).receive({ source: 'orders', idempotencyKey: 'o-10', payload: {} });
      await claimsOf(app).relay.claim({ sources: ['orders'], limit: 1, leaseMs: 60_000 }); // o-9 processing
      await db.query("UPDATE queuebox_inbox SET received_at = received_at - interval '50 seconds' WHERE idempotency_key = 'o-10'");
      await db.query("INSERT INTO queuebox_inbox (source, idempotency_key, payload, state) VALUES ('orders', 'o-dead', '{}', 'dead')");

      await sleep(600); // past the reuse window of the last scrape's backlog query
      assert.equal(await scrape('queuebox_outbox_pending_messages{destination="billing",queuebox="default"}'), 2);
      assert.equal(await scrape('queuebox_outbox_processing_messages{destination="billing",queuebox="default"}'), 1);
      assert.equal(await scrape('queuebox_outbox_dead_messages{destination="billing",queuebox="default"}'), 1);
      const age = await scrape('queuebox_outbox_oldest_pending_age_seconds{destination="billing",queuebox="default"}');
      assert.ok(age >= 100 && age < 160, `oldest due message is about 100 s old, got ${age}`);
      assert.equal(await scrape('queuebox_inbox_pending_messages{source="ledger",queuebox="default"}'), 1);
      assert.equal(await scrape('queuebox_inbox_pending_messages{source="orders",queuebox="default"}'), 1);
      assert.equal(await scrape('queuebox_inbox_processing_messages{source="orders",queuebox="default"}'), 1);
      assert.equal(await scrape('queuebox_inbox_dead_messages{source="orders",queuebox="default"}'), 1);
      const inboxAge = await scrape('queuebox_inbox_oldest_pending_age_seconds{source="orders",queuebox="default"}');
      assert.ok(inboxAge >= 50 && inboxAge < 110, `oldest due inbox message is about 50 s old, got ${inboxAge}`);

      await db.query('TRUNCATE queuebox_outbox, queuebox_inbox');
      await sleep(600);
      // Drained names read 0 instead of vanishing (a vanished series looks like a scrape failure to absent() alerts).
      for (const field of ['pending', 'processing', 'dead']) {
        assert.equal(
          await series(`queuebox_outbox_${field}_messages{destination="billing",queuebox="default"}`),
          0,
          `${field} of a drained destination`,
        );
        assert.equal(
          await series(`queuebox_inbox_${field}_messages{source="orders",queuebox="default"}`),
          0,
          `${field} of a drained source`,
        );
      }
      assert.equal(await series('queuebox_outbox_oldest_pending_age_seconds{destination="billing",queuebox="default"}'), 0);
      assert.equal(
        await series('queuebox_inbox_pending_messages{source="ledger",queuebox="default"}'),
        0,
        'a consumed source (pull handler) is known',
      );
      assert.equal(
        await series('queuebox_inbox_pending_messages{source="nobody",queuebox="default"}'),
        undefined,
        'no series for names never seen',
      );
    });
  });
});
