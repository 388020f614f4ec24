import { KEY_COLLATION } from './schema';
import { asUtc, msFromNow, NOW } from './time';

// The claims (outbox, inbox relay, inbox pull) behind their application locks, and the reclaims of expired leases.

/** An application lock waits this long before sp_getapplock gives up (the seed: 10 seconds). */
export const CLAIM_LOCK_WAIT_MS = 10_000;

/**
 * How long a claim waits for one row lock (`SET LOCK_TIMEOUT`) once it holds the claim lock. With
 * READ_COMMITTED_SNAPSHOT OFF the head-of-key probes wait for producers' open transactions while
 * every other claim waits for the claim lock; this bounds that stall (error 1222), well inside
 * the request timeout's margin (CLAIM_STATEMENT_MARGIN_MS).
 */
export const CLAIM_ROW_LOCK_WAIT_MS = 3_000;

/** SQL Server's "lock request time out period exceeded" (SET LOCK_TIMEOUT ran out). */
export const LOCK_TIMEOUT_ERROR = 1222;

/**
 * sp_getapplock's negative results become error numbers 51001 (timeout, -1), 51002 (cancelled,
 * -2), 51003 (deadlock victim, -3) and 51999 (-999, a parameter or call error): 51000 minus the result.
 */
export const CLAIM_LOCK_ERROR_BASE = 51_000;

/**
 * Takes the claim lock (@0 = its name) or stops the batch with a clear error: a lock that was not
 * granted must never let the claim run unserialized, nor look like "nothing to claim". The claim
 * transaction owns the lock, so its commit or rollback releases it whatever ends it: a session-owned
 * lock outlived a batch cut off by a request timeout (with XACT_ABORT ON the rollback skipped any
 * release) and went back to the pool still held, stalling every other claim.
 */
const takeClaimLock = () => `DECLARE @claim_lock INT;
EXEC @claim_lock = sp_getapplock @Resource = @0, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = ${CLAIM_LOCK_WAIT_MS};
IF @claim_lock < 0
BEGIN
  DECLARE @claim_lock_error INT = ${CLAIM_LOCK_ERROR_BASE} - @claim_lock;
  THROW @claim_lock_error, N'QueueBox: sp_getapplock did not grant the claim lock.', 1;
END;`;

/**
 * A claim behind its transaction-owned application lock (outbox poller, inbox relay, pull), its row
 * lock waits bounded by LOCK_TIMEOUT. SET LOCK_TIMEOUT outlives the batch on its pooled
 * connection, so it goes back to the default (-1, wait) after the claim, also when it fails; a
 * batch cut off before that is reset by the dialect (claimLockTimeoutResetSql).
 */
const underClaimLock = (claim: string) => `${takeClaimLock()}
SET LOCK_TIMEOUT ${CLAIM_ROW_LOCK_WAIT_MS};
BEGIN TRY
${claim}
END TRY
BEGIN CATCH
  SET LOCK_TIMEOUT -1;
  THROW;
END CATCH;
SET LOCK_TIMEOUT -1;`;

/** Resets the row-lock wait a claim batch cut off before its end left on the connection. */
export const claimLockTimeoutResetSql = () => 'SET LOCK_TIMEOUT -1';

const setClaimed = (alias: string, leaseParam: string) => `SET [state] = N'processing', [claim_token] = NEWID(), [claimed_at] = ${NOW},
    [lease_expires_at] = ${msFromNow(leaseParam)}, [attempts] = ${alias}.[attempts] + 1`;

/**
 * How many of the oldest available pending rows a claim looks through for heads of keys before it
 * looks key by key (see the PostgreSQL twin, CLAIM_SCAN_WINDOW).
 */
export const CLAIM_SCAN_WINDOW = 500;

/**
 * Whether pending outbox row `alias` is the head of its key: no earlier unfinished row of the key,
 * none of it in flight. Two probes that each stop at their first index entry (the key index
 * from the row's id down, the in-flight unique index), whatever the key's backlog.
 */
const headOfKey = (table: string, alias: string) => `(${alias}.[key] IS NULL OR (
      NOT EXISTS (SELECT 1 FROM ${table} AS e WHERE e.[key] = ${alias}.[key] AND e.[key] IS NOT NULL
        AND e.[state] IN (N'pending', N'processing') AND e.[id] < ${alias}.[id])
      AND NOT EXISTS (SELECT 1 FROM ${table} AS e WHERE e.[key] = ${alias}.[key] AND e.[key] IS NOT NULL
        AND e.[state] = N'processing')))`;

/**
 * Hints of the locked reads: UPDLOCK keeps the rows until the claim ends, READPAST skips rows
 * others hold, ROWLOCK locks only them, FORCESEEK keeps a misestimate (a stale statistic, a table
 * variable's guessed row count) from turning the read into a scan that locks its way through
 * the table. Each read it is on has an index to seek: the primary key for the ids found, the
 * lease index for expired pull claims.
 */
