import { COUNTED } from './lease.sql';
import { KEY_COLLATION } from './schema';
import { asUtc, NOW } from './time';

// Followers (batch pull handlers, the inbox relay; see postgres/followers.sql.ts). Parameters are positional (`@0`...).

/**
 * @0 = the heads as a JSON array of `{ id, source, aggregateId }`, @1 = most rows per head.
 * Per head, the next pending rows of its aggregate in id order, each with `due` (available now).
 * Read under READ COMMITTED with no locking hint: the head's claim keeps every other claim off
 * these rows, and they are completed with the head or stay pending.
 */
export const inboxFollowersSql = (table: string) => `SELECT f.[id], f.[source], f.[idempotency_key], f.[aggregate_id], f.[payload],
       f.[headers], f.[attempts], ${asUtc('f.[received_at]')} AS [received_at], f.[due], h.[id] AS [head_id]
FROM OPENJSON(@0) WITH ([id] BIGINT '$.id', [source] NVARCHAR(255) '$.source', [aggregate_id] NVARCHAR(255) '$.aggregateId') AS h
CROSS APPLY (
  SELECT TOP (@1) i.[id], i.[source], i.[idempotency_key], i.[aggregate_id], i.[payload], i.[headers], i.[attempts],
         i.[received_at], CASE WHEN i.[available_at] <= ${NOW} THEN 1 ELSE 0 END AS [due]
  FROM ${table} AS i
  WHERE i.[source] = h.[source] COLLATE ${KEY_COLLATION} AND i.[aggregate_id] = h.[aggregate_id] COLLATE ${KEY_COLLATION} AND i.[aggregate_id] IS NOT NULL
    AND i.[state] = N'pending' AND i.[id] > h.[id]
  ORDER BY i.[id]
) AS f`;

/**
 * @0 = the ids as a JSON array. Marks followers processed, counting their attempt, in the
 * transaction that completed their heads; returns the ids it changed.
 */
export const inboxCompleteFollowersSql = (table: string) => `${COUNTED}UPDATE t
SET [state] = N'processed', [processed_at] = ${NOW}, [claimed_at] = ${NOW}, [attempts] = t.[attempts] + 1
OUTPUT inserted.[id]
FROM ${table} AS t WITH (FORCESEEK) INNER JOIN OPENJSON(@0) WITH ([id] BIGINT '$') AS c ON t.[id] = c.[id]
WHERE t.[state] = N'pending'`;
