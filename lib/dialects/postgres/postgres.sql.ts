/**
 * PostgreSQL statements as pure functions of the (already quoted) table name, so tests can
 * EXPLAIN exactly what runs. Parameters are positional (`$1`...), documented per statement.
 */

// I7: `now()` is the start of the transaction. Every lease and fence reads `clock_timestamp()`,
// the current time, so a fence evaluated late in a long transaction sees an expired lease.
export const NOW = 'clock_timestamp()';

import { REPLAY_COUNT_HEADER, REPLAYED_AT_HEADER } from '../../wire-headers';

const msFromNow = (param: string) => `${NOW} + make_interval(secs => ${param}::double precision / 1000)`;

/** The claim fence: $1 = id, $2 = claim token. */
const FENCE = `id = $1 AND state = 'processing' AND claim_token = $2 AND lease_expires_at > ${NOW}`;

/** Listens on a channel (a validated, generated name; LISTEN takes no parameters). */
export const listenSql = (channel: string) => `LISTEN "${channel}"`;

/** Serializes claims: $1 = lock name. Held until the claim transaction ends. */
export const claimLockSql = () => 'SELECT pg_advisory_xact_lock(hashtextextended($1, 0))';

/** A value inlined into a serialized claim: an integer, a string or a list of strings. */
export type InlineParam = number | string | readonly string[];

/**
 * A claim and its advisory lock as one query string of two statements, sent in one round trip
 * with the simple query protocol (no parameters: each `$n` of `statement` is replaced by the
 * literal of `params[n - 1]`). PostgreSQL runs the statements of one query string as one
 * transaction (committed after the last, rolled back on any error), and under READ COMMITTED each
 * statement takes its own snapshot: the claim's snapshot is taken after the lock was granted,
 * so it sees every claim committed before it, exactly as with BEGIN, the lock, the claim and
 * COMMIT sent one by one (four round trips).
 */
export const serializedClaimSql = (lockName: string, statement: string, params: readonly InlineParam[]) =>
  `SELECT pg_advisory_xact_lock(hashtextextended(${pgLiteral(lockName)}, 0));
${inlineParams(statement, params)}`;

/** `statement` with `$1`, `$2`... replaced by the literals of `params`. */
export function inlineParams(statement: string, params: readonly InlineParam[]): string {
  return substituteParams(statement, params, inlineValue, 'value');
}

/** `statement` with each `$n` replaced by `render(values[n - 1])`; a `$n` past the values is an error. */
function substituteParams<V>(statement: string, values: readonly V[], render: (value: V) => string, what: string): string {
  return statement.replace(/\$(\d+)/g, (_placeholder, n: string) => {
    const index = Number(n) - 1;
    if (index >= values.length) throw new Error(`no ${what} for $${n} (${values.length} given)`);
    return render(values[index]);
  });
}

function inlineValue(value: InlineParam): string {
  if (typeof value === 'number') {
    // Only integers reach SQL text: a NaN or a fraction here is a bug upstream, never a value to send.
    if (!Number.isSafeInteger(value)) throw new Error(`not an integer: ${value}`);
    return value < 0 ? `(${value})` : String(value);
  }
  if (typeof value === 'string') return pgLiteral(value);
  return value.length === 0 ? `'{}'::text[]` : `ARRAY[${value.map(pgLiteral).join(', ')}]::text[]`;
}

/**
 * A string literal that means `value` whatever `standard_conforming_strings` says: quotes doubled,
 * and with backslashes the escape-string form with backslashes doubled (as node-postgres'
 * `escapeLiteral`). A NUL cannot be in a PostgreSQL string at all.
 */
export function pgLiteral(value: string): string {
  if (value.includes('\0')) throw new Error('a PostgreSQL string cannot contain NUL');
  const quoted = `'${value.replace(/'/g, "''")}'`;
  return value.includes('\\') ? ` E${quoted.replace(/\\/g, '\\\\')}` : quoted;
}

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
 * How many of the oldest available pending rows a claim looks through for heads of keys before it
 * looks key by key. Bounds a claim's cost when the oldest rows belong to keys that are in flight.
 */
export const CLAIM_SCAN_WINDOW = 500;

