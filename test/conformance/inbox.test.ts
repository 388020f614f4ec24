import assert from 'node:assert/strict';
import { it } from 'node:test';
import { DataSource, type DataSourceOptions } from 'typeorm';
import { createDialect } from '../../lib/core/create-dialect';
import { resolveTables } from '../../lib/options/options.resolver';
import { toOutboxRows } from '../../lib/outbox/outbox-rows';
import type { InboxClaim } from '../../lib/types/claims';
import { CONFORMANCE_TABLES } from './harness';
import { conformanceSuite, counts, LONG, sleep } from './suite';

conformanceSuite('inbox: dedupe (I5) and the relay (I6)', (c) => {
  const { enqueue, receive, claimOutbox, keysOf } = c;

  it('I5: concurrent receives of one key store one row, in transactions or not; the others report the stored id', async () => {
    const inTransactions = await Promise.all(
      Array.from({ length: 20 }, (_, n) =>
        c.db.dataSource.transaction((manager) =>
          c.dialect.inboxInsertIfAbsent({
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
    assert.equal(await c.db.count('inbox'), 2);
    assert.deepEqual(await receive({ idempotencyKey: 'e1' }), { id: inTransactions.find((r) => !r.duplicate)?.id, duplicate: true });
  });

  it('a receive in an open transaction holds up only receives of its own key, not newer keys of its source', async () => {
    const PROMPT_MS = 2500;
    let sameKey: Promise<{ id: string; duplicate: boolean }> | undefined;
    await c.whileOpen(async (open) => {
      const held = await c.dialect.inboxInsertIfAbsent({
        row: { source: 'orders', idempotencyKey: 'k0002', aggregateId: null, payloadJson: '{}', headersJson: '{}' },
        manager: open,
      });
      assert.equal(held.duplicate, false);
      // Time-ordered keys: every one after k0002 falls into the same gap of the unique index.
      const [newer, ms] = await c.timed(() => receive({ idempotencyKey: 'k0003' }));
      assert.equal(newer.duplicate, false);
      assert.ok(ms < PROMPT_MS, `a newer key received in ${ms} ms`);
      const [inTransaction, inTransactionMs] = await c.timed(() =>
        c.db.dataSource.transaction((manager) =>
          c.dialect.inboxInsertIfAbsent({
            row: { source: 'orders', idempotencyKey: 'k0004', aggregateId: null, payloadJson: '{}', headersJson: '{}' },
            manager,
          }),
        ),
      );
      assert.equal(inTransaction.duplicate, false);
      assert.ok(inTransactionMs < PROMPT_MS, `a newer key received in a transaction in ${inTransactionMs} ms`);
      // The same key waits for the open transaction, whose row decides.
      sameKey = receive({ idempotencyKey: 'k0002' });
      sameKey.catch(() => undefined); // awaited below, once the open transaction has ended
    });
    // The open transaction rolled back: the waiting receive stores its own row.
    assert.equal((await sameKey)?.duplicate, false);
    assert.equal(await c.db.count('inbox'), 3);
  });

  it('a duplicate received in a transaction leaves it usable and committable, even when the connection aborts transactions on errors', async () => {
    const stored = await receive({ idempotencyKey: 'd1' });
    // SQL Server: a connection opened with XACT_ABORT ON (mssql's abortTransactionOnError), where a
    // unique violation outside the insert's own batch setting would doom the transaction.
    const options = c.db.dataSource.options;
    const aborting =
      options.type === 'mssql'
        ? await new DataSource({
            ...options,
            options: { ...options.options, abortTransactionOnError: true },
            pool: { max: 2 },
          } as DataSourceOptions).initialize()
        : c.db.dataSource;
    try {
      const dialect = createDialect(aborting, resolveTables(CONFORMANCE_TABLES));
      const row = (idempotencyKey: string) => ({
        source: 'orders',
        idempotencyKey,
        aggregateId: null,
        payloadJson: '{}',
        headersJson: '{}',
      });
      await aborting.transaction(async (manager) => {
        assert.deepEqual(await dialect.inboxInsertIfAbsent({ row: row('d1'), manager }), { id: stored.id, duplicate: true });
        assert.equal((await dialect.inboxInsertIfAbsent({ row: row('d2'), manager })).duplicate, false);
        await dialect.outboxInsert({ manager, rows: toOutboxRows([{ destination: 'after-duplicate', payload: {} }], 1000) });
      });
    } finally {
      if (aborting !== c.db.dataSource) await aborting.destroy();
    }
    assert.equal(await c.db.count('inbox'), 2);
    assert.equal(await c.db.count('outbox'), 1, 'the transaction committed what followed the duplicate');
  });

  it('keys that differ only in case, accents or trailing spaces are distinct keys, never duplicates', async () => {
    const upper = await receive({ idempotencyKey: 'evt_A' });
    const lower = await receive({ idempotencyKey: 'evt_a' });
    const accent = await receive({ idempotencyKey: 'evt_á' });
    assert.deepEqual([upper.duplicate, lower.duplicate, accent.duplicate], [false, false, false]);
    assert.equal(new Set([upper.id, lower.id, accent.id]).size, 3);
    if (c.harness.name === 'SQL Server') {
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
      c.db.dataSource.transaction(async (manager) => {
        await c.dialect.inboxInsertIfAbsent({
          row: { source: 'orders', idempotencyKey: 'e3', aggregateId: null, payloadJson: '1', headersJson: '{}' },
          manager,
        });
        throw new Error('handler failed');
      }),
      /handler failed/,
    );
    assert.equal(await c.db.count('inbox'), 0);
  });

  it('the relay claims only its sources, the head of each (source, aggregate), and reclaims only its sources', async () => {
    await receive({ idempotencyKey: 'a1', aggregateId: 'a', payloadJson: '{"n":1}' });
    await receive({ idempotencyKey: 'a2', aggregateId: 'a', payloadJson: '{"n":2}' });
    await receive({ idempotencyKey: 'x1', source: 'payments', aggregateId: 'a' });
    await receive({ idempotencyKey: 'n1' });
    const claims = await c.take.relay.claim({ sources: ['orders', 'payments'], limit: 10, leaseMs: 100 });
    assert.deepEqual(
      claims.map((c) => `${c.message.source}/${c.message.idempotencyKey}`),
      ['orders/a1', 'payments/x1', 'orders/n1'],
    );
    assert.deepEqual(claims[0].message.payload, { n: 1 });
    await sleep(200);
    assert.deepEqual(counts(await c.take.relay.reclaim({ sources: ['payments'], maxAttempts: 5 })), { pending: 1, dead: 0 });
    assert.deepEqual(counts(await c.take.relay.reclaim({ sources: ['orders'], maxAttempts: 1 })), { pending: 0, dead: 2 });
  });

  it('I6: a forward whose fenced mark loses the claim rolls its outbox insert back; one that keeps it commits both', async () => {
    const { id } = await receive({ idempotencyKey: 'e6', aggregateId: 'a' });
    const [zombie] = await c.take.relay.claim({ sources: ['orders'], limit: 1, leaseMs: LONG });
    await c.db.expireLease('inbox', id); // the claim is taken over, as after an expiry and a reclaim
    await c.take.relay.reclaim({ sources: ['orders'], maxAttempts: 5 });
    const [owner] = await c.take.relay.claim({ sources: ['orders'], limit: 1, leaseMs: LONG });
    const forward = (claim: InboxClaim, messageId: string) =>
      c.db.dataSource.transaction(async (manager) => {
        await c.dialect.outboxInsert({ manager, rows: toOutboxRows([{ destination: 'billing', key: 'a', payload: {}, messageId }], 1000) });
        if (!(await c.lease.complete(claim, manager))) throw new Error('claim lost: roll the forward back');
      });
    await assert.rejects(forward(zombie, '00000000-0000-4000-8000-000000000001'), /claim lost/);
    assert.equal(await c.db.count('outbox'), 0, 'no outbox row from the lost forward');
    assert.equal((await c.db.row('inbox', id)).state, 'processing');
    await forward(owner, '00000000-0000-4000-8000-000000000002');
    assert.equal(await c.db.count('outbox'), 1);
    assert.equal((await c.db.row('inbox', id)).state, 'processed');
  });
});
