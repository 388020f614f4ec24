import assert from 'node:assert/strict';
import { it } from 'node:test';

import { conformanceSuite, counts, LONG, sleep } from './suite';

conformanceSuite('claims and fences', (c) => {
  const { enqueue, claimOutbox } = c;

  it('claims with a new token and a lease by the database clock, counting the claim as an attempt', async () => {
    const [{ id, messageId }] = await enqueue({ key: 'k', payload: { n: 1, text: 'zäh 💡' }, headers: { 'X-Trace': 't1' } });
    const dbNow = await c.dialect.clockNow();
    const [claim] = await claimOutbox(10);
    assert.equal(claim.id, id);
    assert.equal(claim.attempt, 1);
    assert.equal(claim.message.messageId, messageId);
    assert.deepEqual(claim.message.payload, { n: 1, text: 'zäh 💡' });
    assert.equal(claim.message.headers['X-Trace'], 't1');
    const leaseLeft = claim.leaseExpiresAt.getTime() - dbNow.getTime();
    assert.ok(leaseLeft > LONG - 2000 && leaseLeft < LONG + 2000, `lease ends ${leaseLeft} ms after the database's now`);
    assert.deepEqual(await c.db.row('outbox', id), { state: 'processing', claimToken: claim.token, attempts: 1, lastError: null });
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
    assert.deepEqual(counts(await c.take.outbox.reclaim({ maxAttempts: 10 })), { pending: 1, dead: 0 });
    const [owner] = await claimOutbox(1);
    assert.equal(owner.id, id);
    assert.notEqual(owner.token, zombie.token);
    assert.equal(await c.lease.renew(zombie), false);
    assert.equal(await c.lease.complete(zombie), false);
    assert.equal(await c.lease.retry(zombie, { delayMs: 0, error: new Error('zombie') }), false);
    assert.equal(await c.lease.deadLetter(zombie, 'zombie'), false);
    assert.equal(await c.dialect.leaseRelease({ table: 'outbox', id, token: zombie.token }), false);
    assert.equal((await c.dialect.leaseCompleteBatch({ table: 'outbox', claims: [{ id, token: zombie.token }] })).has(id), false);
    const row = await c.db.row('outbox', id);
    assert.equal(row.state, 'processing');
    assert.equal(row.claimToken, owner.token, 'the new owner keeps the row');
    assert.equal(c.metrics.value('queuebox_claims_lost_total', { component: 'outbox' }), 1, 'counted once per lost claim');
    assert.equal(await c.lease.complete(owner), true);
    assert.equal((await c.db.row('outbox', id)).state, 'sent');
  });

  it('I3: an expired lease fails the fence before anyone reclaims the row', async () => {
    await enqueue({});
    const [claim] = await claimOutbox(1, 100);
    await sleep(200);
    assert.equal(await c.lease.renew(claim), false);
    assert.equal(await c.lease.complete(claim), false);
    assert.equal((await c.db.row('outbox', claim.id)).state, 'processing');
  });

  it('renew moves the lease forward by the database clock and keeps the claim past its first lease', async () => {
    await enqueue({});
    const [claim] = await claimOutbox(1, 300);
    const first = claim.leaseExpiresAt.getTime();
    for (let i = 0; i < 4; i++) {
      await sleep(100);
      assert.equal(await c.lease.renew(claim), true);
    }
    assert.ok(claim.leaseExpiresAt.getTime() > first + 300, 'the lease moved forward');
    assert.equal(await c.lease.complete(claim), true);
  });

  it('retry returns the row to pending after its delay with the error recorded; dead-letter ends it', async () => {
    const [{ id }] = await enqueue({});
    const [claim] = await claimOutbox(1);
    assert.equal(await c.lease.retry(claim, { delayMs: LONG, error: new Error('broker down') }), true);
    assert.deepEqual(await c.db.row('outbox', id), { state: 'pending', claimToken: null, attempts: 1, lastError: 'Error: broker down' });
    assert.deepEqual(await claimOutbox(1), [], 'not available before the delay');
    await c.db.makeAvailable('outbox');
    const [again] = await claimOutbox(1);
    assert.equal(again.attempt, 2);
    assert.equal(await c.lease.deadLetter(again, 'gave up'), true);
    assert.deepEqual(await c.db.row('outbox', id), { state: 'dead', claimToken: again.token, attempts: 2, lastError: 'gave up' });
  });

  it('completes a batch with one fenced statement, and gives back an unstarted claim without counting its attempt', async () => {
    await enqueue({ payload: { n: 1 } }, { payload: { n: 2 } }, { payload: { n: 3 } });
    const claims = await claimOutbox(3);
    const done = await c.dialect.leaseCompleteBatch({
      table: 'outbox',
      claims: [claims[0], claims[1]].map((c) => ({ id: c.id, token: c.token })),
    });
    assert.deepEqual(
      [claims[0], claims[1]].map((claim) => done.has(claim.id)),
      [true, true],
    );
    assert.equal(await c.db.count('outbox', 'sent'), 2);
    assert.equal(await c.dialect.leaseRelease({ table: 'outbox', id: claims[2].id, token: claims[2].token }), true);
    assert.deepEqual(await c.db.row('outbox', claims[2].id), { state: 'pending', claimToken: null, attempts: 0, lastError: null });
  });

  it('a batch completed in a transaction commits with it, and rolls back with it', async () => {
    await enqueue({ payload: { n: 1 } }, { payload: { n: 2 } });
    const claims = await claimOutbox(2);
    const rollback = new Error('the work failed');
    await assert.rejects(
      c.db.dataSource.transaction(async (manager) => {
        assert.equal((await c.lease.completeBatch(claims, manager)).size, 2);
        throw rollback;
      }),
      rollback,
    );
    assert.equal(await c.db.count('outbox', 'sent'), 0, 'rolled back with the transaction');
    const done = await c.db.dataSource.transaction((manager) => c.lease.completeBatch(claims, manager));
    assert.deepEqual(done, new Set(claims));
    assert.equal(await c.db.count('outbox', 'sent'), 2);
  });

  it('I7: a fence evaluated late in a long transaction uses the current time, not the transaction start', async () => {
    await enqueue({});
    const [claim] = await claimOutbox(1, 300);
    const completed = await c.db.dataSource.transaction(async (manager) => {
      await manager.query('SELECT 1'); // the transaction has begun
      await sleep(450);
      return c.lease.complete(claim, manager);
    });
    assert.equal(completed, false, 'the lease expired while the transaction ran');
    assert.equal((await c.db.row('outbox', claim.id)).state, 'processing');
  });

  it('I8: the reclaim step returns expired claims to pending, and dead-letters one that expired on its last attempt', async () => {
    const [{ id }] = await enqueue({});
    for (let attempt = 1; attempt <= 3; attempt++) {
      const [claim] = await claimOutbox(1, 50);
      assert.equal(claim.attempt, attempt);
      await sleep(100);
      assert.deepEqual(
        counts(await c.take.outbox.reclaim({ maxAttempts: 3 })),
        attempt < 3 ? { pending: 1, dead: 0 } : { pending: 0, dead: 1 },
      );
    }
    const row = await c.db.row('outbox', id);
    assert.equal(row.state, 'dead');
    assert.match(row.lastError ?? '', /lease expired on attempt 3 of 3/);
  });
});