/**
 * The pending rows a claim's search (`near`, `far`) found, oldest first, locked (a row locked
 * elsewhere is skipped), reached by primary key. $1 = limit.
 */
const lockFoundSql = (table: string, alias: string) => `SELECT ${alias}.id FROM ${table} ${alias}
  WHERE ${alias}.id = ANY (ARRAY(SELECT id FROM near UNION ALL SELECT id FROM far)) AND ${alias}.state = 'pending'
  ORDER BY ${alias}.available_at, ${alias}.id
  LIMIT $1
  FOR UPDATE OF ${alias} SKIP LOCKED`;

/** What an outbox claim returns: the columns the poller reads. */
export const OUTBOX_CLAIM_COLUMNS =
  'id, message_id, destination, "key", payload, headers, attempts, claim_token, lease_expires_at, created_at';
const OUTBOX_CLAIM_RETURNING = `RETURNING ${qualified('o', OUTBOX_CLAIM_COLUMNS)}`;

/** `columns` (a comma-separated list) each prefixed with `alias.`. */
function qualified(alias: string, columns: string): string {
  return columns
    .split(', ')
    .map((column) => `${alias}.${column}`)
    .join(', ');
}

/**
 * Whether pending outbox row `alias` is the head of its key: no earlier unfinished row of the key,
 * and none of it in flight. Two probes, each stopping at its first index entry (the key index from
 * the row's id down; the in-flight unique index), so a head costs the same however many rows its
 * key has waiting.
 */
const outboxHeadOfKey = (table: string, alias: string) => `(${alias}."key" IS NULL OR (
      NOT EXISTS (SELECT 1 FROM ${table} e WHERE e."key" = ${alias}."key" AND e.state IN ('pending', 'processing') AND e.id < ${alias}.id)
      AND NOT EXISTS (SELECT 1 FROM ${table} e WHERE e."key" = ${alias}."key" AND e.state = 'processing')))`;

/**
 * $1 = limit, $2 = lease in ms. Takes available pending rows oldest first, only the head of each
 * key (no earlier unfinished row, none in flight), in two steps so that its cost does not grow
 * with the backlog of keys in flight:
 * - `near`: the oldest CLAIM_SCAN_WINDOW available pending rows, checked one by one, stopping at
 *   the limit. With free keys (or no keys) the rows are found here, in a few index pages.
 * - `heads` and `far`, only when `near` found fewer than the limit (the oldest rows belong to
 *   busy keys, or the outbox is nearly empty): the first unfinished row of every key, one probe of
 *   the key index per key (a recursive skip scan: the next key's first row after the last key),
 *   taken if it is pending, due and its key has nothing in flight; plus the oldest rows without a
 *   key through their own index. Its cost follows the number of keys, never the rows waiting.
 * Both are merged, ordered by age and locked; the CTE is materialized so the LIMIT applies exactly
 * once (a LIMIT in a subquery of an UPDATE can update more rows under a nested loop), and the rows
 * are reached by primary key (an id array) so no plan reads the backlog to join them.
 */
export const outboxClaimSql = (table: string, returning = OUTBOX_CLAIM_RETURNING) => `WITH RECURSIVE near AS (
  SELECT s.id FROM (
    SELECT o.id, o."key" FROM ${table} o
    WHERE o.state = 'pending' AND o.available_at <= ${NOW}
    ORDER BY o.available_at, o.id
    LIMIT ${CLAIM_SCAN_WINDOW}
  ) s
  WHERE ${outboxHeadOfKey(table, 's')}
  LIMIT $1
), heads AS (
  (SELECT o."key", o.id, o.state, o.available_at FROM ${table} o
   WHERE o.state IN ('pending', 'processing') AND o."key" IS NOT NULL AND (SELECT count(*) FROM near) < $1
   ORDER BY o."key", o.id
   LIMIT 1)
  UNION ALL
  SELECT next.* FROM heads h
  CROSS JOIN LATERAL (
    SELECT o."key", o.id, o.state, o.available_at FROM ${table} o
    WHERE o.state IN ('pending', 'processing') AND o."key" > h."key"
    ORDER BY o."key", o.id
    LIMIT 1
  ) next
), far AS (
  (SELECT h.id FROM heads h
   WHERE h.state = 'pending' AND h.available_at <= ${NOW}
     AND NOT EXISTS (SELECT 1 FROM ${table} e WHERE e."key" = h."key" AND e.state = 'processing')
   ORDER BY h.available_at, h.id
   LIMIT $1)
  UNION ALL
  (SELECT o.id FROM ${table} o
   WHERE o.state = 'pending' AND o."key" IS NULL AND o.available_at <= ${NOW} AND (SELECT count(*) FROM near) < $1
   ORDER BY o.available_at, o.id
   LIMIT $1)
), candidates AS MATERIALIZED (
  ${lockFoundSql(table, 'o')}
)
UPDATE ${table} o
SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = ${NOW},
    lease_expires_at = ${msFromNow('$2')}, attempts = o.attempts + 1
FROM candidates c
WHERE o.id = c.id
${returning}`;

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

