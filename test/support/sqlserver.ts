// What the SQL Server unit tests (test/unit/sqlserver/) share, without a server: every statement
// builder and every statement QueueBox sends, the T-SQL grammar that parses them, and a scripted
// DataSource that records how the dialect drives TypeORM (which connection, which transaction,
// which typed parameters). What the statements do on a server is the conformance suite's job.
import assert from 'node:assert/strict';
import { antlr4tsSQL, SQLDialect } from 'antlr4ts-sql';
import { DataSource, type DataSourceOptions, MssqlParameter } from 'typeorm';
import { attemptsTableOf } from '../../lib/common/identifiers';
import type { QueueBoxTables } from '../../lib/dialects/dialect';
import * as admin from '../../lib/dialects/sqlserver/admin.sql';
import * as checks from '../../lib/dialects/sqlserver/checks.sql';
import * as claims from '../../lib/dialects/sqlserver/claims.sql';
import * as followers from '../../lib/dialects/sqlserver/followers.sql';
import * as inbox from '../../lib/dialects/sqlserver/inbox.sql';
import * as instances from '../../lib/dialects/sqlserver/instances.sql';
import * as lease from '../../lib/dialects/sqlserver/lease.sql';
import { sqlServerMigrations } from '../../lib/dialects/sqlserver/migrations';
import * as outbox from '../../lib/dialects/sqlserver/outbox.sql';
import * as pauses from '../../lib/dialects/sqlserver/pauses.sql';
import { mssqlTable } from '../../lib/dialects/sqlserver/quoting';
import * as retention from '../../lib/dialects/sqlserver/retention.sql';
import { resolveTables } from '../../lib/options/options.resolver';

/** Every SQL Server statement builder: the exports of its *.sql.ts files. */
export const sql = { ...outbox, ...inbox, ...claims, ...followers, ...lease, ...checks, ...admin, ...retention, ...pauses };

export const TABLES = resolveTables(undefined);

/** A DataSource for SQL Server that is never initialized: creating it loads the mssql driver but connects nowhere. */
export const mssqlDataSource = (options: Record<string, unknown> = {}) =>
  new DataSource({ type: 'mssql', host: '127.0.0.1', username: 'sa', password: 'x', database: 'app', ...options } as DataSourceOptions);

export interface Call {
  runner: number;
  what: 'startTransaction' | 'commitTransaction' | 'rollbackTransaction' | 'release' | 'query';
  isolation?: string;
  /** The statement as its builder wrote it, without the READ COMMITTED pin the dialect puts before statements outside a transaction. */
  sql?: string;
  /** Whether it was sent after PINNED_READ_COMMITTED. */
  pinned?: boolean;
  /** Whether it was sent after the admin statements' ADMIN (low deadlock priority, bounded lock wait). */
  admin?: boolean;
  params?: unknown[];
}

/** A claim batch (it takes the claim lock). */
export const isClaim = (statement: string) => statement.includes('EXEC @claim_lock = sp_getapplock');

