import { createHash } from 'node:crypto';
import type { DataSource, EntityManager } from 'typeorm';
import { runSql, type SqlResult } from '../../common/sql-runner';
import { QueueBoxConfigError, QueueBoxError } from '../../errors/queuebox.errors';
import { messages } from '../../queuebox.messages';
import type {
  DeadSelection,
  Dialect,
  DialectSettings,
  InboxInsertRow,
  LeaseTable,
  OutboxInsertRow,
  QueueBoxTables,
  WorkListener,
  WorkNotice,
} from '../dialect';
import type { DialectLog } from '../dialect-driver';
import type { RetentionKind } from '../dialect-rows';
import { driverErrorOf, uuidIn } from '../driver-errors';
import { type RecordDecoding } from '../records';
import { DEFAULT_MIGRATION_NAMES } from '../schema-migrations';
import { type ClaimRequest, SqlDialect, type SqlDialectParams, type SqlDialectStatements } from '../sql-dialect';
import {
  adminBacklogSql,
  adminClaimListSql,
  adminThroughputSql,
  blockedKeyListSql,
  blockedKeySkipHeadSql,
  deadLetterCountSql,
  deadLetterDiscardSql,
  deadLetterListSql,
  deadLetterReplaySql,
} from './admin.sql';
import {
  claimFunctionsLookupSql,
  clockNowSql,
  defaultIsolationSql,
  isSupportedServerVersion,
  MIN_SERVER_VERSION_NUM,
  serverVersionSql,
  tableExistsSql,
} from './checks.sql';
import { type ClaimFunctions, claimFunctionCallSql, claimFunctionNames, claimFunctions } from './claim-functions.sql';
import {
  claimLockNames,
  INBOX_CLAIM_COLUMNS,
  inboxPullClaimSql,
  inboxReclaimSql,
  inboxRelayClaimSql,
  OUTBOX_CLAIM_COLUMNS,
  outboxClaimSql,
  outboxReclaimSql,
  serializedClaimSql,
} from './claims.sql';
import { inboxCompleteFollowersSql, inboxFollowersSql } from './followers.sql';
import { inboxFindSql, inboxInsertSql } from './inbox.sql';
import { instanceDeregisterSql, instanceEndDeadSql, instanceHeartbeatSql, instanceListSql, instanceRegisterSql } from './instances.sql';
import { leaseCompleteBatchSql, leaseCompleteSql, leaseDeadLetterSql, leaseReleaseSql, leaseRenewSql, leaseRetrySql } from './lease.sql';
import { outboxInsertSql } from './outbox.sql';
import { PostgresWorkListener } from './postgres.listener';
import { type InlineParam, idArrayParam, pgTable, uuidArrayParam } from './quoting';
import { retentionDeleteSql, retentionTryLockSql, retentionUnlockSql } from './retention.sql';

// node-postgres parses jsonb and returns UUIDs in lower case: nothing to decode. (Claims send
// their timestamps as epoch milliseconds, made into Dates by the records: see claimColumns.)
const DECODING: RecordDecoding<unknown> = { json: (value) => value, uuid: (value) => value };

const STATEMENTS: SqlDialectStatements = {
  instanceRegisterSql,
  instanceHeartbeatSql,
  instanceEndDeadSql,
  instanceDeregisterSql,
  instanceListSql,
  outboxReclaimSql,
  inboxReclaimSql,
  inboxFindSql,
  inboxFollowersSql,
  inboxCompleteFollowersSql,
  leaseRenewSql,
  leaseCompleteSql,
  leaseCompleteBatchSql,
  leaseReleaseSql,
  leaseRetrySql,
  leaseDeadLetterSql,
  adminBacklogSql,
  deadLetterListSql,
  deadLetterCountSql,
  deadLetterReplaySql,
  deadLetterDiscardSql,
  blockedKeyListSql,
  blockedKeySkipHeadSql,
  adminThroughputSql,
  adminClaimListSql,
  clockNowSql,
};

// Values go as they are: node-postgres infers their types; lists are arrays (`= ANY($n)`, `unnest`).
const same = <T>(value: T) => value;
const PARAMS: SqlDialectParams = {
  guid: same,
  int: same,
  bigint: same,
  text: same,
  idOrNull: same,
  name: same,
  key: (_field, value) => value,
  names: same,
  ids: same,
  fence: (p) => [p.id, p.token],
  claims: (claims) => [idArrayParam(claims.map((c) => c.id)), uuidArrayParam(claims.map((c) => c.token))],
  followers: (followers) => [
    idArrayParam(followers.map((f) => f.id)),
    idArrayParam(followers.map((f) => f.headId)),
    uuidArrayParam(followers.map((f) => f.headToken)),
  ],
  selection: selectionParams,
  instant: same,
};

