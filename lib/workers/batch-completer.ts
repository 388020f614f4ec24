// Worker runtime: the outbox poller's completions, grouped into one fenced `completeBatch` per
// turn of the event loop. Used by OutboxPoller.

import type { LeaseService } from '../lease/lease.service';
import type { Claim } from '../types/claims';
import { TurnBatcher } from './turn-batcher';

const MAX_BATCH = 1000;

/**
 * Group completion: every completion asked for during one turn of the event loop, or while the
 * previous statement runs, goes into one fenced `completeBatch` statement. Under load that is one
 * round trip for many messages; alone, a completion waits for nothing but its own statement.
 */
export class BatchCompleter {
  private readonly batcher: TurnBatcher<Claim, boolean>;

  constructor(lease: LeaseService) {
    this.batcher = new TurnBatcher(MAX_BATCH, async (claims) => {
      const completed = await lease.completeBatch(claims);
      return claims.map((claim) => completed.has(claim));
    });
  }

  /** Resolves `true` when the claim's row was completed, `false` when the claim was lost. */
  complete(claim: Claim): Promise<boolean> {
    return this.batcher.add(claim);
  }
}
