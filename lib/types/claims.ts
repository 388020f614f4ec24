import type { InboxMessage, OutboundMessage } from './messages';

/** Which worker owns a claim; also the `component` label of `queuebox_claims_lost_total`. */
export type ClaimComponent = 'outbox' | 'inbox' | 'pull';

/** Which table a claim's row is in. The outbox finishes rows as `sent`, the inbox as `processed`. */
export type ClaimTable = 'outbox' | 'inbox';

/** Which table an admin call targets: the outbox (rows per destination and key) or the inbox (per source and aggregate). */
export type AdminComponent = ClaimTable;

/**
 * Ownership of one row: only the holder of `token` can finish it, and only while the lease,
 * computed by the database clock, has not expired. This is all fencing (`LeaseService`) reads;
 * what the row carries is the worker's (`WorkerClaim`).
 */
export interface Claim {
  readonly component: ClaimComponent;
  /** The table the row is in. */
  readonly table: ClaimTable;
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
  /** Set on a follower (`InboxFollowers.read`): the claimed head whose claim it rides on. */
  readonly headId?: string;
}

/** What a claim statement returns for one row: its fence and its message, decoded once. */
export interface ClaimedRow<M> {
  id: string;
  token: string;
  leaseExpiresAt: Date;
  /** The attempt this claim is (the row's `attempts`, the claim counted). */
  attempt: number;
  message: M;
}

/** A pending inbox row right after a claimed head of its aggregate (the followers read). */
export interface FollowerRow {
  /** The claimed row it follows. */
  headId: string;
  /** Available now: the rows after the first that is not are left for later. */
  due: boolean;
  /** `attempt` is the one completing it would count. */
  message: InboxMessage;
}
