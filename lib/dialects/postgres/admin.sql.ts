import { REPLAY_COUNT_HEADER, REPLAYED_AT_HEADER } from '../../wire-headers';
import { ADMIN_COLUMNS, type AdminColumns, deadAt } from './columns';
import { held, type InstanceTables, ownerColumns } from './instances.sql';
import { NOW } from './time';

// QueueBoxAdmin's statements. Every write touches `dead` rows only, except skip-head.

/**
 * Counts per destination and source. One branch per state, each with exactly the predicate of a
 * partial index (`claim_idx` for pending, `lease_idx` for processing, `dead_idx` for dead), so
 * the count reads unfinished and dead rows only, never the finished ones.
 */
export const adminBacklogSql = (outbox: string, inbox: string) => {
  const branches = (component: 'outbox' | 'inbox', table: string) => {
    const c = ADMIN_COLUMNS[component];
    return `SELECT '${component}' AS component, ${c.name} AS name, 'pending' AS state, count(*) AS n,
       extract(epoch FROM ${NOW} - min(${c.created}) FILTER (WHERE available_at <= ${NOW}))::double precision AS oldest
FROM ${table} WHERE state = 'pending' GROUP BY ${c.name}
UNION ALL
SELECT '${component}', ${c.name}, 'processing', count(*), NULL FROM ${table} WHERE state = 'processing' GROUP BY ${c.name}
UNION ALL
SELECT '${component}', ${c.name}, 'dead', count(*), NULL FROM ${table} WHERE state = 'dead' GROUP BY ${c.name}`;
  };
  return `${branches('outbox', outbox)}
UNION ALL
${branches('inbox', inbox)}`;
};

/**
 * The dead-row selection: $1 = name, $2 = error substring, $3 = last attempt from, $4 = last
 * attempt before, $5 = ids (bigint[]), $6 = key (outbox `key`, inbox `aggregate_id`), $7 = group
 * fingerprint (the attempts migration); each null when absent. The driver plans each call with its values, so an absent criterion folds away and
 * `name` uses the `dead_idx (name, id)` index.
 */
const deadWhere = (c: AdminColumns) => `state = 'dead'
  AND ($1::text IS NULL OR ${c.name} = $1)
  AND ($2::text IS NULL OR strpos(lower(last_error), lower($2::text)) > 0)
  AND ($3::timestamptz IS NULL OR ${deadAt(c)} >= $3)
  AND ($4::timestamptz IS NULL OR ${deadAt(c)} < $4)
  AND ($5::bigint[] IS NULL OR id = ANY($5::bigint[]))
  AND ($6::text IS NULL OR ${c.key} = $6)
  AND ($7::text IS NULL OR fingerprint = $7)`;

/**
 * $1..$7 = the selection, $8 = after id, $9 = limit. Keyset page of dead rows in id order, or
 * newest first (`descending`: ids below $8). The matching ids are read first, through `dead_idx`
 * (dead rows only), and the page is cut from them: ordered by the primary key instead, the planner
 * walks finished rows in id order until it finds `limit` dead ones, which on a big table with few
 * or no matches means reading it whole (seen at 180 ms with 1,000,000 sent rows, bench/dashboard.mjs).
 */
export const deadLetterListSql = (table: string, component: 'outbox' | 'inbox', includePayload: boolean, descending = false) => {
  const c = ADMIN_COLUMNS[component];
  const identity = component === 'outbox' ? 'message_id, NULL AS idempotency_key' : 'NULL AS message_id, idempotency_key';
  const order = descending ? ' DESC' : '';
  return `WITH matching AS MATERIALIZED (
  SELECT id FROM ${table}
  WHERE ${deadWhere(c)}
    AND ($8::bigint IS NULL OR id ${descending ? '<' : '>'} $8)
)
SELECT id, ${identity}, ${c.name} AS name, ${c.key} AS "key", attempts, last_error, fingerprint, ${c.created} AS created_at,
       claimed_at, headers${includePayload ? ', payload' : ''}
FROM ${table}
WHERE id = ANY (ARRAY(SELECT id FROM matching ORDER BY id${order} LIMIT $9))
ORDER BY id${order}`;
};

/** $1..$7 = the selection. */
export const deadLetterCountSql = (table: string, component: 'outbox' | 'inbox') =>
  `SELECT count(*) AS n FROM ${table} WHERE ${deadWhere(ADMIN_COLUMNS[component])}`;

/**
 * The batch of dead rows a replay or discard takes: $1..$7 the selection, $8 after id, $9 limit.
 * Materialized once, and joined as an id array so each row is reached through the primary key
 * (a join lets the planner hash the whole table when it misjudges the batch).
 */
const deadBatch = (table: string, component: 'outbox' | 'inbox') => `WITH batch AS MATERIALIZED (
  SELECT id FROM ${table}
  WHERE ${deadWhere(ADMIN_COLUMNS[component])}
    AND ($8::bigint IS NULL OR id > $8)
  ORDER BY id
  LIMIT $9
  FOR UPDATE
)`;