/** The PostgreSQL dialect: `FOR UPDATE SKIP LOCKED` claims, advisory claim locks, `clock_timestamp()` fences. */
export class PostgresDialect extends SqlDialect<unknown> implements Dialect {
  readonly type = 'postgres' as const;
  readonly reservesConnections = true;
  protected readonly table: Record<LeaseTable, string>;
  protected readonly instancesTable: string;
  protected readonly statements = STATEMENTS;
  protected readonly params = PARAMS;
  protected readonly decoding = DECODING;
  protected override readonly completeBatchReturns = 'lost' as const;
  private readonly claimLock: ReturnType<typeof claimLockNames>;
  /** What each claim sends, built once: the call of its function (migration 006, rewritten by 007) and, without it, the statement. */
  private readonly claims: Record<keyof ClaimFunctions, { call: string; signature: string; body: string; statement: string }>;
  /**
   * Whether the claim functions (migrations 006 and 007) exist as this version writes them: looked up
   * at the first claim, again after one went missing.
   */
  private claimFunctionsPresent?: Promise<boolean>;
  private readonly channel: Record<LeaseTable, string>;
  private readonly retentionLock: string;
  /** Whether QueueBox's own transactions must name READ COMMITTED (see `transaction`); unknown until the first one. */
  private nameReadCommitted?: boolean;

  /**
   * The client-side bound on each of QueueBox's own pool statements (claims, reclaims, fenced
   * writes, renewals, LISTEN), or none. Derived from the shortest lease (see `queryTimeoutFor`).
   */
  private readonly queryTimeoutMs?: number;
  /** The QueueBox instance that claims through this dialect (`claimed_by`), when it registered one. */
  private readonly instance?: { readonly id: string };

  constructor(
    private readonly dataSource: DataSource,
    private readonly tables: QueueBoxTables,
    settings: DialectSettings = {},
    private readonly log: DialectLog = { warn: () => undefined },
  ) {
    super();
    this.queryTimeoutMs = settings.queryTimeoutMs;
    this.instance = settings.instance;
    this.table = { outbox: pgTable(tables.outbox), inbox: pgTable(tables.inbox) };
    this.instancesTable = pgTable(tables.instances);
    this.claimLock = claimLockNames(tables);
    const fn = claimFunctionNames(tables);
    const functions = claimFunctions(tables);
    const claim = (kind: keyof ClaimFunctions, columns: string, statement: string) => ({
      call: claimFunctionCallSql(kind, fn[kind], columns),
      signature: functions[kind].signature,
      body: functions[kind].body,
      statement,
    });
    this.claims = {
      outbox: claim('outbox', OUTBOX_CLAIM_COLUMNS, outboxClaimSql(this.table.outbox)),
      relay: claim('relay', INBOX_CLAIM_COLUMNS, inboxRelayClaimSql(this.table.inbox)),
      pull: claim('pull', INBOX_CLAIM_COLUMNS, inboxPullClaimSql(this.table.inbox)),
    };
    // Channel names are identifiers (at most 63 bytes): derived from the table name, not the name itself.
    const channel = (kind: LeaseTable) =>
      `queuebox_${kind}_${createHash('sha1').update(tables[kind].qualified).digest('hex').slice(0, 16)}`;
    this.channel = { outbox: channel('outbox'), inbox: channel('inbox') };
    this.retentionLock = retentionLockName(tables);
    if (dataSource.isInitialized) poolOf(dataSource);
  }