const LOCKED_READ = 'WITH (UPDLOCK, READPAST, ROWLOCK, FORCESEEK)';

/** The rows found (`@found`), oldest first, locked (LOCKED_READ). */
const lockFound = (table: string, alias: string, limit: string) => `INSERT INTO @candidates ([id])
  SELECT TOP (${limit}) ${alias}.[id] FROM ${table} AS ${alias} ${LOCKED_READ}
  INNER JOIN @found AS f ON f.[id] = ${alias}.[id]
  WHERE ${alias}.[state] = N'pending'
  ORDER BY ${alias}.[available_at], ${alias}.[id];`;

/**
 * @0 = outbox lock, @1 = limit, @2 = lease in ms. Takes available pending rows oldest first, only
 * the head of each key (no earlier unfinished row, none in flight), in two steps so that its cost
 * does not grow with the backlog of keys in flight (see the PostgreSQL twin): the heads among the
 * oldest CLAIM_SCAN_WINDOW rows; then, only when those were fewer than the limit, the head of each
 * key with unfinished rows (one seek per key, from MIN(key) up) and the oldest rows without a key
 * (their own filtered index). The ids found are locked and materialized once in `@candidates`, so
 * the limit applies exactly once. The key lookups of the second step state `[key] IS NOT NULL`,
 * which `= @key` implies: SQL Server matches a filtered index (`... AND [key] IS NOT NULL`) only
 * to a query that states its filter, and would scan otherwise. The scans for candidates pass over rows others hold (READPAST,
 * as the claim always did); the head checks never do: skipping an earlier row of a key held by
 * someone else would take a later one for its head.
 */
export const outboxClaimSql = (table: string) =>
  underClaimLock(`  DECLARE @candidates TABLE ([id] BIGINT NOT NULL PRIMARY KEY);
  DECLARE @found TABLE ([id] BIGINT NOT NULL PRIMARY KEY);
  INSERT INTO @found ([id])
  SELECT TOP (@1) w.[id] FROM (
    SELECT TOP (${CLAIM_SCAN_WINDOW}) o.[id], o.[key], o.[available_at] FROM ${table} AS o WITH (READPAST)
    WHERE o.[state] = N'pending' AND o.[available_at] <= ${NOW}
    ORDER BY o.[available_at], o.[id]
  ) AS w
  WHERE ${headOfKey(table, 'w')}
  ORDER BY w.[available_at], w.[id];
  IF (SELECT COUNT(*) FROM @found) < @1
  BEGIN
    DECLARE @key NVARCHAR(255) = (SELECT MIN(k.[key]) FROM ${table} AS k
      WHERE k.[state] IN (N'pending', N'processing') AND k.[key] IS NOT NULL);
    WHILE @key IS NOT NULL
    BEGIN
      INSERT INTO @found ([id])
      SELECT h.[id] FROM (
        SELECT TOP (1) o.[id], o.[state], o.[available_at] FROM ${table} AS o
        WHERE o.[key] = @key AND o.[key] IS NOT NULL AND o.[state] IN (N'pending', N'processing')
        ORDER BY o.[id]
      ) AS h
      WHERE h.[state] = N'pending' AND h.[available_at] <= ${NOW}
        AND NOT EXISTS (SELECT 1 FROM ${table} AS e WHERE e.[key] = @key AND e.[key] IS NOT NULL AND e.[state] = N'processing')
        AND NOT EXISTS (SELECT 1 FROM @found AS f WHERE f.[id] = h.[id]);
      SET @key = (SELECT MIN(k.[key]) FROM ${table} AS k
        WHERE k.[state] IN (N'pending', N'processing') AND k.[key] IS NOT NULL AND k.[key] > @key);
    END;
    INSERT INTO @found ([id])
    SELECT TOP (@1) o.[id] FROM ${table} AS o WITH (READPAST)
    WHERE o.[state] = N'pending' AND o.[key] IS NULL AND o.[available_at] <= ${NOW}
      AND NOT EXISTS (SELECT 1 FROM @found AS f WHERE f.[id] = o.[id])
    ORDER BY o.[available_at], o.[id];
  END;
  ${lockFound(table, 'o', '@1')}
  UPDATE o
  ${setClaimed('o', '@2')}
  OUTPUT inserted.[id], inserted.[message_id], inserted.[destination], inserted.[key], inserted.[payload], inserted.[headers],
         inserted.[attempts], inserted.[claim_token], ${asUtc('inserted.[lease_expires_at]')} AS [lease_expires_at],
         ${asUtc('inserted.[created_at]')} AS [created_at]
  FROM ${table} AS o WITH (ROWLOCK) INNER JOIN @candidates AS c ON c.[id] = o.[id]
  WHERE o.[state] = N'pending';`);

