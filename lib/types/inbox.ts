import type { InboxMessage } from './messages';
import type { OutboxMessageInput } from './outbox';

/** What `InboxService.receive()` stores. */
export interface InboxMessageInput {
  /** Who sent it; a relay route or a `@PullHandler` must consume this source. */
  source: string;
  /** Unique per source: a second receive with the same key is a duplicate. */
  idempotencyKey: string;
  /** Ordering key within the source: rows of one aggregate are handled one at a time, in receive order. */
  aggregateId?: string | null;
  /** Any JSON-serializable value. */
  payload: unknown;
  /** String headers kept with the message. */
  headers?: Record<string, string>;
}

export interface ReceiveResult {
  /** The row id (a bigint, as a string): the new row's, or the stored one's for a duplicate. */
  id: string;
  /** True when the message was already stored; a duplicate is not an error. */
  duplicate: boolean;
}

/**
 * Turns an inbox message into the outbox message(s) to send on (sync or async). It runs before
 * the forward transaction, under the row's claim; throwing retries the row later with backoff,
 * and an invalid result (`QueueBoxValidationError`) dead-letters it.
 */
export type RelayRoute = (
  message: InboxMessage,
  /** `signal` aborts when the claim is lost or the route passes `inbox.relay.handlerTimeout`. */
  context: { signal: AbortSignal },
) => OutboxMessageInput | OutboxMessageInput[] | Promise<OutboxMessageInput | OutboxMessageInput[]>;
