import { createHash } from 'node:crypto';
import type { DataSource, EntityManager, MssqlParameter, QueryRunner } from 'typeorm';
import { runSql } from '../../common/sql-runner';
import { QueueBoxConfigError, QueueBoxError, QueueBoxValidationError } from '../../errors/queuebox.errors';
import { messages } from '../../queuebox.messages';
import type {
  DeadSelection,
  Dialect,
  FenceParams,
  InboxClaimedRow,
  InboxInsertRow,
  LeaseTable,
  OutboxClaimedRow,
  OutboxInsertRow,
  QueueBoxTables,
} from '../dialect';
import type {
  AdminComponent,
  BacklogRow,
  BlockedKeyRow,
  DeadLetterRow,
  ReclaimResult,
  RetentionKind,
  SkipHeadTarget,
} from '../dialect-rows';
import {
  type BacklogRecord,
  type BlockedKeyRecord,
  byId,
  countReclaimed,
  type DeadLetterRecord,
  FINISHED,
  type InboxClaimedRecord,
  type OutboxClaimedRecord,
  type ReclaimedRecord,
  type RecordDecoding,
  toBacklogRows,
  toBlockedKeyRow,
  toDeadLetterRow,
  toInboxClaimedRow,
  toOutboxClaimedRow,
} from '../records';
import type { DialectLog } from '../registry';
import { DEFAULT_MIGRATION_NAMES } from '../schema-migrations';
import {
  adminBacklogSql,
  blockedKeyListSql,
  blockedKeySkipHeadSql,
  deadLetterCountSql,
  deadLetterDiscardSql,
  deadLetterListSql,
  deadLetterReplaySql,
} from './admin.sql';
import { clockNowSql, databaseSettingsSql, keyCollationSql, tableExistsSql } from './checks.sql';
import {
  CLAIM_LOCK_ERROR_BASE,
  CLAIM_ROW_LOCK_WAIT_MS,
  claimLockTimeoutResetSql,
  inboxPullClaimSql,
  inboxReclaimSql,
  inboxRelayClaimSql,
  LOCK_TIMEOUT_ERROR,
  outboxClaimSql,
  outboxReclaimSql,
} from './claims.sql';
import { inboxFindSql, inboxInsertSql } from './inbox.sql';
import { leaseCompleteBatchSql, leaseCompleteSql, leaseDeadLetterSql, leaseReleaseSql, leaseRenewSql, leaseRetrySql } from './lease.sql';
import { outboxInsertSql } from './outbox.sql';
import { mssqlTable } from './quoting';
import { retentionDeleteSql, retentionTryLockSql } from './retention.sql';
import { KEY_COLLATION } from './schema';
import { checkSqlServerRequestTimeout } from './sqlserver.options';
import { bigint, bigintOrNull, guid, instant, int, KEY_LENGTH, name, text } from './sqlserver.params';

// JSON columns arrive as NVARCHAR text; UNIQUEIDENTIFIER values arrive in upper case.
const DECODING: RecordDecoding<string> = { json: (value) => JSON.parse(value), uuid: (value) => value.toLowerCase() };

/**
 * Every transaction QueueBox opens names its isolation: TypeORM otherwise takes the DataSource's
 * `isolationLevel`, and READPAST fails under SERIALIZABLE, SNAPSHOT or READ UNCOMMITTED (error 650).
 */
const READ_COMMITTED = 'READ COMMITTED';

/** sp_getapplock takes resource names of up to 255 characters. */
const MAX_LOCK_NAME = 255;
const UNIQUE_VIOLATIONS = new Set([2601, 2627]);

/**
 * The SQL Server dialect (also Azure SQL): `UPDLOCK, READPAST, ROWLOCK` claims behind `sp_getapplock`
 * application locks, `SYSUTCDATETIME()` fences, JSON as NVARCHAR(MAX).
 *
 * Every claim lock (outbox, relay, pull) is owned by the claim's transaction: its commit or
 * rollback releases it, so no timeout or broken batch can leave it held on a pooled connection.
 * TypeORM's SQL Server driver runs each statement on whichever pooled connection is free unless a
 * transaction is open, so every claim runs in a transaction of its own.
 */
