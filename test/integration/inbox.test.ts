import assert from 'node:assert/strict';
import { after, before, beforeEach, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import { Client } from 'pg';
import type { DataSource } from 'typeorm';
import { HandlerTimeoutError, QueueBoxConfigError, QueueBoxValidationError, UnknownSourceError } from '../../lib/errors/queuebox.errors';
import { InboxRelay } from '../../lib/inbox/inbox.relay';
import { InboxService } from '../../lib/inbox/inbox.service';
import { QueueBoxMetrics } from '../../lib/metrics/queuebox.metrics';
import { type PullContext, PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp, type TestApp } from '../support/app';
import { claimsOf } from '../support/claims';
import { describeWithDatabase, eventually } from '../support/database';
import { startWorker, type WorkerProcess } from '../support/processes';
import { gate } from '../support/recording-publisher';

describeWithDatabase('InboxService and InboxRelay on PostgreSQL', { truncate: ['queuebox_inbox', 'queuebox_outbox'] }, (db) => {
  let t: TestApp;
  let inbox: InboxService;
  let relay: InboxRelay;
  let dataSource: DataSource;
  let routed: InboxMessage[];
  let routeBehaviour: (message: InboxMessage) => unknown;
  let currentContext: { signal: AbortSignal } | undefined;

  before(async () => {
    t = await createTestApp(
      db.url,
      {
        workers: false,
        inbox: {
          relay: {
            routes: {
              orders: (message, context) => {
                routed.push(message);
                currentContext = context;
                return routeBehaviour(message) as never;
              },
              fanout: (message) => [
                { destination: 'billing', payload: message.payload },
                { destination: 'audit', key: 'audit', payload: { seen: message.idempotencyKey } },
              ],
            },
            claimTimeoutMs: 2000,
            handlerTimeout: 500,
            maxAttempts: 3,
            backoff: { initialMs: 1, maxMs: 1, jitter: false },
          },
        },
      },
      { poolSize: 25 },
    );
    inbox = t.get(InboxService);
    relay = t.get(InboxRelay);
    dataSource = t.app.get(getDataSourceToken());
  });
  after(async () => {
    await t?.app.close();
  });
  beforeEach(async () => {
    routed = [];
    routeBehaviour = (message) => ({ destination: 'billing', key: message.aggregateId, payload: message.payload });
  });

  const drainRelay = async () => {
    while ((await relay.runOnce()) > 0);
  };

  it('I5: 20 concurrent receives of one key from separate connections store one row; 19 report duplicate', async () => {
    // Each receive runs in a transaction of its own on its own pooled connection, all at once.
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, n) =>
        dataSource.transaction((manager) =>
          inbox.receive({ source: 'orders', idempotencyKey: 'evt-1', aggregateId: 'order-1', payload: { n } }, manager),
        ),
      ),
    );
    const winner = results.filter((r) => !r.duplicate);
    assert.equal(winner.length, 1, 'exactly one receive stored the message');
    assert.equal(results.filter((r) => r.duplicate).length, 19);
    assert.ok(
      results.every((r) => r.id === winner[0].id),
      'duplicates report the stored row id',
    );
    assert.deepEqual(await db.query('SELECT count(*)::int AS n FROM queuebox_inbox'), [{ n: 1 }]);
    const again = await inbox.receive({ source: 'orders', idempotencyKey: 'evt-1', payload: {} });
    assert.equal(again.duplicate, true);
    const metrics = t.get(QueueBoxMetrics);
    assert.equal(metrics.value('queuebox_inbox_messages_duplicates_total', { source: 'orders' }), 20);
  });

  it('I5: concurrent receives without a transaction never surface a unique violation', async () => {
    const results = await Promise.all(
      Array.from({ length: 20 }, () => inbox.receive({ source: 'orders', idempotencyKey: 'evt-2', payload: 1 })),
    );
    assert.equal(results.filter((r) => !r.duplicate).length, 1);
  });

  it('joins the caller transaction: a rolled-back receive stores nothing', async () => {
    await assert.rejects(
      dataSource.transaction(async (manager) => {
        await inbox.receive({ source: 'orders', idempotencyKey: 'evt-3', payload: 1 }, manager);
        throw new Error('handler failed');
      }),
      /handler failed/,
    );
    assert.deepEqual(await db.query('SELECT count(*)::int AS n FROM queuebox_inbox'), [{ n: 0 }]);
  });

  it('I10: rejects a source nothing consumes, and invalid messages, with typed errors and nothing stored', async () => {
    await assert.rejects(inbox.receive({ source: 'nobody', idempotencyKey: 'k', payload: 1 }), (error: unknown) => {
      assert.ok(error instanceof UnknownSourceError);
      assert.equal(error.source, 'nobody');
      assert.match(error.message, /has no consumer: add a route for it in "inbox.relay.routes" or a @PullHandler\("nobody"\)/);
      return true;
    });
    for (const [message, field] of [
      [{ source: 'orders', payload: 1 }, 'idempotencyKey'],
      [{ source: 'orders', idempotencyKey: 'k', aggregateId: 5, payload: 1 }, 'aggregateId'],
      [{ source: 'orders', idempotencyKey: 'k', payload: 10n }, 'payload'],
      [{ source: 'orders', idempotencyKey: 'k', payload: 1, headers: { a: 1 } }, 'headers'],
      // Characters PostgreSQL cannot store (issue 13 item 8).
      [{ source: 'orders', idempotencyKey: 'k\u0000', payload: 1 }, 'idempotencyKey'],
      [{ source: 'orders', idempotencyKey: 'k\ud800', payload: 1 }, 'idempotencyKey'],
      [{ source: 'orders', idempotencyKey: 'k', aggregateId: 'a\u0000', payload: 1 }, 'aggregateId'],
      [{ source: 'orders', idempotencyKey: 'k', aggregateId: '\udc00', payload: 1 }, 'aggregateId'],
      [{ source: 'orders', idempotencyKey: 'k', payload: { a: '\ud800' } }, 'payload'],
      [{ source: 'orders', idempotencyKey: 'k', payload: { a: 'x\u0000' } }, 'payload'],
      [{ source: 'orders', idempotencyKey: 'k', payload: 1, headers: { a: '\u0000' } }, 'headers'],
      [{ source: 'orders', idempotencyKey: 'k', payload: 1, headers: { '\ud800': 'v' } }, 'headers'],
      [{ source: 'orders', idempotencyKey: 'k', payload: 1, headers: { a: 'x'.repeat(20_000) } }, 'headers'],
    ] as const) {
      // In the caller's transaction, which stays usable: nothing reached the database.
      await dataSource.transaction(async (manager) => {
        await assert.rejects(
          inbox.receive(message as never, manager),
          (error: unknown) => error instanceof QueueBoxValidationError && error.field === field,
        );
        await manager.query('SELECT 1');
      });
    }
    assert.deepEqual(await db.query('SELECT count(*)::int AS n FROM queuebox_inbox'), [{ n: 0 }]);
  });

  it('forwards to the outbox with a message id derived from the inbox row and a causation header', async () => {
    const { id } = await inbox.receive({ source: 'orders', idempotencyKey: 'evt-4', aggregateId: 'order-9', payload: { total: 5 } });
    await drainRelay();
    const [inboxRow] = await db.query<{ state: string; processed_at: Date | null }>('SELECT state, processed_at FROM queuebox_inbox');
    assert.equal(inboxRow.state, 'processed');
    assert.ok(inboxRow.processed_at);
    const outboxRows = await db.query<{ message_id: string; destination: string; key: string; payload: unknown; headers: unknown }>(
      'SELECT message_id, destination, "key", payload, headers FROM queuebox_outbox',
    );
    assert.deepEqual(outboxRows, [
      {
        message_id: relay.derivedMessageId(id, 0),
        destination: 'billing',
        key: 'order-9',
        payload: { total: 5 },
        headers: { 'X-Causation-Id': 'evt-4' },
      },
    ]);
    assert.equal(routed[0].attempt, 1);
    assert.equal(t.get(QueueBoxMetrics).value('queuebox_inbox_messages_processed_total', { component: 'inbox', source: 'orders' }), 1);
  });

  // Bounded: without the time limit this test would hang, not fail.
  it('a route past inbox.relay.handlerTimeout has its signal aborted and its attempt recorded; a late result is dropped', {
    timeout: 30_000,
  }, async () => {
    const hold = gate();
    let seen: AbortSignal | undefined;
    routeBehaviour = async (message) => {
      seen = (routed.at(-1) === message ? currentContext : undefined)?.signal;
      await hold.promise; // ignores its signal
      return { destination: 'billing', payload: message.payload };
    };
    await inbox.receive({ source: 'orders', idempotencyKey: 'slow-route', payload: { n: 1 } });
    try {
      assert.equal(await relay.runOnce(), 1, 'the attempt ends at the timeout, not when the route does');
      const [row] = await db.query<{ state: string; attempts: number; last_error: string }>(
        'SELECT state, attempts, last_error FROM queuebox_inbox',
      );
      assert.equal(row.state, 'pending');
      assert.match(
        row.last_error,
        /HandlerTimeoutError \[QUEUEBOX_HANDLER_TIMEOUT\]: The relay route of orders took longer than "inbox.relay.handlerTimeout" \(500 ms\)/,
      );
      assert.equal(seen?.aborted, true);
      assert.ok(seen?.reason instanceof HandlerTimeoutError);
    } finally {
      hold.open();
    }
    routeBehaviour = (message) => ({ destination: 'billing', payload: message.payload });
    await drainRelay();
    assert.deepEqual(await db.query('SELECT state, attempts FROM queuebox_inbox'), [{ state: 'processed', attempts: 2 }]);
    assert.equal((await db.query('SELECT 1 FROM queuebox_outbox')).length, 1, 'the late result of the timed-out route was not forwarded');
  });

  it('a route may fan out to several outbox messages, all in the forward transaction', async () => {
    const { id } = await inbox.receive({ source: 'fanout', idempotencyKey: 'evt-5', payload: { a: 1 } });
    await drainRelay();
    const rows = await db.query<{ message_id: string; destination: string }>(
      'SELECT message_id, destination FROM queuebox_outbox ORDER BY id',
    );
    assert.deepEqual(rows, [
      { message_id: relay.derivedMessageId(id, 0), destination: 'billing' },
      { message_id: relay.derivedMessageId(id, 1), destination: 'audit' },
    ]);
  });

  it('retries a failing route with backoff and dead-letters after maxAttempts; an invalid route result dead-letters at once', async () => {
    routeBehaviour = (message) => {
      if (message.idempotencyKey === 'flaky') throw new Error('downstream lookup failed');
      return { destination: '', payload: 1 };
    };
    await inbox.receive({ source: 'orders', idempotencyKey: 'flaky', payload: 1 });
    await inbox.receive({ source: 'orders', idempotencyKey: 'invalid', payload: 1 });
    await eventually(async () => {
      await relay.runOnce();
      return (await db.query("SELECT 1 FROM queuebox_inbox WHERE state <> 'dead'")).length === 0;
    }, 'both rows to be dead');
    const rows = await db.query<{ idempotency_key: string; attempts: number; last_error: string }>(
      'SELECT idempotency_key, attempts, last_error FROM queuebox_inbox ORDER BY id',
    );
    assert.equal(rows[0].attempts, 3);
    assert.match(rows[0].last_error, /failed 3 attempt\(s\); last error: Error: downstream lookup failed/);
    assert.equal(rows[1].attempts, 1);
    assert.match(rows[1].last_error, /"destination" must be a non-empty string/);
    assert.deepEqual(await db.query('SELECT count(*)::int AS n FROM queuebox_outbox'), [{ n: 0 }]);
  });

  it('I6: a relay whose claim is taken over before it marks leaves no outbox row behind', async () => {
    const { id } = await inbox.receive({ source: 'orders', idempotencyKey: 'evt-6', aggregateId: 'a', payload: 1 });
    // Once the relay holds its claim, a second connection locks the inbox row, so the relay's
    // fenced mark waits on it after the outbox insert. Meanwhile the claim is taken over, as
    // after an expiry and a reclaim.
    const blocker = new Client({ connectionString: db.url });
    await blocker.connect();
    routeBehaviour = async (message) => {
      await blocker.query('BEGIN');
      await blocker.query('SELECT id FROM queuebox_inbox WHERE id = $1 FOR UPDATE', [id]);
      return { destination: 'billing', key: message.aggregateId, payload: message.payload };
    };
    const forwarding = relay.runOnce();
    await eventually(
      async () =>
        (
          await db.query(
            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%UPDATE %queuebox_inbox%' AND query LIKE '%processed%'",
          )
        ).length === 1,
      'the relay to wait at its mark',
    );
    await blocker.query('UPDATE queuebox_inbox SET claim_token = gen_random_uuid() WHERE id = $1', [id]);
    await blocker.query('COMMIT');
    await blocker.end();
    await forwarding;
    assert.deepEqual(
      await db.query('SELECT count(*)::int AS n FROM queuebox_outbox'),
      [{ n: 0 }],
      'the insert rolled back with the lost mark',
    );
    assert.ok(t.logger.has('error', 'its outbox insert was rolled back'));
    assert.equal(t.get(QueueBoxMetrics).value('queuebox_claims_lost_total', { component: 'inbox' }), 1);

    // The new owner's lease expires; the reclaim step and the next claim forward it exactly once.
    routeBehaviour = (message) => ({ destination: 'billing', key: message.aggregateId, payload: message.payload });
    await db.query("UPDATE queuebox_inbox SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1", [id]);
    await drainRelay();
    assert.deepEqual(await db.query('SELECT state FROM queuebox_inbox'), [{ state: 'processing' }], 'still leased to the new owner');
    assert.deepEqual(await claimsOf(t).relay.reclaim({ sources: ['orders'], maxAttempts: 3 }), {
      pending: 1,
      dead: 0,
      byName: [{ name: 'orders', pending: 1, dead: 0 }],
    });
    await drainRelay();
    assert.deepEqual(await db.query('SELECT state FROM queuebox_inbox'), [{ state: 'processed' }]);
    assert.deepEqual(await db.query('SELECT message_id FROM queuebox_outbox'), [{ message_id: relay.derivedMessageId(id, 0) }]);
  });

  it('I4: two relay processes forward each aggregate in receive order, never two rows of one aggregate in flight', async () => {
    const AGGREGATES = 30;
    const PER_AGGREGATE = 30;
    for (let seq = 0; seq < PER_AGGREGATE; seq++) {
      await Promise.all(
        Array.from({ length: AGGREGATES }, (_, a) =>
          inbox.receive({ source: 'orders', idempotencyKey: `a${a}-${seq}`, aggregateId: `agg-${a}`, payload: { a, seq } }),
        ),
      );
    }
    const options = { workers: { outbox: false }, inbox: { relay: { concurrency: 8, batchSize: 8, pollIntervalMs: 10 } } };
    const workers: WorkerProcess[] = await Promise.all(['r1', 'r2'].map((name) => startWorker({ dbUrl: db.url, name, options })));
    const doubled: string[] = [];
    try {
      let done = false;
      while (!done) {
        const sample = await db.query<{ aggregate_id: string }>(
          "SELECT aggregate_id FROM queuebox_inbox WHERE state = 'processing' GROUP BY aggregate_id HAVING count(*) > 1",
        );
        doubled.push(...sample.map((r) => r.aggregate_id));
        done = (await db.query("SELECT 1 FROM queuebox_inbox WHERE state <> 'processed' LIMIT 1")).length === 0;
      }
    } finally {
      for (const worker of workers) worker.child.kill('SIGTERM');
      await Promise.all(workers.map((w) => w.exited));
    }
    assert.deepEqual(doubled, []);
    const outbox = await db.query<{ key: string; seq: number }>(
      `SELECT "key", (payload->>'seq')::int AS seq FROM queuebox_outbox ORDER BY id`,
    );
    assert.equal(outbox.length, AGGREGATES * PER_AGGREGATE, 'one outbox row per inbox row');
    const perAggregate = new Map<string, number[]>();
    for (const row of outbox) perAggregate.set(row.key, [...(perAggregate.get(row.key) ?? []), row.seq]);
    const expected = Array.from({ length: PER_AGGREGATE }, (_, i) => i);
    for (const [aggregate, seqs] of perAggregate) assert.deepEqual(seqs, expected, `${aggregate} forwarded in receive order`);
  });

  it('a receive-only service (workers: { outbox: false }, no publisher) starts and handles what it receives; with the outbox worker on it refuses to start', async () => {
    const handled: string[] = [];
    @Injectable()
    class PaymentEvents {
      @PullHandler('payments')
      async handle(message: InboxMessage, { manager }: PullContext) {
        await manager.query('SELECT 1');
        handled.push(message.idempotencyKey);
      }
    }
    await assert.rejects(
      createTestApp(db.url, { pull: { pollIntervalMs: 10 } }, { providers: [PaymentEvents] }),
      (error: unknown) => error instanceof QueueBoxConfigError && /workers: \{ outbox: false \}/.test(error.message),
    );
    const receiving = await createTestApp(
      db.url,
      { workers: { outbox: false }, pull: { pollIntervalMs: 10 } },
      { providers: [PaymentEvents] },
    );
    try {
      await receiving.get(InboxService).receive({ source: 'payments', idempotencyKey: 'pay-1', payload: { amount: 5 } });
      await eventually(async () => handled.length === 1, 'the pull handler to handle the received message');
      assert.deepEqual(handled, ['pay-1']);
      assert.deepEqual(await db.query(`SELECT state FROM queuebox_inbox WHERE idempotency_key = 'pay-1'`), [{ state: 'processed' }]);
    } finally {
      await receiving.app.close();
    }
  });
});
