import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Client } from 'pg';
import { queryTimeoutFor } from '../../lib/common/query-timeout';
import { QueueBoxError } from '../../lib/errors/queuebox.errors';
import { LeaseService } from '../../lib/lease/lease.service';
import { resolveOptions } from '../../lib/queuebox.options';
import { createTestApp } from '../support/app';
import { createTestDatabase, eventually, type TestDatabase } from '../support/database';
import { RecordingPublisher } from '../support/recording-publisher';

describe("QueueBox's own statements are bounded by a third of the shortest lease (issue 13, item 5)", () => {
  let db: TestDatabase;

  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => {
    await db?.drop();
  });

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
        t.get(LeaseService).claimOutboxBatch({ limit: 1, leaseMs: 1500 }),
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
});
