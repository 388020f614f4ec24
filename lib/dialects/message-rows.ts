/**
 * What the message browser and the long history read through the dialect seam: the validated
 * search a dialect turns into SQL, the rows it returns, and the history's buckets. Beside the seam,
 * as dialect-rows.ts, so lib/dialects imports nothing of lib/admin.
 */

import type { QueueTable } from '../types/claims';
import type { ThroughputRow } from './dialect-rows';

/** Every state a row of either table can be in (`sent` is the outbox's finish, `processed` the inbox's). */
export type MessageState = 'pending' | 'processing' | 'sent' | 'processed' | 'dead';

export const MESSAGE_STATES: Record<QueueTable, readonly MessageState[]> = {
  outbox: ['pending', 'processing', 'sent', 'dead'],
  inbox: ['pending', 'processing', 'processed', 'dead'],
};

/** A payload path (`order.id`, segments of letters, digits, `_` and `-`) or a header name, and the text it must equal. */
export interface MessagePathMatch {
  in: 'payload' | 'headers';
  /** The path's segments, validated (QueueBoxAdmin refuses anything else); header: one segment. */
  segments: string[];
  /** The text the value at the path must equal (a number or boolean compares as its JSON text). */
  equals: string;
}

/** A validated search (QueueBoxAdmin builds it): every criterion `null` when absent. */
export interface MessageSearch {
  component: QueueTable;
  /** Row id: one row through the primary key. */
  rowId: string | null;
  /** Outbox `message_id` (a UUID) or inbox `idempotency_key`. */
  messageId: string | null;
  /** Destination (outbox) or source (inbox). */
  name: string | null;
  /** Outbox `key` or inbox `aggregate_id`. */
  key: string | null;
  state: MessageState | null;
  /** Which time `since` / `until` bound: the enqueue/receive time, or the finish (`sent_at` / `processed_at`). */
  timeField: 'created' | 'finished';
  since: Date | null;
  until: Date | null;
  path: MessagePathMatch | null;
  /** Keyset cursor: only rows with a lower id (the listing is newest first). */
  beforeId: string | null;
  limit: number;
  /** The most rows a bounded scan examines per call. */
  scanLimit: number;
  includePayload: boolean;
}

/**
 * How a search was served. `message-id`: the unique index of the outbox's `message_id`, or of the
 * inbox's `(source, idempotency_key)`, or the primary key for a row id: one row. `state-index`:
 * the partial index of an unfinished or dead state (`pending`, `processing`, `dead`): the cost
 * follows the rows in that state (the backlog, the dead letters), never the finished ones.
 * `bounded-scan`: the primary key walked newest first from the cursor, at most `scanLimit` rows.
 */
export type MessagePlan = 'message-id' | 'state-index' | 'bounded-scan';

/** Any row of the outbox or the inbox, in any state. */
export interface MessageRow {
  component: QueueTable;
  id: string;
  /** The outbox message id (`X-Message-Id`); `null` for inbox rows. */
  messageId: string | null;
  /** The inbox idempotency key; `null` for outbox rows. */
  idempotencyKey: string | null;
  /** Destination (outbox) or source (inbox). */
  name: string;
  /** Outbox `key` or inbox `aggregate_id`. */
  key: string | null;
  state: MessageState;
  attempts: number;
  lastError: string | null;
  /** Enqueue (outbox `created_at`) or receive (inbox `received_at`) time. */
  createdAt: Date;
  /** When it is (or was) due. */
  availableAt: Date;
  /** Its last claim, `null` if never claimed. */
  claimedAt: Date | null;
  /** `sent_at` (outbox) or `processed_at` (inbox); `null` until finished. */
  finishedAt: Date | null;
  headers: Record<string, string>;
  /** Present only with `includePayload`. */
  payload?: unknown;
}

/** What a dialect's search returned: the rows, newest first, and (bounded scans) the lowest id it examined. */
export interface MessageSearchResult {
  rows: MessageRow[];
  plan: MessagePlan;
  /**
   * Bounded scan that found fewer than `limit` rows: the lowest row id the scan examined (rows
   * below it were not looked at), or `null` when it reached the table's first row.
   */
  scannedTo: string | null;
}

/** Finished and dead rows per destination / source and bucket (a minute or an hour), oldest bucket first. */
export interface MessageHistory {
  /** The start of the first bucket (database clock, UTC). */
  since: Date;
  bucket: 'minute' | 'hour';
  buckets: number;
  /** `finished` and `dead` hold one count per bucket, the current (unfinished) bucket last. */
  rows: ThroughputRow[];
  /**
   * False when the app deletes sent rows (`outbox.sentRows: 'delete'`): the outbox's `finished`
   * counts are then zero whatever was sent (count sends with `queuebox_outbox_messages_sent_total`).
   */
  sentRowsKept: boolean;
}