  /**
   * READ COMMITTED is named only where something else would apply (the DataSource's
   * `isolationLevel`, or `default_transaction_isolation` set on the database, role or connection):
   * TypeORM sends it as a statement of its own, one round trip per transaction.
   */
  transaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    if (this.nameReadCommitted === false) return this.dataSource.transaction(work);
    if (this.nameReadCommitted === true) return this.dataSource.transaction('READ COMMITTED', work);
    return this.sessionIsolation().then(() => this.transaction(work));
  }

  private async sessionIsolation(): Promise<void> {
    const configured = this.dataSource.options.isolationLevel;
    if (configured !== undefined && configured !== 'READ COMMITTED') {
      this.nameReadCommitted = true;
      return;
    }
    const { rows } = await poolQuery<{ isolation: string }>(this.dataSource, defaultIsolationSql(), [], this.queryTimeoutMs);
    this.nameReadCommitted = rows[0]?.isolation !== 'read committed';
  }

  async schemaCheck(): Promise<void> {
    const [server] = (await this.run<{ version_num: number; version: string }>(serverVersionSql(), [])).rows;
    if (server && !isSupportedServerVersion(Number(server.version_num))) {
      throw new QueueBoxConfigError('dataSource', messages.postgresVersionUnsupported(server.version, MIN_SERVER_VERSION_NUM / 10000));
    }
    for (const kind of ['outbox', 'inbox'] as const) {
      const { rows } = await this.run<{ found: string | null }>(tableExistsSql(), [this.table[kind]]);
      if (!rows[0]?.found) throw new QueueBoxConfigError(`tables.${kind}`, messages.tableMissing(this.tables[kind].qualified));
    }
    const { rows } = await this.run<{ found: string | null }>(tableExistsSql(), [this.instancesTable]);
    if (!rows[0]?.found) {
      throw new QueueBoxConfigError(
        'migrations',
        messages.instancesTableMissing(this.tables.instances.qualified, DEFAULT_MIGRATION_NAMES.instances),
      );
    }
  }

  async outboxInsert(p: { manager: EntityManager; rows: OutboxInsertRow[] }): Promise<{ id: string; messageId: string }[]> {
    const { rows } = await this.run<{ id: string; message_id: string }>(
      outboxInsertSql(this.table.outbox),
      [
        p.rows.map((r) => r.messageId),
        p.rows.map((r) => r.destination),
        p.rows.map((r) => r.key),
        p.rows.map((r) => r.payloadJson),
        p.rows.map((r) => r.headersJson),
        p.rows.map((r) => r.availableAt),
        this.channel.outbox,
      ],
      p.manager,
    );
    const ids = new Map(rows.map((r) => [r.message_id, String(r.id)]));
    return p.rows.map((r) => ({ id: ids.get(r.messageId) as string, messageId: r.messageId }));
  }

  /** SQLSTATE 23505 on `<table>_message_id_key` (the schema names the constraint so); `detail` names the id. */
  outboxMessageIdTaken(error: unknown): { messageId?: string } | undefined {
    const { code, constraint, detail } = driverErrorOf(error);
    if (code !== UNIQUE_VIOLATION || typeof constraint !== 'string' || !constraint.endsWith('_message_id_key')) return undefined;
    return { messageId: typeof detail === 'string' ? uuidIn(detail) : undefined };
  }

  /**
   * ON CONFLICT DO NOTHING waits for a concurrent insert of the same key and then yields no row;
   * `inboxInsertIfAbsent` then looks the row up.
   */
  protected async inboxInsertRecords(row: InboxInsertRow, manager: EntityManager | undefined): Promise<{ id: string }[]> {
    const inserted = await this.run<{ id: string }>(
      inboxInsertSql(this.table.inbox),
      [row.source, row.idempotencyKey, row.aggregateId, row.payloadJson, row.headersJson, this.channel.inbox],
      manager,
    );
    return inserted.rows;
  }

  async workListen(p: {
    onWork: (notice: WorkNotice) => void;
    onState: (listening: boolean, error?: unknown) => void;
  }): Promise<WorkListener> {
    poolOf(this.dataSource); // guards the pool's clients before the listener checks one out
    const listener = new PostgresWorkListener(this.dataSource, this.channel, p.onWork, p.onState, this.queryTimeoutMs);
    await listener.start();
    return listener;
  }

  async retentionWithLock<T>(work: () => Promise<T>): Promise<T | null> {
    // A session lock needs one connection for the whole run: it is set aside here, holds only the
    // advisory lock (no transaction stays open), and the deletes run through the pool, each batch
    // its own transaction. A crash closes the connection and with it the lock.
    const runner = this.dataSource.createQueryRunner();
    try {
      const [{ locked }] = await runner.query(retentionTryLockSql(), [this.retentionLock]);
      if (!locked) return null;
      try {
        return await work();
      } finally {
        await runner.query(retentionUnlockSql(), [this.retentionLock]);
      }
    } finally {
      await runner.release();
    }
  }

  async retentionDeleteBatch(p: { kind: RetentionKind; olderThanMs: number; limit: number }): Promise<number> {
    const table = p.kind.startsWith('outbox') ? this.table.outbox : this.table.inbox;
    return (await this.runAdmin(retentionDeleteSql(table, p.kind), [p.olderThanMs, p.limit])).affected;
  }

  /**
   * A claim: through the PL/pgSQL function of migrations 006 and 007 when it exists (one statement, its plan
   * kept by the session), else the lock and the claim statement as one query string. A function
   * dropped while the application runs sends the claim back to the query string.
   */
  protected async claimRecords<T>(request: ClaimRequest): Promise<T[]> {
    const { kind, limit, leaseMs } = request;
    const instance = this.instance?.id ?? null;
    const [lockName, params]: [string, InlineParam[]] =
      kind === 'outbox'
        ? [this.claimLock.outbox, [limit, leaseMs, instance]]
        : kind === 'relay'
          ? [this.claimLock.inbox, [limit, leaseMs, request.sources, instance]]
          : [`${this.claimLock.pullPrefix}${request.source}`, [limit, leaseMs, request.source, instance]];
    const claim = this.claims[kind];
    this.claimFunctionsPresent ??= this.lookUpClaimFunctions().catch((error: unknown) => {
      this.claimFunctionsPresent = undefined; // looked up again at the next claim
      throw error;
    });
    if (await this.claimFunctionsPresent) {
      try {
        return (await poolQuery<T>(this.dataSource, claim.call, [...params], this.queryTimeoutMs)).rows;
      } catch (error) {
        if ((error as { code?: string }).code !== UNDEFINED_FUNCTION) throw error;
        this.claimFunctionsPresent = undefined;
      }
    }
    return this.serializedClaim<T>(lockName, claim.statement, params);
  }

  /**
   * Whether the three claim functions exist, hold this version's claims, and run at READ
   * COMMITTED. Functions of this signature written otherwise (edited by hand, or by a later version) are not used:
   * their claims may lack a fix (claims are where order and recovery are decided), so the claim
   * statements go instead, and one warning says which migration brings the functions up to date.
   * Nor are they used where the sessions default to REPEATABLE READ or SERIALIZABLE
   * (`default_transaction_isolation`): a function's statements would share the snapshot taken
   * before its lock was granted; the claim statements set READ COMMITTED themselves.
   */
  private async lookUpClaimFunctions(): Promise<boolean> {
    const kinds = Object.values(this.claims);
    const { rows } = await poolQuery<{ present: number; current: number; isolation: string }>(
      this.dataSource,
      claimFunctionsLookupSql(),
      [kinds.map((claim) => claim.signature), kinds.map((claim) => claim.body)],
      this.queryTimeoutMs,
    );
    const { present, current, isolation } = rows[0] ?? { present: 0, current: 0, isolation: 'read committed' };
    if (present > 0 && current < kinds.length) this.log.warn(messages.claimFunctionsOutdated(DEFAULT_MIGRATION_NAMES.claimProbes));
    return current === kinds.length && isolation === 'read committed';
  }

  /**
   * Runs a claim statement behind the table's advisory lock. The head-of-key check alone is not
   * enough under READ COMMITTED: two claimers can each see a different head when rows of one key
   * commit out of id order. With the lock, each claim statement starts after the previous claim
   * committed and sees it; SKIP LOCKED keeps a claim from waiting on rows that fenced writes hold;
   * the unique in-flight index is the database's last word on I4.
   *
   * The lock and the claim go as one query string (`serializedClaimSql`): one round trip instead
   * of four (BEGIN, lock, claim, COMMIT), the same transaction and the same order of snapshots.
   * It bypasses TypeORM's query runner (which cannot return the results of several statements),
   * so TypeORM's query logging does not show it.
   */
  private async serializedClaim<T>(lockName: string, statement: string, params: readonly InlineParam[]): Promise<T[]> {
    const text = serializedClaimSql(lockName, statement, params);
    // No values: node-postgres sends the text with the simple query protocol, which runs several statements.
    const results = await bounded(poolOf(this.dataSource).query({ text, query_timeout: this.queryTimeoutMs }), this.queryTimeoutMs);
    // One result per statement; the claim is the last.
    return (Array.isArray(results) ? results[results.length - 1] : results).rows as T[];
  }

  /**
   * With a manager's query runner: on that connection or not at all (`runSql` throws
   * `TransactionLostError` when it is gone; a write meant for a transaction never autocommits on
   * another connection). Without one, straight to the driver's pool: a TypeORM QueryRunner per
   * statement is garbage on the hot path (claims, completions, renewals), and nothing here uses it.
   */
  protected run<T>(statement: string, params: unknown[], manager?: EntityManager): Promise<SqlResult<T>> {
    if (manager?.queryRunner) return runSql<T>(this.dataSource, statement, params, manager);
    return poolQuery<T>(this.dataSource, statement, params, this.queryTimeoutMs);
  }

  /**
   * Admin and retention statements run as long as they need: an operator waits for them, and a
   * retention batch may take longer than a claim should.
   */
  protected runAdmin<T>(statement: string, params: unknown[]): Promise<SqlResult<T>> {
    return poolQuery<T>(this.dataSource, statement, params);
  }
}

