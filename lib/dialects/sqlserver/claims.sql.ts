import { LEASE_EXPIRED_CLASS, RECLAIM_FINGERPRINT } from '../../common/fingerprint';
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
 * How many of the oldest available pending rows a claim reads at a time (a page) when it looks for
 * heads of keys (see the PostgreSQL twin, CLAIM_SCAN_WINDOW, its one window).
 */
export const CLAIM_SCAN_WINDOW = 500;

/**
 * How many pages of available pending rows, oldest first, a claim reads at most (each search: the
 * outbox, each source of the inbox) before it looks key by key. Every head that can be claimed
 * is an available pending row, so pages that reach the last such row have seen every head: the
 * claim then needs no walk, and what it reads follows the rows before its heads (a failing head's
 * tail), never the keys that have nothing to claim (in flight, or waiting for a retry).
 */
export const CLAIM_SCAN_PAGES = 10;

/**
 * How many keys (aggregates, per source) one claim's walk visits at most, when the pages could not
 * see every available row (more than CLAIM_SCAN_PAGES pages of them, or a page that met a row
 * lock). It stops earlier once it has found the limit. Each connection remembers where its last
 * walk stopped (SESSION_CONTEXT) and the next one goes on from there, wrapping around, so every
 * key is reached however many keys sort before it.
 */
export const CLAIM_WALK_KEYS = 1_000;

/**
 * A probe's hint: the index `suffix`, sought, and no other.
 * - The in-flight probes read the unique in-flight index alone. The key index would answer too, by
 *   reading every unfinished entry of the key, among them a later row an open producer
 *   transaction still holds (READ_COMMITTED_SNAPSHOT OFF): the probe would wait for it.
 * - The reads of one key's unfinished rows (the "earlier unfinished row" probe, the walk's head
 *   lookup) seek the key (or aggregate) index. Its filtered statistics go stale easily (state
 *   changes do not move the leading column's modification counter), and a plan built on them
 *   could scan with a hash anti-join, which with READ_COMMITTED_SNAPSHOT OFF waits for every
 *   locked entry it passes (the SQL Server side of issue 29).
 * The seek always exists: each probe states the filter of the index it names.
 */
const seekOn = (table: string, suffix: string) => `WITH (INDEX (${indexOf(table, suffix)}), FORCESEEK)`;

/**
 * Whether pending outbox row `alias` is the head of its key: no earlier unfinished row of the key,
 * none of it in flight. Two probes that each stop at their first index entry (the key index
 * from the row's id down, the in-flight unique index), whatever the key's backlog.
 */
