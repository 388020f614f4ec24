/**
 * SQL Server (T-SQL) statements as pure functions of the (already bracket-quoted) table name, so
 * tests can parse and pin exactly what runs. Parameters are positional (`@0`...), the placeholders
 * of TypeORM's mssql driver, documented per statement; the dialect types each one explicitly.
 */

// I7: SYSUTCDATETIME() is evaluated when the statement runs, never at the transaction's start, so
// a fence evaluated late in a long transaction sees an expired lease. UTC, because the columns
// are DATETIME2 without an offset (GETDATE() would store the server's local time).
export const NOW = 'SYSUTCDATETIME()';

/**
 * The collation of the key columns (migration 004). Table variables take the database's default
 * collation, and OPENJSON's columns too: every one compared with a key column names this one, or
 * SQL Server refuses the comparison (error 468) or compares under the wrong rules.
 */
export const KEY_COLLATION = 'Latin1_General_100_BIN2';

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

/** `now + ms` for a BIGINT parameter: seconds and milliseconds apart, as DATEADD takes an INT (24 days of milliseconds). */
const msFromNow = (param: string) =>
  `DATEADD(MILLISECOND, CAST(${param} % 1000 AS INT), DATEADD(SECOND, CAST(${param} / 1000 AS INT), ${NOW}))`;

/** DATETIME2 carries no offset and TypeORM reads it as local time; returned as DATETIMEOFFSET, it is read as the UTC instant it is. */
const asUtc = (column: string) => `TODATETIMEOFFSET(${column}, '+00:00')`;

/**
 * Starts a batch whose affected-row count decides a fence (or the end of retention): with
 * `SET NOCOUNT ON` (a server-wide `user options` setting, or a login trigger) no count comes back,
 * the driver reports 0, and every fenced write would look lost. Set inside the batch, it goes
 * back to the connection's setting when the batch ends.
 */
const COUNTED = 'SET NOCOUNT OFF;\n';

/** The claim fence: @0 = id, @1 = claim token. */
const FENCE = `[id] = @0 AND [state] = N'processing' AND [claim_token] = @1 AND [lease_expires_at] > ${NOW}`;

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

/**
 * @0 = the rows as one JSON array of `{ messageId, destination, key, payload, headers, availableAt }`
 * (payload and headers as JSON text, availableAt as an ISO-8601 UTC string or null). One
 * parameter keeps a batch one statement, whatever its size (a statement takes at most 2,100
 * parameters); identities follow the array's order.
 */
export const outboxInsertSql = (
  table: string,
) => `INSERT INTO ${table} ([message_id], [destination], [key], [payload], [headers], [available_at])
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

/** @0 = id, @1 = token, @2 = lease in ms. */
export const leaseRenewSql = (table: string) => `UPDATE ${table} SET [lease_expires_at] = ${msFromNow('@2')}
OUTPUT ${asUtc('inserted.[lease_expires_at]')} AS [lease_expires_at]
WHERE ${FENCE}`;

type Finished = { state: 'sent' | 'processed'; column: 'sent_at' | 'processed_at' };

/** @0 = id, @1 = token. `state`/`column`: `sent`/`sent_at` or `processed`/`processed_at`. */
export const leaseCompleteSql = (table: string, finished: Finished) =>
  `${COUNTED}UPDATE ${table} SET [state] = N'${finished.state}', [${finished.column}] = ${NOW}, [lease_expires_at] = NULL
WHERE ${FENCE}`;

/**
 * @0 = the claims as one JSON array of `{ id, token }`. Completes a batch with one fenced
 * statement and returns the ids it completed; an id missing from the result lost its claim.
 * FORCESEEK: one primary-key seek per claim, never a scan (OPENJSON's row count is a guess).
 */
export const leaseCompleteBatchSql = (table: string, finished: Finished) => `UPDATE t
SET [state] = N'${finished.state}', [${finished.column}] = ${NOW}, [lease_expires_at] = NULL
OUTPUT inserted.[id]
FROM ${table} AS t WITH (FORCESEEK) INNER JOIN OPENJSON(@0) WITH ([id] BIGINT '$.id', [token] UNIQUEIDENTIFIER '$.token') AS c
  ON t.[id] = c.[id]
