import { createHash } from 'node:crypto';
import type { DataSource, EntityManager, MssqlParameter, QueryRunner } from 'typeorm';
import { attemptsTableOf, pausesTableOf, rateLimitsTableOf } from '../../common/identifiers';
import { runSql, type SqlResult } from '../../common/sql-runner';
import { QueueBoxConfigError, QueueBoxError, QueueBoxValidationError } from '../../errors/queuebox.errors';
import { messages } from '../../texts/queuebox.messages';
import type { QueueTable } from '../../types/claims';
import type {
  DeadSelection,
  Dialect,
  DialectSettings,
  FenceParams,
  InboxInsertRow,
  OutboxInsertRow,
  QueueBoxTables,
  RenewedClaim,
} from '../dialect';
import type { DialectLog } from '../dialect-driver';
import type { RetentionKind } from '../dialect-rows';
import type { DoctorFacts } from '../doctor-facts';
import { driverErrorOf, uuidIn } from '../driver-errors';
import { type RecordDecoding } from '../records';
import { DEFAULT_MIGRATION_NAMES, type SchemaMigration } from '../schema-migrations';
import { type ClaimRequest, SqlDialect, type SqlDialectParams, type SqlDialectStatements } from '../sql-dialect';
import * as adminSql from './admin.sql';
import { ADMIN, ADMIN_LOCK_WAIT_MS } from './admin.sql';
import * as checksSql from './checks.sql';
import { databaseSettingsSql, keyCollationSql, tableExistsSql } from './checks.sql';
import * as claimsSql from './claims.sql';
import {
  CLAIM_LOCK_ERROR_BASE,
  CLAIM_ROW_LOCK_WAIT_MS,
  CLAIM_SEARCH_LOCK_WAIT_MS,
  inboxPullClaimSql,
  inboxRelayClaimSql,
  LOCK_TIMEOUT_ERROR,
  outboxClaimPausedSql,
  outboxClaimSql,
} from './claims.sql';
import * as doctorSql from './doctor.sql';
import * as followersSql from './followers.sql';
import { FOLLOWERS_LOCK_WAIT_MS } from './followers.sql';
import * as inboxSql from './inbox.sql';
import { inboxInsertSql, UNIQUE_VIOLATIONS as UNIQUE_VIOLATION_NUMBERS } from './inbox.sql';
import * as instancesSql from './instances.sql';
import * as leaseSql from './lease.sql';
import { PINNED_READ_COMMITTED } from './lease.sql';
import * as messagesSql from './messages.sql';
import { outboxFindSql, outboxInsertIfAbsentSql, outboxInsertSql, rateLimitTakeSql } from './outbox.sql';
import * as pausesSql from './pauses.sql';
import { mssqlTable } from './quoting';
import { retentionDeleteSql, retentionTryLockSql } from './retention.sql';
import { KEY_COLLATION } from './schema';
import { checkSqlServerRequestTimeout } from './sqlserver.options';
import { bigint, bigintOrNull, float, guid, guidOrNull, instant, int, KEY_LENGTH, name, text } from './sqlserver.params';

// JSON columns arrive as NVARCHAR text; UNIQUEIDENTIFIER values arrive in upper case.
const DECODING: RecordDecoding<string> = { json: (value) => JSON.parse(value), uuid: (value) => value.toLowerCase() };

/** The statements the shared bodies run (SqlDialect): every noun file's, spread into the seam's type. */
const STATEMENTS: SqlDialectStatements = {
  ...instancesSql,
  ...claimsSql,
  ...followersSql,
  ...inboxSql,
  ...leaseSql,
  ...adminSql,
  ...messagesSql,
  ...checksSql,
  ...pausesSql,
};

// Typed to match their columns (sqlserver.params.ts); lists as JSON text, read with OPENJSON.
const PARAMS: SqlDialectParams = {
  guid: guid,
  int,
  bigint,
  text: (value) => text(value),
  idOrNull: bigintOrNull,
  name,
  key: keyText,
  names: (values) => text(JSON.stringify(values)),
  ids: (ids) => text(JSON.stringify(ids)),
  fence,
  claims: (claims) => [text(JSON.stringify(claims.map((c) => ({ id: c.id, token: c.token }))))],
  followers: (followers) => [text(JSON.stringify(followers.map((f) => ({ id: f.id, headId: f.headId, headToken: f.headToken }))))],
  headsWithFollowers: (heads, followers) => [
    text(JSON.stringify(heads.map((c) => ({ id: c.id, token: c.token })))),
    text(JSON.stringify(followers.map((f) => ({ id: f.id, headId: f.headId })))),
  ],
  selection: selectionParams,
  instant,
};

