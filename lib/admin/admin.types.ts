/** Which table an admin call targets: the outbox (rows per destination and key) or the inbox (per source and aggregate). */
export type AdminComponent = 'outbox' | 'inbox';

/**
 * Unfinished and dead rows of one destination (outbox) or source (inbox), counted by the database.
 * `oldestPendingAgeSeconds`: database clock minus the enqueue (`created_at`) or receive
 * (`received_at`) time of the oldest pending row that is due (`available_at` passed); `null` when
 * none is due. Rows scheduled for later are counted in `pending` but do not age the queue.
 */
export interface BacklogRow {
  component: AdminComponent;
  /** The destination (outbox) or source (inbox). */
  name: string;
  pending: number;
  processing: number;
  dead: number;
  oldestPendingAgeSeconds: number | null;
}

/**
 * Which dead rows an admin call looks at. `deadAfter` / `deadBefore` bound the row's last attempt
 * (`claimed_at`, or `created_at` / `received_at` for a row that was never claimed): a row dies on
 * its last attempt, so this is when it died (within that attempt's lease).
 */
export interface DeadLetterFilter {
  component: AdminComponent;
  /** Destination (outbox) or source (inbox), exactly. */
  name?: string;
  /** A substring of `last_error`; case-insensitive on PostgreSQL, the column's collation on SQL Server. */
  errorContains?: string;
  /** Last attempt at or after this instant. */
  deadAfter?: Date;
  /** Last attempt before this instant. */
  deadBefore?: Date;
}

/** Keyset paging: `limit` rows (default 50, at most 1000) with an id above `afterId`, in id order. */
export interface DeadLetterPage {
  limit?: number;
  afterId?: string;
  /** Also return each row's payload. Off by default: payloads can be large and sensitive. */
  includePayload?: boolean;
}

/** A dead row, without its payload unless asked for. */
export interface DeadLetterRow {
  component: AdminComponent;
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
  /** Enqueue (outbox) or receive (inbox) time. */
  createdAt: Date;
  /** The last attempt (`claimed_at`), or `null` when the row was never claimed. */
  lastAttemptAt: Date | null;
  headers: Record<string, string>;
  /** Present only with `includePayload`. */
  payload?: unknown;
}

/** Dead rows picked by id (rows of other states among them are left out). */
export type DeadLetterIds = { component: AdminComponent; ids: string[] };

/**
 * Dead rows picked by id, or by a filter (every dead row it matches). A filter with no criterion
 * must say `all: true`, so an empty filter never replays or discards a whole table by accident.
 */
export type DeadLetterSelection = (DeadLetterFilter & { all?: boolean }) | DeadLetterIds;

/** A key or aggregate whose head row (its earliest unfinished row) is failing, and what waits behind it. */
export interface BlockedKeyRow {
  component: AdminComponent;
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
  lastError: string;
  /** `available_at` of a pending head (its next attempt), `lease_expires_at` of a processing one. */
  nextAttemptAt: Date;
  /** Unfinished rows of the same key queued behind the head. */
  waiting: number;
}

/** The key (outbox) or (source, aggregate) (inbox) whose head row `skipHead` dead-letters. */
export type SkipHeadTarget =
  | { component: 'outbox'; key: string; headId?: string; reason?: string }
  | { component: 'inbox'; source: string; aggregateId: string; headId?: string; reason?: string };

/** What one retention run deleted; `skipped` when another replica held the retention lock. */
export interface RetentionResult {
  outboxDeleted: number;
  inboxDeleted: number;
  deadDeleted: number;
  skipped: boolean;
}

/** One kind of row retention deletes. */
export type RetentionKind = 'outbox-sent' | 'inbox-processed' | 'outbox-dead' | 'inbox-dead';
