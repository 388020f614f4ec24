import assert from 'node:assert/strict';
import { it } from 'node:test';

import { conformanceSuite, LONG, sleep } from './suite';

conformanceSuite('pull claims and transactions', (c) => {
  const { receive } = c;

  it('completes in the caller transaction and rolls back with it', async () => {
    await receive({ idempotencyKey: 'p1', source: 'ledger' });
    const claim = await c.take.pull.claim('ledger', { leaseMs: LONG });
    assert.ok(claim);
    await assert.rejects(
      c.db.dataSource.transaction(async (manager) => {
        assert.equal(await c.lease.complete(claim, manager), true);
        throw new Error('business write failed');
      }),
      /business write failed/,
    );
    assert.equal((await c.db.row('inbox', claim.id)).state, 'processing');
    assert.equal(await c.db.dataSource.transaction((manager) => c.lease.complete(claim, manager)), true);
    assert.equal((await c.db.row('inbox', claim.id)).state, 'processed');
  });

  it('takes an expired claim directly (no reclaim step), before pending rows, one per aggregate', async () => {
    await receive({ idempotencyKey: 'c1', source: 'ledger', aggregateId: 'agg' });
    await receive({ idempotencyKey: 'c2', source: 'ledger', aggregateId: 'agg' });
    await receive({ idempotencyKey: 'c3', source: 'ledger', aggregateId: 'other' });
    const first = await c.take.pull.claim('ledger', { leaseMs: 100 });
    assert.equal(first?.message.idempotencyKey, 'c1');
    await sleep(200);
    const batch = await c.take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG });
    assert.deepEqual(
      batch.map((c) => [c.message.idempotencyKey, c.attempt]),
      [
        ['c1', 2],
        ['c3', 1],
      ],
      'c1 again (expired), c3; c2 still waits behind c1',
    );
    assert.equal(await c.lease.complete(first!), false, 'the dead client changes nothing');
    assert.equal(await c.lease.complete(batch[0]), true);
    assert.deepEqual(
      (await c.take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG })).map((c) => c.message.idempotencyKey),
      ['c2'],
    );
    assert.equal(await c.take.pull.claim('nobody', { leaseMs: LONG }), null, 'another source has nothing');
  });

  it('I8: an expired claim that is not the first row of its aggregate (an earlier row committed after it was claimed) is claimed again', async () => {
    // r1 is received in a transaction left open (its id is lower); r2 commits and is claimed;
    // then r1 commits: r2 is no longer first, and its worker dies.
    const open = c.db.dataSource.createQueryRunner();
    await open.connect();
    await open.startTransaction();
    try {
      await c.dialect.inboxInsertIfAbsent({
        row: { source: 'ledger', idempotencyKey: 'r1', aggregateId: 'agg', payloadJson: '{}', headersJson: '{}' },
        manager: open.manager,
      });
      await receive({ idempotencyKey: 'r2', source: 'ledger', aggregateId: 'agg' });
      const r2 = await c.take.pull.claim('ledger', { leaseMs: LONG });
      assert.equal(r2?.message.idempotencyKey, 'r2');
      await open.commitTransaction();
      await c.db.expireLease('inbox', r2!.id);
      const again = await c.take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG });
      assert.deepEqual(
        again.map((c) => [c.message.idempotencyKey, c.attempt]),
        [['r2', 2]],
        'the expired claim is taken again; r1 waits behind it (never two rows of the aggregate in flight)',
      );
      assert.equal(await c.lease.complete(again[0]), true);
      assert.deepEqual(
        (await c.take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG })).map((c) => c.message.idempotencyKey),
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
      Array.from({ length: 4 }, () => c.take.pull.claimBatch({ source: 'ledger', limit: 4, leaseMs: LONG })),
    );
    const ids = batches.flat().map((c) => c.id);
    assert.equal(ids.length, 12);
    assert.equal(new Set(ids).size, 12);
  });
});
