import type { Type } from '@nestjs/common';
import {
  type BackoffFunction,
  type BackoffOptions,
  backoffFunction,
  DEFAULT_BACKOFF,
  type RetryBackoffOptions,
  type RetryOption,
} from './common/backoff';
import { type Duration, parseDuration } from './common/duration';
import { parseTableName } from './common/identifiers';
import { closestName } from './common/suggest';
import type { QueueBoxTables } from './dialects/dialect';
import { QueueBoxConfigError } from './errors/queuebox.errors';
import type { RelayRoute } from './inbox/inbox.types';
import type { InboxMessage, OutboundMessage } from './lease/claimed-messages';
import type { Publisher } from './outbox/outbox.types';
import { DEFAULT_TABLES } from './queuebox.constants';
import { messages } from './queuebox.messages';

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
  /** Sources consumed by your own pull clients through `LeaseService.claim()` (so `receive()` accepts them). */
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
  /** Table names, each optionally schema-qualified. Defaults `queuebox_outbox`, `queuebox_inbox`. */
  tables?: { outbox?: string; inbox?: string };
  /** `true` (default) runs every worker; an object turns them on one by one; `false` runs none. */
  workers?: boolean | WorkersOptions;
  /** Largest accepted payload, in bytes of its JSON text. Default 1048576 (1 MiB). */
  maxPayloadBytes?: number;
  outbox?: OutboxOptions;
  inbox?: InboxOptions;
  pull?: PullOptions;
  /** Deleting old finished rows. Off by default. */
  retention?: RetentionOptions;
}

export interface ResolvedRetentionOptions {
  enabled: boolean;
  finishedAfterMs: number;
  inboxFinishedAfterMs: number;
  deadAfterMs: number | false;
  intervalMs: number;
  batchSize: number;
}

export interface ResolvedWorkerOptions {
  pollIntervalMs: number;
  batchSize: number;
  concurrency: number;
  claimTimeoutMs: number;
  /** Every third of the lease. */
  renewIntervalMs: number;
  /** The reclaim step runs at most once per `claimTimeoutMs / 5`. */
  reclaimIntervalMs: number;
  shutdownTimeoutMs: number;
  maxAttempts: number;
  // biome-ignore lint/suspicious/noExplicitAny: one resolved shape for outbox (OutboundMessage) and inbox (InboxMessage) workers.
  backoff: BackoffFunction<any>;
  /** `retry.retryIf`; true for every failure by default. */
  // biome-ignore lint/suspicious/noExplicitAny: as above.
  retryIf: (error: unknown, attempt: number, message: any) => boolean;
}

export interface ResolvedOutboxOptions extends ResolvedWorkerOptions {
  /** Publisher instances by name (classes are instantiated by the module and added here). */
  publishers: Record<string, Publisher>;
  /** Publisher classes by name, still to be instantiated with dependency injection. */
  publisherTypes: Record<string, Type<Publisher>>;
  /** The option path of each publisher, as the user wrote it: `outbox.publisher` or `outbox.publishers.<name>`, for errors. */
  publisherOptions: Record<string, string>;
  route: (message: OutboundMessage) => string;
  publishTimeoutMs: number;
}

export interface ResolvedRelayOptions extends ResolvedWorkerOptions {
  routes: Record<string, RelayRoute>;
  handlerTimeoutMs: number;
}

export interface ResolvedPullOptions {
  defaultLeaseMs: number;
  concurrency: number;
  pollIntervalMs: number;
  maxAttempts: number;
  backoff: BackoffFunction<InboxMessage>;
  retryIf: (error: unknown, attempt: number, message: InboxMessage) => boolean;
  shutdownTimeoutMs: number;
  sources: string[];
  handlerTimeoutMs: number;
}

export interface ResolvedQueueBoxOptions {
  tables: QueueBoxTables;
  workers: Required<WorkersOptions>;
  maxPayloadBytes: number;
  outbox: ResolvedOutboxOptions;
  inbox: { relay: ResolvedRelayOptions };
  pull: ResolvedPullOptions;
  retention: ResolvedRetentionOptions;
}

