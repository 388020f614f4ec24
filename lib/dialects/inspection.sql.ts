import type { TableName } from '../common/identifiers';
import type { QueueBoxTables } from './dialect';
import { pgTable } from './postgres/postgres.schema';
import { text } from './sqlserver/sqlserver.params';
import { mssqlTable } from './sqlserver/sqlserver.schema';

/**
 * Read-only statements that look at the tables from outside the workers: the CLI's `status` and
 * `queuebox/testing`'s outcome of a claimed batch. Pure functions of the dialect and the tables,
 * run with `dataSource.query(sql, params)`; they take no locks and change nothing.
 *
 * The finished-row count reads every sent or processed row, which suits an operator's command, not
 * a hot path.
 */
export interface InspectionQuery {
  sql: string;
  params: unknown[];
}

/** One row of `finishedCountQuery`: how many rows of a destination (outbox) or source (inbox) are finished. */
export interface FinishedCountRow {
  component: 'outbox' | 'inbox';
  name: string;
  count: number | string;
}

/**
 * Sent outbox rows per destination and processed inbox rows per source: what `queuebox status`
 * adds to `QueueBoxAdmin.backlog()`, which counts unfinished and dead rows only.
 */
export function finishedCountQuery(type: 'postgres' | 'mssql', tables: QueueBoxTables): InspectionQuery {
  if (type === 'mssql') {
    const part = (component: string, table: TableName, name: string, state: string) =>
      `SELECT N'${component}' AS [component], [${name}] AS [name], COUNT_BIG(*) AS [count]
FROM ${mssqlTable(table)} WHERE [state] = N'${state}' GROUP BY [${name}]`;
    return {
      sql: `${part('outbox', tables.outbox, 'destination', 'sent')}
UNION ALL
${part('inbox', tables.inbox, 'source', 'processed')}`,
      params: [],
    };
  }
  const part = (component: string, table: TableName, name: string, state: string) =>
    `SELECT '${component}' AS component, "${name}" AS name, count(*) AS count
FROM ${pgTable(table)} WHERE state = '${state}' GROUP BY "${name}"`;
  return {
    sql: `${part('outbox', tables.outbox, 'destination', 'sent')}
UNION ALL
${part('inbox', tables.inbox, 'source', 'processed')}`,
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
      params: [text(JSON.stringify(ids))],
    };
  }
  return {
    sql: `SELECT id::text AS id, state, attempts, last_error FROM ${pgTable(table)} WHERE id = ANY($1::bigint[])`,
    params: [ids],
  };
}
