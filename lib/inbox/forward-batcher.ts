import type { Dialect, OutboxInsertRow } from '../dialects/dialect';
import type { InboxFollowers } from '../inbox-runtime/inbox.followers';
import type { LeaseService } from '../lease/lease.service';
import type { OutboxWriter } from '../outbox/outbox.writer';
import { messages } from '../texts/queuebox.messages';
import type { InboxClaim } from '../types/claims';
import { TurnBatcher } from '../workers/turn-batcher';

/** One inbox row's forward: its claim (a follower's rides on its head's) and the outbox rows its route made. */
export interface RoutedRow {
  claim: InboxClaim;
  rows: OutboxInsertRow[];
}

/** A claimed head's forward, with its followers (forwarded with it, after it, in id order). */
export interface Forward extends RoutedRow {
  followers: RoutedRow[];
}

/** How a forward was written: with the followers that went with it, or not at all (its claim was lost in the fence). */
export type Written = { followers: RoutedRow[] } | 'lost';

/**
 * Forward transactions that run at once. With one, the relay's rows wait for the database in turn:
 * the next batch is claimed and routed while one is written (see RelayClaims), then waits for that
 * write to end. With two, one batch's statements are sent while the other's are executed (issue
 * 36: W5 relay 24,000 to 27,000 msg/s). They cannot conflict: each completes its own heads under
 * their fences, and no row of an aggregate is claimed, so none is forwarded, while another of it is
 * in flight.
 */
const FORWARDS_IN_FLIGHT = 2;

/** A forward's write as its batch reports it; a forward written alone may fail with its own error. */
type Attempt = Written | { error: unknown };

/**
 * Group forwarding: the forwards that are ready during one turn of the event loop, or while the
 * batches' transactions in flight run, share one transaction (up to `maxBatch` of them): one fenced
 * completion of all their claims, then the completion of those claims' followers, then the outbox
 * rows of the claims it completed only (each head's, then its followers'), so a claim lost in the
 * fence never reaches the outbox (I6). Under load that is one transaction for many messages
 * instead of one each; alone, a forward waits for nothing but its own transaction.
 *
 * When a batch's transaction fails, nothing of it was written, and each of its forwards is written
 * in a transaction of its own: one message whose rows cannot be inserted (a message id already in
 * the outbox) then fails only itself. A forward that fails alone with followers is written once
 * more without them: a follower that changed, or whose rows the outbox refused, must not fail its
 * head (it comes again as a head, where its own failure counts).
 */
export class ForwardBatcher {
  private readonly batcher: TurnBatcher<Forward, Attempt>;

  constructor(
    private readonly dialect: Dialect,
    private readonly lease: LeaseService,
    private readonly followers: InboxFollowers,
    private readonly writer: OutboxWriter,
    maxBatch: number,
  ) {
    this.batcher = new TurnBatcher(maxBatch, (batch) => this.write(batch), FORWARDS_IN_FLIGHT);
  }

  /** Resolves once the forward was written (with the followers that went with it) or lost; rejects with its own error. */
  async forward(forward: Forward): Promise<Written> {
    const attempt = await this.batcher.add(forward);
    if (typeof attempt === 'object' && 'error' in attempt) throw attempt.error;
    return attempt;
  }

  private async write(batch: Forward[]): Promise<Attempt[]> {
    if (batch.length === 1) return [await this.writeAlone(batch[0])];
    try {
      const completed = await this.transaction(batch);
      return batch.map((forward) => (completed.has(forward.claim) ? { followers: forward.followers } : 'lost'));
    } catch {
      return Promise.all(batch.map((forward) => this.writeAlone(forward)));
    }
  }

  /** One forward in a transaction of its own; once more without its followers when that fails with them. */
  private async writeAlone(forward: Forward): Promise<Attempt> {
    try {
      return await this.writeOne(forward);
    } catch (error) {
      if (forward.followers.length === 0) return { error };
    }
    try {
      return await this.writeOne({ ...forward, followers: [] });
    } catch (error) {
      return { error };
    }
  }

  private async writeOne(forward: Forward): Promise<Written> {
    const completed = await this.transaction([forward]);
    return completed.has(forward.claim) ? { followers: forward.followers } : 'lost';
  }

  /** The forwards' transaction; resolves to the claims its fenced completion completed. */
  private transaction(batch: Forward[]): Promise<Set<InboxClaim>> {
    return this.dialect.transaction(async (manager) => {
      const completed = await this.lease.completeBatch(
        batch.map((forward) => forward.claim),
        manager,
      );
      const live = batch.filter((forward) => completed.has(forward.claim));
      await this.followers.complete(
        live.flatMap((forward) => forward.followers.map((follower) => follower.claim)),
        manager,
      );
      await this.writer.insert(manager, live.flatMap(rowsOf), messages.relayMessageIdTaken);
      return completed;
    });
  }
}

/** The outbox rows of a forward, the head's first, then each follower's in id order. */
function rowsOf(forward: Forward): OutboxInsertRow[] {
  return [...forward.rows, ...forward.followers.flatMap((follower) => follower.rows)];
}