/** A DataSource stand-in whose QueryRunners record what they are asked and answer from `respond`. */
export function scriptedDataSource(respond: (sql: string, params: unknown[]) => { records?: unknown[]; affected?: number } | Error) {
  const calls: Call[] = [];
  let runners = 0;
  const options: { type: 'mssql'; isolationLevel?: string } = { type: 'mssql' };
  const createQueryRunner = () => {
    const runner = ++runners;
    const queryRunner = {
      id: runner,
      isReleased: false,
      isTransactionActive: false,
      // As TypeORM's SqlServerQueryRunner: a transaction begun without a level takes the DataSource's.
      async startTransaction(isolation?: string) {
        calls.push({ runner, what: 'startTransaction', isolation: isolation ?? options.isolationLevel });
        queryRunner.isTransactionActive = true;
      },
      async commitTransaction() {
        calls.push({ runner, what: 'commitTransaction' });
        queryRunner.isTransactionActive = false;
      },
      async rollbackTransaction() {
        calls.push({ runner, what: 'rollbackTransaction' });
        queryRunner.isTransactionActive = false;
      },
      async release() {
        calls.push({ runner, what: 'release' });
        queryRunner.isReleased = true;
      },
      async query(sent: string, params: unknown[] = [], structured = false) {
        const pinned = sent.startsWith(lease.PINNED_READ_COMMITTED);
        const unpinned = pinned ? sent.slice(lease.PINNED_READ_COMMITTED.length) : sent;
        const admin = unpinned.startsWith(sql.ADMIN);
        const statement = admin ? unpinned.slice(sql.ADMIN.length) : unpinned;
        calls.push({ runner, what: 'query', sql: statement, pinned, admin, params });
        const answer = respond(statement, params);
        if (answer instanceof Error) throw answer;
        // As TypeORM: the records alone unless a structured result is asked for.
        return structured ? { records: answer.records ?? [], affected: answer.affected ?? 0 } : (answer.records ?? []);
      },
      get manager() {
        return { queryRunner };
      },
    };
    return queryRunner;
  };
  const dataSource = {
    options,
    createQueryRunner,
    // As TypeORM: transaction(work) or transaction(isolationLevel, work).
    async transaction<T>(
      levelOrWork: string | ((manager: unknown) => Promise<T>),
      maybeWork?: (manager: unknown) => Promise<T>,
    ): Promise<T> {
      const [level, work] = typeof levelOrWork === 'string' ? [levelOrWork, maybeWork] : [undefined, levelOrWork];
      if (!work) throw new Error('transaction(level) without a callback');
      const runner = createQueryRunner();
      await runner.startTransaction(level);
      try {
        const result = await work(runner.manager);
        await runner.commitTransaction();
        return result;
      } catch (error) {
        await runner.rollbackTransaction();
        throw error;
      } finally {
        await runner.release();
      }
    },
  };
  return { dataSource: dataSource as unknown as DataSource, calls };
}

export const typed = (params: unknown[] | undefined) =>
  (params ?? []).map((p) => (p instanceof MssqlParameter ? [p.type, p.value, ...p.params.filter((x) => x !== undefined)] : p));

export const sqlError = (number: number) => Object.assign(new Error(`SQL Server error ${number}`), { number });

/** Syntax errors the T-SQL grammar of ANTLR's grammars-v4 (the TSqlParser antlr4ts-sql ships) reports for `statement` (none: it parses). */
export function tsqlSyntaxErrors(statement: string): string[] {
  const antlr = new antlr4tsSQL(SQLDialect.TSQL);
  const errors: string[] = [];
  const listener = {
    syntaxError: (_recognizer: unknown, _symbol: unknown, line: number, column: number, message: string) => {
      errors.push(`${line}:${column} ${message.slice(0, 160)}`);
    },
  };
  antlr.getParseTree(antlr.getParser(antlr.getTokens(statement, [listener]), [listener]));
  return errors;
}

export const tablesFor = (outbox: string, inbox: string): QueueBoxTables => resolveTables({ outbox, inbox });
export const TABLE_SETS = [tablesFor('queuebox_outbox', 'queuebox_inbox'), tablesFor('messaging.events_out', 'messaging.events_in')];

export type Builder = (table: string, finished: { state: 'sent' | 'processed'; column: 'sent_at' | 'processed_at' }) => string;

/** The instances table's statements: each takes the instances, outbox and inbox tables. */
export function instanceStatements(): { name: string; statement: string; params: number }[] {
  return TABLE_SETS.flatMap((tables) => {
    const [n, o, i] = [mssqlTable(tables.instances), mssqlTable(tables.outbox), mssqlTable(tables.inbox)];
    return [
      { name: `instanceRegisterSql(${n})`, statement: instances.instanceRegisterSql(n), params: 6 },
      { name: `instanceHeartbeatSql(${n})`, statement: instances.instanceHeartbeatSql(n), params: 3 },
      { name: `instanceEndDeadSql(${n})`, statement: instances.instanceEndDeadSql(n, o, i), params: 2 },
      { name: `instanceDeregisterSql(${n})`, statement: instances.instanceDeregisterSql(n, o, i), params: 1 },
      { name: `instanceListSql(${n})`, statement: instances.instanceListSql(n, o, i), params: 0 },
    ];
  });
}

