import { indexOf } from './quoting';
import { KEY_COLLATION } from './schema';
import { asUtc, msFromNow, NOW } from './time';

// The claims (outbox, inbox relay, inbox pull) behind their application locks, and the reclaims of expired leases.

/** An application lock waits this long before sp_getapplock gives up (the seed: 10 seconds). */
export const CLAIM_LOCK_WAIT_MS = 10_000;

/**
 * How long a claim's locking of the rows it found, and its UPDATE, wait for one row lock (`SET
 * LOCK_TIMEOUT`) once it holds the claim lock. Those waits are short: the rows found are locked
 * with READPAST, so what remains is index maintenance behind a completion in flight. A wait that
 * runs out (error 1222) fails the claim, well inside the request timeout's margin
 * (CLAIM_STATEMENT_MARGIN_MS).
 */
export const CLAIM_ROW_LOCK_WAIT_MS = 3_000;

/**
 * How long the search among the oldest available rows (step 1) waits for one row lock. With
 * READ_COMMITTED_SNAPSHOT OFF its head checks wait for a transaction that holds a row of the same
 * key (a completion in flight: milliseconds; a producer's open transaction whose row has a lower
 * id: as long as that transaction). When the wait runs out, the search goes on key by key (step 2)
 * instead of failing the claim, so a long transaction costs each claim this much at most.
 */
export const CLAIM_SEARCH_LOCK_WAIT_MS = 200;

/**
 * The key-by-key search (step 2) never waits for a row lock (`SET LOCK_TIMEOUT 0`): a key whose
 * rows another transaction holds is passed over for this claim (its head cannot be told apart
 * from a later row while that transaction is open), and the walk goes on with the next key.
 */
export const CLAIM_WALK_LOCK_WAIT_MS = 0;

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
 * Runs `statement`; when it meets a row lock it may not wait for (error 1222, statement-terminating,
 * the transaction still committable with XACT_ABORT OFF), runs `orElse` instead. Any other error,
 * or a transaction the error left uncommittable, ends the batch: the claim rolls back.
 */
const unlessLocked = (statement: string, orElse = '') => `BEGIN TRY
${statement}
END TRY
BEGIN CATCH
  IF ERROR_NUMBER() <> ${LOCK_TIMEOUT_ERROR} OR XACT_STATE() = -1
    THROW;
${orElse ? `  ${orElse}\n` : ''}END CATCH;`;

/**
 * A claim behind its transaction-owned application lock (outbox poller, inbox relay, pull).
 *
 * Every statement reaches SQL Server through `sp_executesql` (mssql's `Request.query` calls
 * tedious's `execSql`), and a `SET` inside it lasts until that batch returns (docs, "SET
 * Statements", considerations): the settings below never outlive the claim on its pooled
 * connection, so nothing resets them afterwards. `XACT_ABORT OFF` makes a row-lock timeout end one
 * statement, not the transaction, whatever the connection's `abortTransactionOnError` says, so the
 * heads already found are kept (unlessLocked); the TRY around the claim then makes every other
 * error end the batch, as XACT_ABORT ON would have. `NOCOUNT ON`: the search loops send no row
 * count per statement (the claimed rows come back through OUTPUT). The row-lock waits: the
 * search's (CLAIM_SEARCH_LOCK_WAIT_MS, then the walk's), and CLAIM_ROW_LOCK_WAIT_MS for locking
 * what was found.
 */
const underClaimLock = (claim: string) => `SET XACT_ABORT OFF;
SET NOCOUNT ON;
${takeClaimLock()}
SET LOCK_TIMEOUT ${CLAIM_SEARCH_LOCK_WAIT_MS};
BEGIN TRY
${claim}
END TRY
BEGIN CATCH
  THROW;
END CATCH;`;

/** From here on, the claim waits for row locks as long as locking what it found may (CLAIM_ROW_LOCK_WAIT_MS). */
const LOCKING_FOUND = `SET LOCK_TIMEOUT ${CLAIM_ROW_LOCK_WAIT_MS};`;

/** The key-by-key search waits for no row lock (CLAIM_WALK_LOCK_WAIT_MS). */
const WALKING = `SET LOCK_TIMEOUT ${CLAIM_WALK_LOCK_WAIT_MS};`;

