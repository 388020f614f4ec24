import { attemptsTableOf, pausesTableOf, rateLimitsTableOf, type TableName } from '../../common/identifiers';
import type { QueueBoxTables } from '../dialect';
import { mssqlTable } from './quoting';

/**
 * The collation of the key columns (migration 004). Table variables take the database's default
 * collation, and OPENJSON's columns too: every one compared with a key column names this one, or
 * SQL Server refuses the comparison (error 468) or compares under the wrong rules.
 */
export const KEY_COLLATION = 'Latin1_General_100_BIN2';

/**
 * The lease columns both tables share, in PostgreSQL's order. Times are UTC `DATETIME2` written by
 * `SYSUTCDATETIME()`; text that claims compare is NVARCHAR, the type the driver sends strings as.
 */
function leaseColumns(name: string): string {
  return `  [state] NVARCHAR(16) NOT NULL CONSTRAINT [${name}_state_default] DEFAULT N'pending',
  [attempts] INT NOT NULL CONSTRAINT [${name}_attempts_default] DEFAULT 0,
  [available_at] DATETIME2 NOT NULL CONSTRAINT [${name}_available_at_default] DEFAULT SYSUTCDATETIME(),
  [claim_token] UNIQUEIDENTIFIER NULL,
  [claimed_at] DATETIME2 NULL,
  [lease_expires_at] DATETIME2 NULL,`;
}

/**
 * Payloads may be any JSON value. `ISJSON(x)` accepts only objects and arrays before SQL Server
 * 2022 (its `VALUE` argument is new there), so the check tests the value wrapped in an array.
 */
function jsonChecks(name: string): string {
  return `  CONSTRAINT [${name}_payload_check] CHECK (ISJSON(N'[' + [payload] + N']') = 1),
  CONSTRAINT [${name}_headers_check] CHECK (ISJSON([headers]) = 1)`;
}

/**
 * The schema, one statement per entry (no `GO`: the migration runs them one by one). Filtered
 * indexes play the part of PostgreSQL's partial indexes: they hold unfinished rows only, so the
 * claim, head-of-key and reclaim lookups cost the same however many finished rows are kept.
 */
