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
import { createTestApp, type TestApp } from '../support/app';
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

/** A test app whose connections go through a proxy the test can pause (a silent partition), and what its tests do with it. */
interface PartitionableApp {
  t: TestApp;
  proxy: TcpProxy;
  /** Whether a log line of the app contains `text`. */
  logged(text: string): boolean;
  /**
   * Closes the app while the proxy is paused: waits up to `withinMs` for `done` to be logged (that
   * part of shutdown is over), then heals the partition so that TypeORM's own close, which waits
   * for the connects under way (a pool `connectTimeoutMS` bounds it, as docs/delivery.md advises),
   * ends too. Resolves to the ms from the start of the close to `done`.
   */
  closeInPartition(done: { line: string; what: string; withinMs: number }): Promise<number>;
}

/** Runs `body` with a `PartitionableApp` of `options`; afterwards the partition heals first, so a failed run still closes the app and names its failure. */
async function withPartitionableApp(
  url: string,
  options: Parameters<typeof createTestApp>[1],
  extra: Parameters<typeof createTestApp>[2],
  body: (app: PartitionableApp) => Promise<void>,
): Promise<void> {
  const server = new URL(url);
  const proxy = new TcpProxy({ host: server.hostname, port: Number(server.port || 5432) });
  await proxy.open();
  const t = await createTestApp(proxy.route(url), options, extra);
  let closed = false;
  const logged = (text: string) => t.logger.lines.some((line) => line.message.includes(text));
  try {
    await body({
      t,
      proxy,
      logged,
      async closeInPartition({ line, what, withinMs }) {
        const closing = Date.now();
        const close = t.app.close();
        await eventually(async () => logged(line), what, withinMs);
        const took = Date.now() - closing;
        proxy.resume();
        await close;
        closed = true;
        return took;
      },
    });
  } finally {
    proxy.resume();
    if (!closed) await t.app.close();
    await proxy.cut();
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
    const publisher = new RecordingPublisher();
    const leases = { outbox: { claimTimeoutMs: 1500 }, inbox: { relay: { claimTimeoutMs: 1500 } }, pull: { defaultLeaseMs: 1500 } };
    const options = {
      ...leases,
      workers: { outbox: true, relay: false, pull: false },
      outbox: { ...leases.outbox, publisher, pollIntervalMs: 10 },
    };
    await withPartitionableApp(db.url, options, {}, async ({ t, proxy, logged, closeInPartition }) => {
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
      await eventually(async () => logged('got no answer within 2000 ms'), 'a claim through the partition to time out', 15_000);
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
      await eventually(
        async () => logged('got no database connection within 2000 ms'),
        'a connect through the partition to be given up',
        30_000,
      );
      const took = await closeInPartition({
        line: 'Could not deregister this QueueBox instance',
        what: "QueueBox's shutdown to be done",
        withinMs: 20_000,
      });
      assert.ok(logged('Outbox poller stopped.'), 'the poller stopped');
      assert.ok(took < 15_000, `QueueBox's shutdown took ${took} ms`);
    });
  });
  it('a pull worker renewing a claim through a silent partition: its shutdown does not wait for the renewal that never ends', {
    timeout: 90_000,
  }, async () => {
    const options = {
      workers: { outbox: false, relay: false, pull: true },
      pull: { defaultLeaseMs: 3000, pollIntervalMs: 10, shutdownTimeoutMs: 1000 },
    };
    try {
      await withPartitionableApp(db.url, options, { providers: [HoldingHandler] }, async ({ t, proxy, closeInPartition }) => {
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
        const took = await closeInPartition({
          line: 'Could not deregister this QueueBox instance',
          what: "QueueBox's shutdown to be done",
          withinMs: 30_000,
        });
        assert.ok(took < 20_000, `QueueBox's shutdown took ${took} ms`);
      });
    } finally {
      holding.release.open();
    }
  });
  it('a retention run under way when a silent partition begins: shutdown waits for it no longer than the longest shutdownTimeoutMs', {
    timeout: 90_000,
  }, async () => {
    // Short leases (a 2 s statement bound), so the workers' own shutdown is quick.
    const shutdown = { shutdownTimeoutMs: 1000 };
    const options = {
      workers: { outbox: true, relay: false, pull: false },
      outbox: { ...shutdown, claimTimeoutMs: 1500, publisher: new RecordingPublisher(), pollIntervalMs: 10 },
      inbox: { relay: { ...shutdown, claimTimeoutMs: 1500 } },
      pull: { ...shutdown, defaultLeaseMs: 1500 },
    };
    await withPartitionableApp(db.url, options, {}, async ({ t, proxy, closeInPartition }) => {
      proxy.pause();
      // Retention's statements are not bounded (a batch may take long): this run never ends.
      const run = t.get(RetentionService).runOnce();
      run.catch(() => undefined);
      const took = await closeInPartition({
        line: 'Retention: the batch in progress did not end within 1000 ms',
        what: "retention's stop to give up on the batch",
        withinMs: 20_000,
      });
      assert.ok(took < 15_000, `QueueBox's shutdown and retention's stop took ${took} ms`);
    });
  });
});
