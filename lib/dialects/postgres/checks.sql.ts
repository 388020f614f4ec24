import { messages } from '../../texts/queuebox.messages';
import { pgLiteral } from './quoting';
import { NOW } from './time';

// What the dialect checks at start-up (the server's version, the schema), the clock, and the
// isolation level of the statements it sends outside any transaction.

/**
 * The oldest PostgreSQL major QueueBox supports (README, docs/operations.md): the oldest the CI
 * suite runs on. Everything QueueBox's SQL uses exists there (MATERIALIZED CTEs: 12;
 * gen_random_uuid() in core: 13); newer features (MERGE, NULLS NOT DISTINCT: 15) are not used.
 */
export const MIN_SERVER_VERSION_NUM = 140000;

/** The server's version: `server_version_num` (140023 for 14.23) and the text it prints (`14.23`). */
export const serverVersionSql = () =>
  "SELECT current_setting('server_version_num')::int AS version_num, current_setting('server_version') AS version";

/**
 * The first statement of migration 001: refuses a server older than MIN_SERVER_VERSION_NUM before
 * anything is created, with the message the start-up check gives.
 */
export const serverVersionCheckSql = (minimum = MIN_SERVER_VERSION_NUM) => `DO $$
BEGIN
  IF current_setting('server_version_num')::int < ${minimum} THEN
    RAISE EXCEPTION '%', format(${pgLiteral(messages.postgresVersionUnsupported('%s', Math.floor(minimum / 10000)))}, current_setting('server_version'));
  END IF;
END $$`;

/** Whether a server of `versionNum` (`server_version_num`) is one QueueBox supports. */
export function isSupportedServerVersion(versionNum: number, minimum = MIN_SERVER_VERSION_NUM): boolean {
  return Number.isInteger(versionNum) && versionNum >= minimum;
}

/** $1: the quoted table name; `found` is null when the table does not exist. */
export const tableExistsSql = () => 'SELECT to_regclass($1)::text AS found';

/** The database clock (`clock_timestamp()`, not the transaction's start). */
export const clockNowSql = () => `SELECT ${NOW} AS now`;

/**
 * $1 = claim function signatures, $2 = their sources as this version writes them (same order).
 * `present`: how many exist; `current`: how many of those hold exactly that source.
 */
export const claimFunctionsLookupSql = () => `SELECT count(p.oid)::int AS present,
       count(p.oid) FILTER (WHERE p.prosrc = f.body)::int AS current
FROM unnest($1::text[], $2::text[]) AS f(signature, body)
LEFT JOIN pg_proc p ON p.oid = to_regprocedure(f.signature)`;

/**
 * The isolation level a transaction of this session begins at when nothing names one, and a
 * statement sent outside any transaction runs at: `default_transaction_isolation`, which the
 * database (`ALTER DATABASE ... SET`), the role or the connection's options may set.
 */
export const defaultIsolationSql = () => "SELECT current_setting('default_transaction_isolation') AS isolation";

/**
 * `statements` (values inlined: see `inlineValues`) at READ COMMITTED whatever the session's
 * default: SET TRANSACTION first, in one query string, sent with the simple query protocol.
 * PostgreSQL runs the statements of one query string as one transaction (committed after the
 * last, rolled back on any error), and SET TRANSACTION sets its level before the first statement
 * after it takes a snapshot: one round trip, as the statements alone. Under READ COMMITTED each
 * statement takes a snapshot of its own and a write that waited for a row re-checks the row's
 * newest version; under REPEATABLE READ or SERIALIZABLE it would fail with SQLSTATE 40001 instead.
 */
export const readCommittedSql = (statements: string) => `SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n${statements}`;

/**
 * `statement` (its values inlined) at READ COMMITTED with JIT compilation off, in one implicit
 * transaction: `SET LOCAL` lasts until it ends, so the session's own `jit` is left as it was.
 */
export const withoutJitSql = (statement: string) => readCommittedSql(`SET LOCAL jit = off;\n${statement}`);
