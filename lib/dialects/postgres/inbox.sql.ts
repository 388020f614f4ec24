// PostgreSQL statements as pure functions of the (already quoted) table name. Parameters are positional (`$1`...).

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
