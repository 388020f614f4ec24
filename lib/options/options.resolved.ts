import type { Type } from '@nestjs/common';
import type { BackoffFunction } from '../common/backoff';
import type { QueueBoxTables } from '../dialects/dialect';
import type { RelayRoute } from '../types/inbox';
import type { InboxMessage, OutboundMessage } from '../types/messages';
import type { DoctorOptions, LoggingOptions, SentRowsOption, WorkersOptions } from '../types/options';
import type { Publisher } from '../types/outbox';

// The options after resolution (./options.resolver.ts): every default filled in, every lease
// named `leaseMs`. What the workers and the module read.

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
  /** The default route of several publishers: a message goes to the publisher named as its destination. */
  routedByName: boolean;
  publishTimeoutMs: number;
  /** `outbox.rateLimits`, by destination: tokens per second and the bucket's size. */
  rateLimits: Record<string, { perSecond: number; burst: number }>;
  /** `outbox.sentRows`: whether the completion of a sent message keeps its row or deletes it. */
  sentRows: SentRowsOption;
  maxFollowers: number;
  publishBatchSize: number;
}

export interface ResolvedRelayOptions extends ResolvedWorkerOptions {
  routes: Record<string, RelayRoute>;
  handlerTimeoutMs: number;
  maxFollowers: number;
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

export interface ResolvedInstancesOptions {
  heartbeatMs: number;
  deadAfterMs: number;
}

export interface ResolvedQueueBoxOptions {
  tables: QueueBoxTables;
  /** One line per deprecated option used (the module logs them at start-up). */
  deprecations: string[];
  workers: Required<WorkersOptions>;
  maxPayloadBytes: number;
  /** Failed attempts kept per row (0: none). */
  attemptHistory: number;
  outbox: ResolvedOutboxOptions;
  inbox: { relay: ResolvedRelayOptions };
  pull: ResolvedPullOptions;
  retention: ResolvedRetentionOptions;
  instances: ResolvedInstancesOptions;
  logging: Required<LoggingOptions>;
  /** The database warnings' interval and thresholds. */
  doctor: Required<DoctorOptions>;
}
