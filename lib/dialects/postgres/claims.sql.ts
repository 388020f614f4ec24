import { LEASE_EXPIRED_CLASS, RECLAIM_FINGERPRINT } from '../../common/fingerprint';
import type { QueueBoxTables } from '../dialect';
import { readCommittedSql } from './checks.sql';
import { type InlineParam, inlineParams, pgLiteral } from './quoting';
import { msFromNow, NOW } from './time';

// The claims (outbox, inbox relay, inbox pull) and the reclaims of expired leases. Parameters are positional (`$1`...).

/**
 * The claim locks' names (the advisory lock key is `hashtextextended(name, 0)`): one per outbox
 * table, one per inbox table for the relay, one per inbox table and source for pull claims
 * (`pullPrefix` followed by the source).
 */
export function claimLockNames(tables: QueueBoxTables): { outbox: string; inbox: string; pullPrefix: string } {
  return {
    outbox: `queuebox_outbox_claim_${tables.outbox.qualified}`,
    inbox: `queuebox_inbox_claim_${tables.inbox.qualified}`,
    pullPrefix: `queuebox_pull_claim_${tables.inbox.qualified}:`,
  };
}

/**
 * A key lock of a claim function's keyed claim (migration 013, issue 36), an SQL boolean: tries,
 * without waiting, the transaction advisory lock of (`hashtext` of the claim lock's name, the int4
 * `hash` of a key or aggregate). A keyed claim takes its claim lock shared, then the key lock of
 * each head it finds as it finds it: a head whose key lock another claim holds is passed over and
 * the search reads on, as `SKIP LOCKED` does for rows, so concurrent claims take different keys.
 * A key's rows are claimed only under its key lock, so two claims never take rows of one key at
 * once. (Two keys whose hashes collide share a lock: one of them waits for the next claim.)
 */
export const tryKeyLockSql = (lockName: string, hash: string) => `pg_try_advisory_xact_lock(hashtext(${lockName}), ${hash})`;

/** How a search takes key locks: the SQL boolean that tries the key lock of the head row `alias`. */
type KeyLock = (alias: string) => string;

/**
 * The key locks of a keyed search under claim lock `lockName` (SQL text), each the lock of `hash`
 * (the int4 hash of a head row's key, by alias); none without `lockName` (the search of a claim
 * that holds the claim lock alone).
 */
const keyLockOf = (lockName: string | undefined, hash: (alias: string) => string): KeyLock | undefined =>
  lockName === undefined ? undefined : (alias) => tryKeyLockSql(lockName, hash(alias));

/**
 * A claim and its advisory lock as one query string of two statements, sent in one round trip
 * with the simple query protocol (no parameters: each `$n` of `statement` is replaced by the
 * literal of `params[n - 1]`). PostgreSQL runs the statements of one query string as one
 * transaction (committed after the last, rolled back on any error), and under READ COMMITTED each
 * statement takes its own snapshot: the claim's snapshot is taken after the lock was granted,
 * so it sees every claim committed before it, exactly as with BEGIN, the lock, the claim and
 * COMMIT sent one by one (four round trips). The transaction is READ COMMITTED whatever the
 * session's `default_transaction_isolation` says (`readCommittedSql`): under REPEATABLE READ or
 * SERIALIZABLE both statements would share one snapshot, taken before the lock was granted, and
 * the claim would not see the claim it waited for (a serialization failure on every contended claim).
 */
export const serializedClaimSql = (lockName: string, statement: string, params: readonly InlineParam[]) =>
  readCommittedSql(`SELECT pg_advisory_xact_lock(hashtextextended(${pgLiteral(lockName)}, 0));
${inlineParams(statement, params)}`);

/**
 * How many of the oldest available pending rows a claim looks through for heads of keys before it
 * looks key by key. Bounds a claim's cost when the oldest rows belong to keys that are in flight.
 */
export const CLAIM_SCAN_WINDOW = 500;

/**
 * The window of a keyed claim of a claim function (migration 013): CLAIM_SCAN_WINDOW rows, or four
 * times its limit ($1) when that is more. Claims running side by side see each other's heads as
 * pending until they commit, and pass over their keys (tryKeyLockSql): the window must hold those
 * and the claim's own heads, or a claim with a big limit finds none of its own there and falls
 * back to looking key by key (measured: 117 ms a claim of 500 rows of 5,000 keys, against 16).
 */
const KEYED_SCAN_WINDOW = `GREATEST(${CLAIM_SCAN_WINDOW}, 4 * $1)`;