/** SQLSTATE 23505: a unique violation. */
const UNIQUE_VIOLATION = '23505';

/** SQLSTATE 42883: the function does not exist. */
const UNDEFINED_FUNCTION = '42883';

/** The parts of node-postgres' pool QueueBox uses. */
interface PgPool {
  /**
   * With `values`: one statement. Without: the simple query protocol, so `text` may hold several
   * statements (one result each). `query_timeout` (ms) ends the wait client-side: the pool then
   * discards the connection, so nothing late arrives on a connection someone else uses.
   */
  query(query: { text: string; values?: unknown[]; query_timeout?: number }): Promise<PgResult | PgResult[]>;
}

interface PgResult {
  rows: unknown[];
  rowCount: number | null;
}

/** node-postgres' pool of TypeORM's driver: the pool TypeORM itself draws its connections from. */
function poolOf(dataSource: DataSource): PgPool {
  const pool = (dataSource.driver as unknown as { master: PgPool }).master;
  guardClients(pool);
  return pool;
}

const guardedPools = new WeakSet<object>();
const GUARDED = Symbol('queuebox.errorGuard');
const ignoreClientError = () => undefined;

/**
 * Gives every client of the pool an 'error' listener for its whole life, from its first checkout
 * on. pg-pool removes its own listener when it hands a client out, and TypeORM attaches its
 * listener only a few promise ticks later: an error the server sends in that gap (a backend
 * terminated just after it said ready) is an unhandled 'error' event, which ends the process.
 * Whoever holds the client still learns of the error (its query fails, TypeORM releases the
 * runner), and a client that saw one is not queryable, so the pool discards it on release.
 */
