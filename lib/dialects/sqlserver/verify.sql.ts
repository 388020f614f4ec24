import { messages } from '../../texts/queuebox.messages';
import type { VerifyQueries } from '../dialect-driver';
import { PINNED_READ_COMMITTED } from './lease.sql';
import { mssqlTable } from './quoting';
import { bigint, text } from './sqlserver.params';
import { msAgo } from './time';

// What `queuebox verify` asks of SQL Server and Azure SQL: the settings it reports (version,
// edition, READ_COMMITTED_SNAPSHOT, snapshot isolation, compatibility level, this session's
// isolation), the sessions of its worker processes (by program_name, which tedious sends as
// `appName`) and KILL. Seeing other sessions in sys.dm_exec_sessions takes VIEW SERVER STATE
// (VIEW DATABASE STATE on Azure SQL Database); KILL takes ALTER ANY CONNECTION (KILL DATABASE
// CONNECTION on Azure SQL Database). HAS_PERMS_BY_NAME answers NULL for a permission or class
// the server does not have (Azure SQL Database has no server class): counted as not granted.
// Never run on a server: unit-tested on their text and parsed with a T-SQL grammar only.

/** The largest session id SQL Server hands out is a smallint; anything else is refused before KILL is written. */
const MAX_SESSION_ID = 32_767;

export const sqlServerVerifyQueries: VerifyQueries = {
  withApplicationName: (connection, name) => {
    const options = connection as typeof connection & { options?: Record<string, unknown> };
    return { ...options, options: { ...options.options, appName: name } } as typeof connection;
  },
  settings: () => ({
    sql: `SELECT N'product_version' AS [name], CAST(SERVERPROPERTY('ProductVersion') AS NVARCHAR(128)) AS [value]
UNION ALL SELECT N'edition', CAST(SERVERPROPERTY('Edition') AS NVARCHAR(128))
UNION ALL SELECT N'engine_edition', CAST(SERVERPROPERTY('EngineEdition') AS NVARCHAR(128))
UNION ALL SELECT N'read_committed_snapshot', CASE d.[is_read_committed_snapshot_on] WHEN 1 THEN N'ON' ELSE N'OFF' END
  FROM sys.databases AS d WHERE d.[database_id] = DB_ID()
UNION ALL SELECT N'snapshot_isolation', CAST(d.[snapshot_isolation_state_desc] AS NVARCHAR(128))
  FROM sys.databases AS d WHERE d.[database_id] = DB_ID()
UNION ALL SELECT N'compatibility_level', CAST(d.[compatibility_level] AS NVARCHAR(16))
  FROM sys.databases AS d WHERE d.[database_id] = DB_ID()
UNION ALL SELECT N'optimized_locking', CAST(DATABASEPROPERTYEX(DB_NAME(), 'IsOptimizedLockingOn') AS NVARCHAR(16))
UNION ALL SELECT N'session_isolation', CASE s.[transaction_isolation_level]
    WHEN 1 THEN N'READ UNCOMMITTED' WHEN 2 THEN N'READ COMMITTED' WHEN 3 THEN N'REPEATABLE READ'
    WHEN 4 THEN N'SERIALIZABLE' WHEN 5 THEN N'SNAPSHOT' ELSE N'unspecified' END
  FROM sys.dm_exec_sessions AS s WHERE s.[session_id] = @@SPID
UNION ALL SELECT N'version', CAST(@@VERSION AS NVARCHAR(512))`,
    params: [],
  }),
  sessionPermissions: () => ({
    sql: `SELECT CASE WHEN COALESCE(HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW SERVER STATE'), 0) = 1
              OR COALESCE(HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'VIEW DATABASE STATE'), 0) = 1 THEN 1 ELSE 0 END AS [may_see],
       CASE WHEN COALESCE(HAS_PERMS_BY_NAME(NULL, NULL, N'ALTER ANY CONNECTION'), 0) = 1
              OR COALESCE(HAS_PERMS_BY_NAME(DB_NAME(), N'DATABASE', N'KILL DATABASE CONNECTION'), 0) = 1 THEN 1 ELSE 0 END AS [may_end]`,
    params: [],
  }),
  sessionPermissionNames: {
    see: 'VIEW SERVER STATE (VIEW DATABASE STATE on Azure SQL Database)',
    end: 'ALTER ANY CONNECTION (KILL DATABASE CONNECTION on Azure SQL Database)',
  },
  sessionsNamed: (name) => ({
    sql: `SELECT s.[session_id] AS [session] FROM sys.dm_exec_sessions AS s
WHERE s.[program_name] = @0 AND s.[database_id] = DB_ID() AND s.[session_id] <> @@SPID`,
    params: [text(name)],
  }),
  // KILL takes no variable: the id is written into the statement, after the check that it is one.
  sessionEnd: (session) => {
    if (!Number.isSafeInteger(session) || session < 1 || session > MAX_SESSION_ID) {
      throw new RangeError(messages.verifySessionIdInvalid(session));
    }
    return { sql: `KILL ${session}`, params: [] };
  },
  claimedWithin: (table, component, name, ms) => {
    const [key, named] = component === 'outbox' ? ['[key]', '[destination]'] : ['[aggregate_id]', '[source]'];
    return {
      sql: `${PINNED_READ_COMMITTED}SELECT t.${key} AS [key] FROM ${mssqlTable(table)} AS t WHERE t.${named} = @0 AND t.[claimed_at] >= ${msAgo('@1')}`,
      params: [text(name), bigint(ms)],
    };
  },
};
