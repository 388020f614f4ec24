import type { TableName } from '../../common/identifiers';
import type { QueueBoxTables } from '../dialect';
import type { InspectionQuery } from '../inspection.sql';
import { pgTable } from './quoting';

/** Sent outbox rows per destination and processed inbox rows per source (see lib/dialects/inspection.sql.ts). */
export function finishedCountQuery(tables: QueueBoxTables): InspectionQuery {
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

/** State, attempts and last error of the rows with these ids (bigints as strings). */
export function rowStatesQuery(table: TableName, ids: readonly string[]): InspectionQuery {
  return {
    sql: `SELECT id::text AS id, state, attempts, last_error FROM ${pgTable(table)} WHERE id = ANY($1::bigint[])`,
    params: [ids],
  };
}
