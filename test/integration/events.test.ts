import assert from 'node:assert/strict';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { after, before, beforeEach, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { PermanentPublishError } from '../../lib/errors/queuebox.errors';
import { type QueueBoxEventMap, type QueueBoxEventName, QueueBoxEvents } from '../../lib/events/queuebox.events';
import { InboxRelay } from '../../lib/inbox/inbox.relay';
import { InboxService } from '../../lib/inbox/inbox.service';
import { LeaseService } from '../../lib/lease/lease.service';
import { OutboxPoller } from '../../lib/outbox/outbox.poller';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { PullWorker } from '../../lib/pull/pull.worker';
import { PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp, type TestApp } from '../support/app';
import { claimsOf } from '../support/claims';
import { describeWithDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

const CHANNELS: QueueBoxEventName[] = [
  'queuebox:published',
  'queuebox:retry-scheduled',
  'queuebox:dead-lettered',
  'queuebox:claim-lost',
  'queuebox:reclaimed',
  'queuebox:inbox:received',
  'queuebox:inbox:duplicate',
  'queuebox:relay:processed',
  'queuebox:relay:retry-scheduled',
  'queuebox:relay:dead-lettered',
  'queuebox:pull:processed',
  'queuebox:pull:retry-scheduled',
  'queuebox:pull:dead-lettered',
];

let handlerFails = false;
let relayFails = false;

@Injectable()
class LedgerHandler {
  @PullHandler('ledger', { leaseMs: 10_000, maxAttempts: 2, backoff: () => 0 })
  async handle(_message: InboxMessage) {
    if (handlerFails) throw new Error('ledger is closed');
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describeWithDatabase('events on node:diagnostics_channel', { truncate: ['queuebox_outbox', 'queuebox_inbox'] }, (db) => {
  let t: TestApp;
  let dataSource: DataSource;
  const publisher = new RecordingPublisher();
  const seen: { name: QueueBoxEventName; event: Record<string, unknown> }[] = [];
  const listeners = new Map<string, (event: unknown) => void>();

  /** The events of one channel seen so far. */
  /** The events of one channel seen so far, each checked to name its QueueBox (then left out of the comparison). */
  const of = <K extends QueueBoxEventName>(name: K) =>
    seen
      .filter((e) => e.name === name)
      .map(({ event: { queuebox, ...event } }) => {
        assert.equal(queuebox, 'default', `${name} names the QueueBox that emitted it`);
        return event as QueueBoxEventMap[K];
      });

  before(async () => {
    t = await createTestApp(
      db.url,
      {
        workers: false,
        outbox: { publisher, maxAttempts: 2, backoff: () => 0 },
        inbox: {
          relay: {
            maxAttempts: 2,
            backoff: () => 0,
            routes: {
              orders: (message) => {
                if (relayFails) throw new Error('no route today');
                return { destination: 'billing', key: message.aggregateId, payload: message.payload };
              },
            },
          },
        },
      },
      { providers: [LedgerHandler] },
    );
    dataSource = t.app.get(getDataSourceToken());
    for (const name of CHANNELS) {
      const listener = (event: unknown) => seen.push({ name, event: event as Record<string, unknown> });
      listeners.set(name, listener);
      subscribe(name, listener);
    }
  });
  after(async () => {
    for (const [name, listener] of listeners) unsubscribe(name, listener);
    await t?.app.close();
  });
  beforeEach(async () => {
    seen.length = 0;
    publisher.behaviour = () => undefined;
    handlerFails = false;
    relayFails = false;
  });

  const enqueue = () =>
    dataSource.transaction((manager) => t.get(OutboxService).enqueue(manager, { destination: 'billing', key: 'k1', payload: { n: 1 } }));

  it('queuebox:published fires once per published message, with its identity, attempt and duration', async () => {
    const { id, messageId } = await enqueue();
    assert.equal(await t.get(OutboxPoller).runOnce(), 1);
    assert.deepEqual(
      seen.map((e) => e.name),
      ['queuebox:published'],
    );
    const [event] = of('queuebox:published');
    assert.equal(typeof event.durationMs, 'number');
    assert.deepEqual(
      { ...event, durationMs: 0 },
      { component: 'outbox', id, messageId, destination: 'billing', key: 'k1', attempt: 1, durationMs: 0 },
    );
  });

  it('queuebox:retry-scheduled, then queuebox:dead-lettered on the last attempt', async () => {
    const { id } = await enqueue();
    publisher.behaviour = () => {
      throw new Error('broker down');
    };
    await t.get(OutboxPoller).runOnce();
    await t.get(OutboxPoller).runOnce();
    assert.deepEqual(
      seen.map((e) => e.name),
      ['queuebox:retry-scheduled', 'queuebox:dead-lettered'],
    );
    const [retry] = of('queuebox:retry-scheduled');
    assert.equal(retry.id, id);
    assert.equal(retry.attempt, 1);
    assert.equal(retry.delayMs, 0);
    assert.match(retry.error, /broker down/);
    const [dead] = of('queuebox:dead-lettered');
    assert.equal(dead.attempt, 2);
    assert.match(dead.reason, /2 attempts|attempt 2|broker down/);
  });

  it('queuebox:dead-lettered at once for a PermanentPublishError', async () => {
    await enqueue();
    publisher.behaviour = () => {
      throw new PermanentPublishError('rejected by billing');
    };
    await t.get(OutboxPoller).runOnce();
    assert.deepEqual(
      seen.map((e) => e.name),
      ['queuebox:dead-lettered'],
    );
    assert.match(of('queuebox:dead-lettered')[0].reason, /rejected by billing/);
  });

  it('queuebox:claim-lost once per lost claim, and queuebox:reclaimed per destination', async () => {
    const { id } = await enqueue();
    const lease = t.get(LeaseService);
    const take = claimsOf(t);
    const [claim] = await take.outbox.claim({ limit: 1, leaseMs: 50 });
    await sleep(120);
    assert.equal(await lease.complete(claim), false);
    assert.equal(await lease.retry(claim), false);
    assert.deepEqual(of('queuebox:claim-lost'), [{ component: 'outbox', id }]);
    await take.outbox.claim({ limit: 1, leaseMs: 50 }); // claimed again (the reclaim step would do the same)
    await dataSource.query("UPDATE queuebox_outbox SET lease_expires_at = now() - interval '1 second'");
    await take.outbox.reclaim({ maxAttempts: 5 });
    assert.deepEqual(of('queuebox:reclaimed'), [{ component: 'outbox', name: 'billing', pending: 1, dead: 0 }]);
  });

  it('queuebox:inbox:received and queuebox:inbox:duplicate', async () => {
    const inbox = t.get(InboxService);
    const message = { source: 'orders', idempotencyKey: 'o-1', aggregateId: 'a1', payload: {} };
    const { id } = await inbox.receive(message);
    await inbox.receive(message);
    const expected = { id, source: 'orders', idempotencyKey: 'o-1', aggregateId: 'a1' };
    assert.deepEqual(of('queuebox:inbox:received'), [expected]);
    assert.deepEqual(of('queuebox:inbox:duplicate'), [expected]);
  });

  it("receive() in the caller's transaction reports after its commit, never after a rollback (savepoints included)", async () => {
    const inbox = t.get(InboxService);
    await assert.rejects(
      dataSource.transaction(async (manager) => {
        await inbox.receive({ source: 'orders', idempotencyKey: 'rolled-back', payload: {} }, manager);
        throw new Error('the business change failed');
      }),
      /the business change failed/,
    );
    assert.deepEqual(of('queuebox:inbox:received'), [], 'nothing stored, nothing reported');

    await dataSource.transaction(async (manager) => {
      await inbox.receive({ source: 'orders', idempotencyKey: 'kept', payload: {} }, manager);
      await manager
        .transaction(async (nested) => {
          await inbox.receive({ source: 'orders', idempotencyKey: 'in-savepoint', payload: {} }, nested);
          throw new Error('inner step failed');
        })
        .catch(() => undefined);
      assert.deepEqual(of('queuebox:inbox:received'), [], 'not reported before the commit');
    });
    assert.deepEqual(
      of('queuebox:inbox:received').map((e) => e.idempotencyKey),
      ['kept'],
    );
    const stored = await db.query<{ idempotency_key: string }>('SELECT idempotency_key FROM queuebox_inbox');
    assert.deepEqual(
      stored.map((r) => r.idempotency_key),
      ['kept'],
    );
  });

  it('the relay: queuebox:relay:processed with the forwarded count; retry-scheduled, then dead-lettered', async () => {
    const inbox = t.get(InboxService);
    const relay = t.get(InboxRelay);
    // The names of 0.1 are still delivered until 0.3, to listeners of that name and to its channel.
    const byOldName: unknown[] = [];
    const onOldChannel = (event: unknown) => byOldName.push(['channel', (event as { idempotencyKey: string }).idempotencyKey]);
    subscribe('queuebox:inbox:processed', onOldChannel);
    const stopListening = t.get(QueueBoxEvents).on('queuebox:inbox:processed', (event) => byOldName.push(['on', event.idempotencyKey]));
    const { id } = await inbox.receive({ source: 'orders', idempotencyKey: 'o-1', aggregateId: 'a1', payload: {} });
    await relay.runOnce();
    unsubscribe('queuebox:inbox:processed', onOldChannel);
    stopListening();
    const [processed] = of('queuebox:relay:processed');
    assert.deepEqual(
      { ...processed, durationMs: 0 },
      { component: 'relay', id, source: 'orders', idempotencyKey: 'o-1', aggregateId: 'a1', attempt: 1, durationMs: 0, forwarded: 1 },
    );
    assert.deepEqual(byOldName.sort(), [
      ['channel', 'o-1'],
      ['on', 'o-1'],
    ]);
    relayFails = true;
    await inbox.receive({ source: 'orders', idempotencyKey: 'o-2', aggregateId: 'a2', payload: {} });
    await relay.runOnce();
    await relay.runOnce();
    assert.equal(of('queuebox:relay:retry-scheduled').length, 1);
    assert.match(of('queuebox:relay:retry-scheduled')[0].error, /no route today/);
    assert.equal(of('queuebox:relay:dead-lettered').length, 1);
    assert.equal(of('queuebox:relay:dead-lettered')[0].idempotencyKey, 'o-2');
  });

  it('pull workers: queuebox:pull:processed with the handler; retry-scheduled, then dead-lettered', async () => {
    const inbox = t.get(InboxService);
    const worker = t.get(PullWorker);
    await inbox.receive({ source: 'ledger', idempotencyKey: 'l-1', payload: {} });
    await worker.runOnce('ledger');
    const [processed] = of('queuebox:pull:processed');
    assert.equal(processed.component, 'pull');
    assert.equal(processed.handler, 'LedgerHandler.handle');
    handlerFails = true;
    await inbox.receive({ source: 'ledger', idempotencyKey: 'l-2', payload: {} });
    await worker.runOnce('ledger');
    await worker.runOnce('ledger');
    assert.equal(of('queuebox:pull:processed').length, 1);
    assert.equal(of('queuebox:pull:retry-scheduled').length, 1);
    assert.equal(of('queuebox:pull:dead-lettered').length, 1);
    assert.match(of('queuebox:pull:dead-lettered')[0].reason, /ledger is closed/);
  });
});
