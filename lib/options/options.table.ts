import type {
  DoctorOptions,
  InstancesOptions,
  LoggingOptions,
  OutboxOptions,
  PullHandlerOptions,
  PullOptions,
  QueueBoxModuleOptions,
  RelayOptions,
  RetentionOptions,
  WorkerOptions,
} from '../types/options';
import {
  DAY_MS,
  DEFAULT_ATTEMPT_HISTORY,
  DEFAULT_BATCH_SIZE,
  DEFAULT_CLAIM_TIMEOUT_MS,
  DEFAULT_CONCURRENCY,
  DEFAULT_DEAD_AFTER_MS,
  DEFAULT_HEARTBEAT_MS,
  DEFAULT_MAX_ATTEMPTS,
  DEFAULT_MAX_PAYLOAD_BYTES,
  DEFAULT_OUTBOX_MAX_FOLLOWERS,
  DEFAULT_OUTBOX_PUBLISH_BATCH_SIZE,
  DEFAULT_POLL_INTERVAL_MS,
  DEFAULT_PULL_CONCURRENCY,
  DEFAULT_PULL_LEASE_MS,
  DEFAULT_RELAY_MAX_FOLLOWERS,
  DEFAULT_RETENTION_BATCH_SIZE,
  DEFAULT_RETENTION_FINISHED_AFTER_MS,
  DEFAULT_RETENTION_INTERVAL_MS,
  DEFAULT_SHUTDOWN_TIMEOUT_MS,
  MAX_LEASE_MS,
  MAX_PULL_BATCH,
  MAX_PULL_CLAIM_LIMIT,
  MIN_LEASE_MS,
} from './options.defaults';

// Every option key, once: which keys each options object has (the resolver refuses others, with a
// "did you mean"), the default and bounds of each integer (the resolver checks them), the default
// the docs show (test/unit/options-docs.test.ts compares it with README.md and docs/), and the
// older names that still work with a deprecation warning. `satisfies Record<keyof X, ...>` ties
// each table to the public type of its object: a key added to one and not the other fails to compile.

/** One option of an options object. */
export interface OptionSpec {
  /** An integer option: its default and bounds (inclusive). */
  integer?: { default: number; min: number; max: number };
  /** The default as README.md and docs/ write it, where they document it. */
  docs?: string;
  /** The option that replaces this one: still accepted, with a deprecation warning. */
  deprecatedFor?: string;
}

const integerOption = (fallback: number, min: number, max: number, docs?: string): OptionSpec => ({
  integer: { default: fallback, min, max },
  docs: docs ?? `\`${fallback}\``,
});

export const TOP_LEVEL_OPTIONS = {
  tables: {},
  workers: { docs: '`true`' },
  maxPayloadBytes: integerOption(DEFAULT_MAX_PAYLOAD_BYTES, 1, 1024 ** 3),
  attemptHistory: integerOption(DEFAULT_ATTEMPT_HISTORY, 0, 1000),
  outbox: {},
  inbox: {},
  pull: {},
  retention: {},
  instances: {},
  logging: {},
  doctor: {},
} as const satisfies Record<keyof QueueBoxModuleOptions, OptionSpec>;

/** `doctor: { ... }`: the database warnings (docs/doctor.md). */
export const DOCTOR_OPTIONS = {
  intervalMs: integerOption(60_000, 0, DAY_MS),
  deadRowsPercent: integerOption(20, 1, 100),
  minDeadRows: integerOption(10_000, 0, 1_000_000_000),
  minIndexBytes: integerOption(67_108_864, 0, Number.MAX_SAFE_INTEGER),
  indexBytesPerRow: integerOption(1024, 1, 1_000_000_000),
  xminHorizonMs: integerOption(300_000, 0, DAY_MS),
  lockWaitMs: integerOption(5_000, 0, DAY_MS),
  clockSkewMs: integerOption(1_000, 0, DAY_MS),
} as const satisfies Record<keyof DoctorOptions, OptionSpec>;

/** `instances: { ... }`: heartbeats, and when a silent instance's leases end. */
export const INSTANCES_OPTIONS = {
  heartbeatMs: integerOption(DEFAULT_HEARTBEAT_MS, 100, 60_000),
  deadAfterMs: integerOption(DEFAULT_DEAD_AFTER_MS, 1000, MAX_LEASE_MS),
} as const satisfies Record<keyof InstancesOptions, OptionSpec>;

/** What the outbox poller and the inbox relay share. */
export const WORKER_OPTIONS = {
  pollIntervalMs: integerOption(DEFAULT_POLL_INTERVAL_MS, 1, 3_600_000),
  batchSize: integerOption(DEFAULT_BATCH_SIZE, 1, 10_000),
  concurrency: integerOption(DEFAULT_CONCURRENCY, 1, 10_000),
  claimTimeoutMs: integerOption(DEFAULT_CLAIM_TIMEOUT_MS, MIN_LEASE_MS, MAX_LEASE_MS),
  shutdownTimeoutMs: integerOption(DEFAULT_SHUTDOWN_TIMEOUT_MS, 0, DAY_MS),
  maxAttempts: { ...integerOption(DEFAULT_MAX_ATTEMPTS, 1, 1_000_000), deprecatedFor: 'retry.attempts' },
  backoff: { deprecatedFor: 'retry.backoff' },
} as const satisfies Record<keyof WorkerOptions, OptionSpec>;

