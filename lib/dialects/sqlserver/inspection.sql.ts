import type { TableName } from '../../common/identifiers';
import type { QueueBoxTables } from '../dialect';
import type { InspectionQuery } from '../inspection.sql';
import { ADMIN } from './admin.sql';
import { PINNED_READ_COMMITTED } from './lease.sql';
import { mssqlTable } from './quoting';
import { text } from './sqlserver.params';

/**
 * Sent outbox rows per destination and processed inbox rows per source (see
 * lib/dialects/inspection.sql.ts). The CLI sends it with `dataSource.query`, outside the dialect:
 * the batch pins READ COMMITTED itself (the pooled connection may have been left at another
 * level) and gives way to the workers as the admin statements do (ADMIN).
 */
export function finishedCountQuery(tables: QueueBoxTables): InspectionQuery {
  const part = (component: string, table: TableName, name: string, state: string) =>
    `SELECT N'${component}' AS [component], [${name}] AS [name], COUNT_BIG(*) AS [count]
FROM ${mssqlTable(table)} WHERE [state] = N'${state}' GROUP BY [${name}]`;
  return {
    sql: `${PINNED_READ_COMMITTED}${ADMIN}${part('outbox', tables.outbox, 'destination', 'sent')}
UNION ALL
${part('inbox', tables.inbox, 'source', 'processed')}`,
    params: [],
  };
}

/** State, attempts and last error of the rows with these ids (bigints as strings), at READ COMMITTED as finishedCountQuery. */
export function rowStatesQuery(table: TableName, ids: readonly string[]): InspectionQuery {
  return {
    sql: `${PINNED_READ_COMMITTED}SELECT CAST(t.[id] AS NVARCHAR(20)) AS [id], t.[state], t.[attempts], t.[last_error]
FROM ${mssqlTable(table)} AS t
WHERE t.[id] IN (SELECT j.[id] FROM OPENJSON(@0) WITH ([id] BIGINT '$') AS j)`,
    params: [text(JSON.stringify(ids))],
  };
}
