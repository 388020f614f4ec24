import { indexOf } from './quoting';
import { asUtc, msFromNow, NOW } from './time';

// The fenced writes of a claim's holder. Parameters are positional (`@0`...).

/**
 * Starts a batch whose affected-row count decides a fence (or the end of retention): with
 * `SET NOCOUNT ON` (a server-wide `user options` setting, or a login trigger) no count comes back,
 * the driver reports 0, and every fenced write would look lost. Set inside the batch, it goes
 * back to the connection's setting when the batch ends.
 */
export const COUNTED = 'SET NOCOUNT OFF;\n';

/**
 * Starts a batch that runs on a pooled connection outside any caller's transaction (autocommit):
 * such a statement runs at the connection's isolation level, which is whatever the last
 * transaction on that connection began with (mssql sends an explicit level with every BEGIN:
 * TypeORM's `isolationLevel`, or one an application passed to `dataSource.transaction(level, ...)`)
 * or the login's (`options.connectionIsolationLevel`), and mssql does not reset connections it
 * returns to the pool. Under SNAPSHOT a renewal or completion racing another writer of the row
 * would fail with error 3960, under SERIALIZABLE the reclaims and lookups would take range locks,
 * under READ UNCOMMITTED the followers read would see uncommitted rows. Set inside the batch, the
 * level is restored when the batch returns (as every SET inside sp_executesql).
 */
export const PINNED_READ_COMMITTED = 'SET TRANSACTION ISOLATION LEVEL READ COMMITTED;\n';

/** Declares `@gone`, the ids a delete outputs, for historyOfGone. */
export const GONE = 'DECLARE @gone TABLE ([id] BIGINT NOT NULL PRIMARY KEY);\n';

/** Deletes the attempt history (the attempts migration) of the rows in `@gone`, through its clustered key. */
export const historyOfGone = (history: string) => `DELETE h FROM ${history} AS h INNER JOIN @gone AS g ON h.[row_id] = g.[id];`;

/** The claim fence: @0 = id, @1 = claim token. */
const FENCE = `[id] = @0 AND [state] = N'processing' AND [claim_token] = @1 AND [lease_expires_at] > ${NOW}`;

/**
 * The claims of a batch statement (@0, a JSON array of `{ id, token }`) joined to their rows `t`,
 * under the fence. FORCESEEK pinned to the primary key (INDEX): one seek per claim, never a scan
 * (OPENJSON's row count is a guess), and never a range seek on the outbox's lease index (its
 * `processing` filter matches these statements too), which would U-lock every live claim and wait
 * behind any completion in flight.
 */
const batchOfClaims = (
  table: string,
) => `FROM ${table} AS t WITH (INDEX (${indexOf(table, 'pkey')}), FORCESEEK) INNER JOIN OPENJSON(@0) WITH ([id] BIGINT '$.id', [token] UNIQUEIDENTIFIER '$.token') AS c
  ON t.[id] = c.[id]
WHERE t.[state] = N'processing' AND t.[claim_token] = c.[token] AND t.[lease_expires_at] > ${NOW}`;

/** @0 = id, @1 = token, @2 = lease in ms. Writes `[renewed_at]` for the sweep (migration 009; see postgres/lease.sql.ts). */
export const leaseRenewSql = (table: string) => `UPDATE ${table} SET [lease_expires_at] = ${msFromNow('@2')}, [renewed_at] = ${NOW}
OUTPUT ${asUtc('inserted.[lease_expires_at]')} AS [lease_expires_at]
WHERE ${FENCE}`;

type Finished = { state: 'sent' | 'processed'; column: 'sent_at' | 'processed_at' };

/** @0 = id, @1 = token. `state`/`column`: `sent`/`sent_at` or `processed`/`processed_at`. */
export const leaseCompleteSql = (table: string, finished: Finished) =>
  `${COUNTED}UPDATE ${table} SET [state] = N'${finished.state}', [${finished.column}] = ${NOW}, [lease_expires_at] = NULL
WHERE ${FENCE}`;

/**
 * @0 = the claims as one JSON array of `{ id, token }`. Completes a batch with one fenced
 * statement (batchOfClaims) and returns the ids it completed; an id missing from the result lost its claim.
 */
export const leaseCompleteBatchSql = (table: string, finished: Finished) => `UPDATE t
SET [state] = N'${finished.state}', [${finished.column}] = ${NOW}, [lease_expires_at] = NULL
OUTPUT inserted.[id]
${batchOfClaims(table)}`;

/**
 * @0 = id, @1 = token. The completion of `outbox.sentRows: 'delete'`: deletes the row and its
 * attempt history (`history`) in one transaction, under the same fence. Returns `n` = 1 when the
 * fence held, 0 when the claim was lost (nothing is deleted then).
 */
export const leaseDeleteSql = (table: string, history: string) => `SET XACT_ABORT ON;
${GONE}BEGIN TRANSACTION;
DELETE FROM ${table}
OUTPUT deleted.[id] INTO @gone
WHERE ${FENCE};
${historyOfGone(history)}
COMMIT TRANSACTION;
SELECT COUNT_BIG(*) AS [n] FROM @gone;`;

