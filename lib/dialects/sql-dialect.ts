import type { EntityManager } from 'typeorm';
import type { SqlResult } from '../common/sql-runner';
import type { FollowerRow, OutboxClaim, QueueTable } from '../types/claims';
import type { OutboundMessage } from '../types/messages';
import type {
  CompletedIds,
  DeadSelection,
  FailedAttempt,
  FenceParams,
  InboxClaimedRow,
  InboxInsertRow,
  OutboxInserted,
  OutboxInsertRow,
} from './dialect';
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
  InstanceState,
  PauseRow,
  ReclaimResult,
  SkipHeadTarget,
  Throughput,
  ThroughputRow,
} from './dialect-rows';
import type { MessageRow, MessageSearch, MessageSearchResult } from './message-rows';
import {
  type AttemptRecord,
  type BacklogRecord,
  type BlockedKeyRecord,
  byId,
  type ClaimRecord,
  countReclaimed,
  type DeadLetterGroupRecord,
  type DeadLetterRecord,
  FINISHED,
  type InboxClaimedRecord,
  type InboxFollowerRecord,
  type OutboxClaimedRecord,
  type OutboxFollowerRecord,
  type ReclaimedRecord,
  type RecordDecoding,
  type ThroughputRecord,
  toAttemptRow,
  toBacklogRows,
  toBlockedKeyRow,
  toClaimRow,
  toDeadLetterGroupRow,
  toDeadLetterRow,
  toInboxClaimedRow,
  toInboxFollowerRow,
  toOutboxClaim,
  toOutboxFollowerRow,
  toThroughput,
} from './records';

type Finished = (typeof FINISHED)[QueueTable];

const ALL_IDS: CompletedIds = { has: () => true };

/** Marks a statement `run` may keep prepared (see `SqlDialect.run`). */
export const REPEATED = 'repeated';

/** The statement builders `SqlDialect` runs; each dialect folder writes them in its own SQL. */
export interface SqlDialectStatements {
  outboxReclaimSql(table: string): string;
  inboxReclaimSql(table: string): string;
  /** The reclaims that also record each expired attempt in `history` (the attempts migration). */
  outboxReclaimRecordedSql(table: string, history: string): string;
  inboxReclaimRecordedSql(table: string, history: string): string;
  inboxFindSql(table: string): string;
  inboxFollowersSql(table: string): string;
  inboxCompleteFollowersSql(table: string): string;
  outboxFollowersSql(table: string): string;
  /** Outbox heads' fenced completion with their followers': a row (`kind`, `id`) for each head whose fence held, and for each follower finished. */
  outboxCompleteWithFollowersSql(table: string): string;
  outboxDeleteWithFollowersSql(table: string, history: string): string;
  leaseRenewSql(table: string): string;
  leaseCompleteSql(table: string, finished: Finished): string;
  /** Returns the ids it completed, or (`completeBatchReturns: 'lost'`) those of `$1` it did not. */
  leaseCompleteBatchSql(table: string, finished: Finished): string;
  /** The completions of `outbox.sentRows: 'delete'`: the row and its attempt history deleted; as leaseRetryRecordedSql and leaseCompleteBatchSql return. */
  leaseDeleteSql(table: string, history: string): string;
  leaseDeleteBatchSql(table: string, history: string): string;
  leaseReleaseSql(table: string): string;
  leaseRetrySql(table: string): string;
  /** `leaseRetrySql` that also records the attempt in `history`; returns one row when the fence held. */
  leaseRetryRecordedSql(table: string, history: string): string;
  leaseDeferSql(table: string): string;
  leaseDeadLetterSql(table: string): string;
  /** `leaseDeadLetterSql` that also records the attempt in `history`; returns one row when the fence held. */
  leaseDeadLetterRecordedSql(table: string, history: string): string;
  adminBacklogSql(outbox: string, inbox: string): string;
  deadLetterListSql(table: string, component: QueueTable, includePayload: boolean, descending?: boolean): string;
  deadLetterCountSql(table: string, component: QueueTable): string;
  deadLetterGroupsSql(table: string, component: QueueTable): string;
  deadLetterClassesSql(table: string, component: QueueTable): string;
  attemptListSql(history: string): string;
  deadLetterReplaySql(table: string, component: QueueTable): string;
  /** With `history`, the discarded rows' attempt history goes with them. */
  deadLetterDiscardSql(table: string, component: QueueTable, history?: string): string;
  blockedKeyListSql(table: string, component: QueueTable, tables: { instances: string; outbox: string; inbox: string }): string;
  blockedKeySkipHeadSql(table: string, component: QueueTable): string;
  adminThroughputSql(outbox: string, inbox: string): string;
  adminClaimListSql(table: string, component: QueueTable, tables: { instances: string; outbox: string; inbox: string }): string;
  clockNowSql(): string;
  messageSearchSql(
    table: string,
    component: QueueTable,
    search: MessageSearch,
  ): { sql: string; params: unknown[]; plan: MessageSearchResult['plan'] };
  messageScanEndSql(table: string, beforeId: string | null, scanLimit: number): { sql: string; params: unknown[] };
  adminHistorySql(outbox: string, inbox: string, byName?: boolean): string;
  instanceRegisterSql(instances: string): string;
  instanceHeartbeatSql(instances: string): string;
  instanceEndDeadSql(instances: string, outbox: string, inbox: string): string;
  instanceDeregisterSql(instances: string, outbox: string, inbox: string): string;
  instanceListSql(instances: string, outbox: string, inbox: string): string;
  pauseListSql(pauses: string): string;
  pauseInsertSql(pauses: string): string;
  pauseDeleteSql(pauses: string): string;
}

