import assert from 'node:assert/strict';
import { it } from 'node:test';

import { conformanceSuite, LONG, sleep } from './suite';

conformanceSuite('order (I4)', (c) => {
  const { enqueue, claimOutbox, keysOf } = c;

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
    assert.equal(await c.lease.complete(first[0]), true);
    assert.deepEqual(keysOf(await claimOutbox(10)), ['a:2']);
  });

  it('a failing row blocks its key until it is sent or dead', async () => {
    await enqueue({ key: 'a', payload: { n: 1 } }, { key: 'a', payload: { n: 2 } });
    const [head] = await claimOutbox(10);
    assert.equal(await c.lease.retry(head, { delayMs: LONG, error: 'down' }), true);
    assert.deepEqual(await claimOutbox(10), [], 'a:2 does not overtake the failing a:1');
    await c.db.makeAvailable('outbox');
    const [again] = await claimOutbox(10);
    assert.deepEqual(keysOf([again]), ['a:1']);
    assert.equal(await c.lease.deadLetter(again, 'poison'), true);
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
            assert.equal(await c.lease.complete(claim), true);
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