export function sqlServerSchemaUp(tables: QueueBoxTables): string[] {
  const schemas = [...new Set([tables.outbox.schema, tables.inbox.schema].filter((s): s is string => !!s))];
  const outbox = mssqlTable(tables.outbox);
  const inbox = mssqlTable(tables.inbox);
  const o = tables.outbox.name;
  const i = tables.inbox.name;
  const unfinished = "[state] IN (N'pending', N'processing')";
  return [
    // Filtered indexes refuse to be created (and their tables to be written) without these; sqlcmd,
    // for one, starts with QUOTED_IDENTIFIER OFF.
    'SET ANSI_NULLS ON',
    'SET QUOTED_IDENTIFIER ON',
    // CREATE SCHEMA must be alone in its batch, hence EXEC.
    ...schemas.map((schema) => `IF SCHEMA_ID(N'${schema}') IS NULL EXEC(N'CREATE SCHEMA [${schema}]')`),
    `CREATE TABLE ${outbox} (
  [id] BIGINT IDENTITY(1, 1) NOT NULL,
  [message_id] UNIQUEIDENTIFIER NOT NULL,
  [destination] NVARCHAR(255) NOT NULL,
  [key] NVARCHAR(255) NULL,
  [payload] NVARCHAR(MAX) NOT NULL,
  [headers] NVARCHAR(MAX) NOT NULL CONSTRAINT [${o}_headers_default] DEFAULT N'{}',
${leaseColumns(o)}
  [created_at] DATETIME2 NOT NULL CONSTRAINT [${o}_created_at_default] DEFAULT SYSUTCDATETIME(),
  [sent_at] DATETIME2 NULL,
  [last_error] NVARCHAR(MAX) NULL,
  CONSTRAINT [${o}_pkey] PRIMARY KEY CLUSTERED ([id]),
  CONSTRAINT [${o}_message_id_key] UNIQUE ([message_id]),
  CONSTRAINT [${o}_state_check] CHECK ([state] IN (N'pending', N'processing', N'sent', N'dead')),
${jsonChecks(o)}
)`,
    // READPAST skips locked rows, not a locked table: a transaction that enqueues thousands of
    // messages must not escalate to a table lock that stalls every claim until it commits.
    `ALTER TABLE ${outbox} SET (LOCK_ESCALATION = DISABLE)`,
    // The claim scans available pending rows oldest first (the key comes along for the head-of-key check).
    `CREATE INDEX [${o}_claim_idx] ON ${outbox} ([available_at], [id]) INCLUDE ([key]) WHERE [state] = N'pending'`,
    // Finds whether a key has an earlier unfinished row (the head-of-key check).
    `CREATE INDEX [${o}_key_idx] ON ${outbox} ([key], [id]) INCLUDE ([state]) WHERE ${unfinished} AND [key] IS NOT NULL`,
    // I4 enforced by the database itself: one row per key in flight, whatever the claim does.
    `CREATE UNIQUE INDEX [${o}_key_in_flight_idx] ON ${outbox} ([key]) WHERE [state] = N'processing' AND [key] IS NOT NULL`,
    `CREATE INDEX [${o}_lease_idx] ON ${outbox} ([lease_expires_at]) WHERE [state] = N'processing'`,
    `CREATE TABLE ${inbox} (
  [id] BIGINT IDENTITY(1, 1) NOT NULL,
  [source] NVARCHAR(255) NOT NULL,
  [idempotency_key] NVARCHAR(255) NOT NULL,
  [aggregate_id] NVARCHAR(255) NULL,
  [payload] NVARCHAR(MAX) NOT NULL,
  [headers] NVARCHAR(MAX) NOT NULL CONSTRAINT [${i}_headers_default] DEFAULT N'{}',
${leaseColumns(i)}
  [received_at] DATETIME2 NOT NULL CONSTRAINT [${i}_received_at_default] DEFAULT SYSUTCDATETIME(),
  [processed_at] DATETIME2 NULL,
  [last_error] NVARCHAR(MAX) NULL,
  CONSTRAINT [${i}_pkey] PRIMARY KEY CLUSTERED ([id]),
  CONSTRAINT [${i}_source_idempotency_key_key] UNIQUE ([source], [idempotency_key]),
  CONSTRAINT [${i}_state_check] CHECK ([state] IN (N'pending', N'processing', N'processed', N'dead')),
${jsonChecks(i)}
)`,
    `ALTER TABLE ${inbox} SET (LOCK_ESCALATION = DISABLE)`,
    `CREATE INDEX [${i}_claim_idx] ON ${inbox} ([source], [available_at], [id]) INCLUDE ([aggregate_id]) WHERE [state] = N'pending'`,
    `CREATE INDEX [${i}_aggregate_idx] ON ${inbox} ([source], [aggregate_id], [id]) INCLUDE ([state]) WHERE ${unfinished} AND [aggregate_id] IS NOT NULL`,
    `CREATE UNIQUE INDEX [${i}_aggregate_in_flight_idx] ON ${inbox} ([source], [aggregate_id]) WHERE [state] = N'processing' AND [aggregate_id] IS NOT NULL`,
    `CREATE INDEX [${i}_lease_idx] ON ${inbox} ([source], [lease_expires_at]) INCLUDE ([aggregate_id]) WHERE [state] = N'processing'`,
  ];
}

export function sqlServerSchemaDown(tables: QueueBoxTables): string[] {
  return [`DROP TABLE IF EXISTS ${mssqlTable(tables.inbox)}`, `DROP TABLE IF EXISTS ${mssqlTable(tables.outbox)}`];
}

/**
 * Migration 002 (operations): filtered indexes on finished and dead rows, for retention's batched
 * deletes and the admin's dead-row counts, listing, replay and discard (see the PostgreSQL twin).
 */
