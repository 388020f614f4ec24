import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Logger } from '@nestjs/common';
import { LeaseKeeper } from '../../lib/lease/lease-keeper';
import type { WorkerClaim } from '../../lib/types/claims';
import { ClaimLoop } from '../../lib/workers/claim-loop';
import { DatabaseRecovery, MAX_CLAIM_RETRY_MS } from '../../lib/workers/database-recovery';
import type { OutcomeRecorder } from '../../lib/workers/outcome-recorder';

// The loop's bookkeeping without a database: claims come from a counter, each step returns at once
// and the recorder then waits for a "write" the test releases, as the outbox's completion does.

interface TestClaim extends WorkerClaim<null> {
  keyed: boolean;
}

/** A recorder whose writes wait for `writes` to be released. */
function recorderWaitingFor(writes: (() => void)[]): OutcomeRecorder<TestClaim> {
  return {
    record: () => new Promise<'finished'>((resolve) => writes.push(() => resolve('finished'))),
  } as unknown as OutcomeRecorder<TestClaim>;
}

function setup(keyed: boolean, claimLimit?: number) {
  let next = 0;
  const claimed: number[] = [];
  const writes: (() => void)[] = [];
  const loop = new ClaimLoop<TestClaim>(
    { name: 'test loop', concurrency: 2, batchSize: 4, claimLimit, pollIntervalMs: 60_000, shutdownTimeoutMs: 1000 },
    {
      claim: async (limit) => {
        claimed.push(limit);
        return Array.from({ length: limit }, () => {
          const id = String(++next);
          return {
            component: 'outbox',
            id,
            token: id,
            leaseMs: 60_000,
            leaseExpiresAt: new Date(),
            attempt: 1,
            keyed,
            message: null,
          } as TestClaim;
        });
      },
      step: async (_claim, keeper) => {
        await keeper.stop();
        return { kind: 'succeeded', durationMs: 0 };
      },
      keep: (claim) =>
        new LeaseKeeper(
          claim,
          async () => true,
          () => undefined,
        ),
      keyOf: (claim) => (claim.keyed ? 'k' : null),
    },
    recorderWaitingFor(writes),
    new Logger('test'),
  );
  return { loop, claimed, writes };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 20));

/** Waits until `done()` holds (a loaded machine may take longer than one `settle`), then one `settle` more: nothing else may follow. */
async function settledWhen(done: () => boolean): Promise<void> {
  const deadline = Date.now() + 5000;
  while (!done() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
  await settle();
}

describe('ClaimLoop', () => {
  it('claims again while the outcomes of claims that hold no other row are written', async () => {
    const { loop, claimed, writes } = setup(false);
    loop.start();
    await settledWhen(() => claimed.length >= 2 && loop.inFlightCount >= 8);
    // Every claim gave back its slot and waits for its write: those do not count, so the loop
    // claimed more, but never more than batchSize of them (writes that never end cannot let claims pile up).
    assert.deepEqual(claimed, [4, 4]);
    assert.equal(loop.inFlightCount, 8);
    for (const write of writes.splice(0)) write();
    const stopping = loop.stop();
    for (let i = 0; i < 5; i++) {
      await settle();
      for (const write of writes.splice(0)) write();
    }
    await stopping;
  });

  it('waits for the writes of keyed claims before claiming again (a claim made over them would find their keys in flight)', async () => {
    const { loop, claimed, writes } = setup(true);
    loop.start();
    await settledWhen(() => writes.length >= 4);
    assert.deepEqual(claimed, [4]);
    assert.equal(loop.inFlightCount, 4);
    for (const write of writes.splice(0)) write();
    await settledWhen(() => claimed.length >= 2);
    assert.deepEqual(claimed, [4, 4]);
    const stopping = loop.stop();
    for (let i = 0; i < 5; i++) {
      await settle();
      for (const write of writes.splice(0)) write();
    }
    await stopping;
  });

  it('claimLimit: a claim asks for at most that many, and one that got them all is not short: the loop claims again up to batchSize', async () => {
    const { loop, claimed, writes } = setup(true, 2);
    loop.start();
    // Not a poll interval (60 s) between the two: the first claim was full, not short.
    await settledWhen(() => writes.length >= 4);
    assert.deepEqual(claimed, [2, 2]);
    assert.equal(loop.inFlightCount, 4);
    for (const write of writes.splice(0, 2)) write();
    await settledWhen(() => claimed.length >= 3);
    assert.deepEqual(claimed, [2, 2, 2], 'half the claims finished: the next claim, while the other half is in flight');
    const stopping = loop.stop();
    for (let i = 0; i < 5; i++) {
      await settle();
      for (const write of writes.splice(0)) write();
    }
    await stopping;
  });

  it('after failed claims waits at most MAX_CLAIM_RETRY_MS, and claims again at once when another loop finds the database back', async (t) => {
    const recovery = new DatabaseRecovery();
    let databaseUp = false;
    const attempts = { a: 0, b: 0 };
    const lines: string[] = [];
    const logger = {
      error: (line: string) => lines.push(line),
      log: (line: string) => lines.push(line),
      warn: () => undefined,
    } as unknown as Logger;
    const loopOf = (name: 'a' | 'b') =>
      new ClaimLoop<TestClaim>(
        // A long poll interval: without the recovery signal the next claim is MAX_CLAIM_RETRY_MS away.
        { name: `loop ${name}`, concurrency: 1, batchSize: 1, pollIntervalMs: 60_000, shutdownTimeoutMs: 1000, recovery },
        {
          claim: async () => {
            attempts[name]++;
            if (!databaseUp) throw new Error('connect ECONNREFUSED 127.0.0.1:5432');
            return [];
          },
          step: async () => ({ kind: 'abandoned' }),
          keep: (claim) =>
            new LeaseKeeper(
              claim,
              async () => true,
              () => undefined,
            ),
          keyOf: () => null,
        },
        {} as OutcomeRecorder<TestClaim>,
        logger,
      );
    const a = loopOf('a');
    const b = loopOf('b');
    t.after(() => Promise.all([a.stop(), b.stop()]));
    a.start();
    b.start();
    await settle();
    assert.deepEqual(attempts, { a: 1, b: 1 });
    assert.equal(a.status.waitingForDatabase, true);
    assert.ok(
      lines.some((line) => line.includes(`Trying again in ${MAX_CLAIM_RETRY_MS} ms`)),
      lines.join('\n'),
    );
    assert.equal(MAX_CLAIM_RETRY_MS, 5000);
    databaseUp = true;
    b.wake(); // as new work would: b's claim works again
    await settle();
    assert.equal(attempts.b, 2);
    assert.equal(attempts.a, 2, 'loop a claimed again at once, not at the end of its retry wait');
    assert.equal(a.status.waitingForDatabase, false);
    assert.equal(b.status.waitingForDatabase, false);
  });
});
