import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { it } from 'node:test';
import { createDialect } from '../../lib/core/create-dialect';
import { resolveTables } from '../../lib/options/options.resolver';
import { toOutboxRows } from '../../lib/outbox/outbox-rows';
import { CONFORMANCE_TABLES } from './harness';
import { conformanceSuite, LONG } from './suite';

conformanceSuite('open transactions do not stop claims, followers or housekeeping', (c) => {
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

  it('claims of 100 among 150 available rows are prompt while a producer holds a row older than most of them', async () => {
    // Enough candidates that a plan joining them by a scan of the table (hash or merge) is plausible
    // on SQL Server; such a scan would wait for the open row. The claims' UPDATE seeks instead.
    const keyed = (from: number, count: number) =>
      Array.from({ length: count }, (_, n) => ({ key: `k${from + n}`, payload: { n: from + n } }));
    const receiveMany = async (from: number, count: number) => {
      for (let n = from; n < from + count; n++) await receive({ idempotencyKey: `e${n}`, source: 'ledger', aggregateId: `a${n}` });
    };
    await enqueue(...keyed(0, 50));
    await receiveMany(0, 50);
    await whileOpen(async (open) => {
      await c.dialect.outboxInsert({
        manager: open,
        rows: toOutboxRows([{ destination: 'd', key: 'held', payload: { n: -1 } }], 1_000_000),
      });
      await c.dialect.inboxInsertIfAbsent({
        row: { source: 'ledger', idempotencyKey: 'held', aggregateId: 'held', payloadJson: '{}', headersJson: '{}' },
        manager: open,
      });
      // Committed after the open rows: ids above theirs.
      await enqueue(...keyed(50, 100));
      await receiveMany(50, 100);
      const [claims, ms] = await timed(() => claimOutbox(100));
      assert.equal(claims.length, 100);
      assert.ok(!claims.some((claim) => claim.message.key === 'held'));
      assert.ok(ms < PROMPT_MS, `outbox claim in ${ms} ms`);
      const [pulled, pullMs] = await timed(() => c.take.pull.claimBatch({ source: 'ledger', limit: 100, leaseMs: LONG }));
      assert.equal(pulled.length, 100);
      assert.ok(!pulled.some((claim) => claim.message.idempotencyKey === 'held'));
      assert.ok(pullMs < PROMPT_MS, `pull claim in ${pullMs} ms`);
      const [relayed, relayMs] = await timed(() => c.take.relay.claim({ sources: ['ledger'], limit: 100, leaseMs: LONG }));
      assert.equal(relayed.length, 50, 'the rest of the committed rows');
      assert.ok(relayMs < PROMPT_MS, `relay claim in ${relayMs} ms`);
    });
  });

  it('the dead-instance sweep and the reclaim pass over a claimed row an open transaction holds', async () => {
    const tables = resolveTables(CONFORMANCE_TABLES);
    const [dead, live] = [randomUUID(), randomUUID()];
    const identity = { host: 'conformance', pid: 1, dataSource: 'default', version: 'test' };
    await c.dialect.instanceRegister({ id: dead, ...identity, deadAfterMs: 1 });
    await c.dialect.instanceRegister({ id: live, ...identity, deadAfterMs: LONG });
    try {
      await enqueue({ key: 'of-live', payload: { n: 1 } }, { key: 'of-dead', payload: { n: 2 } }, { key: 'expired', payload: { n: 3 } });
      const [ofLive] = await createDialect(c.db.dataSource, tables, { instance: { id: live } }).outboxClaimBatch({
        limit: 1,
        leaseMs: LONG,
      });
      const [ofDead] = await createDialect(c.db.dataSource, tables, { instance: { id: dead } }).outboxClaimBatch({
        limit: 1,
        leaseMs: LONG,
      });
      const [expired] = await claimOutbox(1);
      assert.deepEqual([ofLive.message.key, ofDead.message.key, expired.message.key], ['of-live', 'of-dead', 'expired']);
      await c.db.expireLease('outbox', expired.id);
      await whileOpen(async (open) => {
        // The live instance's completion, in a transaction that stays open: its row and its lease
        // index entry stay locked (with either READ_COMMITTED_SNAPSHOT setting on SQL Server).
        assert.equal(await c.dialect.leaseComplete({ table: 'outbox', id: ofLive.id, token: ofLive.token, manager: open }), true);
        const [ended, sweepMs] = await timed(() => c.dialect.instanceEndDead({ self: live, unregisteredAfterMs: LONG }));
        assert.ok(sweepMs < PROMPT_MS, `swept in ${sweepMs} ms`);
        assert.ok(
          ended.some((instance) => instance.id === dead),
          JSON.stringify(ended),
        );
        assert.ok(!ended.some((instance) => instance.id === live));
        const [reclaimed, reclaimMs] = await timed(() => c.take.outbox.reclaim({ maxAttempts: 5 }));
        assert.ok(reclaimMs < PROMPT_MS, `reclaimed in ${reclaimMs} ms`);
        assert.ok(reclaimed.pending >= 1, JSON.stringify(reclaimed));
        assert.equal((await c.db.row('outbox', expired.id)).state, 'pending');
      });
      assert.equal((await c.db.row('outbox', ofLive.id)).state, 'processing', 'the completion rolled back; the claim is still live');
    } finally {
      await c.dialect.instanceDeregister({ id: live });
    }
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
