import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { setTimeout } from 'node:timers/promises';
import { Logger } from '@nestjs/common';
import { Client } from 'pg';
import { QUEUEBOX_DIALECT } from '../../lib/common/queuebox.constants';
import type { Dialect } from '../../lib/dialects/dialect';
import { QueueBoxEvents } from '../../lib/events/queuebox.events';
import { InboxRelay } from '../../lib/inbox/inbox.relay';
import { InboxService } from '../../lib/inbox/inbox.service';
import { type RelayClaim, RelayClaims } from '../../lib/inbox/relay.claims';
import { InboxFollowers } from '../../lib/inbox-runtime/inbox.followers';
import { QueueBoxMetrics } from '../../lib/metrics/queuebox.metrics';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { gate } from '../support/recording-publisher';

/**
 * Batched forwards (issue 16): routes that finish at the same time share one transaction. Rows
 * inserted by one transaction share their `xmin`, so the distinct `xmin`s of the outbox rows count
 * the transactions that forwarded them, without timing anything.
 */
const emptied = { truncate: ['queuebox_inbox', 'queuebox_outbox'] };
describeWithDatabase('InboxRelay: forwards ready at the same time share one transaction (PostgreSQL)', emptied, (db) => {
  let t: TestApp;
  let inbox: InboxService;
  let relay: InboxRelay;
  let routed: InboxMessage[];
  let routeBehaviour: (message: InboxMessage) => unknown;

  before(async () => {
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
  });
  beforeEach(async () => {
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

  it('two forward transactions run at once: a forward held up in the database does not hold up the next', async () => {
    const [first] = await receive(1, 'held');
    const hold = holdRoutes();
    const held = relay.runOnce();
    await eventually(async () => routed.length === 1, 'the first route to run');
    // The first forward's fenced completion will wait for this lock on its head's row.
    const blocker = new Client({ connectionString: db.url });
    await blocker.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query('SELECT id FROM queuebox_inbox WHERE id = $1 FOR UPDATE', [first.id]);
      hold.open();
      await eventually(
        async () =>
          (await db.query("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")).length > 0,
        'the first forward to wait for the row lock',
      );
      routeBehaviour = (message) => ({ destination: 'billing', key: message.aggregateId, payload: message.payload });
      const second = await inbox.receive({ source: 'orders', idempotencyKey: 'next', aggregateId: 'another', payload: {} });
      // Bounded: with one transaction at a time the second forward would wait for the lock too.
      const timer = new AbortController();
      const forwarded = await Promise.race([
        relay.runOnce(),
        setTimeout(10_000, 'still waiting after 10 s', { signal: timer.signal }).catch(() => 'cancelled'),
      ]);
      timer.abort();
      assert.equal(forwarded, 1, 'the second forward commits while the first waits');
      assert.deepEqual(await db.query('SELECT id::text AS id, state FROM queuebox_inbox ORDER BY id'), [
        { id: first.id, state: 'processing' },
        { id: second.id, state: 'processed' },
      ]);
    } finally {
      await blocker.query('ROLLBACK');
      await blocker.end();
    }
    assert.equal(await held, 1);
    assert.deepEqual(await db.query("SELECT count(*)::int AS n FROM queuebox_inbox WHERE state = 'processed'"), [{ n: 2 }]);
  });

  it('a claim takes at most half of batchSize, so that the next is claimed while one is written', async () => {
    await receive(40, 'half');
    assert.equal(await relay.runOnce(), 25, 'half of the default batchSize of 50');
    await drainRelay();
    assert.deepEqual(await db.query('SELECT count(*)::int AS n FROM queuebox_outbox'), [{ n: 40 }]);
  });

  it('a backlog of rows without an aggregate drains claim after claim, without waiting for a poll interval', async () => {
    // Each claim asks for half of batchSize and gets it: that is a full claim, not a short one
    // (after which the relay would sleep pollIntervalMs, a minute here).
    await Promise.all(
      Array.from({ length: 40 }, (_, i) => inbox.receive({ source: 'orders', idempotencyKey: `unkeyed-${i}`, payload: { i } })),
    );
    const running = await createTestApp(db.url, {
      workers: { outbox: false, relay: true, pull: false },
      inbox: {
        relay: {
          routes: { orders: (message) => ({ destination: 'billing', payload: message.payload }) },
          batchSize: 4,
          pollIntervalMs: 60_000,
        },
      },
    });
    try {
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_inbox WHERE state <> 'processed'")).length === 0,
        'the 40 rows to be forwarded',
        10_000,
      );
    } finally {
      await running.app.close();
    }
    assert.deepEqual(await db.query('SELECT count(*)::int AS n FROM queuebox_outbox'), [{ n: 40 }]);
  });

  it('a message whose rows cannot be inserted fails only itself (dead at once: its id is taken); the rest of its batch is forwarded once', async () => {
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
        // Tried alone, then dead-lettered at once: every attempt would collide with the same id.
        assert.equal(row.state, 'dead');
        assert.equal(row.attempts, 1);
        assert.match(row.last_error ?? '', /DuplicateMessageIdError.*which an outbox message already has: dead-lettered at once/);
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

  it('two forward transactions that insert the same two message ids in opposite orders deadlock; the one PostgreSQL aborts is written forward by forward, its messages dead as duplicates', async () => {
    const [x, y] = ['00000000-0000-4000-8000-00000000000a', '00000000-0000-4000-8000-00000000000b'];
    // Before the second row of each insert, a pause: each transaction holds the index entry of its
    // first id while the other inserts it, then asks for its second one, which the other holds.
    await db.query(`CREATE FUNCTION queuebox_test_pause_second() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN IF NEW.payload ? 'second' THEN PERFORM pg_sleep(0.5); END IF; RETURN NEW; END $$`);
    await db.query(`CREATE TRIGGER queuebox_test_pause_second BEFORE INSERT ON queuebox_outbox
      FOR EACH ROW EXECUTE FUNCTION queuebox_test_pause_second()`);
    try {
      const messageIds: Record<string, { messageId: string; payload: object }> = {
        'first-1': { messageId: x, payload: {} },
        'first-2': { messageId: y, payload: { second: true } },
        'second-1': { messageId: y, payload: {} },
        'second-2': { messageId: x, payload: { second: true } },
      };
      routeBehaviour = (message) => ({ destination: 'billing', ...messageIds[message.idempotencyKey] });
      const receiveTwo = async (prefix: string) => {
        for (const n of [1, 2]) await inbox.receive({ source: 'orders', idempotencyKey: `${prefix}-${n}`, payload: {} });
      };
      await receiveTwo('first');
      const firstRoutes = holdRoutes();
      const first = relay.runOnce();
      await eventually(async () => routed.length === 2, 'the first claim to be routed');
      await receiveTwo('second');
      const secondRoutes = holdRoutes();
      const second = relay.runOnce();
      await eventually(async () => routed.length === 4, 'the second claim to be routed');
      firstRoutes.open();
      await eventually(
        async () =>
          (await db.query("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'")).length > 0,
        'the first transaction to pause before its second row',
      );
      secondRoutes.open();
      assert.deepEqual(await Promise.all([first, second]), [2, 2]);
    } finally {
      await db.query('DROP TRIGGER queuebox_test_pause_second ON queuebox_outbox');
      await db.query('DROP FUNCTION queuebox_test_pause_second()');
    }
    const outbox = await db.query<{ message_id: string; xmin: string }>(
      'SELECT message_id, xmin::text FROM queuebox_outbox ORDER BY message_id',
    );
    assert.deepEqual(
      outbox.map((row) => row.message_id),
      [x, y],
    );
    assert.equal(new Set(outbox.map((row) => row.xmin)).size, 1, 'both ids from the transaction that committed');
    const rows = await db.query<{ idempotency_key: string; state: string; last_error: string | null }>(
      'SELECT idempotency_key, state, last_error FROM queuebox_inbox ORDER BY id',
    );
    const won = rows.filter((row) => row.state === 'processed').map((row) => row.idempotency_key);
    assert.ok(won.join() === 'first-1,first-2' || won.join() === 'second-1,second-2', `one transaction's two messages: ${won.join()}`);
    for (const row of rows.filter((row) => row.state !== 'processed')) {
      assert.equal(row.state, 'dead', row.idempotency_key);
      assert.match(row.last_error ?? '', /DuplicateMessageIdError/);
    }
  });

  describe('followers: the rows right after a claimed head of an aggregate go with it', () => {
    const receiveInto = async (keys: string[], aggregate: (n: number) => string) => {
      const ids: string[] = [];
      for (const [n, key] of keys.entries())
        ids.push((await inbox.receive({ source: 'orders', idempotencyKey: key, aggregateId: aggregate(n), payload: { n } })).id);
      return ids;
    };
    const states = () =>
      db.query<{ idempotency_key: string; state: string; attempts: number }>(
        'SELECT idempotency_key, state, attempts FROM queuebox_inbox ORDER BY id',
      );
    /** Each key's outbox payloads in outbox id order (the order the outbox publishes them in). */
    const outboxOrder = async () => {
      const rows = await db.query<{ key: string; n: number }>(`SELECT "key", (payload->>'n')::int AS n FROM queuebox_outbox ORDER BY id`);
      const byKey = new Map<string, number[]>();
      for (const row of rows) byKey.set(row.key, [...(byKey.get(row.key) ?? []), row.n]);
      return Object.fromEntries([...byKey].sort());
    };

    it('forwards each aggregate’s rows after its head in the head’s claim, in order, one attempt each', async () => {
      const metrics = t.get(QueueBoxMetrics);
      const before = metrics.value('queuebox_inbox_messages_processed_total', { component: 'inbox', source: 'orders' });
      // 3 aggregates of 4 rows each, received interleaved.
      await receiveInto(
        Array.from({ length: 12 }, (_, n) => `f${n}`),
        (n) => `agg${n % 3}`,
      );
      assert.equal(await relay.runOnce(), 3, 'one claimed head per aggregate');
      assert.deepEqual(
        (await states()).map((row) => [row.state, row.attempts]),
        Array(12).fill(['processed', 1]),
        'the heads’ followers forwarded with them',
      );
      assert.deepEqual(await outboxOrder(), { agg0: [0, 3, 6, 9], agg1: [1, 4, 7, 10], agg2: [2, 5, 8, 11] });
      assert.equal(await outboxTransactions(), 1);
      assert.equal(metrics.value('queuebox_inbox_messages_processed_total', { component: 'inbox', source: 'orders' }) - before, 12);
    });

    it('a follower whose route throws stays pending, its attempt not counted; it comes again as a head, where its failure counts', async () => {
      routeBehaviour = (message) => {
        if (message.idempotencyKey === 'r2') throw new Error('route says no');
        return { destination: 'billing', key: message.aggregateId, payload: message.payload };
      };
      await receiveInto(['r0', 'r1', 'r2', 'r3'], () => 'one');
      assert.equal(await relay.runOnce(), 1);
      assert.deepEqual(
        (await states()).map((row) => [row.idempotency_key, row.state, row.attempts]),
        [
          ['r0', 'processed', 1],
          ['r1', 'processed', 1],
          ['r2', 'pending', 0],
          ['r3', 'pending', 0],
        ],
        'the head and the follower before the failing one',
      );
      await drainRelay();
      await eventually(async () => {
        await drainRelay();
        return (await states()).every((row) => row.state === 'processed' || row.state === 'dead');
      }, 'r2 dead and r3 forwarded');
      assert.deepEqual(
        (await states()).map((row) => [row.idempotency_key, row.state, row.attempts]),
        [
          ['r0', 'processed', 1],
          ['r1', 'processed', 1],
          ['r2', 'dead', 3],
          ['r3', 'processed', 1],
        ],
      );
      assert.deepEqual(await outboxOrder(), { one: [0, 1, 3] });
    });

    it('a follower whose rows the outbox refuses does not fail its head: the head is forwarded alone', async () => {
      const taken = '00000000-0000-4000-8000-000000000002';
      routeBehaviour = () => ({ messageId: taken, destination: 'billing', payload: 'first' });
      await inbox.receive({ source: 'orders', idempotencyKey: 'taken', payload: 0 });
      await drainRelay();
      routeBehaviour = (message) => ({
        ...(message.idempotencyKey === 'd1' ? { messageId: taken } : {}),
        destination: 'billing',
        key: message.aggregateId,
        payload: message.payload,
      });
      await receiveInto(['d0', 'd1', 'd2'], () => 'dup');
      assert.equal(await relay.runOnce(), 1);
      assert.deepEqual(
        (await states()).slice(1).map((row) => [row.idempotency_key, row.state, row.attempts]),
        [
          ['d0', 'processed', 1],
          ['d1', 'pending', 0],
          ['d2', 'pending', 0],
        ],
      );
      await eventually(async () => {
        await drainRelay();
        return (await states()).every((row) => row.state === 'processed' || row.state === 'dead');
      }, 'd1 dead and d2 forwarded');
      assert.deepEqual(
        (await states()).slice(1).map((row) => [row.idempotency_key, row.state, row.attempts]),
        [
          ['d0', 'processed', 1],
          ['d1', 'dead', 1],
          ['d2', 'processed', 1],
        ],
      );
      assert.deepEqual((await outboxOrder()).dup, [0, 2]);
    });

    it('a follower changed after its read (an operator dead-lettered it): the head goes alone, nothing of the follower is forwarded', async () => {
      const [, changed] = await receiveInto(['c0', 'c1', 'c2'], () => 'changed');
      const hold = holdRoutes();
      const forwarding = relay.runOnce();
      await eventually(async () => routed.length === 1, 'the head’s route to run');
      await db.query("UPDATE queuebox_inbox SET state = 'dead', last_error = 'by hand' WHERE id = $1", [changed]);
      hold.open();
      assert.equal(await forwarding, 1);
      assert.deepEqual(
        (await states()).map((row) => [row.idempotency_key, row.state]),
        [
          ['c0', 'processed'],
          ['c1', 'dead'],
          ['c2', 'pending'],
        ],
      );
      assert.deepEqual(await outboxOrder(), { changed: [0] });
      await drainRelay();
      assert.deepEqual(await outboxOrder(), { changed: [0, 2] });
    });

    it('one claim reads at most half of maxFollowers; 0 forwards every row as a head', async () => {
      const route = (message: InboxMessage) => ({ destination: 'billing', key: message.aggregateId, payload: message.payload });
      const small = await createTestApp(db.url, { workers: false, inbox: { relay: { routes: { orders: route }, maxFollowers: 4 } } });
      const none = await createTestApp(db.url, { workers: false, inbox: { relay: { routes: { orders: route }, maxFollowers: 0 } } });
      try {
        await receiveInto(
          Array.from({ length: 6 }, (_, n) => `s${n}`),
          () => 'small',
        );
        assert.equal(await small.get(InboxRelay).runOnce(), 1);
        assert.deepEqual(
          (await states()).map((row) => row.state),
          ['processed', 'processed', 'processed', 'pending', 'pending', 'pending'],
          'the head and two followers (half of maxFollowers 4)',
        );
        assert.equal(await none.get(InboxRelay).runOnce(), 1);
        assert.deepEqual(
          (await states()).map((row) => row.state),
          ['processed', 'processed', 'processed', 'processed', 'pending', 'pending'],
          'maxFollowers 0: the head alone',
        );
        while ((await small.get(InboxRelay).runOnce()) > 0);
        assert.deepEqual(await outboxOrder(), { small: [0, 1, 2, 3, 4, 5] });
      } finally {
        await small.app.close();
        await none.app.close();
      }
    });

    it('a claim reads at most half of maxFollowers; followers held count until their head is finished', async () => {
      // 8 aggregates of 4 rows, claims of two heads (the relay's loop asks for half of batchSize)
      // and maxFollowers 6: three followers a claim, so two claims' rows can be held at once, and
      // a third claim gets heads but no followers until a claim before it is finished.
      await receiveInto(
        Array.from({ length: 32 }, (_, n) => `h${n}`),
        (n) => `agg${n % 8}`,
      );
      const claims = new RelayClaims(t.app.get<Dialect>(QUEUEBOX_DIALECT), t.get(QueueBoxEvents), {
        reader: new InboxFollowers(t.app.get<Dialect>(QUEUEBOX_DIALECT)),
        maxFollowers: 6,
        logger: new Logger('test'),
      });
      const claim = () => claims.claim({ sources: ['orders'], limit: 2, leaseMs: 30_000 });
      const shape = (heads: RelayClaim[]) => [heads.length, heads.reduce((n, head) => n + head.followers.length, 0)];
      const first = await claim();
      assert.deepEqual(shape(first), [2, 3], 'two heads, three followers (half of maxFollowers 6)');
      assert.deepEqual(shape(await claim()), [2, 3], 'a second claim: the other half');
      assert.deepEqual(shape(await claim()), [2, 0], 'six followers held: heads only');
      for (const head of first) claims.finished(head);
      assert.deepEqual(shape(await claim()), [2, 3], 'the first claim finished: its three followers’ room is free again');
    });

    it('I6 with followers: a head whose claim is lost before the write forwards neither it nor its followers', async () => {
      const [head] = await receiveInto(['l0', 'l1', 'l2'], () => 'lost');
      const hold = holdRoutes();
      const forwarding = relay.runOnce();
      await eventually(async () => routed.length === 1, 'the head’s route to run');
      await db.query('UPDATE queuebox_inbox SET claim_token = gen_random_uuid() WHERE id = $1', [head]);
      hold.open();
      assert.equal(await forwarding, 1);
      assert.deepEqual(await db.query('SELECT 1 FROM queuebox_outbox'), [], 'nothing forwarded');
      assert.deepEqual(
        (await states()).map((row) => [row.idempotency_key, row.state]),
        [
          ['l0', 'processing'],
          ['l1', 'pending'],
          ['l2', 'pending'],
        ],
      );
    });
  });
});
