import { ADMIN_COLUMNS, type Component, deadAt } from './columns';
import { held, type InstanceTables, ownerColumns } from './instances.sql';
import { GONE, historyOfGone } from './lease.sql';
import { indexOf } from './quoting';
import { asUtc, NOW, utcInstant } from './time';

// QueueBoxAdmin's statements. Every write touches `dead` rows only, except skip-head.

/**
 * How long an admin statement waits for one row lock before it gives up with a "busy, try again"
 * error (QUEUEBOX_ADMIN_BUSY). With READ_COMMITTED_SNAPSHOT OFF the dashboard's and the CLI's
 * counts and lists are locking reads: without a bound they waited behind any open transaction
 * holding a pooled connection (the pool rule does not count them), and a list that reads the
 * lease index and then the row could deadlock with a renewal.
 */
export const ADMIN_LOCK_WAIT_MS = 2_000;

/** Starts every admin batch (SqlServerDialect.runAdmin; the CLI's own query too): it loses a deadlock to the workers, and waits ADMIN_LOCK_WAIT_MS at most. */
export const ADMIN = `SET DEADLOCK_PRIORITY LOW;
SET LOCK_TIMEOUT ${ADMIN_LOCK_WAIT_MS};
`;

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

/**
 * The dead-row selection: @0 = name, @1 = error substring, @2 = last attempt from, @3 = last
 * attempt before (both ISO-8601 UTC text, see utcInstant), @4 = ids as a JSON array, @5 = key
 * (outbox `key`, inbox `aggregate_id`), @6 = group fingerprint (the attempts migration); each NULL when absent. Statements
 * using it end with OPTION (RECOMPILE), so an absent criterion folds away and the plan fits the
 * values (one cached plan would have to serve every combination).
 */
const deadWhere = (component: Component) => `[state] = N'dead'
  AND (@0 IS NULL OR ${ADMIN_COLUMNS[component].name} = @0)
  AND (@1 IS NULL OR CHARINDEX(@1, [last_error]) > 0)
  AND (@2 IS NULL OR ${deadAt(component)} >= ${utcInstant('@2')})
  AND (@3 IS NULL OR ${deadAt(component)} < ${utcInstant('@3')})
  AND (@4 IS NULL OR [id] IN (SELECT j.[id] FROM OPENJSON(@4) WITH ([id] BIGINT '$') AS j))
  AND (@5 IS NULL OR ${ADMIN_COLUMNS[component].key} = @5)
  AND (@6 IS NULL OR [fingerprint] = @6)`;

/** @0..@6 = the selection, @7 = after id, @8 = limit. Keyset page of dead rows in id order, or newest first (`descending`: ids below @7). */
export const deadLetterListSql = (table: string, component: Component, includePayload: boolean, descending = false) => {
  const c = ADMIN_COLUMNS[component];
  const identity = component === 'outbox' ? '[message_id], NULL AS [idempotency_key]' : 'NULL AS [message_id], [idempotency_key]';
  return `SELECT TOP (@8) [id], ${identity}, ${c.name} AS [name], ${c.key} AS [key], [attempts], [last_error], [fingerprint],
       ${asUtc(c.created)} AS [created_at], ${asUtc('[claimed_at]')} AS [claimed_at], [headers]${includePayload ? ', [payload]' : ''}
FROM ${table}
WHERE ${deadWhere(component)}
  AND (@7 IS NULL OR [id] ${descending ? '<' : '>'} @7)
ORDER BY [id]${descending ? ' DESC' : ''}
OPTION (RECOMPILE)`;
};

/** @0..@6 = the selection. */
export const deadLetterCountSql = (table: string, component: Component) =>
  `SELECT COUNT_BIG(*) AS [n] FROM ${table} WHERE ${deadWhere(component)} OPTION (RECOMPILE)`;

/** The batch a replay or discard takes, as an updatable CTE (TOP with ORDER BY is exact in one statement). */
const deadBatch = (table: string, component: Component) => `WITH [batch] AS (
  SELECT TOP (@8) [id], [state], [attempts], [available_at], [claim_token], [lease_expires_at], [headers], [fingerprint]
  FROM ${table} WITH (ROWLOCK)
  WHERE ${deadWhere(component)}
    AND (@7 IS NULL OR [id] > @7)
  ORDER BY [id]
)`;

const REPLAY_COUNT = `'$."X-QueueBox-Replay-Count"'`;