const TOP_LEVEL_KEYS = ['tables', 'workers', 'maxPayloadBytes', 'outbox', 'inbox', 'pull', 'retention'];
const WORKER_KEYS = [
  'pollIntervalMs',
  'batchSize',
  'concurrency',
  'claimTimeoutMs',
  'shutdownTimeoutMs',
  'maxAttempts',
  'backoff',
  'retry',
];
const DEFAULT_PUBLISHER = 'default';

/** Validates `options` and fills in every default. Throws `QueueBoxConfigError` naming the first bad option. */
export function resolveOptions(options: QueueBoxModuleOptions = {}): ResolvedQueueBoxOptions {
  expectObject('options', options);
  rejectUnknownKeys('', options, TOP_LEVEL_KEYS);
  const workers = resolveWorkers(options.workers);
  const outbox = resolveOutbox(options.outbox ?? {}, workers.outbox);
  const inbox = options.inbox ?? {};
  expectObject('inbox', inbox);
  rejectUnknownKeys('inbox.', inbox, ['relay']);
  return {
    tables: resolveTables(options.tables),
    workers,
    maxPayloadBytes: integer('maxPayloadBytes', options.maxPayloadBytes, 1_048_576, 1, 1024 ** 3),
    outbox,
    inbox: { relay: resolveRelay(inbox.relay ?? {}) },
    pull: resolvePull(options.pull ?? {}),
    retention: resolveRetention(options.retention ?? {}),
  };
}

/** Validates the `tables` option (also used by the migration factory). */
export function resolveTables(tables: QueueBoxModuleOptions['tables'] = {}): QueueBoxTables {
  expectObject('tables', tables);
  rejectUnknownKeys('tables.', tables, ['outbox', 'inbox']);
  const resolved: QueueBoxTables = {
    outbox: parseTableName('tables.outbox', tables.outbox === undefined ? DEFAULT_TABLES.outbox : tables.outbox),
    inbox: parseTableName('tables.inbox', tables.inbox === undefined ? DEFAULT_TABLES.inbox : tables.inbox),
  };
  if (resolved.outbox.qualified === resolved.inbox.qualified) {
    throw new QueueBoxConfigError('tables', messages.tablesCollide(resolved.outbox.qualified));
  }
  return resolved;
}

function resolveWorkers(workers: QueueBoxModuleOptions['workers']): Required<WorkersOptions> {
  if (workers === undefined || typeof workers === 'boolean') {
    const on = workers ?? true;
    return { outbox: on, relay: on, pull: on };
  }
  expectObject('workers', workers);
  rejectUnknownKeys('workers.', workers, ['outbox', 'relay', 'pull']);
  const flag = (name: keyof WorkersOptions) => {
    const value = workers[name] ?? true;
    if (typeof value !== 'boolean') throw new QueueBoxConfigError(`workers.${name}`, messages.optionNotBoolean(`workers.${name}`, value));
    return value;
  };
  return { outbox: flag('outbox'), relay: flag('relay'), pull: flag('pull') };
}