/**
 * The pending rows a claim's search (`near`, `far`) found, oldest first, locked (a row locked
 * elsewhere is skipped), reached by primary key. $1 = limit.
 */
const lockFoundSql = (table: string, alias: string) => `SELECT ${alias}.id FROM ${table} ${alias}
  WHERE ${alias}.id = ANY (ARRAY(SELECT id FROM near UNION ALL SELECT id FROM far)) AND ${alias}.state = 'pending'
  ORDER BY ${alias}.available_at, ${alias}.id
  LIMIT $1
  FOR UPDATE OF ${alias} SKIP LOCKED`;

/** The ids a search found (`near`, `far`): a keyed claim's first statement ends with them. */
const FOUND_IDS = `
SELECT id FROM near UNION ALL SELECT id FROM far`;

/**
 * The WHERE of a claim function's UPDATE: the rows `ids` (a query of the claim's CTEs), found by
 * primary key as an array. A claim function runs its statements with one plan for every call
 * (force_generic_plan, claimFunction), and a join of the UPDATE to its CTE would be planned for
 * the generic estimate of thousands of rows: a merge join that reads the primary key from the
 * table's first row to the claimed ones, every finished row on every claim (W2 drained at a sixth
 * of its rate). An array of ids is looked up row by row whatever the estimate.
 */
const claimedByIds = (alias: string, ids: string) => `WHERE ${alias}.id = ANY (ARRAY(${ids}))`;

/**
 * A keyed claim's rows (`ids`, its first statement's), locked, in a new snapshot: those still
 * pending and due, whose key has no row in flight (`noneInFlight`), oldest first, up to $1. The
 * in-flight probe is asked again because the first statement's snapshot was taken before its key
 * locks were granted: a claim of the key may have committed in between (another row of it, one
 * the first snapshot did not see committed yet). Whether an earlier row of the key committed in
 * between is not asked again: a claim that takes the lock alone has the same window (a producer
 * that commits an earlier row after its snapshot), and I4 orders rows by commit for that reason.
 */
const keyedCandidatesSql = (table: string, alias: string, ids: string, noneInFlight: string) => `SELECT ${alias}.id FROM ${table} ${alias}
  WHERE ${alias}.id = ANY (${ids}) AND ${alias}.state = 'pending' AND ${alias}.available_at <= ${NOW}
    AND ${noneInFlight}
  ORDER BY ${alias}.available_at, ${alias}.id
  LIMIT $1
  FOR UPDATE OF ${alias} SKIP LOCKED`;

/**
 * The columns a claim returns, as the client reads them. Ids as text, timestamps as milliseconds
 * since the epoch (float8): node-postgres hands text through and turns a float8 into a number
 * with `parseFloat`, where a bigint goes through a regular expression and a timestamptz through a
 * longer one and an array of its parts, on every row of a claim (the workers make the `Date`).
 */
function claimColumns(columns: readonly string[], alias?: string): string {
  const qualified = (column: string) => (alias ? `${alias}.${column}` : column);
  return columns
    .map((column) =>
      column === 'id'
        ? `${qualified('id')}::text AS id`
        : TIMESTAMP_COLUMNS.has(column)
          ? `(extract(epoch FROM ${qualified(column)}) * 1000)::float8 AS ${column}`
          : qualified(column),
    )
    .join(', ');
}

const TIMESTAMP_COLUMNS = new Set(['lease_expires_at', 'created_at', 'received_at']);

const OUTBOX_CLAIM_FIELDS = [
  'id',
  'message_id',
  'destination',
  '"key"',
  'payload',
  'headers',
  'attempts',
  'claim_token',
  'lease_expires_at',
  'created_at',
];

/** What an outbox claim returns: the columns the poller reads (see `claimColumns`). */
export const OUTBOX_CLAIM_COLUMNS = claimColumns(OUTBOX_CLAIM_FIELDS);

const OUTBOX_CLAIM_RETURNING = `RETURNING ${claimColumns(OUTBOX_CLAIM_FIELDS, 'o')}`;

/**
 * Whether no unfinished outbox row of key `key` comes before id `id`: true when the nearest entry
 * of the key index below (`key`, `id`) is not of that key (or there is none). One backward step
 * of the key index that stops at its first entry, whatever the key's backlog, and served by that
 * index alone. `e."key" = key AND e.id < id` would say the same, but let the planner read the
 * primary key down from `id` (or the table) and filter: statistics taken while the rows were
 * pending (a backlog ANALYZEd, then drained) make that look as cheap, and after a VACUUM of the
 * drained table it read every finished row below `id` on every probe (issue 29: 32 million
 * buffers for one claim). Here the order asked for, (key, id) descending without an equality
 * that would make the key's part of it redundant, is one that only the key index gives; any other
 * plan sorts every row it reads, and costs like it.
 */
