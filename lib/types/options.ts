import type { Type } from '@nestjs/common';
import type { BackoffFunction, BackoffOptions, RetryOption } from '../common/backoff';
import type { Duration } from '../common/duration';
import type { RelayRoute } from './inbox';
import type { InboxMessage, OutboundMessage } from './messages';
import type { Publisher } from './outbox';

// What users write in `QueueBoxModule.forRoot()` and `@PullHandler()`. The defaults quoted in these
// comments are the constants of ./options.defaults.ts; ./options.resolver.ts checks and fills them in.

/** Settings every claiming worker shares (outbox poller, inbox relay). */
export interface WorkerOptions {
  /** Sleep between claims when there is nothing to do. Default 1000 ms. */
  pollIntervalMs?: number;
  /** Most rows claimed by one claim statement. Default 50. */
  batchSize?: number;
  /** Most rows worked on at once per process. Default 10. */
  concurrency?: number;
  /** Lease of a claimed row; renewed every third of it while the work runs. Default 300000 ms. */
  claimTimeoutMs?: number;
  /** How long shutdown waits for work in flight. Default 10000 ms. */
  shutdownTimeoutMs?: number;
  /** Attempts (claims) before a row is dead-lettered. Default 10. Or use `retry`. */
  maxAttempts?: number;
  /** Delay before a retry: options or a function of (attempt, error, message). Default 1 s doubling to 5 min, with jitter. Or use `retry`. */
  backoff?: BackoffOptions | BackoffFunction;
}

/** A `Publisher` instance, or a class that Nest instantiates with dependency injection. */
export type PublisherOption = Publisher | Type<Publisher>;

/** Options of the outbox poller. Every field is optional; defaults are listed. */
export interface OutboxOptions extends WorkerOptions {
  /** The publisher of every message (use this or `publishers`). Required when the outbox worker runs. */
  publisher?: PublisherOption;
  /**
   * Named publishers, instances or classes (a class is instantiated by Nest, its dependencies
   * injected); `route(message)` picks one, by default the only one or the one named like the destination.
   */
  publishers?: Record<string, PublisherOption>;
  /** Picks a publisher name for a message. A name with no publisher, or a throw, dead-letters the message. */
  route?: (message: OutboundMessage) => string;
  /** Retry policy (replaces `maxAttempts` and `backoff`): `false`, a number of attempts, or `{ attempts, backoff, retryIf }`. */
  retry?: RetryOption<OutboundMessage>;
  /**
   * Longest time one publish may take (ms or `'30s'`); then its signal is aborted and the attempt
   * fails (retried with backoff). No publish starts with less lease left. Default a third of `claimTimeoutMs`.
   */
  publishTimeout?: Duration;
  /**
   * Rate limits per destination, shared by every replica (a token bucket row per destination,
   * refilled by the database clock; migration 008): `{ billing: { limit: 10, per: '1s' } }`.
   * A message over the limit is not published and goes back to `pending` until the bucket has a
   * token again: no attempt charged, and the later messages of its key wait behind it. Default `{}`.
   */
  rateLimits?: Record<string, RateLimitOption>;
  /**
   * What happens to a row once its message is sent. `'keep'` (the default): it stays, `sent`, until
   * retention deletes it; it is what the message search, the dashboard's history and
   * `onDuplicate: 'ignore'` read. `'delete'`: the fenced completion deletes it (and its attempt
   * history) instead, so the database writes less per message and retention has no sent rows to
   * delete; a search for sent rows is then refused (`SentRowsNotKeptError`) and the history has no
   * sent counts. Dead rows are kept either way. See docs/delivery.md ("Sent rows: keep or delete").
   */
  sentRows?: SentRowsOption;
  /**
   * Most followers held at once: the pending rows right after a claimed message of the same key,
   * published after it, one by one in key order, in its concurrency slot and under its claim, and
   * marked sent with it in one statement. A key then moves by more than one message per claim.
   * One claim reads up to half of them; each held row's payload is in memory: lower it for large
   * payloads; 0 publishes every message as a claim of its own. Default 1000. See docs/delivery.md
   * ("Followers keep the same order").
   */
  maxFollowers?: number;
  /**
   * Most messages one `publishBatch` call takes, for publishers that have that method (the others
   * publish one message a call). The messages claimed together are shared out over the
   * `concurrency` calls; a call may take fewer. An integer from 1 to 10000. Default 100. See
   * docs/publishing.md ("Publishing in batches").
   */
  publishBatchSize?: number;
}

/** `outbox.sentRows`: keep sent rows (`'keep'`, the default) or delete them when sent (`'delete'`). */
export type SentRowsOption = 'keep' | 'delete';