/**
 * How a dialect sends values: PostgreSQL as they are (node-postgres infers the types), SQL Server
 * as typed parameters that match their columns (lists as JSON text for OPENJSON).
 */
export interface SqlDialectParams {
  int(value: number): unknown;
  bigint(value: number): unknown;
  /** Long text: errors, reasons. */
  text(value: string | null): unknown;
  /** An id or none (paging after an id, a head row to skip). */
  idOrNull(value: string | null): unknown;
  /** A key column's value the library passes (a source, an idempotency key). */
  name(value: string | null): unknown;
  /** A value compared with a key column (name, key, source, aggregate) in an admin call; `field` names it in errors. */
  key(field: string, value: string | null): unknown;
  /** A list of sources. */
  names(values: string[]): unknown;
  /** The fence's id and token, the first two parameters of every fenced write. */
  fence(p: FenceParams): unknown[];
  /** A list of row ids. */
  ids(ids: string[]): unknown;
  /** An instance id (a UUID). */
  guid(value: string): unknown;
  /** The claims of a batch completion. */
  claims(claims: readonly { id: string; token: string }[]): unknown[];
  /** Outbox heads and the followers completed with them, each with its head's id. */
  headsWithFollowers(heads: readonly { id: string; token: string }[], followers: readonly { id: string; headId: string }[]): unknown[];
  /** The followers of a completion, each with its head's id and token. */
  followers(followers: { id: string; headId: string; headToken: string }[]): unknown[];
  /** A dead-row selection, the first six parameters of every dead-letter statement. */
  selection(s: DeadSelection): unknown[];
  /** An instant compared with a time column. */
  instant(value: Date): unknown;
}

/** One claim statement's request, by kind: the outbox poller's, the inbox relay's, a pull handler's. */
export type ClaimRequest =
  | { kind: 'outbox'; limit: number; leaseMs: number; paused?: readonly string[] }
  | { kind: 'relay'; sources: string[]; limit: number; leaseMs: number }
  | { kind: 'pull'; source: string; limit: number; leaseMs: number };

/**
 * The `Dialect` methods whose bodies are the same on every database but for their SQL and the way
 * values are sent: claims' decoding, reclaims, fenced writes, the inbox lookup, admin statements
 * and the clock. A dialect supplies its statements, its parameter encoding, its record decoding
 * (`J`: how JSON columns arrive) and how it runs a statement; what differs in kind (claim locks,
 * inserts, schema checks, retention) it writes itself.
 */
export abstract class SqlDialect<J> {
  protected abstract readonly table: Record<QueueTable, string>;
  /** Each table's attempt history (the attempts migration), quoted. */
  protected abstract readonly attemptsTable: Record<QueueTable, string>;
  /** The instances table, quoted. */
  protected abstract readonly instancesTable: string;
  /** The pauses table (migration 010), quoted. */
  protected abstract readonly pausesTable: string;

  /** The tables an instance's state is read from (the admin's owners). */
  private get instanceTables(): { instances: string; outbox: string; inbox: string } {
    return { instances: this.instancesTable, outbox: this.table.outbox, inbox: this.table.inbox };
  }
  protected abstract readonly statements: SqlDialectStatements;
  protected abstract readonly params: SqlDialectParams;
  protected abstract readonly decoding: RecordDecoding<J>;

  /**
   * Runs one of QueueBox's own statements; in `manager`'s transaction when given. `REPEATED`: a
   * statement the workers send with the same text at every batch or message (completions, the
   * followers' read and completion), which a dialect may keep prepared on each connection.
   */
  protected abstract run<T>(
    statement: string,
    params: unknown[],
    manager?: EntityManager,
    repeated?: typeof REPEATED,
  ): Promise<SqlResult<T>>;
  /** Runs an admin statement (an operator waits for it). */
  protected abstract runAdmin<T>(statement: string, params: unknown[]): Promise<SqlResult<T>>;

