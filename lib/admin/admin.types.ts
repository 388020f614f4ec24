import type { QueueTable } from '../types/claims';

/**
 * Which dead rows an admin call looks at. `deadAfter` / `deadBefore` bound the row's last attempt
 * (`claimed_at`, or `created_at` / `received_at` for a row that was never claimed): a row dies on
 * its last attempt, so this is when it died (within that attempt's lease).
 */
export interface DeadLetterFilter {
  component: QueueTable;
  /** Destination (outbox) or source (inbox), exactly. */
  name?: string;
  /** Ordering key (outbox `key`) or aggregate (inbox `aggregate_id`), exactly. */
  key?: string;
  /** A substring of `last_error`; case-insensitive on PostgreSQL, the column's collation on SQL Server. */
  errorContains?: string;
  /** Last attempt at or after this instant. */
  deadAfter?: Date;
  /** Last attempt before this instant. */
  deadBefore?: Date;
  /**
   * The group's fingerprint, exactly (`DeadLetterGroupRow.fingerprint`, the attempts migration): with
   * `name`, the dead letters of one group. A replay or discard by it changes only rows whose
   * fingerprint still matches when the statement locks them.
   */
  fingerprint?: string;
}

/**
 * Keyset paging: `limit` rows (default 50, at most 1000) with an id above `afterId`, in id order;
 * with `newestFirst`, ids below `afterId`, highest first (pass `nextAfterId` back either way).
 */
export interface DeadLetterPage {
  limit?: number;
  afterId?: string;
  /** Newest rows first (descending id). Default false. */
  newestFirst?: boolean;
  /** Also return each row's payload. Off by default: payloads can be large and sensitive. */
  includePayload?: boolean;
}

/** Dead rows picked by id (rows of other states among them are left out). */
export type DeadLetterIds = { component: QueueTable; ids: string[] };

/**
 * Dead rows picked by id, or by a filter (every dead row it matches). A filter with no criterion
 * must say `all: true`, so an empty filter never replays or discards a whole table by accident.
 */
export type DeadLetterSelection = (DeadLetterFilter & { all?: boolean }) | DeadLetterIds;

/** What one retention run deleted; `skipped` when another replica held the retention lock. */
export interface RetentionResult {
  outboxDeleted: number;
  inboxDeleted: number;
  deadDeleted: number;
  skipped: boolean;
  /**
   * In the partitioned layout (docs/partitioning.md), which retention runs by dropping whole
   * partitions instead of deleting rows (the three counts are then 0): the partitions it dropped.
   */
  partitionsDropped?: string[];
}
