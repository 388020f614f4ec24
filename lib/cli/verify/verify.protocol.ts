import type { VerifyPath } from './verify.options';

// What the verify run and its worker processes say to each other: the worker's configuration
// (one environment variable) and the messages of the IPC channel that `fork` opens.

/** The environment variable that carries a worker's configuration (JSON). */
export const VERIFY_WORKER_ENV = 'QUEUEBOX_VERIFY_WORKER';

/** A worker process's configuration: the database, its tables and every QueueBox setting of the run. */
export interface VerifyWorkerConfig {
  /** The worker's name in the report (`w1`, `w2`, ...). */
  name: string;
  url: string;
  /** The connections' application name, by which its sessions are found (`sessions` fault). */
  applicationName: string;
  pool: number;
  /** A schema for TypeORM's own tables, when the run has one. */
  schema?: string;
  tables: { outbox: string; inbox: string; instances: string };
  leaseMs: number;
  publishTimeoutMs: number;
  shutdownTimeoutMs: number;
  heartbeatMs: number;
  deadAfterMs: number;
  maxAttempts: number;
}

/**
 * The payload of every message of a run, as the producer writes it and the destination reads it
 * (relayed and handled messages carry it on unchanged).
 */
export interface VerifyPayload {
  /** Unique in the run: `<path>/<key or "none">/<seq>`. */
  name: string;
  path: VerifyPath;
  /** Its key (outbox) or aggregate (inbox); null for an outbox message without one. */
  key: string | null;
  /** Fails on every attempt, everywhere: must end `dead`, never delivered. */
  poison?: boolean;
  /** Its first attempt fails, everywhere (the destination refuses its first publish): a retry that blocks its key. */
  flaky?: boolean;
  /** Its publish (the destination's answer), its relay route and the batch handler holding it take this long (ms): half a lease. */
  slowMs?: number;
  /** The pull handler holding it takes this long (ms): longer than a lease, which renewals must keep. */
  handlerMs?: number;
}

/** A worker's publish reached the destination (the run), which answers with `VerifyAck`. */
export interface VerifyDeliveryMessage {
  type: 'delivery';
  /** The worker's number for this publish, echoed by the answer. */
  n: number;
  messageId: string;
  destination: string;
  key: string | null;
  attempt: number;
  payload: VerifyPayload;
  /** The worker's clock when it sent it (ms since the epoch; the run's processes share the host's clock). */
  sentAt: number;
}

/** The worker has started: its workers claim. */
export interface VerifyReadyMessage {
  type: 'ready';
}

export type VerifyWorkerMessage = VerifyDeliveryMessage | VerifyReadyMessage;

/** The destination's answer to a publish: accepted, or refused (the publish throws; it is retried). */
export interface VerifyAck {
  type: 'ack';
  n: number;
  ok: boolean;
}

/** Whether an IPC message is one the worker sends. */
export function isWorkerMessage(value: unknown): value is VerifyWorkerMessage {
  const type = (value as { type?: unknown } | null)?.type;
  return type === 'delivery' || type === 'ready';
}
