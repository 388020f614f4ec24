import type { DataSource } from 'typeorm';
import type { Dialect, OutboxInsertRow } from '../dialects/dialect';
import type { LeaseService } from '../lease/lease.service';
import type { InboxClaim } from '../lease/lease.types';

/**
 * How a forward handed to `ForwardBatcher` ended: its rows are in the outbox and its inbox row is
 * `processed` (`forwarded`); its claim was lost in the fence and nothing of it was written
 * (`lost`); or the caller must write it in a transaction of its own (`alone`).
 */
export type BatchedForward = 'forwarded' | 'lost' | 'alone';

interface QueuedForward {
  claim: InboxClaim;
  rows: OutboxInsertRow[];
  resolve: (outcome: BatchedForward) => void;
}

/**
 * Group forwarding: the forwards that are ready during one turn of the event loop, or while the
 * previous batch's transaction runs, share one transaction (up to `maxBatch` of them): one fenced
 * completion of all their claims, then the outbox rows of the claims it completed only, so a claim
 * lost in the fence never reaches the outbox (I6). Under load that is one transaction for many
 * messages instead of one each; alone, a forward waits for nothing but its own transaction.
 *
 * When a batch's transaction fails, nothing of it was written, and every forward of it is told to
 * go `alone`: one message whose rows cannot be inserted (a message id already in the outbox) then
 * fails only itself, with the retry and dead-letter handling of a single forward.
 */
export class ForwardBatcher {
  private queue: QueuedForward[] = [];
  private flushing = false;

  constructor(
    private readonly dataSource: DataSource,
    private readonly dialect: Dialect,
    private readonly lease: LeaseService,
    private readonly maxBatch: number,
  ) {}

  /** Settles once the forward was written with its batch, lost, or must be written `alone`. Never rejects. */
  forward(claim: InboxClaim, rows: OutboxInsertRow[]): Promise<BatchedForward> {
    return new Promise((resolve) => {
      this.queue.push({ claim, rows, resolve });
      if (!this.flushing) {
        this.flushing = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  private async flush(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, this.maxBatch);
      // A batch of one is a single forward: written as such, it is not tried a second time when it fails.
      if (batch.length === 1) {
        batch[0].resolve('alone');
        continue;
      }
      try {
        const completed = await this.dataSource.transaction(async (manager) => {
          const done = await this.lease.completeBatch(
            batch.map((entry) => entry.claim),
            manager,
          );
          const rows = batch.filter((entry) => done.has(entry.claim)).flatMap((entry) => entry.rows);
          if (rows.length > 0) await this.dialect.outboxInsert({ manager, rows });
          return done;
        });
        for (const entry of batch) entry.resolve(completed.has(entry.claim) ? 'forwarded' : 'lost');
      } catch {
        // Rolled back: each forward is tried in a transaction of its own, which reports its own error.
        for (const entry of batch) entry.resolve('alone');
      }
    }
    this.flushing = false;
  }
}
