import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LeaseKeeper } from '../../lib/lease/lease-keeper';
import type { WorkerClaim } from '../../lib/types/claims';
import { type HeldClaim, WorkSlots } from '../../lib/workers/work-slots';

// The slot accounting of a claim loop on its own: which claims start, how many the loop may hold,
// and what a step that keeps its slot (timed-out work still running) does to both.

type TestClaim = WorkerClaim<null>;

function claim(id: number): TestClaim {
  return {
    component: 'outbox',
    table: 'outbox',
    id: String(id),
    token: String(id),
    leaseMs: 60_000,
    leaseExpiresAt: new Date(),
    attempt: 1,
    message: null,
  };
}

function setup(limits: { concurrency: number; batchSize: number }) {
  const started: string[] = [];
  const events: string[] = [];
  const slots = new WorkSlots<TestClaim>(limits, {
    start: (held) => started.push(held.claim.id),
    keptSlotFreed: () => events.push('kept slot freed'),
    unkeyedFinishing: () => events.push('unkeyed finishing'),
  });
  const keepers: LeaseKeeper[] = [];
  const hold = (id: number, keyed = false): HeldClaim<TestClaim> => {
    const keeper = new LeaseKeeper(
      claim(id),
      async () => true,
      () => undefined,
    );
    keepers.push(keeper);
    return slots.hold(claim(id), keeper, keyed);
  };
  const stopKeepers = () => Promise.all(keepers.map((keeper) => keeper.stop()));
  return { slots, started, events, hold, stopKeepers };
}

describe('WorkSlots', () => {
  it('starts at most `concurrency` steps, in the order the claims were held; a slot given back starts the next', async () => {
    const { slots, started, hold, stopKeepers } = setup({ concurrency: 2, batchSize: 4 });
    const held = [1, 2, 3, 4].map((id) => hold(id, true));
    assert.deepEqual(started, ['1', '2']);
    held[1].release();
    assert.deepEqual(started, ['1', '2', '3']);
    held[1].release(); // twice: the slot is given back once
    assert.deepEqual(started, ['1', '2', '3']);
    assert.equal(slots.size, 4);
    await stopKeepers();
  });

  it('counts a claim without a key against batchSize until its step gives back its slot; a keyed one until it is let go', async () => {
    const { slots, events, hold, stopKeepers } = setup({ concurrency: 2, batchSize: 4 });
    const unkeyed = hold(1);
    const keyed = hold(2, true);
    assert.equal(slots.counted, 2);
    unkeyed.release();
    keyed.release();
    assert.deepEqual(events, ['unkeyed finishing']);
    assert.equal(slots.counted, 1, 'the unkeyed claim finishing counts no more; the keyed one does');
    slots.letGo(unkeyed);
    slots.letGo(keyed);
    assert.deepEqual([slots.size, slots.counted], [0, 0]);
    await Promise.all([unkeyed.done, keyed.done]);
    await stopKeepers();
  });

  it('never lets more than batchSize finishing unkeyed claims go uncounted (writes that lag cannot pile claims up)', async () => {
    const { slots, hold, stopKeepers } = setup({ concurrency: 8, batchSize: 2 });
    for (const held of [1, 2, 3, 4, 5].map((id) => hold(id))) held.release();
    assert.deepEqual([slots.size, slots.counted], [5, 3]);
    await stopKeepers();
  });

  it('a slot kept by timed-out work stays taken until the work ends, and lowers the capacity in proportion meanwhile', async () => {
    const { slots, started, events, hold, stopKeepers } = setup({ concurrency: 4, batchSize: 8 });
    const held = [1, 2, 3, 4, 5].map((id) => hold(id, true));
    assert.equal(slots.capacity(0), 8);
    let end!: () => void;
    held[0].holdUntil(
      new Promise<void>((resolve) => {
        end = resolve;
      }),
    );
    assert.deepEqual(started, ['1', '2', '3', '4'], 'the kept slot is not free: claim 5 waits');
    assert.equal(slots.capacity(0), 6, '3 live slots of 4: three quarters of batchSize');
    assert.equal(slots.capacity(1), 4, 'and a slot stuck elsewhere (a batch pull handler) counts too');
    assert.equal(slots.capacity(3), 0, 'none while every slot is stuck');
    end();
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(started, ['1', '2', '3', '4', '5']);
    assert.deepEqual(events, ['kept slot freed']);
    assert.equal(slots.capacity(0), 8);
    await stopKeepers();
  });

  it('a step that gives back its slot as it starts lets the next start from the same loop, not a nested one (a publishBatch join)', async () => {
    // 20,000 claims wait for the one slot; once it is free each start gives it back at once, as an
    // outbox step joining a publishBatch call does. Nested starts would need 20,000 levels: a RangeError.
    const started: string[] = [];
    let nested = 0;
    let deepest = 0;
    const slots = new WorkSlots<TestClaim>(
      { concurrency: 1, batchSize: 20_001 },
      {
        start: (held) => {
          started.push(held.claim.id);
          nested++;
          deepest = Math.max(deepest, nested);
          if (held.claim.id !== '0') held.release();
          nested--;
        },
        keptSlotFreed: () => undefined,
        unkeyedFinishing: () => undefined,
      },
    );
    const keepers: LeaseKeeper[] = [];
    const hold = (id: number) => {
      const keeper = new LeaseKeeper(
        claim(id),
        async () => true,
        () => undefined,
      );
      keepers.push(keeper);
      return slots.hold(claim(id), keeper, false);
    };
    const first = hold(0);
    for (let id = 1; id <= 20_000; id++) hold(id);
    assert.deepEqual(started, ['0'], 'the others wait for the slot');
    first.release();
    assert.equal(started.length, 20_001);
    assert.equal(started[20_000], '20000', 'in the order held');
    assert.equal(deepest, 1, 'no start ran inside another');
    await Promise.all(keepers.map((keeper) => keeper.stop()));
  });

  it('gives back the claims still waiting for a slot, and none that started', async () => {
    const { slots, hold, stopKeepers } = setup({ concurrency: 1, batchSize: 3 });
    [1, 2, 3].map((id) => hold(id));
    const waiting = slots.takeWaiting();
    assert.deepEqual(
      waiting.map((held) => held.claim.id),
      ['2', '3'],
    );
    for (const held of waiting) slots.letGo(held);
    assert.equal(slots.size, 1);
    await stopKeepers();
  });
});