/** @0 = max attempts: expired claims go back to pending, or to dead on their last attempt. */
const RECLAIM_SET = `SET [state] = CASE WHEN [attempts] >= @0 THEN N'dead' ELSE N'pending' END,
    [claim_token] = NULL, [lease_expires_at] = NULL,
    [last_error] = CONCAT(N'lease expired on attempt ', [attempts], N' of ', @0,
      N': the worker crashed, was stopped or outlived its lease')`;

/** @0 = max attempts. */
export const outboxReclaimSql = (table: string) => `UPDATE ${table}
${RECLAIM_SET}
OUTPUT inserted.[state], inserted.[destination] AS [name]
WHERE [state] = N'processing' AND [lease_expires_at] <= ${NOW}`;

const INBOX_OUTPUT = `OUTPUT inserted.[id], inserted.[source], inserted.[idempotency_key], inserted.[aggregate_id], inserted.[payload],
         inserted.[headers], inserted.[attempts], inserted.[claim_token], ${asUtc('inserted.[lease_expires_at]')} AS [lease_expires_at],
         ${asUtc('inserted.[received_at]')} AS [received_at]`;

/** Only the head of each (source, aggregate): no earlier unfinished row, none in flight but itself (see headOfKey). */
const headOfAggregate = (table: string, alias: string) => `(${alias}.[aggregate_id] IS NULL OR (
      NOT EXISTS (SELECT 1 FROM ${table} AS e WHERE e.[source] = ${alias}.[source] AND e.[aggregate_id] = ${alias}.[aggregate_id]
        AND e.[aggregate_id] IS NOT NULL AND e.[state] IN (N'pending', N'processing') AND e.[id] < ${alias}.[id])
      AND NOT EXISTS (SELECT 1 FROM ${table} AS e WHERE e.[source] = ${alias}.[source] AND e.[aggregate_id] = ${alias}.[aggregate_id]
        AND e.[aggregate_id] IS NOT NULL AND e.[state] = N'processing' AND e.[id] <> ${alias}.[id])))`;

/**
 * Finds up to `limit` available pending heads of the sources in `@sources` into `@found`, as the
 * outbox claim does (see outboxClaimSql): per source (CROSS APPLY, so each walks its
 * (source, available_at, id) index in order) the heads among its oldest CLAIM_SCAN_WINDOW rows;
 * then, only when those were fewer than the limit, per source the head of each aggregate (one seek
 * per aggregate) and the oldest rows without one.
 */
const inboxPendingSearch = (table: string, limit: string) => `DECLARE @found TABLE ([id] BIGINT NOT NULL PRIMARY KEY);
  INSERT INTO @found ([id])
  SELECT TOP (${limit}) h.[id]
  FROM @sources AS s
  CROSS APPLY (
    SELECT TOP (${limit}) w.[id], w.[available_at] FROM (
      SELECT TOP (${CLAIM_SCAN_WINDOW}) i.[id], i.[source], i.[aggregate_id], i.[available_at] FROM ${table} AS i WITH (READPAST)
      WHERE i.[source] = s.[source] AND i.[state] = N'pending' AND i.[available_at] <= ${NOW}
      ORDER BY i.[available_at], i.[id]
    ) AS w
    WHERE ${headOfAggregate(table, 'w')}
    ORDER BY w.[available_at], w.[id]
  ) AS h
  ORDER BY h.[available_at], h.[id];
  IF (SELECT COUNT(*) FROM @found) < ${limit}
  BEGIN
    DECLARE @n INT = (SELECT MIN([n]) FROM @sources);
    DECLARE @source NVARCHAR(255);
    DECLARE @aggregate NVARCHAR(255);
    WHILE @n IS NOT NULL
    BEGIN
      SET @source = (SELECT [source] FROM @sources WHERE [n] = @n);
      SET @aggregate = (SELECT MIN(k.[aggregate_id]) FROM ${table} AS k
        WHERE k.[source] = @source AND k.[state] IN (N'pending', N'processing') AND k.[aggregate_id] IS NOT NULL);
      WHILE @aggregate IS NOT NULL
      BEGIN
        INSERT INTO @found ([id])
        SELECT h.[id] FROM (
          SELECT TOP (1) i.[id], i.[state], i.[available_at] FROM ${table} AS i
          WHERE i.[source] = @source AND i.[aggregate_id] = @aggregate AND i.[aggregate_id] IS NOT NULL
            AND i.[state] IN (N'pending', N'processing')
          ORDER BY i.[id]
        ) AS h
        WHERE h.[state] = N'pending' AND h.[available_at] <= ${NOW}
          AND NOT EXISTS (SELECT 1 FROM ${table} AS e
            WHERE e.[source] = @source AND e.[aggregate_id] = @aggregate AND e.[aggregate_id] IS NOT NULL
              AND e.[state] = N'processing')
          AND NOT EXISTS (SELECT 1 FROM @found AS f WHERE f.[id] = h.[id]);
        SET @aggregate = (SELECT MIN(k.[aggregate_id]) FROM ${table} AS k
          WHERE k.[source] = @source AND k.[state] IN (N'pending', N'processing') AND k.[aggregate_id] IS NOT NULL
            AND k.[aggregate_id] > @aggregate);
      END;
      INSERT INTO @found ([id])
      SELECT TOP (${limit}) i.[id] FROM ${table} AS i WITH (READPAST)
      WHERE i.[source] = @source AND i.[state] = N'pending' AND i.[aggregate_id] IS NULL AND i.[available_at] <= ${NOW}
        AND NOT EXISTS (SELECT 1 FROM @found AS f WHERE f.[id] = i.[id])
      ORDER BY i.[available_at], i.[id];
      SET @n = (SELECT MIN([n]) FROM @sources WHERE [n] > @n);
    END;
  END;`;