/** The claim's SET: a new token, the lease, the attempt counted, and the claiming instance (`instanceParam`, null for none). */
const setClaimed = (
  alias: string,
  leaseParam: string,
  instanceParam: string,
) => `SET [state] = N'processing', [claim_token] = NEWID(), [claimed_at] = ${NOW},
    [lease_expires_at] = ${msFromNow(leaseParam)}, [attempts] = ${alias}.[attempts] + 1, [claimed_by] = ${instanceParam}`;

/**
 * How many of the oldest available pending rows a claim looks through for heads of keys before it
 * looks key by key (see the PostgreSQL twin, CLAIM_SCAN_WINDOW).
 */
export const CLAIM_SCAN_WINDOW = 500;

/**
 * The in-flight probe's hint: the unique in-flight index (`suffix`), sought, and no other. The key
 * index would answer too, by reading every unfinished entry of the key, among them a later row an
 * open producer transaction still holds (READ_COMMITTED_SNAPSHOT OFF): the probe would wait for it.
 */
const inFlightIndex = (table: string, suffix: string) => `WITH (INDEX (${indexOf(table, suffix)}), FORCESEEK)`;

/**
 * Whether pending outbox row `alias` is the head of its key: no earlier unfinished row of the key,
 * none of it in flight. Two probes that each stop at their first index entry (the key index
 * from the row's id down, the in-flight unique index), whatever the key's backlog.
 */
const headOfKey = (table: string, alias: string) => `(${alias}.[key] IS NULL OR (
      NOT EXISTS (SELECT 1 FROM ${table} AS e WHERE e.[key] = ${alias}.[key] AND e.[key] IS NOT NULL
        AND e.[state] IN (N'pending', N'processing') AND e.[id] < ${alias}.[id])
      AND NOT EXISTS (SELECT 1 FROM ${table} AS e ${inFlightIndex(table, 'key_in_flight_idx')} WHERE e.[key] = ${alias}.[key] AND e.[key] IS NOT NULL
        AND e.[state] = N'processing')))`;

/**
 * Hints of the locked reads: UPDLOCK keeps the rows until the claim ends, READPAST skips rows
 * others hold, ROWLOCK locks only them, FORCESEEK keeps a misestimate (a stale statistic, a table
 * variable's guessed row count) from turning the read into a scan that locks its way through
 * the table, and INDEX pins that seek to the index meant: a bare FORCESEEK also admits a range
 * seek on another index whose filter the query happens to match. (`FORCESEEK (<index> (<columns>))`
 * says the same, but the T-SQL grammar the statements are checked with does not parse it.) An
 * INDEX hint fails the statement while its index does not exist: migration 004 drops and creates
 * the lease index again, one reason it runs with the workers stopped (docs/sqlserver.md).
 */
const lockedRead = (index: string) => `WITH (UPDLOCK, READPAST, ROWLOCK, INDEX (${index}), FORCESEEK)`;

/** The rows found (`@found`), oldest first, locked: one primary-key seek per row found. */
const lockFound = (table: string, alias: string, limit: string) => `${LOCKING_FOUND}
  INSERT INTO @candidates ([id])
  SELECT TOP (${limit}) ${alias}.[id] FROM ${table} AS ${alias} ${lockedRead(indexOf(table, 'pkey'))}
  INNER JOIN @found AS f ON f.[id] = ${alias}.[id]
  WHERE ${alias}.[state] = N'pending'
  ORDER BY ${alias}.[available_at], ${alias}.[id];`;

/**
 * @0 = outbox lock, @1 = limit, @2 = lease in ms. Takes available pending rows oldest first, only
 * the head of each key (no earlier unfinished row, none in flight), in two steps so that its cost
 * does not grow with the backlog of keys in flight (see the PostgreSQL twin): the heads among the
 * oldest CLAIM_SCAN_WINDOW rows; then, only when those were fewer than the limit, the oldest rows
 * without a key (their own filtered index) and the head of each key with unfinished rows (one seek
 * per key, from MIN(key) up). The ids found are locked and materialized once in `@candidates`, so
 * the limit applies exactly once. The key lookups of the second step state `[key] IS NOT NULL`,
 * which `= @key` implies: SQL Server matches a filtered index (`... AND [key] IS NOT NULL`) only
 * to a query that states its filter, and would scan otherwise. The scans for candidates pass over
 * rows others hold (READPAST), and so does the walk from key to key (it only lists keys; a key
 * whose every unfinished row is locked has no head to take now); the head checks never do:
 * skipping an earlier row of a key held by someone else would take a later one for its head.
 * Instead a head check that meets a lock gives up on what it was looking at (unlessLocked): step 1
 * after CLAIM_SEARCH_LOCK_WAIT_MS, keeping nothing of its own (the walk finds the same heads);
 * step 2 at once, for that key alone. So an open transaction that holds a row of one key (with
 * READ_COMMITTED_SNAPSHOT OFF) delays the claims of that key only, never the heads found.
 */
