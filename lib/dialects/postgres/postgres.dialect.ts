import { createHash } from 'node:crypto';
import type { DataSource, EntityManager, QueryRunner } from 'typeorm';
import { attemptsTableOf, pausesTableOf, rateLimitsTableOf } from '../../common/identifiers';
import { onConnectionOf, runSql, type SqlResult } from '../../common/sql-runner';
import { withinTimeout } from '../../common/time-limit';
import { QueueBoxConfigError, QueueBoxError } from '../../errors/queuebox.errors';
import { messages } from '../../texts/queuebox.messages';
import type { QueueTable } from '../../types/claims';
import type {
  DeadSelection,
  Dialect,
  DialectSettings,
  InboxInsertRow,
  OutboxInsertRow,
  PartitionKeeping,
  QueueBoxTables,
  RenewedClaim,
  WorkListener,
  WorkNotice,
} from '../dialect';
import type { DialectLog } from '../dialect-driver';
import type { RetentionKind } from '../dialect-rows';
import type { DoctorFacts, DoctorHorizonHolder } from '../doctor-facts';
import { driverErrorOf, uuidIn } from '../driver-errors';
import { type RecordDecoding } from '../records';
import { DEFAULT_MIGRATION_NAMES, type SchemaMigration } from '../schema-migrations';
import { type ClaimRequest, type REPEATED, SqlDialect, type SqlDialectParams, type SqlDialectStatements } from '../sql-dialect';
import * as adminSql from './admin.sql';
import * as checksSql from './checks.sql';
import {
  claimFunctionsLookupSql,
  defaultIsolationSql,
  isSupportedServerVersion,
  MIN_SERVER_VERSION_NUM,
  readCommittedSql,
  serverVersionSql,
  tableExistsSql,
  withoutJitSql,
} from './checks.sql';
import { type ClaimFunctions, claimFunctionCallSql, claimFunctionNames, claimFunctions } from './claim-functions.sql';
import * as claimsSql from './claims.sql';
import {
  claimLockNames,
  INBOX_CLAIM_COLUMNS,
  inboxPullClaimSql,
  inboxRelayClaimSql,
  OUTBOX_CLAIM_COLUMNS,
  outboxClaimSql,
  serializedClaimSql,
} from './claims.sql';
import * as doctorSql from './doctor.sql';
import * as followersSql from './followers.sql';
import * as inboxSql from './inbox.sql';
import { inboxInsertSql } from './inbox.sql';
import * as instancesSql from './instances.sql';
import { tableLayoutSql } from './layout.sql';
import * as leaseSql from './lease.sql';
import { leaseRenewBatchSql } from './lease.sql';
import * as messagesSql from './messages.sql';
import { outboxFindSql, outboxInsertIfAbsentSql, outboxInsertSql, rateLimitTakeSql } from './outbox.sql';
import { createPartitionKeeping } from './partition-keeping';
import type { PartitionSql } from './partition-upkeep';
import { partitionedInboxFindSql, partitionedInboxInsertSql, partitionedOutboxFindSql, partitionedOutboxInsertSql } from './partitions.sql';
import * as pausesSql from './pauses.sql';
import { notificationArrives, PostgresWorkListener, type ProbeClient } from './postgres.listener';
import { type InlineParam, idArrayParam, inlineValues, pgTable, uuidArrayParam } from './quoting';
import { retentionDeleteSql, retentionTryLockSql, retentionUnlockSql } from './retention.sql';

// node-postgres parses jsonb and returns UUIDs in lower case: nothing to decode. (Claims send
// their timestamps as epoch milliseconds, made into Dates by the records: see claimColumns.)
const DECODING: RecordDecoding<unknown> = { json: (value) => value, uuid: (value) => value };

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

