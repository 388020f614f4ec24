import { noEarlierUnfinishedOfAggregate, noEarlierUnfinishedOfKey } from './claims.sql';
import { NOW } from './time';

// Followers (batch pull handlers, the inbox relay, the outbox poller): the pending rows of an
// aggregate or key right after its claimed head, taken under the head's claim (see inboxFollowersSql). Parameters are positional (`$1`...).

/**
 * $1 = the heads as a JSON array of `{ id, source, aggregateId }`, $2 = most rows per head.
 * Per head that is still the first unfinished row of its aggregate, the next pending rows of the
 * aggregate in id order, each with `due` (available now); the worker keeps them up to the first
 * that is not due. A head that is not first (an earlier row committed after the head was claimed:
 * rows of one aggregate can commit out of id order) gets none: a row received after that earlier
 * row committed must not be handled before it (I4). In one statement, so one snapshot sees the
 * earlier row whenever it sees a later one that was received after it committed.
 * Nothing is locked or written: while the head is `processing` no claim takes a row of its
 * aggregate (none is the head), and the rows are completed with the head, in its transaction, or
 * stay pending. Two probes of the aggregate index per head (the earlier-row probe served by that
 * index alone, whatever the statistics say: see noEarlierUnfinishedOfAggregate).
 */
export const inboxFollowersSql = (table: string) => `SELECT f.id, f.source, f.idempotency_key, f.aggregate_id, f.payload,
       f.headers, f.attempts, f.received_at, f.due, h.id AS head_id
FROM jsonb_to_recordset($1::jsonb) AS h(id bigint, source text, "aggregateId" text)
CROSS JOIN LATERAL (
  SELECT i.id, i.source, i.idempotency_key, i.aggregate_id, i.payload, i.headers, i.attempts, i.received_at,
         i.available_at <= ${NOW} AS due
  FROM ${table} i
  WHERE i.source = h.source AND i.aggregate_id = h."aggregateId" AND i.state = 'pending' AND i.id > h.id
  ORDER BY i.id
  LIMIT $2
) f
WHERE ${noEarlierUnfinishedOfAggregate(table, 'h.source', 'h."aggregateId"', 'h.id')}`;

/**
 * $1 = follower ids, $2 = their heads' ids, $3 = their heads' claim tokens (same order). Marks
 * followers processed, counting their attempt, in the transaction that completed their heads;
 * fenced by the head: a follower changes only while still pending, and only if its head row, of
 * the same aggregate, was completed (`processed`) under the token given, which only the head's
 * fenced completion in this transaction can have done. Returns the ids it changed; an id missing
 * from the result was no longer pending or not under that head: the caller rolls the batch back.
 *
 * Both rows are reached by primary key only (SQL Server pins the same with index hints). The
 * follower by `t.id = ANY($1)` beside the join: with 1,000 followers (10 heads of 100 at
 * batchSize 100) the planner joined the array to the whole table by hash, a scan of every row per
 * statement, 77 ms at 200,000 rows, which halved the relay's rate (issue 36). The
 * state tests sit in the head's scalar subquery, not among the join's conditions: there, a test
 * such as `h.state = 'processed'` lets the planner read the head through the partial index of
 * that state, and statistics taken while the rows were pending put that index at one row, so
 * each statement read every processed row (80,000 buffers a statement half way through a
 * 200,000-message drain; issue 29). A scalar subquery is never turned into a join, and its one
 * condition on `h` is its primary key.
 */
export const inboxCompleteFollowersSql = (table: string) => `UPDATE ${table} t
SET state = 'processed', processed_at = ${NOW}, claimed_at = ${NOW}, attempts = t.attempts + 1
FROM unnest($1::bigint[], $2::bigint[], $3::uuid[]) AS c(id, head_id, head_token)
WHERE t.id = c.id AND t.id = ANY($1::bigint[])
  AND (SELECT t.state = 'pending' AND h.claim_token = c.head_token AND h.state = 'processed'
         AND h.source = t.source AND h.aggregate_id = t.aggregate_id AND h.id < t.id
       FROM ${table} h WHERE h.id = c.head_id)
RETURNING t.id`;

/**
 * $1 = the outbox heads as a JSON array of `{ id, key }`, $2 = most rows per head. The outbox's
 * followers read (issue 36): per head that is still the first unfinished row of its key, the next
 * pending rows of the key in id order, each with `due`; none for a head below which an earlier
 * row of the key is unfinished (it committed after the head's claim), for the reason and in the
 * one snapshot inboxFollowersSql gives. Nothing is locked or written: while the head is
 * `processing` no claim takes a row of its key, and the followers are completed with the head
 * (outboxCompleteWithFollowersSql) or stay pending. Both probes go through the key index.
 */