  /**
   * Runs a statement that tests instances with subqueries: the instance sweep (`sweep`, bounded as
   * `run`), or (`admin`, as `runAdmin`) the instances list and the two views that give each row's
   * owner and its state (claims, blocked keys). The planner multiplies their cost by its estimate
   * of the instances table (hundreds of rows until it is analyzed) or of the rows in flight (stale
   * after a backlog), while their work is a few index probes a row. PostgreSQL's dialect runs them
   * with JIT off (see there); elsewhere they run as the others.
   */
  protected runInstanceStatement<T>(statement: string, params: unknown[], kind: 'sweep' | 'admin'): Promise<SqlResult<T>> {
    return kind === 'sweep' ? this.run<T>(statement, params) : this.runAdmin<T>(statement, params);
  }
  /** Runs a claim under the dialect's claim lock; returns the claimed records. */
  protected abstract claimRecords<T>(request: ClaimRequest): Promise<T[]>;

  async outboxClaimBatch(p: { limit: number; leaseMs: number; paused?: readonly string[] }): Promise<OutboxClaim[]> {
    const records = await this.claimRecords<OutboxClaimedRecord<J>>({ kind: 'outbox', ...p });
    return records.map((r) => toOutboxClaim(r, this.decoding, p.leaseMs)).sort(byId);
  }

  async inboxRelayClaimBatch(p: { sources: string[]; limit: number; leaseMs: number }): Promise<InboxClaimedRow[]> {
    const records = await this.claimRecords<InboxClaimedRecord<J>>({ kind: 'relay', ...p });
    return records.map((r) => toInboxClaimedRow(r, this.decoding)).sort(byId);
  }

  async inboxPullClaimBatch(p: { source: string; limit: number; leaseMs: number }): Promise<InboxClaimedRow[]> {
    const records = await this.claimRecords<InboxClaimedRecord<J>>({ kind: 'pull', ...p });
    return records.map((r) => toInboxClaimedRow(r, this.decoding)).sort(byId);
  }

  async outboxReclaim(p: { maxAttempts: number; attemptHistory?: number }): Promise<ReclaimResult> {
    const params = [this.params.int(p.maxAttempts)];
    if (!p.attemptHistory || p.attemptHistory < 1) {
      return countReclaimed(await this.run<ReclaimedRecord>(this.statements.outboxReclaimSql(this.table.outbox), params));
    }
    const statement = this.statements.outboxReclaimRecordedSql(this.table.outbox, this.attemptsTable.outbox);
    return countReclaimed(await this.run<ReclaimedRecord>(statement, [...params, this.params.int(p.attemptHistory)]));
  }

  async inboxReclaim(p: { sources: string[]; maxAttempts: number; attemptHistory?: number }): Promise<ReclaimResult> {
    const params = [this.params.int(p.maxAttempts), this.params.names(p.sources)];
    if (!p.attemptHistory || p.attemptHistory < 1) {
      return countReclaimed(await this.run<ReclaimedRecord>(this.statements.inboxReclaimSql(this.table.inbox), params));
    }
    const statement = this.statements.inboxReclaimRecordedSql(this.table.inbox, this.attemptsTable.inbox);
    return countReclaimed(await this.run<ReclaimedRecord>(statement, [...params, this.params.int(p.attemptHistory)]));
  }

  /**
   * The outbox insert. With `ifAbsent`, the rows whose message id is taken are skipped by the
   * insert and looked up after it (a new statement: it sees the row that won a concurrent insert);
   * a row that vanished in between (retention deleted it) is simply inserted again, as for
   * `inboxInsertIfAbsent`.
   */
  async outboxInsert(p: { manager: EntityManager; rows: OutboxInsertRow[]; ifAbsent?: boolean }): Promise<OutboxInserted[]> {
    const ids = new Map<string, { id: string; duplicate: boolean }>();
    let missing = p.rows;
    for (let tries = 0; tries < 3 && missing.length > 0; tries++) {
      for (const [messageId, id] of await this.outboxInsertRecords(missing, p.manager, p.ifAbsent === true)) {
        ids.set(messageId, { id, duplicate: false });
      }
      missing = missing.filter((row) => !ids.has(row.messageId));
      if (missing.length === 0 || !p.ifAbsent) break;
      const found = await this.outboxFindRecords(
        missing.map((row) => row.messageId),
        p.manager,
      );
      for (const [messageId, id] of found) ids.set(messageId, { id, duplicate: true });
      missing = missing.filter((row) => !ids.has(row.messageId));
    }
    if (missing.length > 0) throw new Error(`outbox row ${missing[0].messageId} neither inserted nor found after 3 tries`);
    return p.rows.map((row) => ({ messageId: row.messageId, ...(ids.get(row.messageId) as { id: string; duplicate: boolean }) }));
  }