export function sqlServerOperationsUp(tables: QueueBoxTables): string[] {
  const outbox = mssqlTable(tables.outbox);
  const inbox = mssqlTable(tables.inbox);
  const o = tables.outbox.name;
  const i = tables.inbox.name;
  return [
    'SET ANSI_NULLS ON',
    'SET QUOTED_IDENTIFIER ON',
    `CREATE INDEX [${o}_sent_idx] ON ${outbox} ([sent_at]) WHERE [state] = N'sent'`,
    `CREATE INDEX [${o}_dead_idx] ON ${outbox} ([destination], [id]) WHERE [state] = N'dead'`,
    `CREATE INDEX [${i}_processed_idx] ON ${inbox} ([processed_at]) WHERE [state] = N'processed'`,
    `CREATE INDEX [${i}_dead_idx] ON ${inbox} ([source], [id]) WHERE [state] = N'dead'`,
  ];
}

export function sqlServerOperationsDown(tables: QueueBoxTables): string[] {
  const outbox = mssqlTable(tables.outbox);
  const inbox = mssqlTable(tables.inbox);
  const o = tables.outbox.name;
  const i = tables.inbox.name;
  return [
    `DROP INDEX IF EXISTS [${i}_dead_idx] ON ${inbox}`,
    `DROP INDEX IF EXISTS [${i}_processed_idx] ON ${inbox}`,
    `DROP INDEX IF EXISTS [${o}_dead_idx] ON ${outbox}`,
    `DROP INDEX IF EXISTS [${o}_sent_idx] ON ${outbox}`,
  ];
}

/**
 * Migration 003 (claims): the filtered indexes of pending rows without a key or aggregate (see the
 * PostgreSQL twin). No functions here: SQL Server keeps the plans of parameterized batches itself.
 */
export function sqlServerClaimsUp(tables: QueueBoxTables): string[] {
  const o = tables.outbox.name;
  const i = tables.inbox.name;
  return [
    'SET ANSI_NULLS ON',
    'SET QUOTED_IDENTIFIER ON',
    `CREATE INDEX [${o}_unkeyed_claim_idx] ON ${mssqlTable(tables.outbox)} ([available_at], [id]) WHERE [state] = N'pending' AND [key] IS NULL`,
    `CREATE INDEX [${i}_unkeyed_claim_idx] ON ${mssqlTable(tables.inbox)} ([source], [available_at], [id]) WHERE [state] = N'pending' AND [aggregate_id] IS NULL`,
  ];
}

export function sqlServerClaimsDown(tables: QueueBoxTables): string[] {
  return [
    `DROP INDEX IF EXISTS [${tables.inbox.name}_unkeyed_claim_idx] ON ${mssqlTable(tables.inbox)}`,
    `DROP INDEX IF EXISTS [${tables.outbox.name}_unkeyed_claim_idx] ON ${mssqlTable(tables.outbox)}`,
  ];
}

// KEY_COLLATION is the binary collation of every text column a claim, the dedupe or an admin filter
// compares. The database's default collation is usually case-insensitive, which merges `evt_A` and
// `evt_a` (a dropped receive, two keys ordered as one); BIN2 compares code points. Trailing spaces
// are still ignored by `=` under any collation (ANSI padding), so the dialect refuses them instead.

/** The compared text columns per table, as declared in 001 apart from the collation. */
const KEY_COLUMNS = {
  outbox: [
    ['destination', 'NOT NULL'],
    ['key', 'NULL'],
  ],
  inbox: [
    ['source', 'NOT NULL'],
    ['idempotency_key', 'NOT NULL'],
    ['aggregate_id', 'NULL'],
  ],
} as const;

/**
 * The indexes (001-003) that name a key column as a key, an included column or in their filter:
 * SQL Server refuses to change the collation of a column an index depends on.
 */
function keyIndexes(tables: QueueBoxTables): { outbox: string[]; inbox: string[] } {
  const o = tables.outbox.name;
  const i = tables.inbox.name;
  return {
    outbox: [`${o}_claim_idx`, `${o}_key_idx`, `${o}_key_in_flight_idx`, `${o}_dead_idx`, `${o}_unkeyed_claim_idx`],
    inbox: [
      `${i}_claim_idx`,
      `${i}_aggregate_idx`,
      `${i}_aggregate_in_flight_idx`,
      `${i}_lease_idx`,
      `${i}_dead_idx`,
      `${i}_unkeyed_claim_idx`,
    ],
  };
}

