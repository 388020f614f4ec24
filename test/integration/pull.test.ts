import assert from 'node:assert/strict';
import { after, before, beforeEach, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { HandlerTimeoutError, QueueBoxConfigError, QueueBoxStateError, QueueBoxValidationError } from '../../lib/errors/queuebox.errors';
import { QueueBoxEvents } from '../../lib/events/queuebox.events';
import { InboxService } from '../../lib/inbox/inbox.service';
import { LeaseService } from '../../lib/lease/lease.service';
import { QueueBoxMetrics } from '../../lib/metrics/queuebox.metrics';
import { createLeaseService } from '../../lib/pull/create-pull-client';
import { PullClient } from '../../lib/pull/pull.client';
import { PullWorker } from '../../lib/pull/pull.worker';
import { type PullContext, PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp, type TestApp } from '../support/app';
import { describeWithDatabase, eventually } from '../support/database';
import { startWorker, type WorkerProcess } from '../support/processes';
import { gate } from '../support/recording-publisher';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** What the in-process handler does for each message; set per test. */
let behaviour: (message: InboxMessage, context: PullContext) => Promise<void> = async () => undefined;
const attemptsSeen: number[] = [];

@Injectable()
class LedgerHandler {
  @PullHandler('ledger', { leaseMs: 10_000, maxAttempts: 3, backoff: { initialMs: 5, maxMs: 5, jitter: false } })
  async handle(message: InboxMessage, context: PullContext) {
    attemptsSeen.push(context.attempt);
    await context.manager.query('INSERT INTO ledger (aggregate_id, seq, idempotency_key, worker) VALUES ($1, $2, $3, $4)', [
      message.aggregateId,
      (message.payload as { seq?: number }).seq ?? null,
      message.idempotencyKey,
      'in-process',
    ]);
    await behaviour(message, context);
  }
}

/** The handler of source "timed", with a short handlerTimeout; set per test. */
let timedBehaviour: (message: InboxMessage, context: PullContext) => Promise<void> = async () => undefined;
let timedCalls = 0;

@Injectable()
class TimedHandler {
  @PullHandler('timed', { leaseMs: 10_000, handlerTimeout: 300, maxAttempts: 3, backoff: { initialMs: 1, maxMs: 1, jitter: false } })
  async handle(message: InboxMessage, context: PullContext) {
    timedCalls++;
    await context.manager.query('INSERT INTO ledger (idempotency_key, worker) VALUES ($1, $2)', [
      message.idempotencyKey,
      `attempt ${context.attempt}`,
    ]);
    await timedBehaviour(message, context);
  }
}

describeWithDatabase('pull workers on PostgreSQL', { truncate: ['queuebox_inbox', 'ledger'] }, (db) => {
  let t: TestApp;
  let inbox: InboxService;
  let worker: PullWorker;

  before(async () => {
    await db.query('CREATE TABLE ledger (id serial PRIMARY KEY, aggregate_id text, seq int, idempotency_key text, worker text)');
    t = await createTestApp(db.url, { workers: false, pull: { sources: ['custom'] } }, { providers: [LedgerHandler, TimedHandler] });
    inbox = t.get(InboxService);
    worker = t.get(PullWorker);
  });
  after(async () => {
    await t?.app.close();
  });
  beforeEach(async () => {
    behaviour = async () => undefined;
    attemptsSeen.length = 0;
  });

  const ledger = () =>
    db.query<{ idempotency_key: string; seq: number; worker: string }>('SELECT idempotency_key, seq, worker FROM ledger ORDER BY id');
  const states = () =>
    db.query<{ state: string; attempts: number; last_error: string | null }>(
      'SELECT state, attempts, last_error FROM queuebox_inbox ORDER BY id',
    );

  it('runs the handler in a transaction that also completes the row', async () => {
    await inbox.receive({ source: 'ledger', idempotencyKey: 'e1', aggregateId: 'a', payload: { seq: 1 } });
    assert.equal(await worker.runOnce('ledger'), 1);
    assert.deepEqual(await ledger(), [{ idempotency_key: 'e1', seq: 1, worker: 'in-process' }]);
    assert.deepEqual(
      (await states()).map((r) => r.state),
      ['processed'],
    );
    assert.equal(t.get(QueueBoxMetrics).value('queuebox_inbox_messages_processed_total', { component: 'pull', source: 'ledger' }), 1);
  });

  it('a failing handler rolls back its writes, retries with backoff, hands it the attempt, and ends dead after maxAttempts', async () => {
    behaviour = async () => {
      throw new Error('invoice service said no');
    };
    await inbox.receive({ source: 'ledger', idempotencyKey: 'e2', payload: {} });
    await eventually(async () => {
      await worker.runOnce('ledger');
      return (await states())[0].state === 'dead';
    }, 'the row to be dead');
    assert.deepEqual(attemptsSeen, [1, 2, 3]);
    assert.deepEqual(await ledger(), [], 'every business write was rolled back');
    const [row] = await states();
    assert.equal(row.attempts, 3);
    assert.match(row.last_error ?? '', /failed 3 attempt\(s\); last error: Error: invoice service said no/);
    assert.ok(t.logger.has('warn', 'Rolled back; retrying in 5 ms'));
  });

  it('lost claim: the business write of a handler that outlived its lease rolls back; the row is processed once', async () => {
    const other = await createTestApp(db.url, { workers: false }, { providers: [LedgerHandler] });
    try {
      let taken = false;
      behaviour = async (message) => {
        if (taken) return; // the second owner's run
        taken = true;
        // While this handler is still running, its lease runs out and another worker takes the row.
        await db.query("UPDATE queuebox_inbox SET lease_expires_at = clock_timestamp() - interval '1 second' WHERE id = $1", [message.id]);
        assert.equal(await other.get(PullWorker).runOnce('ledger'), 1);
      };
      await inbox.receive({ source: 'ledger', idempotencyKey: 'e3', aggregateId: 'x', payload: { seq: 3 } });
      await worker.runOnce('ledger');
      assert.equal((await ledger()).length, 1, 'the business table holds the message once');
      assert.deepEqual(
        (await states()).map((r) => [r.state, r.attempts]),
        [['processed', 2]],
      );
      assert.equal(t.get(QueueBoxMetrics).value('queuebox_claims_lost_total', { component: 'pull' }), 1);
      // Nest's Logger is process-wide: the app created last receives every app's lines.
      assert.ok(other.logger.has('error', 'its transaction was rolled back'));
    } finally {
      await other.app.close();
    }
  });

  it('a renewal racing the completion is not counted as a lost claim', async () => {
    // Leases of 600 ms renew every 200 ms; handlers of 0-220 ms finish at every phase of that cycle.
    // (A shorter lease also catches the race, but can expire for real on a loaded 2-core machine.)
    const racing = await createTestApp(
      db.url,
      { workers: false, pull: { defaultLeaseMs: 600, concurrency: 8 } },
      { providers: [RacingHandler] },
    );
    try {
      for (let n = 0; n < 80; n++) await racing.get(InboxService).receive({ source: 'racing', idempotencyKey: `r${n}`, payload: {} });
      while ((await racing.get(PullWorker).runOnce('racing')) > 0);
      assert.deepEqual(await db.query("SELECT state, count(*)::int AS n FROM queuebox_inbox WHERE source = 'racing' GROUP BY state"), [
        { state: 'processed', n: 80 },
      ]);
      assert.equal(racing.get(QueueBoxMetrics).total('queuebox_claims_lost_total'), 0);
    } finally {
      await racing.app.close();
    }
  });

  it('concurrency equal to the pool size does not deadlock, and renewals keep every lease', { timeout: 60_000 }, async () => {
    const tight = await createTestApp(
      db.url,
      { workers: { outbox: false, relay: false, pull: true }, pull: { defaultLeaseMs: 300, concurrency: 3, pollIntervalMs: 10 } },
      { poolSize: 3, providers: [SlowHandler] },
    );
    try {
      assert.ok(tight.logger.has('warn', 'handlers beyond 1 wait for a connection (renewals never do)'));
      for (let n = 0; n < 12; n++) await tight.get(InboxService).receive({ source: 'slow', idempotencyKey: `s${n}`, payload: {} });
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_inbox WHERE source = 'slow' AND state <> 'processed'")).length === 0,
        'every slow message to be processed',
        30_000,
      );
      assert.equal(tight.get(QueueBoxMetrics).total('queuebox_claims_lost_total'), 0, 'handlers of 400 ms outlived no 300 ms lease');
    } finally {
      await tight.app.close();
    }
  });

  it('shutdown waits for a running handler and its commit', async () => {
    const held = gate();
    const running = gate();
    behaviour = async () => {
      running.open();
      await held.promise;
    };
    const app = await createTestApp(db.url, { workers: { outbox: false }, pull: { pollIntervalMs: 10 } }, { providers: [LedgerHandler] });
    await app.get(InboxService).receive({ source: 'ledger', idempotencyKey: 'e4', payload: { seq: 4 } });
    await running.promise;
    let closed = false;
    const closing = app.app.close().then(() => {
      closed = true;
    });
    await sleep(150);
    assert.equal(closed, false, 'close() waits for the handler');
    held.open();
    await closing;
    assert.deepEqual(
      (await states()).map((r) => r.state),
      ['processed'],
      'committed before the DataSource closed',
    );
    assert.equal((await ledger()).length, 1);
  });

  it('a handler throwing a revoked Proxy rolls back and is retried with a last_error, not left processing', async () => {
    const revoked = Proxy.revocable({}, {});
    revoked.revoke();
    behaviour = async () => {
      throw revoked.proxy;
    };
    await inbox.receive({ source: 'ledger', idempotencyKey: 'hostile', payload: {} });
    assert.equal(await worker.runOnce('ledger'), 1);
    const [row] = await states();
    assert.equal(row.state, 'pending');
    assert.match(row.last_error ?? '', /cannot be described/);
    assert.deepEqual(await ledger(), [], 'rolled back');
  });

  // Bounded: without the time limit this test would hang, not fail.
  it('a handler past its handlerTimeout: signal aborted, attempt recorded, transaction never commits, slot held until it ends', {
    timeout: 30_000,
  }, async () => {
    const hold = gate();
    let signal: AbortSignal | undefined;
    timedCalls = 0;
    timedBehaviour = async (_message, context) => {
      signal = context.signal;
      await hold.promise; // ignores its signal
    };
    await inbox.receive({ source: 'timed', idempotencyKey: 'slow', payload: {} });
    let second: Promise<number> | undefined;
    try {
      assert.equal(await worker.runOnce('timed'), 1, 'the attempt ends at the timeout, not when the handler does');
      const [row] = await states();
      assert.equal(row.state, 'pending');
      assert.match(
        row.last_error ?? '',
        /HandlerTimeoutError \[QUEUEBOX_HANDLER_TIMEOUT\]: Pull handler TimedHandler.handle took longer than "handlerTimeout" \(300 ms\)/,
      );
      assert.equal(signal?.aborted, true);
      assert.ok(signal?.reason instanceof HandlerTimeoutError);
      // The retry is claimed again, but its handler waits: the timed-out one still holds the only slot.
      timedBehaviour = async () => undefined;
      second = worker.runOnce('timed');
      await eventually(async () => (await states())[0].attempts === 2, 'the second claim');
      assert.equal(timedCalls, 1, 'no second handler runs while the first still does (concurrency 1)');
    } finally {
      hold.open();
    }
    assert.equal(await second, 1);
    assert.deepEqual(
      (await states()).map((r) => [r.state, r.attempts]),
      [['processed', 2]],
    );
    assert.deepEqual(
      (await db.query<{ worker: string }>("SELECT worker FROM ledger WHERE idempotency_key = 'slow'")).map((r) => r.worker),
      ['attempt 2'],
      'the timed-out attempt rolled back when its handler returned',
    );
  });

  it('PullClient and LeaseService serve custom pull clients: claim, renew, complete in a transaction, retry, dead-letter', async () => {
    const lease = t.get(LeaseService);
    const pull = t.get(PullClient);
    const dataSource = t.app.get<DataSource>(getDataSourceToken());
    assert.equal(await pull.claim('custom', { leaseMs: 1000 }), null, 'nothing to claim');
    await inbox.receive({ source: 'custom', idempotencyKey: 'c1', aggregateId: 'agg', payload: { n: 1 } });
    await inbox.receive({ source: 'custom', idempotencyKey: 'c2', aggregateId: 'agg', payload: { n: 2 } });
    const first = await pull.claim('custom', { leaseMs: 1000 });
    assert.equal(first?.message.idempotencyKey, 'c1');
    assert.equal(first?.component, 'pull');
    assert.equal(await pull.claim('custom', { leaseMs: 1000 }), null, 'c2 waits behind c1 of the same aggregate');
    assert.equal(await lease.renew(first!), true);
    assert.equal(await lease.retry(first!, { delayMs: 0, error: 'try later' }), true);
    const again = await pull.claim('custom', { leaseMs: 100 });
    assert.equal(again?.message.idempotencyKey, 'c1');
    assert.equal(again?.attempt, 2);
    await sleep(150);
    // The client died: its expired claim is taken directly by the next pull claim, no reclaim step.
    const third = await pull.claim('custom', { leaseMs: 1000 });
    assert.equal(third?.message.idempotencyKey, 'c1');
    assert.equal(third?.attempt, 3);
    assert.equal(await lease.complete(again!), false, 'the dead client changes nothing');
    const done = await dataSource.transaction(async (manager) => {
      await manager.query('INSERT INTO ledger (idempotency_key) VALUES ($1)', ['c1']);
      return lease.complete(third!, manager);
    });
    assert.equal(done, true);
    const second = await pull.claim('custom', { leaseMs: 1000 });
    assert.equal(second?.message.idempotencyKey, 'c2');
    assert.equal(await lease.deadLetter(second!, 'not for us'), true);
    assert.deepEqual(
      (await states()).map((r) => r.state),
      ['processed', 'dead'],
    );
  });

  it('PullClient.claim refuses arguments that would make a wrong claim, with a typed error naming the field', async () => {
    const pull = t.get(PullClient);
    await inbox.receive({ source: 'custom', idempotencyKey: 'v1', payload: {} });
    const cases: [string, unknown, string][] = [
      ['custom', { leaseMs: -1000 }, 'leaseMs'],
      ['custom', { leaseMs: 0 }, 'leaseMs'],
      ['custom', { leaseMs: 1.5e3 + 0.5 }, 'leaseMs'],
      ['custom', { leaseMs: Number.POSITIVE_INFINITY }, 'leaseMs'],
      ['custom', { leaseMs: Number.NaN }, 'leaseMs'],
      ['custom', {}, 'leaseMs'],
      ['', { leaseMs: 1000 }, 'source'],
      ['x'.repeat(200), { leaseMs: 1000 }, 'source'],
      ['custom', { leaseMs: 1000, maxAttempts: 0 }, 'maxAttempts'],
    ];
    for (const [source, options, field] of cases) {
      await assert.rejects(pull.claim(source, options as never), (error: unknown) => {
        assert.ok(error instanceof QueueBoxValidationError, String(error));
        assert.equal(error.field, field);
        assert.match(error.message, /Nothing was claimed/);
        return true;
      });
    }
    assert.deepEqual(
      (await states()).map((r) => [r.state, r.attempts]),
      [['pending', 0]],
      'nothing was claimed',
    );
  });

  it('PullClient.claim with maxAttempts dead-letters a message whose claims kept expiring (reported as a reclaim) and claims the next one', async () => {
    const pull = t.get(PullClient);
    const reclaimed: unknown[] = [];
    const stop = t.get(QueueBoxEvents).on('queuebox:reclaimed', (event) => reclaimed.push(event));
    await inbox.receive({ source: 'custom', idempotencyKey: 'poison', payload: {} });
    await inbox.receive({ source: 'custom', idempotencyKey: 'fine', payload: {} });
    for (let attempt = 1; attempt <= 2; attempt++) {
      const claim = await pull.claim('custom', { leaseMs: 60_000, maxAttempts: 2 });
      assert.equal(claim?.message.idempotencyKey, 'poison');
      assert.equal(claim?.attempt, attempt);
      // The client dies holding it: its lease runs out (moved back instead of waited for).
      await db.query("UPDATE queuebox_inbox SET lease_expires_at = now() - interval '1 second' WHERE idempotency_key = 'poison'");
    }
    const next = await pull.claim('custom', { leaseMs: 60_000, maxAttempts: 2 });
    assert.equal(next?.message.idempotencyKey, 'fine', 'the spent message is not handed out a third time');
    const [poison] = await db.query<{ state: string; attempts: number; last_error: string }>(
      "SELECT state, attempts, last_error FROM queuebox_inbox WHERE idempotency_key = 'poison'",
    );
    assert.equal(poison.state, 'dead');
    assert.match(poison.last_error, /lease expired on attempt 2 of 2/);
    stop();
    assert.deepEqual(reclaimed, [{ component: 'pull', name: 'custom', pending: 0, dead: 1 }]);
  });

  it('the removed LeaseService.claim and createLeaseService answer with a typed error naming their replacement', async () => {
    await assert.rejects(t.get(LeaseService).claim('custom', { leaseMs: 1000 }), (error: unknown) => {
      assert.ok(error instanceof QueueBoxStateError, String(error));
      assert.match(error.message, /LeaseService\.claim was removed .* PullClient\.claim\(source/);
      return true;
    });
    await assert.rejects(createLeaseService(t.app.get<DataSource>(getDataSourceToken())), (error: unknown) => {
      assert.ok(error instanceof QueueBoxConfigError, String(error));
      assert.match(error.message, /createLeaseService was removed .* createPullClient\(dataSource, options\)/);
      return true;
    });
  });

  it('refuses two handlers for one source, or a handler for a relayed source, naming both', async () => {
    @Injectable()
    class AnotherLedgerHandler {
      @PullHandler('ledger')
      async handle() {}
    }
    await assert.rejects(
      createTestApp(db.url, { workers: false }, { providers: [LedgerHandler, AnotherLedgerHandler] }),
      (error: unknown) =>
        error instanceof QueueBoxConfigError && /LedgerHandler\.handle and AnotherLedgerHandler\.handle/.test(error.message),
    );
    await assert.rejects(
      createTestApp(db.url, { workers: false, inbox: { relay: { routes: { ledger: () => [] } } } }, { providers: [LedgerHandler] }),
      (error: unknown) => error instanceof QueueBoxConfigError && /both a relay route/.test(error.message),
    );
  });
});

@Injectable()
class RacingHandler {
  @PullHandler('racing', { concurrency: 8 })
  async handle() {
    await sleep(Math.random() * 220);
  }
}

@Injectable()
class SlowHandler {
  @PullHandler('slow')
  async handle(_message: InboxMessage, { manager }: PullContext) {
    await manager.query('SELECT pg_sleep(0.4)');
  }
}

describeWithDatabase('pull workers in separate processes', (db) => {
  let producer: TestApp;

  before(async () => {
    await db.query('CREATE TABLE ledger (id serial PRIMARY KEY, aggregate_id text, seq int, idempotency_key text, worker text)');
    producer = await createTestApp(db.url, { workers: false, pull: { sources: ['ledger'] } });
  });
  after(async () => {
    await producer?.app.close();
  });

  const options = { workers: { outbox: false, relay: false }, pull: { pollIntervalMs: 10 } };

  it('two workers on one source keep per-aggregate order, lose nothing and double nothing', { timeout: 150_000 }, async () => {
    const AGGREGATES = 20;
    const PER_AGGREGATE = 50;
    const workers: WorkerProcess[] = await Promise.all(['p1', 'p2'].map((name) => startWorker({ dbUrl: db.url, name, options })));
    try {
      for (let seq = 0; seq < PER_AGGREGATE; seq++) {
        await Promise.all(
          Array.from({ length: AGGREGATES }, (_, a) =>
            producer
              .get(InboxService)
              .receive({ source: 'ledger', idempotencyKey: `${a}-${seq}`, aggregateId: `agg-${a}`, payload: { seq } }),
          ),
        );
      }
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_inbox WHERE state <> 'processed' LIMIT 1")).length === 0,
        'every message to be processed',
        120_000,
        50,
      );
    } finally {
      for (const w of workers) w.child.kill('SIGTERM');
      await Promise.all(workers.map((w) => w.exited));
    }
    const rows = await db.query<{ aggregate_id: string; seq: number; worker: string }>(
      'SELECT aggregate_id, seq, worker FROM ledger ORDER BY id',
    );
    assert.equal(rows.length, AGGREGATES * PER_AGGREGATE, 'nothing lost, nothing doubled');
    const byAggregate = new Map<string, number[]>();
    for (const row of rows) byAggregate.set(row.aggregate_id, [...(byAggregate.get(row.aggregate_id) ?? []), row.seq]);
    const expected = Array.from({ length: PER_AGGREGATE }, (_, i) => i);
    for (const [aggregate, seqs] of byAggregate) assert.deepEqual(seqs, expected, `${aggregate} in order`);
    assert.deepEqual(new Set(rows.map((r) => r.worker)), new Set(['p1', 'p2']), 'both workers handled messages');
    for (const w of workers) assert.equal(w.metrics()['queuebox_claims_lost_total{component="pull"}'] ?? 0, 0);
  });

  it('a message that kills its worker every time ends dead after maxAttempts, its handler not run again (I8)', {
    timeout: 90_000,
  }, async () => {
    await db.query('TRUNCATE queuebox_inbox, ledger');
    await producer
      .get(InboxService)
      .receive({ source: 'ledger', idempotencyKey: 'poison-1', aggregateId: 'p', payload: { crash: 'in-handler' } });
    const limited = { ...options, pull: { ...options.pull, maxAttempts: 2 } };
    for (const name of ['doomed-1', 'doomed-2']) {
      const doomed = await startWorker({ dbUrl: db.url, name, options: limited, pullLeaseMs: 300, waitReady: false });
      assert.equal(await doomed.exited, 'SIGKILL', `${name} ran the handler and died`);
    }
    const third = await startWorker({ dbUrl: db.url, name: 'third', options: limited, pullLeaseMs: 300 });
    try {
      await Promise.race([
        eventually(async () => (await db.query("SELECT 1 FROM queuebox_inbox WHERE state = 'dead'")).length === 1, 'the dead letter'),
        third.exited.then((how) => assert.fail(`the third worker ran the handler a third time and died (${how})`)),
      ]);
    } finally {
      third.child.kill('SIGTERM');
      await third.exited;
    }
    const [row] = await db.query<{ state: string; attempts: number; last_error: string }>(
      'SELECT state, attempts, last_error FROM queuebox_inbox',
    );
    assert.equal(row.state, 'dead');
    assert.match(row.last_error, /lease expired on attempt 2 of 2/);
    assert.deepEqual(await db.query('SELECT * FROM ledger'), [], 'no handler write ever committed');
    assert.equal(third.metrics()['queuebox_inbox_messages_dead_lettered_total{cause="reclaim",component="pull",source="ledger"}'], 1);
  });

  for (const crash of ['in-handler', 'before-commit'] as const) {
    it(`kill -9 ${crash === 'in-handler' ? 'after the business write' : 'after the completion, before COMMIT'}: neither is visible, and the message is handled again`, {
      timeout: 60_000,
    }, async () => {
      await db.query('TRUNCATE queuebox_inbox, ledger');
      await producer
        .get(InboxService)
        .receive({ source: 'ledger', idempotencyKey: 'crash-1', aggregateId: 'c', payload: { seq: 1, crash } });
      const doomed = await startWorker({ dbUrl: db.url, name: 'doomed', options, pullLeaseMs: 500, waitReady: false });
      assert.equal(await doomed.exited, 'SIGKILL');
      assert.deepEqual(await db.query('SELECT * FROM ledger'), [], 'the business write died with its transaction');
      assert.deepEqual(await db.query('SELECT state FROM queuebox_inbox'), [{ state: 'processing' }], 'the completion died with it');
      // The payload says crash, so every worker dies on it: replace it to let the next one succeed.
      await db.query(`UPDATE queuebox_inbox SET payload = '{"seq": 1}'`);
      const survivor = await startWorker({ dbUrl: db.url, name: 'survivor', options });
      try {
        await eventually(async () => (await db.query("SELECT 1 FROM queuebox_inbox WHERE state = 'processed'")).length === 1, 'the retry');
      } finally {
        survivor.child.kill('SIGTERM');
        await survivor.exited;
      }
      assert.deepEqual(await db.query('SELECT idempotency_key, worker FROM ledger'), [{ idempotency_key: 'crash-1', worker: 'survivor' }]);
      assert.deepEqual(await db.query('SELECT attempts FROM queuebox_inbox'), [{ attempts: 2 }]);
    });
  }
});