/** What an inbox claim returns: the columns the relay and pull workers read. */
export const INBOX_CLAIM_COLUMNS =
  'id, source, idempotency_key, aggregate_id, payload, headers, attempts, claim_token, lease_expires_at, received_at';
const INBOX_RETURNING = `RETURNING ${qualified('i', INBOX_CLAIM_COLUMNS)}`;

/**
 * Whether inbox row `alias` is the head of its aggregate: no earlier unfinished row of the same
 * (source, aggregate), and no other row of it in flight. Two probes, each stopping at its first
 * index entry (the aggregate index from the row's id down; the in-flight unique index), so a head
 * costs the same however many rows its aggregate has waiting.
 */
const inboxHeadOfAggregate = (table: string, alias: string) => `(${alias}.aggregate_id IS NULL OR (
      NOT EXISTS (SELECT 1 FROM ${table} e WHERE e.source = ${alias}.source AND e.aggregate_id = ${alias}.aggregate_id
        AND e.state IN ('pending', 'processing') AND e.id < ${alias}.id)
      AND NOT EXISTS (SELECT 1 FROM ${table} e WHERE e.source = ${alias}.source AND e.aggregate_id = ${alias}.aggregate_id
        AND e.state = 'processing' AND e.id <> ${alias}.id)))`;

/**
 * The search CTEs of an inbox claim of pending rows (`near`, `heads`, `far`: the outbox claim's, per
 * source of `sources`, a text[] expression; see outboxClaimSql). $1 = limit.
 */
const inboxPendingSearch = (table: string, sources: string) => `near AS (
  SELECT head.id FROM unnest(${sources}) AS s(source)
  CROSS JOIN LATERAL (
    SELECT w.id FROM (
      SELECT i.id, i.source, i.aggregate_id FROM ${table} i
      WHERE i.source = s.source AND i.state = 'pending' AND i.available_at <= ${NOW}
      ORDER BY i.available_at, i.id
      LIMIT ${CLAIM_SCAN_WINDOW}
    ) w
    WHERE ${inboxHeadOfAggregate(table, 'w')}
    LIMIT $1
  ) head
), heads AS (
  SELECT first.* FROM unnest(${sources}) AS s(source)
  CROSS JOIN LATERAL (
    SELECT i.source, i.aggregate_id, i.id, i.state, i.available_at FROM ${table} i
    WHERE i.source = s.source AND i.state IN ('pending', 'processing') AND i.aggregate_id IS NOT NULL
    ORDER BY i.aggregate_id, i.id
    LIMIT 1
  ) first
  WHERE (SELECT count(*) FROM near) < $1
  UNION ALL
  SELECT next.* FROM heads h
  CROSS JOIN LATERAL (
    SELECT i.source, i.aggregate_id, i.id, i.state, i.available_at FROM ${table} i
    WHERE i.source = h.source AND i.state IN ('pending', 'processing') AND i.aggregate_id > h.aggregate_id
    ORDER BY i.aggregate_id, i.id
    LIMIT 1
  ) next
), far AS (
  (SELECT h.id FROM heads h
   WHERE h.state = 'pending' AND h.available_at <= ${NOW}
     AND NOT EXISTS (SELECT 1 FROM ${table} e WHERE e.source = h.source AND e.aggregate_id = h.aggregate_id AND e.state = 'processing')
   ORDER BY h.available_at, h.id
   LIMIT $1)
  UNION ALL
  (SELECT unkeyed.id FROM unnest(${sources}) AS s(source)
   CROSS JOIN LATERAL (
     SELECT i.id, i.available_at FROM ${table} i
     WHERE i.source = s.source AND i.state = 'pending' AND i.aggregate_id IS NULL AND i.available_at <= ${NOW}
     ORDER BY i.available_at, i.id
     LIMIT $1
   ) unkeyed
   WHERE (SELECT count(*) FROM near) < $1
   ORDER BY unkeyed.available_at, unkeyed.id
   LIMIT $1)
)`;

