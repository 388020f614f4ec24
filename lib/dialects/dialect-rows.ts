/**
 * What the dialect seam returns besides claimed rows: the admin's and retention's rows, and what a
 * reclaim did. They live beside the seam so lib/dialects imports nothing of lib/admin; lib/admin
 * and the public barrel take them from here.
 */

import type { QueueTable } from '../types/claims';

/**
 * Unfinished and dead rows of one destination (outbox) or source (inbox), counted by the database.
 * `oldestPendingAgeSeconds`: database clock minus the enqueue (`created_at`) or receive
 * (`received_at`) time of the oldest pending row that is due (`available_at` passed); `null` when
 * none is due. Rows scheduled for later are counted in `pending` but do not age the queue.
 */
export interface BacklogRow {
  component: QueueTable;
  /** The destination (outbox) or source (inbox). */
  name: string;
  pending: number;
  processing: number;
  dead: number;
  oldestPendingAgeSeconds: number | null;
}

/** A dead row, without its payload unless asked for. */
export interface DeadLetterRow {
  component: QueueTable;
  id: string;
  /** The outbox message id (`X-Message-Id`); `null` for inbox rows. */
  messageId: string | null;
  /** The inbox idempotency key; `null` for outbox rows. */
  idempotencyKey: string | null;
  /** Destination (outbox) or source (inbox). */
  name: string;
  /** Ordering key (outbox `key`, inbox `aggregate_id`). */
  key: string | null;
  attempts: number;
  lastError: string | null;
  /** Its group's fingerprint (`<error class>: <normalized message>`); `null` for rows that died before the attempts migration. */
  fingerprint: string | null;
  /** Enqueue (outbox) or receive (inbox) time. */
  createdAt: Date;
  /** The last attempt (`claimed_at`), or `null` when the row was never claimed. */
  lastAttemptAt: Date | null;
  headers: Record<string, string>;
  /** Present only with `includePayload`. */
  payload?: unknown;
}

/** A key or aggregate whose head row (its earliest unfinished row) is failing, and what waits behind it. */
export interface BlockedKeyRow extends RowOwner {
  component: QueueTable;
  /** Destination (outbox) or source (inbox) of the head row. */
  name: string;
  /** Outbox `key` or inbox `aggregate_id`. */
  key: string;
  /** The head row's id, to pass to `skipHead`. */
  headId: string;
  /** The head's outbox message id, `null` for inbox rows. */
  messageId: string | null;
  state: 'pending' | 'processing';
  attempts: number;
  /** The head's last failure; `null` for a `held` head that never failed. */
  lastError: string | null;
  /**
   * `failing`: the head failed at least once and is not finished. `held`: it is claimed, and rows
   * of its key wait behind it (normal while a worker publishes; a stall when its owner is dead).
   */
  reason: 'failing' | 'held';
  /** `available_at` of a pending head (its next attempt), `lease_expires_at` of a processing one. */
  nextAttemptAt: Date;
  /** Unfinished rows of the same key queued behind the head. */
  waiting: number;
  /** Seconds since the head was claimed (database clock), while it is held; `null` otherwise. */
  heldSeconds: number | null;
}

/**
 * Who holds a row. A row is held while it is `processing` with a lease that has not expired (by
 * the database clock); a pending row, or one whose lease ran out, is held by nobody, whoever
 * claimed it last.
 */
export interface RowOwner {
  /**
   * The instance holding the row (see `QueueBoxAdmin.instances()`); `null` when nobody holds it, or
   * when a script or the CLI claimed it.
   */
  owner: string | null;
  /**
   * The state of that instance (`InstanceState`); `null` without an owner. An owner no longer in
   * the instances table is `dead`. A dead owner's lease is ended by the next live replica's heartbeat.
   */
  ownerState: InstanceState | null;
  /**
   * The instance that made the row's last claim (`claimed_by`), whether or not it still holds it:
   * for a pending head that failed, the instance its last attempt ran on. `null` when never
   * claimed by an instance.
   */
  lastClaimedBy: string | null;
}

/**
 * Where an instance's heartbeats stand, by the database clock, from its row's `heartbeat_at` and
 * `dead_after_ms` (its `instances.deadAfterMs`), D for short:
 *
 * - `alive`: its last heartbeat is at most 2/3 D old;
 * - `silent`: older than 2/3 D, at most D: it missed at least two heartbeats (QueueBox refuses a
 *   `heartbeatMs` longer than D / 3, so 2/3 D spans two heartbeats at their longest). It still
 *   holds its rows: an event-loop stall, a paused process, a slow or unreachable database;
 * - `dead`: older than D. At its next heartbeat, any live replica that runs a worker deletes its
 *   row and ends its leases.
 */
export type InstanceState = 'alive' | 'silent' | 'dead';

/** Every `InstanceState`, from the best to the worst. */
export const INSTANCE_STATES: readonly InstanceState[] = ['alive', 'silent', 'dead'];

/**
 * Rows that finished (outbox `sent`, inbox `processed`) and rows that died, per destination or
 * source and minute, oldest minute first; the last minute is the current one (not over yet).
 */
export interface ThroughputRow {
  component: QueueTable;
  /** The destination (outbox) or source (inbox). */
  name: string;
  /** Rows finished in each minute, by `sent_at` / `processed_at`. */
  finished: number[];
  /** Rows that died in each minute, by their last attempt (see `DeadLetterFilter`). */
  dead: number[];
}

/** `ThroughputRow`s of the minutes from `since` (a minute boundary, database clock) on. */
export interface Throughput {
  since: Date;
  minutes: number;
  rows: ThroughputRow[];
  /** As `MessageHistory.sentRowsKept`: false when the app deletes sent rows, so the outbox's `finished` counts are zero. */
  sentRowsKept: boolean;
}

