import { LOCK_TIMEOUT_ERROR } from './claims.sql';
import { COUNTED } from './lease.sql';
import { indexOf } from './quoting';
import { KEY_COLLATION } from './schema';
import { asUtc, NOW } from './time';

// Followers (batch pull handlers, the inbox relay, the outbox poller; see postgres/followers.sql.ts). Parameters are positional (`@0`...).

/**
 * How long the followers read waits for one row lock. With READ_COMMITTED_SNAPSHOT OFF it waits for
 * an open transaction that holds a row of the aggregate (a `receive()` not yet committed): the
 * relay reads followers before its heads' lease keepers start, and a batch pull handler reads them
 * in its own transaction, so an unbounded wait would run their leases down or fail their attempt.
 */
export const FOLLOWERS_LOCK_WAIT_MS = 500;

/**
 * A followers read under FOLLOWERS_LOCK_WAIT_MS that hands out all its rows or none: `declare`
 * declares the table variable `@followers`, `fill` inserts into it, `select` sends it. When the
 * lock wait runs out it returns no follower at all (a head is always handled correctly alone) and
 * leaves the caller's transaction as it was: `XACT_ABORT OFF` (restored when the batch returns,
 * like every SET in sp_executesql) makes the lock timeout end that statement only. The rows are
 * read into the table variable first, and sent only once the read is complete: a result streamed
 * before the timeout would hand out part of it.
 */
const allOrNoFollowers = (declare: string, fill: string, select: string) => `SET XACT_ABORT OFF;
SET LOCK_TIMEOUT ${FOLLOWERS_LOCK_WAIT_MS};
${declare}
BEGIN TRY
${fill}
END TRY
BEGIN CATCH
  IF ERROR_NUMBER() <> ${LOCK_TIMEOUT_ERROR} OR XACT_STATE() = -1
    THROW;
  DELETE FROM @followers;
END CATCH;
${select}`;

/**
 * @0 = the heads as a JSON array of `{ id, source, aggregateId }`, @1 = most rows per head.
 * Per head that is still the first unfinished row of its aggregate, the next pending rows of its
 * aggregate in id order, each with `due` (available now); none for a head below which an earlier
 * row of the aggregate is unfinished (it committed after the head's claim: see
 * postgres/followers.sql.ts). Read under READ COMMITTED with no locking hint: the head's claim
 * keeps every other claim off these rows, and they are completed with the head or stay pending.
 * All or none after a lock wait (allOrNoFollowers). The pending filter also states the aggregate index's own (`IN (N'pending',
 * N'processing') AND [aggregate_id] IS NOT NULL`), so that filtered index matches without relying
 * on SQL Server to infer it from `= N'pending'`.
 */
export const inboxFollowersSql = (table: string) =>
  allOrNoFollowers(
    `DECLARE @followers TABLE ([id] BIGINT NOT NULL, [source] NVARCHAR(255) COLLATE ${KEY_COLLATION} NOT NULL,
  [idempotency_key] NVARCHAR(255) COLLATE ${KEY_COLLATION} NOT NULL, [aggregate_id] NVARCHAR(255) COLLATE ${KEY_COLLATION} NOT NULL,
  [payload] NVARCHAR(MAX) NOT NULL, [headers] NVARCHAR(MAX) NOT NULL, [attempts] INT NOT NULL, [received_at] DATETIME2 NOT NULL,
  [due] INT NOT NULL, [head_id] BIGINT NOT NULL);`,
    `  INSERT INTO @followers ([id], [source], [idempotency_key], [aggregate_id], [payload], [headers], [attempts], [received_at], [due], [head_id])
  SELECT f.[id], f.[source], f.[idempotency_key], f.[aggregate_id], f.[payload], f.[headers], f.[attempts], f.[received_at], f.[due], h.[id]
  FROM OPENJSON(@0) WITH ([id] BIGINT '$.id', [source] NVARCHAR(255) '$.source', [aggregate_id] NVARCHAR(255) '$.aggregateId') AS h
  CROSS APPLY (
    SELECT TOP (@1) i.[id], i.[source], i.[idempotency_key], i.[aggregate_id], i.[payload], i.[headers], i.[attempts],
           i.[received_at], CASE WHEN i.[available_at] <= ${NOW} THEN 1 ELSE 0 END AS [due]
    FROM ${table} AS i
    WHERE i.[source] = h.[source] COLLATE ${KEY_COLLATION} AND i.[aggregate_id] = h.[aggregate_id] COLLATE ${KEY_COLLATION}
      AND i.[aggregate_id] IS NOT NULL AND i.[state] IN (N'pending', N'processing') AND i.[state] = N'pending' AND i.[id] > h.[id]
    ORDER BY i.[id]
  ) AS f
  WHERE NOT EXISTS (SELECT 1 FROM ${table} AS e
    WHERE e.[source] = h.[source] COLLATE ${KEY_COLLATION} AND e.[aggregate_id] = h.[aggregate_id] COLLATE ${KEY_COLLATION}
      AND e.[aggregate_id] IS NOT NULL AND e.[state] IN (N'pending', N'processing') AND e.[id] < h.[id]);`,
    `SELECT [id], [source], [idempotency_key], [aggregate_id], [payload], [headers], [attempts], ${asUtc('[received_at]')} AS [received_at],
       [due], [head_id]
FROM @followers`,
  );

