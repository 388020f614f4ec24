import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { ClaimLostError, HandlerTimeoutError, QueueBoxConfigError } from '../../lib/errors/queuebox.errors';
import { InboxService } from '../../lib/inbox/inbox.service';
import { QueueBoxMetrics } from '../../lib/metrics/queuebox.metrics';
import { resolveOptions, resolvePullHandler } from '../../lib/options/options.resolver';
import { PullWorker } from '../../lib/pull/pull.worker';
import { type PullBatchContext, PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { gate } from '../support/recording-publisher';

/** What the batch handler does after its writes; set per test. */
let behaviour: (messages: InboxMessage[], context: PullBatchContext) => Promise<void> = async () => undefined;
/** The idempotency keys of each call, in call order. */
const calls: string[][] = [];

@Injectable()
class BatchLedgerHandler {
  @PullHandler('batched', {
    batch: 50,
    concurrency: 2,
    leaseMs: 10_000,
    maxAttempts: 2,
    backoff: { initialMs: 1, maxMs: 1, jitter: false },
  })
  async handle(messages: InboxMessage[], context: PullBatchContext) {
    calls.push(messages.map((message) => message.idempotencyKey));
    for (const message of messages) {
      // txid_current(): rows written in one transaction share it.
      await context.manager.query('INSERT INTO ledger (aggregate_id, seq, idempotency_key, xid) VALUES ($1, $2, $3, txid_current())', [
        message.aggregateId,
        (message.payload as { seq?: number }).seq ?? null,
        message.idempotencyKey,
      ]);
    }
    await behaviour(messages, context);
  }
}

/** The batch handler of source "batched-timed": handlerTimeout 300 ms, short leases; set per test. */
let timedBehaviour: (messages: InboxMessage[], context: PullBatchContext) => Promise<void> = async () => undefined;

@Injectable()
class TimedBatchHandler {
  @PullHandler('batched-timed', {
    batch: 10,
    leaseMs: 600,
    handlerTimeout: 300,
    maxAttempts: 3,
    backoff: { initialMs: 1, maxMs: 1, jitter: false },
  })
  async handle(messages: InboxMessage[], context: PullBatchContext) {
    for (const message of messages)
      await context.manager.query('INSERT INTO ledger (idempotency_key, xid) VALUES ($1, txid_current())', [message.idempotencyKey]);
    await timedBehaviour(messages, context);
  }
}

/** The batch handler of source "batched-slow" (one batch at a time); set per test. */
let slowBehaviour: (messages: InboxMessage[]) => Promise<void> = async () => undefined;
const slowCalls: string[][] = [];

@Injectable()
class SlowBatchHandler {
  @PullHandler('batched-slow', { batch: 10, concurrency: 1, leaseMs: 10_000 })
  async handle(messages: InboxMessage[]) {
    slowCalls.push(messages.map((message) => message.idempotencyKey));
    await slowBehaviour(messages);
  }
}

/** The idempotency keys of each call of the "batched-poison" handler, which throws whenever a message with `poison` is in its batch. */
const poisonCalls: string[][] = [];

@Injectable()
class PoisonBatchHandler {
  @PullHandler('batched-poison', { batch: 10, leaseMs: 10_000, maxAttempts: 3, backoff: { initialMs: 1, maxMs: 1, jitter: false } })
  async handle(messages: InboxMessage[], { manager }: PullBatchContext) {
    poisonCalls.push(messages.map((message) => message.idempotencyKey));
    for (const message of messages)
      await manager.query('INSERT INTO ledger (aggregate_id, idempotency_key, xid) VALUES ($1, $2, txid_current())', [
        message.aggregateId,
        message.idempotencyKey,
      ]);
    if (messages.some((message) => (message.payload as { poison?: boolean }).poison)) throw new Error('cannot apply the poison message');
  }
}

describeWithDatabase('batch pull handlers on PostgreSQL', { truncate: ['queuebox_inbox', 'ledger'] }, (db) => {
  let t: TestApp;
  let inbox: InboxService;
  let worker: PullWorker;

  before(async () => {
    await db.query('CREATE TABLE ledger (id serial PRIMARY KEY, aggregate_id text, seq int, idempotency_key text, xid bigint)');
    t = await createTestApp(
      db.url,
      { workers: false, pull: { sources: ['batched-slow'] } },
      { providers: [BatchLedgerHandler, TimedBatchHandler, PoisonBatchHandler] },
    );
    inbox = t.get(InboxService);
    worker = t.get(PullWorker);
  });
  after(async () => {
    await t?.app.close();
  });
  beforeEach(async () => {
    behaviour = async () => undefined;
    timedBehaviour = async () => undefined;
    calls.length = 0;
    poisonCalls.length = 0;
  });

  const ledger = () =>
    db.query<{ idempotency_key: string; aggregate_id: string; seq: number; xid: string }>(
      'SELECT idempotency_key, aggregate_id, seq, xid FROM ledger ORDER BY id',
    );
  const states = () =>
    db.query<{ idempotency_key: string; state: string; attempts: number; last_error: string | null }>(
      'SELECT idempotency_key, state, attempts, last_error FROM queuebox_inbox ORDER BY id',
    );
  const receive = async (count: number, aggregate = (n: number) => `a${n}`) => {
    for (let n = 0; n < count; n++)
      await inbox.receive({ source: 'batched', idempotencyKey: `m${n}`, aggregateId: aggregate(n), payload: { seq: n } });
  };

  it('one call gets many messages; its writes and every completion commit in one transaction', async () => {
    await receive(30);
    assert.equal(await worker.runOnce('batched'), 30);
    // One claim statement's 30 rows, shared out over the handler's two free slots.
    assert.deepEqual(
      calls.map((call) => call.length),
      [15, 15],
    );
    const rows = await ledger();
    assert.equal(rows.length, 30, 'a business row per message');
    assert.equal(new Set(rows.map((row) => row.xid)).size, 2, 'each call’s writes in one transaction');
    assert.deepEqual(new Set((await states()).map((row) => row.state)), new Set(['processed']));
    assert.equal(t.get(QueueBoxMetrics).value('queuebox_inbox_messages_processed_total', { component: 'pull', source: 'batched' }), 30);
  });

  it('more messages than one batch: up to `concurrency` batches of `batch` messages, far fewer transactions than messages', async () => {
    await receive(120);
    let claimed = 0;
    while (claimed < 120) {
      const n = await worker.runOnce('batched');
      assert.ok(n > 0);
      claimed += n;
    }
    // 100 rows claimed (concurrency x batch) make two full batches; the last 20 two of 10.
    assert.deepEqual(
      calls.map((call) => call.length),
      [50, 50, 10, 10],
    );
    assert.equal(new Set((await ledger()).map((row) => row.xid)).size, calls.length, 'one transaction per call');
    assert.equal((await ledger()).length, 120);
  });

  it('a handler that throws for every message rolls back every write and completion; each message, run alone, fails and is charged, then is dead after maxAttempts', async () => {
    behaviour = async () => {
      throw new Error('ledger service said no');
    };
    await receive(5);
    assert.equal(await worker.runOnce('batched'), 5);
    assert.deepEqual(await ledger(), [], 'no business row');
    for (const row of await states()) {
      assert.equal(row.state, 'pending');
      assert.equal(row.attempts, 1);
      assert.match(row.last_error ?? '', /ledger service said no/);
    }
    await eventually(async () => {
      await worker.runOnce('batched');
      return (await states()).every((row) => row.state === 'dead');
    }, 'every row dead');
    assert.deepEqual(
      (await states()).map((row) => row.attempts),
      [2, 2, 2, 2, 2],
    );
    assert.deepEqual(await ledger(), []);
    assert.equal(t.get(QueueBoxMetrics).total('queuebox_inbox_messages_dead_lettered_total'), 5);
  });

  it('a claim of the batch lost before the commit: nothing of the batch commits; the other claims are released, then processed once', async () => {
    const other = await createTestApp(db.url, { workers: false }, { providers: [BatchLedgerHandler] });
    try {
      let taken = false;
      behaviour = async (messages) => {
        // Only the batch of m0 and m1 (four rows make two batches); not the other worker's run, nor the retry.
        if (taken || messages[0].idempotencyKey !== 'm0') return;
        taken = true;
        // While the batch runs, the lease of its second message runs out and another worker takes and processes it.
        await db.query("UPDATE queuebox_inbox SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1", [
          messages[1].id,
        ]);
        assert.equal(await other.get(PullWorker).runOnce('batched'), 1);
      };
      await receive(4);
      assert.equal(await worker.runOnce('batched'), 4);
      assert.deepEqual(calls.map((call) => call.join()).sort(), ['m0,m1', 'm1', 'm2,m3'], 'two batches, and the other worker’s call');
      assert.deepEqual(
        (await ledger()).map((row) => row.idempotency_key).sort(),
        ['m1', 'm2', 'm3'],
        'the other worker’s commit and the other batch’s: the lost batch wrote nothing',
      );
      assert.deepEqual(
        (await states()).map((row) => [row.idempotency_key, row.state, row.attempts]),
        [
          ['m0', 'pending', 0],
          ['m1', 'processed', 2],
          ['m2', 'processed', 1],
          ['m3', 'processed', 1],
        ],
        'the claim still held went back to pending, its attempt not counted',
      );
      assert.equal(t.get(QueueBoxMetrics).value('queuebox_claims_lost_total', { component: 'pull' }), 1);
      assert.equal(await worker.runOnce('batched'), 1);
      assert.deepEqual((await ledger()).map((row) => row.idempotency_key).sort(), ['m0', 'm1', 'm2', 'm3'], 'each message once');
    } finally {
      await other.app.close();
    }
  });

  it('keeps per-aggregate order: a batch takes the rows after each claimed head of an aggregate, in id order, and completes them with it', async () => {
    // 3 aggregates of 4 messages each, received interleaved.
    await receive(12, (n) => `agg${n % 3}`);
    const processed = () =>
      t.get(QueueBoxMetrics).value('queuebox_inbox_messages_processed_total', { component: 'pull', source: 'batched' });
    const processedBefore = processed();
    assert.equal(await worker.runOnce('batched'), 3, 'one claimed head per aggregate');
    const aggregateOf = (key: string) => `agg${Number(key.slice(1)) % 3}`;
    // The three heads make two batches (two free slots); each fills with its aggregates' next rows.
    assert.deepEqual(calls.map((call) => call.length).sort(), [4, 8]);
    for (const call of calls) {
      const seqs = call.map((key) => Number(key.slice(1)));
      assert.deepEqual(
        seqs,
        [...seqs].sort((a, b) => a - b),
        `${call.join()} in id order`,
      );
    }
    assert.equal(new Set(calls.flat()).size, 12, 'every message once');
    for (const aggregate of ['agg0', 'agg1', 'agg2'])
      assert.equal(calls.filter((call) => call.some((key) => aggregateOf(key) === aggregate)).length, 1, `${aggregate} in one call`);
    const rows = await states();
    assert.deepEqual(new Set(rows.map((row) => row.state)), new Set(['processed']));
    assert.deepEqual(
      rows.map((row) => row.attempts),
      Array(12).fill(1),
      'one attempt each',
    );
    assert.equal(processed() - processedBefore, 12, 'followers counted as processed too');
  });

  it('takes no row behind one that is not due yet, and no more rows than the batch holds', async () => {
    // a0: m0..m59; a1: m60..m62 of which m61 is not due.
    await receive(63, (n) => (n < 60 ? 'a0' : 'a1'));
    await db.query("UPDATE queuebox_inbox SET available_at = clock_timestamp() + interval '1 hour' WHERE idempotency_key = 'm61'");
    assert.equal(await worker.runOnce('batched'), 2, 'the heads m0 and m60');
    assert.deepEqual(
      calls.map((call) => call.length).sort((a, b) => a - b),
      [1, 50],
      'a0’s head and 49 followers (the batch is 50); a1’s head alone: m61 is not due, so m62 waits too',
    );
    const pending = (await states()).filter((row) => row.state === 'pending').map((row) => row.idempotency_key);
    assert.deepEqual(pending, [...Array.from({ length: 10 }, (_, i) => `m${50 + i}`), 'm61', 'm62']);
  });

  it('a failed batch leaves the followers untouched: pending, their attempt not counted', async () => {
    behaviour = async () => {
      throw new Error('ledger service said no');
    };
    await receive(3, () => 'one');
    assert.equal(await worker.runOnce('batched'), 1);
    assert.deepEqual(calls, [['m0', 'm1', 'm2'], ['m0']], 'the head ran alone before it was charged');
    assert.deepEqual(
      (await states()).map((row) => [row.idempotency_key, row.state, row.attempts]),
      [
        ['m0', 'pending', 1],
        ['m1', 'pending', 0],
        ['m2', 'pending', 0],
      ],
    );
    assert.deepEqual(await ledger(), []);
  });

  describe('a message that fails the batch is the one charged (I1, I8)', () => {
    const poisonStates = async () =>
      Object.fromEntries(
        (
          await db.query<{ idempotency_key: string; state: string; attempts: number }>(
            "SELECT idempotency_key, state, attempts FROM queuebox_inbox WHERE source = 'batched-poison' ORDER BY id",
          )
        ).map((row) => [row.idempotency_key, `${row.state}/${row.attempts}`]),
      );
    const drain = async () => {
      for (let round = 0; round < 20; round++) {
        const rows = await db.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM queuebox_inbox WHERE source = 'batched-poison' AND state IN ('pending', 'processing')",
        );
        if (rows[0].n === 0) return;
        await worker.runOnce('batched-poison');
      }
      assert.fail(`not drained after 20 rounds: ${JSON.stringify(await poisonStates())}`);
    };

    it('a poison follower: its head is processed, the follower dies after its own attempts, the row behind it is processed', async () => {
      for (const [key, poison] of [
        ['H', false],
        ['P', true],
        ['N', false],
      ] as const)
        await inbox.receive({ source: 'batched-poison', idempotencyKey: key, aggregateId: 'one', payload: { poison } });
      await drain();
      assert.deepEqual(await poisonStates(), { H: 'processed/1', P: 'dead/3', N: 'processed/1' });
      assert.deepEqual(
        (await ledger()).map((row) => row.idempotency_key),
        ['H', 'N'],
        'only what committed: H alone, then N behind the dead P',
      );
      assert.deepEqual(poisonCalls[0], ['H', 'P', 'N'], 'the first batch took the followers');
      assert.deepEqual(poisonCalls[1], ['H'], 'then the head alone');
    });

    it('a poison head among the heads of other aggregates: only it is charged; the others are processed on their first attempt', async () => {
      for (let n = 0; n < 4; n++)
        await inbox.receive({ source: 'batched-poison', idempotencyKey: `k${n}`, aggregateId: `agg${n}`, payload: { poison: n === 2 } });
      await drain();
      assert.deepEqual(await poisonStates(), { k0: 'processed/1', k1: 'processed/1', k2: 'dead/3', k3: 'processed/1' });
    });
  });

  it('a follower changed before the commit (an operator’s write) rolls the batch back; its head is released and tried again', async () => {
    let changed = false;
    behaviour = async (messages) => {
      if (changed) return;
      changed = true;
      await db.query("UPDATE queuebox_inbox SET state = 'dead', last_error = 'by hand' WHERE id = $1", [messages[2].id]);
    };
    await receive(3, () => 'one');
    assert.equal(await worker.runOnce('batched'), 1);
    assert.deepEqual(await ledger(), [], 'nothing of the batch committed');
    assert.deepEqual(
      (await states()).map((row) => [row.idempotency_key, row.state, row.attempts]),
      [
        ['m0', 'pending', 0],
        ['m1', 'pending', 0],
        ['m2', 'dead', 0],
      ],
    );
    assert.equal(await worker.runOnce('batched'), 1);
    assert.deepEqual(calls.at(-1), ['m0', 'm1']);
    assert.deepEqual(
      (await ledger()).map((row) => row.idempotency_key),
      ['m0', 'm1'],
    );
  });

  it('a head whose lease ran out during the batch: its followers are handled once, by the new owner', async () => {
    const other = await createTestApp(db.url, { workers: false }, { providers: [BatchLedgerHandler] });
    try {
      let taken = false;
      behaviour = async (messages) => {
        if (taken) return;
        taken = true;
        await db.query("UPDATE queuebox_inbox SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1", [
          messages[0].id,
        ]);
        assert.equal(await other.get(PullWorker).runOnce('batched'), 1, 'the new owner takes the head, and its followers');
      };
      await receive(3, () => 'one');
      assert.equal(await worker.runOnce('batched'), 1);
      assert.deepEqual(calls, [
        ['m0', 'm1', 'm2'],
        ['m0', 'm1', 'm2'],
      ]);
      assert.deepEqual(
        (await ledger()).map((row) => row.idempotency_key),
        ['m0', 'm1', 'm2'],
        'only the new owner’s batch committed',
      );
      assert.deepEqual(
        (await states()).map((row) => [row.idempotency_key, row.state, row.attempts]),
        [
          ['m0', 'processed', 2],
          ['m1', 'processed', 1],
          ['m2', 'processed', 1],
        ],
      );
    } finally {
      await other.app.close();
    }
  });

  it('a batch past its handlerTimeout: signal aborted, nothing commits; run alone, the first message times out too and is charged, the others go back uncharged', async () => {
    const hold = gate();
    let signal: AbortSignal | undefined;
    timedBehaviour = async (_messages, context) => {
      signal = context.signal;
      await hold.promise; // ignores its signal
    };
    for (let n = 0; n < 3; n++) await inbox.receive({ source: 'batched-timed', idempotencyKey: `t${n}`, payload: {} });
    let handlerDone: Promise<unknown> | undefined;
    try {
      assert.equal(await worker.runOnce('batched-timed'), 3, 'the attempt ends at the timeouts');
      const [first, ...rest] = await states();
      assert.deepEqual([first.state, first.attempts], ['pending', 1]);
      assert.match(first.last_error ?? '', /HandlerTimeoutError/);
      for (const row of rest) assert.deepEqual([row.state, row.attempts, row.last_error], ['pending', 0, null]);
      assert.equal(signal?.aborted, true);
      assert.ok(signal?.reason instanceof HandlerTimeoutError);
    } finally {
      hold.open();
      handlerDone = eventually(async () => (await worker.runOnce('batched-timed')) === 3, 'the retry');
    }
    await handlerDone;
    assert.deepEqual(new Set((await states()).map((row) => row.state)), new Set(['processed']));
    assert.equal((await ledger()).length, 3, 'only the retry committed');
  });

  it('a renewal that fails aborts the batch’s signal; nothing commits and the claims still held are released', async () => {
    let signal: AbortSignal | undefined;
    timedBehaviour = async (messages, context) => {
      if (signal) return; // the retry
      signal = context.signal;
      // Another owner now: the next renewal (every 200 ms) of the first message changes nothing.
      await db.query('UPDATE queuebox_inbox SET claim_token = gen_random_uuid() WHERE id = $1', [messages[0].id]);
      await new Promise((resolve) => context.signal.addEventListener('abort', resolve));
    };
    for (let n = 0; n < 3; n++) await inbox.receive({ source: 'batched-timed', idempotencyKey: `r${n}`, payload: {} });
    const lostBefore = t.get(QueueBoxMetrics).total('queuebox_claims_lost_total');
    assert.equal(await worker.runOnce('batched-timed'), 3);
    assert.ok(signal?.reason instanceof ClaimLostError);
    assert.deepEqual(await ledger(), [], 'nothing of the batch committed');
    assert.deepEqual(
      (await states()).map((row) => [row.idempotency_key, row.state, row.attempts]),
      [
        ['r0', 'processing', 1],
        ['r1', 'pending', 0],
        ['r2', 'pending', 0],
      ],
      'the lost row is left to its owner; the others are released',
    );
    assert.equal(t.get(QueueBoxMetrics).total('queuebox_claims_lost_total') - lostBefore, 1);
  });

  it('shutdown that stops waiting: claims still waiting for a batch slot are not handed to the handler', { timeout: 60_000 }, async () => {
    const hold = gate();
    const running = gate();
    slowCalls.length = 0;
    slowBehaviour = async () => {
      running.open();
      await hold.promise;
    };
    for (let n = 0; n < 3; n++) await inbox.receive({ source: 'batched-slow', idempotencyKey: `first${n}`, payload: {} });
    const app = await createTestApp(
      db.url,
      { workers: { outbox: false, relay: false, pull: true }, pull: { pollIntervalMs: 10, shutdownTimeoutMs: 100 } },
      { providers: [SlowBatchHandler] },
    );
    let closing: Promise<void> | undefined;
    try {
      await running.promise;
      // Claimed while the first batch holds the only slot: they wait for it. One transaction, so
      // one claim takes all five: after a claim the loop claims again only while it holds at most
      // half its batch size (5 of 10), so 3 + part of them would leave the rest unclaimed.
      const received = app.get(InboxService);
      await app.get(DataSource).transaction(async (manager) => {
        for (let n = 0; n < 5; n++) await received.receive({ source: 'batched-slow', idempotencyKey: `second${n}`, payload: {} }, manager);
      });
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_inbox WHERE source = 'batched-slow' AND state = 'processing'")).length === 8,
        'the second messages claimed',
      );
      closing = app.app.close();
      await eventually(async () => app.logger.has('warn', 'shutdown timeout reached'), 'shutdown to stop waiting');
    } finally {
      // Also when a wait above failed: a handler held forever would keep the app, and the test process, from ending.
      hold.open();
      await (closing ?? app.app.close());
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.deepEqual(slowCalls, [['first0', 'first1', 'first2']], 'only the batch that ran before shutdown');
  });

  it('a running worker drains a backlog in batches', { timeout: 60_000 }, async () => {
    // Received before the worker starts: received one by one while it runs, each would wake it for a batch of one.
    await receive(300);
    const running = await createTestApp(
      db.url,
      { workers: { outbox: false, relay: false, pull: true }, pull: { pollIntervalMs: 10 } },
      { providers: [BatchLedgerHandler] },
    );
    try {
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_inbox WHERE state <> 'processed'")).length === 0,
        'every message processed',
        30_000,
      );
      assert.ok(calls.length < 60, `${calls.length} calls for 300 messages`);
      assert.ok(Math.max(...calls.map((call) => call.length)) > 1, 'some call got several messages');
      assert.equal((await ledger()).length, 300);
    } finally {
      await running.app.close();
    }
  });
});