/**
 * Migration 004's first statement: refuses, naming them, the objects that would make `ALTER COLUMN
 * ... COLLATE` fail (SQL Server, ALTER TABLE: a CHECK or FOREIGN KEY constraint, a computed column,
 * an index, statistics or a full-text index on the column, a schema-bound view or function) other
 * than the indexes of 001-003 and the inbox's unique constraint, which 004 drops and creates again
 * itself. Statistics SQL Server created on its own (`auto_created`) are dropped by ALTER COLUMN
 * and do not count. Refused before anything changed: through TypeORM the error ends the migration;
 * in the plain script `SET NOEXEC ON` makes sqlcmd or SSMS compile the batches that follow
 * without running them, up to the `SET NOEXEC OFF` that ends the script (a script that went on
 * after this error would create the indexes again under the old collation).
 */
function blockingObjectsCheck(tables: QueueBoxTables, direction: 'up' | 'down'): string {
  const own = [...keyIndexes(tables).outbox, ...keyIndexes(tables).inbox, `${tables.inbox.name}_source_idempotency_key_key`];
  const columns = (kind: LeaseTableName, table: string) =>
    `(c.[object_id] = OBJECT_ID(N'${table}') AND c.[name] IN (${KEY_COLUMNS[kind].map(([column]) => `N'${column}'`).join(', ')}))`;
  const on = `QUOTENAME(OBJECT_SCHEMA_NAME(c.[object_id])) + N'.' + QUOTENAME(OBJECT_NAME(c.[object_id])) + N'.' + QUOTENAME(c.[name])`;
  return `DECLARE @key_columns TABLE ([object_id] INT NOT NULL, [column_id] INT NOT NULL, [name] SYSNAME NOT NULL);
INSERT INTO @key_columns ([object_id], [column_id], [name])
SELECT c.[object_id], c.[column_id], c.[name] FROM sys.columns AS c
WHERE ${columns('outbox', mssqlTable(tables.outbox))}
   OR ${columns('inbox', mssqlTable(tables.inbox))};
DECLARE @blocking NVARCHAR(MAX) = STUFF((
  SELECT N', ' + d.[what] FROM (
    SELECT N'statistics ' + QUOTENAME(s.[name]) + N' on ' + ${on} AS [what]
    FROM sys.stats AS s
    INNER JOIN sys.stats_columns AS sc ON sc.[object_id] = s.[object_id] AND sc.[stats_id] = s.[stats_id]
    INNER JOIN @key_columns AS c ON c.[object_id] = sc.[object_id] AND c.[column_id] = sc.[column_id]
    WHERE s.[user_created] = 1
    UNION
    SELECT N'index ' + QUOTENAME(i.[name]) + N' on ' + ${on}
    FROM sys.indexes AS i
    INNER JOIN @key_columns AS c ON c.[object_id] = i.[object_id]
    WHERE i.[type] > 0 AND i.[name] NOT IN (${own.map((name) => `N'${name}'`).join(', ')})
      AND (EXISTS (SELECT 1 FROM sys.index_columns AS ic
             WHERE ic.[object_id] = i.[object_id] AND ic.[index_id] = i.[index_id] AND ic.[column_id] = c.[column_id])
           OR (i.[has_filter] = 1 AND i.[filter_definition] LIKE N'%[[]' + c.[name] + N']%'))
    UNION
    SELECT N'foreign key ' + QUOTENAME(OBJECT_NAME(f.[constraint_object_id])) + N' on ' + ${on}
    FROM sys.foreign_key_columns AS f
    INNER JOIN @key_columns AS c
      ON (c.[object_id] = f.[parent_object_id] AND c.[column_id] = f.[parent_column_id])
      OR (c.[object_id] = f.[referenced_object_id] AND c.[column_id] = f.[referenced_column_id])
    UNION
    SELECT CASE WHEN x.[referencing_minor_id] > 0
             THEN N'computed column ' + QUOTENAME(COL_NAME(x.[referencing_id], x.[referencing_minor_id]))
             ELSE QUOTENAME(OBJECT_SCHEMA_NAME(x.[referencing_id])) + N'.' + QUOTENAME(OBJECT_NAME(x.[referencing_id])) END
           + N' on ' + ${on}
    FROM sys.sql_expression_dependencies AS x
    INNER JOIN @key_columns AS c ON c.[object_id] = x.[referenced_id] AND c.[column_id] = x.[referenced_minor_id]
    WHERE NOT (x.[referencing_id] = c.[object_id] AND x.[referencing_minor_id] = 0)
    UNION
    SELECT N'full-text index on ' + ${on}
    FROM sys.fulltext_index_columns AS ft
    INNER JOIN @key_columns AS c ON c.[object_id] = ft.[object_id] AND c.[column_id] = ft.[column_id]
  ) AS d
  ORDER BY d.[what]
  FOR XML PATH(''), TYPE).value(N'.', N'NVARCHAR(MAX)'), 1, 2, N'');
IF @blocking IS NOT NULL
BEGIN
  RAISERROR(N'QueueBox migration 004 (${direction}) changed nothing: %s depend on the key columns, and SQL Server refuses to change the collation of a column they depend on. Drop them (create them again after the migration), then run it again. See docs/sqlserver.md.', 16, 1, @blocking);
  SET NOEXEC ON;
END`;
}