/**
 * $1..$9 as the batch. Dead rows back to `pending`, due now, attempts 0, no claim; `last_error`
 * is kept (the reason it died) and the replay is recorded in the headers the destination
 * receives. The outer `state = 'dead'` re-checks each row after its lock: only dead rows change.
 */
export const deadLetterReplaySql = (table: string, component: 'outbox' | 'inbox') => `${deadBatch(table, component)}
UPDATE ${table} t
SET state = 'pending', attempts = 0, available_at = ${NOW}, claim_token = NULL, lease_expires_at = NULL,
    headers = t.headers || jsonb_build_object(
      '${REPLAY_COUNT_HEADER}', (coalesce((t.headers ->> '${REPLAY_COUNT_HEADER}')::integer, 0) + 1)::text,
      '${REPLAYED_AT_HEADER}', to_char(${NOW} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
WHERE t.id = ANY (ARRAY(SELECT id FROM batch)) AND t.state = 'dead' AND ($7::text IS NULL OR t.fingerprint = $7)
RETURNING t.id`;

/** $1..$9 as the batch. Deletes dead rows only; with `history` (the attempts migration), their attempt history with them. */
export const deadLetterDiscardSql = (table: string, component: 'outbox' | 'inbox', history?: string) => {
  const discard = `DELETE FROM ${table} t
WHERE t.id = ANY (ARRAY(SELECT id FROM batch)) AND t.state = 'dead' AND ($7::text IS NULL OR t.fingerprint = $7)
RETURNING t.id`;
  if (history === undefined) return `${deadBatch(table, component)}\n${discard}`;
  return `${deadBatch(table, component)}, gone AS (
${discard}
), history AS (
  DELETE FROM ${history} h WHERE h.row_id = ANY (ARRAY(SELECT id FROM gone))
)
SELECT id FROM gone`;
};

/**
 * $1 = limit. Heads (earliest unfinished row of their key) that hold their key up: `failing`, they
 * failed at least once and are not finished (pending until their retry, or processing again), or
 * `held`, claimed with rows waiting behind them. A head that is held (a live lease) says for how
 * long, by which instance, and that instance's state (a dead owner's key waits for a live replica
 * to end its lease); every head names the instance that claimed it last. Served by the
 * unfinished-rows key index.
 */
export const blockedKeyListSql = (table: string, component: 'outbox' | 'inbox', tables: InstanceTables) => {
  const c = ADMIN_COLUMNS[component];
  const sameKey = (alias: string) =>
    `${alias}.${c.key} = h.${c.key}${component === 'inbox' ? ` AND ${alias}.source = h.source` : ''} AND ${alias}.state IN ('pending', 'processing')`;
  const failing = 'h.attempts > 0 AND h.last_error IS NOT NULL';
  return `SELECT h.id, ${component === 'outbox' ? 'h.message_id' : 'NULL AS message_id'}, h.${c.name} AS name, h.${c.key} AS "key",
       h.state, h.attempts, h.last_error,
       CASE WHEN ${failing} THEN 'failing' ELSE 'held' END AS reason,
       CASE WHEN h.state = 'pending' THEN h.available_at ELSE h.lease_expires_at END AS next_attempt_at,
       (SELECT count(*) FROM ${table} w WHERE ${sameKey('w')} AND w.id > h.id) AS waiting,
       CASE WHEN ${held('h')} THEN extract(epoch FROM ${NOW} - h.claimed_at)::double precision END AS held_for,
       ${ownerColumns('h', tables)}
FROM ${table} h
WHERE h.state IN ('pending', 'processing') AND h.${c.key} IS NOT NULL
  AND ((${failing}) OR (h.state = 'processing' AND EXISTS (SELECT 1 FROM ${table} w WHERE ${sameKey('w')} AND w.id > h.id)))
  AND NOT EXISTS (SELECT 1 FROM ${table} e WHERE ${sameKey('e')} AND e.id < h.id)
ORDER BY h.id
LIMIT $1`;
};

/**
 * Outbox: $1 = key, $2 = expected head id (or null), $3 = reason, $4 = fingerprint. Inbox: $1 = source,
 * $2 = aggregate, $3 = expected head id, $4 = reason, $5 = fingerprint. Dead-letters the head of the key if it is
 * pending, or processing with an expired lease (database clock): a live claim is never touched,
 * and its owner's fenced writes fail afterwards only if the lease had already expired.
 */
