import type { Type } from '@nestjs/common';
import type { RetryOption } from '../common/backoff';
import { type Duration, parseDuration } from '../common/duration';
import { parseTableName } from '../common/identifiers';
import { DEFAULT_TABLES } from '../common/queuebox.constants';
import type { QueueBoxTables } from '../dialects/dialect';
import { QueueBoxConfigError } from '../errors/queuebox.errors';
import { messages } from '../texts/queuebox.messages';
import type { OutboundMessage } from '../types/messages';
import type {
  DoctorOptions,
  InstancesOptions,
  LoggingOptions,
  OutboxOptions,
  PublisherOption,
  PullHandlerOptions,
  PullOptions,
  QueueBoxModuleOptions,
  RelayOptions,
  RetentionOptions,
  SentRowsOption,
  WorkerOptions,
  WorkersOptions,
} from '../types/options';
import type { Publisher } from '../types/outbox';
import { expectObject, integer, integerOption, isSourceName, rejectUnknownKeys } from './options.checks';
import {
  DAY_MS,
  DEFAULT_HANDLER_TIMEOUT_MS,
  DEFAULT_PUBLISHER,
  defaultPublishTimeoutMs,
  MIN_BEATS_BEFORE_DEAD,
  MIN_INBOX_RETENTION_MS,
  reclaimIntervalMs,
} from './options.defaults';
import type {
  ResolvedInstancesOptions,
  ResolvedOutboxOptions,
  ResolvedPullOptions,
  ResolvedQueueBoxOptions,
  ResolvedRelayOptions,
  ResolvedRetentionOptions,
  ResolvedWorkerOptions,
} from './options.resolved';
import { resolveRetry } from './options.retry';
import {
  DOCTOR_OPTIONS,
  INSTANCES_OPTIONS,
  keysOf,
  LOGGING_OPTIONS,
  OUTBOX_OPTIONS,
  PULL_HANDLER_OPTIONS,
  PULL_OPTIONS,
  RATE_LIMIT_OPTIONS,
  RELAY_OPTIONS,
  RETENTION_OPTIONS,
  TOP_LEVEL_OPTIONS,
  WORKER_OPTIONS,
} from './options.table';

// Checks the options users write (./options.types.ts) and fills in the defaults
// (./options.defaults.ts). Errors name the option as the user wrote it.
//
// The lease length: users write `outbox.claimTimeoutMs`, `inbox.relay.claimTimeoutMs`,
// `pull.defaultLeaseMs` and `@PullHandler({ leaseMs })`; resolveWorker, resolvePull and
// resolvePullHandler map every one of them to `leaseMs`, the only name used after this file.

/** Validates `options` and fills in every default. Throws `QueueBoxConfigError` naming the first bad option. */
export function resolveOptions(options: QueueBoxModuleOptions = {}): ResolvedQueueBoxOptions {
  expectObject('options', options);
  rejectUnknownKeys('', options, keysOf(TOP_LEVEL_OPTIONS));
  const deprecations: string[] = [];
  const workers = resolveWorkers(options.workers);
  const outbox = resolveOutbox(options.outbox ?? {}, workers.outbox, deprecations);
  const inbox = options.inbox ?? {};
  expectObject('inbox', inbox);
  rejectUnknownKeys('inbox.', inbox, ['relay']);
  return {
    tables: resolveTables(options.tables),
    deprecations,
    workers,
    maxPayloadBytes: integerOption('maxPayloadBytes', options.maxPayloadBytes, TOP_LEVEL_OPTIONS.maxPayloadBytes),
    attemptHistory: integerOption('attemptHistory', options.attemptHistory, TOP_LEVEL_OPTIONS.attemptHistory),
    outbox,
    inbox: { relay: resolveRelay(inbox.relay ?? {}, deprecations) },
    pull: resolvePull(options.pull ?? {}, deprecations),
    retention: resolveRetention(options.retention ?? {}),
    instances: resolveInstances(options.instances ?? {}),
    logging: resolveLogging(options.logging ?? {}),
    doctor: resolveDoctor(options.doctor ?? {}),
  };
}