function resolveOutbox(outbox: OutboxOptions, workerRuns: boolean): ResolvedOutboxOptions {
  expectObject('outbox', outbox);
  rejectUnknownKeys('outbox.', outbox, ['publisher', 'publishers', 'route', 'publishTimeout', ...WORKER_KEYS]);
  if (outbox.publisher !== undefined && outbox.publishers !== undefined) {
    throw new QueueBoxConfigError('outbox.publisher', messages.publisherAndPublishers());
  }
  if (outbox.publishers !== undefined) expectObject('outbox.publishers', outbox.publishers);
  const given: Record<string, PublisherOption> =
    outbox.publisher !== undefined ? { [DEFAULT_PUBLISHER]: outbox.publisher } : { ...(outbox.publishers ?? {}) };
  const publishers: Record<string, Publisher> = {};
  const publisherTypes: Record<string, Type<Publisher>> = {};
  const publisherOptions: Record<string, string> = {};
  for (const [name, publisher] of Object.entries(given)) {
    const option = outbox.publisher !== undefined ? 'outbox.publisher' : `outbox.publishers.${name}`;
    publisherOptions[name] = option;
    if (typeof publisher === 'function' && typeof (publisher.prototype as Partial<Publisher> | undefined)?.publish === 'function') {
      publisherTypes[name] = publisher as Type<Publisher>;
    } else if (typeof (publisher as Partial<Publisher> | null)?.publish === 'function') {
      publishers[name] = publisher as Publisher;
    } else {
      throw new QueueBoxConfigError(option, messages.publisherInvalid(option));
    }
  }
  if (workerRuns && Object.keys(given).length === 0) {
    throw new QueueBoxConfigError('outbox.publisher', messages.publisherMissing());
  }
  if (outbox.route !== undefined && typeof outbox.route !== 'function') {
    throw new QueueBoxConfigError('outbox.route', messages.optionNotFunction('outbox.route'));
  }
  const names = Object.keys(given);
  const route = outbox.route ?? (names.length === 1 ? () => names[0] : (message: OutboundMessage) => message.destination);
  const worker = resolveWorker('outbox', outbox);
  const publishTimeoutMs =
    outbox.publishTimeout === undefined
      ? Math.floor(worker.claimTimeoutMs / 3)
      : parseDuration('outbox.publishTimeout', outbox.publishTimeout, { min: 1, max: 24 * 3600_000 });
  if (publishTimeoutMs >= worker.claimTimeoutMs) {
    throw new QueueBoxConfigError('outbox.publishTimeout', messages.publishTimeoutNotBelowLease(publishTimeoutMs, worker.claimTimeoutMs));
  }
  return { ...worker, publishers, publisherTypes, publisherOptions, route, publishTimeoutMs };
}

function resolveRelay(relay: RelayOptions): ResolvedRelayOptions {
  expectObject('inbox.relay', relay);
  rejectUnknownKeys('inbox.relay.', relay, ['routes', 'handlerTimeout', ...WORKER_KEYS]);
  const routes = relay.routes ?? {};
  expectObject('inbox.relay.routes', routes);
  for (const [source, route] of Object.entries(routes)) {
    if (typeof route !== 'function')
      throw new QueueBoxConfigError(`inbox.relay.routes.${source}`, messages.optionNotFunction(`inbox.relay.routes.${source}`));
    if (!isSourceName(source)) throw new QueueBoxConfigError(`inbox.relay.routes.${source}`, messages.sourceNameInvalid(source));
  }
  return {
    ...resolveWorker('inbox.relay', relay),
    routes: { ...routes },
    handlerTimeoutMs: handlerTimeout('inbox.relay.handlerTimeout', relay.handlerTimeout, DEFAULT_HANDLER_TIMEOUT_MS),
  };
}

function resolvePull(pull: PullOptions): ResolvedPullOptions {
  expectObject('pull', pull);
  rejectUnknownKeys('pull.', pull, [
    'defaultLeaseMs',
    'concurrency',
    'pollIntervalMs',
    'maxAttempts',
    'backoff',
    'retry',
    'shutdownTimeoutMs',
    'sources',
    'handlerTimeout',
  ]);
  const sources = pull.sources ?? [];
  if (!Array.isArray(sources)) throw new QueueBoxConfigError('pull.sources', messages.optionNotObject('pull.sources', sources));
  for (const source of sources)
    if (!isSourceName(source)) throw new QueueBoxConfigError('pull.sources', messages.sourceNameInvalid(source));
  return {
    defaultLeaseMs: integer('pull.defaultLeaseMs', pull.defaultLeaseMs, 30_000, MIN_LEASE_MS, MAX_LEASE_MS),
    concurrency: integer('pull.concurrency', pull.concurrency, 1, 1, 10_000),
    pollIntervalMs: integer('pull.pollIntervalMs', pull.pollIntervalMs, 1000, 1, 3600_000),
    ...resolveRetry('pull', pull),
    shutdownTimeoutMs: integer('pull.shutdownTimeoutMs', pull.shutdownTimeoutMs, 10_000, 0, 24 * 3600_000),
    sources: [...sources],
    handlerTimeoutMs: handlerTimeout('pull.handlerTimeout', pull.handlerTimeout, DEFAULT_HANDLER_TIMEOUT_MS),
  };
}