  /**
   * The insert of `outboxInsert` (`ifAbsent`: skipping taken message ids): the stored rows' ids by
   * message id, in lower case as `toOutboxRows` gives them.
   */
  protected abstract outboxInsertRecords(rows: OutboxInsertRow[], manager: EntityManager, ifAbsent: boolean): Promise<Map<string, string>>;

  /** The ids of the rows of `messageIds` (lower case) the outbox holds, by message id. */
  protected abstract outboxFindRecords(messageIds: string[], manager: EntityManager): Promise<Map<string, string>>;

  /**
   * Inserts unless the key exists, looks the stored row up otherwise (a new statement: it sees the
   * row that won). If that row vanished in between (retention deleted it), the insert is simply
   * tried again.
   */
  async inboxInsertIfAbsent(p: { row: InboxInsertRow; manager?: EntityManager }): Promise<{ id: string; duplicate: boolean }> {
    const { row } = p;
    this.checkInboxRow(row);
    const key = [this.params.name(row.source), this.params.name(row.idempotencyKey)];
    for (let tries = 0; tries < 3; tries++) {
      const inserted = await this.inboxInsertRecords(row, p.manager);
      if (inserted.length === 1) return { id: String(inserted[0].id), duplicate: false };
      const found = await this.inboxFindRecords(key, p.manager);
      if (found.length === 1) return { id: String(found[0].id), duplicate: true };
    }
    throw new Error(`inbox row (${row.source}, ${row.idempotencyKey}) neither inserted nor found after 3 tries`);
  }

  /** Refuses an inbox row the database would compare wrongly (nothing to refuse by default). */
  protected checkInboxRow(_row: InboxInsertRow): void {}

  /** The insert of `inboxInsertIfAbsent`: the new row's id, or no row when the key exists. */
  protected abstract inboxInsertRecords(row: InboxInsertRow, manager: EntityManager | undefined): Promise<{ id: string }[]>;

  /** The lookup of `inboxInsertIfAbsent` after a duplicate: the row that holds the key (`key`: source and idempotency key as parameters). */
  protected async inboxFindRecords(key: unknown[], manager: EntityManager | undefined): Promise<{ id: string }[]> {
    return (await this.run<{ id: string }>(this.statements.inboxFindSql(this.table.inbox), key, manager)).rows;
  }

  async inboxFollowers(p: {
    heads: { id: string; source: string; aggregateId: string }[];
    perHead: number;
    manager?: EntityManager;
  }): Promise<FollowerRow[]> {
    if (p.heads.length === 0 || p.perHead < 1) return [];
    const { rows } = await this.run<InboxFollowerRecord<J>>(
      this.statements.inboxFollowersSql(this.table.inbox),
      [this.params.text(JSON.stringify(p.heads)), this.params.int(p.perHead)],
      p.manager,
      REPEATED,
    );
    return rows.map((r) => toInboxFollowerRow(r, this.decoding)).sort((a, b) => byId(a.message, b.message));
  }

  async inboxCompleteFollowers(p: {
    followers: { id: string; headId: string; headToken: string }[];
    manager: EntityManager;
  }): Promise<Set<string>> {
    if (p.followers.length === 0) return new Set();
    const { rows } = await this.run<{ id: string }>(
      this.statements.inboxCompleteFollowersSql(this.table.inbox),
      this.params.followers(p.followers),
      p.manager,
      REPEATED,
    );
    return new Set(rows.map((r) => String(r.id)));
  }

  async outboxFollowers(p: { heads: { id: string; key: string }[]; perHead: number }): Promise<FollowerRow<OutboundMessage>[]> {
    if (p.heads.length === 0 || p.perHead < 1) return [];
    const { rows } = await this.run<OutboxFollowerRecord<J>>(
      this.statements.outboxFollowersSql(this.table.outbox),
      [this.params.text(JSON.stringify(p.heads)), this.params.int(p.perHead)],
      undefined,
      REPEATED,
    );
    return rows.map((r) => toOutboxFollowerRow(r, this.decoding)).sort((a, b) => byId(a.message, b.message));
  }

  async outboxCompleteWithFollowers(p: {
    heads: readonly { id: string; token: string }[];
    followers: readonly { id: string; headId: string }[];
    deleteRows?: boolean;
  }): Promise<{ heads: Set<string>; followers: Set<string> }> {
    const statement = p.deleteRows
      ? this.statements.outboxDeleteWithFollowersSql(this.table.outbox, this.attemptsTable.outbox)
      : this.statements.outboxCompleteWithFollowersSql(this.table.outbox);
    const { rows } = await this.run<{ kind: 'head' | 'follower'; id: string }>(
      statement,
      this.params.headsWithFollowers(p.heads, p.followers),
      undefined,
      REPEATED,
    );
    const done = { heads: new Set<string>(), followers: new Set<string>() };
    for (const row of rows) (row.kind === 'head' ? done.heads : done.followers).add(String(row.id));
    return done;
  }

