import { NOW } from './time';

// What the dialect checks at start-up (the schema) and the clock.

/** $1: the quoted table name; `found` is null when the table does not exist. */
export const tableExistsSql = () => 'SELECT to_regclass($1)::text AS found';

/** The database clock (`clock_timestamp()`, not the transaction's start). */
export const clockNowSql = () => `SELECT ${NOW} AS now`;
