import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { InboxRelay } from '../../lib/inbox/inbox.relay';
import { InboxService } from '../../lib/inbox/inbox.service';
import type { InboxMessage } from '../../lib/lease/claimed-messages';
import { QueueBoxMetrics } from '../../lib/metrics/queuebox.metrics';
import { createTestApp, type TestApp } from '../support/app';
import { createTestDatabase, eventually, type TestDatabase } from '../support/database';
import { gate } from '../support/recording-publisher';

/**
 * Batched forwards (issue 16): routes that finish at the same time share one transaction. Rows
 * inserted by one transaction share their `xmin`, so the distinct `xmin`s of the outbox rows count
 * the transactions that forwarded them, without timing anything.
 */
describe('InboxRelay: forwards ready at the same time share one transaction (PostgreSQL)', () => {
  let db: TestDatabase;
  let t: TestApp;
  let inbox: InboxService;
  let relay: InboxRelay;
  let routed: InboxMessage[];
  let routeBehaviour: (message: InboxMessage) => unknown;

  before(async () => {
    db = await createTestDatabase();
    t = await createTestApp(
      db.url,
      {
        workers: false,
        inbox: {
          relay: {
            routes: {
              orders: (message) => {
                routed.push(message);
                return routeBehaviour(message) as never;
              },
            },
            claimTimeoutMs: 30_000,
            handlerTimeout: 20_000,
            maxAttempts: 3,
            backoff: { initialMs: 1, maxMs: 1, jitter: false },
          },
        },
      },
      { poolSize: 12 },
    );
    inbox = t.get(InboxService);
    relay = t.get(InboxRelay);
  });
  after(async () => {
    await t?.app.close();
    await db?.drop();
  });
  beforeEach(async () => {
    await db.query('TRUNCATE queuebox_inbox, queuebox_outbox');
    routed = [];
    routeBehaviour = (message) => ({ destination: 'billing', key: message.aggregateId, payload: message.payload });
  });

  const drainRelay = async () => {
    while ((await relay.runOnce()) > 0);
  };
  const receive = (count: number, prefix: string) =>
    Promise.all(
      Array.from({ length: count }, (_, i) =>
        inbox.receive({ source: 'orders', idempotencyKey: `${prefix}-${i}`, aggregateId: `agg-${i}`, payload: { i } }),
      ),
    );
  /** Holds every route until `open()`, so the whole claim is routed first and its forwards are ready in one turn. */
  const holdRoutes = () => {
    const hold = gate();
    const inner = routeBehaviour;
    routeBehaviour = async (message) => {
      await hold.promise;
      return inner(message);
    };
    return hold;
  };
  const outboxTransactions = async () =>
    (await db.query<{ n: number }>('SELECT count(DISTINCT xmin::text)::int AS n FROM queuebox_outbox'))[0].n;

  it('forwards many rows with one outbox row set each, in far fewer transactions than rows', async () => {
    const metrics = t.get(QueueBoxMetrics);
    const before = metrics.value('queuebox_inbox_messages_processed_total', { component: 'inbox', source: 'orders' });
    const received = await receive(200, 'many');
    await drainRelay();
    assert.deepEqual(await db.query("SELECT count(*)::int AS n FROM queuebox_inbox WHERE state <> 'processed'"), [{ n: 0 }]);
    const outbox = await db.query<{ message_id: string }>('SELECT message_id FROM queuebox_outbox');
    assert.deepEqual(
      outbox.map((row) => row.message_id).sort(),
      received.map(({ id }) => relay.derivedMessageId(id, 0)).sort(),
      'exactly one outbox row per inbox row',
    );
    // 200 rows, claimed 50 at a time (the default batchSize): a handful of transactions, not 200.
    const transactions = await outboxTransactions();
    assert.ok(transactions <= 20, `200 forwards took ${transactions} transactions`);
    assert.equal(
      metrics.value('queuebox_inbox_messages_processed_total', { component: 'inbox', source: 'orders' }),
      before + 200,
      'each message still counted as processed',
    );
  });

  it('I6: a claim lost in the fence of a batch gets no outbox row; the rest of its batch is forwarded', async () => {
    const received = await receive(10, 'fence');
    const victim = received[3].id;
    const hold = holdRoutes();
    const forwarding = relay.runOnce();
    await eventually(async () => routed.length === 10, 'all ten routes to run');
    // The victim's claim is taken over (as after an expiry and a reclaim) before its batch is written.
    await db.query('UPDATE queuebox_inbox SET claim_token = gen_random_uuid() WHERE id = $1', [victim]);
    hold.open();
    assert.equal(await forwarding, 10);

    const outbox = await db.query<{ message_id: string }>('SELECT message_id FROM queuebox_outbox');
    assert.deepEqual(
      outbox.map((row) => row.message_id).sort(),
      received
        .filter(({ id }) => id !== victim)
        .map(({ id }) => relay.derivedMessageId(id, 0))
        .sort(),
    );
    assert.equal(await outboxTransactions(), 1, 'the nine were forwarded in one transaction with the lost claim');
    assert.deepEqual(await db.query('SELECT state FROM queuebox_inbox WHERE id = $1', [victim]), [{ state: 'processing' }]);
    assert.ok(t.logger.has('error', 'its outbox insert was rolled back'));
  });

  it('a message whose rows cannot be inserted fails only itself; the rest of its batch is forwarded once', async () => {
    const taken = '00000000-0000-4000-8000-000000000001';
    routeBehaviour = () => ({ messageId: taken, destination: 'billing', payload: 'first' });
    await inbox.receive({ source: 'orders', idempotencyKey: 'first', payload: 0 });
    await drainRelay();

    const received = await receive(10, 'dup');
    const duplicate = received[5].id;
    routeBehaviour = (message) => ({
      ...(message.id === duplicate ? { messageId: taken } : {}),
      destination: 'billing',
      key: message.aggregateId,
      payload: message.payload,
    });
    const hold = holdRoutes();
    const forwarding = relay.runOnce();
    await eventually(async () => routed.length === 11, 'all ten routes to run');
    hold.open();
    assert.equal(await forwarding, 10);
    await drainRelay();

    const states = await db.query<{ id: string; state: string; attempts: number; last_error: string | null }>(
      'SELECT id::text, state, attempts, last_error FROM queuebox_inbox ORDER BY id',
    );
    for (const row of states) {
      if (row.id === duplicate) {
        // Retried alone until its attempts are used up, as a single forward that fails is.
        assert.equal(row.state, 'dead');
        assert.equal(row.attempts, 3);
        assert.match(row.last_error ?? '', /failed 3 attempt\(s\); last error: .*duplicate key value violates unique constraint/);
      } else {
        assert.deepEqual({ state: row.state, attempts: row.attempts }, { state: 'processed', attempts: 1 }, `row ${row.id}`);
      }
    }
    const outbox = await db.query<{ message_id: string }>('SELECT message_id FROM queuebox_outbox');
    assert.deepEqual(
      outbox.map((row) => row.message_id).sort(),
      [taken, ...received.filter(({ id }) => id !== duplicate).map(({ id }) => relay.derivedMessageId(id, 0))].sort(),
      'the first message once, each of the nine others once, nothing of the duplicate',
    );
  });
});