export class SqlServerDialect implements Dialect {
  readonly type = 'mssql' as const;
  readonly reservesConnections = false;
  private readonly table: Record<LeaseTable, string>;
  private readonly claimLock: Record<LeaseTable, string>;
  private readonly retentionLock: string;

  constructor(
    private readonly dataSource: DataSource,
    private readonly tables: QueueBoxTables,
    private readonly log: DialectLog,
  ) {
    checkSqlServerRequestTimeout(dataSource.options);
    this.table = { outbox: mssqlTable(tables.outbox), inbox: mssqlTable(tables.inbox) };
    this.claimLock = {
      outbox: lockName(`queuebox_outbox_claim_${tables.outbox.qualified}`),
      inbox: lockName(`queuebox_inbox_claim_${tables.inbox.qualified}`),
    };
    this.retentionLock = lockName(`queuebox_retention_${tables.outbox.qualified}`);
  }

  async schemaCheck(): Promise<void> {
    for (const kind of ['outbox', 'inbox'] as const) {
      const { rows } = await this.run<{ found: number | null }>(tableExistsSql(), [text(this.table[kind], 300)]);
      if (rows[0]?.found == null) throw new QueueBoxConfigError(`tables.${kind}`, messages.tableMissing(this.tables[kind].qualified));
    }
    for (const kind of ['outbox', 'inbox'] as const) {
      const { rows } = await this.run<{ column: string; collation: string | null }>(keyCollationSql(), [text(this.table[kind], 300)]);
      const other = rows.filter((r) => r.collation !== KEY_COLLATION).map((r) => r.column);
      if (other.length > 0) {
        throw new QueueBoxConfigError(
          'migrations',
          messages.sqlServerKeyCollationMissing(this.tables[kind].qualified, other, KEY_COLLATION, DEFAULT_MIGRATION_NAMES.keyCollation),
        );
      }
    }
    const [database] = (await this.run<{ compatibility_level: number; is_read_committed_snapshot_on: boolean }>(databaseSettingsSql(), []))
      .rows;
    if (database && database.compatibility_level < 130) {
      throw new QueueBoxConfigError('dataSource', messages.sqlServerCompatibilityLevelTooLow(database.compatibility_level));
    }
    // A warning, not a refusal: claims stay correct without RCSI (their row-lock waits are bounded
    // by LOCK_TIMEOUT), only slower behind long producer transactions; and RCSI is a database-wide
    // choice that is not QueueBox's to impose.
    if (database && !database.is_read_committed_snapshot_on) {
      this.log.warn(messages.sqlServerReadCommittedSnapshotOff(CLAIM_ROW_LOCK_WAIT_MS));
    }
  }

  async outboxInsert(p: { manager: EntityManager; rows: OutboxInsertRow[] }): Promise<{ id: string; messageId: string }[]> {
    for (const r of p.rows) refuseTrailingSpaces('OutboxService.enqueue', { destination: r.destination, key: r.key });
    const rows = JSON.stringify(
      p.rows.map((r) => ({
        messageId: r.messageId,
        destination: r.destination,
        key: r.key,
        payload: r.payloadJson,
        headers: r.headersJson,
        availableAt: r.availableAt?.toISOString() ?? null,
      })),
    );
    const inserted = await this.run<{ id: string; message_id: string }>(outboxInsertSql(this.table.outbox), [text(rows)], p.manager);
    const ids = new Map(inserted.rows.map((r) => [r.message_id.toLowerCase(), String(r.id)]));
    return p.rows.map((r) => ({ id: ids.get(r.messageId.toLowerCase()) as string, messageId: r.messageId }));
  }

  async outboxClaimBatch(p: { limit: number; leaseMs: number }): Promise<OutboxClaimedRow[]> {
    const records = await this.claimUnderLock<OutboxClaimedRecord<string>>(this.claimLock.outbox, outboxClaimSql(this.table.outbox), [
      int(p.limit),
      bigint(p.leaseMs),
    ]);
    return records.map((r) => toOutboxClaimedRow(r, DECODING)).sort(byId);
  }