/**
 * @0 = the followers as a JSON array of `{ id, headId, headToken }`. Marks followers processed,
 * counting their attempt, in the transaction that completed their heads; fenced by the head: only
 * a pending follower whose head (same aggregate, lower id) is `processed` under that token (see
 * postgres/followers.sql.ts). Returns the ids it changed. Both rows by primary-key seek, pinned to
 * that index with INDEX (a bare FORCESEEK would also admit a seek on another index whose filter matches).
 */
export const inboxCompleteFollowersSql = (table: string) => {
  const byId = `WITH (INDEX (${indexOf(table, 'pkey')}), FORCESEEK)`;
  return `${COUNTED}UPDATE t
SET [state] = N'processed', [processed_at] = ${NOW}, [claimed_at] = ${NOW}, [attempts] = t.[attempts] + 1
OUTPUT inserted.[id]
FROM ${table} AS t ${byId}
  INNER JOIN OPENJSON(@0) WITH ([id] BIGINT '$.id', [head_id] BIGINT '$.headId', [head_token] UNIQUEIDENTIFIER '$.headToken') AS c
    ON t.[id] = c.[id]
  INNER JOIN ${table} AS h ${byId} ON h.[id] = c.[head_id]
WHERE t.[state] = N'pending' AND h.[claim_token] = c.[head_token] AND h.[state] = N'processed'
  AND h.[source] = t.[source] AND h.[aggregate_id] = t.[aggregate_id] AND h.[id] < t.[id]`;
};

/**
 * @0 = the outbox heads as a JSON array of `{ id, key }`, @1 = most rows per head. The outbox's
 * followers read (issue 36; see postgres/followers.sql.ts): per head still first of its key, the
 * next pending rows of the key in id order with `due`; none behind a head with an earlier
 * unfinished row. Read as inboxFollowersSql reads (READ COMMITTED, no locking hint, at most
 * FOLLOWERS_LOCK_WAIT_MS for a row lock: then no follower at all). The pending filter states the
 * key index's own, so that filtered index matches.
 */
export const outboxFollowersSql = (table: string) =>
  allOrNoFollowers(
    `DECLARE @followers TABLE ([id] BIGINT NOT NULL, [message_id] UNIQUEIDENTIFIER NOT NULL, [destination] NVARCHAR(255) NOT NULL,
  [key] NVARCHAR(255) COLLATE ${KEY_COLLATION} NOT NULL, [payload] NVARCHAR(MAX) NOT NULL, [headers] NVARCHAR(MAX) NOT NULL,
  [attempts] INT NOT NULL, [created_at] DATETIME2 NOT NULL, [due] INT NOT NULL, [head_id] BIGINT NOT NULL);`,
    `  INSERT INTO @followers ([id], [message_id], [destination], [key], [payload], [headers], [attempts], [created_at], [due], [head_id])
  SELECT f.[id], f.[message_id], f.[destination], f.[key], f.[payload], f.[headers], f.[attempts], f.[created_at], f.[due], h.[id]
  FROM OPENJSON(@0) WITH ([id] BIGINT '$.id', [key] NVARCHAR(255) '$.key') AS h
  CROSS APPLY (
    SELECT TOP (@1) o.[id], o.[message_id], o.[destination], o.[key], o.[payload], o.[headers], o.[attempts], o.[created_at],
           CASE WHEN o.[available_at] <= ${NOW} THEN 1 ELSE 0 END AS [due]
    FROM ${table} AS o
    WHERE o.[key] = h.[key] COLLATE ${KEY_COLLATION} AND o.[key] IS NOT NULL
      AND o.[state] IN (N'pending', N'processing') AND o.[state] = N'pending' AND o.[id] > h.[id]
    ORDER BY o.[id]
  ) AS f
  WHERE NOT EXISTS (SELECT 1 FROM ${table} AS e
    WHERE e.[key] = h.[key] COLLATE ${KEY_COLLATION} AND e.[key] IS NOT NULL
      AND e.[state] IN (N'pending', N'processing') AND e.[id] < h.[id]);`,
    `SELECT [id], [message_id], [destination], [key], [payload], [headers], [attempts], ${asUtc('[created_at]')} AS [created_at],
       [due], [head_id]
FROM @followers`,
  );

