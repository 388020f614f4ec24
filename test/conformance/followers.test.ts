import assert from 'node:assert/strict';
import { it } from 'node:test';
import { FollowersChangedError } from '../../lib/inbox-runtime/inbox.followers';
import type { InboxClaim } from '../../lib/types/claims';

import { conformanceSuite, LONG } from './suite';

conformanceSuite('followers (batch pull handlers, the relay)', (c) => {
  const { receive } = c;

  const followersOf = async (head: InboxClaim, room = 10) =>
    ((await c.take.followers.read([head], { room })).get(head) ?? []).map((f) => f.message.idempotencyKey);

  it('are the pending rows right after the claimed head of its aggregate, in id order, up to the first not due', async () => {
    for (const key of ['h', 'f1', 'f2']) await receive({ idempotencyKey: key, source: 'ledger', aggregateId: 'agg' });
    await receive({ idempotencyKey: 'other', source: 'ledger', aggregateId: 'other' });
    const [head] = await c.take.pull.claimBatch({ source: 'ledger', limit: 1, leaseMs: LONG });
    assert.equal(head.message.idempotencyKey, 'h');
    assert.deepEqual(await followersOf(head), ['f1', 'f2']);
    assert.deepEqual(await followersOf(head, 1), ['f1'], 'at most room');
  });

  it('I4: none while a row of the aggregate below the head is unfinished (it committed after the claim)', async () => {
    // r1 is received in a transaction left open; r2 commits and is claimed (r1 is invisible);
    // then r1 commits and r3 is received. r1 committed before r3 existed: r3 must not pass it.
    const open = c.db.dataSource.createQueryRunner();
    await open.connect();
    await open.startTransaction();
    try {
      await c.dialect.inboxInsertIfAbsent({
        row: { source: 'ledger', idempotencyKey: 'r1', aggregateId: 'agg', payloadJson: '{}', headersJson: '{}' },
        manager: open.manager,
      });
      await receive({ idempotencyKey: 'r2', source: 'ledger', aggregateId: 'agg' });
      const [r2] = await c.take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG });
      assert.equal(r2.message.idempotencyKey, 'r2');
      await open.commitTransaction();
      await receive({ idempotencyKey: 'r3', source: 'ledger', aggregateId: 'agg' });
      assert.deepEqual(await followersOf(r2), [], 'r3 would be handled before r1');
      // Once r2 and r1 are done, r3 follows as usual.
      assert.equal(await c.lease.complete(r2), true);
      const [r1] = await c.take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG });
      assert.equal(r1.message.idempotencyKey, 'r1');
      assert.deepEqual(await followersOf(r1), ['r3']);
    } finally {
      if (open.isTransactionActive) await open.rollbackTransaction();
      await open.release();
    }
  });

  it('complete only under their head: after its fenced completion, in the same transaction, with its token', async () => {
    for (const key of ['h', 'f1']) await receive({ idempotencyKey: key, source: 'ledger', aggregateId: 'agg' });
    const [head] = await c.take.pull.claimBatch({ source: 'ledger', limit: 1, leaseMs: LONG });
    const followers = (await c.take.followers.read([head], { room: 10 })).get(head) ?? [];
    assert.equal(followers.length, 1);
    await assert.rejects(
      c.db.dataSource.transaction((manager) => c.take.followers.complete(followers, manager)),
      FollowersChangedError,
      'the head is not completed: nothing fences the follower',
    );
    assert.equal((await c.db.row('inbox', followers[0].id)).state, 'pending');
    const forged = followers.map((f) => ({ ...f, token: '00000000-0000-4000-8000-000000000000' }));
    await assert.rejects(
      c.db.dataSource.transaction(async (manager) => {
        assert.equal(await c.lease.complete(head, manager), true);
        await c.take.followers.complete(forged, manager);
      }),
      FollowersChangedError,
      "another token than the head's",
    );
    assert.equal((await c.db.row('inbox', followers[0].id)).state, 'pending');
    await c.db.dataSource.transaction(async (manager) => {
      assert.equal(await c.lease.complete(head, manager), true);
      await c.take.followers.complete(followers, manager);
    });
    const done = await c.db.row('inbox', followers[0].id);
    assert.deepEqual([done.state, done.attempts], ['processed', 1]);
  });
});