const headOfKey = (table: string, alias: string) => `(${alias}.[key] IS NULL OR (
      NOT EXISTS (SELECT 1 FROM ${table} AS e ${seekOn(table, 'key_idx')} WHERE e.[key] = ${alias}.[key] AND e.[key] IS NOT NULL
        AND e.[state] IN (N'pending', N'processing') AND e.[id] < ${alias}.[id])
      AND NOT EXISTS (SELECT 1 FROM ${table} AS e ${seekOn(table, 'key_in_flight_idx')} WHERE e.[key] = ${alias}.[key] AND e.[key] IS NOT NULL
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

/**
 * The claim's UPDATE target: the rows of `@candidates`, reached by primary-key seeks. An UPDATE
 * reads its target with update locks under either READ_COMMITTED_SNAPSHOT setting; a scan plan
 * (hash or merge join against the table variable, plausible on a small table once table variable
 * deferred compilation, compatibility level 150+, sees the real row count) would wait for an open
 * producer's new row it passes, time out (CLAIM_ROW_LOCK_WAIT_MS) and fail every claim while that
 * transaction stays open. The seek plan touches only the rows lockFound already holds.
 */
const claimTarget = (table: string, alias: string) =>
  `FROM ${table} AS ${alias} WITH (ROWLOCK, INDEX (${indexOf(table, 'pkey')}), FORCESEEK) INNER JOIN @candidates AS c ON c.[id] = ${alias}.[id]`;

/** The rows found (`@found`), oldest first, locked: one primary-key seek per row found. */
const lockFound = (table: string, alias: string, limit: string) => `${LOCKING_FOUND}
  INSERT INTO @candidates ([id])
  SELECT TOP (${limit}) ${alias}.[id] FROM ${table} AS ${alias} ${lockedRead(indexOf(table, 'pkey'))}
  INNER JOIN @found AS f ON f.[id] = ${alias}.[id]
  WHERE ${alias}.[state] = N'pending'
  ORDER BY ${alias}.[available_at], ${alias}.[id];`;

/**
 * One search's pages (see CLAIM_SCAN_PAGES): reads the available pending rows of `scope` (a
 * condition on `alias`, with its trailing AND) oldest first, CLAIM_SCAN_WINDOW at a time after the last
 * one read (`@after_at`, `@after_id`), into `@page` (`pageColumns`), and keeps the heads among them
 * (`head` of `w`) in `@found`, counting them in `found`, until `limit` are found, the pages have
 * seen every available row (`@seen_all`) or CLAIM_SCAN_PAGES were read. The first page waits
 * CLAIM_SEARCH_LOCK_WAIT_MS for a row lock, later ones none; a page whose head checks meet a lock
 * is dropped, and the pages end there, unseen rows left to the walk.
 */
const pagedSearch = (p: {
  table: string;
  alias: 'o' | 'i';
  scope: string;
  pageColumns: string[];
  head: (alias: string) => string;
  limit: string;
  found: string;
}) => `SET @pages = 0;
  SET @seen_all = 0;
  SET @after_at = '00010101';
  SET @after_id = 0;
  SET LOCK_TIMEOUT ${CLAIM_SEARCH_LOCK_WAIT_MS};
  WHILE ${p.found} < ${p.limit} AND @seen_all = 0 AND @pages < ${CLAIM_SCAN_PAGES}
  BEGIN
    ${unlessLocked(
      `    DELETE FROM @page;
    INSERT INTO @page (${p.pageColumns.join(', ')})
    SELECT TOP (${CLAIM_SCAN_WINDOW}) ${p.pageColumns.map((c) => `${p.alias}.${c}`).join(', ')} FROM ${p.table} AS ${p.alias} WITH (READPAST)
    WHERE ${p.scope}${p.alias}.[state] = N'pending' AND ${p.alias}.[available_at] <= ${NOW}
      AND ${p.alias}.[available_at] >= @after_at AND (${p.alias}.[available_at] > @after_at OR ${p.alias}.[id] > @after_id)
    ORDER BY ${p.alias}.[available_at], ${p.alias}.[id];
    IF @@ROWCOUNT < ${CLAIM_SCAN_WINDOW} SET @seen_all = 1;
    SELECT TOP (1) @after_at = l.[available_at], @after_id = l.[id] FROM @page AS l ORDER BY l.[available_at] DESC, l.[id] DESC;
    INSERT INTO @found ([id])
    SELECT TOP (${p.limit} - ${p.found}) w.[id] FROM @page AS w
    WHERE ${p.head('w')}
    ORDER BY w.[available_at], w.[id];
    SET ${p.found} += @@ROWCOUNT;`,
      `SET @seen_all = 0; SET @pages = ${CLAIM_SCAN_PAGES};`,
    )}
    SET @pages += 1;
    ${WALKING}
  END;`;

/**
 * One search's walk key by key (see CLAIM_WALK_KEYS), for when its pages did not see every
 * available row: from the key after the one this connection's last walk of `cursor` (an
 * expression naming it) stopped at, wrapping around, at most CLAIM_WALK_KEYS keys, until `limit`
 * heads are found. `firstKey(after)` sets `key` (the variable) to the first key after `after` (or
 * the first of all); `headOfWalkKey` inserts the head of `key` into `@found` if it can be claimed. The walk
 * only lists keys (READPAST); a key whose head lookup meets a lock is passed over for this claim.
 */
const keyWalk = (p: {
  key: '@key' | '@aggregate';
  cursor: string;
  firstKey: (after?: string) => string;
  headOfWalkKey: string;
  limit: string;
  found: string;
}) =>
  `SET @walk_cursor = ${p.cursor};
  SET @walk_from = CAST(SESSION_CONTEXT(@walk_cursor) AS NVARCHAR(255));
  SET ${p.key} = NULL;
  SET @walked = 0;
  SET @wrapped = 0;
  IF @walk_from IS NOT NULL
  BEGIN
    ${unlessLocked(p.firstKey('@walk_from'))}
  END;
  IF ${p.key} IS NULL
  BEGIN
    SET @wrapped = 1;
    ${unlessLocked(p.firstKey())}
  END;
  WHILE ${p.key} IS NOT NULL AND @walked < ${CLAIM_WALK_KEYS} AND ${p.found} < ${p.limit}
  BEGIN
    ${unlessLocked(`${p.headOfWalkKey}
      SET ${p.found} += @@ROWCOUNT;`)}
    SET @walked += 1;
    SET @walked_to = ${p.key};
    ${unlessLocked(p.firstKey('@walked_to'), `SET ${p.key} = NULL; SET @wrapped = 1;`)}
    IF ${p.key} IS NULL AND @wrapped = 0
    BEGIN
      SET @wrapped = 1;
      ${unlessLocked(p.firstKey(), `SET ${p.key} = NULL;`)}
    END;
    IF @wrapped = 1 AND ${p.key} > @walk_from SET ${p.key} = NULL;
  END;
  IF @walked > 0 EXEC sp_set_session_context @key = @walk_cursor, @value = @walked_to;`;

/** The variables of pagedSearch and keyWalk, whose key variable is `key`. */
const searchVariables = (key: '@key' | '@aggregate') => `DECLARE @found TABLE ([id] BIGINT NOT NULL PRIMARY KEY);
  DECLARE @pages INT;
  DECLARE @seen_all BIT;
  DECLARE @after_at DATETIME2;
  DECLARE @after_id BIGINT;
  DECLARE ${key} NVARCHAR(255);
  DECLARE @walked INT;
  DECLARE @wrapped BIT;
  DECLARE @walked_to NVARCHAR(255);
  DECLARE @walk_from NVARCHAR(255);
  DECLARE @walk_cursor NVARCHAR(128);`;

/** The SESSION_CONTEXT key under which a connection keeps where its walk of `scope` (an NVARCHAR expression) stopped. */
const walkCursor = (scope: string) => `N'queuebox_walk_' + CONVERT(NVARCHAR(64), HASHBYTES('SHA2_256', ${scope}), 2)`;

/**
 * @0 = outbox lock, @1 = limit, @2 = lease in ms, @3 = the claiming instance; with `paused` (issue
 * 40), @4 = the destinations not to claim, as JSON. Takes available
 * pending rows oldest first, only the head of each key (no earlier unfinished row, none in
 * flight), at a cost bounded by the heads it takes and the rows before them, not by the keys
 * (issue 38 M2): the oldest available rows page by page (pagedSearch); then, only when those
 * pages found fewer than the limit without seeing every available row, the oldest rows without a
 * key (their own filtered index) and a walk key by key (keyWalk: one seek per key, at most
 * CLAIM_WALK_KEYS keys, going on where the last walk of this connection stopped). The ids found
 * are locked and materialized once in `@candidates`, so the limit applies exactly once. The key
 * lookups of the walk state `[key] IS NOT NULL`, which `= @key` implies: SQL Server matches a
 * filtered index (`... AND [key] IS NOT NULL`) only to a query that states its filter, and would
 * scan otherwise. The reads for candidates pass over rows others hold (READPAST), and so does the
 * walk from key to key (it only lists keys; a key whose every unfinished row is locked has no
 * head to take now); the head checks never do: skipping an earlier row of a key held by someone
 * else would take a later one for its head. Instead a head check that meets a lock gives up on
 * what it was looking at (unlessLocked): a page after CLAIM_SEARCH_LOCK_WAIT_MS (the first) or at
 * once (later ones), keeping nothing of its own (the walk goes on from there); the walk at once,
 * for that key alone. So an open transaction that holds a row of one key (with
 * READ_COMMITTED_SNAPSHOT OFF) delays the claims of that key only, never the heads found.
 */
export const outboxClaimSql = (table: string) => outboxClaim(table, false);

/** @0 to @3 as outboxClaimSql, @4 = the paused destinations (JSON): the claim while some destination is paused (issue 40). */
export const outboxClaimPausedSql = (table: string) => outboxClaim(table, true);

const outboxClaim = (table: string, paused: boolean) => {
  // Issue 40: with `paused`, @4 lists the paused destinations (JSON); a row of one is never a
  // candidate, and stays the unfinished head of its key (no later row of the key is taken).
  // Without, the statement is the claim as it always was.
  const notPaused = (alias: string) =>
    paused ? ` AND NOT EXISTS (SELECT 1 FROM @paused AS p WHERE p.[destination] = ${alias}.[destination])` : '';
  return underClaimLock(`  DECLARE @candidates TABLE ([id] BIGINT NOT NULL PRIMARY KEY);
  ${searchVariables('@key')}
  DECLARE @found_n INT = 0;${
    paused
      ? `
  DECLARE @paused TABLE ([destination] NVARCHAR(255) COLLATE ${KEY_COLLATION} NOT NULL PRIMARY KEY);
  INSERT INTO @paused ([destination]) SELECT DISTINCT p.[destination] FROM OPENJSON(@4) WITH ([destination] NVARCHAR(255) '$') AS p;`
      : ''
  }
  DECLARE @page TABLE ([available_at] DATETIME2 NOT NULL, [id] BIGINT NOT NULL, [key] NVARCHAR(255) COLLATE ${KEY_COLLATION} NULL,${
    paused
      ? `
    [destination] NVARCHAR(255) COLLATE ${KEY_COLLATION} NOT NULL,`
      : ''
  }
    PRIMARY KEY ([available_at], [id]));
  ${pagedSearch({
    table,
    alias: 'o',
    scope: '',
    pageColumns: ['[available_at]', '[id]', '[key]', ...(paused ? ['[destination]'] : [])],
    head: (w) => `${headOfKey(table, w)}${notPaused(w)}`,
    limit: '@1',
    found: '@found_n',
  })}
  IF @found_n < @1 AND @seen_all = 0
  BEGIN
    ${unlessLocked(`    INSERT INTO @found ([id])
    SELECT TOP (@1 - @found_n) o.[id] FROM ${table} AS o WITH (READPAST)
    WHERE o.[state] = N'pending' AND o.[key] IS NULL AND o.[available_at] <= ${NOW}${notPaused('o')}
      AND NOT EXISTS (SELECT 1 FROM @found AS f WHERE f.[id] = o.[id])
    ORDER BY o.[available_at], o.[id];
    SET @found_n += @@ROWCOUNT;`)}
    ${keyWalk({
      key: '@key',
      cursor: walkCursor('@0'),
      firstKey: (after) => `      SET @key = (SELECT MIN(k.[key]) FROM ${table} AS k WITH (READPAST)
        WHERE k.[state] IN (N'pending', N'processing') AND k.[key] IS NOT NULL${after ? ` AND k.[key] > ${after}` : ''});`,
      headOfWalkKey: `      INSERT INTO @found ([id])
      SELECT h.[id] FROM (
        SELECT TOP (1) o.[id], o.[state], o.[available_at]${paused ? ', o.[destination]' : ''} FROM ${table} AS o ${seekOn(table, 'key_idx')}
        WHERE o.[key] = @key AND o.[key] IS NOT NULL AND o.[state] IN (N'pending', N'processing')
        ORDER BY o.[id]
      ) AS h
      WHERE h.[state] = N'pending' AND h.[available_at] <= ${NOW}${notPaused('h')}
        AND NOT EXISTS (SELECT 1 FROM ${table} AS e ${seekOn(table, 'key_in_flight_idx')}
          WHERE e.[key] = @key AND e.[key] IS NOT NULL AND e.[state] = N'processing')
        AND NOT EXISTS (SELECT 1 FROM @found AS f WHERE f.[id] = h.[id]);`,
      limit: '@1',
      found: '@found_n',
    })}
  END;
  ${lockFound(table, 'o', '@1')}
  UPDATE o
  ${setClaimed('o', '@2', '@3')}
  OUTPUT inserted.[id], inserted.[message_id], inserted.[destination], inserted.[key], inserted.[payload], inserted.[headers],
         inserted.[attempts], inserted.[claim_token], ${asUtc('inserted.[lease_expires_at]')} AS [lease_expires_at],
         ${asUtc('inserted.[created_at]')} AS [created_at]
  ${claimTarget(table, 'o')}
  WHERE o.[state] = N'pending';`);
};

/**
 * How the sweep and the reclaims meet other transactions' locks: they pass over rows others hold
 * (READPAST; a row passed over is ended at the next beat, or by its lease), wait at most this long
 * for any other lock, and lose a deadlock rather than make a renewal or a completion lose it. They
 * find their rows through the lease index, so they lock its entries before the rows, the opposite
 * order of renewals and completions (row first); without READPAST that could deadlock with a
 * renewal (aborted as a lost claim) and wait behind any open transaction that holds a claimed row,
 * a wait that stalled the heartbeat behind it (issue 38 M1).
 */
export const HOUSEKEEPING_LOCK_WAIT_MS = 2_000;

/** Starts a reclaim or sweep batch (the sweep: instances.sql.ts): see HOUSEKEEPING_LOCK_WAIT_MS. */
export const HOUSEKEEPING = `SET DEADLOCK_PRIORITY LOW;
SET LOCK_TIMEOUT ${HOUSEKEEPING_LOCK_WAIT_MS};
`;

/** The table hints of a sweep's or reclaim's UPDATE target: its rows through the lease index, never waiting for a row. */
export const housekeepingTarget = (table: string) => `WITH (ROWLOCK, READPAST, INDEX (${indexOf(table, 'lease_idx')}))`;

/** @0 = max attempts: expired claims go back to pending, or to dead on their last attempt. */
const RECLAIM_SET = `SET [state] = CASE WHEN [attempts] >= @0 THEN N'dead' ELSE N'pending' END,
    [claim_token] = NULL, [lease_expires_at] = NULL,
    [last_error] = CONCAT(N'lease expired on attempt ', [attempts], N' of ', @0,
      N': the worker crashed, was stopped or outlived its lease'),
    [fingerprint] = CASE WHEN [attempts] >= @0 THEN N'${RECLAIM_FINGERPRINT}' ELSE [fingerprint] END`;

/** @0 = max attempts. Passes over rows others hold, as the instance sweep does (HOUSEKEEPING). */
export const outboxReclaimSql = (table: string) => `${HOUSEKEEPING}UPDATE t
${RECLAIM_SET}
OUTPUT inserted.[state], inserted.[destination] AS [name]
FROM ${table} AS t ${housekeepingTarget(table)}
WHERE t.[state] = N'processing' AND t.[lease_expires_at] <= ${NOW}`;

/**
 * A reclaim (`from`: its FROM and WHERE) that also records each reclaimed row's expired attempt in
 * `history` (the attempts migration; see postgres/claims.sql.ts) and trims each row's history to the last
 * `keep`, in one transaction of the batch. Returns what the reclaim returns.
 */
const reclaimRecorded = (from: string, history: string, name: string, keep: string) => `${HOUSEKEEPING}SET XACT_ABORT ON;
DECLARE @reclaimed TABLE ([id] BIGINT NOT NULL, [attempts] INT NOT NULL, [claimed_at] DATETIME2 NULL, [claimed_by] UNIQUEIDENTIFIER NULL,
  [state] NVARCHAR(16) NOT NULL, [last_error] NVARCHAR(MAX) NULL, [name] NVARCHAR(255) COLLATE ${KEY_COLLATION} NOT NULL);
