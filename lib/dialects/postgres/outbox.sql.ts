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
