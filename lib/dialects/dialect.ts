import type { EntityManager } from 'typeorm';
import type { TableName } from '../common/identifiers';
import type { ClaimedRow, FollowerRow, OutboxClaim, QueueTable } from '../types/claims';
import type { InboxMessage, OutboundMessage } from '../types/messages';
import type {
  AttemptRow,
  BacklogRow,
  BlockedKeyRow,
  ClaimRow,
  DeadInstanceRow,
  DeadLetterGroupRow,
  DeadLetterRow,
  InstanceBeat,
  InstanceIdentity,
  InstanceRegistration,
  InstanceRow,
  PauseRow,
  ReclaimResult,
  RetentionKind,
  SkipHeadTarget,
  Throughput,
  ThroughputRow,
} from './dialect-rows';
import type { DoctorFacts } from './doctor-facts';
import type { MessageSearch, MessageSearchResult } from './message-rows';
import type { SchemaMigration } from './schema-migrations';

/** The QueueBox tables, validated: the outbox, the inbox, and the instances (processes and their heartbeats). */
export interface QueueBoxTables {
  readonly outbox: TableName;
  readonly inbox: TableName;
  readonly instances: TableName;
}

export interface OutboxInsertRow {
  messageId: string;
  destination: string;
  key: string | null;
  /** Payload and headers already serialized to JSON text. */
  payloadJson: string;
  headersJson: string;
  availableAt: Date | null;
}

/** One row of `outboxInsert`: its id, and whether it was stored already (`ifAbsent` only). */
export interface OutboxInserted {
  id: string;
  messageId: string;
  duplicate: boolean;
}

export interface InboxInsertRow {
  source: string;
  idempotencyKey: string;
  aggregateId: string | null;
  payloadJson: string;
  headersJson: string;
}

/** A claimed inbox row: its fence and its message. */
export type InboxClaimedRow = ClaimedRow<InboxMessage>;

/** Work arrived: outbox rows were committed, or an inbox message of `source` (all sources when absent). */
export type WorkNotice = { table: 'outbox' } | { table: 'inbox'; source?: string };

export interface WorkListener {
  close(): Promise<void>;
}

/** A claim a batch renewal kept, and when its lease ends now. */
export interface RenewedClaim {
  id: string;
  token: string;
  leaseExpiresAt: Date;
}

/** Which ids of a batch completion's claims it completed; the others lost their claim. */
export interface CompletedIds {
  has(id: string): boolean;
}

export interface FenceParams {
  table: QueueTable;
  id: string;
  token: string;
}

/**
 * Everything QueueBox says to a database. One implementation per dialect; all SQL lives in them.
 *
 * Methods read noun-then-verb and take one params object. A dialect owns its placeholders, its
 * quoting, its clock function and its claim locks: PostgreSQL takes a transaction-scoped advisory
 * lock inside the claim transaction, SQL Server a session-owned application lock around it, which
 * is why claims are whole operations here rather than statements the caller wraps.
 *
 * Every fenced write (`lease*`) matches id, state `processing`, the token and a lease later than
 * the database's current time, and reports whether it changed exactly one row.
 */
export interface Dialect {
  /** The TypeORM driver type of its driver entry (`dialectDriver(type)`); a string, so the drivers list alone names the databases. */
  readonly type: string;
  /**
   * Whether `QueryRunner.connect()` reserves a connection, so the pull workers' renewal connection
   * is really set aside. TypeORM's SQL Server driver reserves one only inside a transaction: its
   * renewals go through the pool (see QueueBoxPoolCheck).
   */
  readonly reservesConnections: boolean;

  /** Throws when a QueueBox table is missing (the schema was never migrated). */
  schemaCheck(): Promise<void>;

  /**
   * Runs `work` in one of QueueBox's own transactions (a pull handler's, a relay forward's) at READ
   * COMMITTED, whatever the DataSource's `isolationLevel` or the database's default: the fenced
   * completion must see the renewals other connections committed since the transaction began
   * (under REPEATABLE READ, SERIALIZABLE or SNAPSHOT it fails with a serialization error instead).
   */
  transaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T>;

