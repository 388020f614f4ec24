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
 * Migration 004 (key collation): the compared key columns to `collation`. Drops what depends on
 * them (the indexes of 001-003 and the inbox's unique constraint), alters the columns and creates
 * the same indexes again, from the very statements of 001-003.
 */
function keyCollation(tables: QueueBoxTables, collation: string): string[] {
  const table = { outbox: mssqlTable(tables.outbox), inbox: mssqlTable(tables.inbox) };
  const indexes = keyIndexes(tables);
  const unique = `${tables.inbox.name}_source_idempotency_key_key`;
  const created = [...sqlServerSchemaUp(tables), ...sqlServerOperationsUp(tables), ...sqlServerClaimsUp(tables)];
  const recreate = (names: string[]) =>
    names.map((index) => {
      const statement = created.find((s) => s.startsWith(`CREATE INDEX [${index}] `) || s.startsWith(`CREATE UNIQUE INDEX [${index}] `));
      if (!statement) throw new Error(`migration 004: no CREATE statement for index ${index}`);
      return statement;
    });
  const alter = (kind: LeaseTableName) =>
    KEY_COLUMNS[kind].map(
      ([column, nullability]) => `ALTER TABLE ${table[kind]} ALTER COLUMN [${column}] NVARCHAR(255) COLLATE ${collation} ${nullability}`,
    );
  return [
    'SET ANSI_NULLS ON',
    'SET QUOTED_IDENTIFIER ON',
    ...indexes.outbox.map((index) => `DROP INDEX IF EXISTS [${index}] ON ${table.outbox}`),
    ...alter('outbox'),
    ...recreate(indexes.outbox),
    ...indexes.inbox.map((index) => `DROP INDEX IF EXISTS [${index}] ON ${table.inbox}`),
    `ALTER TABLE ${table.inbox} DROP CONSTRAINT [${unique}]`,
    ...alter('inbox'),
    `ALTER TABLE ${table.inbox} ADD CONSTRAINT [${unique}] UNIQUE ([source], [idempotency_key])`,
    ...recreate(indexes.inbox),
  ];
}

type LeaseTableName = keyof typeof KEY_COLUMNS;

/** Migration 004 up: key columns compared by code point (KEY_COLLATION). */
export function sqlServerKeyCollationUp(tables: QueueBoxTables): string[] {
  return keyCollation(tables, KEY_COLLATION);
}

/** Migration 004 down: key columns back to the database's default collation (what 001 created). */
export function sqlServerKeyCollationDown(tables: QueueBoxTables): string[] {
  return keyCollation(tables, 'DATABASE_DEFAULT');
}
