import type { TableName } from '../common/identifiers';
import type { QueueBoxTables } from './dialect';
import { pgTable } from './postgres/postgres.schema';
import { mssqlTable } from './sqlserver/sqlserver.schema';

/**
 * Read-only statements that look at the tables from outside the workers: the CLI's `status` and
 * `queuebox/testing`'s outcome of a claimed batch. Pure functions of the dialect and the tables,
 * run with `dataSource.query(sql, params)`; they take no locks and change nothing.
 *
 * The backlog counts every row, finished ones included (one scan of each table), which suits an
 * operator's command, not a hot path.
 */
export interface InspectionQuery {
  sql: string;
  params: unknown[];
}

/** One row of `backlogQuery`: how many rows of a destination (outbox) or source (inbox) are in a state. */
export interface BacklogCountRow {
  component: 'outbox' | 'inbox';
  name: string;
  state: string;
  count: number | string;
  /** Seconds since the oldest row of this group was created (outbox) or received (inbox), by the database clock. */
  oldest_age_seconds: number | string | null;
}

/** Counts per (destination or source, state) of both tables, with the age of each group's oldest row. */
export function backlogQuery(type: 'postgres' | 'mssql', tables: QueueBoxTables): InspectionQuery {
  if (type === 'mssql') {
    const part = (component: string, table: TableName, name: string, since: string) =>
      `SELECT N'${component}' AS [component], [${name}] AS [name], [state], COUNT_BIG(*) AS [count],
  DATEDIFF_BIG(millisecond, MIN([${since}]), SYSUTCDATETIME()) / 1000.0 AS [oldest_age_seconds]
FROM ${mssqlTable(table)} GROUP BY [${name}], [state]`;
    return {
      sql: `${part('outbox', tables.outbox, 'destination', 'created_at')}
UNION ALL
${part('inbox', tables.inbox, 'source', 'received_at')}
ORDER BY [component] DESC, [name], [state]`,
      params: [],
    };
  }
  const part = (component: string, table: TableName, name: string, since: string) =>
    `SELECT '${component}' AS component, "${name}" AS name, state, count(*) AS count,
  EXTRACT(EPOCH FROM (clock_timestamp() - min("${since}")))::float8 AS oldest_age_seconds
FROM ${pgTable(table)} GROUP BY "${name}", state`;
  return {
    sql: `${part('outbox', tables.outbox, 'destination', 'created_at')}
UNION ALL
${part('inbox', tables.inbox, 'source', 'received_at')}
ORDER BY component DESC, name, state`,
    params: [],
  };
}

/** One row of `rowStatesQuery`. */
export interface RowStateRow {
  id: string;
  state: string;
  attempts: number;
  last_error: string | null;
}

/** State, attempts and last error of the rows with these ids (bigints as strings). */
export function rowStatesQuery(type: 'postgres' | 'mssql', table: TableName, ids: readonly string[]): InspectionQuery {
  if (type === 'mssql') {
    return {
      sql: `SELECT CAST(t.[id] AS NVARCHAR(20)) AS [id], t.[state], t.[attempts], t.[last_error]
FROM ${mssqlTable(table)} AS t
WHERE t.[id] IN (SELECT j.[id] FROM OPENJSON(@0) WITH ([id] BIGINT '$') AS j)`,
      params: [JSON.stringify(ids)],
    };
  }
  return {
    sql: `SELECT id::text AS id, state, attempts, last_error FROM ${pgTable(table)} WHERE id = ANY($1::bigint[])`,
    params: [ids],
  };
}