  /**
   * Inserts rows in the caller's transaction, in one statement; returns ids in input order. With
   * `ifAbsent`, a row whose message id the outbox holds is not stored and reports the stored row's
   * id with `duplicate: true` (no unique violation: the transaction goes on).
   */
  outboxInsert(p: { manager: EntityManager; rows: OutboxInsertRow[]; ifAbsent?: boolean }): Promise<OutboxInserted[]>;
  /**
   * Whether `error` (from `outboxInsert`) is the unique violation of the outbox's `message_id`:
   * the id is taken by a message already stored. `messageId` when the database names it.
   */
  outboxMessageIdTaken(error: unknown): { messageId?: string } | undefined;
  /**
   * Takes up to `count` tokens from the rate limit bucket of `destination` (refilled at
   * `perSecond` up to `burst`, by the database clock, shared by every replica; migration 008):
   * how many it granted, and the tokens left after.
   */
  rateLimitTake(p: { destination: string; perSecond: number; burst: number; count: number }): Promise<{ granted: number; tokens: number }>;
  /**
   * Claims up to `limit` available rows, at most one per key and none of a key that already has
   * a row in flight or an earlier row pending, counting the claim as an attempt.
   */
  outboxClaimBatch(p: {
    limit: number;
    leaseMs: number;
    /**
     * Destinations whose rows are not claimed (paused, issue 40). A paused row stays the unfinished
     * head of its key, so no later row of the key is claimed either. Empty or absent: the claim of
     * every destination, exactly as without pauses.
     */
    paused?: readonly string[];
  }): Promise<OutboxClaim[]>;
  /** Returns expired `processing` rows to `pending`, or to `dead` when they used up `maxAttempts`. */
  outboxReclaim(p: { maxAttempts: number; attemptHistory?: number }): Promise<ReclaimResult>;

  /**
   * Stores the row unless `(source, idempotency_key)` exists, without ever raising a unique
   * violation (also under concurrent receives); joins `manager`'s transaction when given.
   */
  inboxInsertIfAbsent(p: { row: InboxInsertRow; manager?: EntityManager }): Promise<{ id: string; duplicate: boolean }>;
  /** The relay's claim: like `outboxClaimBatch`, per (source, aggregate), for the given sources only. */
  inboxRelayClaimBatch(p: { sources: string[]; limit: number; leaseMs: number }): Promise<InboxClaimedRow[]>;
  /** The relay's reclaim step, limited to its sources. */
  inboxReclaim(p: { sources: string[]; maxAttempts: number; attemptHistory?: number }): Promise<ReclaimResult>;

  /**
   * A pull claim for one source: expired `processing` rows and available `pending` rows in one
   * statement, at most one per aggregate, serialized per source.
   */
  inboxPullClaimBatch(p: { source: string; limit: number; leaseMs: number }): Promise<InboxClaimedRow[]>;

  /**
   * Up to `perHead` pending rows of each head's aggregate right after it, in id order, read in
   * `manager`'s transaction when given; none for a head that is no longer the first unfinished row
   * of its aggregate (an earlier row committed after its claim). Nothing is locked: while a head
   * is in flight no claim takes a row of its aggregate.
   */
  inboxFollowers(p: {
    heads: { id: string; source: string; aggregateId: string }[];
    perHead: number;
    manager?: EntityManager;
  }): Promise<FollowerRow[]>;
  /**
   * Marks followers processed in `manager`'s transaction, each only while pending and only if its
   * head (same aggregate, lower id) is `processed` under `headToken`: their heads' fenced
   * completion in that transaction fences them. Returns the ids it changed.
   */
  inboxCompleteFollowers(p: {
    followers: { id: string; headId: string; headToken: string }[];
    manager: EntityManager;
  }): Promise<Set<string>>;

  /**
   * The outbox's followers (issue 36): up to `perHead` pending rows of each head's key right after
   * it, in id order; none for a head that is no longer the first unfinished row of its key. Nothing
   * is locked: while a head is in flight no claim takes a row of its key.
   */
  outboxFollowers(p: { heads: { id: string; key: string }[]; perHead: number }): Promise<FollowerRow<OutboundMessage>[]>;
  /**
   * Completes claimed outbox heads (fenced: `sent`, or deleted with `deleteRows`) and, in the same
   * statement, each follower still pending of its head's key after it, only behind a head whose
   * fence held. Returns the heads whose fence held and the followers it finished.
   */
  outboxCompleteWithFollowers(p: {
    heads: readonly { id: string; token: string }[];
    followers: readonly { id: string; headId: string }[];
    deleteRows?: boolean;
  }): Promise<{ heads: Set<string>; followers: Set<string> }>;

