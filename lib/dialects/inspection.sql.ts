/**
 * A read-only statement that looks at the tables from outside the workers (`finishedCountQuery`
 * and `rowStatesQuery` in drivers.ts): the CLI's `status` and `queuebox/testing`'s outcome of a
 * claimed batch. Pure functions of the dialect and the tables,
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

/** One row of `rowStatesQuery`. */
export interface RowStateRow {
  id: string;
  state: string;
  attempts: number;
  last_error: string | null;
}