const INBOX_SET_CLAIMED = `SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = ${NOW},
    lease_expires_at = ${msFromNow('$2')}, attempts = i.attempts + 1`;

/**
 * $1 = limit, $2 = lease in ms, $3 = sources. The relay's claim: available pending rows of its
 * sources, oldest first, only the head of each (source, aggregate). Serialized by the caller's
 * advisory lock, like the outbox claim. Each source's scan walks its (source, available_at, id)
 * index in order and stops at the limit or the window (`source = ANY(...)` with one ORDER BY would
 * read and sort every pending row of the sources on each claim).
 */
export const inboxRelayClaimSql = (
  table: string,
  returning = INBOX_RETURNING,
) => `WITH RECURSIVE ${inboxPendingSearch(table, '$3::text[]')}, candidates AS MATERIALIZED (
  ${lockFoundSql(table, 'i')}
)
UPDATE ${table} i
${INBOX_SET_CLAIMED}
FROM candidates c
WHERE i.id = c.id
${returning}`;

/** $1 = max attempts, $2 = sources. The relay's reclaim step, limited to the sources it consumes. */
export const inboxReclaimSql = (table: string) => `UPDATE ${table}
${RECLAIM_SET}
WHERE state = 'processing' AND source = ANY($2::text[]) AND lease_expires_at <= ${NOW}
RETURNING state, source AS name`;

/**
 * $1 = limit, $2 = lease in ms, $3 = source. A pull claim takes, in one statement, rows whose
 * lease expired (a crashed client's) and available pending rows, only the head of each aggregate.
 * Expired rows first, through the lease index; then the pending rows' search. Each kind is locked
 * on its own index, in its own order: an OR would make the planner read and sort the whole
 * backlog of the source on every claim.
 */
export const inboxPullClaimSql = (table: string, returning = INBOX_RETURNING) => `WITH RECURSIVE expired AS MATERIALIZED (
  SELECT i.id FROM ${table} i
  WHERE i.source = $3 AND i.state = 'processing' AND i.lease_expires_at <= ${NOW} AND ${inboxHeadOfAggregate(table, 'i')}
  ORDER BY i.lease_expires_at
  LIMIT $1
  FOR UPDATE OF i SKIP LOCKED
), ${inboxPendingSearch(table, 'ARRAY[$3::text]')}, pending AS MATERIALIZED (
  ${lockFoundSql(table, 'i')}
), candidates AS MATERIALIZED (
  SELECT id FROM (SELECT id, 0 AS pass FROM expired UNION ALL SELECT id, 1 FROM pending) both_kinds ORDER BY pass LIMIT $1
)
UPDATE ${table} i
${INBOX_SET_CLAIMED}
FROM candidates c
WHERE i.id = c.id
${returning}`;

/** The PL/pgSQL claim functions of migration 003, one per claim of a table set (names quoted). */
export interface ClaimFunctions {
  outbox: string;
  relay: string;
  pull: string;
}

/**
 * Each claim function's parameters, in the order of the claim statement's `$1`, `$2`, `$3`: the
 * one place their names and types are written (declaration, body, lookup, DROP).
 */
const CLAIM_FUNCTION_PARAMS: Record<keyof ClaimFunctions, readonly (readonly [name: string, type: string])[]> = {
  outbox: [
    ['p_limit', 'integer'],
    ['p_lease_ms', 'bigint'],
  ],
  relay: [
    ['p_limit', 'integer'],
    ['p_lease_ms', 'bigint'],
    ['p_sources', 'text[]'],
  ],
  pull: [
    ['p_limit', 'integer'],
    ['p_lease_ms', 'bigint'],
    ['p_source', 'text'],
  ],
};

