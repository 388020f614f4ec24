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
 * How each message of a `publishBatch` call ended, in the order the call was given them (the shape
 * `Promise.allSettled` resolves to): `fulfilled` is published, `rejected` failed with `reason`.
 */
export type PublishBatchResult = readonly PromiseSettledResult<unknown>[];

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
   * Optional: delivers several messages in one call (one broker round trip for many messages).
   * When a publisher has it, the outbox poller hands it the messages claimed together, up to
   * `outbox.publishBatchSize` a call and `outbox.concurrency` calls at once; `publish` still serves
   * the rows published after a head of their key (its followers). Each message keeps its own
   * publish span when tracing is on: its headers carry that span's context.
   *
   * Resolve with nothing when the destination has every message. To fail some, resolve with one
   * result per message, in the order given (what `Promise.allSettled` returns): a `rejected` one
   * is retried with backoff, or dead-lettered now for a `PermanentPublishError`, as a throwing
   * `publish` would be. A call that throws, or whose signal aborts (`publishTimeout` for the whole
   * call, or shutdown), fails every message of it. A batch holds at most one message per ordering
   * key, so its messages may go out in any order. See docs/publishing.md ("Publishing in batches").
   *
   * @example
   * async publishBatch(messages, signal) {
   *   await producer.send({ topic: 'events', messages: messages.map(toKafkaMessage) }, { signal });
   * }
   */
  // void: an `async` method that returns nothing (every message published) needs no `return undefined`.
  // biome-ignore lint/suspicious/noConfusingVoidType: the return type of such a method is Promise<void>
  publishBatch?(messages: readonly OutboundMessage[], signal: AbortSignal): Promise<PublishBatchResult | void>;
  /**
   * `true` when `publishBatch` delivers a call's messages in the order given and, once one fails,
   * none after it (it reports those failed too): as a Kafka producer does for one partition, or a
   * loop that sends one message after another and stops at a failure. Then the rows published
   * after a head of their key (its followers) go out in `publishBatch` calls as well, in key order,
   * instead of one `publish` each. Default: a call's messages may go out in any order (sent side
   * by side), so a key's messages never share one. See docs/publishing.md ("Publishing in batches").
   */
  readonly keepsBatchOrder?: boolean;
  /**
   * The destinations this publisher is configured for, when it knows them (`HttpPublisher` with a
   * `destinations` object does). Optional: QueueBox's metrics show a gauge of 0 for each from
   * start-up, so an `absent()` alert does not fire on a fresh replica.
   */
  destinations?(): readonly string[];
}