/**
 * @0 = the claims as one JSON array of `{ id, token }`. `leaseDeleteSql` for a batch: returns the
 * ids it deleted (an id missing lost its claim), through batchOfClaims.
 */
export const leaseDeleteBatchSql = (table: string, history: string) => `SET XACT_ABORT ON;
${GONE}BEGIN TRANSACTION;
DELETE t
OUTPUT deleted.[id] INTO @gone
${batchOfClaims(table)};
${historyOfGone(history)}
COMMIT TRANSACTION;
SELECT [id] FROM @gone;`;

/** @0 = id, @1 = token. Gives an unstarted claim back (shutdown): pending again, its attempt not counted. */
export const leaseReleaseSql = (table: string) => `${COUNTED}UPDATE ${table}
SET [state] = N'pending', [attempts] = [attempts] - 1, [claim_token] = NULL, [lease_expires_at] = NULL
WHERE ${FENCE}`;

/**
 * @0 = id, @1 = token, @2 = delay in ms. Gives a claimed row back for later without charging the
 * attempt (a rate limit had no token for it; issue 41): `pending`, available after the delay.
 */
export const leaseDeferSql = (table: string) => `${COUNTED}UPDATE ${table}
SET [state] = N'pending', [attempts] = [attempts] - 1, [available_at] = ${msFromNow('@2')}, [claim_token] = NULL, [lease_expires_at] = NULL
WHERE ${FENCE}`;

/** @0 = id, @1 = token, @2 = delay in ms, @3 = error text. */
export const leaseRetrySql = (table: string) => `${COUNTED}UPDATE ${table}
SET [state] = N'pending', [available_at] = ${msFromNow('@2')}, [claim_token] = NULL, [lease_expires_at] = NULL, [last_error] = @3
WHERE ${FENCE}`;

/** @0 = id, @1 = token, @2 = reason, @3 = fingerprint (its group, the attempts migration). */
export const leaseDeadLetterSql = (
  table: string,
) => `${COUNTED}UPDATE ${table} SET [state] = N'dead', [lease_expires_at] = NULL, [last_error] = @2, [fingerprint] = @3
WHERE ${FENCE}`;

/**
 * A failed attempt's row in the attempt history (the attempts migration), in the batch that retries or
 * dead-letters it and in one transaction with that write: the fenced UPDATE (`update`, which
 * outputs the row it changed into `@failed`), the history row, and the history trimmed to the last
 * `keep` of the row. Returns `n` = 1 when the fence held, 0 when the claim was lost (nothing is
 * recorded then). `error`/`errorClass`/`keep` are parameter references.
 */
const recordAttempt = (
  history: string,
  outcome: 'retry' | 'dead',
  update: string,
  p: { error: string; errorClass: string; keep: string },
) => `SET XACT_ABORT ON;
DECLARE @failed TABLE ([id] BIGINT NOT NULL, [attempts] INT NOT NULL, [claimed_at] DATETIME2 NULL, [claimed_by] UNIQUEIDENTIFIER NULL);
BEGIN TRANSACTION;
${update}
OUTPUT inserted.[id], inserted.[attempts], inserted.[claimed_at], inserted.[claimed_by] INTO @failed
WHERE ${FENCE};
INSERT INTO ${history} ([row_id], [attempt], [failed_at], [duration_ms], [instance_id], [error_class], [error], [outcome])
SELECT f.[id], f.[attempts], ${NOW}, DATEDIFF_BIG(MILLISECOND, f.[claimed_at], ${NOW}), f.[claimed_by], ${p.errorClass}, ${p.error}, N'${outcome}'
FROM @failed AS f;
DELETE a FROM ${history} AS a INNER JOIN @failed AS f ON a.[row_id] = f.[id]
WHERE a.[id] NOT IN (SELECT TOP (${p.keep}) k.[id] FROM ${history} AS k WHERE k.[row_id] = f.[id] ORDER BY k.[id] DESC);
COMMIT TRANSACTION;
SELECT COUNT_BIG(*) AS [n] FROM @failed;`;

/**
 * @0 = id, @1 = token, @2 = delay in ms, @3 = error text, @4 = error class, @5 = attempts kept
 * (at least 1). `leaseRetrySql` with the attempt recorded in `history` (see recordAttempt).
 */
export const leaseRetryRecordedSql = (table: string, history: string) =>
  recordAttempt(
    history,
    'retry',
    `UPDATE ${table}
SET [state] = N'pending', [available_at] = ${msFromNow('@2')}, [claim_token] = NULL, [lease_expires_at] = NULL, [last_error] = @3`,
    { error: '@3', errorClass: '@4', keep: '@5' },
  );

/**
 * @0 = id, @1 = token, @2 = reason, @3 = fingerprint, @4 = the attempt's error text, @5 = error
 * class, @6 = attempts kept (at least 1). `leaseDeadLetterSql` with the attempt recorded in
 * `history` (see recordAttempt).
 */
export const leaseDeadLetterRecordedSql = (table: string, history: string) =>
  recordAttempt(
    history,
    'dead',
    `UPDATE ${table} SET [state] = N'dead', [lease_expires_at] = NULL, [last_error] = @2, [fingerprint] = @3`,
    { error: '@4', errorClass: '@5', keep: '@6' },
  );
