import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import type { EntityManager } from 'typeorm';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { RetentionService } from '../../lib/admin/retention.service';
import type { Dialect, InboxInsertRow } from '../../lib/dialects/dialect';
import { QueueBoxEvents } from '../../lib/events/queuebox.events';
import type { LeaseService } from '../../lib/lease/lease.service';
import { QueueBoxMetrics } from '../../lib/metrics/queuebox.metrics';
import { resolveOptions, resolveTables } from '../../lib/options/options.resolver';
import { toOutboxRows } from '../../lib/outbox/outbox-rows';
import { createDialect } from '../../lib/queuebox.dialect';
import type { InboxClaim, OutboxClaim } from '../../lib/types/claims';
import type { OutboxMessageInput } from '../../lib/types/outbox';
import { FollowersChangedError } from '../../lib/workers/inbox-followers';
import { claimsOver, type TestClaims } from '../support/claims';
import { CONFORMANCE_TABLES, type ConformanceDatabase, type DialectHarness, HARNESSES } from './harness';

// One suite for the dialect seam, run against every configured dialect (in the spirit of River's
// driver tests): claims, fences, order, dedupe, relay rollback and pull transactions, through the
// Dialect interface and LeaseService only. PostgreSQL always runs; SQL Server when
// QUEUEBOX_MSSQL_URL names a server.

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const LONG = 60_000;

for (const harness of HARNESSES) {
  describe(`dialect conformance: ${harness.name}`, harness.skip ? { skip: harness.skip } : {}, () => conformance(harness));
}

/** What a reclaim did, without its per-name breakdown. */
const counts = ({ pending, dead }: { pending: number; dead: number }) => ({ pending, dead });