export const noEarlierUnfinishedOfKey = (table: string, key: string, id: string) => `(SELECT e.id FROM ${table} e
        WHERE e.state IN ('pending', 'processing') AND e."key" >= ${key} AND (e."key", e.id) < (${key}, ${id})
        ORDER BY e."key" DESC, e.id DESC LIMIT 1) IS NULL`;

/**
 * Whether pending outbox row `alias` is the head of its key: no earlier unfinished row of the key
 * (noEarlierUnfinishedOfKey), and none of it in flight (the in-flight unique index). Each probe
 * stops at its first index entry, so a head costs the same however many rows its key has waiting.
 */
const outboxHeadOfKey = (table: string, alias: string) => `(${alias}."key" IS NULL OR (
      ${noEarlierUnfinishedOfKey(table, `${alias}."key"`, `${alias}.id`)}
      AND ${noneOfKeyInFlight(table, alias)}))`;

/** Whether no row of outbox row `alias`'s key is in flight: one probe of the in-flight unique index. */
const noneOfKeyInFlight = (table: string, alias: string) =>
  `NOT EXISTS (SELECT 1 FROM ${table} e WHERE e."key" = ${alias}."key" AND e.state = 'processing')`;

/** $2 = lease in ms, $3 = the claiming instance: what an outbox claim writes on each row it takes. */
const OUTBOX_SET_CLAIMED = `SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = ${NOW},
    lease_expires_at = ${msFromNow('$2')}, attempts = o.attempts + 1, claimed_by = $3::uuid`;

/**
 * `near`'s heads in a keyed claim: `heads` (the window's heads, oldest first, with the columns the
 * key lock hashes) behind `OFFSET 0`, which keeps PostgreSQL from merging it into this query, so
 * the key lock (`lock`, on the alias of `heads`) is tried only on a head, after its probes, one
 * head at a time in age order until the caller's LIMIT is reached; a row without a key (`key`
 * null) passes as it is. (In one WHERE the planner orders conditions by cost and would try the
 * cheap lock first, on rows that are not heads.)
 */
function lockedHeads(heads: string, key: string, lock: string): string {
  const alias = key.split('.')[0];
  return `SELECT ${alias}.id FROM (
  ${heads}
  OFFSET 0
  ) ${alias}
  WHERE ${key} IS NULL OR ${lock}`;
}

/**
 * `far`'s heads (`fromHeads`: `heads h` with its conditions and order, oldest first), up to $1:
 * without `keyLock`, as they are; with it, only those whose key lock was granted (`keyColumns`,
 * what the lock hashes), tried in that order until the limit less `near`'s rows were (`far` runs
 * only when `near` found fewer than $1, and no key is locked that the claim cannot take). The
 * sort is then a subquery of its own, which PostgreSQL keeps, and it never pushes a volatile
 * condition into one, so no head past the limit is tried.
 */
function firstHeads(keyLock: KeyLock | undefined, keyColumns: string, fromHeads: string): string {
  if (!keyLock)
    return `SELECT h.id FROM ${fromHeads}
   LIMIT $1`;
  return `SELECT x.id FROM (SELECT h.id, ${keyColumns} FROM ${fromHeads}) x
   WHERE ${keyLock('x')}
   LIMIT $1 - (SELECT count(*) FROM near)`;
}

/**
 * $1 = limit, $2 = lease in ms, $3 = the claiming instance (`claimed_by`, null for none); with
 * `paused` (issue 40), the destinations not to claim (`$4::text[]`). Takes available pending rows oldest first, only the head of each
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
export const outboxClaimSql = (
  table: string,
  returning = OUTBOX_CLAIM_RETURNING,
  paused?: string,
) => `${outboxSearchSql(table, paused)}, candidates AS MATERIALIZED (
  ${lockFoundSql(table, 'o')}
)
UPDATE ${table} o
${OUTBOX_SET_CLAIMED}
FROM candidates c
WHERE o.id = c.id
${returning}`;

/**
 * The search CTEs of an outbox claim (`near`, `heads`, `far`; see outboxClaimSql). $1 = limit.
 * Issue 40: with paused destinations (`paused`, a text[] expression), a row of one is never a
 * candidate; it stays pending and unfinished, so the head probes still see it and no later row
 * of its key is taken. Without, the search is the claim's as it always was.
 */
