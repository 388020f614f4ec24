import type { OutboundMessage } from './messages';

/** What the application hands to `OutboxService.enqueue()`. */
export interface OutboxMessageInput {
  /** Where the message goes; picks the publisher route and, for the HTTP publisher, the URL. */
  destination: string;
  /** Ordering key: messages of one key are published one at a time, in enqueue order. Omit for no ordering. */
  key?: string | null;
  /** Any JSON-serializable value. */
  payload: unknown;
  /** String headers delivered with the message. */
  headers?: Record<string, string>;
  /** A UUID; defaults to a new one. Travels as the `X-Message-Id` header. */
  messageId?: string;
  /** Publish no earlier than this time. Defaults to the enqueue transaction's time. */
  availableAt?: Date;
}

/** Options of one `enqueue()` / `enqueueMany()` call. */
export interface EnqueueOptions {
  /**
   * Store the messages even though `manager` is not in a transaction (`dataSource.manager`): each
   * statement then commits on its own, with no business change to commit or roll back with.
   * Default `false`: such a call throws `TransactionRequiredError`. For scripts and back-fills
   * that mean it.
   */
  allowAutocommit?: boolean;
  /**
   * What a `messageId` the outbox already holds does. `'error'` (the default): the call throws
   * `DuplicateMessageIdError` and stores nothing (on PostgreSQL the failed insert aborts your
   * transaction). `'ignore'`: that message is not stored, its result is the stored row's
   * (`duplicate: true`), the others of the call are stored, and your transaction goes on, on both
   * databases and under concurrent enqueues of the same id (the second waits for the first to
   * commit or roll back). "Held" means a row with that id exists now, in any state: once retention
   * deleted it, the same id is stored again as a new message.
   */
  onDuplicate?: 'error' | 'ignore';
}

/** What `enqueue()` returns for each message. */
export interface EnqueueResult {
  /** The row id (a bigint, as a string): the stored row's when `duplicate`. */
  id: string;
  messageId: string;
  /** The outbox held this `messageId` already and nothing was stored (`onDuplicate: 'ignore'` only; otherwise false). */
  duplicate: boolean;
}

/**
 * Delivers outbox messages. Return normally when the destination has the message; throw to have
 * it retried with backoff; throw `PermanentPublishError` to dead-letter it now. Stop work when
 * `signal` aborts: the claim was lost or the application is shutting down. The signal is the
 * publish's until its promise settles: do not keep it (or listeners on it) after that, since
 * QueueBox may hand a signal that was never aborted and has no listener left to a later publish.
 *
 * @example
 * const publisher: Publisher = {
 *   async publish(message, signal) { await broker.send(message.destination, message.payload, { signal }); },
 * };
 */
export interface Publisher {
  publish(message: OutboundMessage, signal: AbortSignal): Promise<void>;
  /**
   * The destinations this publisher is configured for, when it knows them (`HttpPublisher` with a
   * `destinations` object does). Optional: QueueBox's metrics show a gauge of 0 for each from
   * start-up, so an `absent()` alert does not fire on a fresh replica.
   */
  destinations?(): readonly string[];
}