WHERE t.[state] = N'processing' AND t.[claim_token] = c.[token] AND t.[lease_expires_at] > ${NOW}`;

/** @0 = id, @1 = token. Gives an unstarted claim back (shutdown): pending again, its attempt not counted. */
export const leaseReleaseSql = (table: string) => `${COUNTED}UPDATE ${table}
SET [state] = N'pending', [attempts] = [attempts] - 1, [claim_token] = NULL, [lease_expires_at] = NULL
WHERE ${FENCE}`;

/** @0 = id, @1 = token, @2 = delay in ms, @3 = error text. */
export const leaseRetrySql = (table: string) => `${COUNTED}UPDATE ${table}
SET [state] = N'pending', [available_at] = ${msFromNow('@2')}, [claim_token] = NULL, [lease_expires_at] = NULL, [last_error] = @3
WHERE ${FENCE}`;

/** @0 = id, @1 = token, @2 = reason. */
export const leaseDeadLetterSql = (
  table: string,
) => `${COUNTED}UPDATE ${table} SET [state] = N'dead', [lease_expires_at] = NULL, [last_error] = @2
WHERE ${FENCE}`;

/**
 * @0 = source, @1 = idempotency key, @2 = aggregate id, @3 = payload (JSON), @4 = headers (JSON).
 * No row back: a duplicate. UPDLOCK, HOLDLOCK lock the key's range in the unique index even when
 * no row exists yet, so a concurrent receive of the same key waits for this one's transaction
 * and then sees its row, instead of failing on the unique constraint.
 */
export const inboxInsertSql = (table: string) => `INSERT INTO ${table} ([source], [idempotency_key], [aggregate_id], [payload], [headers])
OUTPUT inserted.[id]
SELECT @0, @1, @2, @3, @4
WHERE NOT EXISTS (
  SELECT 1 FROM ${table} WITH (UPDLOCK, HOLDLOCK) WHERE [source] = @0 AND [idempotency_key] = @1)`;

/** @0 = source, @1 = idempotency key. */
export const inboxFindSql = (table: string) => `SELECT [id] FROM ${table} WHERE [source] = @0 AND [idempotency_key] = @1`;

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
 * first, then available pending rows (inboxPendingSearch, for the room left), only the head of each
 * aggregate; two reads so each uses its own index in its own order, both materialized in one table
 * variable before the one UPDATE.
 */
export const inboxPullClaimSql = (table: string) =>
  underClaimLock(`DECLARE @candidates TABLE ([id] BIGINT NOT NULL PRIMARY KEY);
INSERT INTO @candidates ([id])
SELECT TOP (@1) i.[id] FROM ${table} AS i ${LOCKED_READ}
WHERE i.[source] = @3 AND i.[state] = N'processing' AND i.[lease_expires_at] <= ${NOW} AND ${headOfAggregate(table, 'i')}
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

// ---------------------------------------------------------------------------------------------
// Admin and retention (QueueBoxAdmin, RetentionService)
// ---------------------------------------------------------------------------------------------

const ADMIN_COLUMNS = {
  outbox: { name: '[destination]', key: '[key]', created: '[created_at]' },
  inbox: { name: '[source]', key: '[aggregate_id]', created: '[received_at]' },
} as const;
type Component = keyof typeof ADMIN_COLUMNS;

/** `now - ms` for a BIGINT parameter (seconds and milliseconds apart, as DATEADD takes an INT). */
const msAgo = (param: string) =>
  `DATEADD(MILLISECOND, -CAST(${param} % 1000 AS INT), DATEADD(SECOND, -CAST(${param} / 1000 AS INT), ${NOW}))`;

/**
 * Counts per destination and source, one branch per state, each with exactly the filter of a
 * filtered index (`claim_idx`, `lease_idx`, `dead_idx`), so finished rows are never read.
 */
export const adminBacklogSql = (outbox: string, inbox: string) => {
  const branches = (component: Component, table: string) => {
    const c = ADMIN_COLUMNS[component];
    return `SELECT N'${component}' AS [component], ${c.name} AS [name], N'pending' AS [state], COUNT_BIG(*) AS [n],
       DATEDIFF_BIG(MILLISECOND, MIN(CASE WHEN [available_at] <= ${NOW} THEN ${c.created} END), ${NOW}) / 1000.0 AS [oldest]
FROM ${table} WHERE [state] = N'pending' GROUP BY ${c.name}
UNION ALL
SELECT N'${component}', ${c.name}, N'processing', COUNT_BIG(*), NULL FROM ${table} WHERE [state] = N'processing' GROUP BY ${c.name}
UNION ALL
SELECT N'${component}', ${c.name}, N'dead', COUNT_BIG(*), NULL FROM ${table} WHERE [state] = N'dead' GROUP BY ${c.name}`;
  };
  return `${branches('outbox', outbox)}
UNION ALL
${branches('inbox', inbox)}`;
};

