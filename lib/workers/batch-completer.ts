// Worker runtime: the outbox poller's completions, grouped into one fenced statement per turn of
// the event loop. Used by OutboxPoller.

import type { LeaseService } from '../lease/lease.service';
import type { Claim } from '../types/claims';
import type { CompletionWaiter } from './outcome-recorder';
import { TurnBatcher } from './turn-batcher';

const MAX_BATCH = 1000;

/**
 * Group completion: every completion asked for during one turn of the event loop, or while the
 * previous statement runs, goes into one fenced statement (up to 1,000 claims). Under load that is
 * one round trip for many messages; alone, a completion waits for nothing but its own statement.
 * Each claim's waiter is told whether its row was completed (a claim lost meanwhile was not), or
 * that the statement failed: no promise per message.
 */
export class BatchCompleter {
  private readonly batcher: TurnBatcher<Claim, boolean>;

  constructor(lease: LeaseService) {
    this.batcher = new TurnBatcher(MAX_BATCH, async (claims) => {
      const completed = await lease.completeBatch(claims);
      return claims.map((claim) => completed.has(claim));
    });
  }

  complete(waiter: CompletionWaiter): void {
    this.batcher.enqueue(waiter);
  }
}