/**
 * Every transaction QueueBox opens names its isolation: TypeORM otherwise takes the DataSource's
 * `isolationLevel`, and READPAST fails under SERIALIZABLE, SNAPSHOT or READ UNCOMMITTED (error 650).
 */
const READ_COMMITTED = 'READ COMMITTED';

/** sp_getapplock takes resource names of up to 255 characters. */
const MAX_LOCK_NAME = 255;
const UNIQUE_VIOLATIONS = new Set<number>(UNIQUE_VIOLATION_NUMBERS);

/**
 * The SQL Server dialect (also Azure SQL): `UPDLOCK, READPAST, ROWLOCK` claims behind `sp_getapplock`
 * application locks, `SYSUTCDATETIME()` fences, JSON as NVARCHAR(MAX).
 *
 * Every claim lock (outbox, relay, pull) is owned by the claim's transaction: its commit or
 * rollback releases it, so no timeout or broken batch can leave it held on a pooled connection.
 * TypeORM's SQL Server driver runs each statement on whichever pooled connection is free unless a
 * transaction is open, so every claim runs in a transaction of its own.
 */
export class SqlServerDialect extends SqlDialect<string> implements Dialect {
  readonly type = 'mssql' as const;
  readonly reservesConnections = false;
  protected readonly table: Record<QueueTable, string>;
  protected readonly attemptsTable: Record<QueueTable, string>;
  protected readonly instancesTable: string;
  protected readonly pausesTable: string;
  /** The outbox claim, and the one that passes over paused destinations (issue 40), built once. */
  private readonly outboxClaimSql: string;
  private readonly outboxClaimPausedSql: string;
  protected readonly statements = STATEMENTS;
  protected readonly params = PARAMS;
  protected readonly decoding = DECODING;
  private readonly claimLock: Record<QueueTable, string>;
  private readonly retentionLock: string;

  constructor(
    private readonly dataSource: DataSource,
    private readonly tables: QueueBoxTables,
    private readonly log: DialectLog,
    private readonly settings: DialectSettings = {},
  ) {
    super();
    checkSqlServerRequestTimeout(dataSource.options);
    this.table = { outbox: mssqlTable(tables.outbox), inbox: mssqlTable(tables.inbox) };
    this.attemptsTable = { outbox: mssqlTable(attemptsTableOf(tables.outbox)), inbox: mssqlTable(attemptsTableOf(tables.inbox)) };
    this.instancesTable = mssqlTable(tables.instances);
    this.pausesTable = mssqlTable(pausesTableOf(tables.outbox));
    this.outboxClaimSql = outboxClaimSql(this.table.outbox);
    this.outboxClaimPausedSql = outboxClaimPausedSql(this.table.outbox);
    this.claimLock = {
      outbox: lockName(`queuebox_outbox_claim_${tables.outbox.qualified}`),
      inbox: lockName(`queuebox_inbox_claim_${tables.inbox.qualified}`),
    };
    this.retentionLock = lockName(`queuebox_retention_${tables.outbox.qualified}`);
  }