export const blockedKeySkipHeadSql = (table: string, component: 'outbox' | 'inbox') => {
  const [match, expected, reason, fingerprint] =
    component === 'outbox' ? ['"key" = $1', '$2', '$3', '$4'] : ['source = $1 AND aggregate_id = $2', '$3', '$4', '$5'];
  return `WITH head AS MATERIALIZED (
  SELECT id FROM ${table}
  WHERE ${match} AND state IN ('pending', 'processing')
  ORDER BY id
  LIMIT 1
  FOR UPDATE
)
UPDATE ${table} t
SET state = 'dead', claim_token = NULL, lease_expires_at = NULL, last_error = ${reason}, fingerprint = ${fingerprint}
FROM head
WHERE t.id = head.id AND (${expected}::bigint IS NULL OR t.id = ${expected}::bigint)
  AND (t.state = 'pending' OR (t.state = 'processing' AND t.lease_expires_at <= ${NOW}))
RETURNING t.id`;
};

/**
 * $1 = since (a minute boundary). Finished and dead rows per destination / source and minute
 * since $1: `minute` counts whole minutes from $1. Each branch has the predicate of a partial
 * index: `sent_idx (sent_at)` and `processed_idx (processed_at)` are range-scanned from $1, so the
 * cost follows the rows finished since then, not the rows kept; dead rows (`dead_idx`) are read
 * whole, as retention keeps them few, and filtered on when they died.
 */
export const adminThroughputSql = (outbox: string, inbox: string) => {
  const minute = (column: string) => `floor(extract(epoch FROM ${column} - $1::timestamptz) / 60)::integer`;
  const branches = (component: 'outbox' | 'inbox', table: string, finished: 'sent_at' | 'processed_at', state: 'sent' | 'processed') => {
    const c = ADMIN_COLUMNS[component];
    return `SELECT '${component}' AS component, ${c.name} AS name, 'finished' AS outcome, ${minute(finished)} AS minute, count(*) AS n
FROM ${table} WHERE state = '${state}' AND ${finished} >= $1::timestamptz GROUP BY 2, 4
UNION ALL
SELECT '${component}', ${c.name}, 'dead', ${minute(deadAt(c))}, count(*)
FROM ${table} WHERE state = 'dead' AND ${deadAt(c)} >= $1::timestamptz GROUP BY 2, 4`;
  };
  return `${branches('outbox', outbox, 'sent_at', 'sent')}
UNION ALL
${branches('inbox', inbox, 'processed_at', 'processed')}`;
};

/**
 * $1 = limit. Rows in flight (`processing`), oldest claim first, through the partial `lease_idx`
 * (processing rows only, as many as the workers hold), with the instance that holds each and its
 * state. Ages and remaining leases by the database clock; a negative `lease_left` is an expired
 * lease the reclaim step has not returned yet: nobody holds that row, its last claimer is named.
 */
export const adminClaimListSql = (table: string, component: 'outbox' | 'inbox', tables: InstanceTables) => {
  const c = ADMIN_COLUMNS[component];
  const identity = component === 'outbox' ? 'h.message_id, NULL AS idempotency_key' : 'NULL AS message_id, h.idempotency_key';
  return `SELECT h.id, ${identity}, h.${c.name} AS name, h.${c.key} AS "key", h.claim_token, h.attempts, h.claimed_at, h.lease_expires_at,
       extract(epoch FROM ${NOW} - h.claimed_at)::double precision AS age,
       extract(epoch FROM h.lease_expires_at - ${NOW})::double precision AS lease_left,
       ${ownerColumns('h', tables)}
FROM ${table} h
WHERE h.state = 'processing'
ORDER BY h.claimed_at, h.id
LIMIT $1`;
};

/**
 * $1 = limit. Dead rows per destination (source) and fingerprint (the attempts migration), the biggest
 * groups first: how many, and when the first and last of them died. Reads the dead rows only
 * (`dead_idx`), which retention keeps few; rows that died before the attempts migration have no
 * fingerprint and form one group per name.
 */
export const deadLetterGroupsSql = (table: string, component: 'outbox' | 'inbox') => {
  const c = ADMIN_COLUMNS[component];
  return `SELECT ${c.name} AS name, fingerprint, count(*) AS n, min(${deadAt(c)}) AS first_at, max(${deadAt(c)}) AS last_at
FROM ${table} WHERE state = 'dead'
GROUP BY ${c.name}, fingerprint
ORDER BY count(*) DESC, ${c.name}, fingerprint
LIMIT $1`;
};

/** $1 = row id. The row's attempt history (the attempts migration), newest first, through its primary key. */
export const attemptListSql = (history: string) => `SELECT id, attempt, failed_at, duration_ms, instance_id, error_class, error, outcome
FROM ${history} WHERE row_id = $1
ORDER BY id DESC`;

/**
 * Dead rows per destination (source) and error class (the fingerprint up to its first ": ";
 * `unknown` for rows that died before the attempts migration), for the dead-letter gauge. Reads the dead
 * rows only (`dead_idx`).
 */
export const deadLetterClassesSql = (table: string, component: 'outbox' | 'inbox') => {
  const c = ADMIN_COLUMNS[component];
  return `SELECT ${c.name} AS name, coalesce(split_part(fingerprint, ': ', 1), 'unknown') AS error_class, count(*) AS n
FROM ${table} WHERE state = 'dead'
GROUP BY 1, 2`;
};
