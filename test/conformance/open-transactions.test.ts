import assert from 'node:assert/strict';
import { it } from 'node:test';
import { toOutboxRows } from '../../lib/outbox/outbox-rows';

import { conformanceSuite, LONG } from './suite';

conformanceSuite('open transactions do not stop claims or followers (issue 26 N1, N2)', (c) => {
  const { enqueue, receive, claimOutbox, keysOf, whileOpen, timed } = c;

  // With READ_COMMITTED_SNAPSHOT OFF on SQL Server, a row written by an open transaction is
  // X-locked until it commits; a claim or followers read that waited for it stalled every claim of
  // the table (N1: the claim failed after 3 s with error 1222, for as long as the transaction
  // stayed open) or the relay (N2: until the request timeout). Elsewhere these pass at once.
  const PROMPT_MS = 2500;

  it('an outbox claim takes the committed heads while a producer transaction holds a new keyed row', async () => {
    await enqueue({ key: 'a', payload: { n: 1 } }, { key: null, payload: { n: 2 } });
    await whileOpen(async (open) => {
      await c.dialect.outboxInsert({ manager: open, rows: toOutboxRows([{ destination: 'd', key: 'b', payload: { n: 3 } }], 1_000_000) });
      await c.dialect.outboxInsert({ manager: open, rows: toOutboxRows([{ destination: 'd', key: 'a', payload: { n: 4 } }], 1_000_000) });
      const [claims, ms] = await timed(() => claimOutbox(10));
      assert.deepEqual(keysOf(claims).sort(), ['a:1', 'null:2']);
      assert.ok(ms < PROMPT_MS, `claimed in ${ms} ms`);
      for (const claim of claims) assert.equal(await c.lease.complete(claim), true);
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
        await c.dialect.inboxInsertIfAbsent({
          row: { source, idempotencyKey: key, aggregateId, payloadJson: '{}', headersJson: '{}' },
          manager: open,
        });
      }
      const [pulled, pullMs] = await timed(() => c.take.pull.claimBatch({ source: 'ledger', limit: 10, leaseMs: LONG }));
      assert.deepEqual(
        pulled.map((c) => c.message.idempotencyKey),
        ['a1'],
      );
      assert.ok(pullMs < PROMPT_MS, `pull claim in ${pullMs} ms`);
      const [relayed, relayMs] = await timed(() => c.take.relay.claim({ sources: ['orders'], limit: 10, leaseMs: LONG }));
      assert.deepEqual(
        relayed.map((c) => c.message.idempotencyKey),
        ['x1'],
      );
      assert.ok(relayMs < PROMPT_MS, `relay claim in ${relayMs} ms`);
    });
  });

  it('a followers read behind an open receive() of the same aggregate returns promptly, never the uncommitted row, and leaves its transaction usable', async () => {
    for (const key of ['h', 'f1']) await receive({ idempotencyKey: key, source: 'ledger', aggregateId: 'agg' });
    const [head] = await c.take.pull.claimBatch({ source: 'ledger', limit: 1, leaseMs: LONG });
    assert.equal(head.message.idempotencyKey, 'h');
    await whileOpen(async (open) => {
      await c.dialect.inboxInsertIfAbsent({
        row: { source: 'ledger', idempotencyKey: 'f2', aggregateId: 'agg', payloadJson: '{}', headersJson: '{}' },
        manager: open,
      });
      // Outside a transaction (the relay) and inside one (a batch pull handler).
      const [relayed, relayMs] = await timed(() => c.take.followers.read([head], { room: 10 }));
      const relayKeys = (relayed.get(head) ?? []).map((f) => f.message.idempotencyKey);
      assert.ok(relayMs < PROMPT_MS, `followers in ${relayMs} ms`);
      // f1 (row versions, or a read that got past the lock) or none (the read's lock wait ran out): never f2.
      assert.ok(['f1', ''].includes(relayKeys.join(',')), relayKeys.join(','));
      await c.db.dataSource.transaction(async (manager) => {
        const [inside, insideMs] = await timed(() => c.take.followers.read([head], { room: 10, manager }));
        const keys = (inside.get(head) ?? []).map((f) => f.message.idempotencyKey);
        assert.ok(insideMs < PROMPT_MS, `followers in ${insideMs} ms`);
        assert.ok(['f1', ''].includes(keys.join(',')), keys.join(','));
        // The transaction is still usable: the head completes in it.
        assert.equal(await c.lease.complete(head, manager), true);
        if (keys.length > 0) await c.take.followers.complete(inside.get(head) ?? [], manager);
      });
    });
    assert.equal((await c.db.row('inbox', head.id)).state, 'processed');
  });
});
