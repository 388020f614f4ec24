import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ClaimLostError } from '../../lib/errors/queuebox.errors';
import { LeaseKeeper } from '../../lib/lease/lease-keeper';
import type { Claim } from '../../lib/types/claims';

describe('LeaseKeeper: a renewal that never answers', () => {
  it('counts as failed two thirds of the lease later: the work is aborted and stop() returns', { timeout: 10_000 }, async () => {
    const claim = { component: 'pull', id: '1', token: 't', leaseMs: 60, leaseExpiresAt: new Date(), attempt: 1 } as Claim;
    let renewals = 0;
    const lost: Claim[] = [];
    // A renewal on a connection behind a silent partition: sent, never answered.
    const keeper = new LeaseKeeper(
      claim,
      () => {
        renewals++;
        return new Promise<boolean>(() => undefined);
      },
      (c) => lost.push(c),
    );
    // The keeper's timers are unref'd (they never hold a process open): this one keeps the test's.
    const alive = setTimeout(() => undefined, 5000);
    const reason = await new Promise<unknown>((resolve) => keeper.onAbort(resolve));
    clearTimeout(alive);
    assert.ok(reason instanceof ClaimLostError);
    assert.deepEqual(lost, [claim]);
    assert.equal(renewals, 1, 'no renewal is stacked behind the unanswered one');
    await keeper.stop();
  });
});
