import type { VerifyFault, VerifyPath } from './verify.options';

// What a verify run records, and what its checks read: the messages the producers committed, the
// publishes the destination accepted, the faults injected, and the rows' states at the end.

/** A message a producer committed. */
export interface ProducedMessage {
  name: string;
  path: VerifyPath;
  /** The ordering key (outbox key or inbox aggregate); null for an outbox message without one. */
  key: string | null;
  poison: boolean;
  /** The producers' logical clock when its transaction began, and once it had committed. */
  started: number;
  committed: number;
  /** The row's id: the outbox row for the `outbox` path, the inbox row for the others. */
  rowId: string;
  /** The outbox message id of an `outbox` path message. */
  messageId?: string;
}

/** A publish the destination accepted (what a real destination would have seen). */
export interface Delivery {
  /** The destination's receipt order, from 1. */
  seq: number;
  name: string;
  path: VerifyPath;
  key: string | null;
  messageId: string;
  worker: string;
  attempt: number;
  /** The publishing worker's clock when it sent it, and the run's when it arrived (ms since the epoch). */
  sentAt: number;
  receivedAt: number;
}

/** What a claim in flight names: its table, destination or source, key and row. */
export interface HeldRow {
  component: 'outbox' | 'inbox';
  name: string;
  key: string | null;
  /** The outbox message id, or the inbox idempotency key (the message's name). */
  messageId: string | null;
  idempotencyKey: string | null;
}

/** A fault the run injected, or one that happened to it (`crash`: a worker exited by itself). */
export interface FaultRecord {
  kind: VerifyFault | 'crash';
  worker: string;
  /** When it began and ended (a pause: SIGSTOP to SIGCONT; a shutdown: SIGTERM to the exit), ms since the epoch. */
  at: number;
  endedAt: number;
  /** The claims the worker held just before (kill, pause, shutdown). */
  held: HeldRow[];
  /** Sessions ended (`sessions`). */
  sessions?: number;
  /** A shutdown: whether the process exited by itself within its bound, and the claims its instance still held under a live lease after. */
  exitedInTime?: boolean;
  leftHeld?: number;
  /** An admin pause (`worker` is ''): what was paused, and the claims of it made while it was paused. */
  paused?: PausedName[];
}

/** A destination or source paused by the `admin-pause` scenario, and what its claims did meanwhile. */
export interface PausedName {
  component: 'outbox' | 'inbox';
  name: string;
  /** Keys whose claims were in flight when the pause had taken effect (they may finish, their followers too). */
  heldKeys: (string | null)[];
  /** Keys of the rows claimed while paused, beyond `heldKeys` (null: a row without a key): a claim that ignored the pause. */
  claimedKeys: (string | null)[];
  /** How long the pause was watched (from when it had taken effect to the resume), ms. */
  watchedMs: number;
}

/** A scenario that could not run here, and why. */
export interface SkippedFault {
  fault: VerifyFault;
  reason: string;
}

/** A produced row's state at the end of the run. */
export interface RowState {
  state: string;
  attempts: number;
  lastError: string | null;
}

/** A row still unfinished after the drain (from `QueueBoxAdmin`: the backlog and the claims in flight). */
export interface Leftover {
  component: 'outbox' | 'inbox';
  name: string;
  pending: number;
  processing: number;
  /** Processing rows whose owner is not a live instance. */
  ownerless: number;
}