/** Validates `doctor` (the database warnings' interval and thresholds); also used by `queuebox doctor`. */
export function resolveDoctor(doctor: DoctorOptions): Required<DoctorOptions> {
  expectObject('doctor', doctor);
  rejectUnknownKeys('doctor.', doctor, keysOf(DOCTOR_OPTIONS));
  return Object.fromEntries(
    (keysOf(DOCTOR_OPTIONS) as (keyof DoctorOptions)[]).map((key) => [
      key,
      integerOption(`doctor.${key}`, doctor[key], DOCTOR_OPTIONS[key]),
    ]),
  ) as Required<DoctorOptions>;
}

/** Validates the `tables` option (also used by the migration factory). */
export function resolveTables(tables: QueueBoxModuleOptions['tables'] = {}): QueueBoxTables {
  expectObject('tables', tables);
  rejectUnknownKeys('tables.', tables, ['outbox', 'inbox', 'instances']);
  const outbox = parseTableName('tables.outbox', tables.outbox === undefined ? DEFAULT_TABLES.outbox : tables.outbox);
  const inbox = parseTableName('tables.inbox', tables.inbox === undefined ? DEFAULT_TABLES.inbox : tables.inbox);
  // The instances table lives beside the outbox by default (its schema, when it has one).
  const instances = parseTableName(
    'tables.instances',
    tables.instances ?? (outbox.schema ? `${outbox.schema}.${DEFAULT_TABLES.instances}` : DEFAULT_TABLES.instances),
  );
  const names = [outbox.qualified, inbox.qualified, instances.qualified];
  const repeated = names.find((name, i) => names.indexOf(name) !== i);
  if (repeated) throw new QueueBoxConfigError('tables', messages.tablesCollide(repeated));
  return { outbox, inbox, instances };
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

function resolveOutbox(outbox: OutboxOptions, workerRuns: boolean, deprecations: string[]): ResolvedOutboxOptions {
  expectObject('outbox', outbox);
  rejectUnknownKeys('outbox.', outbox, keysOf(OUTBOX_OPTIONS));
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
  const worker = resolveWorker('outbox', outbox, deprecations);
  const publishTimeoutMs =
    outbox.publishTimeout === undefined
      ? defaultPublishTimeoutMs(worker.leaseMs)
      : parseDuration('outbox.publishTimeout', outbox.publishTimeout, { min: 1, max: DAY_MS });
  if (publishTimeoutMs >= worker.leaseMs) {
    throw new QueueBoxConfigError('outbox.publishTimeout', messages.publishTimeoutNotBelowLease(publishTimeoutMs, worker.leaseMs));
  }
  return {
    ...worker,
    publishers,
    publisherTypes,
    publisherOptions,
    route,
    routedByName: outbox.route === undefined && names.length > 1,
    publishTimeoutMs,
    rateLimits: resolveRateLimits(outbox.rateLimits),
    sentRows: resolveSentRows(outbox.sentRows),
    maxFollowers: integerOption('outbox.maxFollowers', outbox.maxFollowers, OUTBOX_OPTIONS.maxFollowers),
    publishBatchSize: integerOption('outbox.publishBatchSize', outbox.publishBatchSize, OUTBOX_OPTIONS.publishBatchSize),
  };
}

function resolveSentRows(given: OutboxOptions['sentRows']): SentRowsOption {
  if (given === undefined || given === 'keep' || given === 'delete') return given ?? 'keep';
  throw new QueueBoxConfigError('outbox.sentRows', messages.sentRowsInvalid(given));
}

/** `outbox.rateLimits`: each destination's limit as tokens per second and a bucket size. */
function resolveRateLimits(given: OutboxOptions['rateLimits']): ResolvedOutboxOptions['rateLimits'] {
  const rateLimits: ResolvedOutboxOptions['rateLimits'] = {};
  if (given === undefined) return rateLimits;
  expectObject('outbox.rateLimits', given);
  for (const [destination, limit] of Object.entries(given)) {
    const option = `outbox.rateLimits.${destination}`;
    expectObject(option, limit);
    rejectUnknownKeys(`${option}.`, limit, keysOf(RATE_LIMIT_OPTIONS));
    const count = integer(
      `${option}.limit`,
      limit.limit ?? null,
      Number.NaN,
      RATE_LIMIT_OPTIONS.limit.integer.min,
      RATE_LIMIT_OPTIONS.limit.integer.max,
    );
    const perMs = limit.per === undefined ? 1000 : parseDuration(`${option}.per`, limit.per, { min: 1, max: DAY_MS });
    const burst = integer(
      `${option}.burst`,
      limit.burst,
      count,
      RATE_LIMIT_OPTIONS.burst.integer.min,
      RATE_LIMIT_OPTIONS.burst.integer.max,
    );
    rateLimits[destination] = { perSecond: (count * 1000) / perMs, burst };
  }
  return rateLimits;
}

function resolveRelay(relay: RelayOptions, deprecations: string[]): ResolvedRelayOptions {
  expectObject('inbox.relay', relay);
  rejectUnknownKeys('inbox.relay.', relay, keysOf(RELAY_OPTIONS));
  const routes = relay.routes ?? {};
  expectObject('inbox.relay.routes', routes);
  for (const [source, route] of Object.entries(routes)) {
    if (typeof route !== 'function')
      throw new QueueBoxConfigError(`inbox.relay.routes.${source}`, messages.optionNotFunction(`inbox.relay.routes.${source}`));
    if (!isSourceName(source)) throw new QueueBoxConfigError(`inbox.relay.routes.${source}`, messages.sourceNameInvalid(source));
  }
  return {
    ...resolveWorker('inbox.relay', relay, deprecations),
    routes: { ...routes },
    handlerTimeoutMs: handlerTimeout('inbox.relay.handlerTimeout', relay.handlerTimeout, DEFAULT_HANDLER_TIMEOUT_MS),
    maxFollowers: integerOption('inbox.relay.maxFollowers', relay.maxFollowers, RELAY_OPTIONS.maxFollowers),
  };
}

function resolvePull(pull: PullOptions, deprecations: string[]): ResolvedPullOptions {
  expectObject('pull', pull);
  rejectUnknownKeys('pull.', pull, keysOf(PULL_OPTIONS));
  const sources = pull.sources ?? [];
  if (!Array.isArray(sources)) throw new QueueBoxConfigError('pull.sources', messages.optionNotObject('pull.sources', sources));
  for (const source of sources)
    if (!isSourceName(source)) throw new QueueBoxConfigError('pull.sources', messages.sourceNameInvalid(source));
  return {
    leaseMs: integerOption('pull.defaultLeaseMs', pull.defaultLeaseMs, PULL_OPTIONS.defaultLeaseMs),
    concurrency: integerOption('pull.concurrency', pull.concurrency, PULL_OPTIONS.concurrency),
    pollIntervalMs: integerOption('pull.pollIntervalMs', pull.pollIntervalMs, PULL_OPTIONS.pollIntervalMs),
    ...resolveRetry('pull', pull, deprecations),
    shutdownTimeoutMs: integerOption('pull.shutdownTimeoutMs', pull.shutdownTimeoutMs, PULL_OPTIONS.shutdownTimeoutMs),
    sources: [...sources],
    handlerTimeoutMs: handlerTimeout('pull.handlerTimeout', pull.handlerTimeout, DEFAULT_HANDLER_TIMEOUT_MS),
  };
}

function resolveRetention(retention: RetentionOptions): ResolvedRetentionOptions {
  expectObject('retention', retention);
  rejectUnknownKeys('retention.', retention, keysOf(RETENTION_OPTIONS));
  const enabled = retention.enabled ?? false;
  if (typeof enabled !== 'boolean')
    throw new QueueBoxConfigError('retention.enabled', messages.optionNotBoolean('retention.enabled', enabled));
  const finishedAfterMs = integerOption('retention.finishedAfterMs', retention.finishedAfterMs, RETENTION_OPTIONS.finishedAfterMs);
  const inboxFinishedAfterMs = integerOption(
    'retention.inboxFinishedAfterMs',
    retention.inboxFinishedAfterMs,
    RETENTION_OPTIONS.inboxFinishedAfterMs,
    Math.max(finishedAfterMs, MIN_INBOX_RETENTION_MS),
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
      : integerOption('retention.deadAfterMs', retention.deadAfterMs, RETENTION_OPTIONS.deadAfterMs);
  return {
    enabled,
    finishedAfterMs,
    inboxFinishedAfterMs,
    deadAfterMs,
    intervalMs: integerOption('retention.intervalMs', retention.intervalMs, RETENTION_OPTIONS.intervalMs),
    batchSize: integerOption('retention.batchSize', retention.batchSize, RETENTION_OPTIONS.batchSize),
  };
}

function resolveInstances(instances: InstancesOptions): ResolvedInstancesOptions {
  expectObject('instances', instances);
  rejectUnknownKeys('instances.', instances, keysOf(INSTANCES_OPTIONS));
  const heartbeatMs = integerOption('instances.heartbeatMs', instances.heartbeatMs, INSTANCES_OPTIONS.heartbeatMs);
  const deadAfterMs = integerOption('instances.deadAfterMs', instances.deadAfterMs, INSTANCES_OPTIONS.deadAfterMs);
  if (deadAfterMs < MIN_BEATS_BEFORE_DEAD * heartbeatMs) {
    throw new QueueBoxConfigError('instances.deadAfterMs', messages.deadAfterTooShort(deadAfterMs, heartbeatMs, MIN_BEATS_BEFORE_DEAD));
  }
  return { heartbeatMs, deadAfterMs };
}

function resolveLogging(logging: LoggingOptions): Required<LoggingOptions> {
  expectObject('logging', logging);
  rejectUnknownKeys('logging.', logging, keysOf(LOGGING_OPTIONS));
  const perMessage = logging.messages ?? false;
  if (typeof perMessage !== 'boolean')
    throw new QueueBoxConfigError('logging.messages', messages.optionNotBoolean('logging.messages', perMessage));
  return { messages: perMessage };
}

function handlerTimeout(option: string, value: Duration | undefined, fallback: number): number {
  return value === undefined ? fallback : parseDuration(option, value, { min: 1, max: DAY_MS });
}

/**
 * Validates one `@PullHandler`'s options against the `pull` defaults. `where` names the handler in
 * errors; a deprecated option used goes to `deprecations`.
 */
export function resolvePullHandler(where: string, options: PullHandlerOptions, defaults: ResolvedPullOptions, deprecations: string[] = []) {
  expectObject(where, options);
  rejectUnknownKeys(`${where}.`, options, keysOf(PULL_HANDLER_OPTIONS));
  const handlerRetry =
    options.retry !== undefined || options.maxAttempts !== undefined || options.backoff !== undefined
      ? resolveRetry(where, options, deprecations, defaults)
      : { maxAttempts: defaults.maxAttempts, backoff: defaults.backoff, retryIf: defaults.retryIf };
  const spec = PULL_HANDLER_OPTIONS;
  return {
    leaseMs: integerOption(`${where}.leaseMs`, options.leaseMs, spec.leaseMs, defaults.leaseMs),
    concurrency: integerOption(`${where}.concurrency`, options.concurrency, spec.concurrency, defaults.concurrency),
    handlerTimeoutMs: handlerTimeout(`${where}.handlerTimeout`, options.handlerTimeout, defaults.handlerTimeoutMs),
    // Undefined: the handler takes one message per call.
    batch: options.batch === undefined ? undefined : integerOption(`${where}.batch`, options.batch, spec.batch),
    ...handlerRetry,
  };
}

function resolveWorker(prefix: string, worker: WorkerOptions, deprecations: string[]): ResolvedWorkerOptions {
  const leaseMs = integerOption(`${prefix}.claimTimeoutMs`, worker.claimTimeoutMs, WORKER_OPTIONS.claimTimeoutMs);
  return {
    pollIntervalMs: integerOption(`${prefix}.pollIntervalMs`, worker.pollIntervalMs, WORKER_OPTIONS.pollIntervalMs),
    batchSize: integerOption(`${prefix}.batchSize`, worker.batchSize, WORKER_OPTIONS.batchSize),
    concurrency: integerOption(`${prefix}.concurrency`, worker.concurrency, WORKER_OPTIONS.concurrency),
    leaseMs,
    reclaimIntervalMs: reclaimIntervalMs(leaseMs),
    shutdownTimeoutMs: integerOption(`${prefix}.shutdownTimeoutMs`, worker.shutdownTimeoutMs, WORKER_OPTIONS.shutdownTimeoutMs),
    ...resolveRetry(prefix, worker as WorkerOptions & { retry?: RetryOption<unknown> }, deprecations),
  };
}