function conformance(harness: DialectHarness) {
  let db: ConformanceDatabase;
  let dialect: Dialect;
  let lease: LeaseService;
  let take: TestClaims;
  let metrics: QueueBoxMetrics;

  before(async () => {
    db = await harness.open();
    dialect = createDialect(db.dataSource, resolveTables(CONFORMANCE_TABLES));
    await dialect.schemaCheck();
  });
  after(async () => {
    await db?.close();
  });
  beforeEach(async () => {
    await db.reset();
    const events = new QueueBoxEvents();
    metrics = new QueueBoxMetrics(events);
    take = claimsOver(dialect, events);
    lease = take.lease;
  });

  const enqueue = (...messages: Partial<OutboxMessageInput>[]) =>
    db.dataSource.transaction((manager) =>
      dialect.outboxInsert({
        manager,
        rows: toOutboxRows(
          messages.map((m) => ({ destination: 'd', payload: {}, ...m })),
          1_000_000,
        ),
      }),
    );
  const receive = (row: Partial<InboxInsertRow> & { idempotencyKey: string }) =>
    dialect.inboxInsertIfAbsent({ row: { source: 'orders', aggregateId: null, payloadJson: '{}', headersJson: '{}', ...row } });
  const claimOutbox = (limit: number, leaseMs = LONG) => take.outbox.claim({ limit, leaseMs });
  const keysOf = (claims: OutboxClaim[]) => claims.map((c) => `${c.message.key}:${(c.message.payload as { n: number }).n}`);
  /**
   * Runs `work` while another transaction stays open, and rolls that one back afterwards; `work`
   * gets its manager to write rows that stay uncommitted (and, with READ_COMMITTED_SNAPSHOT OFF
   * on SQL Server, X-locked) while it runs.
   */
  const whileOpen = async (work: (open: EntityManager) => Promise<void>) => {
    const open = db.dataSource.createQueryRunner();
    await open.connect();
    await open.startTransaction();
    try {
      await work(open.manager);
    } finally {
      if (open.isTransactionActive) await open.rollbackTransaction();
      await open.release();
    }
  };
  /** How long `work` took, in ms, with its result. */
  const timed = async <T>(work: () => Promise<T>): Promise<[T, number]> => {
    const started = Date.now();
    const result = await work();
    return [result, Date.now() - started];
  };

  describe('claims and fences', () => {
    it('claims with a new token and a lease by the database clock, counting the claim as an attempt', async () => {
      const [{ id, messageId }] = await enqueue({ key: 'k', payload: { n: 1, text: 'zäh 💡' }, headers: { 'X-Trace': 't1' } });
      const dbNow = await dialect.clockNow();
      const [claim] = await claimOutbox(10);
      assert.equal(claim.id, id);
      assert.equal(claim.attempt, 1);
      assert.equal(claim.message.messageId, messageId);
      assert.deepEqual(claim.message.payload, { n: 1, text: 'zäh 💡' });
      assert.equal(claim.message.headers['X-Trace'], 't1');
      const leaseLeft = claim.leaseExpiresAt.getTime() - dbNow.getTime();
      assert.ok(leaseLeft > LONG - 2000 && leaseLeft < LONG + 2000, `lease ends ${leaseLeft} ms after the database's now`);
      assert.deepEqual(await db.row('outbox', id), { state: 'processing', claimToken: claim.token, attempts: 1, lastError: null });
      assert.deepEqual(await claimOutbox(10), [], 'a claimed row is not claimed twice');
    });

    it('inserts a batch in input order, and does not claim a row before its availableAt', async () => {
      const later = new Date(Date.now() + 3_600_000);
      const results = await enqueue({ payload: { n: 1 } }, { payload: { n: 2 }, availableAt: later }, { payload: { n: 3 } });
      const ids = results.map((r) => BigInt(r.id));
      assert.ok(ids[0] < ids[1] && ids[1] < ids[2], `ids follow the input: ${ids}`);
      const claims = await claimOutbox(10);
      assert.deepEqual(
        claims.map((c) => c.id),
        [results[0].id, results[2].id],
      );
    });

    it('I3: a zombie whose lease expired and whose row was claimed again changes nothing', async () => {
      const [{ id }] = await enqueue({ key: 'k' });
      const [zombie] = await claimOutbox(1, 150);
      await sleep(250);
      assert.deepEqual(counts(await take.outbox.reclaim({ maxAttempts: 10 })), { pending: 1, dead: 0 });
      const [owner] = await claimOutbox(1);
      assert.equal(owner.id, id);
      assert.notEqual(owner.token, zombie.token);
      assert.equal(await lease.renew(zombie), false);
      assert.equal(await lease.complete(zombie), false);
      assert.equal(await lease.retry(zombie, { delayMs: 0, error: new Error('zombie') }), false);
      assert.equal(await lease.deadLetter(zombie, 'zombie'), false);
      assert.equal(await dialect.leaseRelease({ table: 'outbox', id, token: zombie.token }), false);
      assert.deepEqual(await dialect.leaseCompleteBatch({ table: 'outbox', claims: [{ id, token: zombie.token }] }), new Set());
      const row = await db.row('outbox', id);
      assert.equal(row.state, 'processing');
      assert.equal(row.claimToken, owner.token, 'the new owner keeps the row');
      assert.equal(metrics.value('queuebox_claims_lost_total', { component: 'outbox' }), 1, 'counted once per lost claim');
      assert.equal(await lease.complete(owner), true);
      assert.equal((await db.row('outbox', id)).state, 'sent');
    });

    it('I3: an expired lease fails the fence before anyone reclaims the row', async () => {
      await enqueue({});
      const [claim] = await claimOutbox(1, 100);
      await sleep(200);
      assert.equal(await lease.renew(claim), false);
      assert.equal(await lease.complete(claim), false);
      assert.equal((await db.row('outbox', claim.id)).state, 'processing');
    });

    it('renew moves the lease forward by the database clock and keeps the claim past its first lease', async () => {
      await enqueue({});
      const [claim] = await claimOutbox(1, 300);
      const first = claim.leaseExpiresAt.getTime();
      for (let i = 0; i < 4; i++) {
        await sleep(100);
        assert.equal(await lease.renew(claim), true);
      }
      assert.ok(claim.leaseExpiresAt.getTime() > first + 300, 'the lease moved forward');
      assert.equal(await lease.complete(claim), true);
    });

    it('retry returns the row to pending after its delay with the error recorded; dead-letter ends it', async () => {
      const [{ id }] = await enqueue({});
      const [claim] = await claimOutbox(1);
      assert.equal(await lease.retry(claim, { delayMs: LONG, error: new Error('broker down') }), true);
      assert.deepEqual(await db.row('outbox', id), { state: 'pending', claimToken: null, attempts: 1, lastError: 'Error: broker down' });
      assert.deepEqual(await claimOutbox(1), [], 'not available before the delay');
      await db.makeAvailable('outbox');
      const [again] = await claimOutbox(1);
      assert.equal(again.attempt, 2);
      assert.equal(await lease.deadLetter(again, 'gave up'), true);
      assert.deepEqual(await db.row('outbox', id), { state: 'dead', claimToken: again.token, attempts: 2, lastError: 'gave up' });
    });

    it('completes a batch with one fenced statement, and gives back an unstarted claim without counting its attempt', async () => {
      await enqueue({ payload: { n: 1 } }, { payload: { n: 2 } }, { payload: { n: 3 } });
      const claims = await claimOutbox(3);
      const done = await dialect.leaseCompleteBatch({
        table: 'outbox',
        claims: [claims[0], claims[1]].map((c) => ({ id: c.id, token: c.token })),
      });
      assert.deepEqual(done, new Set([claims[0].id, claims[1].id]));
      assert.equal(await db.count('outbox', 'sent'), 2);
      assert.equal(await dialect.leaseRelease({ table: 'outbox', id: claims[2].id, token: claims[2].token }), true);
      assert.deepEqual(await db.row('outbox', claims[2].id), { state: 'pending', claimToken: null, attempts: 0, lastError: null });
    });

    it('a batch completed in a transaction commits with it, and rolls back with it', async () => {
      await enqueue({ payload: { n: 1 } }, { payload: { n: 2 } });
      const claims = await claimOutbox(2);
      const rollback = new Error('the work failed');
      await assert.rejects(
        db.dataSource.transaction(async (manager) => {
          assert.equal((await lease.completeBatch(claims, manager)).size, 2);
          throw rollback;
        }),
        rollback,
      );
      assert.equal(await db.count('outbox', 'sent'), 0, 'rolled back with the transaction');
      const done = await db.dataSource.transaction((manager) => lease.completeBatch(claims, manager));
      assert.deepEqual(done, new Set(claims));
      assert.equal(await db.count('outbox', 'sent'), 2);
    });

    it('I7: a fence evaluated late in a long transaction uses the current time, not the transaction start', async () => {
      await enqueue({});
      const [claim] = await claimOutbox(1, 300);
      const completed = await db.dataSource.transaction(async (manager) => {
        await manager.query('SELECT 1'); // the transaction has begun
        await sleep(450);
        return lease.complete(claim, manager);
      });
      assert.equal(completed, false, 'the lease expired while the transaction ran');
      assert.equal((await db.row('outbox', claim.id)).state, 'processing');
    });

    it('I8: the reclaim step returns expired claims to pending, and dead-letters one that expired on its last attempt', async () => {
      const [{ id }] = await enqueue({});
      for (let attempt = 1; attempt <= 3; attempt++) {
        const [claim] = await claimOutbox(1, 50);
        assert.equal(claim.attempt, attempt);
        await sleep(100);
        assert.deepEqual(
          counts(await take.outbox.reclaim({ maxAttempts: 3 })),
          attempt < 3 ? { pending: 1, dead: 0 } : { pending: 0, dead: 1 },
        );
      }
      const row = await db.row('outbox', id);
      assert.equal(row.state, 'dead');
      assert.match(row.lastError ?? '', /lease expired on attempt 3 of 3/);
    });
  });

  describe('order (I4)', () => {
    it('claims only the head of each key, one row per key in flight; the next row once the head is finished', async () => {
      await enqueue(
        { key: 'a', payload: { n: 1 } },
        { key: 'a', payload: { n: 2 } },
        { key: 'b', payload: { n: 1 } },
        { key: null, payload: { n: 1 } },
        { key: null, payload: { n: 2 } },
      );
      const first = await claimOutbox(10);
      assert.deepEqual(keysOf(first), ['a:1', 'b:1', 'null:1', 'null:2']);
      assert.deepEqual(await claimOutbox(10), [], 'a:2 waits while a:1 is in flight');
      assert.equal(await lease.complete(first[0]), true);
      assert.deepEqual(keysOf(await claimOutbox(10)), ['a:2']);
    });

    it('a failing row blocks its key until it is sent or dead', async () => {
      await enqueue({ key: 'a', payload: { n: 1 } }, { key: 'a', payload: { n: 2 } });
      const [head] = await claimOutbox(10);
      assert.equal(await lease.retry(head, { delayMs: LONG, error: 'down' }), true);
      assert.deepEqual(await claimOutbox(10), [], 'a:2 does not overtake the failing a:1');
      await db.makeAvailable('outbox');
      const [again] = await claimOutbox(10);
      assert.deepEqual(keysOf([again]), ['a:1']);
      assert.equal(await lease.deadLetter(again, 'poison'), true);
      assert.deepEqual(keysOf(await claimOutbox(10)), ['a:2'], 'a dead row unblocks its key');
    });

    it('concurrent claimers racing concurrent producers never run two rows of a key at once, and keep each producer’s order', async () => {
      const keys = ['k0', 'k1', 'k2', 'k3'];
      const producers = 3;
      const perProducer = 6;
      const total = keys.length * producers * perProducer;
      // Each producer commits its messages one by one, so per (key, producer) commit order is id order.
      const producing = Array.from({ length: producers }, async (_, producer) => {
        for (let n = 0; n < perProducer; n++) {
          await enqueue(...keys.map((key) => ({ key, payload: { producer, n } })));
        }
      });
      const inFlight = new Set<string>();
      const seen = new Map<string, number[]>();
      const violations: string[] = [];
      let completed = 0;
      const deadline = Date.now() + 30_000;
      const claimer = async () => {
        while (completed < total && Date.now() < deadline) {
          const claims = await claimOutbox(3);
          if (claims.length === 0) await sleep(5);
          await Promise.all(
            claims.map(async (claim) => {
              const key = claim.message.key as string;
              if (inFlight.has(key)) violations.push(`two rows of ${key} in flight`);
              inFlight.add(key);
              const { producer, n } = claim.message.payload as { producer: number; n: number };
              seen.set(`${key}/${producer}`, [...(seen.get(`${key}/${producer}`) ?? []), n]);
              await sleep(Math.random() * 5);
              inFlight.delete(key); // before the completion commits, so a next claim of the key is never a false alarm
              assert.equal(await lease.complete(claim), true);
              completed++;
            }),
          );
        }
      };
      await Promise.all([...producing, claimer(), claimer(), claimer(), claimer()]);
      assert.deepEqual(violations, []);
      assert.equal(completed, total, 'every message was claimed once');
      for (const [stream, order] of seen) {
        assert.deepEqual(
          order,
          Array.from({ length: perProducer }, (_, n) => n),
          `${stream} in enqueue order`,
        );
      }
    });
  });

  describe('inbox: dedupe (I5) and the relay (I6)', () => {
    it('I5: concurrent receives of one key store one row, in transactions or not; the others report the stored id', async () => {
      const inTransactions = await Promise.all(
        Array.from({ length: 20 }, (_, n) =>
          db.dataSource.transaction((manager) =>
            dialect.inboxInsertIfAbsent({
              row: { source: 'orders', idempotencyKey: 'e1', aggregateId: 'o1', payloadJson: JSON.stringify({ n }), headersJson: '{}' },
              manager,
            }),
          ),
        ),
      );
      const plain = await Promise.all(Array.from({ length: 20 }, () => receive({ idempotencyKey: 'e2' })));
      for (const results of [inTransactions, plain]) {
        const stored = results.filter((r) => !r.duplicate);
        assert.equal(stored.length, 1, 'exactly one receive stored the message');
        assert.ok(
          results.every((r) => r.id === stored[0].id),
          'duplicates report the stored row id',
        );
      }
      assert.equal(await db.count('inbox'), 2);
      assert.deepEqual(await receive({ idempotencyKey: 'e1' }), { id: inTransactions.find((r) => !r.duplicate)?.id, duplicate: true });
    });

    it('keys that differ only in case, accents or trailing spaces are distinct keys, never duplicates (issue 14)', async () => {
      const upper = await receive({ idempotencyKey: 'evt_A' });
      const lower = await receive({ idempotencyKey: 'evt_a' });
      const accent = await receive({ idempotencyKey: 'evt_á' });
      assert.deepEqual([upper.duplicate, lower.duplicate, accent.duplicate], [false, false, false]);
      assert.equal(new Set([upper.id, lower.id, accent.id]).size, 3);
      if (harness.name === 'SQL Server') {
        // SQL Server's = ignores trailing spaces under every collation: refused rather than merged.
        await assert.rejects(receive({ idempotencyKey: 'evt_a ' }), { code: 'QUEUEBOX_INVALID_MESSAGE' });
      } else {
        assert.equal((await receive({ idempotencyKey: 'evt_a ' })).duplicate, false);
      }
      // Outbox keys and destinations: two keys in flight at once, each its own head.
      await enqueue({ key: 'K', payload: { n: 1 } }, { key: 'k', payload: { n: 2 } }, { key: 'K', payload: { n: 3 } });
      assert.deepEqual(keysOf(await claimOutbox(10)).sort(), ['K:1', 'k:2']);
    });

    it('a receive in a transaction that rolls back stores nothing', async () => {
      await assert.rejects(
        db.dataSource.transaction(async (manager) => {
          await dialect.inboxInsertIfAbsent({
            row: { source: 'orders', idempotencyKey: 'e3', aggregateId: null, payloadJson: '1', headersJson: '{}' },
            manager,
          });
          throw new Error('handler failed');
        }),
        /handler failed/,
      );
      assert.equal(await db.count('inbox'), 0);
    });

    it('the relay claims only its sources, the head of each (source, aggregate), and reclaims only its sources', async () => {
      await receive({ idempotencyKey: 'a1', aggregateId: 'a', payloadJson: '{"n":1}' });
      await receive({ idempotencyKey: 'a2', aggregateId: 'a', payloadJson: '{"n":2}' });
      await receive({ idempotencyKey: 'x1', source: 'payments', aggregateId: 'a' });
      await receive({ idempotencyKey: 'n1' });
      const claims = await take.relay.claim({ sources: ['orders', 'payments'], limit: 10, leaseMs: 100 });
      assert.deepEqual(
        claims.map((c) => `${c.message.source}/${c.message.idempotencyKey}`),
        ['orders/a1', 'payments/x1', 'orders/n1'],
      );
      assert.deepEqual(claims[0].message.payload, { n: 1 });
      await sleep(200);
      assert.deepEqual(counts(await take.relay.reclaim({ sources: ['payments'], maxAttempts: 5 })), { pending: 1, dead: 0 });
      assert.deepEqual(counts(await take.relay.reclaim({ sources: ['orders'], maxAttempts: 1 })), { pending: 0, dead: 2 });
    });

    it('I6: a forward whose fenced mark loses the claim rolls its outbox insert back; one that keeps it commits both', async () => {
      const { id } = await receive({ idempotencyKey: 'e6', aggregateId: 'a' });
      const [zombie] = await take.relay.claim({ sources: ['orders'], limit: 1, leaseMs: LONG });
      await db.expireLease('inbox', id); // the claim is taken over, as after an expiry and a reclaim
      await take.relay.reclaim({ sources: ['orders'], maxAttempts: 5 });
      const [owner] = await take.relay.claim({ sources: ['orders'], limit: 1, leaseMs: LONG });
      const forward = (claim: InboxClaim, messageId: string) =>
        db.dataSource.transaction(async (manager) => {
          await dialect.outboxInsert({ manager, rows: toOutboxRows([{ destination: 'billing', key: 'a', payload: {}, messageId }], 1000) });
          if (!(await lease.complete(claim, manager))) throw new Error('claim lost: roll the forward back');
        });
      await assert.rejects(forward(zombie, '00000000-0000-4000-8000-000000000001'), /claim lost/);
      assert.equal(await db.count('outbox'), 0, 'no outbox row from the lost forward');
      assert.equal((await db.row('inbox', id)).state, 'processing');
      await forward(owner, '00000000-0000-4000-8000-000000000002');
      assert.equal(await db.count('outbox'), 1);
      assert.equal((await db.row('inbox', id)).state, 'processed');
    });
  });

  describe('pull claims and transactions', () => {
    it('completes in the caller transaction and rolls back with it', async () => {
      await receive({ idempotencyKey: 'p1', source: 'ledger' });
      const claim = await lease.claim('ledger', { leaseMs: LONG });
      assert.ok(claim);
      await assert.rejects(
        db.dataSource.transaction(async (manager) => {
          assert.equal(await lease.complete(claim, manager), true);
          throw new Error('business write failed');
        }),
        /business write failed/,
      );
      assert.equal((await db.row('inbox', claim.id)).state, 'processing');
      assert.equal(await db.dataSource.transaction((manager) => lease.complete(claim, manager)), true);
      assert.equal((await db.row('inbox', claim.id)).state, 'processed');
    });

    it('takes an expired claim directly (no reclaim step), before pending rows, one per aggregate', async () => {
      await receive({ idempotencyKey: 'c1', source: 'ledger', aggregateId: 'agg' });
      await receive({ idempotencyKey: 'c2', source: 'ledger', aggregateId: 'agg' });
      await receive({ idempotencyKey: 'c3', source: 'ledger', aggregateId: 'other' });
      const first = await lease.claim('ledger', { leaseMs: 100 });
      assert.equal(first?.message.idempotencyKey, 'c1');
      await sleep(200);
      const batch = await take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG });
      assert.deepEqual(
        batch.map((c) => [c.message.idempotencyKey, c.attempt]),
        [
          ['c1', 2],
          ['c3', 1],
        ],
        'c1 again (expired), c3; c2 still waits behind c1',
      );
      assert.equal(await lease.complete(first!), false, 'the dead client changes nothing');
      assert.equal(await lease.complete(batch[0]), true);
      assert.deepEqual(
        (await take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG })).map((c) => c.message.idempotencyKey),
        ['c2'],
      );
      assert.equal(await lease.claim('nobody', { leaseMs: LONG }), null, 'another source has nothing');
    });

    it('I8: an expired claim that is not the first row of its aggregate (an earlier row committed after it was claimed) is claimed again', async () => {
      // r1 is received in a transaction left open (its id is lower); r2 commits and is claimed;
      // then r1 commits: r2 is no longer first, and its worker dies.
      const open = db.dataSource.createQueryRunner();
      await open.connect();
      await open.startTransaction();
      try {
        await dialect.inboxInsertIfAbsent({
          row: { source: 'ledger', idempotencyKey: 'r1', aggregateId: 'agg', payloadJson: '{}', headersJson: '{}' },
          manager: open.manager,
        });
        await receive({ idempotencyKey: 'r2', source: 'ledger', aggregateId: 'agg' });
        const r2 = await lease.claim('ledger', { leaseMs: LONG });
        assert.equal(r2?.message.idempotencyKey, 'r2');
        await open.commitTransaction();
        await db.expireLease('inbox', r2!.id);
        const again = await take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG });
        assert.deepEqual(
          again.map((c) => [c.message.idempotencyKey, c.attempt]),
          [['r2', 2]],
          'the expired claim is taken again; r1 waits behind it (never two rows of the aggregate in flight)',
        );
        assert.equal(await lease.complete(again[0]), true);
        assert.deepEqual(
          (await take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG })).map((c) => c.message.idempotencyKey),
          ['r1'],
        );
      } finally {
        if (open.isTransactionActive) await open.rollbackTransaction();
        await open.release();
      }
    });

    it('concurrent pull claims of one source never hand out one row twice', async () => {
      for (let n = 0; n < 12; n++) await receive({ idempotencyKey: `q${n}`, source: 'ledger' });
      const batches = await Promise.all(
        Array.from({ length: 4 }, () => take.pull.claimBatch({ source: 'ledger', limit: 4, leaseMs: LONG })),
      );
      const ids = batches.flat().map((c) => c.id);
      assert.equal(ids.length, 12);
      assert.equal(new Set(ids).size, 12);
    });
  });

  describe('followers (batch pull handlers, the relay)', () => {
    const followersOf = async (head: InboxClaim, room = 10) =>
      ((await take.followers.read([head], { room })).get(head) ?? []).map((f) => f.message.idempotencyKey);

    it('are the pending rows right after the claimed head of its aggregate, in id order, up to the first not due', async () => {
      for (const key of ['h', 'f1', 'f2']) await receive({ idempotencyKey: key, source: 'ledger', aggregateId: 'agg' });
      await receive({ idempotencyKey: 'other', source: 'ledger', aggregateId: 'other' });
      const [head] = await take.pull.claimBatch({ source: 'ledger', limit: 1, leaseMs: LONG });
      assert.equal(head.message.idempotencyKey, 'h');
      assert.deepEqual(await followersOf(head), ['f1', 'f2']);
      assert.deepEqual(await followersOf(head, 1), ['f1'], 'at most room');
    });

    it('I4: none while a row of the aggregate below the head is unfinished (it committed after the claim)', async () => {
      // r1 is received in a transaction left open; r2 commits and is claimed (r1 is invisible);
      // then r1 commits and r3 is received. r1 committed before r3 existed: r3 must not pass it.
      const open = db.dataSource.createQueryRunner();
      await open.connect();
      await open.startTransaction();
      try {
        await dialect.inboxInsertIfAbsent({
          row: { source: 'ledger', idempotencyKey: 'r1', aggregateId: 'agg', payloadJson: '{}', headersJson: '{}' },
          manager: open.manager,
        });
        await receive({ idempotencyKey: 'r2', source: 'ledger', aggregateId: 'agg' });
        const [r2] = await take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG });
        assert.equal(r2.message.idempotencyKey, 'r2');
        await open.commitTransaction();
        await receive({ idempotencyKey: 'r3', source: 'ledger', aggregateId: 'agg' });
        assert.deepEqual(await followersOf(r2), [], 'r3 would be handled before r1');
        // Once r2 and r1 are done, r3 follows as usual.
        assert.equal(await lease.complete(r2), true);
        const [r1] = await take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG });
        assert.equal(r1.message.idempotencyKey, 'r1');
        assert.deepEqual(await followersOf(r1), ['r3']);
      } finally {
        if (open.isTransactionActive) await open.rollbackTransaction();
        await open.release();
      }
    });

    it('complete only under their head: after its fenced completion, in the same transaction, with its token', async () => {
      for (const key of ['h', 'f1']) await receive({ idempotencyKey: key, source: 'ledger', aggregateId: 'agg' });
      const [head] = await take.pull.claimBatch({ source: 'ledger', limit: 1, leaseMs: LONG });
      const followers = (await take.followers.read([head], { room: 10 })).get(head) ?? [];
      assert.equal(followers.length, 1);
      await assert.rejects(
        db.dataSource.transaction((manager) => take.followers.complete(followers, manager)),
        FollowersChangedError,
        'the head is not completed: nothing fences the follower',
      );
      assert.equal((await db.row('inbox', followers[0].id)).state, 'pending');
      const forged = followers.map((f) => ({ ...f, token: '00000000-0000-4000-8000-000000000000' }));
      await assert.rejects(
        db.dataSource.transaction(async (manager) => {
          assert.equal(await lease.complete(head, manager), true);
          await take.followers.complete(forged, manager);
        }),
        FollowersChangedError,
        "another token than the head's",
      );
      assert.equal((await db.row('inbox', followers[0].id)).state, 'pending');
      await db.dataSource.transaction(async (manager) => {
        assert.equal(await lease.complete(head, manager), true);
        await take.followers.complete(followers, manager);
      });
      const done = await db.row('inbox', followers[0].id);
      assert.deepEqual([done.state, done.attempts], ['processed', 1]);
    });
  });

  describe('open transactions do not stop claims or followers (issue 26 N1, N2)', () => {
    // With READ_COMMITTED_SNAPSHOT OFF on SQL Server, a row written by an open transaction is
    // X-locked until it commits; a claim or followers read that waited for it stalled every claim of
    // the table (N1: the claim failed after 3 s with error 1222, for as long as the transaction
    // stayed open) or the relay (N2: until the request timeout). Elsewhere these pass at once.
    const PROMPT_MS = 2500;

    it('an outbox claim takes the committed heads while a producer transaction holds a new keyed row', async () => {
      await enqueue({ key: 'a', payload: { n: 1 } }, { key: null, payload: { n: 2 } });
      await whileOpen(async (open) => {
        await dialect.outboxInsert({ manager: open, rows: toOutboxRows([{ destination: 'd', key: 'b', payload: { n: 3 } }], 1_000_000) });
        await dialect.outboxInsert({ manager: open, rows: toOutboxRows([{ destination: 'd', key: 'a', payload: { n: 4 } }], 1_000_000) });
        const [claims, ms] = await timed(() => claimOutbox(10));
        assert.deepEqual(keysOf(claims).sort(), ['a:1', 'null:2']);
        assert.ok(ms < PROMPT_MS, `claimed in ${ms} ms`);
        for (const claim of claims) assert.equal(await lease.complete(claim), true);
        const [next, nextMs] = await timed(() => claimOutbox(10));
        assert.deepEqual(keysOf(next), [], 'a:4 and b:3 are not committed');
        assert.ok(nextMs < PROMPT_MS, `claimed nothing in ${nextMs} ms`);
      });
      assert.deepEqual(await claimOutbox(10), [], 'rolled back: nothing more to claim');
    });

    it('pull and relay claims take the committed heads while a receive() of another aggregate is open', async () => {
      await receive({ idempotencyKey: 'a1', source: 'ledger', aggregateId: 'a' });
      await receive({ idempotencyKey: 'x1', source: 'orders', aggregateId: 'x' });
      await whileOpen(async (open) => {
        for (const [source, key, aggregateId] of [
          ['ledger', 'b1', 'b'],
          ['orders', 'y1', 'y'],
        ]) {
          await dialect.inboxInsertIfAbsent({
            row: { source, idempotencyKey: key, aggregateId, payloadJson: '{}', headersJson: '{}' },
            manager: open,
          });
        }
        const [pulled, pullMs] = await timed(() => take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG }));
        assert.deepEqual(
          pulled.map((c) => c.message.idempotencyKey),
          ['a1'],
        );
        assert.ok(pullMs < PROMPT_MS, `pull claim in ${pullMs} ms`);
        const [relayed, relayMs] = await timed(() => take.relay.claim({ sources: ['orders'], limit: 10, leaseMs: LONG }));
        assert.deepEqual(
          relayed.map((c) => c.message.idempotencyKey),
          ['x1'],
        );
        assert.ok(relayMs < PROMPT_MS, `relay claim in ${relayMs} ms`);
      });
    });

    it('a followers read behind an open receive() of the same aggregate returns promptly, never the uncommitted row, and leaves its transaction usable', async () => {
      for (const key of ['h', 'f1']) await receive({ idempotencyKey: key, source: 'ledger', aggregateId: 'agg' });
      const [head] = await take.pull.claimBatch({ source: 'ledger', limit: 1, leaseMs: LONG });
      assert.equal(head.message.idempotencyKey, 'h');
      await whileOpen(async (open) => {
        await dialect.inboxInsertIfAbsent({
          row: { source: 'ledger', idempotencyKey: 'f2', aggregateId: 'agg', payloadJson: '{}', headersJson: '{}' },
          manager: open,
        });
        // Outside a transaction (the relay) and inside one (a batch pull handler).
        const [relayed, relayMs] = await timed(() => take.followers.read([head], { room: 10 }));
        const relayKeys = (relayed.get(head) ?? []).map((f) => f.message.idempotencyKey);
        assert.ok(relayMs < PROMPT_MS, `followers in ${relayMs} ms`);
        // f1 (row versions, or a read that got past the lock) or none (the read's lock wait ran out): never f2.
        assert.ok(['f1', ''].includes(relayKeys.join(',')), relayKeys.join(','));
        await db.dataSource.transaction(async (manager) => {
          const [inside, insideMs] = await timed(() => take.followers.read([head], { room: 10, manager }));
          const keys = (inside.get(head) ?? []).map((f) => f.message.idempotencyKey);
          assert.ok(insideMs < PROMPT_MS, `followers in ${insideMs} ms`);
          assert.ok(['f1', ''].includes(keys.join(',')), keys.join(','));
          // The transaction is still usable: the head completes in it.
          assert.equal(await lease.complete(head, manager), true);
          if (keys.length > 0) await take.followers.complete(inside.get(head) ?? [], manager);
        });
      });
      assert.equal((await db.row('inbox', head.id)).state, 'processed');
    });
  });

  describe('payload text (issue 26)', () => {
    // Quotes and backslashes inside strings, and in keys: a T-SQL engine whose OPENJSON ... WITH
    // returned JSON-escaped strings stored them escaped once more.
    const payload = {
      'we"ird\\key': 'a "quoted" \\ back\\slash \\"both\\" \\\\ two \\n not a newline\nreal newline \t tab zäh 💡 </script>',
      nested: { list: ['"', '\\', '\\"', '\\\\"'], empty: '' },
    };
    const headers = { 'X-Quote': 'say "hi" \\ bye' };

    it('an enqueued payload and its headers round-trip exactly (the outbox insert reads them through OPENJSON ... WITH on SQL Server)', async () => {
      const [{ id }] = await enqueue({ key: 'k', payload, headers });
      const [claim] = await claimOutbox(1);
      assert.equal(claim.id, id);
      assert.deepEqual(claim.message.payload, payload);
      assert.equal(claim.message.headers['X-Quote'], headers['X-Quote']);
      if (harness.name === 'SQL Server') {
        // SQL Server keeps the payload's text as written.
        assert.equal(await db.payloadText('outbox', id), JSON.stringify(payload));
      } else {
        assert.deepEqual(JSON.parse(await db.payloadText('outbox', id)), payload);
      }
    });

    it('a received payload round-trips exactly, and so does its forward to the outbox', async () => {
      const { id } = await receive({ idempotencyKey: 'p1', source: 'ledger', aggregateId: 'a', payloadJson: JSON.stringify(payload) });
      const [claim] = await take.pull.claimBatch({ source: 'ledger', limit: 1, leaseMs: LONG });
      assert.equal(claim.id, id);
      assert.deepEqual(claim.message.payload, payload);
      const [forwarded] = await db.dataSource.transaction((manager) =>
        dialect.outboxInsert({ manager, rows: toOutboxRows([{ destination: 'd', payload: claim.message.payload, headers }], 1_000_000) }),
      );
      const [out] = await claimOutbox(1);
      assert.equal(out.id, forwarded.id);
      assert.deepEqual(out.message.payload, payload);
    });
  });

  describe('admin and retention', () => {
    const admin = () =>
      new QueueBoxAdmin(dialect, new RetentionService(resolveOptions({ workers: false, tables: CONFORMANCE_TABLES }), dialect));

    it('counts the backlog per destination and source', async () => {
      await enqueue({ destination: 'a' }, { destination: 'a' }, { destination: 'b' });
      const [claim] = await claimOutbox(1);
      assert.equal(await lease.deadLetter(claim, 'gave up'), true);
      await receive({ idempotencyKey: 'r1' });
      const rows = await admin().backlog();
      assert.deepEqual(
        rows.map((r) => [r.component, r.name, r.pending, r.processing, r.dead]),
        [
          ['outbox', 'a', 1, 0, 1],
          ['outbox', 'b', 1, 0, 0],
          ['inbox', 'orders', 1, 0, 0],
        ],
      );
    });

    it('replays and discards dead rows only; a replayed row keeps its message id', async () => {
      await enqueue({ key: 'k1', payload: { n: 1 } }, { key: 'k2', payload: { n: 2 } }, { key: 'k3', payload: { n: 3 } });
      const [dead, held, pending] = await claimOutbox(3);
      assert.equal(await lease.deadLetter(dead, 'rejected'), true);
      assert.equal(await lease.retry(pending, { delayMs: LONG, error: new Error('later') }), true);
      const a = admin();
      const listed = await a.listDeadLetters({ component: 'outbox', errorContains: 'REJECTED' });
      assert.deepEqual(
        listed.rows.map((r) => [r.id, r.messageId, r.lastError]),
        [[dead.id, dead.message.messageId, 'rejected']],
      );
      assert.equal(await a.replayDeadLetters({ component: 'outbox', ids: [dead.id, held.id, pending.id] }), 1);
      assert.deepEqual(await db.row('outbox', held.id), { state: 'processing', claimToken: held.token, attempts: 1, lastError: null });
      assert.equal((await db.row('outbox', pending.id)).state, 'pending');
      const [again] = await claimOutbox(10);
      assert.equal(again.id, dead.id);
      assert.equal(again.message.messageId, dead.message.messageId);
      assert.equal(again.attempt, 1, 'attempts start again');
      assert.equal(again.message.headers['X-QueueBox-Replay-Count'], '1');
      assert.equal(await lease.deadLetter(again, 'rejected again'), true);
      assert.equal(await a.discardDeadLetters({ component: 'outbox', ids: [dead.id, held.id, pending.id] }), 1);
      assert.equal(await db.count('outbox'), 2);
      assert.equal(await lease.complete(held), true, 'the worker still owns its row');
    });

    it('skips a failing head, never one a worker holds', async () => {
      await enqueue({ key: 'k', payload: { n: 1 } }, { key: 'k', payload: { n: 2 } });
      const [head] = await claimOutbox(10);
      const a = admin();
      assert.equal(await a.skipHead({ component: 'outbox', key: 'k' }), null);
      assert.equal((await db.row('outbox', head.id)).state, 'processing');
      await db.expireLease('outbox', head.id);
      assert.equal(await a.skipHead({ component: 'outbox', key: 'k', headId: head.id, reason: 'poison' }), head.id);
      assert.deepEqual(await db.row('outbox', head.id), {
        state: 'dead',
        claimToken: null,
        attempts: 1,
        lastError: 'skipped by admin: poison',
      });
      assert.equal(await lease.complete(head), false, 'the old owner is fenced out');
      const [next] = await claimOutbox(10);
      assert.equal((next.message.payload as { n: number }).n, 2);
    });

    it('retention deletes old finished rows in batches, under a lock only one session holds', async () => {
      await enqueue({ payload: { n: 1 } }, { payload: { n: 2 } }, { payload: { n: 3 } }, { payload: { n: 4 } });
      const claims = await claimOutbox(3);
      for (const claim of claims) assert.equal(await lease.complete(claim), true);
      await db.age('outbox', 10);
      const inside = await dialect.retentionWithLock(async () => ({
        nested: await dialect.retentionWithLock(async () => 'ran'),
        first: await dialect.retentionDeleteBatch({ kind: 'outbox-sent', olderThanMs: 7 * 86_400_000, limit: 2 }),
        second: await dialect.retentionDeleteBatch({ kind: 'outbox-sent', olderThanMs: 7 * 86_400_000, limit: 2 }),
      }));
      assert.deepEqual(inside, { nested: null, first: 2, second: 1 });
      assert.equal(await db.count('outbox'), 1, 'the pending row stays');
      assert.equal(await dialect.retentionWithLock(async () => 'free again'), 'free again');
    });
  });
}