  /** Extends the lease to now + `leaseMs`; returns the new expiry, or null when the claim is lost. */
  leaseRenew(p: FenceParams & { leaseMs: number; manager?: EntityManager }): Promise<Date | null>;
  /**
   * Renews many claims of one table, each to now + its own `leaseMs` (on `manager`'s connection
   * when given, as `leaseRenew`); returns the claims it renewed with their new expiry. A claim
   * missing from the result is lost.
   */
  leaseRenewBatch(p: {
    table: QueueTable;
    claims: readonly { id: string; token: string; leaseMs: number }[];
    manager?: EntityManager;
  }): Promise<RenewedClaim[]>;
  /**
   * Marks the row finished, in `manager`'s transaction when given; with `deleteRow`
   * (`outbox.sentRows: 'delete'`) deletes it and its attempt history instead, under the same fence.
   */
  leaseComplete(p: FenceParams & { manager?: EntityManager; deleteRow?: boolean }): Promise<boolean>;
  /**
   * Completes many claims of one table with one fenced statement; returns which of their ids it
   * completed (`has`). With `manager`, in that transaction (or `TransactionLostError`), as
   * `leaseComplete`; `deleteRows` as its `deleteRow`.
   */
  leaseCompleteBatch(p: {
    table: QueueTable;
    claims: readonly { id: string; token: string }[];
    manager?: EntityManager;
    deleteRows?: boolean;
  }): Promise<CompletedIds>;
  /** Gives back a claim whose work never started (shutdown): `pending` again, the attempt not counted. */
  leaseRelease(p: FenceParams): Promise<boolean>;
  /**
   * Gives back a claim whose work was put off (a rate limit had no token for it): `pending`,
   * available again after `delayMs`, the attempt not counted.
   */
  leaseDefer(p: FenceParams & { delayMs: number }): Promise<boolean>;
  /**
   * Returns the row to `pending`, available again after `delayMs`. With `attempt`, the failed
   * attempt goes into the row's attempt history in the same statement (batch), which keeps the
   * last `attempt.keep` (at least 1); without it the statement is the plain fenced update.
   */
  leaseRetry(p: FenceParams & { delayMs: number; error: string | null; attempt?: FailedAttempt }): Promise<boolean>;
  /** Marks the row `dead` with `reason` and its group's `fingerprint`; with `attempt`, recorded as `leaseRetry` records it. */
  leaseDeadLetter(p: FenceParams & { reason: string; fingerprint?: string; attempt?: FailedAttempt }): Promise<boolean>;

  /**
   * Subscribes to commits of new work, where the database can push them (PostgreSQL
   * LISTEN/NOTIFY). Optional: without it, workers poll. `onState` reports whether the
   * subscription is up; it reconnects by itself.
   */
  workListen?(p: { onWork: (notice: WorkNotice) => void; onState: (listening: boolean, error?: unknown) => void }): Promise<WorkListener>;
  /**
   * Whether a notification sent through this DataSource's connections arrives within `timeoutMs`
   * (the CLI doctor's LISTEN check). Only where `workListen` exists.
   */
  notificationsArrive?(timeoutMs: number): Promise<boolean>;

  // Admin and retention (QueueBoxAdmin, RetentionService). Every write touches `dead` rows only,
  // except skip-head, which takes a pending head or one whose lease expired, never a live claim.

