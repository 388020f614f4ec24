/**
 * PostgreSQL statements as pure functions of the (already quoted) table name, so tests can
 * EXPLAIN exactly what runs. Parameters are positional (`$1`...), documented per statement.
 */

// I7: `now()` is the start of the transaction. Every lease and fence reads `clock_timestamp()`,
// the current time, so a fence evaluated late in a long transaction sees an expired lease.
export const NOW = 'clock_timestamp()';
const msFromNow = (param: string) => `${NOW} + make_interval(secs => ${param}::double precision / 1000)`;

/** The claim fence: $1 = id, $2 = claim token. */
const FENCE = `id = $1 AND state = 'processing' AND claim_token = $2 AND lease_expires_at > ${NOW}`;

/** Listens on a channel (a validated, generated name; LISTEN takes no parameters). */
export const listenSql = (channel: string) => `LISTEN "${channel}"`;

/** Serializes claims: $1 = lock name. Held until the claim transaction ends. */
export const claimLockSql = () => 'SELECT pg_advisory_xact_lock(hashtextextended($1, 0))';

/**
 * $1..$6: arrays of message ids, destinations, keys, payloads (JSON), headers (JSON), available-at
 * times; $7: the outbox's notification channel. One NOTIFY per statement, delivered at commit
 * (never for a rollback), wakes the pollers at once.
 */
export const outboxInsertSql = (table: string) => `WITH inserted AS (
  INSERT INTO ${table} (message_id, destination, "key", payload, headers, available_at)
  SELECT m.message_id, m.destination, m.key, m.payload, m.headers, coalesce(m.available_at, now())
  FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[], $6::timestamptz[])
    AS m(message_id, destination, key, payload, headers, available_at)
  RETURNING id, message_id
)
SELECT inserted.id, inserted.message_id FROM inserted, (SELECT pg_notify($7, '')) AS wake`;

/**
 * $1 = limit, $2 = lease in ms. Takes available pending rows oldest first, only the head of each
 * key (no earlier unfinished row, none in flight). The CTE is materialized so the LIMIT applies
 * exactly once (a LIMIT in a subquery of an UPDATE can update more rows under a nested loop).
 */
export const outboxClaimSql = (table: string) => `WITH candidates AS MATERIALIZED (
  SELECT o.id FROM ${table} o
  WHERE o.state = 'pending' AND o.available_at <= ${NOW}
    AND (o."key" IS NULL OR NOT EXISTS (
      SELECT 1 FROM ${table} e
      WHERE e."key" = o."key" AND e.state IN ('pending', 'processing') AND e.id <> o.id
        AND (e.state = 'processing' OR e.id < o.id)))
  ORDER BY o.available_at, o.id
  LIMIT $1
  FOR UPDATE OF o SKIP LOCKED
)
UPDATE ${table} o
SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = ${NOW},
    lease_expires_at = ${msFromNow('$2')}, attempts = o.attempts + 1
FROM candidates c
WHERE o.id = c.id
RETURNING o.id, o.message_id, o.destination, o."key", o.payload, o.headers, o.attempts,
          o.claim_token, o.lease_expires_at, o.created_at`;

/** $1 = max attempts: expired claims go back to pending, or to dead on their last attempt. */
const RECLAIM_SET = `SET state = CASE WHEN attempts >= $1 THEN 'dead' ELSE 'pending' END,
    claim_token = NULL, lease_expires_at = NULL,
    last_error = 'lease expired on attempt ' || attempts || ' of ' || $1::integer
      || ': the worker crashed, was stopped or outlived its lease'`;

/** $1 = max attempts. */
export const outboxReclaimSql = (table: string) => `UPDATE ${table}
${RECLAIM_SET}
WHERE state = 'processing' AND lease_expires_at <= ${NOW}
RETURNING state, destination AS name`;

/** $1 = id, $2 = token, $3 = lease in ms. */
export const leaseRenewSql = (table: string) => `UPDATE ${table} SET lease_expires_at = ${msFromNow('$3')}
WHERE ${FENCE} RETURNING lease_expires_at`;

/** $1 = id, $2 = token. `state`/`column`: `sent`/`sent_at` or `processed`/`processed_at`. */
export const leaseCompleteSql = (table: string, finished: { state: 'sent' | 'processed'; column: 'sent_at' | 'processed_at' }) =>
  `UPDATE ${table} SET state = '${finished.state}', ${finished.column} = ${NOW}, lease_expires_at = NULL
WHERE ${FENCE}`;

/**
 * $1 = ids, $2 = tokens (same order). Completes a batch with one fenced statement and returns the
 * ids it completed; an id missing from the result lost its claim.
 */
export const leaseCompleteBatchSql = (table: string, finished: { state: 'sent' | 'processed'; column: 'sent_at' | 'processed_at' }) =>
  `UPDATE ${table} t SET state = '${finished.state}', ${finished.column} = ${NOW}, lease_expires_at = NULL
FROM unnest($1::bigint[], $2::uuid[]) AS c(id, token)
WHERE t.id = c.id AND t.state = 'processing' AND t.claim_token = c.token AND t.lease_expires_at > ${NOW}
RETURNING t.id`;

/** $1 = id, $2 = token. Gives an unstarted claim back (shutdown): pending again, its attempt not counted. */
export const leaseReleaseSql = (table: string) => `UPDATE ${table}
SET state = 'pending', attempts = attempts - 1, claim_token = NULL, lease_expires_at = NULL
WHERE ${FENCE}`;

