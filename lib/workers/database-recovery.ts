// Worker runtime: the "the database answers again" signal that ends the claim loops' waits.
// Provided by QueueBoxModule; ClaimLoop waits on it and signals it; WorkNotifications and
// QueueBoxHealth signal it.

import { Injectable } from '@nestjs/common';

/**
 * The worker loops of one application that wait for the database after a failed claim, and the
 * signal that ends their wait: any sign that the database answers again (a loop's claim
 * succeeded, the notification connection is back, a health check's `SELECT 1` passed). Without
 * it, each loop would find out only when its own retry wait (at most `MAX_CLAIM_RETRY_MS`) ran
 * out, and publishing would resume seconds after the database did.
 */
@Injectable()
export class DatabaseRecovery {
  private readonly waiting = new Set<() => void>();

  /** Registers `wake`, called once at the next `recovered()`. Returns a function that cancels it. */
  waitFor(wake: () => void): () => void {
    this.waiting.add(wake);
    return () => this.waiting.delete(wake);
  }

  /** The database answered: every waiting loop claims again now. */
  recovered(): void {
    if (this.waiting.size === 0) return;
    const wakes = [...this.waiting];
    this.waiting.clear();
    for (const wake of wakes) wake();
  }
}