  async outboxReclaim(p: { maxAttempts: number }): Promise<ReclaimResult> {
    return countReclaimed(await this.run<ReclaimedRecord>(outboxReclaimSql(this.table.outbox), [int(p.maxAttempts)]));
  }

  async inboxInsertIfAbsent(p: { row: InboxInsertRow; manager?: EntityManager }): Promise<{ id: string; duplicate: boolean }> {
    const { row } = p;
    refuseTrailingSpaces('InboxService.receive', { source: row.source, idempotencyKey: row.idempotencyKey, aggregateId: row.aggregateId });
    const key = [name(row.source), name(row.idempotencyKey)];
    // The insert's range lock makes a concurrent receive of the same key wait and then insert
    // nothing; a unique violation can still reach here from a writer that does not take that
    // lock, and means the same. If the stored row vanished in between (retention deleted it),
    // the insert is simply tried again.
    for (let tries = 0; tries < 3; tries++) {
      let inserted: { id: string }[] = [];
      try {
        inserted = (
          await this.run<{ id: string }>(
            inboxInsertSql(this.table.inbox),
            [...key, name(row.aggregateId), text(row.payloadJson), text(row.headersJson)],
            p.manager,
          )
        ).rows;
      } catch (error) {
        if (!errorNumbers(error).some((n) => UNIQUE_VIOLATIONS.has(n))) throw error;
      }
      if (inserted.length === 1) return { id: String(inserted[0].id), duplicate: false };
      const found = await this.run<{ id: string }>(inboxFindSql(this.table.inbox), key, p.manager);
      if (found.rows.length === 1) return { id: String(found.rows[0].id), duplicate: true };
    }
    throw new Error(`inbox row (${row.source}, ${row.idempotencyKey}) neither inserted nor found after 3 tries`);
  }

  async inboxRelayClaimBatch(p: { sources: string[]; limit: number; leaseMs: number }): Promise<InboxClaimedRow[]> {
    const records = await this.claimUnderLock<InboxClaimedRecord<string>>(this.claimLock.inbox, inboxRelayClaimSql(this.table.inbox), [
      int(p.limit),
      bigint(p.leaseMs),
      text(JSON.stringify(p.sources)),
    ]);
    return records.map((r) => toInboxClaimedRow(r, DECODING)).sort(byId);
  }

  async inboxReclaim(p: { sources: string[]; maxAttempts: number }): Promise<ReclaimResult> {
    return countReclaimed(
      await this.run<ReclaimedRecord>(inboxReclaimSql(this.table.inbox), [int(p.maxAttempts), text(JSON.stringify(p.sources))]),
    );
  }

  async inboxPullClaimBatch(p: { source: string; limit: number; leaseMs: number }): Promise<InboxClaimedRow[]> {
    const lock = lockName(`queuebox_pull_claim_${this.tables.inbox.qualified}:${p.source}`);
    const records = await this.claimUnderLock<InboxClaimedRecord<string>>(lock, inboxPullClaimSql(this.table.inbox), [
      int(p.limit),
      bigint(p.leaseMs),
      name(p.source),
    ]);
    return records.map((r) => toInboxClaimedRow(r, DECODING)).sort(byId);
  }

  async leaseRenew(p: FenceParams & { leaseMs: number; manager?: EntityManager }): Promise<Date | null> {
    const { rows } = await this.run<{ lease_expires_at: Date }>(
      leaseRenewSql(this.table[p.table]),
      [...fence(p), bigint(p.leaseMs)],
      p.manager,
    );
    return rows.length === 1 ? rows[0].lease_expires_at : null;
  }

  async leaseComplete(p: FenceParams & { manager?: EntityManager }): Promise<boolean> {
    const { affected } = await this.run(leaseCompleteSql(this.table[p.table], FINISHED[p.table]), fence(p), p.manager);
    return affected === 1;
  }