const deadAt = (component: Component) => `COALESCE([claimed_at], ${ADMIN_COLUMNS[component].created})`;

/**
 * An instant sent as ISO-8601 UTC text (`2030-01-02T03:04:05.678Z`), as the UTC DATETIME2 the
 * columns hold. A Date parameter would be sent by the driver in the Node process's time zone
 * (TypeORM's mssql driver sets `useUTC: false`), shifting every filter by the zone's offset.
 */
const utcInstant = (param: string) => `CAST(SWITCHOFFSET(CAST(${param} AS DATETIMEOFFSET), '+00:00') AS DATETIME2)`;

/**
 * The dead-row selection: @0 = name, @1 = error substring, @2 = last attempt from, @3 = last
 * attempt before (both ISO-8601 UTC text, see utcInstant), @4 = ids as a JSON array; each NULL when absent. Statements
 * using it end with OPTION (RECOMPILE), so an absent criterion folds away and the plan fits the
 * values (one cached plan would have to serve every combination).
 */
const deadWhere = (component: Component) => `[state] = N'dead'
  AND (@0 IS NULL OR ${ADMIN_COLUMNS[component].name} = @0)
  AND (@1 IS NULL OR CHARINDEX(@1, [last_error]) > 0)
  AND (@2 IS NULL OR ${deadAt(component)} >= ${utcInstant('@2')})
  AND (@3 IS NULL OR ${deadAt(component)} < ${utcInstant('@3')})
  AND (@4 IS NULL OR [id] IN (SELECT j.[id] FROM OPENJSON(@4) WITH ([id] BIGINT '$') AS j))`;

/** @0..@4 = the selection, @5 = after id, @6 = limit. Keyset page of dead rows in id order. */
export const deadLetterListSql = (table: string, component: Component, includePayload: boolean) => {
  const c = ADMIN_COLUMNS[component];
  const identity = component === 'outbox' ? '[message_id], NULL AS [idempotency_key]' : 'NULL AS [message_id], [idempotency_key]';
  return `SELECT TOP (@6) [id], ${identity}, ${c.name} AS [name], ${c.key} AS [key], [attempts], [last_error],
       ${asUtc(c.created)} AS [created_at], ${asUtc('[claimed_at]')} AS [claimed_at], [headers]${includePayload ? ', [payload]' : ''}
FROM ${table}
WHERE ${deadWhere(component)}
  AND (@5 IS NULL OR [id] > @5)
ORDER BY [id]
OPTION (RECOMPILE)`;
};

/** @0..@4 = the selection. */
export const deadLetterCountSql = (table: string, component: Component) =>
  `SELECT COUNT_BIG(*) AS [n] FROM ${table} WHERE ${deadWhere(component)} OPTION (RECOMPILE)`;

/** The batch a replay or discard takes, as an updatable CTE (TOP with ORDER BY is exact in one statement). */
const deadBatch = (table: string, component: Component) => `WITH [batch] AS (
  SELECT TOP (@6) [id], [state], [attempts], [available_at], [claim_token], [lease_expires_at], [headers]
  FROM ${table} WITH (ROWLOCK)
  WHERE ${deadWhere(component)}
    AND (@5 IS NULL OR [id] > @5)
  ORDER BY [id]
)`;

const REPLAY_COUNT = `'$."X-QueueBox-Replay-Count"'`;

/**
 * @0..@6 as the batch. Dead rows back to `pending`, due now, attempts 0, no claim; `last_error`
 * kept; the replay recorded in the headers (count and UTC time, ISO 8601).
 */
export const deadLetterReplaySql = (table: string, component: Component) => `${deadBatch(table, component)}
UPDATE [batch]
SET [state] = N'pending', [attempts] = 0, [available_at] = ${NOW}, [claim_token] = NULL, [lease_expires_at] = NULL,
    [headers] = JSON_MODIFY(
      JSON_MODIFY([headers], ${REPLAY_COUNT},
        CAST(COALESCE(TRY_CAST(JSON_VALUE([headers], ${REPLAY_COUNT}) AS INT), 0) + 1 AS NVARCHAR(12))),
      '$."X-QueueBox-Replayed-At"', CONVERT(NVARCHAR(23), ${NOW}, 126) + N'Z')
OUTPUT inserted.[id]
WHERE [state] = N'dead'
OPTION (RECOMPILE)`;

