// Every default and bound of the QueueBox options, in one place. docs/ tables quote these values;
// change a value here and there together. Two defaults live elsewhere: the table names
// (`DEFAULT_TABLES`, a public export of queuebox.constants.ts) and the backoff (`DEFAULT_BACKOFF`,
// 1 s doubling to 5 min with jitter, beside the backoff function in common/backoff.ts).

const SECOND_MS = 1000;
const MINUTE_MS = 60 * SECOND_MS;
const HOUR_MS = 60 * MINUTE_MS;
export const DAY_MS = 24 * HOUR_MS;

/** Largest accepted payload, in bytes of its JSON text (`maxPayloadBytes`): 1 MiB. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576;

/** Failed attempts each row keeps in its attempt history (`attemptHistory`). */
export const DEFAULT_ATTEMPT_HISTORY = 10;

/** Sleep between claims when there is nothing to do (`outbox`, `inbox.relay`, `pull` `.pollIntervalMs`). */
export const DEFAULT_POLL_INTERVAL_MS = SECOND_MS;

/**
 * Most claims held at once (`outbox.batchSize`, `inbox.relay.batchSize`): the outbox claims up to
 * that many in one statement, the relay up to half (see RelayClaims).
 */
export const DEFAULT_BATCH_SIZE = 50;

/**
 * Most followers the inbox relay holds at once (`inbox.relay.maxFollowers`): the pending rows read
 * behind its claimed heads and forwarded in their transactions. A claim reads up to half of them,
 * so the next claim's rows are read and routed while the previous ones are written.
 */
export const DEFAULT_RELAY_MAX_FOLLOWERS = 5_000;

/**
 * Most followers the outbox poller holds at once (`outbox.maxFollowers`): the pending rows of a
 * claimed message's key right after it, published after it in its slot. A claim reads up to half.
 */
export const DEFAULT_OUTBOX_MAX_FOLLOWERS = 1_000;

/**
 * Most messages one `publishBatch` call takes (`outbox.publishBatchSize`), for publishers that have
 * it: the claims of one claim statement (up to `batchSize`, 50 by default) fill calls of up to
 * this many, one after the other, at most `concurrency` running at once.
 */
export const DEFAULT_OUTBOX_PUBLISH_BATCH_SIZE = 100;

/** Most rows worked on at once per process (`outbox.concurrency`, `inbox.relay.concurrency`). */
export const DEFAULT_CONCURRENCY = 10;

/**
 * Lease of a row claimed by the outbox poller or the relay (`outbox.claimTimeoutMs`,
 * `inbox.relay.claimTimeoutMs`): 5 minutes, well above a slow publish; renewed every third of it
 * while the work runs.
 */
export const DEFAULT_CLAIM_TIMEOUT_MS = 5 * MINUTE_MS;

/** How long shutdown waits for work in flight (`outbox`, `inbox.relay`, `pull` `.shutdownTimeoutMs`). */
export const DEFAULT_SHUTDOWN_TIMEOUT_MS = 10 * SECOND_MS;

/**
 * Time between two heartbeats of a QueueBox instance (`instances.heartbeatMs`): 3 seconds. Each
 * beat also looks for instances that stopped beating.
 */
export const DEFAULT_HEARTBEAT_MS = 3 * SECOND_MS;

/**
 * Heartbeats missed for this long declare an instance dead and end its leases
 * (`instances.deadAfterMs`): 15 seconds, five missed beats. At least three beats long.
 */
export const DEFAULT_DEAD_AFTER_MS = 15 * SECOND_MS;

/** `instances.deadAfterMs` must span at least this many heartbeats: one slow beat must not declare a live instance dead. */
export const MIN_BEATS_BEFORE_DEAD = 3;

/** Attempts (claims) before a row is dead-lettered (`maxAttempts`, `retry.attempts`, `retry: <n>`'s fallback). */
export const DEFAULT_MAX_ATTEMPTS = 10;

/**
 * Longest time one relay route or pull handler call may take (`inbox.relay.handlerTimeout`,
 * `pull.handlerTimeout`): 5 minutes. Not tied to the lease, unlike `publishTimeout`: renewals keep a
 * handler's lease however long it runs; the timeout only stops a hung one from holding its
 * aggregate and its transaction for ever.
 */
export const DEFAULT_HANDLER_TIMEOUT_MS = 5 * MINUTE_MS;

/**
 * Default `outbox.publishTimeout`: a third of the lease, the renewal interval, so a publish that
 * starts with a fresh lease ends (or is aborted) before the lease could lapse.
 */
export function defaultPublishTimeoutMs(leaseMs: number): number {
  return Math.floor(leaseMs / 3);
}

/** The reclaim step (expired leases back to pending) runs at most once per a fifth of the lease. */
export function reclaimIntervalMs(leaseMs: number): number {
  return Math.floor(leaseMs / 5);
}

/** The name of the publisher given as `outbox.publisher` (rather than `outbox.publishers`). */
export const DEFAULT_PUBLISHER = 'default';

/** Lease of a pull claim when the handler sets no `leaseMs` (`pull.defaultLeaseMs`). */
export const DEFAULT_PULL_LEASE_MS = 30 * SECOND_MS;

/** Handlers of one source running at once per process (`pull.concurrency`). */
export const DEFAULT_PULL_CONCURRENCY = 1;

/** The range of every lease: `claimTimeoutMs`, `pull.defaultLeaseMs`, `@PullHandler` `leaseMs`, `PullClient.claim`. */
export const MIN_LEASE_MS = 100;
export const MAX_LEASE_MS = DAY_MS;

/** Most messages one call of a batch `@PullHandler` receives (`batch`). */
export const MAX_PULL_BATCH = 1000;

/** Most rows one pull claim statement takes (`PullClient.claimBatch`'s `limit`). */
export const MAX_PULL_CLAIM_LIMIT = 10_000;

/** Age after which `sent` outbox rows are deleted (`retention.finishedAfterMs`): 7 days. */
export const DEFAULT_RETENTION_FINISHED_AFTER_MS = 7 * DAY_MS;

/** The shortest inbox retention: below it a redelivery that is merely late is taken for a new message. */
export const MIN_INBOX_RETENTION_MS = HOUR_MS;

/** Time between retention runs (`retention.intervalMs`): 1 hour. */
export const DEFAULT_RETENTION_INTERVAL_MS = HOUR_MS;

/** Rows deleted per retention statement, each its own transaction (`retention.batchSize`). */
export const DEFAULT_RETENTION_BATCH_SIZE = 1000;
