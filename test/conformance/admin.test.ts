import assert from 'node:assert/strict';
import { it } from 'node:test';
import { QueueBoxAdmin } from '../../lib/admin/queuebox.admin';
import { RetentionService } from '../../lib/admin/retention.service';
import { resolveOptions } from '../../lib/options/options.resolver';
import { toOutboxRows } from '../../lib/outbox/outbox-rows';
import { CONFORMANCE_TABLES } from './harness';

import { conformanceSuite, LONG } from './suite';

conformanceSuite('admin and retention', (c) => {
  const { enqueue, receive, claimOutbox } = c;

  const admin = () =>
    new QueueBoxAdmin(c.dialect, new RetentionService(resolveOptions({ workers: false, tables: CONFORMANCE_TABLES }), c.dialect));

  it('the backlog, claim, blocked-key and instance lists behind an open producer transaction answer, or say busy, within their lock wait', async () => {
    await enqueue({ destination: 'a', key: 'k' });
    await claimOutbox(1);
    await c.whileOpen(async (open) => {
      await c.dialect.outboxInsert({ manager: open, rows: toOutboxRows([{ destination: 'a', key: 'k', payload: {} }], 1_000_000) });
      for (const [read, call] of [
        ['backlog', () => admin().backlog()],
        ['claims', () => admin().listClaims({ component: 'outbox' })],
        ['blocked keys', () => admin().listBlockedKeys({ component: 'outbox' })],
        ['instances', () => admin().instances()],
      ] as const) {
        // With READ_COMMITTED_SNAPSHOT OFF on SQL Server a locking read may meet the open row:
        // it gives up after 2 s (QUEUEBOX_ADMIN_BUSY) instead of holding its connection until the request timeout.
        const [outcome, ms] = await c.timed(() =>
          (call() as Promise<unknown>).then(
            () => 'answered',
            (error: { code?: string }) => {
              if (error.code !== 'QUEUEBOX_ADMIN_BUSY') throw error;
              return 'busy';
            },
          ),
        );
        assert.ok(ms < 3_500, `${read}: ${outcome} in ${ms} ms`);
        if (c.harness.name !== 'SQL Server') assert.equal(outcome, 'answered', read);
      }
    });
  });

  it('counts the backlog per destination and source', async () => {
    await enqueue({ destination: 'a' }, { destination: 'a' }, { destination: 'b' });
    const [claim] = await claimOutbox(1);
    assert.equal(await c.lease.deadLetter(claim, 'gave up'), true);
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
    assert.equal(await c.lease.deadLetter(dead, 'rejected'), true);
    assert.equal(await c.lease.retry(pending, { delayMs: LONG, error: new Error('later') }), true);
    const a = admin();
    const listed = await a.listDeadLetters({ component: 'outbox', errorContains: 'REJECTED' });
    assert.deepEqual(
      listed.rows.map((r) => [r.id, r.messageId, r.lastError]),
      [[dead.id, dead.message.messageId, 'rejected']],
    );
    assert.equal(await a.replayDeadLetters({ component: 'outbox', ids: [dead.id, held.id, pending.id] }), 1);
    assert.deepEqual(await c.db.row('outbox', held.id), { state: 'processing', claimToken: held.token, attempts: 1, lastError: null });
    assert.equal((await c.db.row('outbox', pending.id)).state, 'pending');
    const [again] = await claimOutbox(10);
    assert.equal(again.id, dead.id);
    assert.equal(again.message.messageId, dead.message.messageId);
    assert.equal(again.attempt, 1, 'attempts start again');
    assert.equal(again.message.headers['X-QueueBox-Replay-Count'], '1');
    assert.equal(await c.lease.deadLetter(again, 'rejected again'), true);
    assert.equal(await a.discardDeadLetters({ component: 'outbox', ids: [dead.id, held.id, pending.id] }), 1);
    assert.equal(await c.db.count('outbox'), 2);
    assert.equal(await c.lease.complete(held), true, 'the worker still owns its row');
  });

  it('skips a failing head, never one a worker holds', async () => {
    await enqueue({ key: 'k', payload: { n: 1 } }, { key: 'k', payload: { n: 2 } });
    const [head] = await claimOutbox(10);
    const a = admin();
    assert.equal(await a.skipHead({ component: 'outbox', key: 'k' }), null);
    assert.equal((await c.db.row('outbox', head.id)).state, 'processing');
    await c.db.expireLease('outbox', head.id);
    assert.equal(await a.skipHead({ component: 'outbox', key: 'k', headId: head.id, reason: 'poison' }), head.id);
    assert.deepEqual(await c.db.row('outbox', head.id), {
      state: 'dead',
      claimToken: null,
      attempts: 1,
      lastError: 'skipped by admin: poison',
    });
    assert.equal(await c.lease.complete(head), false, 'the old owner is fenced out');
    const [next] = await claimOutbox(10);
    assert.equal((next.message.payload as { n: number }).n, 2);
  });

  it('retention deletes old finished rows in batches, under a lock only one session holds', async () => {
    await enqueue({ payload: { n: 1 } }, { payload: { n: 2 } }, { payload: { n: 3 } }, { payload: { n: 4 } });
    const claims = await claimOutbox(3);
    for (const claim of claims) assert.equal(await c.lease.complete(claim), true);
    await c.db.age('outbox', 10);
    const inside = await c.dialect.retentionWithLock(async () => ({
      nested: await c.dialect.retentionWithLock(async () => 'ran'),
      first: await c.dialect.retentionDeleteBatch({ kind: 'outbox-sent', olderThanMs: 7 * 86_400_000, limit: 2 }),
      second: await c.dialect.retentionDeleteBatch({ kind: 'outbox-sent', olderThanMs: 7 * 86_400_000, limit: 2 }),
    }));
    assert.deepEqual(inside, { nested: null, first: 2, second: 1 });
    assert.equal(await c.db.count('outbox'), 1, 'the pending row stays');
    assert.equal(await c.dialect.retentionWithLock(async () => 'free again'), 'free again');
  });
});
