import type { LeaseService } from './lease.service';
import type { Claim } from './lease.types';

const MAX_BATCH = 1000;

/**
 * Group completion: every completion asked for during one turn of the event loop, or while the
 * previous statement runs, goes into one fenced `completeBatch` statement. Under load that is one
 * round trip for many messages; alone, a completion waits for nothing but its own statement.
 */
export class BatchCompleter {
  private queue: { claim: Claim; resolve: (completed: boolean) => void; reject: (error: unknown) => void }[] = [];
  private flushing = false;

  constructor(private readonly lease: LeaseService) {}

  /** Resolves `true` when the claim's row was completed, `false` when the claim was lost. */
  complete(claim: Claim): Promise<boolean> {
    return new Promise((resolve, reject) => {
      this.queue.push({ claim, resolve, reject });
      if (!this.flushing) {
        this.flushing = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  private async flush(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, MAX_BATCH);
      try {
        const completed = await this.lease.completeBatch(batch.map((entry) => entry.claim));
        for (const entry of batch) entry.resolve(completed.has(entry.claim));
      } catch (error) {
        for (const entry of batch) entry.reject(error);
      }
    }
    this.flushing = false;
  }
}