/**
 * Migration 004 down's second statement: refuses when the unique constraint or the unique
 * in-flight indexes could not be created again under the database's default collation (usually
 * case-insensitive), because 004 let in keys that differ only in case or accents. Refused before
 * anything changed, as blockingObjectsCheck is.
 */
function collisionsCheck(tables: QueueBoxTables): string {
  const outbox = mssqlTable(tables.outbox);
  const inbox = mssqlTable(tables.inbox);
  const o = tables.outbox.name;
  const i = tables.inbox.name;
  const d = 'COLLATE DATABASE_DEFAULT';
  return `DECLARE @collisions NVARCHAR(MAX) = CONCAT(
  CASE WHEN EXISTS (SELECT 1 FROM ${inbox} GROUP BY [source] ${d}, [idempotency_key] ${d} HAVING COUNT(*) > 1)
    THEN N' [${i}_source_idempotency_key_key] (source, idempotency_key)' END,
  CASE WHEN EXISTS (SELECT 1 FROM ${outbox} WHERE [state] = N'processing' AND [key] IS NOT NULL GROUP BY [key] ${d} HAVING COUNT(*) > 1)
    THEN N' [${o}_key_in_flight_idx] (key)' END,
  CASE WHEN EXISTS (SELECT 1 FROM ${inbox} WHERE [state] = N'processing' AND [aggregate_id] IS NOT NULL
      GROUP BY [source] ${d}, [aggregate_id] ${d} HAVING COUNT(*) > 1)
    THEN N' [${i}_aggregate_in_flight_idx] (source, aggregate_id)' END);
IF @collisions <> N''
BEGIN
  RAISERROR(N'QueueBox migration 004 (down) changed nothing: under the database''s default collation these would no longer be unique:%s. Rows whose keys differ only in case (or accents) were accepted under ${KEY_COLLATION}; change or remove them first. See docs/sqlserver.md.', 16, 1, @collisions);
  SET NOEXEC ON;
END`;
}

/**
 * An index of 001-003 created again: with `ONLINE = ON` where that keeps the table usable while
 * it builds (an edition that has online index operations: Enterprise and Developer (EngineEdition
 * 3), Azure SQL Database (5), Azure SQL Managed Instance (8)), and only outside a transaction (the
 * plain script's autocommit batches): inside TypeORM's all-migrations transaction the indexes
 * dropped before hold the table's schema lock until the commit anyway.
 */
function createdAgain(statement: string): string {
  return `DECLARE @online NVARCHAR(20) = CASE WHEN @@TRANCOUNT = 0 AND CAST(SERVERPROPERTY('EngineEdition') AS INT) IN (3, 5, 8)
  THEN N' WITH (ONLINE = ON)' ELSE N'' END;
EXEC (N'${statement.replaceAll("'", "''")}' + @online)`;
}

/**
 * Migration 004 (key collation): the compared key columns to `collation`. Checks first that
 * nothing stops it (blockingObjectsCheck; going back, collisionsCheck), then drops what depends on
 * them (the indexes of 001-003 and the inbox's unique constraint), alters the columns and creates
 * the same indexes again, from the very statements of 001-003 (createdAgain). A maintenance step:
 * see docs/sqlserver.md ("Migration 004 on a live database").
 */