  /** Pending, processing and dead rows per destination and source, through the partial indexes. */
  adminBacklog(): Promise<BacklogRow[]>;
  /** One page of dead rows with an id above `afterId`, in id order (`descending`: below `afterId`, newest first). */
  deadLetterList(p: {
    selection: DeadSelection;
    afterId: string | null;
    limit: number;
    includePayload: boolean;
    descending?: boolean;
  }): Promise<DeadLetterRow[]>;
  deadLetterCount(p: { selection: DeadSelection }): Promise<number>;
  /** Dead rows per destination (source) and fingerprint, the biggest groups first, at most `limit`. */
  deadLetterGroups(p: { component: QueueTable; limit: number }): Promise<DeadLetterGroupRow[]>;
  /** Dead rows per destination (source) and error class (the fingerprint's class; `unknown` without one). */
  deadLetterClasses(p: { component: QueueTable }): Promise<{ name: string; errorClass: string; count: number }[]>;
  /** A row's attempt history (the attempts migration), newest first. */
  attemptList(p: { component: QueueTable; id: string }): Promise<AttemptRow[]>;
  /** Replays one batch (ids above `afterId`, at most `limit`): `pending`, attempts 0, due now, replay recorded in headers. Returns the ids changed. */
  deadLetterReplay(p: { selection: DeadSelection; afterId: string | null; limit: number }): Promise<string[]>;
  /** Deletes one batch of dead rows; returns the ids deleted. */
  deadLetterDiscard(p: { selection: DeadSelection; afterId: string | null; limit: number }): Promise<string[]>;
  /** Finished and dead rows per destination / source and minute, over the last `minutes` minutes (the current one included). */
  adminThroughput(p: { minutes: number }): Promise<Omit<Throughput, 'sentRowsKept'>>;
  /**
   * The message browser: one page of rows of any state matching `search`, newest first, through an
   * index (a message id, an unfinished or dead state) or a scan of at most `search.scanLimit` rows.
   */
  messageSearch(search: MessageSearch): Promise<MessageSearchResult>;
  /**
   * Finished and dead rows per destination / source (`byName` false: per component, named '') in
   * each of `buckets` buckets of `bucketMs` from `since` (a bucket boundary); one count per bucket.
   */
  adminHistory(p: { since: Date; bucketMs: number; buckets: number; byName: boolean }): Promise<ThroughputRow[]>;
  /** Up to `limit` rows in flight (`processing`) of one table, oldest claim first. */
  adminClaimList(p: { component: QueueTable; limit: number }): Promise<ClaimRow[]>;
  /** Keys / aggregates whose head row failed at least once and is not finished. */
  blockedKeyList(p: { component: QueueTable; limit: number }): Promise<BlockedKeyRow[]>;
  /** Dead-letters the head row of a key unless a live claim holds it; returns its id, or null when nothing changed. */
  blockedKeySkipHead(p: SkipHeadTarget & { reason: string; fingerprint?: string }): Promise<string | null>;
  /**
   * Runs `work` while holding the retention lock, or returns `null` at once when another session
   * holds it. The lock holds no row locks; `work` deletes in batches, each its own transaction.
   */
  retentionWithLock<T>(work: () => Promise<T>): Promise<T | null>;
  /** Deletes up to `limit` rows of one kind whose age passed `olderThanMs` (database clock); returns how many. */
  retentionDeleteBatch(p: { kind: RetentionKind; olderThanMs: number; limit: number }): Promise<number>;
  /**
   * The partitioned layout's partitions (issue 37, docs/partitioning.md), read from the catalog
   * once: `undefined` where the tables are plain, or the database has no partitioned layout.
   */
  partitionKeeping?(): Promise<PartitionKeeping | undefined>;

  // Instances (migration 006): each QueueBox process registers, heartbeats, and ends dead ones' leases.

  /** Registers the instance, never over a row of its id that exists already (it says whose it is). */
  instanceRegister(p: InstanceIdentity): Promise<InstanceRegistration>;
  /**
   * Heartbeats, if the row's heartbeat count is within `beats` (from the last count this process
   * saw to that plus the heartbeats since whose answer it never got), and counts one more.
   */
  instanceHeartbeat(p: { id: string; beats: { from: number; to: number }; manager?: EntityManager }): Promise<InstanceBeat>;
  /**
   * Declares dead every instance whose last heartbeat is older than its own `deadAfterMs` (by the
   * database clock): deletes it and ends the leases of the rows it holds, in one statement. Ends
   * too the leases of rows claimed more than `unregisteredAfterMs` ago by an instance that is not
   * registered (a live one registers again within a heartbeat of being declared dead). Never
   * `self`, the caller's own instance, nor the rows it claimed.
   */
  instanceEndDead(p: { self: string; unregisteredAfterMs: number }): Promise<DeadInstanceRow[]>;
  /**
   * A clean shutdown: deletes the instance's row and releases what it still holds (live leases):
   * `pending` again, the attempt not counted. Returns how many rows of each table it released.
   */
  instanceDeregister(p: { id: string }): Promise<{ outbox: number; inbox: number }>;
  /** Every registered instance, with its state by the database clock. */
  instanceList(): Promise<InstanceRow[]>;

