import type { InboxMessage, OutboundMessage } from './messages';

/**
 * Which worker owns a claim: the outbox poller, the inbox relay, a pull worker (or a pull client
 * of yours). Events say it (`component`); the metrics' `component` label keeps the relay's
 * earlier value, `inbox` (see metrics/metric-labels.ts).
 */
export type ClaimComponent = 'outbox' | 'relay' | 'pull';

/**
 * One of QueueBox's two tables: the outbox (rows per destination and key, finished as `sent`) or
 * the inbox (rows per source and aggregate, finished as `processed`). What a claim's row is in,
 * what a fenced write targets, what an admin call reads.
 */
export type QueueTable = 'outbox' | 'inbox';

/** @deprecated Since 0.2: `QueueTable`. */
export type AdminComponent = QueueTable;

/**
 * Ownership of one row: only the holder of `token` can finish it, and only while the lease,
 * computed by the database clock, has not expired. This is all fencing (`LeaseService`) reads;
 * what the row carries is the worker's (`WorkerClaim`).
 */
export interface Claim {
  readonly component: ClaimComponent;
  /** The table the row is in. */
  readonly table: QueueTable;
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

/** An inbox relay's (`relay`) or pull worker's (`pull`) claim. */
export interface InboxClaim extends WorkerClaim<InboxMessage> {
  readonly component: 'relay' | 'pull';
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

/** A pending row right after a claimed head of its aggregate or key (the followers read). */
export interface FollowerRow<M = InboxMessage> {
  /** The claimed row it follows. */
  headId: string;
  /** Available now: the rows after the first that is not are left for later. */
  due: boolean;
  /** `attempt` is the one completing it would count. */
  message: M;
}