/** One destination's rate limit: at most `limit` messages per `per`, bursts up to `burst`. */
export interface RateLimitOption {
  /** Messages per `per`. An integer from 1 to 1000000. */
  limit: number;
  /** The period (ms or `'1s'`, `'1m'`). Default `'1s'`. */
  per?: Duration;
  /** How many tokens the bucket holds (messages sent at once after a quiet time). Default `limit`. */
  burst?: number;
}

/** Options of the inbox relay, which forwards inbox rows of its routed sources to the outbox. */
export interface RelayOptions extends WorkerOptions {
  /** `{ [source]: (message) => outbox message(s) }`. Each source listed here is consumed by the relay. */
  routes?: Record<string, RelayRoute>;
  /**
   * Longest time one route call may take (ms or `'30s'`); then its `signal` aborts and the attempt
   * fails (retried with backoff). Default 300000 (5 min). See docs/retries.md.
   */
  handlerTimeout?: Duration;
  /**
   * Most followers held at once: the pending rows right after the claimed heads of their
   * aggregates, forwarded in their heads' transactions. One claim reads up to half of them. Each
   * held row's payload is in memory: lower it for large payloads; 0 forwards every row as a head.
   * Default 5000.
   */
  maxFollowers?: number;
  /** Retry policy (replaces `maxAttempts` and `backoff`), as for the outbox. */
  retry?: RetryOption<InboxMessage>;
}

export interface InboxOptions {
  relay?: RelayOptions;
}

/** Defaults of `@PullHandler` workers (each handler may override lease, concurrency, attempts, backoff). */
export interface PullOptions {
  /** Lease of a pull claim when the handler gives none. Default 30000 ms. */
  defaultLeaseMs?: number;
  /** Handlers of one source running at once per process. Default 1. */
  concurrency?: number;
  /** Sleep between claims while a source has nothing to do. Default 1000 ms. */
  pollIntervalMs?: number;
  /** Attempts before a row is dead. Default 10. */
  maxAttempts?: number;
  /** Delay before a retry. Default as the outbox. */
  backoff?: BackoffOptions | BackoffFunction;
  /** Retry policy of handlers (replaces `maxAttempts` and `backoff`), as for the outbox. */
  retry?: RetryOption<InboxMessage>;
  /** How long shutdown waits for running handlers (and their commits). Default 10000 ms. */
  shutdownTimeoutMs?: number;
  /** Sources consumed by your own pull clients through `PullClient.claim()` (so `receive()` accepts them). */
  sources?: string[];
  /**
   * Longest time one handler call may take (ms or `'30s'`) when the handler sets none; then its
   * `signal` aborts, the attempt fails (retried with backoff) and its transaction can only roll
   * back. Default 300000 (5 min). See docs/retries.md.
   */
  handlerTimeout?: Duration;
}

/**
 * Retention: deletes finished rows (and, if asked, dead rows) older than an age, in small batches,
 * on one replica at a time. See docs/operations.md.
 */
export interface RetentionOptions {
  /** Run retention on a timer in processes where a worker runs. Default `false`; `QueueBoxAdmin.runRetention()` works either way. */
  enabled?: boolean;
  /** Age after which `sent` outbox rows are deleted, by `sent_at`. Default 604800000 (7 days). */
  finishedAfterMs?: number;
  /**
   * Age after which `processed` inbox rows are deleted, by `processed_at`. Default `finishedAfterMs`.
   * A deleted row's `(source, idempotency_key)` is accepted again: this is the dedupe window. At least 1 hour.
   */
  inboxFinishedAfterMs?: number;
  /**
   * Age after which `dead` rows are deleted (by their last attempt), or `false` to keep them.
   * Default `false`. Dead inbox rows are kept at least `inboxFinishedAfterMs` (the dedupe window).
   */
  deadAfterMs?: number | false;
  /** Time between runs. Default 3600000 (1 hour). */
  intervalMs?: number;
  /** Rows deleted per statement (each its own transaction). Default 1000. */
  batchSize?: number;
}

/**
 * Each QueueBox instance (one per process and DataSource) registers itself in the instances table
 * and heartbeats by the database clock; a live replica ends the leases of one whose heartbeats
 * stopped, so its keys move again in seconds instead of after the lease. See docs/delivery.md.
 */
export interface InstancesOptions {
  /** Time between two heartbeats. Default 3000 ms. */
  heartbeatMs?: number;
  /**
   * Heartbeats missed for this long declare an instance dead: any live replica ends its leases
   * and the rows are claimed again at once. Default 15000 ms; at least three heartbeats.
   */
  deadAfterMs?: number;
}

/**
 * The database warnings (`queuebox doctor`, the health check, the dashboard, the metrics): how
 * often the app reads them and the thresholds. See docs/doctor.md.
 *
 * @example
 * QueueBoxModule.forRoot({ outbox: { publisher }, doctor: { intervalMs: 300_000, xminHorizonMs: 600_000 } })
 */