/** A row in flight: claimed by a worker whose lease has not been given back. */
export interface ClaimRow extends RowOwner {
  component: QueueTable;
  id: string;
  /** The outbox message id; `null` for inbox rows. */
  messageId: string | null;
  /** The inbox idempotency key; `null` for outbox rows. */
  idempotencyKey: string | null;
  /** Destination (outbox) or source (inbox). */
  name: string;
  /** Outbox `key` or inbox `aggregate_id`. */
  key: string | null;
  /** The claim's token: what fences its owner's writes (a worker's logs name the token of what it claimed). */
  token: string;
  /** This claim is attempt number `attempts`. */
  attempts: number;
  claimedAt: Date;
  leaseExpiresAt: Date;
  /** Seconds since the claim, by the database clock. */
  ageSeconds: number;
  /**
   * Seconds until the lease expires, by the database clock; negative once it has (the reclaim step
   * returns it; nobody holds it any more: `owner` is `null`).
   */
  leaseRemainingSeconds: number;
}

/** The key (outbox) or (source, aggregate) (inbox) whose head row `skipHead` dead-letters. */
export type SkipHeadTarget =
  | { component: 'outbox'; key: string; headId?: string; reason?: string }
  | { component: 'inbox'; source: string; aggregateId: string; headId?: string; reason?: string };

/** One kind of row retention deletes. */
export type RetentionKind = 'outbox-sent' | 'inbox-processed' | 'outbox-dead' | 'inbox-dead';

/** What a reclaim step did, per destination or source. */
export interface ReclaimResult {
  /** Rows back to `pending`. */
  pending: number;
  /** Rows that died on their last attempt. */
  dead: number;
  byName: { name: string; pending: number; dead: number }[];
}

/** What registering an instance says about it: the instances table's columns but its times. */
export interface InstanceIdentity {
  id: string;
  host: string;
  pid: number;
  /** The TypeORM DataSource name it serves (`default` for the default one), or its tenant's name. */
  dataSource: string;
  version: string;
  /** Its `instances.deadAfterMs`: how long it may miss heartbeats before a replica ends its leases. */
  deadAfterMs: number;
}

/**
 * What registering an instance found: its row written, or its id registered already, with what
 * that row says of the process that holds it (another live process with the same id, or one that
 * died and was not declared dead yet).
 */
export type InstanceRegistration =
  | { registered: true }
  | { registered: false; holder: { host: string; pid: number; startedAt: Date; heartbeatAgeMs: number } };

/**
 * What a heartbeat found: `beat`, with the row's new heartbeat count; `gone`, the row was deleted
 * (another replica declared the instance dead); `taken`, the row counts heartbeats this process
 * did not send (another live process beats with the same id).
 */
export type InstanceBeat = { kind: 'beat'; beats: number } | { kind: 'gone' } | { kind: 'taken' };

/** A registered QueueBox instance (a process with its own instance id), from the instances table. */
export interface InstanceRow extends InstanceIdentity {
  startedAt: Date;
  heartbeatAt: Date;
  /** Seconds since its last heartbeat, by the database clock. */
  heartbeatAgeSeconds: number;
  /**
   * `alive`, `silent` (missed two heartbeats) or `dead` (silent past its `deadAfterMs`), by the
   * database clock (see `InstanceState`). A dead one is gone from the list once a live replica
   * ended its leases.
   */
  state: InstanceState;
  /** Rows it holds in flight now. */
  claims: { outbox: number; inbox: number };
}

/**
 * An instance declared dead (its heartbeats stopped), with the claims whose leases were ended. Or
 * one no longer registered that left claims behind (declared dead earlier, it claimed in the
 * moment before its next heartbeat registered it again, then died): `host`, `pid`, `dataSource`
 * and `heartbeatAt` are `null`, its registration being gone.
 */
export interface DeadInstanceRow {
  id: string;
  host: string | null;
  pid: number | null;
  dataSource: string | null;
  heartbeatAt: Date | null;
  released: { outbox: number; inbox: number };
}

/**
 * A paused outbox destination (`component` 'outbox') or inbox source ('inbox'): claims skip its
 * rows until it is resumed (issue 40). `pausedBy`: who paused it (the dashboard's actor, the CLI's
 * `--actor`); `pausedAt` by the database clock.
 */
export interface PauseRow {
  component: QueueTable;
  name: string;
  reason: string | null;
  pausedBy: string | null;
  pausedAt: Date;
}

/**
 * Dead letters of one cause: one destination (outbox) or source (inbox) and one fingerprint
 * (`<error class>: <message with ids and numbers taken out>`, docs/operations.md). `fingerprint`
 * is `null` for rows that died before the attempts migration.
 */
export interface DeadLetterGroupRow {
  component: QueueTable;
  name: string;
  fingerprint: string | null;
  count: number;
  /** When the first and the last of them died (their last claim, or arrival for a row never claimed). */
  firstDeadAt: Date;
  lastDeadAt: Date;
}

/** One failed attempt of a row, from its attempt history (the attempts migration). */
export interface AttemptRow {
  /** The row's attempt number (its `attempts` then; a replay starts again from 1). */
  attempt: number;
  /** When it failed, by the database clock. */
  failedAt: Date;
  /** From its claim to its failure, by the database clock; `null` when the row had no claim time. */
  durationMs: number | null;
  /** The QueueBox instance that claimed it. */
  instanceId: string | null;
  /** The error's class (`PublishError/503`, `Error/ECONNREFUSED`, `TypeError`). */
  errorClass: string;
  /** The error as `last_error` has it. */
  error: string;
  /** What the failure led to: a retry, or the dead letter. */
  outcome: 'retry' | 'dead';
}