BEGIN TRANSACTION;
UPDATE t
${RECLAIM_SET}
OUTPUT inserted.[id], inserted.[attempts], inserted.[claimed_at], inserted.[claimed_by], inserted.[state], inserted.[last_error], inserted.${name}
  INTO @reclaimed
${from};
INSERT INTO ${history} ([row_id], [attempt], [failed_at], [duration_ms], [instance_id], [error_class], [error], [outcome])
SELECT r.[id], r.[attempts], ${NOW}, DATEDIFF_BIG(MILLISECOND, r.[claimed_at], ${NOW}), r.[claimed_by], N'${LEASE_EXPIRED_CLASS}', COALESCE(r.[last_error], N''),
       CASE WHEN r.[state] = N'dead' THEN N'dead' ELSE N'retry' END
FROM @reclaimed AS r;
DELETE a FROM ${history} AS a INNER JOIN @reclaimed AS r ON a.[row_id] = r.[id]
WHERE a.[id] NOT IN (SELECT TOP (${keep}) k.[id] FROM ${history} AS k WHERE k.[row_id] = r.[id] ORDER BY k.[id] DESC);
COMMIT TRANSACTION;
SELECT [state], [name] FROM @reclaimed;`;

/** @0 = max attempts, @1 = attempts kept (at least 1). `outboxReclaimSql` with the attempt history. */
export const outboxReclaimRecordedSql = (table: string, history: string) =>
  reclaimRecorded(
    `FROM ${table} AS t ${housekeepingTarget(table)}
