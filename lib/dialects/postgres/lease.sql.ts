import { msFromNow, NOW } from './time';

// The fenced writes of a claim's holder. Parameters are positional (`$1`...).
//
// A batch statement finds its rows by `t.id = ANY($1)` and fences each by `t.claim_token =
// ANY($2)`: claim tokens are random per claim (gen_random_uuid), so a row whose token is among the
// batch's holds the very claim the batch was given for it. No join with the unnested arrays: planned
// once for every call (a user's `plan_cache_mode = force_generic_plan`), such a join guessed the
// arrays at 10 entries and met each row with every entry in a nested loop, 250,000 pairs for a
// batch of 500 (W2 at a third of its rate). A value per row (a renewal's lease) is read at the
// row's position in `$1`.

/** The claim fence: $1 = id, $2 = claim token. */
const FENCE = `id = $1 AND state = 'processing' AND claim_token = $2 AND lease_expires_at > ${NOW}`;

/** The claim fence of a batch statement: row `t` among the ids in $1, under one of the tokens in $2. */
const BATCH_FENCE = `t.id = ANY($1::bigint[]) AND t.claim_token = ANY($2::uuid[]) AND t.state = 'processing' AND t.lease_expires_at > ${NOW}`;

/** Ends a batch statement whose CTE `done` returned the ids it changed: the ids of $1 it did not (lost claims), usually none. */
const LOST_IDS = 'SELECT c.id::text AS id FROM unnest($1::bigint[]) AS c(id) WHERE c.id NOT IN (SELECT id FROM done)';

/**
 * $1 = id, $2 = token, $3 = lease in ms. `renewed_at` (migration 009) tells a replica's sweep that
 * the owner keeps this lease, whatever its heartbeat looks like: every renewal must write it.
 */
export const leaseRenewSql = (table: string) => `UPDATE ${table} SET lease_expires_at = ${msFromNow('$3')}, renewed_at = ${NOW}
WHERE ${FENCE} RETURNING lease_expires_at`;

/**
 * $1 = ids, $2 = tokens, $3 = leases in ms (same order). Renews a batch with one fenced statement,
 * each claim by its own lease, and returns the claims it renewed (id, token) with their new
 * expiry: a claim missing from the result is lost.
 */
export const leaseRenewBatchSql = (
  table: string,
) => `UPDATE ${table} t SET lease_expires_at = ${msFromNow('($3::bigint[])[array_position($1::bigint[], t.id)]')}, renewed_at = ${NOW}
WHERE ${BATCH_FENCE}
RETURNING t.id::text AS id, t.claim_token::text AS token, t.lease_expires_at`;

/** $1 = id, $2 = token. `state`/`column`: `sent`/`sent_at` or `processed`/`processed_at`. */
export const leaseCompleteSql = (table: string, finished: { state: 'sent' | 'processed'; column: 'sent_at' | 'processed_at' }) =>
  `UPDATE ${table} SET state = '${finished.state}', ${finished.column} = ${NOW}, lease_expires_at = NULL
WHERE ${FENCE}`;

/**
 * $1 = ids, $2 = tokens (same order). Completes a batch with one fenced statement and returns the
 * ids of `$1` it did not complete (their claims are lost): usually none, so the client parses no
 * row per message.
 */
export const leaseCompleteBatchSql = (table: string, finished: { state: 'sent' | 'processed'; column: 'sent_at' | 'processed_at' }) =>
  `WITH done AS (
  UPDATE ${table} t SET state = '${finished.state}', ${finished.column} = ${NOW}, lease_expires_at = NULL
  WHERE ${BATCH_FENCE}
  RETURNING t.id
)
${LOST_IDS}`;

/**
 * $1 = id, $2 = token. The completion of `outbox.sentRows: 'delete'`: deletes the row, and its
 * attempt history (`history`) with it, under the same fence. Returns one row (`n` = 1) when the
 * fence held, none when the claim was lost (nothing is deleted then).
 */
export const leaseDeleteSql = (table: string, history: string) => `WITH done AS (
  DELETE FROM ${table} WHERE ${FENCE} RETURNING id
),
history AS (
  DELETE FROM ${history} a USING done WHERE a.row_id = done.id
)
SELECT 1 AS n FROM done`;

/**
 * $1 = ids, $2 = tokens (same order). `leaseDeleteSql` for a batch: returns the ids of `$1` it did
 * not delete (their claims are lost), as leaseCompleteBatchSql does.
 */
