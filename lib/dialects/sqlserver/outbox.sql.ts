import { UNIQUE_VIOLATIONS } from './inbox.sql';
import { NOW } from './time';

// SQL Server (T-SQL) statements as pure functions of the (already bracket-quoted) table name, so tests can
// parse and pin exactly what runs. Parameters are positional (`@0`...), the placeholders of TypeORM's mssql
// driver, documented per statement; the dialect types each one explicitly.

/** The rows of an enqueue, read from the JSON array of @0 (`j.[key]` is each row's index in it). */
const OUTBOX_ROWS = `SELECT m.[message_id], m.[destination], m.[key], m.[payload], m.[headers],
       COALESCE(CAST(SWITCHOFFSET(m.[available_at], '+00:00') AS DATETIME2), ${NOW})
FROM OPENJSON(@0) AS j
CROSS APPLY OPENJSON(j.[value]) WITH (
  [message_id] UNIQUEIDENTIFIER '$.messageId',
  [destination] NVARCHAR(255) '$.destination',
  [key] NVARCHAR(255) '$.key',
  [payload] NVARCHAR(MAX) '$.payload',
  [headers] NVARCHAR(MAX) '$.headers',
  [available_at] DATETIMEOFFSET '$.availableAt'
) AS m`;

/**
 * @0 = the rows as one JSON array of `{ messageId, destination, key, payload, headers, availableAt }`
 * (payload and headers as JSON text, availableAt as an ISO-8601 UTC string or null). One
 * parameter keeps a batch one statement, whatever its size (a statement takes at most 2,100
 * parameters); identities follow the array's order. ROWLOCK: row locks on the new index entries,
 * never page locks that a claim's READPAST could not pass (the claim would wait for them and fail);
 * with lock escalation disabled on the table, each row costs a lock until the transaction commits
 * (see docs/sqlserver.md, "Inserts", for the size of one transaction).
 */
export const outboxInsertSql = (
  table: string,
) => `INSERT INTO ${table} WITH (ROWLOCK) ([message_id], [destination], [key], [payload], [headers], [available_at])
OUTPUT inserted.[id], inserted.[message_id]
${OUTBOX_ROWS}
ORDER BY CAST(j.[key] AS INT)`;

/**
 * `outboxInsertSql` that stores nothing for a message id the outbox holds (`onDuplicate:
 * 'ignore'`). The unique constraint on `message_id` decides, as PostgreSQL's ON CONFLICT DO
 * NOTHING does, and as `receive` does (inbox.sql.ts, issue 38 M3): no UPDLOCK, HOLDLOCK range lock,
 * which would make every enqueue of a nearby id wait for this transaction, and two batches that
 * each locked a gap the other inserts into deadlock. The batch goes in whole, past the ids already
 * committed; when it fails on the constraint (an id stored meanwhile by another transaction, which
 * the insert waited for, or an id twice in the batch), the rows go one at a time in input order,
 * each duplicate skipped. XACT_ABORT OFF for the batch, so a caught unique violation ends only its
 * statement and the caller's transaction stays committable. Only the inserted rows come back;
 * `outboxFindSql` reads the others. Same parameter.
 */
export const outboxInsertIfAbsentSql = (table: string) => `SET XACT_ABORT OFF;
SET NOCOUNT ON;
DECLARE @inserted TABLE ([id] BIGINT NOT NULL, [message_id] UNIQUEIDENTIFIER NOT NULL);
BEGIN TRY
  INSERT INTO ${table} WITH (ROWLOCK) ([message_id], [destination], [key], [payload], [headers], [available_at])
  OUTPUT inserted.[id], inserted.[message_id] INTO @inserted ([id], [message_id])
  ${OUTBOX_ROWS}
  WHERE NOT EXISTS (SELECT 1 FROM ${table} AS o WHERE o.[message_id] = m.[message_id])
  ORDER BY CAST(j.[key] AS INT);
END TRY
BEGIN CATCH
  IF ERROR_NUMBER() NOT IN (${UNIQUE_VIOLATIONS.join(', ')}) OR XACT_STATE() = -1
    THROW;
  DELETE FROM @inserted;
  DECLARE @row INT = 0;
  DECLARE @rows INT = (SELECT COUNT(*) FROM OPENJSON(@0));
  WHILE @row < @rows
  BEGIN
    BEGIN TRY
      INSERT INTO ${table} WITH (ROWLOCK) ([message_id], [destination], [key], [payload], [headers], [available_at])
      OUTPUT inserted.[id], inserted.[message_id] INTO @inserted ([id], [message_id])
      ${OUTBOX_ROWS}
      WHERE CAST(j.[key] AS INT) = @row
        AND NOT EXISTS (SELECT 1 FROM ${table} AS o WHERE o.[message_id] = m.[message_id]);
    END TRY
    BEGIN CATCH
      IF ERROR_NUMBER() NOT IN (${UNIQUE_VIOLATIONS.join(', ')}) OR XACT_STATE() = -1
        THROW;
    END CATCH;
    SET @row += 1;
  END;
END CATCH;
SELECT [id], [message_id] FROM @inserted ORDER BY [id];`;

/** @0 = the message ids as a JSON array of strings. */
export const outboxFindSql = (table: string) => `SELECT [id], [message_id] FROM ${table}
WHERE [message_id] IN (SELECT CAST([value] AS UNIQUEIDENTIFIER) FROM OPENJSON(@0))`;

/**
 * Takes up to @3 tokens from the rate limit bucket of destination @0 (issue 41), refilled at @1
 * tokens per second up to @2, by the database clock. The insert creates the bucket, full, on the
 * first take (UPDLOCK, HOLDLOCK: a concurrent first take waits and then finds it); the update
 * refills and takes under the row's lock, so every replica's takes are ordered. Returns `granted`
 * and the `tokens` left, as PostgreSQL's. (No LEAST/GREATEST before SQL Server 2022: IIF.)
 */
export const rateLimitTakeSql = (table: string) => `SET NOCOUNT ON;
INSERT INTO ${table} ([destination], [tokens], [granted], [refilled_at])
SELECT @0, @2, 0, ${NOW}
WHERE NOT EXISTS (SELECT 1 FROM ${table} WITH (UPDLOCK, HOLDLOCK) WHERE [destination] = @0);
UPDATE b SET [granted] = g.[granted], [tokens] = a.[available] - g.[granted], [refilled_at] = n.[now]
OUTPUT inserted.[granted], inserted.[tokens]
FROM ${table} AS b WITH (UPDLOCK, ROWLOCK)
CROSS APPLY (SELECT ${NOW} AS [now]) AS n
CROSS APPLY (SELECT IIF(n.[now] > b.[refilled_at], DATEDIFF_BIG(MICROSECOND, b.[refilled_at], n.[now]), 0) / 1000000.0 AS [seconds]) AS s
CROSS APPLY (SELECT IIF(b.[tokens] + s.[seconds] * @1 > @2, @2, b.[tokens] + s.[seconds] * @1) AS [available]) AS a
CROSS APPLY (SELECT CAST(IIF(FLOOR(a.[available]) < @3, FLOOR(a.[available]), @3) AS INT) AS [granted]) AS g
WHERE b.[destination] = @0`;