  async leaseRenew(p: FenceParams & { leaseMs: number; manager?: EntityManager }): Promise<Date | null> {
    const { rows } = await this.run<{ lease_expires_at: Date }>(
      this.statements.leaseRenewSql(this.table[p.table]),
      [...this.params.fence(p), this.params.bigint(p.leaseMs)],
      p.manager,
    );
    return rows.length === 1 ? rows[0].lease_expires_at : null;
  }

  async leaseComplete(p: FenceParams & { manager?: EntityManager; deleteRow?: boolean }): Promise<boolean> {
    if (p.deleteRow) {
      const statement = this.statements.leaseDeleteSql(this.table[p.table], this.attemptsTable[p.table]);
      const { rows } = await this.run<{ n: number | string }>(statement, this.params.fence(p), p.manager, REPEATED);
      return rows.length === 1 && Number(rows[0].n) === 1;
    }
    const statement = this.statements.leaseCompleteSql(this.table[p.table], FINISHED[p.table]);
    const { affected } = await this.run(statement, this.params.fence(p), p.manager, REPEATED);
    return affected === 1;
  }

  async leaseCompleteBatch(p: {
    table: QueueTable;
    claims: readonly { id: string; token: string }[];
    manager?: EntityManager;
    deleteRows?: boolean;
  }): Promise<CompletedIds> {
    const statement = p.deleteRows
      ? this.statements.leaseDeleteBatchSql(this.table[p.table], this.attemptsTable[p.table])
      : this.statements.leaseCompleteBatchSql(this.table[p.table], FINISHED[p.table]);
    const { rows } = await this.run<{ id: string }>(statement, this.params.claims(p.claims), p.manager, REPEATED);
    if (this.completeBatchReturns === 'completed') return new Set(rows.map((r) => String(r.id)));
    // The statement returned the ids it did not complete: usually none, so no row per message.
    if (rows.length === 0) return ALL_IDS;
    const lost = new Set(rows.map((r) => String(r.id)));
    return { has: (id) => !lost.has(id) };
  }

  /** What the batch completion statement returns: the ids it completed, or those it did not (lost claims). */
  protected readonly completeBatchReturns: 'completed' | 'lost' = 'completed';

  async leaseRelease(p: FenceParams): Promise<boolean> {
    const { affected } = await this.run(this.statements.leaseReleaseSql(this.table[p.table]), this.params.fence(p));
    return affected === 1;
  }

  async leaseDefer(p: FenceParams & { delayMs: number }): Promise<boolean> {
    const { affected } = await this.run(this.statements.leaseDeferSql(this.table[p.table]), [
      ...this.params.fence(p),
      this.params.bigint(p.delayMs),
    ]);
    return affected === 1;
  }

  async leaseRetry(p: FenceParams & { delayMs: number; error: string | null; attempt?: FailedAttempt }): Promise<boolean> {
    const params = [...this.params.fence(p), this.params.bigint(p.delayMs), this.params.text(p.error)];
    if (p.attempt === undefined || p.attempt.keep < 1) {
      const { affected } = await this.run(this.statements.leaseRetrySql(this.table[p.table]), params);
      return affected === 1;
    }
    const { errorClass, keep } = p.attempt;
    const { rows } = await this.run<{ n: number | string }>(
      this.statements.leaseRetryRecordedSql(this.table[p.table], this.attemptsTable[p.table]),
      [...params, this.params.text(errorClass), this.params.int(keep)],
    );
    return rows.length === 1 && Number(rows[0].n) === 1;
  }

  async leaseDeadLetter(p: FenceParams & { reason: string; fingerprint?: string; attempt?: FailedAttempt }): Promise<boolean> {
    const params = [...this.params.fence(p), this.params.text(p.reason), this.params.text(p.fingerprint ?? null)];
    if (p.attempt === undefined || p.attempt.keep < 1) {
      const { affected } = await this.run(this.statements.leaseDeadLetterSql(this.table[p.table]), params);
      return affected === 1;
    }
    const { error, errorClass, keep } = p.attempt;
    const { rows } = await this.run<{ n: number | string }>(
      this.statements.leaseDeadLetterRecordedSql(this.table[p.table], this.attemptsTable[p.table]),
      [...params, this.params.text(error), this.params.text(errorClass), this.params.int(keep)],
    );
    return rows.length === 1 && Number(rows[0].n) === 1;
  }

  async adminBacklog(): Promise<BacklogRow[]> {
    return toBacklogRows(
      (await this.runAdmin<BacklogRecord>(this.statements.adminBacklogSql(this.table.outbox, this.table.inbox), [])).rows,
    );
  }