export interface DoctorOptions {
  /** How often the app reads the database warnings (a few catalog queries). Default 60000 ms; 0 reads them only on demand. */
  intervalMs?: number;
  /** A table whose dead rows are at least this percent of its rows (and at least `minDeadRows`) is bloated. Default 20. */
  deadRowsPercent?: number;
  /** Fewer dead rows than this never warn. Default 10000. */
  minDeadRows?: number;
  /** An index at least this big (bytes) whose size per live row of its table passes `indexBytesPerRow` is bloated. Default 67108864 (64 MiB). */
  minIndexBytes?: number;
  /** Index bytes per live row of its table above which an index (of at least `minIndexBytes`) is bloated. Default 1024. */
  indexBytesPerRow?: number;
  /** A transaction (or prepared transaction) holding back the cleanup of dead rows for this long warns. Default 300000 ms. */
  xminHorizonMs?: number;
  /** A session waiting this long for a lock on a QueueBox table warns. Default 5000 ms. */
  lockWaitMs?: number;
  /** This host's clock differing from the database's by more than this warns. Default 1000 ms. */
  clockSkewMs?: number;
}

/**
 * What QueueBox logs beyond start, stop, warnings and errors. See docs/observability.md#logs.
 *
 * @example
 * QueueBoxModule.forRoot({ outbox: { publisher }, logging: { messages: true } })
 */
export interface LoggingOptions {
  /**
   * One debug line per published and per processed message (message id, attempt, duration).
   * Default `false`: at a few hundred messages a second they would drown the app's own logs.
   */
  messages?: boolean;
}

/** Which workers run in this process. `false` everywhere makes a replica that only enqueues. */
export interface WorkersOptions {
  outbox?: boolean;
  relay?: boolean;
  pull?: boolean;
}

/**
 * Options of `QueueBoxModule.forRoot()`.
 *
 * @example
 * QueueBoxModule.forRoot({
 *   outbox: { publisher: new HttpPublisher({ destinations: { billing: 'https://billing/internal/events' } }) },
 * })
 */
export interface QueueBoxModuleOptions {
  /** Table names, each optionally schema-qualified. Defaults `queuebox_outbox`, `queuebox_inbox`, `queuebox_instances` (in the outbox's schema). */
  tables?: { outbox?: string; inbox?: string; instances?: string };
  /** `true` (default) runs every worker; an object turns them on one by one; `false` runs none. */
  workers?: boolean | WorkersOptions;
  /** Largest accepted payload, in bytes of its JSON text. Default 1048576 (1 MiB). */
  maxPayloadBytes?: number;
  /**
   * How many failed attempts each outbox and inbox row keeps in its attempt history (time,
   * duration, instance, error class and message; the attempts migration): the last N, written only when an
   * attempt fails. `0` keeps none. Default 10, at most 1000.
   */
  attemptHistory?: number;
  outbox?: OutboxOptions;
  inbox?: InboxOptions;
  pull?: PullOptions;
  /** Deleting old finished rows. Off by default. */
  retention?: RetentionOptions;
  /** Heartbeats of this process, and when a silent one's leases end. */
  instances?: InstancesOptions;
  /** Per-message log lines: `{ messages: true }` turns them on. Off by default. */
  logging?: LoggingOptions;
  /** The database warnings' interval and thresholds (docs/doctor.md). */
  doctor?: DoctorOptions;
}

/** Per-handler options of `@PullHandler(source, options)`. */
export interface PullHandlerOptions {
  /** Lease of each claim; renewed every third of it while the handler runs. Default `pull.defaultLeaseMs`. */
  leaseMs?: number;
  /** Handlers of this source running at once per process. Default `pull.concurrency`. */
  concurrency?: number;
  /** Attempts before the row is dead. Default `pull.maxAttempts`. */
  maxAttempts?: number;
  /** Delay before a retry. Default `pull.backoff`. */
  backoff?: BackoffOptions | BackoffFunction;
  /** Retry policy of this handler (replaces `maxAttempts` and `backoff`). Default `pull.retry`. */
  retry?: RetryOption<InboxMessage>;
  /** Longest time one call of this handler may take. Default `pull.handlerTimeout`. */
  handlerTimeout?: Duration;
  /**
   * Opt-in batch form (integer 1 to 1000): the method receives up to this many messages and one
   * `PullBatchContext`, and its writes and every message's completion commit in one transaction.
   * `concurrency` then counts batch calls. Default: one message per call.
   */
  batch?: number;
  /**
   * The QueueBox whose pull worker runs this handler, by name (`QueueBoxModule.forRoot({ name })`).
   * Default `default`. A name the application has no QueueBox of fails start-up.
   */
  queuebox?: string;
  /**
   * Run this handler in every tenant attached at run time (`QueueBoxTenants.attach`), each with
   * the tenant's transaction, instead of in a QueueBox of the application. Default false.
   */
  tenants?: boolean;
}
