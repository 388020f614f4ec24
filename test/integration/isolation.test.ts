import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Injectable } from '@nestjs/common';
import { InboxService } from '../../lib/inbox/inbox.service';
import { LeaseService } from '../../lib/lease/lease.service';
import { PullWorker } from '../../lib/pull/pull.worker';
import { type PullBatchContext, type PullContext, PullHandler } from '../../lib/pull/pull-handler.decorator';
import type { InboxMessage } from '../../lib/types/messages';
import { createTestApp } from '../support/app';
import { claimsOf } from '../support/claims';
import { createTestDatabase, type TestDatabase } from '../support/database';

// Issue 24 item 8: QueueBox's own transactions (a pull handler's, a relay forward's) begin at READ
// COMMITTED whatever the DataSource or the database says, and its claims too. Under REPEATABLE
// READ or SERIALIZABLE a handler transaction that spans a renewal (made on another connection)
// failed its fenced completion with a serialization error on every attempt, until the row was dead.

const LEASE_MS = 300;
/** Long enough for two renewals (every third of the lease) to commit while the transaction is open. */
const HANDLER_MS = 450;

@Injectable()
class SlowHandlers {
  @PullHandler('iso-one', { leaseMs: LEASE_MS, maxAttempts: 2, backoff: { initialMs: 1, maxMs: 1, jitter: false } })
  async one(message: InboxMessage, { manager }: PullContext) {
    await manager.query('INSERT INTO ledger (idempotency_key) VALUES ($1)', [message.idempotencyKey]);
    await new Promise((resolve) => setTimeout(resolve, HANDLER_MS));
  }

  @PullHandler('iso-batch', { batch: 10, leaseMs: LEASE_MS, maxAttempts: 2, backoff: { initialMs: 1, maxMs: 1, jitter: false } })
  async batch(messages: InboxMessage[], { manager }: PullBatchContext) {
    for (const message of messages) await manager.query('INSERT INTO ledger (idempotency_key) VALUES ($1)', [message.idempotencyKey]);
    await new Promise((resolve) => setTimeout(resolve, HANDLER_MS));
  }
}

const settings = [
  { name: "the database's default_transaction_isolation = 'repeatable read'", database: 'repeatable read' },
  { name: "the database's default_transaction_isolation = 'serializable'", database: 'serializable' },
  { name: "the DataSource's isolationLevel: 'SERIALIZABLE'", dataSource: 'SERIALIZABLE' as const },
];

describe('QueueBox runs its own transactions and claims at READ COMMITTED (issue 24 item 8)', () => {
  const databases: TestDatabase[] = [];
  after(async () => {
    for (const db of databases) await db.drop();
  });

  for (const setting of settings) {
    it(`pull handlers that span renewals complete on their first attempt under ${setting.name}`, async () => {
      const db = await createTestDatabase();
      databases.push(db);
      await db.query('CREATE TABLE ledger (idempotency_key text PRIMARY KEY)');
      if (setting.database) await db.query(`ALTER DATABASE ${db.name} SET default_transaction_isolation = '${setting.database}'`);
      const t = await createTestApp(db.url, { workers: false }, { providers: [SlowHandlers], isolationLevel: setting.dataSource });
      try {
        const inbox = t.get(InboxService);
        await inbox.receive({ source: 'iso-one', idempotencyKey: 'one', payload: {} });
        await inbox.receive({ source: 'iso-batch', idempotencyKey: 'head', aggregateId: 'a', payload: {} });
        await inbox.receive({ source: 'iso-batch', idempotencyKey: 'follower', aggregateId: 'a', payload: {} });
        const worker = t.get(PullWorker);
        assert.equal(await worker.runOnce('iso-one'), 1);
        assert.equal(await worker.runOnce('iso-batch'), 1);
        const rows = await db.query<{ idempotency_key: string; state: string; attempts: number; last_error: string | null }>(
          'SELECT idempotency_key, state, attempts, last_error FROM queuebox_inbox ORDER BY id',
        );
        assert.deepEqual(
          rows.map((row) => [row.idempotency_key, row.state, row.attempts, row.last_error]),
          [
            ['one', 'processed', 1, null],
            ['head', 'processed', 1, null],
            ['follower', 'processed', 1, null],
          ],
        );
        assert.equal((await db.query('SELECT 1 FROM ledger')).length, 3);
      } finally {
        await t.app.close();
      }
    });
  }

  it("concurrent pull claims under the database's 'serializable' default never fail and never hand out a row twice", async () => {
    const db = await createTestDatabase();
    databases.push(db);
    await db.query(`ALTER DATABASE ${db.name} SET default_transaction_isolation = 'serializable'`);
    const t = await createTestApp(db.url, { workers: false, pull: { sources: ['iso-claims'] } });
    try {
      const lease = t.get(LeaseService);
      const take = claimsOf(t);
      const inbox = t.get(InboxService);
      const claimed: string[] = [];
      for (let round = 0; round < 10; round++) {
        for (let n = 0; n < 8; n++)
          await inbox.receive({ source: 'iso-claims', idempotencyKey: `r${round}-${n}`, aggregateId: `agg${n % 4}`, payload: {} });
        // Four claimers at once, each behind the others' advisory lock: each must see the claims committed before it.
        const batches = await Promise.all(
          Array.from({ length: 4 }, () => take.pull.claimBatch({ source: 'iso-claims', limit: 4, leaseMs: 60_000 })),
        );
        const claims = batches.flat();
        const aggregates = claims.map((claim) => claim.message.aggregateId);
        assert.equal(new Set(aggregates).size, aggregates.length, 'one row per aggregate in flight (I4)');
        for (const claim of claims) {
          claimed.push(claim.id);
          assert.equal(await lease.complete(claim), true);
        }
      }
      assert.equal(new Set(claimed).size, claimed.length, 'no row handed out twice');
    } finally {
      await t.app.close();
    }
  });
});