export function guardClients(pool: unknown): void {
  const emitter = pool as { on?(event: 'acquire', listener: (client: PgClientEvents) => void): void };
  if (!emitter || typeof emitter.on !== 'function' || guardedPools.has(emitter)) return;
  guardedPools.add(emitter);
  emitter.on('acquire', (client) => {
    if (client[GUARDED]) return;
    client[GUARDED] = true;
    client.on('error', ignoreClientError);
  });
}

interface PgClientEvents {
  [GUARDED]?: boolean;
  on(event: 'error', listener: (error: Error) => void): void;
}

/** One statement on the driver's pool, bounded by `timeoutMs` when given. */
async function poolQuery<T>(dataSource: DataSource, statement: string, params: unknown[], timeoutMs?: number): Promise<SqlResult<T>> {
  const result = (await bounded(
    poolOf(dataSource).query({ text: statement, values: params, query_timeout: timeoutMs }),
    timeoutMs,
  )) as PgResult;
  return { rows: result.rows as T[], affected: result.rowCount ?? 0 };
}

/** Turns node-postgres' "Query read timeout" into a QueueBox error that says what to do. */
export async function bounded<T>(query: Promise<T>, timeoutMs: number | undefined): Promise<T> {
  if (timeoutMs === undefined) return query;
  try {
    return await query;
  } catch (error) {
    if (error instanceof Error && error.message === 'Query read timeout') {
      throw new QueueBoxError('QUEUEBOX_QUERY_TIMEOUT', messages.queryTimedOut(timeoutMs), { cause: error });
    }
    throw error;
  }
}

/** The selection's parameters $1..$6. */
function selectionParams(s: DeadSelection): unknown[] {
  return [s.name, s.errorContains, s.deadAfter, s.deadBefore, s.ids, s.key ?? null];
}

/** The retention lock's name; PostgreSQL keys the advisory lock on `hashtextextended(name, 0)`. */
export function retentionLockName(tables: QueueBoxTables): string {
  return `queuebox_retention_${tables.outbox.qualified}`;
}