export const outboxFollowersSql = (table: string) => `SELECT ${outboxFollowerColumns('f')}, f.due, h.id::text AS head_id
FROM jsonb_to_recordset($1::jsonb) AS h(id bigint, "key" text)
CROSS JOIN LATERAL (
  SELECT o.id, o.message_id, o.destination, o."key", o.payload, o.headers, o.attempts, o.created_at,
         o.available_at <= ${NOW} AS due
  FROM ${table} o
  WHERE o."key" = h."key" AND o.state = 'pending' AND o.id > h.id
  ORDER BY o.id
  LIMIT $2
) f
WHERE ${noEarlierUnfinishedOfKey(table, 'h."key"', 'h.id')}`;

/** The columns of a follower as the outbox claims return theirs (ids as text, times as epoch ms). */
const outboxFollowerColumns = (alias: string) =>
  `${alias}.id::text AS id, ${alias}.message_id, ${alias}.destination, ${alias}."key", ${alias}.payload, ${alias}.headers, ` +
  `${alias}.attempts, (extract(epoch FROM ${alias}.created_at) * 1000)::float8 AS created_at`;

/**
 * The fenced completion of a head with followers, as one statement: CTE `head` completes the
 * claimed head ($1 = id, $2 = token) under its fence; `followers` then finishes the rows of $3
 * (ids) that are still pending, of the head's key and after it: only when `head` did. The
 * followers are fenced by the head: while it is `processing` under $2 no claim takes a row of its
 * key, so a follower can only have changed through an operator (then it is left as it is).
 */
const HEADS_AND_FOLLOWERS = "SELECT 'head' AS kind, id::text AS id FROM heads UNION ALL SELECT 'follower', id::text FROM followers";

/**
 * The fenced completion of outbox heads with followers, as one statement: CTE `heads` completes
 * the claimed heads ($1 = ids, $2 = their claim tokens) under their fence; `followers` then
 * finishes the rows of $3 (ids; $4 = each one's head id) that are still pending, of their head's
 * key and after it: only behind a head that `heads` completed. The followers are fenced by their
 * head: while it is `processing` under its token no claim takes a row of its key, so a follower
 * can only have changed through an operator (then it is left as it is). Rows by primary key.
 */
const headsWithFollowers = (finishHeads: string, finishFollowers: string) => `WITH heads AS (
  ${finishHeads}
  WHERE t.id = ANY($1::bigint[]) AND t.claim_token = ANY($2::uuid[]) AND t.state = 'processing' AND t.lease_expires_at > ${NOW}
  RETURNING t.id, t."key", t.claimed_by
),
followers AS (
  ${finishFollowers}
  WHERE t.id = f.id AND t.id = ANY($3::bigint[]) AND t.state = 'pending' AND t."key" = h."key" AND t.id > h.id
  RETURNING t.id
)`;

/**
 * $1 = head ids, $2 = their claim tokens, $3 = follower ids, $4 = each follower's head id. Marks
 * the heads `sent` (fenced) and their followers `sent` with them, each follower's attempt counted
 * and `claimed_by` its head's. Returns a row (`kind`, `id`) for each head whose fence held
 * (`head`) and for each follower it finished (`follower`).
 */
export const outboxCompleteWithFollowersSql = (table: string) => `${headsWithFollowers(
  `UPDATE ${table} t SET state = 'sent', sent_at = ${NOW}, lease_expires_at = NULL`,
  `UPDATE ${table} t SET state = 'sent', sent_at = ${NOW}, claimed_at = ${NOW}, attempts = t.attempts + 1, claimed_by = h.claimed_by
  FROM unnest($3::bigint[], $4::bigint[]) AS f(id, head_id) JOIN heads h ON h.id = f.head_id`,
)}
${HEADS_AND_FOLLOWERS}`;

/**
 * `outboxCompleteWithFollowersSql` for `outbox.sentRows: 'delete'`: the heads and their followers
 * are deleted, with their attempt history (`history`), under the same fences.
 */
export const outboxDeleteWithFollowersSql = (table: string, history: string) => `${headsWithFollowers(
  `DELETE FROM ${table} t`,
  `DELETE FROM ${table} t USING unnest($3::bigint[], $4::bigint[]) AS f(id, head_id) JOIN heads h ON h.id = f.head_id`,
)},
history AS (
  DELETE FROM ${history} a WHERE a.row_id IN (SELECT id FROM heads UNION ALL SELECT id FROM followers)
)
${HEADS_AND_FOLLOWERS}`;