/** A claim function's signature as `to_regprocedure` and `DROP FUNCTION` take it: `name(integer, bigint)`. */
export const claimFunctionSignature = (kind: keyof ClaimFunctions, fn: string) =>
  `${fn}(${CLAIM_FUNCTION_PARAMS[kind].map(([, type]) => type).join(', ')})`;

/**
 * A claim as a PL/pgSQL function: the claim lock, then `claim` (its `$n` become the parameters),
 * as the one-query-string claim does (serializedClaimSql), with the same snapshots: in a VOLATILE
 * function each statement takes a snapshot of its own when it starts, so the claim sees every
 * claim committed before the lock was granted. What it adds: PL/pgSQL keeps the claim's plan for
 * the session, where a query string is planned on every call (the claim takes 0.45 ms to plan,
 * 0.14 ms to run, on one row). `lockKey` is an SQL expression of the lock's name; the function
 * returns the claimed rows whole.
 */
function claimFunctionSql(kind: keyof ClaimFunctions, fn: string, table: string, lockKey: string, claim: string): string {
  const params = CLAIM_FUNCTION_PARAMS[kind];
  return `CREATE OR REPLACE FUNCTION ${fn}(${params.map(([name, type]) => `${name} ${type}`).join(', ')}) RETURNS SETOF ${table}
LANGUAGE plpgsql VOLATILE AS $queuebox$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended(${lockKey}, 0));
  RETURN QUERY ${substituteParams(claim, params, ([name]) => name, 'parameter')};
END
$queuebox$`;
}

/** The outbox claim function: the lock `lockName`, then outboxClaimSql. */
export const outboxClaimFunctionSql = (fn: string, table: string, lockName: string) =>
  claimFunctionSql('outbox', fn, table, pgLiteral(lockName), outboxClaimSql(table, 'RETURNING o.*'));

/** The relay claim function: the lock `lockName`, then inboxRelayClaimSql. */
export const inboxRelayClaimFunctionSql = (fn: string, table: string, lockName: string) =>
  claimFunctionSql('relay', fn, table, pgLiteral(lockName), inboxRelayClaimSql(table, 'RETURNING i.*'));

/** The pull claim function: the lock `lockPrefix` followed by the source, then inboxPullClaimSql. */
export const inboxPullClaimFunctionSql = (fn: string, table: string, lockPrefix: string) =>
  claimFunctionSql('pull', fn, table, `${pgLiteral(lockPrefix)} || p_source`, inboxPullClaimSql(table, 'RETURNING i.*'));

/**
 * A call of a claim function ($1 = limit, $2 = lease in ms, $3 = sources or source): of the rows
 * it claimed, the `columns` the worker reads (OUTBOX_CLAIM_COLUMNS, INBOX_CLAIM_COLUMNS), as the
 * claim statement returns them; the whole row would cost the client three more timestamps to parse.
 */
export const claimFunctionCallSql = (kind: keyof ClaimFunctions, fn: string, columns: string) =>
  `SELECT ${columns} FROM ${fn}(${CLAIM_FUNCTION_PARAMS[kind].map((_param, i) => `$${i + 1}`).join(', ')})`;

// ---------------------------------------------------------------------------------------------
// Admin and retention (QueueBoxAdmin, RetentionService)
// ---------------------------------------------------------------------------------------------

/** The columns that differ between the outbox and the inbox. */
export interface AdminColumns {
  /** Destination or source. */
  name: 'destination' | 'source';
  /** Ordering key or aggregate. */
  key: '"key"' | 'aggregate_id';
  /** Enqueue or receive time. */
  created: 'created_at' | 'received_at';
}

export const ADMIN_COLUMNS = {
  outbox: { name: 'destination', key: '"key"', created: 'created_at' },
  inbox: { name: 'source', key: 'aggregate_id', created: 'received_at' },
} as const satisfies Record<'outbox' | 'inbox', AdminColumns>;

const msAgo = (param: string) => `${NOW} - make_interval(secs => ${param}::double precision / 1000)`;

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

