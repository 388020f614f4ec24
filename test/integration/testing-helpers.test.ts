import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, beforeEach, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { QueueBoxConfigError, QueueBoxStateError } from '../../lib/errors/queuebox.errors';
import { InboxService } from '../../lib/inbox/inbox.service';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { type PullContext, PullHandler } from '../../lib/pull/pull-handler.decorator';
import { QueueBoxTesting, RecordingPublisher } from '../../lib/testing';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase } from '../support/database';

/** What the pull handler does with each message; set per test. */
let paymentBehaviour: (message: InboxMessage) => void = () => undefined;
const handled: { key: string; attempt: number }[] = [];

@Injectable()
class PaymentsHandler {
  constructor(private readonly outbox: OutboxService) {}

  @PullHandler('payments', { maxAttempts: 2, backoff: () => 0 })
  async handle(message: InboxMessage, context: PullContext) {
    handled.push({ key: message.idempotencyKey, attempt: context.attempt });
    paymentBehaviour(message);
    // Enqueued in the handler's transaction: published by a later drain.
    await this.outbox.enqueue(context.manager, { destination: 'ledger', key: message.aggregateId ?? undefined, payload: message.payload });
  }
}

describeWithDatabase('queuebox/testing on PostgreSQL', { truncate: ['queuebox_outbox', 'queuebox_inbox'] }, (db) => {
  let t: TestApp;
  let qb: QueueBoxTesting;
  const publisher = new RecordingPublisher();

  const enqueue = async (messages: { destination: string; key?: string; payload: unknown }[]) => {
    const dataSource = t.app.get<DataSource>(getDataSourceToken());
    await dataSource.transaction((manager) => t.get(OutboxService).enqueueMany(manager, messages));
  };
  const states = async () =>
    (
      await db.query<{ state: string; n: number }>('SELECT state, count(*)::int AS n FROM queuebox_outbox GROUP BY state ORDER BY state')
    ).map((row) => `${row.state}:${row.n}`);

  before(async () => {
    t = await createTestApp(
      db.url,
      {
        workers: false,
        outbox: { publisher, maxAttempts: 3, backoff: { initialMs: 0, maxMs: 0, jitter: false } },
        inbox: {
          relay: {
            routes: { orders: (message) => ({ destination: 'billing', key: message.aggregateId ?? undefined, payload: message.payload }) },
          },
        },
      },
      { providers: [PaymentsHandler] },
    );
    qb = QueueBoxTesting.from(t.app);
  });
  after(async () => {
    await t?.app.close();
  });
  beforeEach(async () => {
    publisher.clear();
    paymentBehaviour = () => undefined;
    handled.length = 0;
  });

  it('drainOutbox publishes every enqueued message exactly once, in enqueue order per key, then finds nothing', async () => {
    const input = Array.from({ length: 30 }, (_, i) => ({
      destination: i % 2 ? 'billing' : 'shipping',
      key: `k${i % 3}`,
      payload: { seq: i },
    }));
    await enqueue(input);

    const result = await qb.drainOutbox();

    assert.equal(result.published.length, 30);
    assert.deepEqual(result.failed, []);
    assert.equal(publisher.messages.length, 30);
    assert.deepEqual(new Set(publisher.messages.map((m) => m.messageId)).size, 30);
    for (const key of ['k0', 'k1', 'k2']) {
      const seqs = publisher.messages.filter((m) => m.key === key).map((m) => (m.payload as { seq: number }).seq);
      assert.deepEqual(
        seqs,
        input.flatMap((m, i) => (m.key === key ? [i] : [])),
        `key ${key} in enqueue order`,
      );
    }
    // One claim takes each key's first row; the rest of the key go out behind it as its followers
    // (outbox.maxFollowers): one batch, and a second finds nothing.
    assert.equal(result.batches, 2);
    assert.deepEqual(publisher.payloads('billing').length, 15);
    assert.deepEqual(await states(), ['sent:30']);

    const again = await qb.drainOutbox();
    assert.deepEqual(
      { published: again.published.length, failed: again.failed.length, batches: again.batches },
      { published: 0, failed: 0, batches: 1 },
    );
  });

  it('records failures and retries them as configured (no backoff, maxAttempts 3), the other destinations unaffected', async () => {
    publisher.failDestination('flaky');
    await enqueue([
      { destination: 'flaky', key: 'a', payload: 1 },
      { destination: 'steady', key: 'b', payload: 2 },
    ]);

    const result = await qb.drainOutbox();

    assert.deepEqual(
      result.published.map((m) => m.destination),
      ['steady'],
    );
    assert.deepEqual(
      result.failed.map((f) => [f.message.destination, f.message.attempt, f.outcome]),
      [
        ['flaky', 1, 'retried'],
        ['flaky', 2, 'retried'],
        ['flaky', 3, 'dead'],
      ],
    );
    assert.match(result.failed[2].error ?? '', /simulated failure/);
    assert.equal(publisher.attempts.length, 4);
    assert.deepEqual(await states(), ['dead:1', 'sent:1']);
  });

  it('failNext fails exactly the next publishes; a permanent failure is dead-lettered at once', async () => {
    publisher.failNext(1).failNext(1, { permanent: true });
    await enqueue([
      { destination: 'd', key: 'x', payload: 'first' },
      { destination: 'd', key: 'y', payload: 'second' },
      { destination: 'd', key: 'z', payload: 'third' },
    ]);

    const result = await qb.drainOutbox();

    assert.deepEqual(
      result.failed.map((f) => [f.message.payload, f.outcome]),
      [
        ['first', 'retried'],
        ['second', 'dead'],
      ],
    );
    assert.deepEqual(publisher.payloads(), ['third', 'first']);
    assert.deepEqual(await states(), ['dead:1', 'sent:2']);
  });

  it('leaves messages that are not claimable now (availableAt in the future) pending', async () => {
    const dataSource = t.app.get<DataSource>(getDataSourceToken());
    await dataSource.transaction((manager) =>
      t.get(OutboxService).enqueue(manager, { destination: 'd', payload: 'later', availableAt: new Date(Date.now() + 3600_000) }),
    );
    const result = await qb.drainOutbox();
    assert.equal(result.published.length, 0);
    assert.deepEqual(await states(), ['pending:1']);
  });

  it('runPullHandlers runs the handler per message in receive order, retries a failure and commits its outbox writes', async () => {
    const inbox = t.get(InboxService);
    for (const key of ['p1', 'p2', 'p3'])
      await inbox.receive({ source: 'payments', idempotencyKey: key, aggregateId: 'acct-1', payload: { key } });
    let failOnce = true;
    paymentBehaviour = (message) => {
      if (message.idempotencyKey === 'p2' && failOnce) {
        failOnce = false;
        throw new Error('card service down');
      }
    };

    const result = await qb.runPullHandlers('payments');

    assert.deepEqual(
      result.processed.map((m) => m.idempotencyKey),
      ['p1', 'p2', 'p3'],
    );
    assert.deepEqual(
      result.failed.map((f) => [f.message.idempotencyKey, f.outcome]),
      [['p2', 'retried']],
    );
    assert.match(result.failed[0].error ?? '', /card service down/);
    assert.deepEqual(handled, [
      { key: 'p1', attempt: 1 },
      { key: 'p2', attempt: 1 },
      { key: 'p2', attempt: 2 },
      { key: 'p3', attempt: 1 },
    ]);
    // The failed attempt's enqueue rolled back with its transaction: one ledger message per payment.
    const outbox = await qb.drainOutbox();
    assert.deepEqual(
      outbox.published.map((m) => (m.payload as { key: string }).key),
      ['p1', 'p2', 'p3'],
    );
  });

  it('drain() runs relay, pull handlers and outbox until quiet', async () => {
    const inbox = t.get(InboxService);
    await inbox.receive({ source: 'orders', idempotencyKey: 'o1', aggregateId: 'c1', payload: { order: 1 } });
    await inbox.receive({ source: 'payments', idempotencyKey: 'pay1', payload: { pay: 1 } });

    const result = await qb.drain();

    assert.deepEqual(
      result.relay.processed.map((m) => m.idempotencyKey),
      ['o1'],
    );
    assert.deepEqual(
      result.pull.processed.map((m) => m.idempotencyKey),
      ['pay1'],
    );
    assert.deepEqual(result.outbox.published.map((m) => m.destination).sort(), ['billing', 'ledger']);
    assert.equal(result.rounds, 2);
    assert.deepEqual(
      (await db.query('SELECT DISTINCT state FROM queuebox_inbox')).map((r) => r.state),
      ['processed'],
    );
  });

  it('stops with an error instead of looping when rows stay claimable past maxBatches', async () => {
    publisher.failDestination('flaky');
    await enqueue([{ destination: 'flaky', payload: 1 }]);
    await assert.rejects(
      qb.drainOutbox({ maxBatches: 2 }),
      (error: unknown) => error instanceof QueueBoxStateError && /maxBatches/.test(error.message),
    );
  });

  it('the no-backoff retry docs/testing.md shows starts an app and retries in one drain; older names inside retry fail start-up, the new ones suggested', async () => {
    const page = readFileSync(join(__dirname, '..', '..', '..', 'docs', 'testing.md'), 'utf8');
    const shown = /configure no backoff in the test \(`(retry: \{[^`]+\})`\)/.exec(page)?.[1];
    assert.ok(shown, 'docs/testing.md shows a no-backoff retry form');
    const { retry } = new Function(`return { ${shown} };`)() as { retry: object };
    const docs = new RecordingPublisher();
    const app = await createTestApp(db.url, { workers: false, outbox: { publisher: docs, retry } });
    try {
      await app.app
        .get<DataSource>(getDataSourceToken())
        .transaction((manager) => app.get(OutboxService).enqueue(manager, { destination: 'billing', payload: 1 }));
      docs.failNext(2);
      const { published, failed } = await QueueBoxTesting.from(app.app).drainOutbox();
      assert.deepEqual([published.length, failed.map((f) => f.outcome)], [1, ['retried', 'retried']]);
    } finally {
      await app.app.close();
    }

    for (const [older, option, suggestion] of [
      [{ maxAttempts: 5 }, 'outbox.retry.maxAttempts', 'outbox.retry.attempts'],
      [{ attempts: 5, backoff: { initialMs: 0 } }, 'outbox.retry.backoff.initialMs', 'outbox.retry.backoff.delay'],
      [{ attempts: 5, backoff: { delay: 0, maxMs: 0 } }, 'outbox.retry.backoff.maxMs', 'outbox.retry.backoff.maxDelay'],
    ] as const) {
      await assert.rejects(
        createTestApp(db.url, { workers: false, outbox: { publisher: docs, retry: older as never } }),
        (error: unknown) =>
          error instanceof QueueBoxConfigError && error.option === option && error.message.includes(`Did you mean "${suggestion}"?`),
      );
    }
  });

  it('refuses an unknown pull source, and an app whose background workers run', async () => {
    await assert.rejects(
      qb.runPullHandlers('nope'),
      (error: unknown) => error instanceof QueueBoxConfigError && /"payments"/.test(error.message),
    );
    const running = await createTestApp(db.url, { outbox: { publisher: new RecordingPublisher() } });
    try {
      await assert.rejects(
        QueueBoxTesting.from(running.app).drainOutbox(),
        (error: unknown) =>
          error instanceof QueueBoxConfigError && error.option === 'workers.outbox' && /workers: false/.test(error.message),
      );
    } finally {
      await running.app.close();
    }
  });
});
