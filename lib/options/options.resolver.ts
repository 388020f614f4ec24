import type { Type } from '@nestjs/common';
import type { BackoffFunction, RetryOption } from '../common/backoff';
import { type Duration, parseDuration } from '../common/duration';
import { parseTableName } from '../common/identifiers';
import type { QueueBoxTables } from '../dialects/dialect';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import type { RelayRoute } from '../inbox/inbox.types';
import type { Publisher } from '../outbox/outbox.types';
import { DEFAULT_TABLES } from '../queuebox.constants';
import { messages } from '../queuebox.messages';
import type { InboxMessage, OutboundMessage } from '../types/messages';
import { expectObject, integer, rejectUnknownKeys } from './options.checks';
import {
  DAY_MS,
  DEFAULT_BATCH_SIZE,
  DEFAULT_CLAIM_TIMEOUT_MS,
  DEFAULT_CONCURRENCY,
  DEFAULT_HANDLER_TIMEOUT_MS,
  DEFAULT_MAX_PAYLOAD_BYTES,
  DEFAULT_POLL_INTERVAL_MS,
  DEFAULT_PUBLISHER,
  DEFAULT_PULL_CONCURRENCY,
  DEFAULT_PULL_LEASE_MS,
  DEFAULT_RETENTION_BATCH_SIZE,
  DEFAULT_RETENTION_FINISHED_AFTER_MS,
  DEFAULT_RETENTION_INTERVAL_MS,
  DEFAULT_SHUTDOWN_TIMEOUT_MS,
  defaultPublishTimeoutMs,
  MAX_LEASE_MS,
  MAX_PULL_BATCH,
  MIN_INBOX_RETENTION_MS,
  MIN_LEASE_MS,
  reclaimIntervalMs,
} from './options.defaults';
import { resolveBackoff, resolveRetry } from './options.retry';
import type {
  OutboxOptions,
  PublisherOption,
  PullHandlerOptions,
  PullOptions,
  QueueBoxModuleOptions,
  RelayOptions,
  RetentionOptions,
  WorkerOptions,
  WorkersOptions,
} from './options.types';

// Checks the options users write (./options.types.ts) and fills in the defaults
// (./options.defaults.ts). Errors name the option as the user wrote it.
//
// The lease length: users write `outbox.claimTimeoutMs`, `inbox.relay.claimTimeoutMs`,
// `pull.defaultLeaseMs` and `@PullHandler({ leaseMs })`; resolveWorker, resolvePull and
// resolvePullHandler map every one of them to `leaseMs`, the only name used after this file.

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
  /** Lease of a claimed row (the public `claimTimeoutMs`). */
  leaseMs: number;
  /** The reclaim step runs at most once per this (a fifth of the lease). */
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
  /** Lease of a pull claim when the handler gives none (the public `pull.defaultLeaseMs`). */
  leaseMs: number;
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
    maxPayloadBytes: integer('maxPayloadBytes', options.maxPayloadBytes, DEFAULT_MAX_PAYLOAD_BYTES, 1, 1024 ** 3),
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
      ? defaultPublishTimeoutMs(worker.leaseMs)
      : parseDuration('outbox.publishTimeout', outbox.publishTimeout, { min: 1, max: DAY_MS });
  if (publishTimeoutMs >= worker.leaseMs) {
    throw new QueueBoxConfigError('outbox.publishTimeout', messages.publishTimeoutNotBelowLease(publishTimeoutMs, worker.leaseMs));
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
    leaseMs: integer('pull.defaultLeaseMs', pull.defaultLeaseMs, DEFAULT_PULL_LEASE_MS, MIN_LEASE_MS, MAX_LEASE_MS),
    concurrency: integer('pull.concurrency', pull.concurrency, DEFAULT_PULL_CONCURRENCY, 1, 10_000),
    pollIntervalMs: integer('pull.pollIntervalMs', pull.pollIntervalMs, DEFAULT_POLL_INTERVAL_MS, 1, 3600_000),
    ...resolveRetry('pull', pull),
    shutdownTimeoutMs: integer('pull.shutdownTimeoutMs', pull.shutdownTimeoutMs, DEFAULT_SHUTDOWN_TIMEOUT_MS, 0, DAY_MS),
    sources: [...sources],
    handlerTimeoutMs: handlerTimeout('pull.handlerTimeout', pull.handlerTimeout, DEFAULT_HANDLER_TIMEOUT_MS),
  };
}

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
  const finishedAfterMs = integer(
    'retention.finishedAfterMs',
    retention.finishedAfterMs,
    DEFAULT_RETENTION_FINISHED_AFTER_MS,
    60_000,
    3650 * DAY_MS,
  );
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
    intervalMs: integer('retention.intervalMs', retention.intervalMs, DEFAULT_RETENTION_INTERVAL_MS, 1000, 7 * DAY_MS),
    batchSize: integer('retention.batchSize', retention.batchSize, DEFAULT_RETENTION_BATCH_SIZE, 1, 10_000),
  };
}

function handlerTimeout(option: string, value: Duration | undefined, fallback: number): number {
  return value === undefined ? fallback : parseDuration(option, value, { min: 1, max: DAY_MS });
}

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
    leaseMs: integer(`${where}.leaseMs`, options.leaseMs, defaults.leaseMs, MIN_LEASE_MS, MAX_LEASE_MS),
    concurrency: integer(`${where}.concurrency`, options.concurrency, defaults.concurrency, 1, 10_000),
    handlerTimeoutMs: handlerTimeout(`${where}.handlerTimeout`, options.handlerTimeout, defaults.handlerTimeoutMs),
    // Undefined: the handler takes one message per call.
    batch: options.batch === undefined ? undefined : integer(`${where}.batch`, options.batch, 1, 1, MAX_PULL_BATCH),
    ...retry,
  };
}

/** A source travels in URLs (`POST <path>/:source`) and in logs: keep it plain. */
export function isSourceName(source: unknown): source is string {
  return typeof source === 'string' && /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(source);
}

function resolveWorker(prefix: string, worker: WorkerOptions): ResolvedWorkerOptions {
  const leaseMs = integer(`${prefix}.claimTimeoutMs`, worker.claimTimeoutMs, DEFAULT_CLAIM_TIMEOUT_MS, MIN_LEASE_MS, MAX_LEASE_MS);
  return {
    pollIntervalMs: integer(`${prefix}.pollIntervalMs`, worker.pollIntervalMs, DEFAULT_POLL_INTERVAL_MS, 1, 3600_000),
    batchSize: integer(`${prefix}.batchSize`, worker.batchSize, DEFAULT_BATCH_SIZE, 1, 10_000),
    concurrency: integer(`${prefix}.concurrency`, worker.concurrency, DEFAULT_CONCURRENCY, 1, 10_000),
    leaseMs,
    reclaimIntervalMs: reclaimIntervalMs(leaseMs),
    shutdownTimeoutMs: integer(`${prefix}.shutdownTimeoutMs`, worker.shutdownTimeoutMs, DEFAULT_SHUTDOWN_TIMEOUT_MS, 0, DAY_MS),
    ...resolveRetry(prefix, worker as WorkerOptions & { retry?: RetryOption<unknown> }),
  };
}