/** When a dead row died: its last claim, or its arrival for a row never claimed. */
const deadAt = (c: AdminColumns) => `coalesce(claimed_at, ${c.created})`;

/**
 * The dead-row selection: $1 = name, $2 = error substring, $3 = last attempt from, $4 = last
 * attempt before, $5 = ids (bigint[]); each null when absent. The driver plans each call with its
 * values, so an absent criterion folds away and `name` uses the `dead_idx (name, id)` index.
 */
const deadWhere = (c: AdminColumns) => `state = 'dead'
  AND ($1::text IS NULL OR ${c.name} = $1)
  AND ($2::text IS NULL OR strpos(lower(last_error), lower($2::text)) > 0)
  AND ($3::timestamptz IS NULL OR ${deadAt(c)} >= $3)
  AND ($4::timestamptz IS NULL OR ${deadAt(c)} < $4)
  AND ($5::bigint[] IS NULL OR id = ANY($5::bigint[]))`;

/** $1..$5 = the selection, $6 = after id, $7 = limit. Keyset page of dead rows in id order. */
export const deadLetterListSql = (table: string, component: 'outbox' | 'inbox', includePayload: boolean) => {
  const c = ADMIN_COLUMNS[component];
  const identity = component === 'outbox' ? 'message_id, NULL AS idempotency_key' : 'NULL AS message_id, idempotency_key';
  return `SELECT id, ${identity}, ${c.name} AS name, ${c.key} AS "key", attempts, last_error, ${c.created} AS created_at,
       claimed_at, headers${includePayload ? ', payload' : ''}
FROM ${table}
WHERE ${deadWhere(c)}
  AND ($6::bigint IS NULL OR id > $6)
ORDER BY id
LIMIT $7`;
};

/** $1..$5 = the selection. */
export const deadLetterCountSql = (table: string, component: 'outbox' | 'inbox') =>
  `SELECT count(*) AS n FROM ${table} WHERE ${deadWhere(ADMIN_COLUMNS[component])}`;

/**
 * The batch of dead rows a replay or discard takes: $1..$5 the selection, $6 after id, $7 limit.
 * Materialized once, and joined as an id array so each row is reached through the primary key
 * (a join lets the planner hash the whole table when it misjudges the batch).
 */
const deadBatch = (table: string, component: 'outbox' | 'inbox') => `WITH batch AS MATERIALIZED (
  SELECT id FROM ${table}
  WHERE ${deadWhere(ADMIN_COLUMNS[component])}
    AND ($6::bigint IS NULL OR id > $6)
  ORDER BY id
  LIMIT $7
  FOR UPDATE
)`;

/**
 * $1..$7 as the batch. Dead rows back to `pending`, due now, attempts 0, no claim; `last_error`
 * is kept (the reason it died) and the replay is recorded in the headers the destination
 * receives. The outer `state = 'dead'` re-checks each row after its lock: only dead rows change.
 */
export const deadLetterReplaySql = (table: string, component: 'outbox' | 'inbox') => `${deadBatch(table, component)}
UPDATE ${table} t
SET state = 'pending', attempts = 0, available_at = ${NOW}, claim_token = NULL, lease_expires_at = NULL,
    headers = t.headers || jsonb_build_object(
      '${REPLAY_COUNT_HEADER}', (coalesce((t.headers ->> '${REPLAY_COUNT_HEADER}')::integer, 0) + 1)::text,
      '${REPLAYED_AT_HEADER}', to_char(${NOW} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
WHERE t.id = ANY (ARRAY(SELECT id FROM batch)) AND t.state = 'dead'
RETURNING t.id`;

/** $1..$7 as the batch. Deletes dead rows only. */
export const deadLetterDiscardSql = (table: string, component: 'outbox' | 'inbox') => `${deadBatch(table, component)}
DELETE FROM ${table} t
WHERE t.id = ANY (ARRAY(SELECT id FROM batch)) AND t.state = 'dead'
RETURNING t.id`;

/**
 * $1 = limit. Heads (earliest unfinished row of their key) that failed at least once and are not
 * finished: pending until their retry, or processing again. Served by the unfinished-rows key index.
 */