WHERE t.[state] = N'processing' AND t.[lease_expires_at] <= ${NOW}`,
    history,
    '[destination]',
    '@1',
  );

const INBOX_OUTPUT = `OUTPUT inserted.[id], inserted.[source], inserted.[idempotency_key], inserted.[aggregate_id], inserted.[payload],
         inserted.[headers], inserted.[attempts], inserted.[claim_token], ${asUtc('inserted.[lease_expires_at]')} AS [lease_expires_at],
         ${asUtc('inserted.[received_at]')} AS [received_at]`;

/** Only the head of each (source, aggregate): no earlier unfinished row, none in flight but itself (see headOfKey). */
const headOfAggregate = (table: string, alias: string) => `(${alias}.[aggregate_id] IS NULL OR (
      NOT EXISTS (SELECT 1 FROM ${table} AS e ${seekOn(table, 'aggregate_idx')} WHERE e.[source] = ${alias}.[source] AND e.[aggregate_id] = ${alias}.[aggregate_id]
        AND e.[aggregate_id] IS NOT NULL AND e.[state] IN (N'pending', N'processing') AND e.[id] < ${alias}.[id])
      AND NOT EXISTS (SELECT 1 FROM ${table} AS e ${seekOn(table, 'aggregate_in_flight_idx')}
        WHERE e.[source] = ${alias}.[source] AND e.[aggregate_id] = ${alias}.[aggregate_id]
        AND e.[aggregate_id] IS NOT NULL AND e.[state] = N'processing' AND e.[id] <> ${alias}.[id])))`;

/**
 * Finds available pending heads of the sources in `@sources` into `@found`, as the outbox claim
 * does (see outboxClaimSql, also for what a row lock does to each step), source by source, up to
 * `limit` of each (the rows found are then locked oldest first across sources, `limit` in all):
 * the source's available rows page by page through its (source, available_at, id) index; then,
 * only when those found fewer than the limit without seeing every available row of the source,
 * its oldest rows without an aggregate and a walk aggregate by aggregate (at most
 * CLAIM_WALK_KEYS per source, going on where this connection's last walk of the source stopped).
 */
const inboxPendingSearch = (table: string, limit: string) => `${searchVariables('@aggregate')}
  DECLARE @page TABLE ([available_at] DATETIME2 NOT NULL, [id] BIGINT NOT NULL, [source] NVARCHAR(255) COLLATE ${KEY_COLLATION} NOT NULL,
    [aggregate_id] NVARCHAR(255) COLLATE ${KEY_COLLATION} NULL, PRIMARY KEY ([available_at], [id]));
  DECLARE @source_found INT;
  DECLARE @source NVARCHAR(255);
  DECLARE @n INT = (SELECT MIN([n]) FROM @sources);
  WHILE @n IS NOT NULL
  BEGIN
    SET @source = (SELECT [source] FROM @sources WHERE [n] = @n);
    SET @source_found = 0;
    ${pagedSearch({
      table,
      alias: 'i',
      scope: 'i.[source] = @source AND ',
      pageColumns: ['[available_at]', '[id]', '[source]', '[aggregate_id]'],
      head: (w) => headOfAggregate(table, w),
      limit,
      found: '@source_found',
    })}
    IF @source_found < ${limit} AND @seen_all = 0
    BEGIN
      ${unlessLocked(`      INSERT INTO @found ([id])
      SELECT TOP (${limit} - @source_found) i.[id] FROM ${table} AS i WITH (READPAST)
      WHERE i.[source] = @source AND i.[state] = N'pending' AND i.[aggregate_id] IS NULL AND i.[available_at] <= ${NOW}
        AND NOT EXISTS (SELECT 1 FROM @found AS f WHERE f.[id] = i.[id])
      ORDER BY i.[available_at], i.[id];
      SET @source_found += @@ROWCOUNT;`)}
      ${keyWalk({
        key: '@aggregate',
        cursor: walkCursor("@0 + N':' + @source"),
        firstKey: (after) => `        SET @aggregate = (SELECT MIN(k.[aggregate_id]) FROM ${table} AS k WITH (READPAST)
          WHERE k.[source] = @source AND k.[state] IN (N'pending', N'processing') AND k.[aggregate_id] IS NOT NULL${
            after ? ` AND k.[aggregate_id] > ${after}` : ''
          });`,
        headOfWalkKey: `        INSERT INTO @found ([id])
        SELECT h.[id] FROM (
          SELECT TOP (1) i.[id], i.[state], i.[available_at] FROM ${table} AS i ${seekOn(table, 'aggregate_idx')}
          WHERE i.[source] = @source AND i.[aggregate_id] = @aggregate AND i.[aggregate_id] IS NOT NULL
            AND i.[state] IN (N'pending', N'processing')
          ORDER BY i.[id]
        ) AS h
        WHERE h.[state] = N'pending' AND h.[available_at] <= ${NOW}
          AND NOT EXISTS (SELECT 1 FROM ${table} AS e ${seekOn(table, 'aggregate_in_flight_idx')}
            WHERE e.[source] = @source AND e.[aggregate_id] = @aggregate AND e.[aggregate_id] IS NOT NULL
              AND e.[state] = N'processing')
          AND NOT EXISTS (SELECT 1 FROM @found AS f WHERE f.[id] = h.[id]);`,
        limit,
        found: '@source_found',
      })}
    END;
    SET @n = (SELECT MIN([n]) FROM @sources WHERE [n] > @n);
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
  ${claimTarget(table, 'i')}
  WHERE i.[state] = N'pending';`);

/** @0 = max attempts, @1 = the sources (JSON), @2 = attempts kept (at least 1). `inboxReclaimSql` with the attempt history. */
export const inboxReclaimRecordedSql = (table: string, history: string) =>
  reclaimRecorded(
    `FROM ${table} AS t ${housekeepingTarget(table)}
WHERE t.[state] = N'processing' AND t.[lease_expires_at] <= ${NOW}
  AND t.[source] IN (SELECT s.[source] COLLATE ${KEY_COLLATION} FROM OPENJSON(@1) WITH ([source] NVARCHAR(255) '$') AS s)`,
    history,
    '[source]',
    '@2',
  );

/** @0 = max attempts, @1 = the sources as a JSON array of strings. The relay's reclaim step, limited to its sources (HOUSEKEEPING). */
export const inboxReclaimSql = (table: string) => `${HOUSEKEEPING}UPDATE t
${RECLAIM_SET}
OUTPUT inserted.[state], inserted.[source] AS [name]
FROM ${table} AS t ${housekeepingTarget(table)}
WHERE t.[state] = N'processing' AND t.[lease_expires_at] <= ${NOW}
  AND t.[source] IN (SELECT s.[source] COLLATE ${KEY_COLLATION} FROM OPENJSON(@1) WITH ([source] NVARCHAR(255) '$') AS s)`;

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
${claimTarget(table, 'i')}
WHERE i.[state] = N'pending' OR (i.[state] = N'processing' AND i.[lease_expires_at] <= ${NOW});`);