function keyCollation(tables: QueueBoxTables, collation: string, direction: 'up' | 'down'): string[] {
  const table = { outbox: mssqlTable(tables.outbox), inbox: mssqlTable(tables.inbox) };
  const indexes = keyIndexes(tables);
  const unique = `${tables.inbox.name}_source_idempotency_key_key`;
  const created = [...sqlServerSchemaUp(tables), ...sqlServerOperationsUp(tables), ...sqlServerClaimsUp(tables)];
  const recreate = (names: string[]) =>
    names.map((index) => {
      const statement = created.find((s) => s.startsWith(`CREATE INDEX [${index}] `) || s.startsWith(`CREATE UNIQUE INDEX [${index}] `));
      if (!statement) throw new Error(`migration 004: no CREATE statement for index ${index}`);
      return createdAgain(statement);
    });
  const alter = (kind: LeaseTableName) =>
    KEY_COLUMNS[kind].map(
      ([column, nullability]) => `ALTER TABLE ${table[kind]} ALTER COLUMN [${column}] NVARCHAR(255) COLLATE ${collation} ${nullability}`,
    );
  return [
    'SET ANSI_NULLS ON',
    'SET QUOTED_IDENTIFIER ON',
    blockingObjectsCheck(tables, direction),
    ...(direction === 'down' ? [collisionsCheck(tables)] : []),
    ...indexes.outbox.map((index) => `DROP INDEX IF EXISTS [${index}] ON ${table.outbox}`),
    ...alter('outbox'),
    ...recreate(indexes.outbox),
    ...indexes.inbox.map((index) => `DROP INDEX IF EXISTS [${index}] ON ${table.inbox}`),
    `ALTER TABLE ${table.inbox} DROP CONSTRAINT [${unique}]`,
    ...alter('inbox'),
    `ALTER TABLE ${table.inbox} ADD CONSTRAINT [${unique}] UNIQUE ([source], [idempotency_key])`,
    ...recreate(indexes.inbox),
    // Ends what a refused check began in a plain script; a no-op otherwise.
    'SET NOEXEC OFF',
  ];
}

type LeaseTableName = keyof typeof KEY_COLUMNS;

/** Migration 004 up: key columns compared by code point (KEY_COLLATION). */
export function sqlServerKeyCollationUp(tables: QueueBoxTables): string[] {
  return keyCollation(tables, KEY_COLLATION, 'up');
}

/** Migration 004 down: key columns back to the database's default collation (what 001 created). */
export function sqlServerKeyCollationDown(tables: QueueBoxTables): string[] {
  return keyCollation(tables, 'DATABASE_DEFAULT', 'down');
}

/**
 * How long migration 006's ALTER TABLE ... ADD waits for its schema-modification lock. Adding a
 * nullable column changes only the metadata once the lock is granted, but the request queues
 * behind every transaction using the table (a long enqueue(), a pull handler), and every
 * statement on the table queues behind it; the wait is bounded so that a busy table fails the
 * migration with a clear error instead of stalling the application (issue 38 L4).
 */
export const ALTER_LOCK_WAIT_MS = 5_000;

/** SQL Server's error number for "run migration 006 again when the table is quiet". */
export const ALTER_BUSY_ERROR = 51_006;

/** `ALTER TABLE <table> ADD <column>`, waiting at most ALTER_LOCK_WAIT_MS for the table, or failing with ALTER_BUSY_ERROR. */
const addColumn = (table: string, column: string) => `SET LOCK_TIMEOUT ${ALTER_LOCK_WAIT_MS};
BEGIN TRY
  ALTER TABLE ${table} ADD ${column};
END TRY
BEGIN CATCH
  IF ERROR_NUMBER() = 1222
    THROW ${ALTER_BUSY_ERROR}, N'QueueBox migration 006: ALTER TABLE ${table} ADD was not run: it waited ${ALTER_LOCK_WAIT_MS / 1000} s for the transactions that use the table, holding up every statement behind it. Run it again when no long transaction uses the table (through TypeORM the whole migration was rolled back).', 1;
  THROW;
END CATCH`;