  // Pauses (migration 010; issue 40): the destinations and sources claims skip.

  /** Every pause, by component and name. */
  pauseList(): Promise<PauseRow[]>;
  /** Pauses a destination or source; false when it was paused already (the first pause is kept). */
  pauseInsert(p: { component: QueueTable; name: string; reason: string | null; pausedBy: string | null }): Promise<boolean>;
  /** Resumes a destination or source; false when it was not paused. */
  pauseDelete(p: { component: QueueTable; name: string }): Promise<boolean>;

  /** The database's current time (for tests and health checks; never for leases). */
  clockNow(): Promise<Date>;

  /**
   * What `queuebox doctor` and the database warnings read (`DoctorFacts`): the three tables' row
   * statistics and storage options, their indexes, what holds back the cleanup of dead rows, and
   * the sessions waiting for a lock on them now; `applied` names the migrations whose indexes are
   * expected. Catalog and statistics views only, bounded lists.
   */
  doctorFacts(p: { applied: readonly SchemaMigration[] }): Promise<DoctorFacts>;
}

/** A failed attempt for the attempt history (the attempts migration): its error text and class, and how many attempts a row keeps. */
export interface FailedAttempt {
  error: string;
  errorClass: string;
  keep: number;
}

/** Dead rows an admin call selects, normalized: every absent criterion is `null`. */
export interface DeadSelection {
  component: QueueTable;
  name: string | null;
  errorContains: string | null;
  deadAfter: Date | null;
  deadBefore: Date | null;
  ids: string[] | null;
  /** Outbox `key` or inbox `aggregate_id`, exactly. */
  key: string | null;
  /** The dead letters' group fingerprint (the attempts migration), exactly. */
  fingerprint?: string | null;
}

/** What one upkeep run did to one table's partitions (names of partitions). */
export interface PartitionUpkeepResult {
  /** Partitions created ahead (none when another replica held the upkeep lock). */
  created: string[];
  settled: string[];
  /** Settled partitions found to hold an unfinished row again (logged as a warning). */
  unsettled: string[];
}

/** The ages of one retention run of one table's partitions, database clock. */
export interface PartitionAges {
  /** Finished rows (`sent`, `processed`) older than this may go. */
  finishedAfterMs: number;
  /** Dead rows older than this may go; `false` keeps them, and the partitions that hold one. */
  deadAfterMs: number | false;
}

/** What one retention run did to one table's partitions (names of partitions). */
export interface PartitionDropResult {
  dropped: string[];
  /** Detached, found to hold an unfinished or recent row, and attached again. */
  reattached: string[];
}

/** The partitions of the outbox and inbox in the partitioned layout. */
export interface PartitionKeeping {
  /** Creates partitions ahead and settles what can be, on both tables; a replica that finds another running it skips. */
  upkeep(): Promise<Record<QueueTable, PartitionUpkeepResult>>;
  /**
   * Drops settled partitions whose finished rows are all past their age (dead rows: `deadAfterMs`,
   * `false` keeps them and their partitions), oldest first. The caller holds the retention lock.
   */
  dropExpired(ages: Record<QueueTable, PartitionAges>): Promise<Record<QueueTable, PartitionDropResult>>;
}

/** How a dialect runs QueueBox's own statements. */
export interface DialectSettings {
  /**
   * Client-side bound (ms) on each of QueueBox's own statements outside a caller's transaction
   * (claims, reclaims, fenced writes, renewals, LISTEN); none when absent. PostgreSQL only.
   */
  queryTimeoutMs?: number;
  /**
   * The registered QueueBox instance (process) that claims through this dialect: claims write its
   * `id` to `claimed_by`, so a live replica can end the leases of a dead one. Read at each claim:
   * an instance that finds another live process with its id takes a new one. None for scripts and
   * the CLI.
   */
  instance?: { readonly id: string };
}
