import { NOW } from './time';

// Followers (batch pull handlers, the inbox relay): the pending rows of an aggregate right after its
// claimed head, taken under the head's claim (see inboxFollowersSql). Parameters are positional (`$1`...).

/**
 * $1 = the heads as a JSON array of `{ id, source, aggregateId }`, $2 = most rows per head.
 * Per head, the next pending rows of its aggregate in id order, each with `due` (available now);
 * the worker keeps them up to the first that is not due. Nothing is locked or written: while the
 * head is `processing` no claim takes a row of its aggregate (none is the head), and the rows are
 * completed with the head, in its transaction, or stay pending. One probe of the aggregate index
 * per head.
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
) f`;

/**
 * $1 = ids. Marks followers processed, counting their attempt, in the transaction that completed
 * their heads (fenced there); returns the ids it changed. An id missing from the result was no
 * longer pending: the caller rolls the batch back.
 */
export const inboxCompleteFollowersSql = (table: string) => `UPDATE ${table}
SET state = 'processed', processed_at = ${NOW}, claimed_at = ${NOW}, attempts = attempts + 1
WHERE id = ANY ($1::bigint[]) AND state = 'pending'
RETURNING id`;