// Values go as they are: node-postgres infers their types; lists are arrays (`= ANY($n)`, `unnest`).
const same = <T>(value: T) => value;
/** A batch of claims as two arrays: ids and tokens (`$n::bigint[]`, `$m::uuid[]`). */
const claimArrays = (claims: readonly { id: string; token: string }[]) => [
  idArrayParam(claims.map((c) => c.id)),
  uuidArrayParam(claims.map((c) => c.token)),
];
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
  claims: (claims) => claimArrays(claims),
  headsWithFollowers: (heads, followers) => [
    ...claimArrays(heads),
    idArrayParam(followers.map((f) => f.id)),
    idArrayParam(followers.map((f) => f.headId)),
  ],
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
  protected readonly table: Record<QueueTable, string>;
  protected readonly attemptsTable: Record<QueueTable, string>;
  protected readonly instancesTable: string;
  protected readonly pausesTable: string;
  protected readonly statements = STATEMENTS;
  protected readonly params = PARAMS;
  protected readonly decoding = DECODING;
  protected override readonly completeBatchReturns = 'lost' as const;
  private readonly claimLock: ReturnType<typeof claimLockNames>;
  /** What each claim sends, built once: the call of its function (migration 006, rewritten by 007) and, without it, the statement. */
  private readonly claims: Record<keyof ClaimFunctions, { call: PreparedStatement; signature: string; body: string; statement: string }>;
  /**
   * False once a connection lost one of QueueBox's prepared statements (a pooler that hands out
   * another session): claims and repeated statements go unnamed from then on.
   */
  private preparesStatements = true;
  /** The repeated statements (`REPEATED`) met so far, by text: a few per table, each with its name. */
  private readonly repeatedStatements = new Map<string, PreparedStatement>();
  /**
   * The outbox claim that passes over paused destinations (`$4`, issue 40), sent as a query string
   * only while some destination is paused: the claim function (and its kept plan) serves every
   * other claim, and no migration had to rewrite it.
   */
  private readonly outboxClaimPausedSql: string;
  /**
   * Whether the claim functions (migrations 006 and 007) exist as this version writes them: looked up
   * at the first claim, again after one went missing.
   */
  private claimFunctionsPresent?: Promise<boolean>;
  private partitionedLayout?: Promise<boolean>;
  private keeping?: Promise<PartitionKeeping | undefined>;
  private readonly channel: Record<QueueTable, string>;
  private readonly retentionLock: string;
  /** Whether the DataSource names another level than READ COMMITTED (`isolationLevel`) for the transactions TypeORM begins. */
  private readonly dataSourceNamesLevel: boolean;

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
    this.attemptsTable = { outbox: pgTable(attemptsTableOf(tables.outbox)), inbox: pgTable(attemptsTableOf(tables.inbox)) };
    this.instancesTable = pgTable(tables.instances);
    this.pausesTable = pgTable(pausesTableOf(tables.outbox));
    this.claimLock = claimLockNames(tables);
    const fn = claimFunctionNames(tables);
    const functions = claimFunctions(tables);
    const claim = (kind: keyof ClaimFunctions, columns: string, statement: string) => ({
      call: preparedStatement(`queuebox_${kind}_claim`, claimFunctionCallSql(kind, fn[kind], columns)),
      signature: functions[kind].signature,
      body: functions[kind].body,
      statement,
    });
    this.claims = {
      outbox: claim('outbox', OUTBOX_CLAIM_COLUMNS, outboxClaimSql(this.table.outbox)),
      relay: claim('relay', INBOX_CLAIM_COLUMNS, inboxRelayClaimSql(this.table.inbox)),
      pull: claim('pull', INBOX_CLAIM_COLUMNS, inboxPullClaimSql(this.table.inbox)),
    };
    this.outboxClaimPausedSql = outboxClaimSql(this.table.outbox, undefined, '$4::text[]');
    // Channel names are identifiers (at most 63 bytes): derived from the table name, not the name itself.
    const channel = (kind: QueueTable) =>
      `queuebox_${kind}_${createHash('sha1').update(tables[kind].qualified).digest('hex').slice(0, 16)}`;
    this.channel = { outbox: channel('outbox'), inbox: channel('inbox') };
    this.retentionLock = retentionLockName(tables);
    const configured = dataSource.options.isolationLevel;
    this.dataSourceNamesLevel = configured !== undefined && configured !== 'READ COMMITTED';
    if (dataSource.isInitialized) poolOf(dataSource);
  }

  /**
   * READ COMMITTED is named only where something else would apply (the DataSource's
   * `isolationLevel`, or a connection whose default is another level: see `SESSION_READ_COMMITTED`):
   * TypeORM sends it as a statement of its own, one round trip per transaction.
   */
  async transaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    const runner = this.dataSource.createQueryRunner();
    try {
      const client = (await runner.connect()) as PgClient;
      // Unbounded, as the transaction's own statements: a statement cut off by `query_timeout`
      // leaves the connection busy, and this one goes back to the pool with the runner.
      const name = this.dataSourceNamesLevel || !(SESSION_READ_COMMITTED.get(client) ?? (await askReadCommittedByDefault(client)));
      return await (name ? runner.manager.transaction('READ COMMITTED', work) : runner.manager.transaction(work));
    } finally {
      await runner.release();
    }
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
    await this.partitioned();
    const pauses = await this.run<{ found: string | null }>(tableExistsSql(), [this.pausesTable]);
    if (!pauses.rows[0]?.found) {
      throw new QueueBoxConfigError(
        'migrations',
        messages.pausesTableMissing(pausesTableOf(this.tables.outbox).qualified, DEFAULT_MIGRATION_NAMES.pauses),
      );
    }
  }

  /**
   * Whether the outbox and inbox are in the partitioned layout (issue 37): read from the catalog
   * once, at the start-up check or before the first write that differs by layout, so every way in
   * (the module, the admin, the CLI) writes what the database holds. Read on the caller's
   * transaction when there is one: a pool whose every connection is in a transaction would
   * otherwise wait for itself.
   */
  private partitioned(manager?: EntityManager): Promise<boolean> {
    this.partitionedLayout ??= this.run<{ layout: string }>(tableLayoutSql(), [this.table.outbox], manager).then(
      ({ rows }) => rows[0]?.layout === 'partitioned',
      (error) => {
        this.partitionedLayout = undefined;
        throw error;
      },
    );
    return this.partitionedLayout;
  }

  /**
   * The partitions' upkeep and retention, where the tables are partitioned. Their statements run as
   * long as they need (`runAdmin`): a `DETACH ... CONCURRENTLY` waits for every transaction that
   * could see its partition.
   */
  partitionKeeping(): Promise<PartitionKeeping | undefined> {
    this.keeping ??= this.partitioned().then(
      (partitioned) => {
        if (!partitioned) return undefined;
        const sql: PartitionSql = {
          query: async <R>(text: string, params?: unknown[]) => (await this.runAdmin<R>(text, params ?? [])).rows,
          transaction: (work) =>
            this.transaction((manager) =>
              work(async <R>(text: string, params?: unknown[]) => (await this.run<R>(text, params ?? [], manager)).rows),
            ),
        };
        return createPartitionKeeping(sql, this.tables, this.log);
      },
      (error) => {
        this.keeping = undefined;
        throw error;
      },
    );
    return this.keeping;
  }

  protected async outboxInsertRecords(rows: OutboxInsertRow[], manager: EntityManager, ifAbsent: boolean): Promise<Map<string, string>> {
    const inserted = await this.run<{ id: string; message_id: string }>(
      (await this.partitioned(manager))
        ? partitionedOutboxInsertSql(this.tables.outbox, ifAbsent)
        : (ifAbsent ? outboxInsertIfAbsentSql : outboxInsertSql)(this.table.outbox),
      [
        rows.map((r) => r.messageId),
        rows.map((r) => r.destination),
        rows.map((r) => r.key),
        rows.map((r) => r.payloadJson),
        rows.map((r) => r.headersJson),
        rows.map((r) => r.availableAt),
        this.channel.outbox,
      ],
      manager,
    );
    return new Map(inserted.rows.map((r) => [r.message_id, String(r.id)]));
  }

  async rateLimitTake(p: {
    destination: string;
    perSecond: number;
    burst: number;
    count: number;
  }): Promise<{ granted: number; tokens: number }> {
    const { rows } = await this.run<{ granted: number; tokens: number }>(rateLimitTakeSql(pgTable(rateLimitsTableOf(this.tables.outbox))), [
      p.destination,
      p.perSecond,
      p.burst,
      p.count,
    ]);
    return { granted: Number(rows[0]?.granted ?? 0), tokens: Number(rows[0]?.tokens ?? 0) };
  }

  protected async outboxFindRecords(messageIds: string[], manager: EntityManager): Promise<Map<string, string>> {
    const statement = (await this.partitioned(manager)) ? partitionedOutboxFindSql(this.tables.outbox) : outboxFindSql(this.table.outbox);
    const found = await this.run<{ id: string; message_id: string }>(statement, [messageIds], manager);
    return new Map(found.rows.map((r) => [r.message_id, String(r.id)]));
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
      (await this.partitioned(manager)) ? partitionedInboxInsertSql(this.tables.inbox) : inboxInsertSql(this.table.inbox),
      [row.source, row.idempotencyKey, row.aggregateId, row.payloadJson, row.headersJson, this.channel.inbox],
      manager,
    );
    return inserted.rows;
  }

  protected override async inboxFindRecords(key: unknown[], manager: EntityManager | undefined): Promise<{ id: string }[]> {
    if (!(await this.partitioned(manager))) return super.inboxFindRecords(key, manager);
    return (await this.run<{ id: string }>(partitionedInboxFindSql(this.tables.inbox), key, manager)).rows;
  }

  async leaseRenewBatch(p: {
    table: QueueTable;
    claims: readonly { id: string; token: string; leaseMs: number }[];
    manager?: EntityManager;
  }): Promise<RenewedClaim[]> {
    const { rows } = await this.run<{ id: string; token: string; lease_expires_at: Date }>(
      leaseRenewBatchSql(this.table[p.table]),
      [...PARAMS.claims(p.claims), p.claims.map((claim) => claim.leaseMs)],
      p.manager,
    );
    return rows.map((row) => ({ id: row.id, token: row.token, leaseExpiresAt: row.lease_expires_at }));
  }

  notificationsArrive(timeoutMs: number): Promise<boolean> {
    // node-postgres clients are event emitters (PgClient names only what the statements use).
    return onPoolConnection(this.dataSource, undefined, (listener) =>
      onPoolConnection(this.dataSource, undefined, (notifier) =>
        notificationArrives(listener as unknown as ProbeClient, notifier as unknown as ProbeClient, timeoutMs),
      ),
    );
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
    // its own transaction. A crash closes the connection and with it the lock. The lock's
    // statements read no table: the session's isolation level changes nothing for them.
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
    const history = p.kind.startsWith('outbox') ? this.attemptsTable.outbox : this.attemptsTable.inbox;
    const { rows } = await this.runAdmin<{ n: number }>(retentionDeleteSql(table, p.kind, history), [p.olderThanMs, p.limit]);
    return Number(rows[0]?.n ?? 0);
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
    if (kind === 'outbox' && request.paused !== undefined && request.paused.length > 0) {
      return this.serializedClaim<T>(lockName, this.outboxClaimPausedSql, [...params, [...request.paused]]);
    }
    const claim = this.claims[kind];
    this.claimFunctionsPresent ??= this.lookUpClaimFunctions().catch((error: unknown) => {
      this.claimFunctionsPresent = undefined; // looked up again at the next claim
      throw error;
    });
    if (await this.claimFunctionsPresent) {
      try {
        return (await this.preparedOnPool<T>(claim.call, [...params])).rows;
      } catch (error) {
        if ((error as { code?: string }).code !== UNDEFINED_FUNCTION) throw error;
        this.claimFunctionsPresent = undefined;
      }
    }
    return this.serializedClaim<T>(lockName, claim.statement, params);
  }

  /**
   * A statement of its own (a claim function's call, a repeated statement), as a prepared
   * statement of a pooled session: parsed once per connection instead of at every call (0.09 ms of
   * a W3 claim's 0.35 ms on the server, with 0.06 of binding against 0.03). A pooler in
   * transaction mode (PgBouncer before 1.21, or without `max_prepared_statements`) hands each
   * transaction another server session, where the statement does not exist, or exists from another
   * client: then it is sent again unnamed, and every later one too, with one warning.
   */
  private preparedOnPool<T>(statement: PreparedStatement, params: unknown[]): Promise<SqlResult<T>> {
    return onPoolConnection(this.dataSource, this.queryTimeoutMs, (client) => this.alonePrepared<T>(client, statement, params));
  }

  /** `alone` as a prepared statement of the session while they hold; one that was lost is sent again unprepared. */
  private async alonePrepared<T>(client: PgClient, statement: PreparedStatement, params: unknown[]): Promise<SqlResult<T>> {
    if (this.preparesStatements) {
      try {
        return await alone<T>(client, statement.text, params, this.queryTimeoutMs, statement.name);
      } catch (error) {
        if (!this.preparedStatementLost(error, statement, false)) throw error;
      }
    }
    return alone<T>(client, statement.text, params, this.queryTimeoutMs);
  }

  /** Whether `error` says the session lost `statement` (or has another under its name); the first such error stops prepared statements, with one warning. */
  private preparedStatementLost(error: unknown, statement: PreparedStatement, inTransaction: boolean): boolean {
    const code = (error as { code?: string }).code;
    if (code !== PREPARED_STATEMENT_MISSING && code !== PREPARED_STATEMENT_TAKEN) return false;
    if (this.preparesStatements) {
      this.preparesStatements = false;
      this.log.warn(messages.preparedStatementsLost(statement.name, code, inTransaction));
    }
    return true;
  }

  /**
   * Whether the three claim functions exist and hold this version's claims. Functions of this
   * signature written otherwise (edited by hand, or by a later version) are not used: their
   * claims may lack a fix (claims are where order and recovery are decided), so the claim
   * statements go instead, and one warning says which migration brings the functions up to date.
   * A call runs at READ COMMITTED as every statement outside a transaction (`alone`), so each of
   * the function's statements takes a snapshot of its own: the claim's is taken after its lock
   * was granted.
   */
  private async lookUpClaimFunctions(): Promise<boolean> {
    const kinds = Object.values(this.claims);
    const { rows } = await aloneOnPool<{ present: number; current: number }>(
      this.dataSource,
      claimFunctionsLookupSql(),
      [kinds.map((claim) => claim.signature), kinds.map((claim) => claim.body)],
      this.queryTimeoutMs,
    );
    const { present, current } = rows[0] ?? { present: 0, current: 0 };
    if (present > 0 && current < kinds.length) this.log.warn(messages.claimFunctionsOutdated(DEFAULT_MIGRATION_NAMES.keyedClaims));
    return current === kinds.length;
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
    const timeoutMs = this.queryTimeoutMs;
    const results = await onPoolConnection(this.dataSource, timeoutMs, (client) =>
      bounded(client.query({ text, query_timeout: timeoutMs }), timeoutMs),
    );
    return lastResult(results).rows as T[];
  }

  /**
   * In a transaction (the caller's, or one of QueueBox's own): on its connection or not at all
   * (`runSql` throws `TransactionLostError` when it is gone; a write meant for a transaction never
   * autocommits on another connection), at the level the transaction has. Outside any: on the
   * connection of a manager whose runner has none open (the pull workers' renewal connection;
   * `TransactionLostError` when it is gone), or straight to the driver's pool (a TypeORM
   * QueryRunner per statement is garbage on the hot path: claims, completions, renewals), at READ
   * COMMITTED (`alone`).
   *
   * A repeated statement (completions, the followers' read and completion) goes as a prepared
   * statement of the connection in a transaction and from the pool, as claims do: in a W5 drain
   * parsing and planning them took about 1.5 ms of each 100-message transaction on the server.
   */
  protected run<T>(statement: string, params: unknown[], manager?: EntityManager, repeated?: typeof REPEATED): Promise<SqlResult<T>> {
    const runner = manager?.queryRunner;
    const prepared = repeated && this.preparesStatements ? this.repeatedStatement(statement) : undefined;
    if (runner?.isTransactionActive) {
      return prepared ? this.preparedInTransaction<T>(runner, prepared, params) : runSql<T>(this.dataSource, statement, params, manager);
    }
    if (runner) return aloneOnConnectionOf<T>(runner, statement, params);
    if (prepared) return this.preparedOnPool<T>(prepared, params);
    return aloneOnPool<T>(this.dataSource, statement, params, this.queryTimeoutMs);
  }

  private repeatedStatement(text: string): PreparedStatement {
    let prepared = this.repeatedStatements.get(text);
    if (!prepared) {
      prepared = preparedStatement('queuebox', text);
      this.repeatedStatements.set(text, prepared);
    }
    return prepared;
  }

  /**
   * A prepared statement in the caller's transaction. One a pooler lost fails there, and the
   * transaction with it (its rows go back to be tried again, as after any failed attempt): unlike
   * a statement of its own, it cannot be sent again unprepared. Statements go unprepared from then on.
   */
  private preparedInTransaction<T>(runner: QueryRunner, statement: PreparedStatement, params: unknown[]): Promise<SqlResult<T>> {
    return onConnectionOf(runner, async () => {
      try {
        return await sendQuery<T>((await runner.connect()) as PgClient, { name: statement.name, text: statement.text, values: params });
      } catch (error) {
        this.preparedStatementLost(error, statement, true);
        throw error;
      }
    });
  }

  /**
   * Admin and retention statements run as long as they need: an operator waits for them, and a
   * retention batch may take longer than a claim should.
   */
  protected runAdmin<T>(statement: string, params: unknown[]): Promise<SqlResult<T>> {
    return aloneOnPool<T>(this.dataSource, statement, params);
  }

  /**
   * The statements that test instances with subqueries, with JIT compilation off (`withoutJitSql`,
   * one round trip). At the default `jit_above_cost` (100,000) their estimates had the server
   * compile them: the sweep, which every replica runs at each heartbeat, took 36-40 ms of JIT for
   * well under a millisecond of work, and 734 ms once its estimate passed the inlining and
   * optimizing thresholds (a W5 drain); with statistics taken while half the outbox was in flight,
   * the sweep 606 ms, the instances list 228, the claims view 267 and the blocked keys 278-321.
   */
  protected override runInstanceStatement<T>(statement: string, params: unknown[], kind: 'sweep' | 'admin'): Promise<SqlResult<T>> {
    const timeoutMs = kind === 'sweep' ? this.queryTimeoutMs : undefined;
    return onPoolConnection(this.dataSource, timeoutMs, (client) =>
      sendQuery<T>(client, { text: withoutJitSql(inlineValues(statement, params)), query_timeout: timeoutMs }, timeoutMs),
    );
  }

  /** What `queuebox doctor` reads (doctor.sql.ts): catalog and statistics views, no table scanned or locked. */
  async doctorFacts(p: { applied: readonly SchemaMigration[] }): Promise<DoctorFacts> {
    const kinds = ['outbox', 'inbox', 'instances'] as const;
    const names = kinds.map((kind) => pgTable(this.tables[kind]));
    const qualified = new Map(kinds.map((kind, i) => [names[i], this.tables[kind].qualified]));
    // One after another: one pool connection at a time, whatever the pool's size. Bounded as the
    // workers' statements are (`run`): the app's periodic examination must not hang on a silent
    // partition and hold a connection that shutdown waits for.
    const tables = await this.run<DoctorTableRecord>(doctorSql.doctorTablesSql(), [names]);
    const indexes = await this.run<DoctorIndexRecord>(doctorSql.doctorIndexesSql(), [names]);
    const settings = await this.run<{ autovacuum: string }>(doctorSql.doctorSettingsSql(), []);
    const horizon = await this.run<DoctorHorizonRecord>(doctorSql.doctorHorizonSql(), []);
    const waits = await this.run<DoctorLockRecord>(doctorSql.doctorLockWaitsSql(), [names]);
    const repair = doctorSql.doctorRepairs;
    const count = (value: string | number | null) => (value === null ? null : Number(value));
    const serverOn = settings.rows[0]?.autovacuum !== 'off';
    return {
      tables: tables.rows.map((r, i) => ({
        table: qualified.get(r.table) ?? r.table,
        kind: kinds[i],
        present: r.present,
        liveRows: count(r.live_rows),
        deadRows: count(r.dead_rows),
        bytes: count(r.bytes),
        autovacuumEnabled: r.present ? r.autovacuum_enabled : null,
        lastAutovacuumAt: r.last_autovacuum,
        vacuum: repair.vacuum(r.table),
        resetAutovacuum: repair.resetAutovacuum(r.table),
      })),
      indexes: indexes.rows.map((r) => ({
        table: qualified.get(r.table) ?? r.table,
        name: r.name,
        valid: r.valid,
        bytes: count(r.bytes),
        rebuild: repair.rebuildIndex(r.qualified),
        drop: repair.dropIndex(r.qualified),
      })),
      expectedIndexes: doctorSql.expectedIndexes(this.tables, p.applied),
      autovacuumServer: serverOn,
      resetServerAutovacuum: serverOn ? null : repair.serverAutovacuum(),
      horizon: horizon.rows.map((r) => ({
        kind: r.kind,
        holder: r.holder,
        detail: r.detail ?? '',
        seconds: r.seconds === null ? null : Number(r.seconds),
        xidAge: count(r.xid_age),
        active: r.active,
        end:
          r.kind === 'session'
            ? repair.endSession(r.holder)
            : r.kind === 'replication slot'
              ? repair.dropSlot(r.holder)
              : repair.rollbackPrepared(r.holder),
      })),
      lockWaits: waits.rows.map((r) => ({
        table: qualified.get(r.table) ?? r.table,
        session: r.session,
        application: r.application,
        mode: r.mode,
        seconds: Number(r.seconds),
        blockers: r.blockers ?? [],
        blocker: r.blocker,
        endBlocker: r.blockers?.[0] === undefined ? null : repair.endSession(r.blockers[0]),
      })),
    };
  }
}

