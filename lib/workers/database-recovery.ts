// Worker runtime: the "the database answers again" signal that ends the claim loops' waits, and
// each loop's count of failed claims with its retry wait. Provided by QueueBoxModule; ClaimLoop waits
// on it and signals it; WorkNotifications and QueueBoxHealth signal it.

import { Injectable, type Logger } from '@nestjs/common';
import { describeError } from '../common/errors';
import { messages } from '../texts/queuebox.messages';

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

/**
 * Longest wait between two claims that failed (the database is down or unreachable). The wait
 * starts at twice `pollIntervalMs` and doubles per failure up to this; a recovery signal
 * (`DatabaseRecovery`) ends it early.
 */
export const MAX_CLAIM_RETRY_MS = 5_000;

/** One loop's claims that failed in a row: how long it waits before the next, and what it logs. */
export class ClaimFailures {
  private count = 0;
  private stopWaiting?: () => void;

  constructor(
    private readonly loopName: string,
    private readonly pollIntervalMs: number,
    private readonly logger: Logger,
    private readonly recovery?: DatabaseRecovery,
  ) {}

  /** Its last claim failed: alive, but not claiming. */
  get failing(): boolean {
    return this.count > 0;
  }

  /**
   * A claim failed: logs it and returns how long to wait, twice `pollIntervalMs` doubling per
   * failure up to `MAX_CLAIM_RETRY_MS`; `wake` ends the wait when another loop or a health check
   * sees the database answer.
   */
  failed(error: unknown, wake: () => void): number {
    this.count++;
    const retryMs = Math.min(MAX_CLAIM_RETRY_MS, this.pollIntervalMs * 2 ** Math.min(this.count, 10));
    this.logger.error(messages.claimFailed(this.loopName, describeError(error), retryMs));
    this.stop();
    this.stopWaiting = this.recovery?.waitFor(wake);
    return retryMs;
  }

  /** A claim worked: after failures, the database is back for the other loops too. */
  succeeded(): void {
    if (this.count === 0) return;
    this.logger.log(messages.claimRecovered(this.loopName, this.count));
    this.count = 0;
    this.stop();
    this.recovery?.recovered();
  }

  /** Stops waiting for the recovery signal (the loop stops). */
  stop(): void {
    this.stopWaiting?.();
    this.stopWaiting = undefined;
  }
}