const DAY_MS = 24 * 3600_000;
/** The shortest inbox retention: below it a redelivery that is merely late is taken for a new message. */
export const MIN_INBOX_RETENTION_MS = 3600_000;

function resolveRetention(retention: RetentionOptions): ResolvedRetentionOptions {
  expectObject('retention', retention);
  rejectUnknownKeys('retention.', retention, [
    'enabled',
    'finishedAfterMs',
    'inboxFinishedAfterMs',
    'deadAfterMs',
    'intervalMs',
    'batchSize',
  ]);
  const enabled = retention.enabled ?? false;
  if (typeof enabled !== 'boolean')
    throw new QueueBoxConfigError('retention.enabled', messages.optionNotBoolean('retention.enabled', enabled));
  const finishedAfterMs = integer('retention.finishedAfterMs', retention.finishedAfterMs, 7 * DAY_MS, 60_000, 3650 * DAY_MS);
  const inboxFinishedAfterMs = integer(
    'retention.inboxFinishedAfterMs',
    retention.inboxFinishedAfterMs,
    Math.max(finishedAfterMs, MIN_INBOX_RETENTION_MS),
    1,
    3650 * DAY_MS,
  );
  if (inboxFinishedAfterMs < MIN_INBOX_RETENTION_MS) {
    throw new QueueBoxConfigError(
      'retention.inboxFinishedAfterMs',
      messages.retentionInboxTooShort(inboxFinishedAfterMs, MIN_INBOX_RETENTION_MS),
    );
  }
  const deadAfterMs =
    retention.deadAfterMs === undefined || retention.deadAfterMs === false
      ? false
      : integer('retention.deadAfterMs', retention.deadAfterMs, 0, 60_000, 3650 * DAY_MS);
  return {
    enabled,
    finishedAfterMs,
    inboxFinishedAfterMs,
    deadAfterMs,
    intervalMs: integer('retention.intervalMs', retention.intervalMs, 3600_000, 1000, 7 * DAY_MS),
    batchSize: integer('retention.batchSize', retention.batchSize, 1000, 1, 10_000),
  };
}

/**
 * Default `handlerTimeout` of pull handlers and relay routes. Not tied to the lease, unlike
 * `publishTimeout`: renewals keep a handler's lease however long it runs; the timeout only stops a
 * hung one from holding its aggregate and its transaction for ever.
 */
const DEFAULT_HANDLER_TIMEOUT_MS = 300_000;

function handlerTimeout(option: string, value: Duration | undefined, fallback: number): number {
  return value === undefined ? fallback : parseDuration(option, value, { min: 1, max: 24 * 3600_000 });
}

/** The range of a pull lease (`@PullHandler` `leaseMs`, `pull.defaultLeaseMs`, `LeaseService.claim`). */
export const MIN_LEASE_MS = 100;
export const MAX_LEASE_MS = 24 * 3600_000;

