import { NOW } from './time';

// SQL Server (T-SQL) statements as pure functions of the (already bracket-quoted) table name, so tests can
// parse and pin exactly what runs. Parameters are positional (`@0`...), the placeholders of TypeORM's mssql
// driver, documented per statement; the dialect types each one explicitly.

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
SELECT m.[message_id], m.[destination], m.[key], m.[payload], m.[headers],
       COALESCE(CAST(SWITCHOFFSET(m.[available_at], '+00:00') AS DATETIME2), ${NOW})
FROM OPENJSON(@0) AS j
CROSS APPLY OPENJSON(j.[value]) WITH (
  [message_id] UNIQUEIDENTIFIER '$.messageId',
  [destination] NVARCHAR(255) '$.destination',
  [key] NVARCHAR(255) '$.key',
  [payload] NVARCHAR(MAX) '$.payload',
  [headers] NVARCHAR(MAX) '$.headers',
  [available_at] DATETIMEOFFSET '$.availableAt'
) AS m
ORDER BY CAST(j.[key] AS INT)`;
