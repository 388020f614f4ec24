import type { LeaseTable } from '../dialects/dialect';
import type { InboxMessage, OutboundMessage } from './claimed-messages';

/** Which worker owns a claim; also the `component` label of `queuebox_claims_lost_total`. */
export type ClaimComponent = 'outbox' | 'inbox' | 'pull';

/**
 * Ownership of one row: only the holder of `token` can finish it, and only while the lease,
 * computed by the database clock, has not expired. This is all fencing (`renew`, `complete`,
 * `retry`, `deadLetter`, `release`, `keep`) reads; what the row carries is the worker's
 * (`WorkerClaim`).
 */
export interface Claim {
  readonly component: ClaimComponent;
  /** The table the row is in. */
  readonly table: LeaseTable;
  readonly id: string;
  readonly token: string;
  readonly leaseMs: number;
  /** Database time at which the lease ends; moved forward by each successful renewal. */
  leaseExpiresAt: Date;
  /** 1 for the first claim of the row. */
  readonly attempt: number;
}

/** A claim with the message its worker works on. */
export interface WorkerClaim<M> extends Claim {
  readonly message: M;
}

/** An outbox poller's claim. */
export interface OutboxClaim extends WorkerClaim<OutboundMessage> {
  readonly component: 'outbox';
  readonly table: 'outbox';
}

/** An inbox relay's (`inbox`) or pull worker's (`pull`) claim. */
export interface InboxClaim extends WorkerClaim<InboxMessage> {
  readonly component: 'inbox' | 'pull';
  readonly table: 'inbox';
  /** Set on a follower (`LeaseService.followers`): the claimed head whose claim it rides on. */
  readonly headId?: string;
}