function outboxSearchSql(table: string, paused?: string, keyLock?: KeyLock): string {
  const notPaused = (alias: string) => (paused ? ` AND ${alias}.destination <> ALL (${paused})` : '');
  const heads = `SELECT s.id${keyLock ? ', s."key"' : ''} FROM (
    SELECT o.id, o."key"${paused ? ', o.destination' : ''} FROM ${table} o
    WHERE o.state = 'pending' AND o.available_at <= ${NOW}
    ORDER BY o.available_at, o.id
    LIMIT ${keyLock ? KEYED_SCAN_WINDOW : CLAIM_SCAN_WINDOW}
  ) s
  WHERE ${outboxHeadOfKey(table, 's')}${notPaused('s')}`;
  return `WITH RECURSIVE near AS (
  ${keyLock ? lockedHeads(heads, 's."key"', keyLock('s')) : heads}
  LIMIT $1
), heads AS (
  (SELECT o."key", o.id, o.state, o.available_at${paused ? ', o.destination' : ''} FROM ${table} o
   WHERE o.state IN ('pending', 'processing') AND o."key" IS NOT NULL AND (SELECT count(*) FROM near) < $1
   ORDER BY o."key", o.id
   LIMIT 1)
  UNION ALL
  SELECT next.* FROM heads h
  CROSS JOIN LATERAL (
    SELECT o."key", o.id, o.state, o.available_at${paused ? ', o.destination' : ''} FROM ${table} o
    WHERE o.state IN ('pending', 'processing') AND o."key" > h."key"
    ORDER BY o."key", o.id
    LIMIT 1
  ) next
), far AS (
  (${firstHeads(
    keyLock,
    'h."key"',
    `heads h
   WHERE h.state = 'pending' AND h.available_at <= ${NOW}${notPaused('h')}
     AND NOT EXISTS (SELECT 1 FROM ${table} e WHERE e."key" = h."key" AND e.state = 'processing')
   ORDER BY h.available_at, h.id`,
  )})
  UNION ALL
  (SELECT o.id FROM ${table} o
   WHERE o.state = 'pending' AND o."key" IS NULL AND o.available_at <= ${NOW}${notPaused('o')} AND (SELECT count(*) FROM near) < $1
   ORDER BY o.available_at, o.id
   LIMIT $1)
)`;
}

/**
 * $1 = limit. The first statement of a keyed claim of the outbox: the ids of the rows
 * outboxClaimSql's search finds, heads only when their key lock was granted (tryKeyLockSql), held
 * to the end of the claim's transaction. `lockName` is the claim lock's name as SQL text; without
 * it, the search of a claim that holds the claim lock alone, which takes no key locks.
 */
export const outboxKeyedSearchSql = (table: string, lockName?: string) =>
  `${outboxSearchSql(
    table,
    undefined,
    keyLockOf(lockName, (alias) => `hashtext(${alias}."key")`),
  )}${FOUND_IDS}`;

/**
 * $1 = limit, $2 = lease in ms, $3 = the claiming instance. The second statement of a keyed claim
 * of the outbox: of the rows `ids` (an SQL bigint[]: the first statement's), those still pending
 * and due whose key has no row in flight, claimed (see keyedCandidatesSql).
 */
export const outboxKeyedClaimSql = (table: string, ids: string, returning = OUTBOX_CLAIM_RETURNING) => `WITH candidates AS MATERIALIZED (
  ${keyedCandidatesSql(table, 'o', ids, `(o."key" IS NULL OR ${noneOfKeyInFlight(table, 'o')})`)}
)
UPDATE ${table} o
${OUTBOX_SET_CLAIMED}
${claimedByIds('o', 'SELECT id FROM candidates')}
${returning}`;

/**
 * Whether some outbox row with a key is unfinished (`pending` or `processing`): the first entry of
 * the key index, or none. While none is, a claim can only take rows without a key, whose order
 * nothing asks for: the claim function then claims them without the claim lock
 * (`outboxUnkeyedClaimSql`), and claims of several connections and replicas run side by side.
 *
 * The first entry in key order, not EXISTS: PostgreSQL drops an ORDER BY inside EXISTS, and under
 * statistics taken while the rows were pending (a backlog analyzed, then drained) it expected a
 * sequential scan to meet such a row at once and read every finished row first, on every claim
 * (query-plans.test.ts). Ordered by key, only the key index answers in one step.
 */
