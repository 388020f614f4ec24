import { COUNTED } from './lease.sql';
import { KEY_COLLATION } from './schema';
import { asUtc, NOW } from './time';

// Followers (batch pull handlers, the inbox relay; see postgres/followers.sql.ts). Parameters are positional (`@0`...).

/**
 * @0 = the heads as a JSON array of `{ id, source, aggregateId }`, @1 = most rows per head.
 * Per head that is still the first unfinished row of its aggregate, the next pending rows of its
 * aggregate in id order, each with `due` (available now); none for a head below which an earlier
 * row of the aggregate is unfinished (it committed after the head's claim: see
 * postgres/followers.sql.ts). Read under READ COMMITTED with no locking hint: the head's claim
 * keeps every other claim off these rows, and they are completed with the head or stay pending.
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
) AS f
WHERE NOT EXISTS (SELECT 1 FROM ${table} AS e
  WHERE e.[source] = h.[source] COLLATE ${KEY_COLLATION} AND e.[aggregate_id] = h.[aggregate_id] COLLATE ${KEY_COLLATION}
    AND e.[aggregate_id] IS NOT NULL AND e.[state] IN (N'pending', N'processing') AND e.[id] < h.[id])`;

/**
 * @0 = the followers as a JSON array of `{ id, headId, headToken }`. Marks followers processed,
 * counting their attempt, in the transaction that completed their heads; fenced by the head: only
 * a pending follower whose head (same aggregate, lower id) is `processed` under that token (see
 * postgres/followers.sql.ts). Returns the ids it changed.
 */
export const inboxCompleteFollowersSql = (table: string) => `${COUNTED}UPDATE t
SET [state] = N'processed', [processed_at] = ${NOW}, [claimed_at] = ${NOW}, [attempts] = t.[attempts] + 1
OUTPUT inserted.[id]
FROM ${table} AS t WITH (FORCESEEK)
  INNER JOIN OPENJSON(@0) WITH ([id] BIGINT '$.id', [head_id] BIGINT '$.headId', [head_token] UNIQUEIDENTIFIER '$.headToken') AS c
    ON t.[id] = c.[id]
  INNER JOIN ${table} AS h WITH (FORCESEEK) ON h.[id] = c.[head_id]
WHERE t.[state] = N'pending' AND h.[claim_token] = c.[head_token] AND h.[state] = N'processed'
  AND h.[source] = t.[source] AND h.[aggregate_id] = t.[aggregate_id] AND h.[id] < t.[id]`;
