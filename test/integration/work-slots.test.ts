import assert from 'node:assert/strict';
import { after, before, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { InboxService } from '../../lib/inbox/inbox.service';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { RelayRoute } from '../../lib/types/inbox';
import type { InboxMessage, OutboundMessage } from '../../lib/types/messages';
import type { Publisher } from '../../lib/types/outbox';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { gate } from '../support/recording-publisher';

// Work that timed out but ignores its abort signal keeps its concurrency slot
// until it really ends. A loop whose every slot is kept so must claim nothing (a claim could not
// start: it would wait, renewed, for as long as the hung call runs, out of every other replica's
// reach) and give back what already waits for a slot. Each test runs a "stuck" replica whose one
// slot hangs, and a healthy replica that must get every message.

const hang = gate();
/** The relay case's hung route, ended by the test (the pull and outbox calls stay hung until the end). */
const relayHang = gate();
/** Which replica handled what (idempotency key or message id), in order. */
const handledBy: { replica: string; id: string }[] = [];

const PULL = { leaseMs: 2000, concurrency: 1, handlerTimeout: 200, maxAttempts: 5, backoff: { initialMs: 1, maxMs: 1, jitter: false } };

@Injectable()
class StuckPullHandler {
  @PullHandler('stuck-one', PULL)
  async handle(message: InboxMessage) {
    handledBy.push({ replica: 'stuck', id: message.idempotencyKey });
    await hang.promise; // ignores its signal
  }

  @PullHandler('stuck-batch', { ...PULL, batch: 5 })
  async handleBatch(messages: InboxMessage[]) {
    for (const message of messages) handledBy.push({ replica: 'stuck', id: message.idempotencyKey });
    await hang.promise;
  }
}

@Injectable()
class HealthyPullHandler {
  @PullHandler('stuck-one', PULL)
  async handle(message: InboxMessage) {
    handledBy.push({ replica: 'healthy', id: message.idempotencyKey });
  }

  @PullHandler('stuck-batch', { ...PULL, batch: 5 })
  async handleBatch(messages: InboxMessage[]) {
    for (const message of messages) handledBy.push({ replica: 'healthy', id: message.idempotencyKey });
  }
}

/** Hangs on every publish, ignoring its signal. */
const stuckPublisher: Publisher = {
  async publish(message: OutboundMessage) {
    handledBy.push({ replica: 'stuck', id: message.messageId });
    await hang.promise;
  },
};
const healthyPublisher: Publisher = {
  async publish(message: OutboundMessage) {
    handledBy.push({ replica: 'healthy', id: message.messageId });
  },
};

/** Hangs on every call until `relayHang` opens, ignoring its signal; then forwards at once. */
const stuckRoute: RelayRoute = async (message) => {
  handledBy.push({ replica: 'stuck', id: message.idempotencyKey });
  await relayHang.promise;
  return { destination: 'relayed', payload: message.payload };
};
const healthyRoute: RelayRoute = (message) => {
  handledBy.push({ replica: 'healthy', id: message.idempotencyKey });
  return { destination: 'relayed', payload: message.payload };
};

const relay = (route: RelayRoute) => ({
  routes: { 'relay-stuck': route },
  concurrency: 1,
  batchSize: 4,
  claimTimeoutMs: 3000,
  // Long enough to see the two rows behind the hung one wait, claimed, for its slot.
  handlerTimeout: 1000,
  pollIntervalMs: 50,
  maxAttempts: 5,
  backoff: { initialMs: 1, maxMs: 1, jitter: false },
});

const outbox = (publisher: Publisher) => ({
  publisher,
  concurrency: 1,
  batchSize: 4,
  claimTimeoutMs: 2000,
  publishTimeout: 200,
  pollIntervalMs: 50,
  maxAttempts: 5,
  backoff: { initialMs: 1, maxMs: 1, jitter: false },
});

describeWithDatabase('a loop whose slots are all held by hung work claims nothing and gives back what waits', (db) => {
  let stuck: TestApp;
  let healthy: TestApp | undefined;
  let stuckRelay: TestApp | undefined;
  /** Nest sends every app's log lines to the logger of the app created last: look in all of them. */
  const apps: TestApp[] = [];
  const logged = (fragment: string, level = 'warn') => apps.some((app) => app.logger.has(level, fragment));

  before(async () => {
    stuck = await createTestApp(
      db.url,
      { workers: { outbox: true, relay: false, pull: true }, outbox: outbox(stuckPublisher), pull: { pollIntervalMs: 50 } },
      { providers: [StuckPullHandler] },
    );
    apps.push(stuck);
  });
  after(async () => {
    hang.open();
    relayHang.open();
    await healthy?.app.close();
    await stuckRelay?.app.close();
    await stuck?.app.close();
  });

  const row = async (table: 'queuebox_inbox' | 'queuebox_outbox', where: string, value: string) =>
    (
      await db.query<{ state: string; attempts: number; last_error: string | null }>(
        `SELECT state, attempts, last_error FROM ${table} WHERE ${where} = $1`,
        [value],
      )
    )[0];

  it('pull, one message per call: the timed-out message is retried by another replica, never parked behind the hung call', async () => {
    await stuck.get(InboxService).receive({ source: 'stuck-one', idempotencyKey: 'one-1', payload: {} });
    await eventually(
      async () =>
        (await row('queuebox_inbox', 'idempotency_key', 'one-1')).attempts === 1 &&
        (await row('queuebox_inbox', 'idempotency_key', 'one-1')).state === 'pending',
      'the timeout to be recorded as a retry',
    );
    await eventually(async () => logged('pull worker stuck-one: every one of its concurrency slots is held'), 'the stuck replica to pause');
    assert.equal((await row('queuebox_inbox', 'idempotency_key', 'one-1')).state, 'pending', 'not claimed again by the stuck replica');
    healthy = await createTestApp(
      db.url,
      { workers: { outbox: true, relay: false, pull: true }, outbox: outbox(healthyPublisher), pull: { pollIntervalMs: 50 } },
      { providers: [HealthyPullHandler] },
    );
    apps.push(healthy);
    await eventually(
      async () => (await row('queuebox_inbox', 'idempotency_key', 'one-1')).state === 'processed',
      'the healthy replica to process it',
      10_000,
    );
    assert.deepEqual(
      handledBy.filter((entry) => entry.id === 'one-1').map((entry) => entry.replica),
      ['stuck', 'healthy'],
    );
  });

  it('pull, batch form: the batch that waited for the hung batch slot goes back and another replica handles it', async () => {
    await healthy?.app.close();
    healthy = undefined;
    const inbox = stuck.get(InboxService);
    await inbox.receive({ source: 'stuck-batch', idempotencyKey: 'b-1', payload: {} });
    await eventually(async () => handledBy.some((entry) => entry.id === 'b-1'), 'the first batch to start');
    // Claimed while the first batch runs: they wait for its slot.
    for (let n = 2; n <= 4; n++) await inbox.receive({ source: 'stuck-batch', idempotencyKey: `b-${n}`, payload: {} });
    await eventually(
      async () => logged('pull worker stuck-batch: every one of its concurrency slots is held'),
      'the stuck replica to pause',
    );
    const waiting = await db.query<{ state: string; attempts: number; claim_token: string | null }>(
      "SELECT state, attempts, claim_token FROM queuebox_inbox WHERE source = 'stuck-batch' AND idempotency_key <> 'b-1'",
    );
    assert.deepEqual(
      waiting.map((r) => [r.state, r.attempts, r.claim_token]),
      Array(3).fill(['pending', 0, null]),
      'given back (or never claimed): none is held behind the hung batch',
    );
    healthy = await createTestApp(
      db.url,
      { workers: { outbox: false, relay: false, pull: true }, pull: { pollIntervalMs: 50 } },
      { providers: [HealthyPullHandler] },
    );
    apps.push(healthy);
    await eventually(
      async () => {
        const rows = await db.query<{ state: string }>("SELECT state FROM queuebox_inbox WHERE source = 'stuck-batch'");
        return rows.length === 4 && rows.every((r) => r.state === 'processed');
      },
      'the healthy replica to process all four',
      10_000,
    );
    for (const id of ['b-1', 'b-2', 'b-3', 'b-4']) {
      assert.equal(
        handledBy.filter((entry) => entry.id === id && entry.replica === 'healthy').length,
        1,
        `${id} handled once by the healthy replica`,
      );
    }
  });

  it('outbox poller: prefetched claims waiting behind a hung publish are given back and published by another replica', async () => {
    await healthy?.app.close();
    healthy = undefined;
    const dataSource = stuck.app.get<DataSource>(getDataSourceToken());
    const ids = await dataSource.transaction((manager) =>
      stuck.get(OutboxService).enqueueMany(
        manager,
        [1, 2, 3].map((n) => ({ destination: 'd', payload: { n } })),
      ),
    );
    await eventually(async () => logged('outbox poller: every one of its concurrency slots is held'), 'the stuck poller to pause');
    for (const { messageId } of ids.slice(1)) {
      const waited = await row('queuebox_outbox', 'message_id', messageId);
      assert.deepEqual([waited.state, waited.attempts], ['pending', 0], 'given back, its attempt not counted');
    }
    healthy = await createTestApp(db.url, { workers: { outbox: true, relay: false, pull: false }, outbox: outbox(healthyPublisher) }, {});
    apps.push(healthy);
    await eventually(
      async () => (await db.query<{ n: number }>("SELECT count(*)::int AS n FROM queuebox_outbox WHERE state = 'sent'"))[0].n === 3,
      'the healthy replica to publish all three',
      10_000,
    );
    for (const { messageId } of ids)
      assert.equal(handledBy.filter((entry) => entry.id === messageId && entry.replica === 'healthy').length, 1);
  });

  it('inbox relay: the timed-out row is retried, what waits behind the hung route goes back; claims resume once the route ends', async () => {
    await healthy?.app.close();
    healthy = undefined;
    stuckRelay = await createTestApp(db.url, { workers: { outbox: false, relay: true, pull: false }, inbox: { relay: relay(stuckRoute) } });
    apps.push(stuckRelay);
    const inbox = stuckRelay.get(InboxService);
    const relayRows = async () =>
      db.query<{ key: string; state: string; attempts: number; claim_token: string | null; last_error: string | null }>(
        "SELECT idempotency_key AS key, state, attempts, claim_token, last_error FROM queuebox_inbox WHERE source = 'relay-stuck' ORDER BY id",
      );
    const routed = () => handledBy.filter((entry) => entry.id.startsWith('rl-'));
    // Committed together: one claim takes all three, the first runs (and hangs), two wait for its slot.
    const dataSource = stuckRelay.app.get<DataSource>(getDataSourceToken());
    await dataSource.transaction(async (manager) => {
      for (const n of [1, 2, 3]) await inbox.receive({ source: 'relay-stuck', idempotencyKey: `rl-${n}`, payload: { n } }, manager);
    });
    await eventually(
      async () => routed().length === 1 && (await relayRows()).every((r) => r.state === 'processing'),
      'one claim to take all three: one route call, two claims waiting for its slot',
      5_000,
    );
    await eventually(
      async () => (await relayRows()).some((r) => r.last_error !== null),
      'the route timeout to be recorded as a retry',
      10_000,
    );
    const [hung] = routed();
    // A loop that claims while its only slot is held would take the retry and the given-back rows
    // again here, and keep them processing (renewed) behind the hung route.
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.deepEqual(
      (await relayRows()).map((r) =>
        r.key === hung.id
          ? [r.key, r.state, r.attempts, r.claim_token, /inbox\.relay\.handlerTimeout/.test(r.last_error ?? '')]
          : [r.key, r.state, r.attempts, r.claim_token],
      ),
      ['rl-1', 'rl-2', 'rl-3'].map((key) => (key === hung.id ? [key, 'pending', 1, null, true] : [key, 'pending', 0, null])),
      'the timed-out attempt recorded (a retry); the others given back, their attempt not counted; none claimed again',
    );
    assert.ok(logged('inbox relay: every one of its concurrency slots is held'), 'the stuck relay paused');
    assert.deepEqual(routed(), [hung], 'no other route call while the hung one holds the only slot');
    // Another relay forwards all three, the timed-out one on its second attempt.
    healthy = await createTestApp(db.url, { workers: { outbox: false, relay: true, pull: false }, inbox: { relay: relay(healthyRoute) } });
    apps.push(healthy);
    await eventually(
      async () => (await relayRows()).every((r) => r.state === 'processed'),
      'the healthy relay to forward all three',
      10_000,
    );
    assert.deepEqual(
      (await relayRows()).map((r) => [r.key, r.attempts]),
      ['rl-1', 'rl-2', 'rl-3'].map((key) => [key, key === hung.id ? 2 : 1]),
    );
    for (const key of ['rl-1', 'rl-2', 'rl-3'])
      assert.equal(
        handledBy.filter((entry) => entry.id === key && entry.replica === 'healthy').length,
        1,
        `${key} forwarded once by the healthy relay`,
      );
    // Once the hung route ends, its slot is free and the stuck relay claims again.
    await healthy.app.close();
    healthy = undefined;
    relayHang.open();
    await eventually(async () => logged('inbox relay: a slot held by a timed-out call was freed', 'log'), 'the stuck relay to resume');
    await inbox.receive({ source: 'relay-stuck', idempotencyKey: 'rl-4', payload: { n: 4 } });
    await eventually(
      async () => (await relayRows()).find((r) => r.key === 'rl-4')?.state === 'processed',
      'the stuck relay to forward rl-4',
      10_000,
    );
    assert.deepEqual(
      handledBy.filter((entry) => entry.id === 'rl-4').map((entry) => entry.replica),
      ['stuck'],
    );
  });
});