export const outboxKeyedUnfinishedSql = (table: string) =>
  `((SELECT e."key" FROM ${table} e WHERE e.state IN ('pending', 'processing') AND e."key" IS NOT NULL ORDER BY e."key" LIMIT 1) IS NOT NULL)`;

/**
 * $1 = limit, $2 = lease in ms, $3 = the claiming instance. The claim of available pending rows
 * without a key, oldest first, run without the claim lock (issue 36): it never takes a keyed row,
 * so no order is at stake, and `FOR UPDATE SKIP LOCKED` on the scan of the unkeyed claim index
 * keeps two concurrent claims off the same row (each skips what the other locked and reads on).
 */
export const outboxUnkeyedClaimSql = (table: string, returning = OUTBOX_CLAIM_RETURNING) => `WITH candidates AS MATERIALIZED (
  SELECT o.id FROM ${table} o
  WHERE o.state = 'pending' AND o."key" IS NULL AND o.available_at <= ${NOW}
  ORDER BY o.available_at, o.id
  LIMIT $1
  FOR UPDATE OF o SKIP LOCKED
)
UPDATE ${table} o
${OUTBOX_SET_CLAIMED}
${claimedByIds('o', 'SELECT id FROM candidates')}
${returning}`;

/** $1 = max attempts: expired claims go back to pending, or to dead on their last attempt. */
const RECLAIM_SET = `SET state = CASE WHEN attempts >= $1 THEN 'dead' ELSE 'pending' END,
    claim_token = NULL, lease_expires_at = NULL,
    last_error = 'lease expired on attempt ' || attempts || ' of ' || $1::integer
      || ': the worker crashed, was stopped or outlived its lease',
    fingerprint = CASE WHEN attempts >= $1 THEN '${RECLAIM_FINGERPRINT}' ELSE fingerprint END`;

/** $1 = max attempts. */
export const outboxReclaimSql = (table: string) => `UPDATE ${table}
${RECLAIM_SET}
WHERE state = 'processing' AND lease_expires_at <= ${NOW}
RETURNING state, destination AS name`;

/**
 * A reclaim statement (`update`, ending in its WHERE) that also records each reclaimed row's
 * expired attempt in `history` (the attempts migration: class `LeaseExpired`, its duration from the claim
 * to the reclaim, `retry` or `dead`) and trims each row's history to the last `keep` (a parameter
 * reference), in the same statement (see lease.sql.ts recordAttempt). Returns what the reclaim
 * statement returns.
 */
const reclaimRecorded = (update: string, history: string, name: string, keep: string) => `WITH reclaimed AS (
${update}
RETURNING id, attempts, claimed_at, claimed_by, state, last_error, ${name} AS name
),
recorded AS (
  INSERT INTO ${history} (row_id, attempt, failed_at, duration_ms, instance_id, error_class, error, outcome)
  SELECT r.id, r.attempts, ${NOW}, (extract(epoch FROM ${NOW} - r.claimed_at) * 1000)::bigint, r.claimed_by, '${LEASE_EXPIRED_CLASS}', r.last_error,
         CASE WHEN r.state = 'dead' THEN 'dead' ELSE 'retry' END
  FROM reclaimed r
),
trimmed AS (
  DELETE FROM ${history} a USING reclaimed r
  WHERE a.row_id = r.id
    AND a.id NOT IN (SELECT k.id FROM ${history} k WHERE k.row_id = r.id ORDER BY k.id DESC LIMIT ${keep}::integer - 1)
)
SELECT state, name FROM reclaimed`;

/** $1 = max attempts, $2 = attempts kept (at least 1). `outboxReclaimSql` with the attempt history. */
export const outboxReclaimRecordedSql = (table: string, history: string) =>
  reclaimRecorded(
    `UPDATE ${table}
${RECLAIM_SET}
WHERE state = 'processing' AND lease_expires_at <= ${NOW}`,
    history,
    'destination',
    '$2',
  );

const INBOX_CLAIM_FIELDS = [
  'id',
  'source',
  'idempotency_key',
  'aggregate_id',
  'payload',
  'headers',
  'attempts',
  'claim_token',
  'lease_expires_at',
  'received_at',
];

/** What an inbox claim returns: the columns the relay and pull workers read (see `claimColumns`). */
export const INBOX_CLAIM_COLUMNS = claimColumns(INBOX_CLAIM_FIELDS);

const INBOX_RETURNING = `RETURNING ${claimColumns(INBOX_CLAIM_FIELDS, 'i')}`;