export const blockedKeyListSql = (table: string, component: 'outbox' | 'inbox') => {
  const c = ADMIN_COLUMNS[component];
  const sameKey = (alias: string) =>
    `${alias}.${c.key} = h.${c.key}${component === 'inbox' ? ` AND ${alias}.source = h.source` : ''} AND ${alias}.state IN ('pending', 'processing')`;
  return `SELECT h.id, ${component === 'outbox' ? 'h.message_id' : 'NULL AS message_id'}, h.${c.name} AS name, h.${c.key} AS "key",
       h.state, h.attempts, h.last_error,
       CASE WHEN h.state = 'pending' THEN h.available_at ELSE h.lease_expires_at END AS next_attempt_at,
       (SELECT count(*) FROM ${table} w WHERE ${sameKey('w')} AND w.id > h.id) AS waiting
FROM ${table} h
WHERE h.state IN ('pending', 'processing') AND h.${c.key} IS NOT NULL
  AND h.attempts > 0 AND h.last_error IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM ${table} e WHERE ${sameKey('e')} AND e.id < h.id)
ORDER BY h.id
LIMIT $1`;
};

/**
 * Outbox: $1 = key, $2 = expected head id (or null), $3 = reason. Inbox: $1 = source,
 * $2 = aggregate, $3 = expected head id, $4 = reason. Dead-letters the head of the key if it is
 * pending, or processing with an expired lease (database clock): a live claim is never touched,
 * and its owner's fenced writes fail afterwards only if the lease had already expired.
 */
export const blockedKeySkipHeadSql = (table: string, component: 'outbox' | 'inbox') => {
  const [match, expected, reason] = component === 'outbox' ? ['"key" = $1', '$2', '$3'] : ['source = $1 AND aggregate_id = $2', '$3', '$4'];
  return `WITH head AS MATERIALIZED (
  SELECT id FROM ${table}
  WHERE ${match} AND state IN ('pending', 'processing')
  ORDER BY id
  LIMIT 1
  FOR UPDATE
)
UPDATE ${table} t
SET state = 'dead', claim_token = NULL, lease_expires_at = NULL, last_error = ${reason}
FROM head
WHERE t.id = head.id AND (${expected}::bigint IS NULL OR t.id = ${expected}::bigint)
  AND (t.state = 'pending' OR (t.state = 'processing' AND t.lease_expires_at <= ${NOW}))
RETURNING t.id`;
};

/**
 * $1 = lock name. Retention runs on one replica at a time: a session advisory lock, tried, never
 * waited for; the key is `hashtextextended(name, 0)` like the claim locks.
 */
export const retentionTryLockSql = () => 'SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS locked';
export const retentionUnlockSql = () => 'SELECT pg_advisory_unlock(hashtextextended($1, 0)) AS unlocked';

/**
 * $1 = age in ms, $2 = batch size. Deletes finished or dead rows older than the age, oldest first,
 * through the partial index on that state (`sent_idx`, `processed_idx`, `dead_idx`). Materialized
 * once so the limit holds; SKIP LOCKED so a batch never waits.
 */
export const retentionDeleteSql = (table: string, kind: 'outbox-sent' | 'inbox-processed' | 'outbox-dead' | 'inbox-dead') => {
  const pick = {
    'outbox-sent': { state: 'sent', age: 'sent_at', order: 'sent_at' },
    'inbox-processed': { state: 'processed', age: 'processed_at', order: 'processed_at' },
    'outbox-dead': { state: 'dead', age: deadAt(ADMIN_COLUMNS.outbox), order: 'id' },
    'inbox-dead': { state: 'dead', age: deadAt(ADMIN_COLUMNS.inbox), order: 'id' },
  }[kind];
  return `WITH batch AS MATERIALIZED (
  SELECT id FROM ${table}
  WHERE state = '${pick.state}' AND ${pick.age} < ${msAgo('$1')}
  ORDER BY ${pick.order}
  LIMIT $2
  FOR UPDATE SKIP LOCKED
)
DELETE FROM ${table} t
WHERE t.id = ANY (ARRAY(SELECT id FROM batch)) AND t.state = '${pick.state}'`;
};