  async deadLetterList(p: {
    selection: DeadSelection;
    afterId: string | null;
    limit: number;
    includePayload: boolean;
    descending?: boolean;
  }): Promise<DeadLetterRow[]> {
    const { component } = p.selection;
    const { rows } = await this.runAdmin<DeadLetterRecord<J>>(
      this.statements.deadLetterListSql(this.table[component], component, p.includePayload, p.descending === true),
      [...this.params.selection(p.selection), this.params.idOrNull(p.afterId), this.params.int(p.limit)],
    );
    return rows.map((r) => toDeadLetterRow(component, r, this.decoding));
  }

  async deadLetterCount(p: { selection: DeadSelection }): Promise<number> {
    const { component } = p.selection;
    const { rows } = await this.runAdmin<{ n: string }>(
      this.statements.deadLetterCountSql(this.table[component], component),
      this.params.selection(p.selection),
    );
    return Number(rows[0].n);
  }

  async deadLetterGroups(p: { component: QueueTable; limit: number }): Promise<DeadLetterGroupRow[]> {
    const { rows } = await this.runAdmin<DeadLetterGroupRecord>(this.statements.deadLetterGroupsSql(this.table[p.component], p.component), [
      this.params.int(p.limit),
    ]);
    return rows.map((r) => toDeadLetterGroupRow(p.component, r));
  }

  async deadLetterClasses(p: { component: QueueTable }): Promise<{ name: string; errorClass: string; count: number }[]> {
    const { rows } = await this.runAdmin<{ name: string; error_class: string; n: string | number }>(
      this.statements.deadLetterClassesSql(this.table[p.component], p.component),
      [],
    );
    return rows.map((r) => ({ name: r.name, errorClass: r.error_class, count: Number(r.n) }));
  }

  async attemptList(p: { component: QueueTable; id: string }): Promise<AttemptRow[]> {
    const { rows } = await this.runAdmin<AttemptRecord>(this.statements.attemptListSql(this.attemptsTable[p.component]), [
      this.params.idOrNull(p.id),
    ]);
    return rows.map((r) => toAttemptRow(r, this.decoding.uuid));
  }

  deadLetterReplay(p: { selection: DeadSelection; afterId: string | null; limit: number }): Promise<string[]> {
    return this.deadLetterBatch(this.statements.deadLetterReplaySql, p);
  }

  deadLetterDiscard(p: { selection: DeadSelection; afterId: string | null; limit: number }): Promise<string[]> {
    return this.deadLetterBatch(
      (table, component) => this.statements.deadLetterDiscardSql(table, component, this.attemptsTable[component]),
      p,
    );
  }

  /** Runs a replay or discard statement on one batch of the selection; returns the ids it changed. */
  private async deadLetterBatch(
    statement: (table: string, component: QueueTable) => string,
    p: { selection: DeadSelection; afterId: string | null; limit: number },
  ): Promise<string[]> {
    const { component } = p.selection;
    const { rows } = await this.runAdmin<{ id: string }>(statement(this.table[component], component), [
      ...this.params.selection(p.selection),
      this.params.idOrNull(p.afterId),
      this.params.int(p.limit),
    ]);
    return rows.map((r) => String(r.id));
  }

  async blockedKeyList(p: { component: QueueTable; limit: number }): Promise<BlockedKeyRow[]> {
    const { rows } = await this.runInstanceStatement<BlockedKeyRecord>(
      this.statements.blockedKeyListSql(this.table[p.component], p.component, this.instanceTables),
      [this.params.int(p.limit)],
      'admin',
    );
    return rows.map((r) => toBlockedKeyRow(p.component, r, this.decoding.uuid));
  }

  async blockedKeySkipHead(p: SkipHeadTarget & { reason: string; fingerprint?: string }): Promise<string | null> {
    const head = this.params.idOrNull(p.headId ?? null);
    const dead = [this.params.text(p.reason), this.params.text(p.fingerprint ?? null)];
    const params =
      p.component === 'outbox'
        ? [this.params.key('key', p.key), head, ...dead]
        : [this.params.key('source', p.source), this.params.key('aggregateId', p.aggregateId), head, ...dead];
    const { rows } = await this.runAdmin<{ id: string }>(
      this.statements.blockedKeySkipHeadSql(this.table[p.component], p.component),
      params,
    );
    return rows.length === 1 ? String(rows[0].id) : null;
  }

