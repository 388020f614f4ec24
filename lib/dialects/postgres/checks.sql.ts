import { NOW } from './time';

// What the dialect checks at start-up (the schema) and the clock.

/** $1: the quoted table name; `found` is null when the table does not exist. */
export const tableExistsSql = () => 'SELECT to_regclass($1)::text AS found';

/** The database clock (`clock_timestamp()`, not the transaction's start). */
export const clockNowSql = () => `SELECT ${NOW} AS now`;

/**
 * $1 = claim function signatures, $2 = their sources as this version writes them (same order).
 * `present`: how many exist; `current`: how many of those hold exactly that source; `isolation`:
 * the isolation level a statement of this session runs at when nothing sets one.
 */
export const claimFunctionsLookupSql = () => `SELECT count(p.oid)::int AS present,
       count(p.oid) FILTER (WHERE p.prosrc = f.body)::int AS current,
       current_setting('default_transaction_isolation') AS isolation
FROM unnest($1::text[], $2::text[]) AS f(signature, body)
LEFT JOIN pg_proc p ON p.oid = to_regprocedure(f.signature)`;

/** The isolation level a transaction of this session begins at when nothing names one. */
export const defaultIsolationSql = () => "SELECT current_setting('default_transaction_isolation') AS isolation";