/** @0..@6 as the batch. Deletes dead rows only. */
export const deadLetterDiscardSql = (table: string, component: Component) => `${deadBatch(table, component)}
DELETE FROM [batch]
OUTPUT deleted.[id]
WHERE [state] = N'dead'
OPTION (RECOMPILE)`;

/** @0 = limit. Heads that failed at least once and are not finished, with how many rows wait behind each. */
export const blockedKeyListSql = (table: string, component: Component) => {
  const c = ADMIN_COLUMNS[component];
  const sameKey = (alias: string) =>
    `${alias}.${c.key} = h.${c.key}${component === 'inbox' ? ` AND ${alias}.[source] = h.[source]` : ''} AND ${alias}.[state] IN (N'pending', N'processing')`;
  return `SELECT TOP (@0) h.[id], ${component === 'outbox' ? 'h.[message_id]' : 'NULL AS [message_id]'}, h.${c.name} AS [name],
       h.${c.key} AS [key], h.[state], h.[attempts], h.[last_error],
       ${asUtc("CASE WHEN h.[state] = N'pending' THEN h.[available_at] ELSE h.[lease_expires_at] END")} AS [next_attempt_at],
       (SELECT COUNT_BIG(*) FROM ${table} AS w WHERE ${sameKey('w')} AND w.[id] > h.[id]) AS [waiting]
FROM ${table} AS h
WHERE h.[state] IN (N'pending', N'processing') AND h.${c.key} IS NOT NULL
  AND h.[attempts] > 0 AND h.[last_error] IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM ${table} AS e WHERE ${sameKey('e')} AND e.[id] < h.[id])
ORDER BY h.[id]`;
};

/**
 * Outbox: @0 = key, @1 = expected head id (or NULL), @2 = reason. Inbox: @0 = source,
 * @1 = aggregate, @2 = expected head id, @3 = reason. Dead-letters the head of the key if it is
 * pending, or processing with an expired lease; never a live claim. UPDLOCK on the head read
 * keeps a claim from taking the row between the read and the update.
 */
export const blockedKeySkipHeadSql = (table: string, component: Component) => {
  const [match, expected, reason] =
    component === 'outbox' ? ['e.[key] = @0', '@1', '@2'] : ['e.[source] = @0 AND e.[aggregate_id] = @1', '@2', '@3'];
  return `UPDATE t
SET [state] = N'dead', [claim_token] = NULL, [lease_expires_at] = NULL, [last_error] = ${reason}
OUTPUT inserted.[id]
FROM ${table} AS t WITH (ROWLOCK)
WHERE t.[id] = (
    SELECT TOP (1) e.[id] FROM ${table} AS e WITH (UPDLOCK, ROWLOCK)
    WHERE ${match} AND e.[state] IN (N'pending', N'processing')
    ORDER BY e.[id])
  AND (${expected} IS NULL OR t.[id] = ${expected})
  AND (t.[state] = N'pending' OR (t.[state] = N'processing' AND t.[lease_expires_at] <= ${NOW}))`;
};

/**
 * @0 = lock name. The retention lock: exclusive, owned by a transaction that holds nothing else,
 * never waited for (`@LockTimeout = 0`). Returns sp_getapplock's result: 0 or 1 granted, -1 held
 * elsewhere. TypeORM's SQL Server driver keeps a connection only inside a transaction, so the lock
 * is a transaction's; the deletes run on other connections, each batch its own transaction.
 */
export const retentionTryLockSql = () => `DECLARE @granted INT;
EXEC @granted = sp_getapplock @Resource = @0, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 0;
SELECT @granted AS [granted];`;

/**
 * @0 = age in ms, @1 = batch size. Deletes up to @1 finished or dead rows older than the age,
 * through the filtered index of that state; READPAST so a batch never waits on a locked row.
 */
export const retentionDeleteSql = (table: string, kind: 'outbox-sent' | 'inbox-processed' | 'outbox-dead' | 'inbox-dead') => {
  const pick = {
    'outbox-sent': { state: 'sent', age: '[sent_at]' },
    'inbox-processed': { state: 'processed', age: '[processed_at]' },
    'outbox-dead': { state: 'dead', age: deadAt('outbox') },
    'inbox-dead': { state: 'dead', age: deadAt('inbox') },
  }[kind];
  return `${COUNTED}DELETE TOP (@1) FROM ${table} WITH (ROWLOCK, READPAST)
WHERE [state] = N'${pick.state}' AND ${pick.age} < ${msAgo('@0')}`;
};