/**
 * Whether no unfinished inbox row of (`source`, `aggregate`) comes before id `id`: the nearest
 * entry of the aggregate index below (`source`, `aggregate`, `id`) is not of that aggregate (or
 * there is none). One backward step of the aggregate index, served by it alone: see
 * noEarlierUnfinishedOfKey (the source may be an equality: the index's order within one source is
 * (aggregate_id, id), which no other index gives).
 */
export const noEarlierUnfinishedOfAggregate = (
  table: string,
  source: string,
  aggregate: string,
  id: string,
) => `(SELECT e.id FROM ${table} e
        WHERE e.source = ${source} AND e.state IN ('pending', 'processing') AND e.aggregate_id >= ${aggregate}
          AND (e.aggregate_id, e.id) < (${aggregate}, ${id})
        ORDER BY e.aggregate_id DESC, e.id DESC LIMIT 1) IS NULL`;

/**
 * Whether inbox row `alias` is the head of its aggregate: no earlier unfinished row of the same
 * (source, aggregate) (noEarlierUnfinishedOfAggregate), and no other row of it in flight (the
 * in-flight unique index). Each probe stops at its first index entry, so a head costs the same
 * however many rows its aggregate has waiting.
 */
const inboxHeadOfAggregate = (table: string, alias: string) => `(${alias}.aggregate_id IS NULL OR (
      ${noEarlierUnfinishedOfAggregate(table, `${alias}.source`, `${alias}.aggregate_id`, `${alias}.id`)}
      AND ${noneOfAggregateInFlight(table, alias)}))`;

/** Whether no other row of inbox row `alias`'s (source, aggregate) is in flight: one probe of the in-flight unique index. */
const noneOfAggregateInFlight = (table: string, alias: string) =>
  `NOT EXISTS (SELECT 1 FROM ${table} e WHERE e.source = ${alias}.source AND e.aggregate_id = ${alias}.aggregate_id
        AND e.state = 'processing' AND e.id <> ${alias}.id)`;

/**
 * The search CTEs of an inbox claim of pending rows (`near`, `heads`, `far`: the outbox claim's, per
 * source of `sources`, a text[] expression; see outboxClaimSql). $1 = limit.
 */
