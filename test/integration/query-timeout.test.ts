import assert from 'node:assert/strict';
import { it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { RetentionService } from '../../lib/admin/retention.service';
import { withinTimeout } from '../../lib/common/time-limit';
import { QueueBoxError } from '../../lib/errors/queuebox.errors';
import { InboxService } from '../../lib/inbox/inbox.service';
import { resolveOptions } from '../../lib/options/options.resolver';
import { queryTimeoutFor } from '../../lib/options/query-timeout';
import { OutboxService } from '../../lib/outbox/outbox.service';
import { type PullContext, PullHandler } from '../../lib/pull/pull-handler.decorator';
import { ClaimPauses } from '../../lib/workers/claim-pauses';
import { createTestApp } from '../support/app';
import { claimsOf } from '../support/claims';
import { describeWithDatabase, eventually } from '../support/database';
import { gate, RecordingPublisher } from '../support/recording-publisher';
import { TcpProxy } from '../support/tcp-proxy';

/** Holds its message (and so its claim, renewed meanwhile) until the test lets it go, or shutdown aborts it. */
const holding = { started: gate(), aborted: gate(), release: gate() };

@Injectable()
class HoldingHandler {
  @PullHandler('held')
  async handle(_message: unknown, context: PullContext) {
    holding.started.open();
    context.signal.addEventListener('abort', holding.aborted.open);
    await holding.release.promise;
  }
}

describeWithDatabase("QueueBox's own statements are bounded by a third of the shortest lease", (db) => {
  it('derives the bound from the leases: a third of the shortest, at least 2 s', () => {
    assert.equal(queryTimeoutFor(resolveOptions({ workers: false })), 10_000, 'defaults: 300 s, 300 s, 30 s');
    assert.equal(queryTimeoutFor(resolveOptions({ workers: false, outbox: { claimTimeoutMs: 9000 } })), 3000);
    assert.equal(queryTimeoutFor(resolveOptions({ workers: false, pull: { defaultLeaseMs: 300 } })), 2000);
  });

  it('a claim blocked by a lock fails after the bound instead of hanging, and app.close() finishes', { timeout: 60_000 }, async () => {
    const leases = { outbox: { claimTimeoutMs: 1500 }, inbox: { relay: { claimTimeoutMs: 1500 } }, pull: { defaultLeaseMs: 1500 } };
    const t = await createTestApp(db.url, {
      ...leases,
      workers: { outbox: true, relay: false, pull: false },
      outbox: { ...leases.outbox, publisher: new RecordingPublisher(), pollIntervalMs: 10 },
    });
    const locker = new Client({ connectionString: db.url });
    await locker.connect();
    let closed = false;
    try {
      // Another session holds the outbox table: every claim waits for it (as after a silent
      // partition, where no answer ever comes).
      await locker.query('BEGIN');
      await locker.query('LOCK TABLE queuebox_outbox IN ACCESS EXCLUSIVE MODE');
      await eventually(
        async () =>
          (await db.query("SELECT 1 FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'", [db.name])).length > 0,
        "the poller's claim to wait for the lock",
      );
      await assert.rejects(
        claimsOf(t).outbox.claim({ limit: 1, leaseMs: 1500 }),
        (error: unknown) =>
          error instanceof QueueBoxError && error.code === 'QUEUEBOX_QUERY_TIMEOUT' && /within 2000 ms/.test(error.message),
      );
      // Still locked: the poller's claims keep timing out, and shutdown does not wait for the lock.
      await t.app.close();
      closed = true;
      assert.ok(
        t.logger.lines.some((line) => line.message.includes('got no answer within 2000 ms')),
        'the poller logged the timeout',
      );
    } finally {
      await locker.query('ROLLBACK');
      await locker.end();
      if (!closed) await t.app.close();
    }
  });

  it('a silent partition (sockets open, nothing answered): claims time out, publishing resumes when it heals, shutdown does not wait for it', {
    timeout: 90_000,
  }, async () => {
    const server = new URL(db.url);
    const proxy = new TcpProxy({ host: server.hostname, port: Number(server.port || 5432) });
    await proxy.open();
    const publisher = new RecordingPublisher();
    const leases = { outbox: { claimTimeoutMs: 1500 }, inbox: { relay: { claimTimeoutMs: 1500 } }, pull: { defaultLeaseMs: 1500 } };
    const t = await createTestApp(proxy.route(db.url), {
      ...leases,
      workers: { outbox: true, relay: false, pull: false },
      outbox: { ...leases.outbox, publisher, pollIntervalMs: 10 },
    });
    let closed = false;
    try {
      const outbox = t.get(OutboxService);
      const dataSource = t.get(DataSource);
      await dataSource.transaction((manager) => outbox.enqueue(manager, { destination: 'billing', payload: { n: 1 } }));
      // Due once the partition has begun, so only a claim made through it can publish it.
      await dataSource.transaction((manager) =>
        outbox.enqueue(manager, { destination: 'billing', payload: { n: 2 }, availableAt: new Date(Date.now() + 1000) }),
      );
      await publisher.waitForCalls(1);

      proxy.pause();
      // The claims' read of the pauses is bounded too: unbounded, it held every claim (and shutdown) behind it.
      // A read of the poller's still in flight (answered before the pause) would be shared: this one goes out now.
      t.get(ClaimPauses).invalidate();
      const readingAt = Date.now();
      await assert.rejects(
        t.get(ClaimPauses).names('outbox', 0),
        (error: unknown) => error instanceof QueueBoxError && /got no answer within 2000 ms/.test(error.message),
      );
      assert.ok(Date.now() - readingAt < 10_000, `the pauses read gave up after ${Date.now() - readingAt} ms`);
      await eventually(
        async () => t.logger.lines.some((line) => line.message.includes('got no answer within 2000 ms')),
        'a claim through the partition to time out',
        15_000,
      );
      assert.equal(publisher.calls.length, 1, 'nothing published while the database cannot answer');

      proxy.resume();
      // At least once: the first message may be published again, when its completion was cut off by the partition.
      const published = (n: number) => publisher.delivered.some((message) => (message.payload as { n: number }).n === n);
      await eventually(async () => published(2), 'the second message published once the partition healed', 20_000);

      // Partitioned again, long enough that a claim's connection was discarded and the next one's
      // connect gets no answer either (the pool has no connect timeout of its own): QueueBox gives
      // that wait up too, so its shutdown does not wait for the partition. Unbounded, the connect
      // held the claim loop, and app.close(), for as long as the partition lasted.
      proxy.pause();
      const givenUp = (text: string) => t.logger.lines.some((line) => line.message.includes(text));
      await eventually(
        async () => givenUp('got no database connection within 2000 ms'),
        'a connect through the partition to be given up',
        30_000,
      );
      const closing = Date.now();
      const close = t.app.close();
      await eventually(async () => givenUp('Could not deregister this QueueBox instance'), "QueueBox's shutdown to be done", 20_000);
      assert.ok(givenUp('Outbox poller stopped.'), 'the poller stopped');
      assert.ok(Date.now() - closing < 15_000, `QueueBox's shutdown took ${Date.now() - closing} ms`);
      // What is left is TypeORM's: its pool waits for the connects under way, which the partition
      // never answers (a pool `connectTimeoutMS` bounds it, as docs/delivery.md advises).
      proxy.resume();
      await close;
      closed = true;
    } finally {
      // Healed first, so a failed run still closes the app and names its failure.
      proxy.resume();
      if (!closed) await t.app.close();
      await proxy.cut();
    }
  });
  it('a pull worker renewing a claim through a silent partition: its shutdown does not wait for the renewal that never ends', {
    timeout: 90_000,
  }, async () => {
    const server = new URL(db.url);
    const proxy = new TcpProxy({ host: server.hostname, port: Number(server.port || 5432) });
    await proxy.open();
    const t = await createTestApp(
      proxy.route(db.url),
      {
        workers: { outbox: false, relay: false, pull: true },
        pull: { defaultLeaseMs: 3000, pollIntervalMs: 10, shutdownTimeoutMs: 1000 },
      },
      { providers: [HoldingHandler] },
    );
    let closed = false;
    try {
      await t.get(InboxService).receive({ source: 'held', idempotencyKey: 'k1', payload: {} });
      await holding.started.promise;
      // The claim is renewed every second on the connection set aside for renewals: one of them
      // goes out into the partition and is never answered, so the claim counts as lost (two
      // thirds of the lease later) and the handler's signal aborts. The handler goes on (it
      // ignores its signal), and its transaction could not roll back through the partition anyway.
      proxy.pause();
      await withinTimeout(
        holding.aborted.promise,
        20_000,
        () => new Error('the handler was not aborted'),
        () => undefined,
      );
      const logged = (text: string) => t.logger.lines.some((line) => line.message.includes(text));
      const closing = Date.now();
      const close = t.app.close();
      await eventually(async () => logged('Could not deregister this QueueBox instance'), "QueueBox's shutdown to be done", 30_000);
      assert.ok(Date.now() - closing < 20_000, `QueueBox's shutdown took ${Date.now() - closing} ms`);
      proxy.resume();
      await close;
      closed = true;
    } finally {
      holding.release.open();
      proxy.resume();
      if (!closed) await t.app.close();
      await proxy.cut();
    }
  });
  it('a retention run under way when a silent partition begins: shutdown waits for it no longer than the longest shutdownTimeoutMs', {
    timeout: 90_000,
  }, async () => {
    const server = new URL(db.url);
    const proxy = new TcpProxy({ host: server.hostname, port: Number(server.port || 5432) });
    await proxy.open();
    // Short leases (a 2 s statement bound), so the workers' own shutdown is quick.
    const shutdown = { shutdownTimeoutMs: 1000 };
    const t = await createTestApp(proxy.route(db.url), {
      workers: { outbox: true, relay: false, pull: false },
      outbox: { ...shutdown, claimTimeoutMs: 1500, publisher: new RecordingPublisher(), pollIntervalMs: 10 },
      inbox: { relay: { ...shutdown, claimTimeoutMs: 1500 } },
      pull: { ...shutdown, defaultLeaseMs: 1500 },
    });
    let closed = false;
    try {
      proxy.pause();
      // Retention's statements are not bounded (a batch may take long): this run never ends.
      const run = t.get(RetentionService).runOnce();
      run.catch(() => undefined);
      const logged = (text: string) => t.logger.lines.some((line) => line.message.includes(text));
      const closing = Date.now();
      const close = t.app.close();
      await eventually(
        async () => logged('Retention: the batch in progress did not end within 1000 ms'),
        "retention's stop to give up on the batch",
        20_000,
      );
      assert.ok(Date.now() - closing < 15_000, `QueueBox's shutdown and retention's stop took ${Date.now() - closing} ms`);
      proxy.resume();
      await close;
      closed = true;
    } finally {
      proxy.resume();
      if (!closed) await t.app.close();
      await proxy.cut();
    }
  });
});