interface DoctorTableRecord {
  table: string;
  present: boolean;
  live_rows: string | null;
  dead_rows: string | null;
  bytes: string | null;
  autovacuum_enabled: boolean;
  last_autovacuum: Date | null;
}

interface DoctorIndexRecord {
  table: string;
  name: string;
  qualified: string;
  valid: boolean;
  bytes: string | null;
}

interface DoctorHorizonRecord {
  kind: DoctorHorizonHolder['kind'];
  holder: string;
  detail: string | null;
  seconds: number | null;
  xid_age: string | null;
  active: boolean;
}

interface DoctorLockRecord {
  table: string;
  session: string;
  application: string;
  mode: string;
  seconds: number;
  blockers: string[] | null;
  blocker: string | null;
}

/** SQLSTATE 23505: a unique violation. */
const UNIQUE_VIOLATION = '23505';

/** SQLSTATE 42883: the function does not exist. */
const UNDEFINED_FUNCTION = '42883';

/** SQLSTATE 26000: no prepared statement of that name in the session. */
const PREPARED_STATEMENT_MISSING = '26000';

/** SQLSTATE 42P05: the session has a prepared statement of that name already. */
const PREPARED_STATEMENT_TAKEN = '42P05';

/**
 * A statement node-postgres prepares once per connection under `name`. The name carries a hash of
 * the text: node-postgres refuses one name for two texts, and two QueueBox schemas may share a pool.
 */