  /** Minutes are cut on the database clock: `since` is the start of the minute `minutes - 1` before the current one. */
  async adminThroughput(p: { minutes: number }): Promise<Omit<Throughput, 'sentRowsKept'>> {
    const now = await this.clockNow();
    const since = new Date(Math.floor(now.getTime() / 60_000) * 60_000 - (p.minutes - 1) * 60_000);
    const { rows } = await this.runAdmin<ThroughputRecord>(this.statements.adminThroughputSql(this.table.outbox, this.table.inbox), [
      this.params.instant(since),
    ]);
    return toThroughput(since, p.minutes, rows);
  }

  async messageSearch(search: MessageSearch): Promise<MessageSearchResult> {
    const table = this.table[search.component];
    const statement = this.statements.messageSearchSql(table, search.component, search);
    const { rows } = await this.runAdmin<MessageRecord<J>>(statement.sql, statement.params);
    const found = rows.map((r) => toMessageRow(search.component, r, this.decoding));
    if (statement.plan !== 'bounded-scan' || found.length >= search.limit) return { rows: found, plan: statement.plan, scannedTo: null };
    // Fewer rows than asked: the scan examined its whole window. Where it ended is the next cursor.
    const end = this.statements.messageScanEndSql(table, search.beforeId, search.scanLimit);
    const [window] = (await this.runAdmin<{ low: string | number | null; n: string | number }>(end.sql, end.params)).rows;
    const reachedStart = Number(window.n) < search.scanLimit || window.low === null;
    return { rows: found, plan: statement.plan, scannedTo: reachedStart ? null : String(window.low) };
  }

  async adminHistory(p: { since: Date; bucketMs: number; buckets: number; byName: boolean }): Promise<ThroughputRow[]> {
    const until = new Date(p.since.getTime() + p.buckets * p.bucketMs);
    const { rows } = await this.runAdmin<ThroughputRecord>(this.statements.adminHistorySql(this.table.outbox, this.table.inbox, p.byName), [
      this.params.instant(p.since),
      this.params.int(p.bucketMs / 1000),
      this.params.instant(until),
    ]);
    return toThroughput(p.since, p.buckets, rows).rows;
  }

  async adminClaimList(p: { component: QueueTable; limit: number }): Promise<ClaimRow[]> {
    const { rows } = await this.runInstanceStatement<ClaimRecord>(
      this.statements.adminClaimListSql(this.table[p.component], p.component, this.instanceTables),
      [this.params.int(p.limit)],
      'admin',
    );
    return rows.map((r) => toClaimRow(p.component, r, this.decoding.uuid));
  }

  async instanceRegister(p: InstanceIdentity): Promise<InstanceRegistration> {
    const { rows } = await this.run<RegistrationRecord>(this.statements.instanceRegisterSql(this.instancesTable), [
      this.params.guid(p.id),
      this.params.name(p.host.slice(0, 255)),
      this.params.int(p.pid),
      this.params.name(p.dataSource.slice(0, 255)),
      this.params.name(p.version.slice(0, 64)),
      this.params.int(p.deadAfterMs),
    ]);
    const [r] = rows;
    if (Number(r.registered) === 1) return { registered: true };
    return {
      registered: false,
      holder: { host: r.host ?? '', pid: Number(r.pid), startedAt: r.started_at as Date, heartbeatAgeMs: Number(r.heartbeat_age_ms) },
    };
  }

  async instanceHeartbeat(p: { id: string; beats: { from: number; to: number }; manager?: EntityManager }): Promise<InstanceBeat> {
    const { rows } = await this.run<{ beats: string | null; registered: boolean | number }>(
      this.statements.instanceHeartbeatSql(this.instancesTable),
      [this.params.guid(p.id), this.params.bigint(p.beats.from), this.params.bigint(p.beats.to)],
      p.manager,
    );
    const [r] = rows;
    if (r.beats !== null) return { kind: 'beat', beats: Number(r.beats) };
    return r.registered === true || r.registered === 1 ? { kind: 'taken' } : { kind: 'gone' };
  }

  async instanceEndDead(p: { self: string; unregisteredAfterMs: number }): Promise<DeadInstanceRow[]> {
    const { rows } = await this.runInstanceStatement<DeadInstanceRecord>(
      this.statements.instanceEndDeadSql(this.instancesTable, this.table.outbox, this.table.inbox),
      [this.params.int(p.unregisteredAfterMs), this.params.guid(p.self)],
      'sweep',
    );
    return rows.map((r) => ({
      id: this.decoding.uuid(r.id),
      host: r.host,
      pid: r.pid === null ? null : Number(r.pid),
      dataSource: r.data_source,
      heartbeatAt: r.heartbeat_at,
      released: { outbox: Number(r.outbox), inbox: Number(r.inbox) },
    }));
  }

  async instanceDeregister(p: { id: string }): Promise<{ outbox: number; inbox: number }> {
    const { rows } = await this.run<{ outbox: number | string; inbox: number | string }>(
      this.statements.instanceDeregisterSql(this.instancesTable, this.table.outbox, this.table.inbox),
      [this.params.guid(p.id)],
    );
    return { outbox: Number(rows[0]?.outbox ?? 0), inbox: Number(rows[0]?.inbox ?? 0) };
  }

