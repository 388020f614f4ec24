import assert from 'node:assert/strict';
import { before, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { QUEUEBOX_DIALECT } from '../../lib/common/queuebox.constants';
import type { Dialect } from '../../lib/dialects/dialect';
import { QueueBoxEvents } from '../../lib/events/queuebox.events';
import { InboxService } from '../../lib/inbox/inbox.service';
import { type PullContext, PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp } from '../support/app';
import { describeWithDatabase, eventually, rewriteRowsInFlight } from '../support/database';
import { deprecationsRaisedByQueueBox, startWorker } from '../support/processes';

// Issue 34 item 7: the pull workers' renewal connection (and the heartbeat, which uses it) sends
// one statement at a time. Claims of one claim statement are due for renewal at the same moment;
// each keeper sending its own renewal put several queries on the connection at once, which
// node-postgres 8 queues with a DeprecationWarning and 9 refuses. The renewals due together now
// go in one statement. scripts/test.mjs fails the run on a DeprecationWarning raised from lib/ in
// any process, this one and the worker below among them (scripts/deprecation-guard.mjs, which
// records each one: the tests read them too).

const LEASE_MS = 1500;
/** Each handler call spans two renewals (every third of the lease) and several heartbeats. */
const HOLD_MS = 1800;
const MESSAGES = 12;

const calls = new Map<string, number>();

@Injectable()
class SlowHandler {
  @PullHandler('renewals', { leaseMs: LEASE_MS, concurrency: MESSAGES, handlerTimeout: 30_000 })
  async handle(message: InboxMessage, { manager }: PullContext) {
    calls.set(message.idempotencyKey, (calls.get(message.idempotencyKey) ?? 0) + 1);
    await manager.query('INSERT INTO ledger (idempotency_key, worker) VALUES ($1, $2)', [message.idempotencyKey, 'in-process']);
    await new Promise((resolve) => setTimeout(resolve, HOLD_MS));
  }
}

describeWithDatabase('the renewal connection runs one statement at a time', (db) => {
  before(async () => {
    await db.query('CREATE TABLE ledger (id serial PRIMARY KEY, aggregate_id text, seq int, idempotency_key text, worker text)');
  });

  it('renews the claims due together in one statement, and heartbeats between statements, never two at once', async () => {
    const t = await createTestApp(
      db.url,
      { workers: { outbox: false, relay: false }, pull: { pollIntervalMs: 10 }, instances: { heartbeatMs: 100, deadAfterMs: 5000 } },
      { providers: [SlowHandler] },
    );
    const lost: unknown[] = [];
    t.get(QueueBoxEvents).on('queuebox:claim-lost', (event) => lost.push(event));
    // Counts what runs on the set-aside connection (the statements given its manager) at once.
    const dialect = t.app.get<Dialect>(QUEUEBOX_DIALECT);
    const batches: number[] = [];
    let heartbeats = 0;
    let running = 0;
    let mostAtOnce = 0;
    const onConnection = async <T>(work: () => Promise<T>): Promise<T> => {
      mostAtOnce = Math.max(mostAtOnce, ++running);
      try {
        return await work();
      } finally {
        running--;
      }
    };
    const renewBatch = dialect.leaseRenewBatch.bind(dialect);
    dialect.leaseRenewBatch = (p) => {
      batches.push(p.claims.length);
      return p.manager ? onConnection(() => renewBatch(p)) : renewBatch(p);
    };
    const heartbeat = dialect.instanceHeartbeat.bind(dialect);
    dialect.instanceHeartbeat = (p) => {
      if (!p.manager) return heartbeat(p);
      heartbeats++;
      return onConnection(() => heartbeat(p));
    };
    // A renewal that waits for a row another transaction holds keeps the connection busy a while:
    // the heartbeats and renewals due meanwhile must wait for it.
    const rewriter = rewriteRowsInFlight(db.url, ['queuebox_inbox'], 150);
    try {
      const inbox = t.get(InboxService);
      for (let n = 0; n < MESSAGES; n++) await inbox.receive({ source: 'renewals', idempotencyKey: `m${n}`, payload: {} });
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_inbox WHERE state <> 'processed' LIMIT 1")).length === 0,
        'every message processed',
      );
    } finally {
      await rewriter.stop();
      await t.app.close();
    }
    assert.deepEqual(deprecationsRaisedByQueueBox(), [], 'node-postgres saw no query sent while another ran');
    assert.equal(mostAtOnce, 1, 'one statement at a time on the connection');
    assert.ok(heartbeats > 0, 'the heartbeat used the connection');
    assert.ok(batches.length > 0, 'claims were renewed');
    assert.ok(Math.max(...batches) > 1, `renewals due together go in one statement (batches: ${batches.join(', ')})`);
    assert.deepEqual(lost, [], 'no claim lost');
    assert.deepEqual(
      [...calls.values()].filter((n) => n !== 1),
      [],
      'each message handled once',
    );
    assert.equal(calls.size, MESSAGES);
  });

  it('in a worker process of its own: every message handled once, no query sent while another ran', { timeout: 60_000 }, async () => {
    const worker = await startWorker({
      dbUrl: db.url,
      name: 'renewing',
      options: { workers: { outbox: false, relay: false }, pull: { pollIntervalMs: 10 }, instances: { heartbeatMs: 100 } },
      pullLeaseMs: LEASE_MS,
    });
    try {
      const producer = await createTestApp(db.url, { workers: false, pull: { sources: ['ledger'] } });
      try {
        // The fixture's "ledger" handler runs 4 at a time; each holds its transaction HOLD_MS.
        for (let n = 0; n < 8; n++) {
          await producer
            .get(InboxService)
            .receive({ source: 'ledger', idempotencyKey: `w${n}`, aggregateId: `a${n}`, payload: { seq: n, holdMs: HOLD_MS } });
        }
      } finally {
        await producer.app.close();
      }
      await eventually(
        async () => (await db.query("SELECT 1 FROM queuebox_inbox WHERE source = 'ledger' AND state <> 'processed' LIMIT 1")).length === 0,
        'every message processed',
      );
    } finally {
      worker.child.kill('SIGTERM');
    }
    await worker.exited;
    assert.deepEqual(deprecationsRaisedByQueueBox(worker.child.pid), [], 'node-postgres saw no query sent while another ran');
    const rows = await db.query<{ idempotency_key: string }>("SELECT idempotency_key FROM ledger WHERE worker = 'renewing'");
    assert.equal(rows.length, 8, 'each message handled once');
    assert.equal(worker.metrics()['queuebox_claims_lost_total{component="pull"}'] ?? 0, 0, 'no claim lost');
  });
});