/** Validates one `@PullHandler`'s options against the `pull` defaults. `where` names the handler in errors. */
export function resolvePullHandler(where: string, options: PullHandlerOptions, defaults: ResolvedPullOptions) {
  expectObject(where, options);
  rejectUnknownKeys(`${where}.`, options, ['leaseMs', 'concurrency', 'maxAttempts', 'backoff', 'retry', 'handlerTimeout', 'batch']);
  const retry =
    options.retry !== undefined
      ? resolveRetry(where, options)
      : {
          maxAttempts: integer(`${where}.maxAttempts`, options.maxAttempts, defaults.maxAttempts, 1, 1_000_000),
          backoff: options.backoff === undefined ? defaults.backoff : resolveBackoff(`${where}.backoff`, options.backoff),
          retryIf: defaults.retryIf,
        };
  return {
    leaseMs: integer(`${where}.leaseMs`, options.leaseMs, defaults.defaultLeaseMs, MIN_LEASE_MS, MAX_LEASE_MS),
    concurrency: integer(`${where}.concurrency`, options.concurrency, defaults.concurrency, 1, 10_000),
    handlerTimeoutMs: handlerTimeout(`${where}.handlerTimeout`, options.handlerTimeout, defaults.handlerTimeoutMs),
    // Undefined: the handler takes one message per call.
    batch: options.batch === undefined ? undefined : integer(`${where}.batch`, options.batch, 1, 1, MAX_PULL_BATCH),
    ...retry,
  };
}

/** Most messages one call of a batch `@PullHandler` receives (`batch`). */
export const MAX_PULL_BATCH = 1000;

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
}

/** A source travels in URLs (`POST <path>/:source`) and in logs: keep it plain. */
export function isSourceName(source: unknown): source is string {
  return typeof source === 'string' && /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(source);
}

function resolveWorker(prefix: string, worker: WorkerOptions): ResolvedWorkerOptions {
  const claimTimeoutMs = integer(`${prefix}.claimTimeoutMs`, worker.claimTimeoutMs, 300_000, 100, 24 * 3600_000);
  return {
    pollIntervalMs: integer(`${prefix}.pollIntervalMs`, worker.pollIntervalMs, 1000, 1, 3600_000),
    batchSize: integer(`${prefix}.batchSize`, worker.batchSize, 50, 1, 10_000),
    concurrency: integer(`${prefix}.concurrency`, worker.concurrency, 10, 1, 10_000),
    claimTimeoutMs,
    renewIntervalMs: Math.floor(claimTimeoutMs / 3),
    reclaimIntervalMs: Math.floor(claimTimeoutMs / 5),
    shutdownTimeoutMs: integer(`${prefix}.shutdownTimeoutMs`, worker.shutdownTimeoutMs, 10_000, 0, 24 * 3600_000),
    ...resolveRetry(prefix, worker as WorkerOptions & { retry?: RetryOption<unknown> }),
  };
}

const ALWAYS_RETRY = () => true;

/**
 * Resolves `retry` (or the older `maxAttempts` and `backoff`, which it replaces) into attempts,
 * a backoff function and a `retryIf` predicate.
 */
function resolveRetry(
  prefix: string,
  worker: { maxAttempts?: number; backoff?: BackoffOptions | BackoffFunction; retry?: RetryOption<never> },
  // biome-ignore lint/suspicious/noExplicitAny: see ResolvedWorkerOptions.
): { maxAttempts: number; backoff: BackoffFunction<any>; retryIf: ResolvedWorkerOptions['retryIf'] } {
  const { retry } = worker;
  if (retry === undefined) {
    return {
      maxAttempts: integer(`${prefix}.maxAttempts`, worker.maxAttempts, 10, 1, 1_000_000),
      backoff: resolveBackoff(`${prefix}.backoff`, worker.backoff),
      retryIf: ALWAYS_RETRY,
    };
  }
  const option = `${prefix}.retry`;
  for (const older of ['maxAttempts', 'backoff'] as const) {
    if (worker[older] !== undefined) throw new QueueBoxConfigError(`${prefix}.${older}`, messages.retryAndOlderOption(prefix, older));
  }
  const noBackoff = resolveBackoff(`${option}.backoff`, undefined);
  if (retry === false) return { maxAttempts: 1, backoff: noBackoff, retryIf: ALWAYS_RETRY };
  if (typeof retry === 'number')
    return { maxAttempts: integer(option, retry, 10, 1, 1_000_000), backoff: noBackoff, retryIf: ALWAYS_RETRY };
  if (typeof retry !== 'object' || retry === null || Array.isArray(retry)) {
    throw new QueueBoxConfigError(option, messages.retryInvalid(option, retry));
  }
  rejectUnknownKeys(`${option}.`, retry, ['attempts', 'backoff', 'retryIf']);
  if (retry.retryIf !== undefined && typeof retry.retryIf !== 'function') {
    throw new QueueBoxConfigError(`${option}.retryIf`, messages.optionNotFunction(`${option}.retryIf`));
  }
  return {
    maxAttempts: integer(`${option}.attempts`, retry.attempts, 10, 1, 1_000_000),
    backoff: resolveRetryBackoff(`${option}.backoff`, retry.backoff),
    retryIf: (retry.retryIf as ResolvedWorkerOptions['retryIf'] | undefined) ?? ALWAYS_RETRY,
  };
}