  /** mssql begins every transaction with the level it is given (no round trip of its own), so it is always named. */
  transaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    return this.dataSource.transaction(READ_COMMITTED, work);
  }

  async schemaCheck(): Promise<void> {
    for (const kind of ['outbox', 'inbox'] as const) {
      const { rows } = await this.run<{ found: number | null }>(tableExistsSql(), [text(this.table[kind], 300)]);
      if (rows[0]?.found == null) throw new QueueBoxConfigError(`tables.${kind}`, messages.tableMissing(this.tables[kind].qualified));
    }
    const instances = await this.run<{ found: number | null }>(tableExistsSql(), [text(this.instancesTable, 300)]);
    if (instances.rows[0]?.found == null) {
      throw new QueueBoxConfigError(
        'migrations',
        messages.instancesTableMissing(this.tables.instances.qualified, DEFAULT_MIGRATION_NAMES.instances),
      );
    }
    const pauses = await this.run<{ found: number | null }>(tableExistsSql(), [text(this.pausesTable, 300)]);
    if (pauses.rows[0]?.found == null) {
      throw new QueueBoxConfigError(
        'migrations',
        messages.pausesTableMissing(pausesTableOf(this.tables.outbox).qualified, DEFAULT_MIGRATION_NAMES.pauses),
      );
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
    // A warning, not a refusal: claims stay correct without RCSI and keep delivering; a key whose
    // rows an open transaction holds waits for it, and a claim that meets such a row gives up on
    // it after a bounded wait (claims.sql.ts); RCSI is a database-wide choice that is not
    // QueueBox's to impose.
    if (database && !database.is_read_committed_snapshot_on) {
      this.log.warn(messages.sqlServerReadCommittedSnapshotOff(CLAIM_SEARCH_LOCK_WAIT_MS, FOLLOWERS_LOCK_WAIT_MS));
    }
  }

  /** Error 2627 (the unique constraint) or 2601 (a unique index) naming `<table>_message_id_key`; the message names the id. */
  outboxMessageIdTaken(error: unknown): { messageId?: string } | undefined {
    const { number, message } = driverErrorOf(error);
    if (!UNIQUE_VIOLATIONS.has(number as number) || typeof message !== 'string' || !message.includes('_message_id_key')) return undefined;
    return { messageId: uuidIn(message) };
  }

  // Issue 41: `ifAbsent` (enqueue's onDuplicate: 'ignore') picks outboxInsertIfAbsentSql; the shared
  // loop (SqlDialect.outboxInsert) looks up the ids it skipped with outboxFindRecords.
  protected async outboxInsertRecords(rows: OutboxInsertRow[], manager: EntityManager, ifAbsent: boolean): Promise<Map<string, string>> {
    for (const r of rows) refuseTrailingSpaces('OutboxService.enqueue', { destination: r.destination, key: r.key });
    const json = JSON.stringify(
      rows.map((r) => ({
        messageId: r.messageId,
        destination: r.destination,
        key: r.key,
        payload: r.payloadJson,
        headers: r.headersJson,
        availableAt: r.availableAt?.toISOString() ?? null,
      })),
    );
    const statement = (ifAbsent ? outboxInsertIfAbsentSql : outboxInsertSql)(this.table.outbox);
    const inserted = await this.run<{ id: string; message_id: string }>(statement, [text(json)], manager);
    return new Map(inserted.rows.map((r) => [r.message_id.toLowerCase(), String(r.id)]));
  }

  // Issue 41: the rate limit buckets of outbox.rateLimits (migration 008).
  async rateLimitTake(p: {
    destination: string;
    perSecond: number;
    burst: number;
    count: number;
  }): Promise<{ granted: number; tokens: number }> {
    const { rows } = await this.run<{ granted: number; tokens: number }>(
      rateLimitTakeSql(mssqlTable(rateLimitsTableOf(this.tables.outbox))),
      [name(p.destination), float(p.perSecond), float(p.burst), int(p.count)],
    );
    return { granted: Number(rows[0]?.granted ?? 0), tokens: Number(rows[0]?.tokens ?? 0) };
  }

  protected async outboxFindRecords(messageIds: string[], manager: EntityManager): Promise<Map<string, string>> {
    const found = await this.run<{ id: string; message_id: string }>(
      outboxFindSql(this.table.outbox),
      [text(JSON.stringify(messageIds))],
      manager,
    );
    return new Map(found.rows.map((r) => [r.message_id.toLowerCase(), String(r.id)]));
  }

  protected override checkInboxRow(row: InboxInsertRow): void {
    refuseTrailingSpaces('InboxService.receive', { source: row.source, idempotencyKey: row.idempotencyKey, aggregateId: row.aggregateId });
  }

  /** The insert answers a duplicate with no row: its batch catches the unique violation (inboxInsertSql). */
  protected async inboxInsertRecords(row: InboxInsertRow, manager: EntityManager | undefined): Promise<{ id: string }[]> {
    return (
      await this.run<{ id: string }>(
        inboxInsertSql(this.table.inbox),
        [name(row.source), name(row.idempotencyKey), name(row.aggregateId), text(row.payloadJson), text(row.headersJson)],
        manager,
      )
    ).rows;
  }

  /** A claim in a transaction of its own, behind the claim lock of its table (and source, for pull claims). */
  protected claimRecords<T>(request: ClaimRequest): Promise<T[]> {
    const lease = [int(request.limit), bigint(request.leaseMs)];
    // The claiming instance (`claimed_by`) is each claim's last parameter.
    const instance = guidOrNull(this.settings.instance?.id ?? null);
    switch (request.kind) {
      case 'outbox':
        // Issue 40: the claim that passes over paused destinations, only while some are paused.
        if (request.paused !== undefined && request.paused.length > 0) {
          return this.claimUnderLock<T>(this.claimLock.outbox, this.outboxClaimPausedSql, [
            ...lease,
            instance,
            text(JSON.stringify(request.paused)),
          ]);
        }
        return this.claimUnderLock<T>(this.claimLock.outbox, this.outboxClaimSql, [...lease, instance]);
      case 'relay':
        return this.claimUnderLock<T>(this.claimLock.inbox, inboxRelayClaimSql(this.table.inbox), [
          ...lease,
          text(JSON.stringify(request.sources)),
          instance,
        ]);
      case 'pull':
        return this.claimUnderLock<T>(
          lockName(`queuebox_pull_claim_${this.tables.inbox.qualified}:${request.source}`),
          inboxPullClaimSql(this.table.inbox),
          [...lease, name(request.source), instance],
        );
    }
  }

  /**
   * Each claim's own renewal (`leaseRenew`), all at once: SQL Server sets no connection aside for
   * renewals (`reservesConnections`), so they go through the pool, several at a time, as they did
   * one claim at a time. One statement for the batch would save round trips; it is not written
   * until it can run against a SQL Server (docs/sqlserver.md).
   */
  async leaseRenewBatch(p: {
    table: QueueTable;
    claims: readonly { id: string; token: string; leaseMs: number }[];
    manager?: EntityManager;
  }): Promise<RenewedClaim[]> {
    const renewed = await Promise.all(
      p.claims.map(async ({ id, token, leaseMs }) => {
        const leaseExpiresAt = await this.leaseRenew({ table: p.table, id, token, leaseMs, manager: p.manager });
        return leaseExpiresAt ? [{ id, token, leaseExpiresAt }] : [];
      }),
    );
    return renewed.flat();
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
        // -1: another replica holds it, retention runs there. Anything else is a failure to say.
        if (granted < 0) {
          if (granted !== -1) this.log.warn(messages.sqlServerRetentionLockFailed(granted));
          return null;
        }
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
        const history = p.kind.startsWith('outbox') ? this.attemptsTable.outbox : this.attemptsTable.inbox;
        const result = await runner.query(retentionDeleteSql(table, p.kind, history), [bigint(p.olderThanMs), int(p.limit)], true);
        await runner.commitTransaction();
        return Number((result.records as { n: number | string }[] | undefined)?.[0]?.n ?? 0);
      } catch (error) {
        if (runner.isTransactionActive) await runner.rollbackTransaction();
        throw withPrecedingErrors(error);
      }
    } finally {
      await runner.release();
    }
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

  /**
   * An admin statement (dashboard, CLI, QueueBoxAdmin) gives way to the workers (ADMIN): a row
   * lock it waited too long for is a "busy, try again" error, never a pooled connection held
   * until the request timeout behind an open transaction.
   */
  protected async runAdmin<T>(statement: string, params: unknown[]): Promise<SqlResult<T>> {
    try {
      return await this.run<T>(`${ADMIN}${statement}`, params);
    } catch (error) {
      if (!errorNumbers(error).includes(LOCK_TIMEOUT_ERROR)) throw error;
      throw new QueueBoxError('QUEUEBOX_ADMIN_BUSY', messages.sqlServerAdminBusy(ADMIN_LOCK_WAIT_MS), { cause: error });
    }
  }

  /**
   * Runs one of QueueBox's statements: in `manager`'s transaction at the level that transaction
   * has; outside a transaction (no manager, or one whose runner has none open, such as the pull
   * workers' renewal connection: TypeORM's SQL Server runner then sends its statements to the pool)
   * at READ COMMITTED, whatever level the pooled connection was left at (PINNED_READ_COMMITTED).
   * Repeated statements go as the others: SQL Server keeps the plan of each parameterized text
   * (`sp_executesql`) in its plan cache, so there is no parse and plan per call to save.
   */
  protected async run<T>(statement: string, params: unknown[], manager?: EntityManager): Promise<SqlResult<T>> {
    const sent = manager?.queryRunner?.isTransactionActive ? statement : `${PINNED_READ_COMMITTED}${statement}`;
    try {
      return await runSql<T>(this.dataSource, sent, params, manager);
    } catch (error) {
      throw withPrecedingErrors(error);
    }
  }

  /** What `queuebox doctor` reads (doctor.sql.ts): DMVs and catalog views, bounded lists; no dead-row count or autovacuum here. */
  async doctorFacts(p: { applied: readonly SchemaMigration[] }): Promise<DoctorFacts> {
    const kinds = ['outbox', 'inbox', 'instances'] as const;
    const names = kinds.map((kind) => mssqlTable(this.tables[kind]));
    const qualified = new Map(kinds.map((kind, i) => [names[i], this.tables[kind].qualified]));
    // One after another: one pool connection at a time, whatever the pool's size.
    const tables = await this.runAdmin<{ table: string; present: boolean; live_rows: string | null; bytes: string | null }>(
      doctorSql.doctorTablesSql(names),
      [],
    );
    const indexes = await this.runAdmin<{ table: string; name: string; valid: boolean; bytes: string | null }>(
      doctorSql.doctorIndexesSql(names),
      [],
    );
    const horizon = await this.runAdmin<{ holder: string; detail: string | null; seconds: number | null }>(
      doctorSql.doctorHorizonSql(),
      [],
    );
    const waits = await this.runAdmin<{
      table: string;
      session: string;
      application: string;
      mode: string;
      seconds: number;
      blocker_session: string | null;
      blocker: string | null;
    }>(doctorSql.doctorLockWaitsSql(names), []);
    const count = (value: string | number | null) => (value === null ? null : Number(value));
    const repair = doctorSql.doctorRepairs;
    return {
      tables: tables.rows.map((r, i) => ({
        table: qualified.get(r.table) ?? r.table,
        kind: kinds[i],
        present: Boolean(r.present),
        liveRows: count(r.live_rows),
        deadRows: null,
        bytes: count(r.bytes),
        autovacuumEnabled: null,
        lastAutovacuumAt: null,
        vacuum: null,
        resetAutovacuum: null,
      })),
      indexes: indexes.rows.map((r) => ({
        table: qualified.get(r.table) ?? r.table,
        name: r.name,
        valid: Boolean(r.valid),
        bytes: count(r.bytes),
        rebuild: repair.rebuildIndex(r.name, r.table),
        drop: repair.dropIndex(r.name, r.table),
      })),
      expectedIndexes: doctorSql.expectedIndexes(this.tables, p.applied),
      autovacuumServer: null,
      resetServerAutovacuum: null,
      horizon: horizon.rows.map((r) => ({
        kind: 'session' as const,
        holder: r.holder,
        detail: r.detail ?? '',
        seconds: r.seconds === null ? null : Number(r.seconds),
        xidAge: null,
        active: true,
        end: repair.endSession(r.holder),
      })),
      lockWaits: waits.rows.map((r) => ({
        table: qualified.get(r.table) ?? r.table,
        session: r.session,
        application: r.application,
        mode: r.mode,
        seconds: Number(r.seconds),
        blockers: r.blocker_session === null ? [] : [r.blocker_session],
        blocker: r.blocker,
        endBlocker: r.blocker_session === null ? null : repair.endSession(r.blocker_session),
      })),
    };
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

/** The selection's parameters @0..@6. */
function selectionParams(s: DeadSelection): MssqlParameter[] {
  return [
    keyText('name', s.name),
    text(s.errorContains),
    instant(s.deadAfter),
    instant(s.deadBefore),
    text(s.ids === null ? null : JSON.stringify(s.ids)),
    keyText('key', s.key ?? null),
    text(s.fingerprint ?? null, 512),
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
  // transaction and the lock it owned. Nothing the batch SET needs resetting: sp_executesql
  // restores it on return (see claims.sql.ts, underClaimLock).
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