describe('the batch option', () => {
  const defaults = resolveOptions({ workers: false }).pull;
  const where = '@PullHandler("s") on A.b';

  it('accepts an integer from 1 to 1000; undefined means one message per call', () => {
    assert.equal(resolvePullHandler(where, { batch: 1 }, defaults).batch, 1);
    assert.equal(resolvePullHandler(where, { batch: 1000 }, defaults).batch, 1000);
    assert.equal(resolvePullHandler(where, {}, defaults).batch, undefined);
  });

  for (const batch of [0, 1001, 2.5, '10', -1, null]) {
    it(`refuses batch ${JSON.stringify(batch)} with a QueueBoxConfigError naming the option`, () => {
      assert.throws(
        () => resolvePullHandler(where, { batch: batch as number }, defaults),
        (error: unknown) => error instanceof QueueBoxConfigError && error.message.includes(`${where}.batch`),
      );
    });
  }
});

// Compile-time: the batch form only decorates `(messages: InboxMessage[], context: PullBatchContext)`.
// (Never registered as a provider: only the compiler reads these.)
class WronglyTypedBatchHandlers {
  // @ts-expect-error -- one message is not the batch form's first parameter
  @PullHandler('typed', { batch: 5 })
  async one(_message: InboxMessage, _context: PullBatchContext) {}

  @PullHandler('typed', { batch: 5 })
  async many(_messages: InboxMessage[], _context: PullBatchContext) {}
}
void WronglyTypedBatchHandlers;