function resolveRetryBackoff(option: string, backoff: RetryBackoffOptions | BackoffFunction<never> | undefined): BackoffFunction<unknown> {
  if (typeof backoff === 'function') return backoff as BackoffFunction<unknown>;
  const given = backoff ?? {};
  expectObject(option, given);
  rejectUnknownKeys(`${option}.`, given, ['delay', 'factor', 'maxDelay', 'jitter']);
  const initialMs =
    given.delay === undefined ? DEFAULT_BACKOFF.initialMs : parseDuration(`${option}.delay`, given.delay, { min: 0, max: 24 * 3600_000 });
  const maxMs =
    given.maxDelay === undefined
      ? Math.max(DEFAULT_BACKOFF.maxMs, initialMs)
      : parseDuration(`${option}.maxDelay`, given.maxDelay, { min: 0, max: 30 * 24 * 3600_000 });
  if (maxMs < initialMs) throw new QueueBoxConfigError(`${option}.maxDelay`, messages.retryMaxDelayBelowDelay(option, maxMs, initialMs));
  return resolveBackoff(option, { initialMs, maxMs, factor: given.factor, jitter: given.jitter });
}

function resolveBackoff(option: string, backoff: WorkerOptions['backoff']): BackoffFunction {
  if (typeof backoff === 'function') return backoff;
  const given = backoff ?? {};
  expectObject(option, given);
  rejectUnknownKeys(`${option}.`, given, Object.keys(DEFAULT_BACKOFF));
  const jitter = given.jitter ?? DEFAULT_BACKOFF.jitter;
  if (typeof jitter !== 'boolean') throw new QueueBoxConfigError(`${option}.jitter`, messages.optionNotBoolean(`${option}.jitter`, jitter));
  const factor = given.factor ?? DEFAULT_BACKOFF.factor;
  if (typeof factor !== 'number' || !Number.isFinite(factor) || factor < 1 || factor > 100) {
    throw new QueueBoxConfigError(`${option}.factor`, messages.optionOutOfRange(`${option}.factor`, factor, 1, 100));
  }
  const initialMs = integer(`${option}.initialMs`, given.initialMs, DEFAULT_BACKOFF.initialMs, 0, 24 * 3600_000);
  const maxMs = integer(`${option}.maxMs`, given.maxMs, DEFAULT_BACKOFF.maxMs, 0, 30 * 24 * 3600_000);
  if (maxMs < initialMs) throw new QueueBoxConfigError(`${option}.maxMs`, messages.backoffMaxBelowInitial(option, maxMs, initialMs));
  return backoffFunction({ initialMs, factor, maxMs, jitter });
}

function integer(option: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new QueueBoxConfigError(option, messages.optionOutOfRange(option, value, min, max));
  }
  return value;
}

function expectObject(option: string, value: unknown): asserts value is object {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new QueueBoxConfigError(option, messages.optionNotObject(option, value));
  }
}

function rejectUnknownKeys(prefix: string, value: object, known: string[]): void {
  for (const key of Object.keys(value)) {
    if (!known.includes(key)) {
      const option = `${prefix}${key}`;
      const suggestion = closestName(key, known);
      throw new QueueBoxConfigError(option, messages.optionUnknown(option, suggestion && `${prefix}${suggestion}`));
    }
  }
}
