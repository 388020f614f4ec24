import type { TableName } from '../common/identifiers';
import type { QueueBoxTables } from './dialect';
import { dialectDriver } from './registry';

/**
 * Read-only statements that look at the tables from outside the workers: the CLI's `status` and
 * `queuebox/testing`'s outcome of a claimed batch. Pure functions of the dialect and the tables,
 * run with `dataSource.query(sql, params)`; they take no locks and change nothing. Each driver
 * writes its own (`<driver>/inspection.sql.ts`).
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
export function finishedCountQuery(type: string, tables: QueueBoxTables): InspectionQuery {
  return dialectDriver(type).inspection.finishedCount(tables);
}

/** One row of `rowStatesQuery`. */
export interface RowStateRow {
  id: string;
  state: string;
  attempts: number;
  last_error: string | null;
}

/** State, attempts and last error of the rows with these ids (bigints as strings). */
export function rowStatesQuery(type: string, table: TableName, ids: readonly string[]): InspectionQuery {
  return dialectDriver(type).inspection.rowStates(table, ids);
}
