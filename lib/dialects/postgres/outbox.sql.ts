import { NOW } from './time';

// PostgreSQL statements as pure functions of the (already quoted) table name, so tests can EXPLAIN
// exactly what runs. Parameters are positional (`$1`...), documented per statement.

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
 * `outboxInsertSql` that stores nothing for a message id the outbox holds (`onDuplicate:
 * 'ignore'`): ON CONFLICT DO NOTHING waits for a concurrent insert of the same id and then skips it
 * (no unique violation, so the caller's transaction goes on). Only the inserted rows come back;
 * `outboxFindSql` then reads the others. Same parameters.
 */
export const outboxInsertIfAbsentSql = (table: string) => `WITH inserted AS (
  INSERT INTO ${table} (message_id, destination, "key", payload, headers, available_at)
  SELECT m.message_id, m.destination, m.key, m.payload, m.headers, coalesce(m.available_at, now())
  FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[], $6::timestamptz[])
    AS m(message_id, destination, key, payload, headers, available_at)
  ON CONFLICT (message_id) DO NOTHING
  RETURNING id, message_id
)
SELECT inserted.id, inserted.message_id FROM inserted, (SELECT pg_notify($7, '')) AS wake`;

/** $1 = message ids. Runs after a skipping insert, in a new snapshot (READ COMMITTED) that sees the rows it skipped. */
export const outboxFindSql = (table: string) => `SELECT id, message_id FROM ${table} WHERE message_id = ANY($1::uuid[])`;

/** The tokens a bucket has now: what it kept, refilled for the time since, up to its size. */
const AVAILABLE = `least($3::double precision, b.tokens + greatest(0, extract(epoch FROM ${NOW} - b.refilled_at)::double precision) * $2::double precision)`;

/**
 * Takes up to $4 tokens from the rate limit bucket of destination $1 (issue 41), refilled at $2
 * tokens per second up to $3, by the database clock (the statement's `clock_timestamp()`, read
 * once the row is locked: every replica's takes are ordered by the row lock). Creates the bucket,
 * full, on its first take. Returns `granted` (whole tokens handed out, at most $4) and the
 * `tokens` left (below 1 when not all were granted: the caller computes when the next comes).
 */
export const rateLimitTakeSql = (table: string) => `INSERT INTO ${table} AS b (destination, tokens, granted, refilled_at)
VALUES ($1, $3::double precision - least($4::int, floor($3::double precision)), least($4::int, floor($3::double precision))::int, ${NOW})
ON CONFLICT (destination) DO UPDATE SET
  granted = least($4::int, floor(${AVAILABLE}))::int,
  tokens = ${AVAILABLE} - least($4::int, floor(${AVAILABLE})),
  refilled_at = ${NOW}
RETURNING granted, tokens`;