/**
 * @0..@8 as the batch. Dead rows back to `pending`, due now, attempts 0, no claim; `last_error`
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
WHERE [state] = N'dead' AND (@6 IS NULL OR [fingerprint] = @6)
OPTION (RECOMPILE)`;

/** @0..@8 as the batch. Deletes dead rows only; with `history` (the attempts migration), their attempt history with them, in one transaction. */
export const deadLetterDiscardSql = (table: string, component: Component, history?: string) => {
  if (history === undefined) {
    return `${deadBatch(table, component)}
DELETE FROM [batch]
OUTPUT deleted.[id]
WHERE [state] = N'dead' AND (@6 IS NULL OR [fingerprint] = @6)
OPTION (RECOMPILE)`;
  }
  return `SET XACT_ABORT ON;
${GONE}BEGIN TRANSACTION;
${deadBatch(table, component)}
DELETE FROM [batch]
OUTPUT deleted.[id] INTO @gone
WHERE [state] = N'dead' AND (@6 IS NULL OR [fingerprint] = @6)
OPTION (RECOMPILE);
${historyOfGone(history)}
COMMIT TRANSACTION;
SELECT [id] FROM @gone;`;
};

/**
 * @0 = limit. Heads that failed at least once and are not finished, or held with rows behind
 * them, with how many rows wait behind each, and who holds each (only while its lease is live).
 */
export const blockedKeyListSql = (table: string, component: Component, tables: InstanceTables) => {
  const c = ADMIN_COLUMNS[component];
  const sameKey = (alias: string) =>
    `${alias}.${c.key} = h.${c.key}${component === 'inbox' ? ` AND ${alias}.[source] = h.[source]` : ''} AND ${alias}.[state] IN (N'pending', N'processing')`;
  const failing = 'h.[attempts] > 0 AND h.[last_error] IS NOT NULL';
  return `SELECT TOP (@0) h.[id], ${component === 'outbox' ? 'h.[message_id]' : 'NULL AS [message_id]'}, h.${c.name} AS [name],
       h.${c.key} AS [key], h.[state], h.[attempts], h.[last_error],
       CASE WHEN ${failing} THEN N'failing' ELSE N'held' END AS [reason],
       ${asUtc("CASE WHEN h.[state] = N'pending' THEN h.[available_at] ELSE h.[lease_expires_at] END")} AS [next_attempt_at],
       (SELECT COUNT_BIG(*) FROM ${table} AS w WHERE ${sameKey('w')} AND w.[id] > h.[id]) AS [waiting],
       CASE WHEN ${held('h')} THEN DATEDIFF_BIG(MILLISECOND, h.[claimed_at], ${NOW}) / 1000.0 END AS [held_for],
       ${ownerColumns('h', tables)}
FROM ${table} AS h
WHERE h.[state] IN (N'pending', N'processing') AND h.${c.key} IS NOT NULL
  AND ((${failing}) OR (h.[state] = N'processing' AND EXISTS (SELECT 1 FROM ${table} AS w WHERE ${sameKey('w')} AND w.[id] > h.[id])))
  AND NOT EXISTS (SELECT 1 FROM ${table} AS e WHERE ${sameKey('e')} AND e.[id] < h.[id])
ORDER BY h.[id]`;
};

/**
 * Outbox: @0 = key, @1 = expected head id (or NULL), @2 = reason. Inbox: @0 = source,
 * @1 = aggregate, @2 = expected head id, @3 = reason. Dead-letters the head of the key if it is
 * pending, or processing with an expired lease; never a live claim. The head is found first by a
 * plain read, then updated through its primary key with every condition checked again under the
 * update's own lock: still pending (or expired), and still the first unfinished row of its key. So
 * the row's clustered entry is locked before any index entry of it, in the order a claim locks
 * (its rows first, then their index entries as it updates them): an index-first lock here (UPDLOCK
 * on the key index's entry) against a claim's row-first lock deadlocked (error 1205).
 */
export const blockedKeySkipHeadSql = (table: string, component: Component) => {
  const [match, expected, reason, fingerprint] =
    component === 'outbox'
      ? ['e.[key] = @0 AND e.[key] IS NOT NULL', '@1', '@2', '@3']
      : ['e.[source] = @0 AND e.[aggregate_id] = @1 AND e.[aggregate_id] IS NOT NULL', '@2', '@3', '@4'];
  return `DECLARE @head BIGINT = (
  SELECT TOP (1) e.[id] FROM ${table} AS e
  WHERE ${match} AND e.[state] IN (N'pending', N'processing')
  ORDER BY e.[id]);
UPDATE t
SET [state] = N'dead', [claim_token] = NULL, [lease_expires_at] = NULL, [last_error] = ${reason}, [fingerprint] = ${fingerprint}
OUTPUT inserted.[id]
FROM ${table} AS t WITH (ROWLOCK, INDEX (${indexOf(table, 'pkey')}), FORCESEEK)
WHERE t.[id] = @head
  AND (${expected} IS NULL OR t.[id] = ${expected})
  AND (t.[state] = N'pending' OR (t.[state] = N'processing' AND t.[lease_expires_at] <= ${NOW}))
  AND NOT EXISTS (SELECT 1 FROM ${table} AS e WHERE ${match} AND e.[state] IN (N'pending', N'processing') AND e.[id] < t.[id])`;
};