export const leaseDeleteBatchSql = (table: string, history: string) => `WITH done AS (
  DELETE FROM ${table} t
  WHERE ${BATCH_FENCE}
  RETURNING t.id
),
history AS (
  DELETE FROM ${history} a WHERE a.row_id IN (SELECT id FROM done)
)
${LOST_IDS}`;

/** $1 = id, $2 = token. Gives an unstarted claim back (shutdown): pending again, its attempt not counted. */
export const leaseReleaseSql = (table: string) => `UPDATE ${table}
SET state = 'pending', attempts = attempts - 1, claim_token = NULL, lease_expires_at = NULL
WHERE ${FENCE}`;

/**
 * $1 = id, $2 = token, $3 = delay in ms. Gives a claimed row back for later without charging the
 * attempt its claim counted (a rate limit had no token for it): `pending`, available after the delay.
 */
export const leaseDeferSql = (table: string) => `UPDATE ${table}
SET state = 'pending', attempts = attempts - 1, available_at = ${msFromNow('$3')}, claim_token = NULL, lease_expires_at = NULL
WHERE ${FENCE}`;

/** $1 = id, $2 = token, $3 = delay in ms, $4 = error text. */
export const leaseRetrySql = (table: string) => `UPDATE ${table}
SET state = 'pending', available_at = ${msFromNow('$3')}, claim_token = NULL, lease_expires_at = NULL, last_error = $4
WHERE ${FENCE}`;

/** $1 = id, $2 = token, $3 = reason, $4 = fingerprint (its group, the attempts migration). */
export const leaseDeadLetterSql = (
  table: string,
) => `UPDATE ${table} SET state = 'dead', lease_expires_at = NULL, last_error = $3, fingerprint = $4
WHERE ${FENCE}`;

/**
 * A failed attempt's row in the attempt history, written by the statement that retries or
 * dead-letters it (the attempts migration), and the history trimmed to the last `$keep` of the row in the
 * same statement. `failed` is the fenced UPDATE's CTE (the row as it was changed: its attempt,
 * claim time and claimer); the data-modifying CTEs see the snapshot the statement started with,
 * so the trim keeps the newest `$keep - 1` older rows beside the one it inserts. Returns one row
 * (`n` = 1) when the fence held, none when the claim was lost: nothing is recorded then.
 * `error`/`errorClass`/`keep` are parameter references.
 */
const recordAttempt = (history: string, outcome: 'retry' | 'dead', p: { error: string; errorClass: string; keep: string }) => `,
recorded AS (
  INSERT INTO ${history} (row_id, attempt, failed_at, duration_ms, instance_id, error_class, error, outcome)
  SELECT f.id, f.attempts, ${NOW}, (extract(epoch FROM ${NOW} - f.claimed_at) * 1000)::bigint, f.claimed_by, ${p.errorClass}, ${p.error}, '${outcome}'
  FROM failed f
),
trimmed AS (
  DELETE FROM ${history} a USING failed f
  WHERE a.row_id = f.id
    AND a.id NOT IN (SELECT k.id FROM ${history} k WHERE k.row_id = f.id ORDER BY k.id DESC LIMIT ${p.keep}::integer - 1)
)
SELECT 1 AS n FROM failed`;

/**
 * $1 = id, $2 = token, $3 = delay in ms, $4 = error text, $5 = error class, $6 = attempts kept
 * (at least 1). `leaseRetrySql` with the attempt recorded in `history` (see recordAttempt).
 */
export const leaseRetryRecordedSql = (table: string, history: string) => `WITH failed AS (
  UPDATE ${table}
  SET state = 'pending', available_at = ${msFromNow('$3')}, claim_token = NULL, lease_expires_at = NULL, last_error = $4
  WHERE ${FENCE}
  RETURNING id, attempts, claimed_at, claimed_by
)${recordAttempt(history, 'retry', { error: '$4', errorClass: '$5', keep: '$6' })}`;

/**
 * $1 = id, $2 = token, $3 = reason, $4 = fingerprint, $5 = the attempt's error text, $6 = error
 * class, $7 = attempts kept (at least 1). `leaseDeadLetterSql` with the attempt recorded in
 * `history` (see recordAttempt).
 */
export const leaseDeadLetterRecordedSql = (table: string, history: string) => `WITH failed AS (
  UPDATE ${table} SET state = 'dead', lease_expires_at = NULL, last_error = $3, fingerprint = $4
  WHERE ${FENCE}
  RETURNING id, attempts, claimed_at, claimed_by
)${recordAttempt(history, 'dead', { error: '$5', errorClass: '$6', keep: '$7' })}`;
