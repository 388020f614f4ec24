/**
 * Base class of every error QueueBox throws. `code` is stable and safe to match on;
 * the message says what went wrong and what to do about it.
 *
 * @example
 * try { await outbox.enqueue(manager, msg); }
 * catch (err) { if (err instanceof QueueBoxError && err.code === 'QUEUEBOX_INVALID_MESSAGE') ... }
 */
export class QueueBoxError extends Error {
  constructor(
    readonly code: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** An option passed to `QueueBoxModule.forRoot()` (or a table name) is invalid. Thrown at start-up. */
export class QueueBoxConfigError extends QueueBoxError {
  constructor(
    readonly option: string,
    message: string,
  ) {
    super('QUEUEBOX_CONFIG', message);
  }
}

/**
 * A message given to `enqueue`/`receive` is invalid (bad field, oversized or unserializable
 * payload, text the database cannot store), or an argument of `LeaseService.claim` is. `field`
 * names it. Nothing was stored or claimed.
 */
export class QueueBoxValidationError extends QueueBoxError {
  constructor(
    readonly field: string,
    message: string,
    options?: { cause?: unknown; code?: string },
  ) {
    super(options?.code ?? 'QUEUEBOX_INVALID_MESSAGE', message, options);
  }
}

/**
 * An outbox message was enqueued with a `messageId` that another row already has (or that an
 * earlier message of the same `enqueueMany` call has). Nothing of the call was stored. When the
 * collision is found by the database (PostgreSQL: a unique violation), the statement failed inside
 * your transaction, which PostgreSQL then refuses to continue: roll it back. `field` is
 * `messageId`; a subclass of `QueueBoxValidationError`.
 */
export class DuplicateMessageIdError extends QueueBoxValidationError {
  constructor(
    readonly messageId: string,
    message: string,
  ) {
    super('messageId', message, { code: 'QUEUEBOX_DUPLICATE_MESSAGE_ID' });
  }
}

/** `receive()` was given a source that no relay route and no `@PullHandler` consumes. Nothing was stored. */
export class UnknownSourceError extends QueueBoxError {
  constructor(
    readonly source: string,
    message: string,
  ) {
    super('QUEUEBOX_UNKNOWN_SOURCE', message);
  }
}

/**
 * The worker no longer owns the row: its lease expired and another worker claimed it,
 * or a fenced write (renew, complete, retry, dead-letter) changed zero rows.
 * It is the reason of `ctx.signal` / the publisher's `signal` when a claim is lost.
 */
export class ClaimLostError extends QueueBoxError {
  constructor(message: string) {
    super('QUEUEBOX_CLAIM_LOST', message);
  }
}

/**
 * Throw from `Publisher.publish()` when retrying cannot help (the destination rejected the
 * message for good). The message is dead-lettered at once with this error's message as reason.
 */
export class PermanentPublishError extends QueueBoxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('QUEUEBOX_PERMANENT_PUBLISH', message, options);
  }
}

/**
 * A publish failed in a way worth retrying (a network error, a timeout, a 5xx, 408, 425 or 429).
 * `status` is the HTTP status when there was one. `retryAfterMs`, when set, is when the
 * destination asked to be tried again (`HttpPublisher`: a `Retry-After` on 429 or 503): the next
 * attempt waits exactly that long instead of the retry policy's backoff (the attempt still counts).
 * Your own publisher can set it too.
 *
 * @example
 * throw new PublishError('throttled by the partner', 429, { retryAfterMs: 30_000 });
 */
export class PublishError extends QueueBoxError {
  readonly retryAfterMs?: number;

  constructor(
    message: string,
    readonly status?: number,
    options?: { cause?: unknown; retryAfterMs?: number },
  ) {
    super('QUEUEBOX_PUBLISH', message, options);
    const after = options?.retryAfterMs;
    if (typeof after === 'number' && Number.isFinite(after) && after >= 0) this.retryAfterMs = Math.round(after);
  }
}

/**
 * A pull handler or a relay route ran longer than its `handlerTimeout`: its `signal` aborted with
 * this error and the attempt counts as failed (retried with backoff, or dead at the last attempt).
 */
export class HandlerTimeoutError extends QueueBoxError {
  constructor(message: string) {
    super('QUEUEBOX_HANDLER_TIMEOUT', message);
  }
}

/**
 * A statement meant for the caller's transaction could not join it: the `EntityManager`'s
 * connection was released or broke (the database ended the session, the network dropped it).
 * Nothing was written, and nothing ever falls back to another connection: roll the transaction
 * back (it is gone anyway) and run the whole unit of work again.
 *
 * @example
 * try { await dataSource.transaction((m) => outbox.enqueue(m, msg)); }
 * catch (err) { if (err instanceof TransactionLostError) await retryLater(); else throw err; }
 */
export class TransactionLostError extends QueueBoxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('QUEUEBOX_TRANSACTION_LOST', message, options);
  }
}

/**
 * `enqueue` (or `receive` with a manager) was given an `EntityManager` that is not in a
 * transaction, such as `dataSource.manager`: the row would commit on its own, whatever happens to
 * the business change. Nothing was stored. Pass the manager of `dataSource.transaction(...)`, or
 * (scripts that mean it) `enqueue(manager, msg, { allowAutocommit: true })`.
 */
export class TransactionRequiredError extends QueueBoxError {
  constructor(message: string) {
    super('QUEUEBOX_TRANSACTION_REQUIRED', message);
  }
}

/** QueueBox was used before it started or after it shut down. */
export class QueueBoxStateError extends QueueBoxError {
  constructor(message: string) {
    super('QUEUEBOX_STATE', message);
  }
}

/**
 * A `QueueBoxAdmin` call got an invalid argument (unknown component, bad limit, ambiguous
 * selection). `field` names it. Nothing was changed.
 */
export class QueueBoxAdminError extends QueueBoxError {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super('QUEUEBOX_ADMIN_ARGUMENT', message);
  }
}

/**
 * A read of sent outbox rows (a message search for `state: 'sent'`) in an app that deletes them
 * when sent (`outbox.sentRows: 'delete'`): there are none to read. `what` names the read.
 */
export class SentRowsNotKeptError extends QueueBoxError {
  constructor(
    readonly what: string,
    message: string,
  ) {
    super('QUEUEBOX_SENT_ROWS_NOT_KEPT', message);
  }
}