function inboxPendingSearch(table: string, sources: string, keyLock?: KeyLock): string {
  const heads = `SELECT w.id${keyLock ? ', w.source, w.aggregate_id' : ''} FROM (
      SELECT i.id, i.source, i.aggregate_id FROM ${table} i
      WHERE i.source = s.source AND i.state = 'pending' AND i.available_at <= ${NOW}
      ORDER BY i.available_at, i.id
      LIMIT ${keyLock ? KEYED_SCAN_WINDOW : CLAIM_SCAN_WINDOW}
    ) w
    WHERE ${inboxHeadOfAggregate(table, 'w')}`;
  return `near AS (
  SELECT head.id FROM unnest(${sources}) AS s(source)
  CROSS JOIN LATERAL (
    ${keyLock ? lockedHeads(heads, 'w.aggregate_id', keyLock('w')) : heads}
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
  (${firstHeads(
    keyLock,
    'h.source, h.aggregate_id',
    `heads h
   WHERE h.state = 'pending' AND h.available_at <= ${NOW}
     AND NOT EXISTS (SELECT 1 FROM ${table} e WHERE e.source = h.source AND e.aggregate_id = h.aggregate_id AND e.state = 'processing')
   ORDER BY h.available_at, h.id`,
  )})
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
}

/** $4 = the claiming instance (`claimed_by`, null for none), the last parameter of both inbox claims. */
const INBOX_SET_CLAIMED = `SET state = 'processing', claim_token = gen_random_uuid(), claimed_at = ${NOW},
    lease_expires_at = ${msFromNow('$2')}, attempts = i.attempts + 1, claimed_by = $4::uuid`;

/**
 * $1 = limit, $2 = lease in ms, $3 = sources, $4 = the claiming instance. The relay's claim: available pending rows of its
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

/** keyedCandidatesSql of the inbox (alias `i`): the rows whose aggregate has no other row in flight. */
const inboxKeyedCandidatesSql = (table: string, ids: string) =>
  keyedCandidatesSql(table, 'i', ids, `(i.aggregate_id IS NULL OR ${noneOfAggregateInFlight(table, 'i')})`);

/**
 * $1 = limit, $3 = sources. The first statement of a keyed claim of the relay: the ids of the rows
 * inboxRelayClaimSql's search finds, heads only when the key lock of their source and aggregate
 * was granted. `lockName`: the claim lock's name as SQL text (without: no key locks, as
 * outboxKeyedSearchSql).
 */
export const inboxRelayKeyedSearchSql = (table: string, lockName?: string) =>
  `WITH RECURSIVE ${inboxPendingSearch(
    table,
    '$3::text[]',
    keyLockOf(lockName, (alias) => `hashtext(${alias}.source) # hashtext(${alias}.aggregate_id)`),
  )}${FOUND_IDS}`;

/**
 * $1 = limit, $2 = lease in ms, $4 = the claiming instance. The second statement of a keyed claim
 * of the relay: of the rows `ids` (the first statement's), those still pending and due whose
 * aggregate has no row in flight, claimed (see keyedCandidatesSql).
 */
export const inboxRelayKeyedClaimSql = (table: string, ids: string, returning = INBOX_RETURNING) => `WITH candidates AS MATERIALIZED (
  ${inboxKeyedCandidatesSql(table, ids)}
)
UPDATE ${table} i
${INBOX_SET_CLAIMED}
${claimedByIds('i', 'SELECT id FROM candidates')}
${returning}`;

/**
 * Whether some inbox row of `sources` (a text[] expression) with an aggregate is unfinished: the
 * first entry of the aggregate index for each source, or none. While none is, the relay's and the
 * pull workers' claim functions claim without their claim lock (see outboxKeyedUnfinishedSql,
 * and why the first entry of each source in aggregate order rather than EXISTS).
 */
export const inboxKeyedUnfinishedSql = (table: string, sources: string) =>
  `EXISTS (SELECT 1 FROM unnest(${sources}) AS s(source)
    WHERE (SELECT e.aggregate_id FROM ${table} e
      WHERE e.source = s.source AND e.state IN ('pending', 'processing') AND e.aggregate_id IS NOT NULL
      ORDER BY e.aggregate_id LIMIT 1) IS NOT NULL)`;

/**
 * The available pending rows without an aggregate of `source` (a column or expression), oldest
 * first, locked on the scan of the unkeyed claim index (a row another claim locked is skipped and
 * the scan reads on). $1 = limit, unless `limit` says otherwise.
 */
const unkeyedPendingOfSource = (table: string, source: string, limit = '$1') => `SELECT i.id, i.available_at FROM ${table} i
    WHERE i.source = ${source} AND i.state = 'pending' AND i.aggregate_id IS NULL AND i.available_at <= ${NOW}
    ORDER BY i.available_at, i.id
    LIMIT ${limit}
    FOR UPDATE OF i SKIP LOCKED`;

/**
 * $1 = limit, $2 = lease in ms, $3 = sources, $4 = the claiming instance. The relay's claim of rows
 * without an aggregate, oldest first across its sources, run without the claim lock (issue 36; see
 * outboxUnkeyedClaimSql). Each source's scan locks at most the limit; the rows a source locked
 * past the merged limit stay pending and are unlocked when the claim commits.
 */
export const inboxRelayUnkeyedClaimSql = (table: string, returning = INBOX_RETURNING) => `WITH candidates AS MATERIALIZED (
  SELECT u.id FROM unnest($3::text[]) AS s(source)
  CROSS JOIN LATERAL (
    ${unkeyedPendingOfSource(table, 's.source')}
  ) u
  ORDER BY u.available_at, u.id
  LIMIT $1
)
UPDATE ${table} i
${INBOX_SET_CLAIMED}
${claimedByIds('i', 'SELECT id FROM candidates')}
${returning}`;

/** $1 = max attempts, $2 = sources. The relay's reclaim step, limited to the sources it consumes. */
export const inboxReclaimSql = (table: string) => `UPDATE ${table}
${RECLAIM_SET}
WHERE state = 'processing' AND source = ANY($2::text[]) AND lease_expires_at <= ${NOW}
RETURNING state, source AS name`;

/** $1 = max attempts, $2 = sources, $3 = attempts kept (at least 1). `inboxReclaimSql` with the attempt history. */
export const inboxReclaimRecordedSql = (table: string, history: string) =>
  reclaimRecorded(
    `UPDATE ${table}
${RECLAIM_SET}
WHERE state = 'processing' AND source = ANY($2::text[]) AND lease_expires_at <= ${NOW}`,
    history,
    'source',
    '$3',
  );

/** $1 = limit, $3 = source: a pull claim's rows whose lease expired, oldest lease first, locked. */
const pullExpiredSql = (table: string) => `expired AS MATERIALIZED (
  SELECT i.id FROM ${table} i
  WHERE i.source = $3 AND i.state = 'processing' AND i.lease_expires_at <= ${NOW}
  ORDER BY i.lease_expires_at
  LIMIT $1
  FOR UPDATE OF i SKIP LOCKED
)`;

/**
 * $1 = limit, $2 = lease in ms, $3 = source, $4 = the claiming instance. A pull claim takes, in one statement, rows whose
 * lease expired (a crashed client's) and available pending rows, only the head of each aggregate.
 * Expired rows first, through the lease index, whether or not they are still the first unfinished
 * row of their aggregate: an earlier row that committed after the claim waits behind its in-flight
 * row, and only this row's claim can end that (I8; the relay's reclaim step does the same by
 * returning it to pending). An expired row is the only row of its aggregate in flight (I4), so
 * taking it puts no second one in flight. Then the pending rows' search. Each kind is locked on
 * its own index, in its own order: an OR would make the planner read and sort the whole backlog of
 * the source on every claim.
 */
export const inboxPullClaimSql = (
  table: string,
  returning = INBOX_RETURNING,
) => `WITH RECURSIVE ${pullExpiredSql(table)}, ${inboxPendingSearch(table, 'ARRAY[$3::text]')}, pending AS MATERIALIZED (
  ${lockFoundSql(table, 'i')}
), candidates AS MATERIALIZED (
  SELECT id FROM (SELECT id, 0 AS pass FROM expired UNION ALL SELECT id, 1 FROM pending) both_kinds ORDER BY pass LIMIT $1
)
UPDATE ${table} i
${INBOX_SET_CLAIMED}
FROM candidates c
WHERE i.id = c.id
${returning}`;

/**
 * $1 = limit, $3 = source. The first statement of a keyed claim of a pull source: the ids of the
 * pending rows inboxPullClaimSql's search finds, heads only when the key lock of their aggregate
 * was granted. `lockName`: the source's claim lock's name as SQL text (without: no key locks, as
 * outboxKeyedSearchSql).
 */
export const inboxPullKeyedSearchSql = (table: string, lockName?: string) =>
  `WITH RECURSIVE ${inboxPendingSearch(
    table,
    'ARRAY[$3::text]',
    keyLockOf(lockName, (alias) => `hashtext(${alias}.aggregate_id)`),
  )}${FOUND_IDS}`;

/**
 * $1 = limit, $2 = lease in ms, $3 = source, $4 = the claiming instance. The second statement of
 * a keyed claim of a pull source: rows whose lease expired first (as inboxPullClaimSql takes them:
 * each is its aggregate's only row in flight, so taking it needs no key lock), then of the rows
 * `ids` (the first statement's) those still pending and due whose aggregate has no other row in
 * flight (see keyedCandidatesSql).
 */
export const inboxPullKeyedClaimSql = (
  table: string,
  ids: string,
  returning = INBOX_RETURNING,
) => `WITH ${pullExpiredSql(table)}, pending AS MATERIALIZED (
  ${inboxKeyedCandidatesSql(table, ids)}
), candidates AS MATERIALIZED (
  SELECT id FROM (SELECT id, 0 AS pass FROM expired UNION ALL SELECT id, 1 FROM pending) both_kinds ORDER BY pass LIMIT $1
)
UPDATE ${table} i
${INBOX_SET_CLAIMED}
${claimedByIds('i', 'SELECT id FROM candidates')}
${returning}`;

/**
 * $1 = limit, $2 = lease in ms, $3 = source, $4 = the claiming instance. The pull claim of rows
 * without an aggregate, run without the claim lock (issue 36; see outboxUnkeyedClaimSql): rows
 * whose lease expired first, then available pending rows, each locked on its own index scan.
 */
export const inboxPullUnkeyedClaimSql = (table: string, returning = INBOX_RETURNING) => `WITH expired AS MATERIALIZED (
  SELECT i.id FROM ${table} i
  WHERE i.source = $3 AND i.state = 'processing' AND i.aggregate_id IS NULL AND i.lease_expires_at <= ${NOW}
  ORDER BY i.lease_expires_at
  LIMIT $1
  FOR UPDATE OF i SKIP LOCKED
), pending AS MATERIALIZED (
  ${unkeyedPendingOfSource(table, '$3', '$1 - (SELECT count(*) FROM expired)')}
)
UPDATE ${table} i
${INBOX_SET_CLAIMED}
${claimedByIds('i', 'SELECT id FROM expired UNION ALL SELECT id FROM pending')}
${returning}`;