/**
 * @0 = since (a minute boundary, ISO-8601 UTC text). Finished and dead rows per destination /
 * source and minute since @0 (`minute`: whole minutes from @0, DATEDIFF counting the minute
 * boundaries crossed). Each branch has the filter of a filtered index: `sent_idx ([sent_at])` and
 * `processed_idx ([processed_at])` are sought from @0; dead rows (`dead_idx`) are read whole.
 */
export const adminThroughputSql = (outbox: string, inbox: string) => {
  const since = utcInstant('@0');
  const branches = (component: Component, table: string, finished: '[sent_at]' | '[processed_at]', state: 'sent' | 'processed') => {
    const c = ADMIN_COLUMNS[component];
    const died = deadAt(component);
    return `SELECT N'${component}' AS [component], ${c.name} AS [name], N'finished' AS [outcome],
       DATEDIFF(MINUTE, ${since}, ${finished}) AS [minute], COUNT_BIG(*) AS [n]
FROM ${table} WHERE [state] = N'${state}' AND ${finished} >= ${since}
GROUP BY ${c.name}, DATEDIFF(MINUTE, ${since}, ${finished})
UNION ALL
SELECT N'${component}', ${c.name}, N'dead', DATEDIFF(MINUTE, ${since}, ${died}), COUNT_BIG(*)
FROM ${table} WHERE [state] = N'dead' AND ${died} >= ${since}
GROUP BY ${c.name}, DATEDIFF(MINUTE, ${since}, ${died})`;
  };
  return `${branches('outbox', outbox, '[sent_at]', 'sent')}
UNION ALL
${branches('inbox', inbox, '[processed_at]', 'processed')}
OPTION (RECOMPILE)`;
};

/**
 * @0 = limit. Rows in flight (`processing`), oldest claim first, through the filtered `lease_idx`.
 * Ages and remaining leases in milliseconds by the database clock (negative: expired, not yet reclaimed).
 */
export const adminClaimListSql = (table: string, component: Component, tables: InstanceTables) => {
  const c = ADMIN_COLUMNS[component];
  const identity = component === 'outbox' ? 'h.[message_id], NULL AS [idempotency_key]' : 'NULL AS [message_id], h.[idempotency_key]';
  return `SELECT TOP (@0) h.[id], ${identity}, h.${c.name} AS [name], h.${c.key} AS [key], h.[claim_token], h.[attempts],
       ${asUtc('h.[claimed_at]')} AS [claimed_at], ${asUtc('h.[lease_expires_at]')} AS [lease_expires_at],
       DATEDIFF_BIG(MILLISECOND, h.[claimed_at], ${NOW}) / 1000.0 AS [age],
       DATEDIFF_BIG(MILLISECOND, ${NOW}, h.[lease_expires_at]) / 1000.0 AS [lease_left],
       ${ownerColumns('h', tables)}
FROM ${table} AS h
WHERE h.[state] = N'processing'
ORDER BY h.[claimed_at], h.[id]`;
};

/** @0 = limit. Dead rows per destination (source) and fingerprint, the biggest groups first (see postgres/admin.sql.ts). */
export const deadLetterGroupsSql = (table: string, component: Component) => {
  const c = ADMIN_COLUMNS[component];
  return `SELECT TOP (@0) ${c.name} AS [name], [fingerprint], COUNT_BIG(*) AS [n],
       ${asUtc(`MIN(${deadAt(component)})`)} AS [first_at], ${asUtc(`MAX(${deadAt(component)})`)} AS [last_at]
FROM ${table} WHERE [state] = N'dead'
GROUP BY ${c.name}, [fingerprint]
ORDER BY COUNT_BIG(*) DESC, ${c.name}, [fingerprint]`;
};

/** @0 = row id. The row's attempt history (the attempts migration), newest first, through its clustered key. */
export const attemptListSql = (history: string) => `SELECT [id], [attempt], ${asUtc('[failed_at]')} AS [failed_at], [duration_ms],
       [instance_id], [error_class], [error], [outcome]
FROM ${history} WHERE [row_id] = @0
ORDER BY [id] DESC`;

/** Dead rows per destination (source) and error class, for the dead-letter gauge (see postgres/admin.sql.ts). */
export const deadLetterClassesSql = (table: string, component: Component) => {
  const c = ADMIN_COLUMNS[component];
  const errorClass = `COALESCE(LEFT([fingerprint], NULLIF(CHARINDEX(N': ', [fingerprint]), 0) - 1), [fingerprint], N'unknown')`;
  return `SELECT ${c.name} AS [name], ${errorClass} AS [error_class], COUNT_BIG(*) AS [n]
FROM ${table} WHERE [state] = N'dead'
GROUP BY ${c.name}, ${errorClass}`;
};