export const OUTBOX_OPTIONS = {
  ...WORKER_OPTIONS,
  publisher: {},
  publishers: {},
  route: {},
  retry: {},
  publishTimeout: { docs: '`claimTimeoutMs / 3`' },
  rateLimits: { docs: '`{}`' },
  sentRows: { docs: "`'keep'`" },
  maxFollowers: integerOption(DEFAULT_OUTBOX_MAX_FOLLOWERS, 0, 1_000_000),
  publishBatchSize: integerOption(DEFAULT_OUTBOX_PUBLISH_BATCH_SIZE, 1, 10_000),
} as const satisfies Record<keyof OutboxOptions, OptionSpec>;

/** `outbox.rateLimits.<destination>: { ... }`. */
export const RATE_LIMIT_OPTIONS = {
  limit: { integer: { default: 1, min: 1, max: 1_000_000 } },
  per: { docs: "`'1s'`" },
  burst: { integer: { default: 1, min: 1, max: 1_000_000 }, docs: '`limit`' },
} as const satisfies Record<string, OptionSpec>;

export const RELAY_OPTIONS = {
  ...WORKER_OPTIONS,
  routes: { docs: '`{}`' },
  handlerTimeout: { docs: '`300000`' },
  maxFollowers: integerOption(DEFAULT_RELAY_MAX_FOLLOWERS, 0, 1_000_000),
  retry: {},
} as const satisfies Record<keyof RelayOptions, OptionSpec>;

export const PULL_OPTIONS = {
  defaultLeaseMs: integerOption(DEFAULT_PULL_LEASE_MS, MIN_LEASE_MS, MAX_LEASE_MS),
  concurrency: integerOption(DEFAULT_PULL_CONCURRENCY, 1, 10_000),
  pollIntervalMs: WORKER_OPTIONS.pollIntervalMs,
  maxAttempts: WORKER_OPTIONS.maxAttempts,
  backoff: WORKER_OPTIONS.backoff,
  retry: {},
  shutdownTimeoutMs: WORKER_OPTIONS.shutdownTimeoutMs,
  sources: { docs: '`[]`' },
  handlerTimeout: { docs: '`300000`' },
} as const satisfies Record<keyof PullOptions, OptionSpec>;

/** `@PullHandler(source, options)`: each integer's default is the `pull.*` value, its bounds are these. */
export const PULL_HANDLER_OPTIONS = {
  leaseMs: { integer: { default: DEFAULT_PULL_LEASE_MS, min: MIN_LEASE_MS, max: MAX_LEASE_MS } },
  concurrency: { integer: { default: DEFAULT_PULL_CONCURRENCY, min: 1, max: 10_000 } },
  maxAttempts: { integer: { default: DEFAULT_MAX_ATTEMPTS, min: 1, max: 1_000_000 }, deprecatedFor: 'retry.attempts' },
  backoff: { deprecatedFor: 'retry.backoff' },
  retry: {},
  handlerTimeout: {},
  batch: { integer: { default: 1, min: 1, max: MAX_PULL_BATCH } },
  queuebox: { docs: '`default`' },
  tenants: { docs: '`false`' },
} as const satisfies Record<keyof PullHandlerOptions, OptionSpec>;

/** The integer arguments of `PullClient.claim` and `claimBatch`: the bounds of the handler options they match. */
export const PULL_CLAIM_ARGUMENTS = {
  leaseMs: PULL_HANDLER_OPTIONS.leaseMs,
  maxAttempts: { integer: PULL_HANDLER_OPTIONS.maxAttempts.integer },
  limit: { integer: { default: 1, min: 1, max: MAX_PULL_CLAIM_LIMIT } },
} as const satisfies Record<string, OptionSpec>;

export const RETENTION_OPTIONS = {
  enabled: { docs: '`false`' },
  finishedAfterMs: integerOption(DEFAULT_RETENTION_FINISHED_AFTER_MS, 60_000, 3650 * DAY_MS),
  inboxFinishedAfterMs: { integer: { default: DEFAULT_RETENTION_FINISHED_AFTER_MS, min: 1, max: 3650 * DAY_MS } },
  deadAfterMs: { integer: { default: 0, min: 60_000, max: 3650 * DAY_MS }, docs: '`false`' },
  intervalMs: integerOption(DEFAULT_RETENTION_INTERVAL_MS, 1000, 7 * DAY_MS),
  batchSize: integerOption(DEFAULT_RETENTION_BATCH_SIZE, 1, 10_000),
} as const satisfies Record<keyof RetentionOptions, OptionSpec>;

/** `logging: { ... }`. */
export const LOGGING_OPTIONS = {
  messages: { docs: '`false`' },
} as const satisfies Record<keyof LoggingOptions, OptionSpec>;

/** `retry: { ... }`. */
export const RETRY_OPTIONS = {
  attempts: integerOption(DEFAULT_MAX_ATTEMPTS, 1, 1_000_000),
  backoff: {},
  retryIf: {},
} as const satisfies Record<string, OptionSpec>;

/** `retry.backoff: { ... }`, the one backoff vocabulary. */
export const RETRY_BACKOFF_OPTIONS = {
  delay: {},
  factor: {},
  maxDelay: {},
  jitter: {},
} as const satisfies Record<string, OptionSpec>;

/** The older `backoff: { ... }` of a worker, and what each of its keys is called in `retry.backoff`. */
export const OLDER_BACKOFF_NAMES = { initialMs: 'delay', factor: 'factor', maxMs: 'maxDelay', jitter: 'jitter' } as const;

/** The keys of an options table. */
export function keysOf(table: Record<string, OptionSpec>): string[] {
  return Object.keys(table);
}