/**
 * Migration 006 (instances): the instances table (each QueueBox process registers itself and
 * heartbeats by the database clock, so a live replica can end a dead one's leases at once) and
 * the claim owner column `claimed_by` on both tables. Adding a nullable column changes only the
 * metadata, no row is rewritten; the lock it needs is waited for at most ALTER_LOCK_WAIT_MS.
 */
export function sqlServerInstancesUp(tables: QueueBoxTables): string[] {
  const instanceSchema = tables.instances.schema;
  const n = tables.instances.name;
  return [
    ...(instanceSchema ? [`IF SCHEMA_ID(N'${instanceSchema}') IS NULL EXEC(N'CREATE SCHEMA [${instanceSchema}]')`] : []),
    `CREATE TABLE ${mssqlTable(tables.instances)} (
  [id] UNIQUEIDENTIFIER NOT NULL,
  [host] NVARCHAR(255) NOT NULL,
  [pid] INT NOT NULL,
  [data_source] NVARCHAR(255) NOT NULL,
  [version] NVARCHAR(64) NOT NULL,
  [dead_after_ms] INT NOT NULL,
  [started_at] DATETIME2 NOT NULL CONSTRAINT [${n}_started_at_default] DEFAULT SYSUTCDATETIME(),
  [heartbeat_at] DATETIME2 NOT NULL CONSTRAINT [${n}_heartbeat_at_default] DEFAULT SYSUTCDATETIME(),
  CONSTRAINT [${n}_pkey] PRIMARY KEY CLUSTERED ([id])
)`,
    addColumn(mssqlTable(tables.outbox), '[claimed_by] UNIQUEIDENTIFIER NULL'),
    addColumn(mssqlTable(tables.inbox), '[claimed_by] UNIQUEIDENTIFIER NULL'),
  ];
}

export function sqlServerInstancesDown(tables: QueueBoxTables): string[] {
  return [
    `ALTER TABLE ${mssqlTable(tables.inbox)} DROP COLUMN [claimed_by]`,
    `ALTER TABLE ${mssqlTable(tables.outbox)} DROP COLUMN [claimed_by]`,
    `DROP TABLE ${mssqlTable(tables.instances)}`,
  ];
}

/**
 * Migration 008 (rate limits; issue 41): one token bucket per rate-limited destination of
 * `outbox.rateLimits` (tokens left at the last refill, and when, by the database clock; `granted`
 * is what the last take handed out). The destination compares byte-wise, as the key columns do.
 */
export function sqlServerRateLimitsUp(tables: QueueBoxTables): string[] {
  const table = rateLimitsTableOf(tables.outbox);
  return [
    `CREATE TABLE ${mssqlTable(table)} (
  [destination] NVARCHAR(255) COLLATE ${KEY_COLLATION} NOT NULL,
  [tokens] FLOAT NOT NULL,
  [granted] INT NOT NULL CONSTRAINT [${table.name}_granted_default] DEFAULT 0,
  [refilled_at] DATETIME2 NOT NULL,
  CONSTRAINT [${table.name}_pkey] PRIMARY KEY CLUSTERED ([destination])
)`,
  ];
}

export function sqlServerRateLimitsDown(tables: QueueBoxTables): string[] {
  return [`DROP TABLE IF EXISTS ${mssqlTable(rateLimitsTableOf(tables.outbox))}`];
}

/**
 * Migration 009 (renewals): `[renewed_at]` on both tables and `[beats]` on the instances table
 * (see postgres/schema.ts). The nullable columns change only the metadata; `[beats]`, NOT NULL
 * with a default, is written into each row of the instances table, a row per running process.
 */
export function sqlServerRenewalsUp(tables: QueueBoxTables): string[] {
  const n = tables.instances.name;
  return [
    `ALTER TABLE ${mssqlTable(tables.outbox)} ADD [renewed_at] DATETIME2 NULL`,
    `ALTER TABLE ${mssqlTable(tables.inbox)} ADD [renewed_at] DATETIME2 NULL`,
    `ALTER TABLE ${mssqlTable(tables.instances)} ADD [beats] BIGINT NOT NULL CONSTRAINT [${n}_beats_default] DEFAULT 0`,
  ];
}