export const outboxClaimSql = (table: string) =>
  underClaimLock(`  DECLARE @candidates TABLE ([id] BIGINT NOT NULL PRIMARY KEY);
  DECLARE @found TABLE ([id] BIGINT NOT NULL PRIMARY KEY);
  ${unlessLocked(`  INSERT INTO @found ([id])
  SELECT TOP (@1) w.[id] FROM (
    SELECT TOP (${CLAIM_SCAN_WINDOW}) o.[id], o.[key], o.[available_at] FROM ${table} AS o WITH (READPAST)
    WHERE o.[state] = N'pending' AND o.[available_at] <= ${NOW}
    ORDER BY o.[available_at], o.[id]
  ) AS w
  WHERE ${headOfKey(table, 'w')}
  ORDER BY w.[available_at], w.[id];`)}
  IF (SELECT COUNT(*) FROM @found) < @1
  BEGIN
    ${WALKING}
    ${unlessLocked(`    INSERT INTO @found ([id])
    SELECT TOP (@1) o.[id] FROM ${table} AS o WITH (READPAST)
    WHERE o.[state] = N'pending' AND o.[key] IS NULL AND o.[available_at] <= ${NOW}
      AND NOT EXISTS (SELECT 1 FROM @found AS f WHERE f.[id] = o.[id])
    ORDER BY o.[available_at], o.[id];`)}
    DECLARE @key NVARCHAR(255);
    ${unlessLocked(`    SET @key = (SELECT MIN(k.[key]) FROM ${table} AS k WITH (READPAST)
      WHERE k.[state] IN (N'pending', N'processing') AND k.[key] IS NOT NULL);`)}
    WHILE @key IS NOT NULL
    BEGIN
      ${unlessLocked(`      INSERT INTO @found ([id])
      SELECT h.[id] FROM (
        SELECT TOP (1) o.[id], o.[state], o.[available_at] FROM ${table} AS o
        WHERE o.[key] = @key AND o.[key] IS NOT NULL AND o.[state] IN (N'pending', N'processing')
        ORDER BY o.[id]
      ) AS h
      WHERE h.[state] = N'pending' AND h.[available_at] <= ${NOW}
        AND NOT EXISTS (SELECT 1 FROM ${table} AS e ${inFlightIndex(table, 'key_in_flight_idx')}
          WHERE e.[key] = @key AND e.[key] IS NOT NULL AND e.[state] = N'processing')
        AND NOT EXISTS (SELECT 1 FROM @found AS f WHERE f.[id] = h.[id]);`)}
      ${unlessLocked(
        `      SET @key = (SELECT MIN(k.[key]) FROM ${table} AS k WITH (READPAST)
        WHERE k.[state] IN (N'pending', N'processing') AND k.[key] IS NOT NULL AND k.[key] > @key);`,
        'SET @key = NULL;',
      )}
    END;
  END;
  ${lockFound(table, 'o', '@1')}
  UPDATE o
  ${setClaimed('o', '@2', '@3')}
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
      AND NOT EXISTS (SELECT 1 FROM ${table} AS e ${inFlightIndex(table, 'aggregate_in_flight_idx')}
        WHERE e.[source] = ${alias}.[source] AND e.[aggregate_id] = ${alias}.[aggregate_id]
        AND e.[aggregate_id] IS NOT NULL AND e.[state] = N'processing' AND e.[id] <> ${alias}.[id])))`;

/**
 * Finds up to `limit` available pending heads of the sources in `@sources` into `@found`, as the
 * outbox claim does (see outboxClaimSql, also for what a row lock does to each step): per source
 * (CROSS APPLY, so each walks its (source, available_at, id) index in order) the heads among its
 * oldest CLAIM_SCAN_WINDOW rows; then, only when those were fewer than the limit, per source the
 * oldest rows without an aggregate and the head of each aggregate (one seek per aggregate).
 */
const inboxPendingSearch = (table: string, limit: string) => `DECLARE @found TABLE ([id] BIGINT NOT NULL PRIMARY KEY);
  ${unlessLocked(`  INSERT INTO @found ([id])
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
  ORDER BY h.[available_at], h.[id];`)}
  IF (SELECT COUNT(*) FROM @found) < ${limit}
  BEGIN
    ${WALKING}
    DECLARE @n INT = (SELECT MIN([n]) FROM @sources);
    DECLARE @source NVARCHAR(255);
    DECLARE @aggregate NVARCHAR(255);
    WHILE @n IS NOT NULL
    BEGIN
      SET @source = (SELECT [source] FROM @sources WHERE [n] = @n);
      ${unlessLocked(`      INSERT INTO @found ([id])
      SELECT TOP (${limit}) i.[id] FROM ${table} AS i WITH (READPAST)
      WHERE i.[source] = @source AND i.[state] = N'pending' AND i.[aggregate_id] IS NULL AND i.[available_at] <= ${NOW}
        AND NOT EXISTS (SELECT 1 FROM @found AS f WHERE f.[id] = i.[id])
      ORDER BY i.[available_at], i.[id];`)}
      SET @aggregate = NULL;
      ${unlessLocked(`      SET @aggregate = (SELECT MIN(k.[aggregate_id]) FROM ${table} AS k WITH (READPAST)
        WHERE k.[source] = @source AND k.[state] IN (N'pending', N'processing') AND k.[aggregate_id] IS NOT NULL);`)}
      WHILE @aggregate IS NOT NULL
      BEGIN
        ${unlessLocked(`        INSERT INTO @found ([id])
        SELECT h.[id] FROM (
          SELECT TOP (1) i.[id], i.[state], i.[available_at] FROM ${table} AS i
          WHERE i.[source] = @source AND i.[aggregate_id] = @aggregate AND i.[aggregate_id] IS NOT NULL
            AND i.[state] IN (N'pending', N'processing')
          ORDER BY i.[id]
        ) AS h
        WHERE h.[state] = N'pending' AND h.[available_at] <= ${NOW}
          AND NOT EXISTS (SELECT 1 FROM ${table} AS e ${inFlightIndex(table, 'aggregate_in_flight_idx')}
            WHERE e.[source] = @source AND e.[aggregate_id] = @aggregate AND e.[aggregate_id] IS NOT NULL
              AND e.[state] = N'processing')
          AND NOT EXISTS (SELECT 1 FROM @found AS f WHERE f.[id] = h.[id]);`)}
        ${unlessLocked(
          `        SET @aggregate = (SELECT MIN(k.[aggregate_id]) FROM ${table} AS k WITH (READPAST)
          WHERE k.[source] = @source AND k.[state] IN (N'pending', N'processing') AND k.[aggregate_id] IS NOT NULL
            AND k.[aggregate_id] > @aggregate);`,
          'SET @aggregate = NULL;',
        )}
      END;
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
  ${setClaimed('i', '@2', '@4')}
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
SELECT TOP (@1) i.[id] FROM ${table} AS i ${lockedRead(indexOf(table, 'lease_idx'))}
WHERE i.[source] = @3 AND i.[state] = N'processing' AND i.[lease_expires_at] <= ${NOW}
ORDER BY i.[lease_expires_at];
DECLARE @room INT = @1 - (SELECT COUNT(*) FROM @candidates);
DECLARE @sources TABLE ([n] INT IDENTITY(1, 1) PRIMARY KEY, [source] NVARCHAR(255) COLLATE ${KEY_COLLATION} NOT NULL);
INSERT INTO @sources ([source]) VALUES (@3);
${inboxPendingSearch(table, '@room')}
${lockFound(table, 'i', '@room')}
UPDATE i
${setClaimed('i', '@2', '@4')}
${INBOX_OUTPUT}
FROM ${table} AS i WITH (ROWLOCK) INNER JOIN @candidates AS c ON c.[id] = i.[id]
WHERE i.[state] = N'pending' OR (i.[state] = N'processing' AND i.[lease_expires_at] <= ${NOW});`);
