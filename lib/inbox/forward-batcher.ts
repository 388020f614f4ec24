import type { Dialect, OutboxInsertRow } from '../dialects/dialect';
import type { LeaseService } from '../lease/lease.service';
import type { OutboxWriter } from '../outbox/outbox.writer';
import { messages } from '../queuebox.messages';
import type { InboxClaim } from '../types/claims';
import type { InboxFollowers } from '../workers/inbox-followers';
import { TurnBatcher } from '../workers/turn-batcher';

/**
 * How a forward handed to `ForwardBatcher` ended: its rows are in the outbox and its inbox row is
 * `processed` (`forwarded`); its claim was lost in the fence and nothing of it was written
 * (`lost`); or the caller must write it in a transaction of its own (`alone`).
 */
export type BatchedForward = 'forwarded' | 'lost' | 'alone';

/** One inbox row's forward: its claim (a follower's rides on its head's) and the outbox rows its route made. */
export interface RoutedRow {
  claim: InboxClaim;
  rows: OutboxInsertRow[];
}

/** A claimed head's forward, with its followers (forwarded with it, after it, in id order). */
export interface Forward extends RoutedRow {
  followers: RoutedRow[];
}

/** The outbox rows of a forward, the head's first, then each follower's in id order. */
export const rowsOf = (forward: { rows: OutboxInsertRow[]; followers: RoutedRow[] }) => [
  ...forward.rows,
  ...forward.followers.flatMap((follower) => follower.rows),
];

/**
 * Group forwarding: the forwards that are ready during one turn of the event loop, or while the
 * previous batch's transaction runs, share one transaction (up to `maxBatch` of them): one fenced
 * completion of all their claims, then the completion of those claims' followers, then the outbox
 * rows of the claims it completed only (each head's, then its followers'), so a claim lost in the
 * fence never reaches the outbox (I6). Under load that is one transaction for many messages
 * instead of one each; alone, a forward waits for nothing but its own transaction.
 *
 * When a batch's transaction fails, nothing of it was written, and its forwards are told to go
 * `alone`: one message whose rows cannot be inserted (a message id already in the outbox) then
 * fails only itself, with the retry and dead-letter handling of a single forward. A batch of one
 * forward without followers was that single forward already: its error is its own.
 */
export class ForwardBatcher {
  private readonly batcher: TurnBatcher<Forward, BatchedForward>;

  constructor(
    private readonly dialect: Dialect,
    private readonly lease: LeaseService,
    private readonly followers: InboxFollowers,
    private readonly writer: OutboxWriter,
    maxBatch: number,
  ) {
    this.batcher = new TurnBatcher(maxBatch, (batch) => this.write(batch));
  }

  /** Settles once the forward was written with its batch, lost, or must be written `alone`; rejects with a single forward's own error. */
  forward(forward: Forward): Promise<BatchedForward> {
    return this.batcher.add(forward);
  }

  private async write(batch: Forward[]): Promise<BatchedForward[]> {
    try {
      const completed = await this.dialect.transaction(async (manager) => {
        const done = await this.lease.completeBatch(
          batch.map((entry) => entry.claim),
          manager,
        );
        const live = batch.filter((entry) => done.has(entry.claim));
        await this.followers.complete(
          live.flatMap((entry) => entry.followers.map((follower) => follower.claim)),
          manager,
        );
        await this.writer.insert(manager, live.flatMap(rowsOf), messages.relayMessageIdTaken);
        return done;
      });
      return batch.map((entry) => (completed.has(entry.claim) ? 'forwarded' : 'lost'));
    } catch (error) {
      // Rolled back: each forward is tried in a transaction of its own, which reports its own error.
      if (batch.length === 1 && batch[0].followers.length === 0) throw error;
      return batch.map(() => 'alone');
    }
  }
}
