import type { InboxMessage } from '../inbox/inbox.types';
import type { OutboundMessage } from '../outbox/outbox.types';

/** Which worker owns a claim; also the `component` label of `queuebox_claims_lost_total`. */
export type ClaimComponent = 'outbox' | 'inbox' | 'pull';

/**
 * Ownership of one row: only the holder of `token` can finish it, and only while the lease,
 * computed by the database clock, has not expired.
 */
export interface Claim {
  readonly component: ClaimComponent;
  readonly id: string;
  readonly token: string;
  readonly leaseMs: number;
  /** Database time at which the lease ends; moved forward by each successful renewal. */
  leaseExpiresAt: Date;
  /** 1 for the first claim of the row. */
  readonly attempt: number;
}

export interface OutboxClaim extends Claim {
  readonly component: 'outbox';
  readonly message: OutboundMessage;
}

export interface InboxClaim extends Claim {
  readonly component: 'inbox' | 'pull';
  readonly message: InboxMessage;
}
