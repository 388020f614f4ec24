import { asUtc, NOW } from './time';

// What the dialect checks at start-up (the schema, the key collation, the database's settings) and the clock.

/** @0 = the table's name as `[schema].[name]` or `[name]`: its object id, or NULL when it does not exist. */
export const tableExistsSql = () => "SELECT OBJECT_ID(@0, N'U') AS [found]";

/**
 * @0 = the table's name as `[schema].[name]` or `[name]`: the collation of each of its key columns
 * (migration 004 makes them KEY_COLLATION).
 */
export const keyCollationSql = () => `SELECT c.[name] AS [column], c.[collation_name] AS [collation] FROM sys.columns AS c
WHERE c.[object_id] = OBJECT_ID(@0, N'U') AND c.[name] IN (N'destination', N'key', N'source', N'idempotency_key', N'aggregate_id')`;

/**
 * The current database's settings QueueBox checks at start-up: its compatibility level (OPENJSON
 * needs 130, SQL Server 2016's) and whether READ COMMITTED reads row versions (RCSI).
 */
export const databaseSettingsSql = () =>
  'SELECT [compatibility_level], [is_read_committed_snapshot_on] FROM sys.databases WHERE [database_id] = DB_ID()';

/** The database clock, as the UTC instant it is. */
export const clockNowSql = () => `SELECT ${asUtc(NOW)} AS [now]`;