/** The admin and retention builders, whose parameters differ (a component, a kind); `adminStatements` covers them. */
export const ADMIN_BUILDERS = new Set([
  'adminBacklogSql',
  'deadLetterListSql',
  'deadLetterCountSql',
  'deadLetterReplaySql',
  'deadLetterDiscardSql',
  'blockedKeyListSql',
  'blockedKeySkipHeadSql',
  'adminThroughputSql',
  'adminClaimListSql',
  'retentionTryLockSql',
  'retentionDeleteSql',
  'deadLetterGroupsSql',
  'deadLetterClassesSql',
  'attemptListSql',
  // Take the attempt history table beside the table (the attempts migration): listed in adminStatements.
  'leaseRetryRecordedSql',
  'leaseDeadLetterRecordedSql',
  'outboxReclaimRecordedSql',
  'inboxReclaimRecordedSql',
  'leaseDeleteSql',
  'leaseDeleteBatchSql',
  'outboxDeleteWithFollowersSql',
]);

/** Exported fragments of statements, not statements: each is checked inside the statements that use it. */
export const FRAGMENTS = new Set(['housekeepingTarget', 'historyOfGone']);

export const COMPONENTS = ['outbox', 'inbox'] as const;
export const RETENTION_KINDS = ['outbox-sent', 'inbox-processed', 'outbox-dead', 'inbox-dead'] as const;

/** Every variant of every admin and retention statement, for each table set. */
export function adminStatements(): { name: string; statement: string }[] {
  return TABLE_SETS.flatMap((tables) => {
    const table = { outbox: mssqlTable(tables.outbox), inbox: mssqlTable(tables.inbox), instances: mssqlTable(tables.instances) };
    return [
      { name: `adminBacklogSql(${table.outbox})`, statement: sql.adminBacklogSql(table.outbox, table.inbox) },
      { name: `adminThroughputSql(${table.outbox})`, statement: sql.adminThroughputSql(table.outbox, table.inbox) },
      { name: 'retentionTryLockSql', statement: sql.retentionTryLockSql() },
      ...COMPONENTS.flatMap((c) => [
        { name: `deadLetterListSql(${table[c]})`, statement: sql.deadLetterListSql(table[c], c, false) },
        { name: `deadLetterListSql(${table[c]}, payload)`, statement: sql.deadLetterListSql(table[c], c, true) },
        { name: `deadLetterListSql(${table[c]}, newest first)`, statement: sql.deadLetterListSql(table[c], c, false, true) },
        { name: `adminClaimListSql(${table[c]})`, statement: sql.adminClaimListSql(table[c], c, table) },
        { name: `deadLetterCountSql(${table[c]})`, statement: sql.deadLetterCountSql(table[c], c) },
        { name: `deadLetterReplaySql(${table[c]})`, statement: sql.deadLetterReplaySql(table[c], c) },
        { name: `deadLetterDiscardSql(${table[c]})`, statement: sql.deadLetterDiscardSql(table[c], c) },
        { name: `blockedKeyListSql(${table[c]})`, statement: sql.blockedKeyListSql(table[c], c, table) },
        { name: `blockedKeySkipHeadSql(${table[c]})`, statement: sql.blockedKeySkipHeadSql(table[c], c) },
        { name: `deadLetterGroupsSql(${table[c]})`, statement: sql.deadLetterGroupsSql(table[c], c) },
        { name: `deadLetterClassesSql(${table[c]})`, statement: sql.deadLetterClassesSql(table[c], c) },
        { name: `attemptListSql(${table[c]})`, statement: sql.attemptListSql(mssqlTable(attemptsTableOf(tables[c]))) },
        {
          name: `leaseRetryRecordedSql(${table[c]})`,
          statement: sql.leaseRetryRecordedSql(table[c], mssqlTable(attemptsTableOf(tables[c]))),
        },
        {
          name: `${c}ReclaimRecordedSql(${table[c]})`,
          statement: sql[`${c}ReclaimRecordedSql`](table[c], mssqlTable(attemptsTableOf(tables[c]))),
        },
        {
          name: `leaseDeadLetterRecordedSql(${table[c]})`,
          statement: sql.leaseDeadLetterRecordedSql(table[c], mssqlTable(attemptsTableOf(tables[c]))),
        },
      ]),
      // outbox.sentRows: 'delete' (the outbox only).
      { name: `leaseDeleteSql(${table.outbox})`, statement: sql.leaseDeleteSql(table.outbox, mssqlTable(attemptsTableOf(tables.outbox))) },
      {
        name: `leaseDeleteBatchSql(${table.outbox})`,
        statement: sql.leaseDeleteBatchSql(table.outbox, mssqlTable(attemptsTableOf(tables.outbox))),
      },
      {
        name: `outboxDeleteWithFollowersSql(${table.outbox})`,
        statement: sql.outboxDeleteWithFollowersSql(table.outbox, mssqlTable(attemptsTableOf(tables.outbox))),
      },
      ...RETENTION_KINDS.map((kind) => {
        const t = kind.startsWith('outbox') ? table.outbox : table.inbox;
        return { name: `retentionDeleteSql(${t}, ${kind})`, statement: sql.retentionDeleteSql(t, kind) };
      }),
    ];
  });
}

