import type { QueueBoxTables } from '../dialect';
import type { ExpectedIndex } from '../doctor-facts';
import type { SchemaMigration } from '../schema-migrations';
import { sqlServerMigrations } from './migrations';
import { mssqlTable } from './quoting';

// What `queuebox doctor` and the database warnings read on SQL Server (lib/dialects/doctor-facts.ts),
// the equivalents of PostgreSQL's where they exist: row counts and sizes from
// sys.dm_db_partition_stats (not sys.dm_db_index_physical_stats, which reads the index pages),
// disabled indexes from sys.indexes, the oldest open transactions from
// sys.dm_tran_active_transactions, lock waits from sys.dm_tran_locks. The DMVs need VIEW DATABASE
// STATE. SQL Server has no dead-row count kept cheaply (ghost records are cleaned by a background
// task) and no autovacuum: those checks are PostgreSQL's only (docs/doctor.md). Statement-tested
// only: no SQL Server ran them here.

/** The table names as a VALUES list: validated identifiers (lib/common/identifiers), quoted, so inlined safely. */
function tableValues(names: readonly string[]): string {
  return names.map((name, n) => `(N'${name.replaceAll("'", "''")}', ${n})`).join(', ');
}

/** One row per table: whether it exists, its rows and its size (heap or clustered index only). */
export const doctorTablesSql = (names: readonly string[]) => `SELECT t.name AS [table],
       CAST(CASE WHEN OBJECT_ID(t.name) IS NULL THEN 0 ELSE 1 END AS bit) AS present,
       (SELECT SUM(ps.row_count) FROM sys.dm_db_partition_stats ps
        WHERE ps.object_id = OBJECT_ID(t.name) AND ps.index_id IN (0, 1)) AS live_rows,
       (SELECT SUM(ps.used_page_count) * 8192 FROM sys.dm_db_partition_stats ps
        WHERE ps.object_id = OBJECT_ID(t.name) AND ps.index_id IN (0, 1)) AS bytes
FROM (VALUES ${tableValues(names)}) AS t(name, n)
ORDER BY t.n`;

/** Every index on the tables: whether it is enabled, its size. */
export const doctorIndexesSql = (names: readonly string[]) => `SELECT t.name AS [table], i.name AS name,
       CAST(CASE WHEN i.is_disabled = 1 THEN 0 ELSE 1 END AS bit) AS valid,
       (SELECT SUM(ps.used_page_count) * 8192 FROM sys.dm_db_partition_stats ps
        WHERE ps.object_id = i.object_id AND ps.index_id = i.index_id) AS bytes
FROM (VALUES ${tableValues(names)}) AS t(name, n)
JOIN sys.indexes i ON i.object_id = OBJECT_ID(t.name)
WHERE i.index_id > 0 AND i.is_hypothetical = 0
ORDER BY t.name, i.name`;

/**
 * The three oldest open transactions of this database's sessions (this one left out): what keeps
 * row versions (READ_COMMITTED_SNAPSHOT) and ghost records from being cleaned up.
 */
export const doctorHorizonSql = () => `SELECT TOP (3) N'session' AS kind, CAST(st.session_id AS nvarchar(20)) AS holder,
       COALESCE(s.program_name, N'') + N' (' + s.status + N')' AS detail,
       DATEDIFF_BIG(millisecond, at.transaction_begin_time, SYSDATETIME()) / 1000.0 AS seconds,
       CAST(NULL AS bigint) AS xid_age, CAST(1 AS bit) AS active
FROM sys.dm_tran_active_transactions at
JOIN sys.dm_tran_session_transactions st ON st.transaction_id = at.transaction_id
JOIN sys.dm_exec_sessions s ON s.session_id = st.session_id
WHERE st.session_id <> @@SPID AND s.database_id = DB_ID()
ORDER BY at.transaction_begin_time`;

/** Sessions waiting now for a lock on the tables (the table itself, or its rows and pages), the longest waits first, at most ten. */
export const doctorLockWaitsSql = (names: readonly string[]) => `SELECT TOP (10) t.name AS [table],
       CAST(l.request_session_id AS nvarchar(20)) AS session, COALESCE(s.program_name, N'') AS application,
       l.request_mode AS mode, COALESCE(r.wait_time, 0) / 1000.0 AS seconds,
       CAST(NULLIF(r.blocking_session_id, 0) AS nvarchar(20)) AS blocker_session,
       (SELECT COALESCE(b.program_name, N'') + N' (session ' + CAST(b.session_id AS nvarchar(20)) + N', ' + b.status + N')'
        FROM sys.dm_exec_sessions b WHERE b.session_id = r.blocking_session_id) AS blocker
FROM (VALUES ${tableValues(names)}) AS t(name, n)
JOIN sys.dm_tran_locks l ON l.resource_database_id = DB_ID() AND l.request_status = N'WAIT'
  AND ((l.resource_type = N'OBJECT' AND l.resource_associated_entity_id = OBJECT_ID(t.name))
    OR (l.resource_type IN (N'KEY', N'PAGE', N'RID')
        AND l.resource_associated_entity_id IN (SELECT p.hobt_id FROM sys.partitions p WHERE p.object_id = OBJECT_ID(t.name))))
LEFT JOIN sys.dm_exec_requests r ON r.session_id = l.request_session_id
LEFT JOIN sys.dm_exec_sessions s ON s.session_id = l.request_session_id
ORDER BY seconds DESC`;

/** Repairs, each one statement as an operator would run it. */
export const doctorRepairs = {
  // ONLINE = ON where the edition has it (Enterprise, Azure SQL); drop it elsewhere.
  rebuildIndex: (index: string, table: string) => `ALTER INDEX [${index.replaceAll(']', ']]')}] ON ${table} REBUILD WITH (ONLINE = ON)`,
  dropIndex: (index: string, table: string) => `DROP INDEX [${index.replaceAll(']', ']]')}] ON ${table}`,
  endSession: (session: string) => `KILL ${Number(session)}`,
};

// 004 drops the key indexes and makes them again from 001-003's own statements (run through EXEC,
// which CREATE_INDEX does not read): it leaves the set as it was, each index still 001-003's.
const LEAVES_THE_INDEXES: ReadonlySet<SchemaMigration> = new Set(['keyCollation']);
const CREATE_INDEX = /^CREATE (?:UNIQUE )?(?:NONCLUSTERED )?INDEX \[([^\]]+)\] ON (\S+)/;
const DROP_INDEX = /^DROP INDEX (?:IF EXISTS )?\[([^\]]+)\] ON /;

/** The indexes the migrations in `applied` leave on the three tables, each with the CREATE statement that makes it again. */
export function expectedIndexes(tables: QueueBoxTables, applied: readonly SchemaMigration[]): ExpectedIndex[] {
  const byName = new Map<string, ExpectedIndex>();
  const kinds = ['outbox', 'inbox', 'instances'] as const;
  const tableOf = (sqlName: string) => kinds.find((kind) => mssqlTable(tables[kind]) === sqlName);
  for (const migration of applied) {
    if (LEAVES_THE_INDEXES.has(migration)) continue;
    for (const statement of sqlServerMigrations[migration].up(tables).map((s) => s.trim())) {
      const created = CREATE_INDEX.exec(statement);
      const kind = created ? tableOf(created[2]) : undefined;
      if (created && kind) byName.set(created[1], { table: tables[kind].qualified, name: created[1], migration, create: statement });
      const dropped = DROP_INDEX.exec(statement);
      if (dropped) byName.delete(dropped[1]);
    }
  }
  return [...byName.values()];
}