  async leaseCompleteBatch(p: {
    table: LeaseTable;
    claims: { id: string; token: string }[];
    manager?: EntityManager;
  }): Promise<Set<string>> {
    const { rows } = await this.run<{ id: string }>(
      leaseCompleteBatchSql(this.table[p.table], FINISHED[p.table]),
      [text(JSON.stringify(p.claims.map((c) => ({ id: c.id, token: c.token }))))],
      p.manager,
    );
    return new Set(rows.map((r) => String(r.id)));
  }

  async leaseRelease(p: FenceParams): Promise<boolean> {
    const { affected } = await this.run(leaseReleaseSql(this.table[p.table]), fence(p));
    return affected === 1;
  }

  async leaseRetry(p: FenceParams & { delayMs: number; error: string | null }): Promise<boolean> {
    const { affected } = await this.run(leaseRetrySql(this.table[p.table]), [...fence(p), bigint(p.delayMs), text(p.error)]);
    return affected === 1;
  }

  async leaseDeadLetter(p: FenceParams & { reason: string }): Promise<boolean> {
    const { affected } = await this.run(leaseDeadLetterSql(this.table[p.table]), [...fence(p), text(p.reason)]);
    return affected === 1;
  }

  async adminBacklog(): Promise<BacklogRow[]> {
    return toBacklogRows((await this.run<BacklogRecord>(adminBacklogSql(this.table.outbox, this.table.inbox), [])).rows);
  }

  async deadLetterList(p: {
    selection: DeadSelection;
    afterId: string | null;
    limit: number;
    includePayload: boolean;
  }): Promise<DeadLetterRow[]> {
    const { component } = p.selection;
    const { rows } = await this.run<DeadLetterRecord<string>>(deadLetterListSql(this.table[component], component, p.includePayload), [
      ...selectionParams(p.selection),
      bigintOrNull(p.afterId),
      int(p.limit),
    ]);
    return rows.map((r) => toDeadLetterRow(component, r, DECODING));
  }

  async deadLetterCount(p: { selection: DeadSelection }): Promise<number> {
    const { component } = p.selection;
    const { rows } = await this.run<{ n: string }>(deadLetterCountSql(this.table[component], component), selectionParams(p.selection));
    return Number(rows[0].n);
  }

  deadLetterReplay(p: { selection: DeadSelection; afterId: string | null; limit: number }): Promise<string[]> {
    return this.deadLetterBatch(deadLetterReplaySql, p);
  }

  deadLetterDiscard(p: { selection: DeadSelection; afterId: string | null; limit: number }): Promise<string[]> {
    return this.deadLetterBatch(deadLetterDiscardSql, p);
  }

  /** Runs a replay or discard statement on one batch of the selection; returns the ids it changed. */
  private async deadLetterBatch(
    statement: (table: string, component: AdminComponent) => string,
    p: { selection: DeadSelection; afterId: string | null; limit: number },
  ): Promise<string[]> {
    const { component } = p.selection;
    const { rows } = await this.run<{ id: string }>(statement(this.table[component], component), [
      ...selectionParams(p.selection),
      bigintOrNull(p.afterId),
      int(p.limit),
    ]);
    return rows.map((r) => String(r.id));
  }

  async blockedKeyList(p: { component: AdminComponent; limit: number }): Promise<BlockedKeyRow[]> {
    const { rows } = await this.run<BlockedKeyRecord>(blockedKeyListSql(this.table[p.component], p.component), [int(p.limit)]);
    return rows.map((r) => toBlockedKeyRow(p.component, r, DECODING.uuid));
  }

  async blockedKeySkipHead(p: SkipHeadTarget & { reason: string }): Promise<string | null> {
    const head = bigintOrNull(p.headId ?? null);
    const params =
      p.component === 'outbox'
        ? [keyText('key', p.key), head, text(p.reason)]
        : [keyText('source', p.source), keyText('aggregateId', p.aggregateId), head, text(p.reason)];
    const { rows } = await this.run<{ id: string }>(blockedKeySkipHeadSql(this.table[p.component], p.component), params);
    return rows.length === 1 ? String(rows[0].id) : null;
  }