/** Every builder exported by the sqlserver/*.sql.ts files, with each table it can run on; a new builder is covered without a change here. */
export function builderStatements(): { name: string; statement: string }[] {
  const builders = Object.entries(sql).filter(
    (entry): entry is [string, Builder] => typeof entry[1] === 'function' && !ADMIN_BUILDERS.has(entry[0]) && !FRAGMENTS.has(entry[0]),
  );
  assert.ok(builders.length >= 18, `found ${builders.length} builders`);
  return builders.flatMap(([name, build]) =>
    TABLE_SETS.flatMap((tables) => [
      { name: `${name}(${mssqlTable(tables.outbox)})`, statement: build(mssqlTable(tables.outbox), { state: 'sent', column: 'sent_at' }) },
      {
        name: `${name}(${mssqlTable(tables.inbox)})`,
        statement: build(mssqlTable(tables.inbox), { state: 'processed', column: 'processed_at' }),
      },
    ]),
  );
}

/** Every migration's up and down statements (the driver's one list: a migration added there is parsed here too). */
function schemaScriptStatements(): { name: string; statement: string }[] {
  return TABLE_SETS.flatMap((tables) =>
    Object.entries(sqlServerMigrations).flatMap(([migration, { up, down }]) => [
      ...up(tables).map((statement, n) => ({ name: `${migration} up #${n} (${tables.outbox.qualified})`, statement })),
      ...down(tables).map((statement, n) => ({ name: `${migration} down #${n} (${tables.outbox.qualified})`, statement })),
    ]),
  );
}

/** Every statement QueueBox sends to SQL Server: the schema scripts, every builder and every admin variant, for each table set. */
export const ALL_STATEMENTS = [...schemaScriptStatements(), ...builderStatements(), ...adminStatements(), ...instanceStatements()];
/** The table the shape tests build their statements for (schema-qualified, so quoting shows). */
export const T = '[messaging].[events_out]';
export const FINISHED_SENT = { state: 'sent', column: 'sent_at' } as const;

/** The placeholders a statement uses, as numbers, sorted and without repeats. */
export const placeholders = (statement: string) =>
  [...new Set([...statement.matchAll(/@(\d+)\b/g)].map((m) => Number(m[1])))].sort((a, b) => a - b);

/**
 * The statements a claim or a followers read runs in a TRY that passes over a row-lock timeout
 * (error 1222) and nothing else, each with what it does instead (its CATCH's last line, if any).
 */
export function lockTolerant(statement: string): { body: string; orElse: string | undefined }[] {
  const blocks = statement.matchAll(
    /BEGIN TRY\n((?:(?!BEGIN TRY)[\s\S])*?)\nEND TRY\nBEGIN CATCH\n {2}IF ERROR_NUMBER\(\) <> 1222 OR XACT_STATE\(\) = -1\n {4}THROW;\n(?: {2}(.*)\n)?END CATCH;/g,
  );
  return [...blocks].map((m) => ({ body: m[1], orElse: m[2] }));
}