/**
 * The fenced completion of outbox heads with followers (see postgres/followers.sql.ts), in one
 * transaction: @0 = the heads as a JSON array of `{ id, token }`, @1 = the followers as a JSON
 * array of `{ id, headId }`. The heads under their fence first; then each follower still pending,
 * of its head's key and after it, only behind a head completed here. Rows by primary-key seek.
 * Returns a row (`kind`, `id`) for each head whose fence held (`head`) and for each follower
 * finished (`follower`).
 */
const headsWithFollowers = (table: string, finishHeads: string, finishFollowers: string, after = '') => {
  const byId = `WITH (INDEX (${indexOf(table, 'pkey')}), FORCESEEK)`;
  return `SET XACT_ABORT ON;
DECLARE @heads TABLE ([id] BIGINT NOT NULL PRIMARY KEY, [key] NVARCHAR(255) COLLATE ${KEY_COLLATION} NULL, [claimed_by] UNIQUEIDENTIFIER NULL);
DECLARE @gone TABLE ([id] BIGINT NOT NULL PRIMARY KEY);
BEGIN TRANSACTION;
${finishHeads}
FROM ${table} AS t ${byId}
  INNER JOIN OPENJSON(@0) WITH ([id] BIGINT '$.id', [token] UNIQUEIDENTIFIER '$.token') AS c ON t.[id] = c.[id]
WHERE t.[state] = N'processing' AND t.[claim_token] = c.[token] AND t.[lease_expires_at] > ${NOW};
${finishFollowers}
FROM ${table} AS t ${byId}
  INNER JOIN OPENJSON(@1) WITH ([id] BIGINT '$.id', [head_id] BIGINT '$.headId') AS f ON t.[id] = f.[id]
  INNER JOIN @heads AS h ON h.[id] = f.[head_id]
WHERE t.[state] = N'pending' AND t.[key] = h.[key] AND t.[id] > h.[id];
${after}COMMIT TRANSACTION;
SELECT N'head' AS [kind], [id] FROM @heads UNION ALL SELECT N'follower', [id] FROM @gone;`;
};

/** @0 = heads, @1 = followers. The heads and their followers marked `sent` (followers' attempts counted, `claimed_by` their head's). */
export const outboxCompleteWithFollowersSql = (table: string) =>
  headsWithFollowers(
    table,
    `UPDATE t SET [state] = N'sent', [sent_at] = ${NOW}, [lease_expires_at] = NULL
OUTPUT inserted.[id], inserted.[key], inserted.[claimed_by] INTO @heads`,
    `UPDATE t SET [state] = N'sent', [sent_at] = ${NOW}, [claimed_at] = ${NOW}, [attempts] = t.[attempts] + 1, [claimed_by] = h.[claimed_by]
OUTPUT inserted.[id] INTO @gone`,
  );

/** `outboxCompleteWithFollowersSql` for `outbox.sentRows: 'delete'`: both deleted, with their attempt history. */
export const outboxDeleteWithFollowersSql = (table: string, history: string) =>
  headsWithFollowers(
    table,
    `DELETE t
OUTPUT deleted.[id], deleted.[key], deleted.[claimed_by] INTO @heads`,
    `DELETE t
OUTPUT deleted.[id] INTO @gone`,
    `DELETE a FROM ${history} AS a INNER JOIN (SELECT [id] FROM @heads UNION ALL SELECT [id] FROM @gone) AS d ON a.[row_id] = d.[id];
`,
  );