/** $1 = id, $2 = token, $3 = delay in ms, $4 = error text. */
export const leaseRetrySql = (table: string) => `UPDATE ${table}
SET state = 'pending', available_at = ${msFromNow('$3')}, claim_token = NULL, lease_expires_at = NULL, last_error = $4
WHERE ${FENCE}`;

/** $1 = id, $2 = token, $3 = reason. */
export const leaseDeadLetterSql = (table: string) => `UPDATE ${table} SET state = 'dead', lease_expires_at = NULL, last_error = $3
WHERE ${FENCE}`;

/**
 * $1 = source, $2 = idempotency key, $3 = aggregate id, $4 = payload (JSON), $5 = headers (JSON),
 * $6 = the inbox's notification channel. No row back: a duplicate (and no notification).
 */
export const inboxInsertSql = (table: string) => `WITH inserted AS (
  INSERT INTO ${table} (source, idempotency_key, aggregate_id, payload, headers)
  VALUES ($1, $2, $3, $4::jsonb, $5::jsonb)
  ON CONFLICT (source, idempotency_key) DO NOTHING
  RETURNING id
)
SELECT id, pg_notify($6, $1) AS wake FROM inserted`;

/** $1 = source, $2 = idempotency key. Runs after a conflicting insert, in a new snapshot that sees the stored row. */
export const inboxFindSql = (table: string) => `SELECT id FROM ${table} WHERE source = $1 AND idempotency_key = $2`;

const INBOX_RETURNING = `RETURNING i.id, i.source, i.idempotency_key, i.aggregate_id, i.payload, i.headers, i.attempts,
          i.claim_token, i.lease_expires_at, i.received_at`;

/**
 * $1 = limit, $2 = lease in ms, $3 = sources. The relay's claim: available pending rows of its
 * sources, oldest first, only the head of each (source, aggregate). Serialized by the caller's
 * advisory lock, like the outbox claim. The scan runs per source (a LATERAL over the array), so
 * each walks the (source, available_at, id) index in order and stops at the limit: `source =
 * ANY(...)` with one ORDER BY would read and sort every pending row of the sources on each claim.
 */
export const inboxRelayClaimSql = (table: string) => `WITH candidates AS MATERIALIZED (
  SELECT head.id FROM unnest($3::text[]) AS s(source)
  CROSS JOIN LATERAL (
    SELECT i.id, i.available_at FROM ${table} i
    WHERE i.source = s.source AND i.state = 'pending' AND i.available_at <= ${NOW}
      AND (i.aggregate_id IS NULL OR NOT EXISTS (
        SELECT 1 FROM ${table} e
        WHERE e.source = i.source AND e.aggregate_id = i.aggregate_id AND e.state IN ('pending', 'processing')
          AND e.id <> i.id AND (e.state = 'processing' OR e.id < i.id)))
    ORDER BY i.available_at, i.id
    LIMIT $1
    FOR UPDATE OF i SKIP LOCKED
  ) head
  ORDER BY head.available_at, head.id
  LIMIT $1
)
UPDATE ${table} i
SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = ${NOW},
    lease_expires_at = ${msFromNow('$2')}, attempts = i.attempts + 1
FROM candidates c
WHERE i.id = c.id
${INBOX_RETURNING}`;

/** $1 = max attempts, $2 = sources. The relay's reclaim step, limited to the sources it consumes. */
export const inboxReclaimSql = (table: string) => `UPDATE ${table}
${RECLAIM_SET}
WHERE state = 'processing' AND source = ANY($2::text[]) AND lease_expires_at <= ${NOW}
RETURNING state, source AS name`;

/**
 * $1 = limit, $2 = lease in ms, $3 = source. A pull claim takes, in one statement, rows whose
 * lease expired (a crashed client's) and available pending rows, only the head of each aggregate.
 * Two locked CTEs keep each branch on its own index, in its own order: an OR would make the
 * planner read and sort the whole backlog of the source on every claim.
 */
export const inboxPullClaimSql = (table: string) => {
  const headOfAggregate = `(i.aggregate_id IS NULL OR NOT EXISTS (
      SELECT 1 FROM ${table} e
      WHERE e.source = i.source AND e.aggregate_id = i.aggregate_id AND e.state IN ('pending', 'processing')
        AND e.id <> i.id AND (e.state = 'processing' OR e.id < i.id)))`;
  return `WITH expired AS MATERIALIZED (
  SELECT i.id FROM ${table} i
  WHERE i.source = $3 AND i.state = 'processing' AND i.lease_expires_at <= ${NOW} AND ${headOfAggregate}
  ORDER BY i.lease_expires_at
  LIMIT $1
  FOR UPDATE OF i SKIP LOCKED
), pending AS MATERIALIZED (
  SELECT i.id FROM ${table} i
  WHERE i.source = $3 AND i.state = 'pending' AND i.available_at <= ${NOW} AND ${headOfAggregate}
  ORDER BY i.available_at, i.id
  LIMIT $1
  FOR UPDATE OF i SKIP LOCKED
), candidates AS MATERIALIZED (
  SELECT id FROM (SELECT id, 0 AS pass FROM expired UNION ALL SELECT id, 1 FROM pending) both_kinds ORDER BY pass LIMIT $1
)
UPDATE ${table} i
SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = ${NOW},
    lease_expires_at = ${msFromNow('$2')}, attempts = i.attempts + 1
FROM candidates c
WHERE i.id = c.id
${INBOX_RETURNING}`;
};
