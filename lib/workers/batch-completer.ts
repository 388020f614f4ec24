// Worker runtime: the outbox poller's completions, grouped into one fenced statement per turn of
// the event loop. Used by OutboxPoller.

import type { LeaseService } from '../lease/lease.service';
import type { CompletionWaiter } from './outcome-recorder';

const MAX_BATCH = 1000;

/**
 * Group completion: every completion asked for during one turn of the event loop, or while the
 * previous statement runs, goes into one fenced statement (up to 1,000 claims). Under load that is
 * one round trip for many messages; alone, a completion waits for nothing but its own statement.
 * Each claim's waiter is told whether its row was completed (a claim lost meanwhile was not), or
 * that the statement failed: no promise per message.
 */
export class BatchCompleter {
  private readonly groups: CompletionWaiter[][] = [];
  private flushing = false;

  constructor(private readonly lease: LeaseService) {}

  complete(waiter: CompletionWaiter): void {
    let group = this.groups[this.groups.length - 1];
    if (!group || group.length >= MAX_BATCH) {
      group = [];
      this.groups.push(group);
    }
    group.push(waiter);
    if (!this.flushing) {
      this.flushing = true;
      setImmediate(() => void this.flush());
    }
  }

  private async flush(): Promise<void> {
    for (let group = this.groups.shift(); group; group = this.groups.shift()) {
      let completed: { has(claim: CompletionWaiter['claim']): boolean };
      try {
        completed = await this.lease.completeEach(group.map((waiter) => waiter.claim));
      } catch (error) {
        for (const waiter of group) waiter.completionFailed(error);
        continue;
      }
      for (const waiter of group) waiter.completionWritten(completed.has(waiter.claim));
    }
    this.flushing = false;
  }
}