  async retentionWithLock<T>(work: () => Promise<T>): Promise<T | null> {
    // The lock's transaction holds no row locks; it only pins the connection that owns the lock.
    const runner = this.dataSource.createQueryRunner();
    try {
      await runner.startTransaction(READ_COMMITTED);
      try {
        const [{ granted }] = await runner.query(retentionTryLockSql(), [name(this.retentionLock)]).catch((error: unknown) => {
          throw withPrecedingErrors(error);
        });
        if (granted < 0) return null;
        return await work();
      } finally {
        if (runner.isTransactionActive) await runner.commitTransaction();
      }
    } finally {
      await runner.release();
    }
  }

  async retentionDeleteBatch(p: { kind: RetentionKind; olderThanMs: number; limit: number }): Promise<number> {
    const table = p.kind.startsWith('outbox') ? this.table.outbox : this.table.inbox;
    // Its own READ COMMITTED transaction: a pooled connection may keep another isolation from its
    // last user, and the delete's READPAST needs READ COMMITTED.
    const runner = this.dataSource.createQueryRunner();
    try {
      await runner.startTransaction(READ_COMMITTED);
      try {
        const result = await runner.query(retentionDeleteSql(table, p.kind), [bigint(p.olderThanMs), int(p.limit)], true);
        await runner.commitTransaction();
        return result.affected ?? 0;
      } catch (error) {
        if (runner.isTransactionActive) await runner.rollbackTransaction();
        throw withPrecedingErrors(error);
      }
    } finally {
      await runner.release();
    }
  }

  async clockNow(): Promise<Date> {
    return (await this.run<{ now: Date }>(clockNowSql(), [])).rows[0].now;
  }

  /**
   * Runs a claim in a transaction of its own, which owns the claim lock (@0): the commit releases
   * it, and so does the rollback when the claim fails or is cut off.
   */
  private async claimUnderLock<T>(lock: string, statement: string, params: unknown[]): Promise<T[]> {
    const runner = this.dataSource.createQueryRunner();
    try {
      await runner.startTransaction(READ_COMMITTED);
      try {
        const result = await runner.query(statement, [name(lock), ...params], true);
        await runner.commitTransaction();
        return (result.records ?? []) as T[];
      } catch (error) {
        await abandonClaim(runner);
        throw claimLockError(withPrecedingErrors(error), lock);
      }
    } finally {
      await runner.release();
    }
  }

  private async run<T>(statement: string, params: unknown[], manager?: EntityManager) {
    try {
      return await runSql<T>(this.dataSource, statement, params, manager);
    } catch (error) {
      throw withPrecedingErrors(error);
    }
  }
}

/**
 * SQL Server's `=` pads the shorter text with spaces under every collation, BIN2 included: `e1`
 * and `e1 ` would be one inbox key (a receive dropped as a duplicate) or one outbox key. Refused,
 * so a key is compared exactly as written; PostgreSQL keeps them apart and needs no such rule.
 */
function refuseTrailingSpaces(subject: string, fields: Record<string, string | null>): void {
  for (const [field, value] of Object.entries(fields)) {
    if (value?.endsWith(' ')) throw new QueueBoxValidationError(field, messages.sqlServerTrailingSpace(subject, field));
  }
}

/**
 * An admin argument compared with a key column, sent as NVARCHAR(255) like the column. QueueBoxAdmin
 * takes up to 2,000 characters (PostgreSQL's columns are text); a longer value cannot match a
 * row here, and a value longer than its declared NVARCHAR(255) is either cut to a prefix (which
 * could match another key) or refused with a protocol error, depending on driver and server
 * (not tried here). Refused first, with the field's name.
 */
function keyText(field: string, value: string | null): MssqlParameter {
  if (value !== null && value.length > KEY_LENGTH) {
    throw new QueueBoxValidationError(field, messages.sqlServerKeyTooLong(field, value.length, KEY_LENGTH), {
      code: 'QUEUEBOX_ADMIN_ARGUMENT',
    });
  }
  return name(value);
}