/**
 * @0 = inbox lock, @1 = limit, @2 = lease in ms, @3 = the sources as a JSON array of strings. The
 * relay's claim: available pending rows of its sources, oldest first, only the head of each
 * (source, aggregate), found per source (inboxPendingSearch); locked and materialized once, like
 * the outbox claim.
 */
export const inboxRelayClaimSql = (table: string) =>
  underClaimLock(`  DECLARE @candidates TABLE ([id] BIGINT NOT NULL PRIMARY KEY);
  DECLARE @sources TABLE ([n] INT IDENTITY(1, 1) PRIMARY KEY, [source] NVARCHAR(255) COLLATE ${KEY_COLLATION} NOT NULL);
  INSERT INTO @sources ([source]) SELECT s.[source] FROM OPENJSON(@3) WITH ([source] NVARCHAR(255) '$') AS s;
  ${inboxPendingSearch(table, '@1')}
  ${lockFound(table, 'i', '@1')}
  UPDATE i
  ${setClaimed('i', '@2')}
  ${INBOX_OUTPUT}
  FROM ${table} AS i WITH (ROWLOCK) INNER JOIN @candidates AS c ON c.[id] = i.[id]
  WHERE i.[state] = N'pending';`);

/** @0 = max attempts, @1 = the sources as a JSON array of strings. The relay's reclaim step, limited to its sources. */
export const inboxReclaimSql = (table: string) => `UPDATE ${table}
${RECLAIM_SET}
OUTPUT inserted.[state], inserted.[source] AS [name]
WHERE [state] = N'processing' AND [lease_expires_at] <= ${NOW}
  AND [source] IN (SELECT s.[source] COLLATE ${KEY_COLLATION} FROM OPENJSON(@1) WITH ([source] NVARCHAR(255) '$') AS s)`;

/**
 * @0 = pull lock (per table and source), @1 = limit, @2 = lease in ms, @3 = source. Runs inside
 * the claim transaction, which owns the lock. Takes rows whose lease expired (a crashed client's)
 * first, first of their aggregate or not (see postgres/claims.sql.ts inboxPullClaimSql: I8), then
 * available pending rows (inboxPendingSearch, for the room left), only the head of each
 * aggregate; two reads so each uses its own index in its own order, both materialized in one table
 * variable before the one UPDATE.
 */
export const inboxPullClaimSql = (table: string) =>
  underClaimLock(`DECLARE @candidates TABLE ([id] BIGINT NOT NULL PRIMARY KEY);
INSERT INTO @candidates ([id])
SELECT TOP (@1) i.[id] FROM ${table} AS i ${LOCKED_READ}
WHERE i.[source] = @3 AND i.[state] = N'processing' AND i.[lease_expires_at] <= ${NOW}
ORDER BY i.[lease_expires_at];
DECLARE @room INT = @1 - (SELECT COUNT(*) FROM @candidates);
DECLARE @sources TABLE ([n] INT IDENTITY(1, 1) PRIMARY KEY, [source] NVARCHAR(255) COLLATE ${KEY_COLLATION} NOT NULL);
INSERT INTO @sources ([source]) VALUES (@3);
${inboxPendingSearch(table, '@room')}
${lockFound(table, 'i', '@room')}
UPDATE i
${setClaimed('i', '@2')}
${INBOX_OUTPUT}
FROM ${table} AS i WITH (ROWLOCK) INNER JOIN @candidates AS c ON c.[id] = i.[id]
WHERE i.[state] = N'pending' OR (i.[state] = N'processing' AND i.[lease_expires_at] <= ${NOW});`);