export function sqlServerRenewalsDown(tables: QueueBoxTables): string[] {
  const n = tables.instances.name;
  return [
    `ALTER TABLE ${mssqlTable(tables.instances)} DROP CONSTRAINT [${n}_beats_default]`,
    `ALTER TABLE ${mssqlTable(tables.instances)} DROP COLUMN [beats]`,
    `ALTER TABLE ${mssqlTable(tables.inbox)} DROP COLUMN [renewed_at]`,
    `ALTER TABLE ${mssqlTable(tables.outbox)} DROP COLUMN [renewed_at]`,
  ];
}

/**
 * Migration 010 (pauses; issue 40): one row per paused destination or source (see
 * postgres/schema.ts). The name compares byte-wise, as the key columns do.
 */
export function sqlServerPausesUp(tables: QueueBoxTables): string[] {
  const table = pausesTableOf(tables.outbox);
  return [
    `CREATE TABLE ${mssqlTable(table)} (
  [component] NVARCHAR(16) NOT NULL CONSTRAINT [${table.name}_component_check] CHECK ([component] IN (N'outbox', N'inbox')),
  [name] NVARCHAR(255) COLLATE ${KEY_COLLATION} NOT NULL,
  [reason] NVARCHAR(2000) NULL,
  [paused_by] NVARCHAR(200) NULL,
  [paused_at] DATETIME2 NOT NULL CONSTRAINT [${table.name}_paused_at_default] DEFAULT SYSUTCDATETIME(),
  CONSTRAINT [${table.name}_pkey] PRIMARY KEY CLUSTERED ([component], [name])
)`,
  ];
}

export function sqlServerPausesDown(tables: QueueBoxTables): string[] {
  return [`DROP TABLE IF EXISTS ${mssqlTable(pausesTableOf(tables.outbox))}`];
}

/**
 * Migration 011 (attempts): the attempt history tables and `[fingerprint]` on both tables (see
 * postgres/schema.ts). The nullable column changes only the metadata (a brief Sch-M lock). No
 * foreign key (it would refuse TRUNCATE TABLE): retention and discards delete a row's history
 * with it. The fingerprint compares byte-wise, as the key columns do.
 */
export function sqlServerAttemptsUp(tables: QueueBoxTables): string[] {
  const history = (table: TableName) => {
    const attempts = attemptsTableOf(table);
    const n = attempts.name;
    return `CREATE TABLE ${mssqlTable(attempts)} (
  [row_id] BIGINT NOT NULL,
  [id] BIGINT IDENTITY(1,1) NOT NULL,
  [attempt] INT NOT NULL,
  [failed_at] DATETIME2 NOT NULL,
  [duration_ms] BIGINT NULL,
  [instance_id] UNIQUEIDENTIFIER NULL,
  [error_class] NVARCHAR(200) NOT NULL,
  [error] NVARCHAR(MAX) NOT NULL,
  [outcome] NVARCHAR(8) NOT NULL,
  CONSTRAINT [${n}_pkey] PRIMARY KEY CLUSTERED ([row_id], [id]),
  CONSTRAINT [${n}_outcome_check] CHECK ([outcome] IN (N'retry', N'dead'))
)`;
  };
  return [
    `ALTER TABLE ${mssqlTable(tables.outbox)} ADD [fingerprint] NVARCHAR(512) COLLATE ${KEY_COLLATION} NULL`,
    `ALTER TABLE ${mssqlTable(tables.inbox)} ADD [fingerprint] NVARCHAR(512) COLLATE ${KEY_COLLATION} NULL`,
    history(tables.outbox),
    history(tables.inbox),
  ];
}

export function sqlServerAttemptsDown(tables: QueueBoxTables): string[] {
  return [
    `DROP TABLE IF EXISTS ${mssqlTable(attemptsTableOf(tables.inbox))}`,
    `DROP TABLE IF EXISTS ${mssqlTable(attemptsTableOf(tables.outbox))}`,
    `ALTER TABLE ${mssqlTable(tables.inbox)} DROP COLUMN [fingerprint]`,
    `ALTER TABLE ${mssqlTable(tables.outbox)} DROP COLUMN [fingerprint]`,
  ];
}