interface PreparedStatement {
  name: string;
  text: string;
}

function preparedStatement(prefix: string, text: string): PreparedStatement {
  return { name: `${prefix}_${createHash('sha1').update(text).digest('hex').slice(0, 12)}`, text };
}

/** A query as node-postgres takes it. */
interface PgQuery {
  /** Prepares `text` under this name on the connection's first use of it, and binds it from then on. */
  name?: string;
  text: string;
  values?: unknown[];
  /** Ends the wait client-side (ms); the connection must then be discarded (see `aloneOnPool`). */
  query_timeout?: number;
}

/** The parts of node-postgres' client QueueBox uses. */
interface PgClient {
  /** With `values`: one statement. Without: the simple query protocol, so `text` may hold several statements (one result each). */
  query(query: PgQuery): Promise<PgResult | PgResult[]>;
}

/** The parts of node-postgres' pool QueueBox uses. */
interface PgPool {
  connect(): Promise<PgClient & { release(error?: Error): void }>;
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

/**
 * Whether each connection's session runs a statement outside any transaction at READ COMMITTED
 * (its `default_transaction_isolation`), by node-postgres client: asked on QueueBox's first use of
 * the connection (one round trip per connection, not per statement), so a database, role or
 * connection option that sets another level is seen by every connection it applies to, those
 * opened after it was set among them. A `SET default_transaction_isolation` that your code sends
 * on a pooled connection after QueueBox first used it is not seen (set it on the database, the
 * role or the connection's options instead).
 */
const SESSION_READ_COMMITTED = new WeakMap<PgClient, boolean>();

/** Asks `client`'s session its default level (`SESSION_READ_COMMITTED` keeps the answer). */
async function askReadCommittedByDefault(client: PgClient, timeoutMs?: number): Promise<boolean> {
  const result = (await bounded(client.query({ text: defaultIsolationSql(), query_timeout: timeoutMs }), timeoutMs)) as PgResult;
  const readCommitted = (result.rows[0] as { isolation?: string } | undefined)?.isolation === 'read committed';
  SESSION_READ_COMMITTED.set(client, readCommitted);
  return readCommitted;
}

/**
 * One statement outside any transaction, at READ COMMITTED whatever the session's default is
 * (I11): as it is where that default is READ COMMITTED (nearly everywhere, and then nothing is
 * added to the hot path), else behind SET TRANSACTION in the same round trip (`readCommittedSql`,
 * its values inlined). At REPEATABLE READ or SERIALIZABLE a renewal or completion that meets a row
 * another transaction changed would fail with SQLSTATE 40001, and a failed renewal is a lost claim.
 * With `name`, a prepared statement of the session (see `preparedOnPool`); only where the
 * statement goes as it is, since inlined values make another text at every call.
 */
async function alone<T>(client: PgClient, statement: string, params: unknown[], timeoutMs?: number, name?: string): Promise<SqlResult<T>> {
  const readCommitted = SESSION_READ_COMMITTED.get(client) ?? (await askReadCommittedByDefault(client, timeoutMs));
  const query = readCommitted
    ? { name, text: statement, values: params, query_timeout: timeoutMs }
    : { text: readCommittedSql(inlineValues(statement, params)), query_timeout: timeoutMs };
  return sendQuery<T>(client, query, timeoutMs);
}

/** Sends `query` on `client`, bounded by `timeoutMs`; the rows and row count of its last statement. */
async function sendQuery<T>(client: PgClient, query: PgQuery, timeoutMs?: number): Promise<SqlResult<T>> {
  const result = lastResult(await bounded(client.query(query), timeoutMs));
  return { rows: result.rows as T[], affected: result.rowCount ?? 0 };
}

/**
 * The result of a query string's last statement: the one QueueBox sent behind the statements that
 * set up its transaction (SET TRANSACTION, SET LOCAL, a claim lock). node-postgres returns one
 * result per statement when the simple query protocol ran several, and the result itself otherwise.
 */
function lastResult(results: PgResult | PgResult[]): PgResult {
  return Array.isArray(results) ? results[results.length - 1] : results;
}

/** `alone` on a connection of the driver's pool, bounded by `timeoutMs` when given. */
function aloneOnPool<T>(dataSource: DataSource, statement: string, params: unknown[], timeoutMs?: number): Promise<SqlResult<T>> {
  return onPoolConnection(dataSource, timeoutMs, (client) => alone<T>(client, statement, params, timeoutMs));
}

/**
 * `work` on a connection of the driver's pool, waited for up to `timeoutMs` when given: without
 * the pool's own `connectionTimeoutMillis`, a connect through a silent partition never ends, and
 * it held the claim, and with it shutdown, forever. A connection that comes after the wait gave
 * up goes back to the pool unused. As pg-pool's own `query`, a connection whose work failed (or
 * timed out) is discarded, so nothing late arrives on a connection someone else uses.
 */
async function onPoolConnection<T>(
  dataSource: DataSource,
  timeoutMs: number | undefined,
  work: (client: PgClient) => Promise<T>,
): Promise<T> {
  const connecting = poolOf(dataSource).connect();
  const client =
    timeoutMs === undefined
      ? await connecting
      : await withinTimeout(
          connecting,
          timeoutMs,
          () => new QueueBoxError('QUEUEBOX_QUERY_TIMEOUT', messages.connectTimedOut(timeoutMs)),
          () => connecting.then((late) => late.release(), ignoreError),
        );
  let failure: Error | undefined;
  try {
    return await work(client);
  } catch (error) {
    failure = error instanceof Error ? error : new Error(String(error));
    throw error;
  } finally {
    client.release(failure);
  }
}

const ignoreError = () => undefined;

/**
 * `alone` on the connection of `runner`, which has no transaction open (a connection set aside),
 * or `TransactionLostError`. Unbounded: a statement cut off by `query_timeout` would leave the
 * connection busy.
 */
function aloneOnConnectionOf<T>(runner: QueryRunner, statement: string, params: unknown[]): Promise<SqlResult<T>> {
  return onConnectionOf(runner, async () => alone<T>((await runner.connect()) as PgClient, statement, params));
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

/** The selection's parameters $1..$7. */
function selectionParams(s: DeadSelection): unknown[] {
  return [s.name, s.errorContains, s.deadAfter, s.deadBefore, s.ids, s.key ?? null, s.fingerprint ?? null];
}

/** The retention lock's name; PostgreSQL keys the advisory lock on `hashtextextended(name, 0)`. */
export function retentionLockName(tables: QueueBoxTables): string {
  return `queuebox_retention_${tables.outbox.qualified}`;
}