  /**
   * Every pause. Read by the claims (once per poll interval), so bounded like them (`run`): an
   * unbounded read through a silent partition held every claim, and shutdown, behind it.
   */
  async pauseList(): Promise<PauseRow[]> {
    const { rows } = await this.run<{
      component: QueueTable;
      name: string;
      reason: string | null;
      paused_by: string | null;
      paused_at_ms: number | string;
    }>(this.statements.pauseListSql(this.pausesTable), []);
    return rows.map((r) => ({
      component: r.component,
      name: r.name,
      reason: r.reason,
      pausedBy: r.paused_by,
      pausedAt: new Date(Number(r.paused_at_ms)),
    }));
  }

  async pauseInsert(p: { component: QueueTable; name: string; reason: string | null; pausedBy: string | null }): Promise<boolean> {
    const { rows } = await this.runAdmin(this.statements.pauseInsertSql(this.pausesTable), [
      this.params.name(p.component),
      this.params.key('name', p.name),
      this.params.text(p.reason),
      this.params.text(p.pausedBy),
    ]);
    return rows.length === 1;
  }

  async pauseDelete(p: { component: QueueTable; name: string }): Promise<boolean> {
    const { rows } = await this.runAdmin(this.statements.pauseDeleteSql(this.pausesTable), [
      this.params.name(p.component),
      this.params.key('name', p.name),
    ]);
    return rows.length === 1;
  }

  async instanceList(): Promise<InstanceRow[]> {
    const { rows } = await this.runInstanceStatement<InstanceRecord>(
      this.statements.instanceListSql(this.instancesTable, this.table.outbox, this.table.inbox),
      [],
      'admin',
    );
    return rows.map((r) => ({
      id: this.decoding.uuid(r.id),
      host: r.host,
      pid: Number(r.pid),
      dataSource: r.data_source,
      version: r.version,
      deadAfterMs: Number(r.dead_after_ms),
      startedAt: r.started_at,
      heartbeatAt: r.heartbeat_at,
      heartbeatAgeSeconds: Number(r.heartbeat_age),
      state: r.state,
      claims: { outbox: Number(r.outbox_claims), inbox: Number(r.inbox_claims) },
    }));
  }

  async clockNow(): Promise<Date> {
    return (await this.run<{ now: Date }>(this.statements.clockNowSql(), [])).rows[0].now;
  }
}

/** What `instanceRegister` returns: `registered` 1 or 0, and the holder's columns when 0. */
interface RegistrationRecord {
  registered: number | string;
  host: string | null;
  pid: number | string | null;
  started_at: Date | null;
  heartbeat_age_ms: number | string | null;
}

/** A dead instance as `instanceEndDead` returns it (an unregistered one: nulls but its id). */
interface DeadInstanceRecord {
  id: string;
  host: string | null;
  pid: number | string | null;
  data_source: string | null;
  heartbeat_at: Date | null;
  outbox: number | string;
  inbox: number | string;
}

/** An instance as `instanceList` returns it. */
interface InstanceRecord {
  id: string;
  host: string;
  pid: number | string;
  data_source: string;
  version: string;
  dead_after_ms: number | string;
  started_at: Date;
  heartbeat_at: Date;
  heartbeat_age: number | string;
  state: InstanceState;
  outbox_claims: number | string;
  inbox_claims: number | string;
}

/** A row of the message browser as a driver returns it. */
interface MessageRecord<J> {
  id: string | number;
  message_id: string | null;
  idempotency_key: string | null;
  name: string;
  key: string | null;
  state: MessageRow['state'];
  attempts: number | string;
  last_error: string | null;
  created_at: Date;
  available_at: Date;
  claimed_at: Date | null;
  finished_at: Date | null;
  headers: J | null;
  payload?: J;
}

function toMessageRow<J>(component: QueueTable, r: MessageRecord<J>, decode: RecordDecoding<J>): MessageRow {
  const row: MessageRow = {
    component,
    id: String(r.id),
    messageId: r.message_id === null ? null : decode.uuid(r.message_id),
    idempotencyKey: r.idempotency_key,
    name: r.name,
    key: r.key,
    state: r.state,
    attempts: Number(r.attempts),
    lastError: r.last_error,
    createdAt: r.created_at,
    availableAt: r.available_at,
    claimedAt: r.claimed_at,
    finishedAt: r.finished_at,
    headers: r.headers === null ? {} : (decode.json(r.headers) as Record<string, string>),
  };
  if ('payload' in r) row.payload = decode.json(r.payload as J);
  return row;
}