/** The selection's parameters @0..@4. */
function selectionParams(s: DeadSelection): MssqlParameter[] {
  return [
    keyText('name', s.name),
    text(s.errorContains),
    instant(s.deadAfter),
    instant(s.deadBefore),
    text(s.ids === null ? null : JSON.stringify(s.ids)),
  ];
}

/** The fence parameters @0 (id) and @1 (token). */
function fence(p: FenceParams): MssqlParameter[] {
  return [bigint(p.id), guid(p.token)];
}

/** A lock name sp_getapplock accepts: the name itself, or a digest of it when it is too long. */
function lockName(full: string): string {
  return full.length <= MAX_LOCK_NAME ? full : `queuebox_claim_${createHash('sha256').update(full).digest('hex')}`;
}

async function abandonClaim(runner: QueryRunner): Promise<void> {
  // Best effort: when the connection itself broke, the server ended the session and with it the
  // transaction and the lock it owned.
  try {
    await runner.query(claimLockTimeoutResetSql());
  } catch {}
  try {
    if (runner.isTransactionActive) await runner.rollbackTransaction();
  } catch {}
}

interface RequestError {
  number?: unknown;
  message?: unknown;
  precedingErrors?: unknown;
  driverError?: RequestError;
}

/**
 * The errors before the last of a failed request. mssql throws the last error the server sent
 * and keeps the others in `precedingErrors` (TypeORM's QueryFailedError copies it); the last is
 * often only a consequence, such as 266 ("transaction count after EXECUTE indicates a mismatching
 * number of BEGIN and COMMIT statements") after the error that rolled the transaction back.
 */
function precedingErrors(error: unknown): RequestError[] {
  if (typeof error !== 'object' || error === null) return [];
  const { precedingErrors: own, driverError } = error as RequestError;
  const found = own ?? driverError?.precedingErrors;
  return Array.isArray(found) ? found.filter((e): e is RequestError => typeof e === 'object' && e !== null) : [];
}

function errorNumber(error: unknown): number | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const { number, driverError } = error as RequestError;
  const found = number ?? driverError?.number;
  return typeof found === 'number' ? found : undefined;
}

/** The numbers of every error of a failed request, first to last. */
function errorNumbers(error: unknown): number[] {
  return [...precedingErrors(error).map((e) => e.number), errorNumber(error)].filter((n): n is number => typeof n === 'number');
}

const DESCRIBED = Symbol('queuebox.precedingErrorsDescribed');

/**
 * Adds the preceding errors (number and message) to the error's message, in place, so the error
 * keeps its class and fields and whoever logs or catches it sees the real cause.
 */
function withPrecedingErrors(error: unknown): unknown {
  const preceding = precedingErrors(error);
  if (preceding.length === 0 || !(error instanceof Error) || DESCRIBED in error) return error;
  const described = preceding.map((e) => `error ${typeof e.number === 'number' ? e.number : '?'}: ${String(e.message ?? '')}`);
  error.message = `${error.message} (preceded by ${described.join('; ')})`;
  Object.defineProperty(error, DESCRIBED, { value: true });
  return error;
}

/**
 * Turns the claim batch's "lock not granted" errors (51001 and up) and a row-lock wait that ran
 * out (1222) into clear QueueBox errors; other errors pass.
 */
function claimLockError(error: unknown, lock: string): unknown {
  const numbers = errorNumbers(error);
  if (numbers.includes(LOCK_TIMEOUT_ERROR)) {
    return new QueueBoxError('QUEUEBOX_CLAIM_LOCK', messages.sqlServerClaimRowLockTimeout(lock, CLAIM_ROW_LOCK_WAIT_MS), {
      cause: error,
    });
  }
  const notGranted = numbers.find((n) => n > CLAIM_LOCK_ERROR_BASE && n <= CLAIM_LOCK_ERROR_BASE + 999);
  if (notGranted === undefined) return error;
  return new QueueBoxError('QUEUEBOX_CLAIM_LOCK', messages.sqlServerClaimLockNotGranted(lock, CLAIM_LOCK_ERROR_BASE - notGranted), {
    cause: error,
  });
}
